//! `rknpu gguf` on hostile files (docs/gguf.md, "Bounds"): a name of 65,536 bytes and a
//! listing linear in the file.

use rknpu_driver::gguf::write::Writer;

mod common;
use common::{Temp, run};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `w` to a temporary file named `name`.
fn file(name: &str, w: &Writer) -> Temp {
    let t = Temp::new(name);
    std::fs::write(&t.0, w.to_bytes()).unwrap();
    t
}

#[test]
fn a_tensor_name_of_65536_bytes_lists() {
    let mut w = Writer::new();
    let long = "y".repeat(65_536);
    w.tensor_f32(&long, &[32, 2], &[0.25; 64]).unwrap();
    w.tensor_f32("bell\u{7}", &[32], &[0.25; 32]).unwrap();
    let f = file("long-name.gguf", &w);
    let o = run(&["gguf", f.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[1], format!("{long}  F32      [32, 2]"));
    assert_eq!(
        lines[2],
        format!("bell\\u{{7}}{}  F32      [32]", " ".repeat(31))
    );
    assert_eq!(lines[3], "2 tensors");
}

#[test]
fn the_listing_is_linear_in_the_file() {
    // A 100,000-byte name among 1,000 short ones: padded to the longest name, the
    // listing would take 100 MB.
    let mut w = Writer::new();
    w.tensor_f32(&"z".repeat(100_000), &[1], &[1.0]).unwrap();
    for i in 0..1_000 {
        w.tensor_f32(&format!("t{i}"), &[1], &[1.0]).unwrap();
    }
    let f = file("linear.gguf", &w);
    let len = std::fs::metadata(&f.0).unwrap().len() as usize;
    let o = run(&["gguf", f.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        o.stdout.len() <= 5 * len + 200,
        "{} bytes listed for a {len}-byte file",
        o.stdout.len()
    );
    assert_eq!(text(&o.stdout).lines().count(), 1_003);
}
