//! Fuzzes the GGUF reader: arbitrary bytes either fail to parse with a typed error or
//! give a file whose every tensor's data lies in the file and either dequantises to
//! exactly its element count or is refused with a typed error, without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rknpu_driver::gguf::Gguf;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else {
        return;
    };
    // Tensors may overlap, so the data they name can exceed the file many times over:
    // bound the bytes dequantised per input to keep each run short.
    let mut budget = (data.len() as u64).saturating_mul(16);
    for t in g.tensors() {
        let bytes = g
            .tensor_data(&t.name)
            .unwrap_or_else(|e| panic!("a tensor of a parsed file has no data: {e}"));
        assert_eq!(bytes.len() as u64, t.bytes(), "{}: data length", t.name);
        if t.bytes() > budget {
            continue;
        }
        budget -= t.bytes();
        if let Ok(values) = g.dequantize(&t.name) {
            assert_eq!(values.len() as u64, t.elements(), "{}: values", t.name);
        }
    }
});
