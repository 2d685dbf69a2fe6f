//! Fuzzes the trace reader: arbitrary bytes either fail to parse with a typed error or
//! give a trace that survives a write/read round trip (unknown chunks, which are not
//! written back, excepted), that `trace::dump` prints and `replay::replay_check` checks
//! without panicking, and that a check replay of its chunks as `trace::ChunkReader`
//! reads them (`replay::replay_stream`) reports the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rknpu_driver::replay::{self, Mode, ReplayOptions};
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
    let checked = replay::replay_check(&t);

    let mut src = data;
    let mut chunks = trace::ChunkReader::new(&mut src, data.len() as u64)
        .expect("the chunk reader refuses a header the whole reader accepted");
    let opts = ReplayOptions::for_header(chunks.header());
    let streamed = replay::replay_stream(&mut chunks, Mode::Check, &opts)
        .expect("the chunk reader refuses a chunk the whole reader accepted");
    assert_eq!(
        streamed, checked,
        "a streamed replay differs from the whole one"
    );
});
