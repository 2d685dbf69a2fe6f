//! Fuzzes the GGUF listing (`rknpu gguf`): for arbitrary bytes that parse, the parsed
//! index stays within its documented bound of the input's size, and the listing is
//! written without panicking, holds no control character but its line ends, has one
//! line a tensor between its header and count lines, and is at most 5 bytes a byte of
//! the input plus its fixed lines (docs/gguf.md, "Bounds").
#![no_main]

use libfuzzer_sys::fuzz_target;
use rknpu_driver::gguf::{Gguf, write_listing};

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else {
        return;
    };
    assert!(
        g.index_bytes() as f64 <= 1.6 * data.len() as f64,
        "an index of {} bytes for {} bytes",
        g.index_bytes(),
        data.len()
    );
    let mut out = Vec::new();
    write_listing(&g, &mut out).expect("a Vec takes any listing");
    let text = std::str::from_utf8(&out).expect("the listing is UTF-8");
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "a control character in the listing"
    );
    assert_eq!(text.lines().count(), g.tensor_count() + 2);
    assert!(
        out.len() <= 5 * data.len() + 200,
        "{} bytes listed for {}",
        out.len(),
        data.len()
    );
});
