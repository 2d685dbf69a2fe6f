//! Other generators' board-run operation programs, run on the simulator and on the
//! emulated kernels and compared with an independent reference.
//!
//! `../shared/captures/rocket-userspace-ops/` (beside a development checkout, absent from
//! a fresh clone; `RKNPU_CAPTURES` names another captures folder) holds eight single-task
//! jobs that `gregordinary/rocket-userspace`'s generator and runtime build for the mainline
//! rocket driver: fp16 3×3 and 1×1 convolution, fp16 depthwise, int8 convolution, max and
//! average pooling, LUT sigmoid and element-wise add. Each comes with seeded inputs, an
//! expected output computed by numpy (not by this crate) at the output indices the peer's
//! own read-back uses, and a tolerance (exact, or a bound per element). Every program runs
//! as captured: on the simulator at the addresses it names, and on the emulated kernels
//! with its address registers moved to the buffers the kernel allocated.
//!
//! [`REFUSALS`] is the table docs/conformance.md shows: every case on every runner must match
//! its reference, except where the table names a refusal, which must then come as an error
//! containing the given text, so a refusal that goes away (or changes) is noticed. Without
//! the corpus the test says it skipped, unless `CI` is set, where that is a failure.

mod common;
#[path = "conformance_ops/manifest.rs"]
mod manifest;

use half::f16;
use manifest::{Json, read_npy};
use rknpu_driver::device::{BoFlags, Device, Job};
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::regcmd::{RegCmd, words_from_le_bytes, words_to_le_bytes};
use rknpu_driver::sim::{Kick, Simulator};
use rknpu_driver::submit::TaskDesc;
use std::path::{Path, PathBuf};

/// The runners: the simulator, then the emulated kernels.
const RUNNERS: [&str; 4] = ["sim", "emu", "emu:rocket", "emu:vendor-0.9.6"];

/// What each case must do on each runner: `None` runs and matches its reference,
/// `Some(text)` is refused by an error containing `text` (the reason docs/conformance.md
/// gives). A runner not listed for a case must run it and match.
const REFUSALS: &[(&str, &str, &str)] = &[
    // The library's rocket backend refuses PPU tasks: the rocket kernel waits for DPU
    // interrupts only (docs/device.md).
    (
        "ruv_pool_max_fp16_k2s2_c8_8x8",
        "emu:rocket",
        "runs the PPU",
    ),
    (
        "ruv_pool_avg_fp16_k3s2_c16_9x9",
        "emu:rocket",
        "runs the PPU",
    ),
];

/// Lints a case may raise on the simulator (warnings: the job still runs and matches).
/// The LUT program writes only the registers it needs and leaves 17 others to their reset
/// values, which is sound after a reset but not after another job (docs/simulator.md,
/// "Ping-pong groups and stale registers").
const LINTS: &[(&str, &str)] = &[("ruv_lut_sigmoid_fp16_n256", "stale-registers")];

/// The refusal text expected of `case` on `runner`, if any.
fn refusal(case: &str, runner: &str) -> Option<&'static str> {
    let exact = REFUSALS.iter().find(|(c, r, _)| *c == case && *r == runner);
    exact
        .or_else(|| REFUSALS.iter().find(|(c, r, _)| *c == case && *r == "*"))
        .map(|(_, _, why)| *why)
}

/// The output's element type.
#[derive(Clone, Copy, Debug)]
enum Dtype {
    F16,
    I32,
}

/// One buffer object of a case.
struct Buffer {
    addr: u32,
    size: usize,
    /// The packed input, for buffers the job reads.
    input: Option<Vec<u8>>,
    /// The expected output, for the buffer the job writes.
    expected: Option<Expected>,
}

/// An output's reference: the full buffer image, the indices to compare, and per index
/// the allowed absolute difference (`None`: exact).
struct Expected {
    image: Vec<u8>,
    dtype: Dtype,
    index: Vec<usize>,
    bound: Option<Vec<f64>>,
}

/// One job of the corpus.
struct Case {
    name: String,
    words: Vec<RegCmd>,
    regcmd_addr: u32,
    task: TaskDesc,
    buffers: Vec<Buffer>,
}

fn corpus() -> Option<PathBuf> {
    let dir = common::capture_or_skip("rocket-userspace-ops", "no program was run")?;
    if !dir.join("manifest.json").is_file() {
        common::absent_capture("rocket-userspace-ops/manifest.json");
        return None;
    }
    Some(dir)
}

fn load_case(dir: &Path, c: &Json) -> Case {
    let name = c.get("name").str().expect("a case name").to_string();
    let file = |j: &Json| dir.join(j.str().expect("a file name"));
    let num = |j: &Json, what: &str| -> u64 {
        j.u64()
            .unwrap_or_else(|| panic!("{name}: {what} is not a number"))
    };
    let submits = c.get("submits").items();
    assert_eq!(submits.len(), 1, "{name}: one submit");
    let s = &submits[0];
    let tasks = s.get("tasks").items();
    assert_eq!(tasks.len(), 1, "{name}: one task");
    let t = &tasks[0];
    let words = words_from_le_bytes(&std::fs::read(file(s.get("regcmd_file"))).unwrap()).unwrap();
    let tol = c.get("tolerance");
    let bound = match tol.get("kind").str() {
        Some("exact") => None,
        Some("bound") => Some(read_npy(&file(tol.get("bound_file"))).unwrap()),
        other => panic!("{name}: tolerance {other:?}"),
    };
    let mut buffers = Vec::new();
    for b in s.get("buffers").items() {
        let size = num(b.get("size"), "size") as usize;
        let input = b.get("file").str().map(|f| {
            let mut bytes = std::fs::read(dir.join(f)).unwrap();
            assert!(bytes.len() <= size, "{name}: {f} is larger than its buffer");
            bytes.resize(size, 0);
            bytes
        });
        let expected = b.get("expected_file").str().map(|f| Expected {
            image: std::fs::read(dir.join(f)).unwrap(),
            dtype: match b.get("dtype").str() {
                Some("float16") => Dtype::F16,
                Some("int32") => Dtype::I32,
                other => panic!("{name}: output dtype {other:?}"),
            },
            index: read_npy(&file(b.get("compare_index_file")))
                .unwrap()
                .into_iter()
                .map(|i| i as usize)
                .collect(),
            bound: bound.clone(),
        });
        buffers.push(Buffer {
            addr: num(b.get("addr"), "addr") as u32,
            size,
            input,
            expected,
        });
    }
    Case {
        task: TaskDesc {
            offset: 0,
            regcfg_amount: num(t.get("regcfg_amount"), "regcfg_amount") as u32,
            int_mask: num(t.get("int_mask"), "int_mask") as u32,
            enable: num(t.get("enable_mask"), "enable_mask") as u32,
        },
        regcmd_addr: num(s.get("regcmd_addr"), "regcmd_addr") as u32,
        words,
        buffers,
        name,
    }
}

fn cases() -> Option<Vec<Case>> {
    let dir = corpus()?;
    let m = Json::parse(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    Some(
        m.get("cases")
            .items()
            .iter()
            .map(|c| load_case(&dir, c))
            .collect(),
    )
}

/// Compares an output buffer with the reference; `Err` describes the worst element.
fn compare(e: &Expected, got: &[u8]) -> Result<String, String> {
    let value = |img: &[u8], i: usize| -> Option<f64> {
        Some(match e.dtype {
            Dtype::F16 => {
                f64::from(f16::from_le_bytes(img.get(2 * i..2 * i + 2)?.try_into().ok()?).to_f32())
            }
            Dtype::I32 => f64::from(i32::from_le_bytes(
                img.get(4 * i..4 * i + 4)?.try_into().ok()?,
            )),
        })
    };
    let mut worst = 0.0f64;
    for (k, &i) in e.index.iter().enumerate() {
        let want = value(&e.image, i).ok_or("the index lies outside the reference")?;
        let have = value(got, i).ok_or("the index lies outside the output")?;
        let allowed = e.bound.as_ref().map_or(0.0, |b| b[k]);
        let diff = (have - want).abs();
        if diff.is_nan() || diff > allowed {
            return Err(format!(
                "element {k} (output index {i}): got {have}, want {want}, allowed ±{allowed}"
            ));
        }
        if allowed > 0.0 {
            worst = worst.max(diff / allowed);
        }
    }
    Ok(format!(
        "{} elements within tolerance (worst {:.0}% of the bound)",
        e.index.len(),
        worst * 100.0
    ))
}

fn output(case: &Case) -> &Buffer {
    case.buffers
        .iter()
        .find(|b| b.expected.is_some())
        .expect("a case has an output")
}

/// Runs a case on the simulator: the output image, or the error that refused it.
fn on_sim(case: &Case) -> Result<Vec<u8>, String> {
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    let mut list = words_to_le_bytes(&case.words);
    list.resize(list.len().div_ceil(16) * 16 + 16, 0);
    m.map(case.regcmd_addr, list).map_err(|e| e.to_string())?;
    for b in &case.buffers {
        match &b.input {
            Some(bytes) => m.map(b.addr, bytes.clone()),
            None => m.map_zeroed(b.addr, b.size),
        }
        .map_err(|e| e.to_string())?;
    }
    let run = sim
        .kick(&Kick {
            task_number: Some(1),
            int_mask: case.task.int_mask,
            ..Kick::new(case.regcmd_addr, case.task.regcfg_amount)
        })
        .map_err(|e| e.to_string())?;
    if !run.completed {
        return Err(format!("the job did not complete: {run:?}"));
    }
    // A lint is a warning, not a refusal: only the ones `LINTS` expects of the case pass.
    for l in &run.lints {
        let text = l.to_string();
        let allowed = LINTS
            .iter()
            .any(|(c, kind)| *c == case.name && text.contains(kind));
        if !allowed {
            return Err(format!("lint: {text}"));
        }
    }
    let out = output(case);
    sim.memory()
        .read_vec(out.addr, out.size)
        .ok_or_else(|| "the output lies outside memory".to_string())
}

/// The captured list with every DMA address register moved from the capture's fake
/// buffer address to the address the kernel gave the buffer (the same offset inside it).
fn rebased(case: &Case, placed: &[(u32, usize, u32)]) -> Vec<RegCmd> {
    case.words
        .iter()
        .map(|&w| {
            let is_addr = rknpu_driver::regs::lookup(w.offset()).is_some_and(|r| r.dma_address);
            let v = w.value();
            match placed
                .iter()
                .find(|&&(fake, size, _)| is_addr && v >= fake && ((v - fake) as usize) < size)
            {
                Some(&(fake, _, real)) => {
                    RegCmd((w.0 & !(0xFFFF_FFFF << 16)) | (u64::from(v - fake + real) << 16))
                }
                None => w,
            }
        })
        .collect()
}

/// Runs a case on an emulated kernel: the output image, or the error that refused it.
fn on_kernel(case: &Case, spec: &str) -> Result<Vec<u8>, String> {
    let e = |x: rknpu_driver::Error| x.to_string();
    let dev = Device::open_spec(spec).map_err(|x| x.to_string())?;
    let mut bos = Vec::new();
    for b in &case.buffers {
        let mut bo = dev.alloc(b.size, BoFlags::default()).map_err(e)?;
        if let Some(bytes) = &b.input {
            bo.write(0, bytes).map_err(e)?;
        }
        bos.push(bo);
    }
    let placed: Vec<(u32, usize, u32)> = case
        .buffers
        .iter()
        .zip(&bos)
        .map(|(b, bo)| (b.addr, b.size, bo.dma_addr()))
        .collect();
    let list = words_to_le_bytes(&rebased(case, &placed));
    let mut regcmd = dev
        .alloc(list.len().div_ceil(16) * 16 + 16, BoFlags::default())
        .map_err(e)?;
    regcmd.write(0, &list).map_err(e)?;
    let mut job = Job::new(&regcmd, vec![case.task]);
    for (b, bo) in case.buffers.iter().zip(&bos) {
        job = if b.expected.is_some() {
            job.writes(bo)
        } else {
            job.reads(bo)
        };
    }
    dev.submit(&job).map_err(e)?;
    drop(job);
    let at = case
        .buffers
        .iter()
        .position(|b| b.expected.is_some())
        .unwrap();
    bos[at].read_all().map_err(e)
}

/// One line of the outcome table: `Ok` with the comparison, or `Err` with the refusal or
/// the mismatch.
fn outcome(case: &Case, ran: Result<Vec<u8>, String>) -> Result<String, String> {
    let e = output(case).expected.as_ref().unwrap();
    match ran {
        Ok(img) => compare(e, &img).map_err(|m| format!("MISMATCH: {m}")),
        Err(why) => Err(format!("refused: {why}")),
    }
}

#[test]
fn every_board_run_program_runs_or_is_refused_as_the_table_says() {
    let Some(cases) = cases() else { return };
    assert_eq!(cases.len(), 8, "the corpus has eight jobs");
    let mut failures = Vec::new();
    for case in &cases {
        for on in RUNNERS {
            let ran = match on {
                "sim" => on_sim(case),
                spec => on_kernel(case, spec),
            };
            let got = outcome(case, ran);
            eprintln!("{} on {on}: {got:?}", case.name);
            let want = refusal(&case.name, on);
            let ok = match (want, &got) {
                (None, Ok(_)) => true,
                (Some(text), Err(why)) => why.starts_with("refused") && why.contains(text),
                _ => false,
            };
            if !ok {
                failures.push(format!("{} on {on}: want {want:?}, got {got:?}", case.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The element-wise add's shared operand (`COMB_USE` 5) runs only in the geometry the
/// board ran: the same program with ERDMA stepping two surfaces instead of one is refused
/// by the field's name.
#[test]
fn a_shared_operand_off_the_board_run_geometry_is_refused_by_name() {
    use rknpu_driver::regs::{Register, dpu_rdma::RdmaEwSurfNotch};
    let Some(cases) = cases() else { return };
    let mut case = cases
        .into_iter()
        .find(|c| c.name == "ruv_ew_add_fp16_n256")
        .expect("the corpus has the element-wise add");
    let w = case
        .words
        .iter_mut()
        .find(|w| w.offset() == RdmaEwSurfNotch::OFFSET)
        .expect("the add writes EW_SURF_NOTCH");
    let doubled = u64::from(w.value()) * 2;
    *w = RegCmd((w.0 & !(0xFFFF_FFFF << 16)) | (doubled << 16));
    let why = on_sim(&case).expect_err("a doubled notch is refused");
    assert!(
        why.contains(RdmaEwSurfNotch::NAME) && why.contains(RdmaEwSurfNotch::EW_SURF_NOTCH.name()),
        "{why}"
    );
}

/// Around the LUT only the EW configuration a board ran is accepted: the sigmoid program's
/// EW ALU (MAX with a zero register operand) turned into an ADD is refused by name.
#[test]
fn another_ew_operation_around_the_lut_is_refused_by_name() {
    use rknpu_driver::regs::{Register, dpu::EwCfg};
    let Some(cases) = cases() else { return };
    let mut case = cases
        .into_iter()
        .find(|c| c.name == "ruv_lut_sigmoid_fp16_n256")
        .expect("the corpus has the LUT sigmoid");
    let w = case
        .words
        .iter_mut()
        .find(|w| w.offset() == EwCfg::OFFSET)
        .expect("the LUT program writes EW_CFG");
    let add = EwCfg::EW_ALU_ALGO
        .set(EwCfg::from_raw(w.value()), 2)
        .unwrap()
        .raw();
    *w = RegCmd((w.0 & !(0xFFFF_FFFF << 16)) | (u64::from(add) << 16));
    let why = on_sim(&case).expect_err("an ADD around the LUT is refused");
    assert!(
        why.contains(EwCfg::NAME) && why.contains(EwCfg::EW_OP_BYPASS.name()),
        "{why}"
    );
}

/// The library's fp16 depthwise convolution writes the depthwise mode and the DPU values
/// of the board-run program of the same shape (docs/hardware/convolution.md#depthwise).
#[test]
fn the_generators_fp16_depthwise_task_has_the_board_run_modes() {
    use rknpu_driver::kernels::ops::Cube;
    use rknpu_driver::kernels::ops::conv::Conv2d;
    use rknpu_driver::regcmd::{BlockMask, DmaAddr};
    use rknpu_driver::task::{Precision, Snapshot, Task};
    let Some(cases) = cases() else { return };
    let case = cases
        .into_iter()
        .find(|c| c.name == "ruv_conv_dw_fp16_k3s1p1_c32_6x6")
        .expect("the corpus has the depthwise convolution");
    let body = &case.words[..case.task.regcfg_amount as usize];
    let mut snap = Snapshot::from_writes(
        body.iter()
            .filter(|w| w.offset() >= 0x1000)
            .map(|w| (w.offset(), w.value())),
    );
    let board = Task::decode(&mut snap, BlockMask(case.task.enable)).unwrap();
    let mine = Conv2d::new(Cube::new(6, 6, 32, Precision::Fp16).unwrap(), 32, (3, 3))
        .with_depthwise(true)
        .with_pad_symmetric(1)
        .tasks(
            &Bindings::new()
                .bind(Role::Input, DmaAddr::Fixed(0x2000_0000))
                .bind(Role::Weights, DmaAddr::Fixed(0x3000_0000))
                .bind(Role::Output, DmaAddr::Fixed(0x5000_0000)),
        )
        .unwrap()
        .remove(0);
    assert_eq!(mine.enable(), board.enable());
    let (bd, md) = (board.dpu.unwrap(), mine.dpu.unwrap());
    assert!(bd.depthwise && md.depthwise);
    assert_eq!(md.ow, bd.ow);
    assert_eq!(
        (md.out.surf_stride, md.out.surface_add),
        (bd.out.surf_stride, bd.out.surface_add)
    );
    let (br, mr) = (board.dpu_rdma.unwrap(), mine.dpu_rdma.unwrap());
    assert!(br.depthwise && mr.depthwise);
    assert!(br.mrdma.is_none() && mr.mrdma.is_none() && br.erdma.is_none() && mr.erdma.is_none());
    assert_eq!(mine.cna.unwrap().kernel, board.cna.unwrap().kernel);
    assert_eq!(mine.core.unwrap().depthwise, board.core.unwrap().depthwise);
}
