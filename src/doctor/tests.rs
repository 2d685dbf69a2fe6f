//! The ladder on the emulated kernels, and the fault each rung exists to catch, injected
//! just before that rung on an emulator of the test's own.

use super::*;
use crate::Error;
use crate::emu::{EmuKernel, Flavour};
use crate::sim::{At, Faults};

fn emulator(flavour: Flavour) -> Device {
    Device::open_emulator(Arc::new(EmuKernel::new(flavour))).unwrap()
}

/// Injects `faults` into the device's emulated kernel just before `rung`.
struct InjectBefore(Rung, Faults);

impl Observer for InjectBefore {
    fn before(&self, rung: Rung, dev: &Device) {
        if rung == self.0 {
            dev.emulator()
                .expect("an emulated device")
                .inject(self.1.clone());
        }
    }
}

fn at(core: usize, task: usize) -> Option<At> {
    Some(At { core, task })
}

fn options() -> Options {
    Options::default().with_deadline(Duration::from_millis(100))
}

/// Runs the ladder on a fresh vendor 0.9.8 emulator with `faults` injected before
/// `rung`, and returns the diagnosis, checking the ladder stopped at `rung`.
fn fault_at(rung: Rung, faults: Faults) -> Diagnosis {
    let dev = emulator(Flavour::Vendor098);
    let opts = options().with_observer(Arc::new(InjectBefore(rung, faults)));
    let d = stopped_at(run(&dev, &opts), rung);
    assert_eq!(
        (dev.live_buffers(), dev.live_mappings()),
        (0, 0),
        "the failed rung freed everything"
    );
    d
}

/// The diagnosis of a report that must have stopped at `rung`, with every rung below it
/// passed and none above it run.
fn stopped_at(report: Report, rung: Rung) -> Diagnosis {
    let text = report.to_string();
    eprintln!("{text}");
    let Some((failed, d)) = report.failure() else {
        panic!("the ladder did not fail:\n{text}");
    };
    assert_eq!(failed, rung, "{text}");
    let index = Rung::ALL.iter().position(|&r| r == rung).unwrap();
    assert_eq!(
        report.rungs.len(),
        index + 1,
        "rungs above the failure ran:\n{text}"
    );
    assert!(!report.passed());
    for r in &report.rungs[..index] {
        assert!(!matches!(r.status, Status::Failed(_)), "{text}");
    }
    assert!(text.contains(&format!("FAIL  {}", rung.name())), "{text}");
    assert!(text.contains("hint:"), "{text}");
    d.clone()
}

fn passes(flavour: Flavour) -> Report {
    let dev = emulator(flavour);
    let report = run(&dev, &Options::default());
    assert!(report.passed(), "{report}");
    assert_eq!(report.rungs.len(), Rung::ALL.len());
    assert_eq!(dev.live_buffers(), 0);
    assert_eq!(dev.live_mappings(), 0);
    assert_eq!(dev.emulator().unwrap().live_objects(), 0);
    report
}

#[test]
fn the_whole_ladder_passes_on_emulated_vendor_0_9_8() {
    let report = passes(Flavour::Vendor098);
    assert!(
        report.rungs.iter().all(|r| r.status == Status::Ok),
        "{report}"
    );
    assert_eq!(report.summary(), "all 10 rungs passed");
}

#[test]
fn the_whole_ladder_passes_on_emulated_vendor_0_9_6() {
    let report = passes(Flavour::Vendor096);
    assert!(
        report.rungs.iter().all(|r| r.status == Status::Ok),
        "{report}"
    );
}

#[test]
fn the_whole_ladder_passes_on_emulated_rocket_and_says_why_it_skips_core_splits() {
    let report = passes(Flavour::Rocket);
    assert_eq!(report.rung(Rung::Grid1).unwrap().status, Status::Ok);
    for rung in [Rung::Grid2, Rung::Grid3] {
        match &report.rung(rung).unwrap().status {
            Status::Skipped { why } => assert!(why.contains("rocket places"), "{why}"),
            other => panic!("{rung}: {other:?}"),
        }
    }
    assert_eq!(report.summary(), "all 10 rungs passed (2 skipped)");
    assert!(
        report.to_string().contains("skip  grid-2-cores"),
        "{report}"
    );
}

#[test]
fn the_grid_plans_use_the_cores_their_rung_names() {
    for cores in 1..=3 {
        for shape in grid::shapes(cores) {
            let Ok(plan) = grid::plan(shape, cores) else {
                panic!("{shape:?} does not plan");
            };
            assert_eq!(plan.per_core.len(), cores as usize, "{shape:?}");
        }
    }
    // One-core plans have K waves or several tasks: more than the single-task rungs.
    assert!(grid::shapes(1).iter().all(|&s| grid::plan(s, 1).is_ok()));
    assert!(grid::plan(grid::shapes(1)[0], 1).is_ok_and(|p| p.tasks.len() > 1));
}

#[test]
fn probe_fails_on_a_node_that_does_not_open() {
    let report = run_spec(Some("/dev/rknpu-doctor-test-no-such-node"), &options());
    assert!(report.device.is_none());
    let d = stopped_at(report, Rung::Probe);
    assert!(
        matches!(&d.finding, Finding::Device(Error::Open { errno, .. }) if *errno == crate::OsError::ENOENT),
        "{d}"
    );
    assert!(d.hint.contains("ls -l /dev/dri"), "{d}");
}

#[test]
fn probe_fails_on_an_unknown_emulator_saying_how_to_select_a_device() {
    let d = stopped_at(run_spec(Some("emu:vendor-0.9.5"), &options()), Rung::Probe);
    assert!(
        matches!(&d.finding, Finding::Device(Error::NotFound { .. })),
        "{d}"
    );
    assert!(d.hint.contains("RKNPU_DEVICE"), "{d}");
}

#[test]
fn buffers_catch_memory_that_does_not_hold_what_was_written() {
    let dev = emulator(Flavour::Vendor098);
    let opts = options().with_corrupt(Rung::Buffers);
    let d = stopped_at(run(&dev, &opts), Rung::Buffers);
    let Finding::Mismatch(m) = &d.finding else {
        panic!("{d}");
    };
    // The first buffer is 4096 bytes; byte 2048 was changed between write and read.
    assert_eq!((m.index, m.differing, m.total), (2048, 1, 4096), "{d}");
    assert!(!m.unwritten);
    assert_ne!(m.expected, m.got);
    assert!(d.job.is_none());
    assert!(d.hint.contains("cache maintenance"), "{d}");
    assert_eq!(dev.live_buffers(), 0, "the failed rung freed its buffer");
}

#[test]
fn the_worked_example_catches_an_npu_that_runs_nothing() {
    let d = fault_at(
        Rung::WorkedExample,
        Faults {
            hang: at(0, 0),
            ..Faults::default()
        },
    );
    assert!(
        matches!(
            d.finding,
            Finding::Device(Error::Timeout {
                task_counter: 0,
                ..
            })
        ),
        "{d}"
    );
    assert!(d.hint.contains("ran no program at all"), "{d}");
}

#[test]
fn on_rocket_a_hang_is_a_timeout_without_counters_at_the_worked_example() {
    let dev = emulator(Flavour::Rocket);
    let opts = Options {
        observer: Some(Arc::new(InjectBefore(
            Rung::WorkedExample,
            Faults {
                hang: at(0, 0),
                ..Faults::default()
            },
        ))),
        ..options()
    };
    let d = stopped_at(run(&dev, &opts), Rung::WorkedExample);
    // The rocket driver reports nothing about a job that timed out.
    assert_eq!(
        d.finding,
        Finding::Device(Error::Timeout {
            task_counter: 0,
            int_status: 0
        }),
        "{d}"
    );
    assert!(d.job.is_none());
    assert_eq!(dev.live_buffers(), 0, "the failed rung freed its buffers");
}

/// A job that completes without writing its output (a DMA fault the vendor driver
/// masks out of int_status) shows as an untouched output at the first element.
fn unwritten(d: &Diagnosis) {
    let Finding::Mismatch(m) = &d.finding else {
        panic!("{d}");
    };
    assert!(m.unwritten, "{d}");
    assert_eq!((m.row, m.col), (0, 0), "{d}");
    assert_eq!(m.differing, m.total, "{d}");
    let job = d.job.as_ref().expect("the job's counters");
    assert_eq!(job.task_counter, 1, "{d}");
    assert!(d.hint.contains("wrote nothing"), "{d}");
}

#[test]
fn the_int8_matmul_catches_a_dma_write_error() {
    unwritten(&fault_at(
        Rung::SingleInt8,
        Faults {
            dma_write_error: at(0, 0),
            ..Faults::default()
        },
    ));
}

#[test]
fn the_int4_matmul_catches_a_dma_read_error() {
    unwritten(&fault_at(
        Rung::SingleInt4,
        Faults {
            dma_read_error: at(0, 0),
            ..Faults::default()
        },
    ));
}

#[test]
fn the_fp16_matmul_catches_a_corrupted_input_at_its_first_element() {
    let dev = emulator(Flavour::Vendor098);
    let opts = Options {
        corrupt: Some(Rung::SingleFp16),
        ..options()
    };
    let d = stopped_at(run(&dev, &opts), Rung::SingleFp16);
    let Finding::Mismatch(m) = &d.finding else {
        panic!("{d}");
    };
    // A[0][0] feeds row 0 only: 32 elements of 256.
    assert_eq!((m.row, m.total), (0, 256), "{d}");
    assert!(m.differing <= 32 && !m.unwritten, "{d}");
    assert_eq!(d.job.as_ref().map(|j| j.task_counter), Some(1));
}

#[test]
fn the_chained_program_catches_a_chain_that_stops() {
    let d = fault_at(
        Rung::Chained,
        Faults {
            hang: at(0, 2),
            ..Faults::default()
        },
    );
    assert!(
        matches!(
            d.finding,
            Finding::Device(Error::Timeout {
                task_counter: 2,
                ..
            })
        ),
        "{d}"
    );
    assert!(d.hint.contains("chain stopped after task 2"), "{d}");
}

#[test]
fn the_one_core_grid_catches_a_wave_that_is_not_written() {
    // The int8 plan's second K wave is core 0's second task.
    let d = fault_at(
        Rung::Grid1,
        Faults {
            dma_write_error: at(0, 1),
            ..Faults::default()
        },
    );
    let Finding::Mismatch(m) = &d.finding else {
        panic!("{d}");
    };
    assert!(m.what == "C" && !m.unwritten, "{d}");
    assert!(d.expected.contains("int8 16x4608x64 on 1 core)"), "{d}");
}

#[test]
fn the_two_core_grid_catches_a_second_core_that_never_completes() {
    let d = fault_at(
        Rung::Grid2,
        Faults {
            hang: at(1, 0),
            ..Faults::default()
        },
    );
    assert!(
        matches!(d.finding, Finding::Device(Error::Timeout { .. })),
        "{d}"
    );
    assert!(d.hint.contains("multi-core job did not complete"), "{d}");
}

#[test]
fn the_three_core_grid_catches_a_third_core_that_reads_nothing() {
    let d = fault_at(
        Rung::Grid3,
        Faults {
            dma_read_error: at(2, 0),
            ..Faults::default()
        },
    );
    let Finding::Mismatch(m) = &d.finding else {
        panic!("{d}");
    };
    // Core 2 computes the last N tile: the first wrong element is past column 0.
    assert!(m.col > 0 && m.differing < m.total, "{d}");
    assert!(d.hint.contains("one core passed"), "{d}");
}

#[test]
fn a_bundle_holds_the_device_a_trace_per_rung_and_the_report() {
    let dir = std::env::temp_dir().join(format!("rknpu-doctor-bundle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dev = emulator(Flavour::Vendor098);
    let opts = Options {
        bundle: Some(dir.clone()),
        ..Options::default()
    };
    let report = run(&dev, &opts);
    assert!(
        report.passed() && report.bundle_errors.is_empty(),
        "{report:?}"
    );
    let mut names = vec!["device.txt".to_string(), "report.txt".to_string()];
    for (i, rung) in Rung::ALL.iter().enumerate().skip(1) {
        names.push(format!("{i:02}-{rung}.rknputrace"));
    }
    for name in &names {
        let len = std::fs::metadata(dir.join(name)).map(|m| m.len());
        assert!(len.as_ref().is_ok_and(|&l| l > 0), "{name}: {len:?}");
    }
    let device = std::fs::read_to_string(dir.join("device.txt")).unwrap();
    assert!(device.contains("driver: rknpu 0.9.8"), "{device}");
    let text = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(text.contains("all 10 rungs passed"), "{text}");
    // A trace of a rung that ran a program replays on the simulator.
    let bytes = std::fs::read(dir.join("03-matmul-int8.rknputrace")).unwrap();
    let trace = crate::trace::Trace::from_bytes(&bytes).unwrap();
    let replay = crate::replay::replay_model(&trace);
    assert!(replay.is_match(), "{replay:?}");
    assert!(!dev.is_recording());
    std::fs::remove_dir_all(&dir).unwrap();
}
