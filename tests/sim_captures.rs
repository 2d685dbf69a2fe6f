//! The captured board programs (`../shared/captures/`, beside a development checkout,
//! absent from a fresh clone) on the simulator: every capture that comes with buffers at
//! known addresses must run, or stop with an error the model names (a register, field and
//! value it does not model, or a DMA to memory the capture did not record). None may
//! panic, and none may stop on an entry the model does not understand.

mod common;
use common::{CaptureCase as Case, capture_cases as cases, capture_or_skip, captures_or_skip};
use rknpu_driver::sim::{Kick, SimError, Simulator};

/// Loads a case and runs it: `Ok(summary)` or the simulator's error.
fn run(case: &Case) -> Result<String, SimError> {
    let mut sim = Simulator::new();
    for (addr, file) in &case.buffers {
        sim.memory_mut().map(*addr, std::fs::read(file).unwrap())?;
    }
    // Task lists that no captured buffer holds go where their descriptors say.
    for (file, addr) in case.tasks.iter().zip(&case.regcmd_addrs) {
        let bytes = std::fs::read(file).unwrap();
        if sim.memory().read(*addr as u64, bytes.len()).is_none() {
            sim.memory_mut().map(*addr, bytes)?;
        }
    }
    let first = *case.regcmd_addrs.first().ok_or(SimError::Setup {
        why: "meta.json gives no regcmd_addr".into(),
    })?;
    let amount = match case.regcfg_amounts.first() {
        Some(&a) => a,
        None => (std::fs::read(&case.tasks[0]).unwrap().len() / 8 - 4) as u32,
    };
    let kick = Kick {
        task_number: Some(case.tasks.len() as u32),
        ..Kick::new(first, amount)
    };
    let r = sim.kick(&kick)?;
    Ok(format!(
        "{} task(s) run, raw status {:#x}, completed {}, {} lint(s){}",
        r.tasks_run,
        r.raw_status,
        r.completed,
        r.lints.len(),
        r.stall
            .map(|s| format!(", stalls at {}: {}", s.at, s.why))
            .unwrap_or_default()
    ))
}

#[test]
fn captures_with_buffers_run_or_fail_with_a_named_error() {
    let Some(dir) = captures_or_skip("nothing to run") else {
        return;
    };
    let cases = cases(&dir);
    assert!(
        !cases.is_empty(),
        "no capture with buffers under {}",
        dir.display()
    );
    let mut not_understood = Vec::new();
    for case in &cases {
        match run(case) {
            Ok(summary) => eprintln!("{}: runs: {summary}", case.name),
            Err(e) => {
                eprintln!("{}: stops: {e}", case.name);
                match e {
                    SimError::Unsupported { .. }
                    | SimError::Inconsistent { .. }
                    | SimError::CbufOverflow { .. }
                    | SimError::Dma { .. } => {}
                    other => not_understood.push(format!("{}: {other}", case.name)),
                }
            }
        }
    }
    assert!(
        not_understood.is_empty(),
        "captures stopped on something the model does not name:\n{}",
        not_understood.join("\n")
    );
}

/// `wtwver-npu/rknn-matmul-int8-4x32x32` was dumped after a run on a board, with its
/// buffers but without their addresses. By content (and a CPU check of the product), GEM 4
/// holds A (4x32 int8, row-major), GEM 3 the weights in the native atom layout and GEM 6
/// the int32 result; the program reads them at 0xfffe8000, 0xfffec000 and 0xfffea000.
/// Placing them there, the simulator must reproduce the board's output bit for bit.
#[test]
fn simulator_reproduces_a_board_run_of_the_vendor_int8_matmul() {
    let Some(case) = capture_or_skip("wtwver-npu/rknn-matmul-int8-4x32x32", "nothing to run")
    else {
        return;
    };
    let read = |f: &str| std::fs::read(case.join(f)).unwrap();
    let board_output = read("buf-gem6.bin");
    let mut sim = Simulator::new();
    sim.memory_mut()
        .map(0xfffeb000, read("buf-fffeb000.bin"))
        .unwrap();
    sim.memory_mut()
        .map(0xfffe8000, read("buf-gem4.bin"))
        .unwrap();
    sim.memory_mut()
        .map(0xfffec000, read("buf-gem3.bin"))
        .unwrap();
    sim.memory_mut().map_zeroed(0xfffea000, 4096).unwrap();
    let run = sim.kick(&Kick::new(0xfffeb000, 108)).unwrap();
    assert!(run.completed, "{run:?}");
    assert_eq!(run.macs, 4 * 32 * 32);
    let ours = sim.memory().read_vec(0xfffea000, 512).unwrap();
    assert_eq!(
        ours,
        board_output[..512],
        "C = A x B as int32, row-major 4x32"
    );
    assert!(ours.iter().any(|&b| b != 0));
}
