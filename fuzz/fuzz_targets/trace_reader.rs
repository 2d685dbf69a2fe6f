//! Fuzzes the trace reader: arbitrary bytes either fail to parse with a typed error or
//! give a trace that survives a write/read round trip (unknown chunks, which are not
//! written back, excepted), that `trace::dump` prints and `replay::replay_check` checks
//! without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rknpu_driver::replay;
use rknpu_driver::trace::{self, Chunk, Trace};

fuzz_target!(|data: &[u8]| {
    let Ok(t) = Trace::from_bytes(data) else {
        return;
    };

    let bytes = t.to_bytes();
    let again = match Trace::from_bytes(&bytes) {
        Ok(again) => again,
        Err(e) => panic!("a trace the reader accepted does not read back after writing: {e}"),
    };
    let expected = Trace {
        header: t.header.clone(),
        chunks: t
            .chunks
            .iter()
            .filter(|c| !matches!(c, Chunk::Unknown { .. }))
            .cloned()
            .collect(),
    };
    assert_eq!(again, expected, "write/read round trip changed the trace");

    let _ = trace::dump(&t);
    // Check mode walks every chunk as a replay does (placing, writing, relocating,
    // decoding) without running anything; a replay maps at most MAX_REPLAY_BYTES.
    let _ = replay::replay_check(&t);
});
