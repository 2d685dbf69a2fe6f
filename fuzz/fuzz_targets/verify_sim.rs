//! Fuzzes the pre-submit verifier against the simulator (docs/fuzzing.md): the input
//! mutates a valid two-task matmul chain; whenever `verify::check_chain` accepts the
//! result, the simulated run must stay inside the job's buffers and leave its read-only
//! buffers unchanged. The job and the check are `tests/common/chain_probe.rs`, shared
//! with the proptest `tests/verify_differential.rs`.
//!
//! Input layout: records of 9 bytes, `(index u32, value u32, flags u8)`; an index below
//! 3/4 of `u32::MAX` picks one of the entries that matter (relocated addresses, chain
//! tails), flag bit 0 forges a chain-address write, bit 1 takes the value from the list
//! of interesting ones (the tasks' addresses and amounts, the buffers).
#![no_main]

#[path = "../../tests/common/chain_probe.rs"]
mod chain_probe;

use chain_probe::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let b = base();
    let values = interesting(&b);
    let mut words = b.words.clone();
    for r in data.chunks_exact(9).take(8) {
        let index = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
        let raw = u32::from_le_bytes([r[4], r[5], r[6], r[7]]);
        let m = Mutation {
            // Scale the u32 index onto the harness's usize range, keeping its HOT split.
            index: if index < u32::MAX / 4 * 3 { 0 } else { HOT } + index as usize,
            value: if r[8] & 2 != 0 {
                values[raw as usize % values.len()]
            } else {
                raw
            },
            forge: r[8] & 1 != 0,
        };
        mutate(&b, &mut words, &m);
    }
    if let Err(e) = check(&b, &words) {
        panic!("{e}");
    }
});
