//! Traces recorded from the project's own matmul runs on the emulated kernel
//! (`fixtures/traces/`): each replays on the simulator, passes the static check, replays
//! with every buffer moved (only its relocations can make it work), replays on an
//! emulated device, dumps to its reviewed text, and is what recording the same run
//! again gives (the fixtures are stored with elapsed times cleared and interrupt pairs
//! as the vendor kernel reads them). `UPDATE_FIXTURES=1` records them anew; review the
//! diff of the `.txt`.
//! Capture folders of the board captures (`common::captures_or_skip`) import, dump and
//! check.

mod common;

use common::{Rng, first_difference, first_output};
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::emu::{EmuKernel, Flavour};
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::replay::{
    ReplayOptions, replay_check, replay_hw, replay_model, replay_model_with,
};
use rknpu_driver::submit::irq;
use rknpu_driver::trace::{Chunk, Completion, MemorySink, Submission, Trace, dump, import_capture};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One fixture: a matmul recorded on an emulated kernel of its own, so that its buffer
/// addresses do not depend on what else the test process ran.
struct Case {
    name: &'static str,
    device: &'static str,
    spec: MatmulSpec,
}

fn cases() -> Vec<Case> {
    let mm = |m, k, n, d| MatmulSpec::new(m, k, n, d);
    vec![
        Case {
            name: "int8-64x256x128",
            device: "emu",
            spec: mm(64, 256, 128, Dtype::Int8),
        },
        Case {
            name: "int4-32x256x128",
            device: "emu",
            spec: mm(32, 256, 128, Dtype::Int4),
        },
        Case {
            name: "fp16-32x128x64",
            device: "emu",
            spec: mm(32, 128, 64, Dtype::Fp16),
        },
        // Three N tiles, one per core: one submission with core mask 7.
        Case {
            name: "multicore-int8-32x128x96",
            device: "emu",
            spec: mm(32, 128, 96, Dtype::Int8).on_cores(3),
        },
        // Two M tiles (of 150 rows: int8 tiles hold at most 256) chained on one core.
        Case {
            name: "chained-int8-300x128x64",
            device: "emu",
            spec: mm(300, 128, 64, Dtype::Int8),
        },
        // int4 K waves of at most 480 channels: three partial results summed on the host.
        Case {
            name: "splitk-int4-16x1024x64",
            device: "emu",
            spec: mm(16, 1024, 64, Dtype::Int4),
        },
        // The same program through the rocket interface.
        Case {
            name: "rocket-int8-32x128x64",
            device: "emu:rocket",
            spec: mm(32, 128, 64, Dtype::Int8),
        },
    ]
}

/// Records one run of `case` with seeded data; returns the trace's bytes.
fn record(case: &Case) -> Vec<u8> {
    let flavour = match case.device {
        "emu:rocket" => Flavour::Rocket,
        _ => Flavour::Vendor098,
    };
    let dev = Device::open_emulator(Arc::new(EmuKernel::new(flavour))).unwrap();
    let sink = MemorySink::default();
    dev.start_recording(Box::new(sink.clone())).unwrap();
    let plan = Plan::new(case.spec).unwrap();
    let s = case.spec;
    let (m, k, n) = (s.m as usize, s.k as usize, s.n as usize);
    let mut rng = Rng(0x7ace ^ (m * 31 + k * 7 + n) as u64);
    match s.dtype {
        Dtype::Fp16 => {
            let a: Vec<f32> = (0..m * k).map(|_| rng.float()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rng.float()).collect();
            let bank = std::sync::Arc::new(
                WeightBank::from_kn_in(&dev, &plan.layout, Weights::F32(&b)).unwrap(),
            );
            Matmul::for_plan(&bank, plan)
                .unwrap()
                .run::<f32, f32>(&a)
                .unwrap();
        }
        d => {
            let (lo, hi) = if d == Dtype::Int4 {
                (-8, 7)
            } else {
                (-128, 127)
            };
            let a: Vec<i32> = (0..m * k).map(|_| rng.int(lo, hi)).collect();
            let b: Vec<i32> = (0..k * n).map(|_| rng.int(lo, hi)).collect();
            let bank = std::sync::Arc::new(
                WeightBank::from_kn_in(&dev, &plan.layout, Weights::Int(&b)).unwrap(),
            );
            Matmul::for_plan(&bank, plan)
                .unwrap()
                .run::<i32, i64>(&a)
                .unwrap();
        }
    }
    dev.stop_recording().unwrap();
    sink.bytes()
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/traces")
}

fn load(name: &str) -> Trace {
    let path = dir().join(format!("{name}.rknputrace"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Trace::from_bytes(&bytes).unwrap()
}

/// The trace without what differs from run to run: the measured elapsed times, and which
/// bit of each interrupt pair a core raised (it follows the core's ping-pong group, so
/// what ran on the core before).
fn timeless(mut t: Trace) -> Trace {
    for c in &mut t.chunks {
        if let Chunk::Done(Completion {
            elapsed_ns,
            statuses,
            ..
        }) = c
        {
            *elapsed_ns = 0;
            statuses.iter_mut().for_each(|s| *s = irq::fuzz(*s));
        }
    }
    t
}

/// Replay options with every buffer 256 MiB lower than recorded.
fn moved(t: &Trace) -> ReplayOptions {
    ReplayOptions::for_trace(t).with_shift(0xF000_0000)
}

/// Where two traces first differ, by chunk.
fn first_chunk_difference(a: &Trace, b: &Trace) -> Option<String> {
    if a.header != b.header {
        return Some(format!("headers: {:?} vs {:?}", a.header, b.header));
    }
    if let Some(i) = (0..a.chunks.len().min(b.chunks.len())).find(|&i| a.chunks[i] != b.chunks[i]) {
        let brief = |c: &Chunk| {
            let s = format!("{c:?}");
            s.chars().take(160).collect::<String>()
        };
        return Some(format!(
            "chunk {i}: {} vs {}",
            brief(&a.chunks[i]),
            brief(&b.chunks[i])
        ));
    }
    (a.chunks.len() != b.chunks.len())
        .then(|| format!("{} vs {} chunks", a.chunks.len(), b.chunks.len()))
}

#[test]
fn recording_a_run_again_gives_its_fixture() {
    let update = std::env::var_os("UPDATE_FIXTURES").is_some();
    for case in cases() {
        let bytes = record(&case);
        let t = Trace::from_bytes(&bytes).unwrap();
        if update {
            // Stored without the measured times, so that recording anew changes the
            // files only where the program or the recorder changed.
            let t = timeless(t);
            std::fs::create_dir_all(dir()).unwrap();
            std::fs::write(
                dir().join(format!("{}.rknputrace", case.name)),
                t.to_bytes(),
            )
            .unwrap();
            std::fs::write(dir().join(format!("{}.txt", case.name)), dump(&t)).unwrap();
            continue;
        }
        if let Some(d) = first_chunk_difference(&timeless(load(case.name)), &timeless(t)) {
            panic!(
                "{}: the recording differs from the fixture (UPDATE_FIXTURES=1 records it anew): {d}",
                case.name
            );
        }
    }
}

#[test]
fn every_fixture_replays_checks_and_relocates() {
    for case in cases() {
        let t = load(case.name);
        let r = replay_model(&t);
        assert!(r.is_match(), "{}: {:#?}", case.name, r.mismatches);
        let outputs = t
            .chunks
            .iter()
            .filter(|c| matches!(c, Chunk::Output { .. }))
            .count();
        let dones = t
            .chunks
            .iter()
            .filter(|c| matches!(c, Chunk::Done(Completion { ok: true, .. })))
            .count();
        assert!(outputs > 0 && dones > 0, "{}", case.name);
        assert_eq!(r.compared, outputs + dones, "{}", case.name);
        let c = replay_check(&t);
        assert!(c.is_match(), "{}: {:#?}", case.name, c.mismatches);
        assert_eq!(c.tasks, r.tasks, "{}", case.name);
        // 256 MiB lower: every address the program holds must come from a relocation.
        let s = replay_model_with(&t, &moved(&t));
        assert!(s.is_match(), "{}: {:#?}", case.name, s.mismatches);
    }
}

#[test]
fn fixture_dumps_match_their_reviewed_text() {
    for case in cases() {
        let path = dir().join(format!("{}.txt", case.name));
        let want = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let got = dump(&load(case.name));
        if let Some(d) = first_difference(&want, got.as_bytes()) {
            panic!("{}: {d}", path.display());
        }
    }
}

#[test]
fn the_fixture_traces_cover_what_the_issue_names() {
    let submit = |t: &Trace| {
        t.chunks
            .iter()
            .filter_map(|c| match c {
                Chunk::Submit(Submission {
                    core_mask,
                    ranges,
                    tasks,
                    ..
                }) => Some((*core_mask, ranges.len(), tasks.len())),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(submit(&load("multicore-int8-32x128x96")), [(7, 3, 3)]);
    // One-core vendor jobs name core 0 (mask 1), as board-validated submits do.
    assert_eq!(submit(&load("chained-int8-300x128x64")), [(1, 1, 2)]);
    assert_eq!(submit(&load("splitk-int4-16x1024x64")), [(1, 1, 3)]);
    assert_eq!(submit(&load("rocket-int8-32x128x64")), [(0, 1, 1)]);
    assert_eq!(load("rocket-int8-32x128x64").header.interface, 1);
}

#[test]
fn a_replay_reports_what_differs() {
    // An output byte.
    let mut t = load("int8-64x256x128");
    first_output(&mut t)[5] ^= 0x40;
    let r = replay_model(&t);
    assert_eq!(r.mismatches.len(), 1, "{r:#?}");
    assert!(
        r.mismatches[0].contains("after submit 1") && r.mismatches[0].contains("+0x5"),
        "{}",
        r.mismatches[0]
    );
    // A relocation dropped: with buffers moved, the program reads unmapped memory.
    let mut t = load("int8-64x256x128");
    let i = t
        .chunks
        .iter()
        .position(|c| matches!(c, Chunk::Reloc { .. }))
        .unwrap();
    t.chunks.remove(i);
    assert!(replay_model(&t).is_match());
    assert!(!replay_model_with(&t, &moved(&t)).is_match());
    // A relocation that names the wrong buffer is caught before anything runs.
    let mut t = load("int8-64x256x128");
    if let Some(Chunk::Reloc { offset, .. }) = t
        .chunks
        .iter_mut()
        .find(|c| matches!(c, Chunk::Reloc { .. }))
    {
        *offset += 0x40;
    }
    let c = replay_check(&t);
    assert!(
        c.mismatches.iter().any(|m| m.contains("was recorded at")),
        "{c:#?}"
    );
    // A completion recorded as failed.
    let mut t = load("int8-64x256x128");
    if let Some(Chunk::Done(Completion { ok, .. })) =
        t.chunks.iter_mut().find(|c| matches!(c, Chunk::Done(_)))
    {
        *ok = false;
    }
    let r = replay_model(&t);
    assert!(
        r.mismatches
            .iter()
            .any(|m| m.contains("recorded failed, replayed completed")),
        "{r:#?}"
    );
    // fp16 outputs from a board get 2 ULP; from the emulated kernel none.
    let mut t = load("fp16-32x128x64");
    let out = first_output(&mut t);
    out[0] = out[0].wrapping_add(1);
    assert!(!replay_model(&t).is_match());
    t.header.emulated = false;
    assert!(replay_model(&t).is_match());
}

#[test]
fn fixtures_replay_on_an_emulated_device() {
    for name in [
        "int8-64x256x128",
        "multicore-int8-32x128x96",
        "chained-int8-300x128x64",
    ] {
        let dev = Device::open_spec("emu").unwrap();
        let r = replay_hw(&load(name), &dev);
        assert!(r.is_match(), "{name}: {:#?}", r.mismatches);
        assert!(r.compared > 0, "{name}");
        assert_eq!(
            dev.live_buffers(),
            0,
            "{name}: the replay frees its buffers"
        );
    }
}

#[test]
fn captures_import_dump_and_check_when_present() {
    let Some(root) = common::captures_or_skip("nothing imported") else {
        return;
    };
    let mut cases = 0;
    for source in std::fs::read_dir(&root).unwrap().flatten() {
        if !source.path().is_dir() {
            continue;
        }
        for case in std::fs::read_dir(source.path()).unwrap().flatten() {
            let path = case.path();
            if !path.join("meta.json").exists() {
                continue;
            }
            cases += 1;
            let t = import_capture(&path).unwrap_or_else(|e| panic!("{e}"));
            let back = Trace::from_bytes(&t.to_bytes()).unwrap();
            assert_eq!(back, t, "{}", path.display());
            let text = dump(&t);
            assert!(!text.contains("not in the trace"), "{}", path.display());
            let c = replay_check(&t);
            assert!(c.is_match(), "{}: {:#?}", path.display(), c.mismatches);
            assert!(c.tasks > 0, "{}", path.display());
        }
    }
    assert_eq!(cases, 26, "the captures README lists 26 cases");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// A damaged trace that still reads is replayed without a panic: every damage ends as
    /// a mismatch or a warning in the report, or replays as before.
    #[test]
    fn damaged_traces_replay_without_panicking(flips in proptest::collection::vec((0usize..1 << 20, 0u8..8), 1..6)) {
        let path = dir().join("chained-int8-300x128x64.rknputrace");
        let mut bytes = std::fs::read(path).unwrap();
        for (at, bit) in flips {
            let i = at % bytes.len();
            bytes[i] ^= 1 << bit;
        }
        if let Ok(t) = Trace::from_bytes(&bytes) {
            let _ = replay_check(&t);
            let _ = replay_model(&t);
            let _ = dump(&t);
        }
    }
}

/// A capture folder made from the worked example's files (the layout of
/// `../shared/captures`), removed when dropped.
struct CaptureDir(PathBuf);

impl CaptureDir {
    fn new(name: &str, meta: &str) -> CaptureDir {
        let d = std::env::temp_dir().join(format!("rknpu-capture-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let fixture = |ext: &str| {
            std::fs::read(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(format!("fixtures/regcmd/worked-int8-4x32x32{ext}")),
            )
            .unwrap()
        };
        std::fs::write(d.join("task-00.regcmd.bin"), fixture(".bin")).unwrap();
        std::fs::write(d.join("buf-00200000.bin"), fixture(".a.bin")).unwrap();
        std::fs::write(d.join("buf-00300000.bin"), fixture(".b.bin")).unwrap();
        std::fs::write(
            d.join("buf-00400000.bin"),
            vec![0u8; fixture(".c.bin").len()],
        )
        .unwrap();
        std::fs::write(d.join("buf-gem7.bin"), [0u8; 16]).unwrap();
        std::fs::write(d.join("meta.json"), meta).unwrap();
        CaptureDir(d)
    }
}

impl Drop for CaptureDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_capture_folder_imports_relocates_and_runs() {
    let dir = CaptureDir::new(
        "ok",
        r#"{"source_repo": "example/repo", "runtime": {"rknpu_driver": "rknpu 0.9.8"},
            "task_descriptors": [{"regcfg_amount": 108, "regcmd_addr": "0x100000",
                                  "int_mask": "0x300", "enable_mask": "0xd"}]}"#,
    );
    let t = import_capture(&dir.0).unwrap();
    assert_eq!(t.header.driver, "rknpu 0.9.8");
    let text = dump(&t);
    assert!(
        text.contains("buf-gem7.bin: its address is not known"),
        "{text}"
    );
    // The list lies in no captured buffer: it gets one of its own at its address.
    assert!(text.contains("bytes at 0x00100000"), "{text}");
    let relocs = t
        .chunks
        .iter()
        .filter(|c| matches!(c, Chunk::Reloc { .. }))
        .count();
    assert_eq!(relocs, 3, "A, B and C: {text}");
    let c = replay_check(&t);
    assert!(c.is_match() && c.tasks == 1, "{c:#?}");
    // It runs on the simulator, also with every buffer moved; nothing is recorded to
    // compare, and nothing is reported as failing.
    for r in [replay_model(&t), replay_model_with(&t, &moved(&t))] {
        assert!(r.is_match(), "{r:#?}");
        assert!(
            !r.lints.iter().any(|l| l.contains("does not complete")),
            "{r:#?}"
        );
    }
}

#[test]
fn a_capture_folder_with_bad_metadata_is_a_named_error() {
    let dir = CaptureDir::new(
        "bad",
        r#"{"task_descriptors": [{"regcfg_amount": 1099511627776}]}"#,
    );
    let e = import_capture(&dir.0).unwrap_err();
    assert!(
        e.to_string()
            .contains("regcfg_amount 0x10000000000 does not fit 32 bits"),
        "{e}"
    );
    let dir = CaptureDir::new("broken", "{\"task_descriptors\": [");
    assert!(
        import_capture(&dir.0)
            .unwrap_err()
            .to_string()
            .contains("meta.json")
    );
    let empty = std::env::temp_dir().join(format!("rknpu-capture-{}-empty", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let e = import_capture(&empty).unwrap_err();
    assert!(e.to_string().contains("no regcmd.bin"), "{e}");
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn contents_written_between_submissions_are_recorded_once_each() {
    let dev = Device::open_emulator(Arc::new(EmuKernel::new(Flavour::Vendor098))).unwrap();
    let sink = MemorySink::default();
    dev.start_recording(Box::new(sink.clone())).unwrap();
    let plan = Plan::new(MatmulSpec::new(16, 64, 32, Dtype::Int8)).unwrap();
    let mut rng = Rng(11);
    let b: Vec<i32> = (0..64 * 32).map(|_| rng.int(-128, 127)).collect();
    let bank =
        std::sync::Arc::new(WeightBank::from_kn_in(&dev, &plan.layout, Weights::Int(&b)).unwrap());
    let mut mm = Matmul::for_plan(&bank, plan).unwrap();
    for _ in 0..2 {
        let a: Vec<i32> = (0..16 * 64).map(|_| rng.int(-128, 127)).collect();
        mm.run::<i32, i64>(&a).unwrap();
    }
    dev.stop_recording().unwrap();
    let t = Trace::from_bytes(&sink.bytes()).unwrap();
    // In file order: which buffers got contents before each submission.
    let mut before = vec![Vec::new()];
    for c in &t.chunks {
        match c {
            Chunk::Data { id, .. } => before.last_mut().unwrap().push(*id),
            Chunk::Submit(_) => before.push(Vec::new()),
            _ => {}
        }
    }
    assert_eq!(before.len(), 3, "two submissions: {}", dump(&t));
    // The second run rewrites only A: one buffer, which the first run wrote as well; the
    // weights are recorded once.
    assert_eq!(before[1].len(), 1, "{before:?}");
    assert!(
        before[0].contains(&before[1][0]) && before[0].len() >= 3,
        "{before:?}"
    );
    let r = replay_model(&t);
    assert!(r.is_match(), "{:#?}", r.mismatches);
    assert_eq!(r.submits, 2);
}

#[test]
fn a_trace_of_two_program_lifetimes_at_reused_addresses_replays_in_model_mode() {
    let dev = Device::open_emulator(Arc::new(EmuKernel::new(Flavour::Vendor098))).unwrap();
    let sink = MemorySink::default();
    dev.start_recording(Box::new(sink.clone())).unwrap();
    let mut rng = Rng(5);
    // Two lifetimes, as two run_program calls have: every buffer of the first is freed
    // before the second allocates, and the emulated kernel gives the addresses again.
    for _ in 0..2 {
        let plan = Plan::new(MatmulSpec::new(16, 64, 32, Dtype::Int8)).unwrap();
        let b: Vec<i32> = (0..64 * 32).map(|_| rng.int(-128, 127)).collect();
        let bank = Arc::new(WeightBank::from_kn_in(&dev, &plan.layout, Weights::Int(&b)).unwrap());
        let mut mm = Matmul::for_plan(&bank, plan).unwrap();
        let a: Vec<i32> = (0..16 * 64).map(|_| rng.int(-128, 127)).collect();
        mm.run::<i32, i64>(&a).unwrap();
    }
    dev.stop_recording().unwrap();
    let t = Trace::from_bytes(&sink.bytes()).unwrap();
    let mut created: Vec<(u32, u64)> = Vec::new();
    let mut reused = false;
    for c in &t.chunks {
        if let Chunk::Buffer { size, dma_addr, .. } = c {
            let (a, e) = (*dma_addr as u64, *dma_addr as u64 + size);
            reused |= created
                .iter()
                .any(|&(s, n)| s as u64 + n > a && (s as u64) < e);
            created.push((*dma_addr, *size));
        }
    }
    assert!(reused, "the second lifetime reuses addresses: {}", dump(&t));
    assert!(t.chunks.iter().any(|c| matches!(c, Chunk::Free { .. })));
    let r = replay_model(&t);
    assert!(r.is_match(), "{:#?}", r.mismatches);
    assert_eq!(r.submits, 2);
    assert!(replay_check(&t).is_match());
    assert!(replay_model_with(&t, &moved(&t)).is_match());
}

#[test]
fn a_version_1_trace_still_reads_and_replays() {
    let bytes = std::fs::read(dir().join("v1/int8-64x256x128.rknputrace")).unwrap();
    let t = Trace::from_bytes(&bytes).unwrap();
    assert_eq!(t.header.version, 1);
    let r = replay_model(&t);
    assert!(r.is_match() && r.compared > 0, "{:#?}", r.mismatches);
}
