//! Fuzzes capture import: the input becomes a capture folder (task lists, buffers named
//! by address, a `meta.json`), which `trace::import_capture` turns into a trace or a
//! typed `ImportError`; an imported trace round-trips through the format and passes
//! `replay::replay_check` without panicking.
//!
//! Input layout: a sequence of files, each `kind u8, name u8, len u16` then `len` bytes:
//! kind 0 `task-NN.regcmd.bin`, 1 `buf-XXXXXXXX.bin` (the address from the file's first
//! four bytes), 2 `meta.json`, 3 `regcmd.bin`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rknpu_driver::replay;
use rknpu_driver::trace::{Trace, import_capture};
use std::path::PathBuf;

fn folder() -> PathBuf {
    std::env::temp_dir().join(format!("rknpu-fuzz-capture-{}", std::process::id()))
}

fuzz_target!(|data: &[u8]| {
    let dir = folder();
    let _ = std::fs::remove_dir_all(&dir);
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let mut rest = data;
    while let [kind, name, l0, l1, tail @ ..] = rest {
        let len = (u16::from_le_bytes([*l0, *l1]) as usize).min(tail.len());
        let (bytes, after) = tail.split_at(len);
        rest = after;
        let file = match kind % 4 {
            0 => format!("task-{:02}.regcmd.bin", name % 100),
            1 => {
                let a = bytes
                    .first_chunk::<4>()
                    .map_or(0, |b| u32::from_le_bytes(*b));
                format!("buf-{a:08x}.bin")
            }
            2 => "meta.json".into(),
            _ => "regcmd.bin".into(),
        };
        let _ = std::fs::write(dir.join(file), bytes);
    }
    if let Ok(t) = import_capture(&dir) {
        let back = Trace::from_bytes(&t.to_bytes()).expect("an imported trace reads back");
        assert_eq!(back, t, "an imported trace round-trips");
        let _ = replay::replay_check(&t);
    }
    let _ = std::fs::remove_dir_all(&dir);
});
