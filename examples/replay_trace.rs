//! Replaying a recorded trace: the file a run on a board (or on the emulated kernel)
//! wrote with `RKNPU_TRACE=FILE` holds every buffer, program, submission and output, so
//! it can be checked and run again later and compared with what was recorded
//! (docs/trace-format.md).
//!
//! It reads the trace, checks it statically (every task decodes, every relocation holds
//! the address it names), then replays it on a device — a board if there is one, the
//! emulated kernel otherwise — in new buffers, and compares each completion and output
//! with the recording. A trace recorded through the other kernel interface (vendor
//! `rknpu` or `rocket`) than the device's is replayed on the simulator instead: the
//! submissions of one interface (core masks, for one) do not translate to the other. It
//! prints both reports, exits non-zero if either finds a difference, and prints `OK` last.
//!
//! The trace is the first argument; without one it is the repository's
//! `fixtures/traces/int8-64x256x128.rknputrace` (an int8 64×256×128 matmul), which the
//! published crate does not contain: outside a checkout of the repository, give a path.
//!
//! ```text
//! cargo run --release --example replay_trace [-- TRACE.rknputrace]
//! ```

use rknpu_driver::device::{Device, Interface};
use rknpu_driver::replay::{ReplayReport, replay_check, replay_hw, replay_model};
use rknpu_driver::trace::Trace;
use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;

/// The trace replayed when no path is given, in a checkout of the repository.
const DEFAULT_TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/traces/int8-64x256x128.rknputrace"
);

/// The example's result type.
type Res<T = ()> = Result<T, Box<dyn Error>>;

/// Prints what a replay compared and found; an error naming `what` on a mismatch.
fn print_report(what: &str, r: &ReplayReport) -> Res {
    println!(
        "{what}: {} submission(s), {} task(s), {} output(s) and completion(s) compared, {} lint(s), {} mismatch(es)",
        r.submits,
        r.tasks,
        r.compared,
        r.lints.len(),
        r.mismatches.len()
    );
    for lint in &r.lints {
        println!("  lint: {lint}");
    }
    for m in &r.mismatches {
        println!("  mismatch: {m}");
    }
    if !r.is_match() {
        return Err(format!("{what}: the replay differs from the recording").into());
    }
    Ok(())
}

fn run() -> Res {
    let path = match std::env::args_os().nth(1) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(DEFAULT_TRACE),
    };
    let bytes = std::fs::read(&path).map_err(|e| {
        format!(
            "cannot read the trace {}: {e} (give a .rknputrace file as the first argument)",
            path.display()
        )
    })?;
    let trace = Trace::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let h = &trace.header;
    // The header codes the interface: 0 vendor `rknpu`, 1 `rocket` (docs/trace-format.md).
    let interface = match h.interface {
        0 => Interface::Vendor,
        1 => Interface::Rocket,
        other => return Err(format!("{}: unknown interface code {other}", path.display()).into()),
    };
    println!(
        "trace {}: {} {}, driver {:?}{}, {} chunks",
        path.display(),
        h.soc,
        if interface == Interface::Vendor {
            "rknpu"
        } else {
            "rocket"
        },
        h.driver,
        if h.emulated { " (emulated)" } else { "" },
        trace.chunks.len()
    );

    // Check mode: nothing runs; the programs are decoded and the relocations checked.
    print_report("check", &replay_check(&trace))?;

    // Hw mode: the device allocates every buffer anew, the program's relocated words are
    // patched for the new addresses, and each submission runs and is compared.
    let dev = Device::open_or_emulated()?;
    println!("device: {}", dev.info());
    if dev.info().interface == interface {
        print_report("replay on the device", &replay_hw(&trace, &dev))?;
    } else {
        // Model mode: the simulator runs each submission as the recording's kernel would.
        println!("the trace is of the other kernel interface: replaying on the simulator");
        print_report("replay on the simulator", &replay_model(&trace))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
