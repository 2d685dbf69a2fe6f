//! Fuzzes model-mode replay: any bytes that read as a trace replay on the simulator
//! (`replay::replay_model_with`, a small work budget) to a report, never a panic, a hang
//! or an allocation beyond `replay::MAX_REPLAY_BYTES` plus the simulator's bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rknpu_driver::replay::{self, ReplayOptions};
use rknpu_driver::trace::Trace;

fuzz_target!(|data: &[u8]| {
    let Ok(t) = Trace::from_bytes(data) else {
        return;
    };
    let opts = ReplayOptions::for_trace(&t).with_work_budget(1 << 22);
    let r = replay::replay_model_with(&t, &opts);
    assert!(r.submits <= t.chunks.len(), "more submissions than chunks");
    let _ = r.is_match();
});
