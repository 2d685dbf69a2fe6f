//! The emulated kernels are honest about their own limits (issue 26, item 9): a job the
//! simulator cannot finish within its work budget is [`Error::WorkBudget`], never
//! a timeout, and what the finished tasks wrote stays in memory, as on a board.

use super::behaviour_tests::matmul;
use super::*;
use crate::emu::{EmuKernel, Flavour};
use crate::regs::Block;
use std::time::{Duration, Instant};

fn private(flavour: Flavour) -> Device {
    Device::open_emulator(Arc::new(EmuKernel::new(flavour))).unwrap()
}

/// Runs a two-task job (identical tasks, each writing the whole product) once to learn
/// what a task costs, then with a budget for one and a half tasks: the first task
/// finishes and writes its product, the second runs out.
fn budget_stops_the_second_task(flavour: Flavour, nonblocking: bool) {
    let d = private(flavour);
    let emu = d.emulator().unwrap();
    let mm = matmul(&d, 2);
    d.submit(&mm.job()).unwrap();
    let two_tasks = emu.work_used();
    assert!(two_tasks > 0);
    // A fresh output buffer, so that only this run's writes can make it right.
    let mut mm = matmul(&d, 2);
    assert!(mm.product().iter().all(|&v| v == 0), "a fresh buffer");
    emu.set_work_budget(two_tasks * 3 / 4);
    let r = if nonblocking {
        d.submit_nonblocking(mm.job().timeout(Duration::from_millis(900)))
            .unwrap()
            .wait(Instant::now() + Duration::from_millis(900))
    } else {
        d.submit(&mm.job().timeout(Duration::from_millis(900)))
    };
    match &r {
        Err(Error::WorkBudget { why }) => {
            assert!(why.contains("budget"), "{why}");
        }
        other => panic!("{flavour:?}: expected WorkBudget, got {other:?}"),
    }
    assert!(
        r.unwrap_err().to_string().contains("not of the NPU"),
        "the message says it is the emulation's limit"
    );
    // The first task finished before the budget ran out: its product is in memory.
    assert!(
        mm.product().iter().all(|&v| v == 128),
        "{flavour:?}: what the finished task wrote is kept"
    );
    // The budget is per job and the stop is reported once: with the default budget
    // the same job runs again.
    emu.set_work_budget(crate::sim::DEFAULT_WORK_BUDGET);
    let mut mm = matmul(&d, 2);
    d.submit(&mm.job()).unwrap();
    assert!(mm.product().iter().all(|&v| v == 128));
}

#[test]
fn an_exhausted_work_budget_is_reported_as_such_on_the_vendor_kernel() {
    budget_stops_the_second_task(Flavour::Vendor098, false);
}

#[test]
fn an_exhausted_work_budget_is_reported_as_such_on_rocket() {
    budget_stops_the_second_task(Flavour::Rocket, false);
}

#[test]
fn an_exhausted_work_budget_is_reported_as_such_after_a_nonblocking_submit() {
    budget_stops_the_second_task(Flavour::Rocket, true);
}

#[test]
fn a_real_timeout_stays_a_timeout() {
    let d = private(Flavour::Vendor098);
    let mm = matmul(&d, 1);
    d.emulator().unwrap().inject(crate::sim::Faults {
        hang: Some(crate::sim::At { core: 0, task: 0 }),
        ..crate::sim::Faults::default()
    });
    let r = d.submit(&mm.job().timeout(Duration::from_millis(100)));
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
}

#[test]
fn only_the_simulators_own_bounds_are_emulation_stops() {
    use crate::emu::EmuStop;
    use crate::sim::{At, SimError};
    let at = At { core: 0, task: 3 };
    let cube = SimError::CubeLimit {
        at,
        register: "DST_BASE_ADDR",
        elements: 1 << 27,
        limit: 1 << 26,
    };
    match EmuStop::of(&cube) {
        Some(EmuStop::CubeLimit(why)) => assert!(why.contains("134217728"), "{why}"),
        other => panic!("{other:?}"),
    }
    let budget = SimError::WorkBudget {
        at,
        what: crate::sim::BUDGET_TASK,
        budget: 10,
        used: 4,
        needed: 7,
    };
    assert!(matches!(EmuStop::of(&budget), Some(EmuStop::WorkBudget(_))));
    // A DMA fault is what a board does too (it hangs): it stays a timeout.
    let dma = SimError::Dma {
        at,
        addr: 0x1000,
        len: 16,
        block: Block::Cna,
        register: "FEATURE_DATA_ADDR",
        write: false,
    };
    assert_eq!(EmuStop::of(&dma), None);
}
