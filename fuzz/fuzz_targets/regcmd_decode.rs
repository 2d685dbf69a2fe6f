//! Fuzzes the regcmd decoder: arbitrary bytes either fail to decode (lengths that are
//! not a multiple of 8, empty input) or decode to entries whose text (without a base
//! address, at a fixed base, and at a base taken from the input) and JSON renderings
//! do not panic. Decoding is lossless, so every input word must come back unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rknpu_driver::regcmd;

fuzz_target!(|data: &[u8]| {
    let Ok(d) = regcmd::decode_bytes(data) else {
        return;
    };

    assert_eq!(
        d.entries.len() * 8,
        data.len(),
        "an entry was dropped or invented"
    );
    for (e, chunk) in d.entries.iter().zip(data.chunks_exact(8)) {
        let word = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
        assert_eq!(
            e.word.0, word,
            "entry {} does not hold its input word",
            e.index
        );
    }

    let _ = d.to_text(None);
    let _ = d.to_text(Some(0x1000_0000));
    // A base from the input, so that chain addresses in the words can resolve to tasks.
    if let Some(&base) = data.first_chunk::<4>() {
        let _ = d.to_text(Some(u32::from_le_bytes(base)));
    }
    let _ = d.to_json();
});
