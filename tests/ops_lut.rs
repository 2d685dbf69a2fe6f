//! LUT activations on the emulated kernel: errors against the exact functions over every
//! fp16 input of each documented range, property tests against an independent
//! reference, hand-computed interpolation cases, the LUT RAM across a chain, and the
//! golden decoded programs.
//!
//! The error table of docs/ops.md ("LUT activations") is what
//! `cargo test --test ops_lut -- --nocapture measured_errors` prints.

mod common;

use half::f16;
use proptest::prelude::*;
use rknpu_driver::compute::ops::{ProgramBuffers, run_program};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::ops::lut::{Activation, ActivationOp, LutRecipe, lut_task};
use rknpu_driver::kernels::ops::{self, Cube};
use rknpu_driver::regcmd::{BufferId, DmaAddr, words_to_le_bytes};
use rknpu_driver::sim::{CoreRun, Kick, LintKind, SimError, Simulator};
use rknpu_driver::task::{LUT_ENTRIES, Lut, LutSlope, LutTables, OutCvt, Precision, Task};
use std::path::PathBuf;

fn emu() -> Device {
    Device::open_spec("emu").expect("the emulated kernel opens")
}

/// Runs `tasks` over `input` (packed for `cube`) and returns the output, row-major.
fn run(
    dev: &Device,
    cube: Cube,
    tasks: &[Task],
    input: &[f16],
    operand: Option<Vec<u8>>,
) -> Vec<f16> {
    let program = ops::chain(tasks).unwrap();
    let mut bufs = ProgramBuffers::new()
        .input(ops::INPUT, cube.pack(input).unwrap())
        .output(ops::OUTPUT, cube.bytes() as usize);
    if let Some(o) = operand {
        bufs = bufs.input(ops::OPERAND, o);
    }
    let out = run_program(dev, &program, bufs).unwrap();
    cube.unpack(&out[0]).unwrap()
}

fn activation(dev: &Device, a: Activation, cube: Cube, input: &[f16]) -> Vec<f16> {
    let op = ActivationOp::new(a, cube).unwrap();
    let tasks = op
        .tasks(
            ops::at(ops::INPUT, 0),
            ops::at(ops::OUTPUT, 0),
            ops::at(ops::OPERAND, 0),
        )
        .unwrap();
    run(dev, cube, &tasks, input, op.operand().unwrap())
}

/// The independent reference: plain f64 formulas, erf by Simpson's rule (not the
/// library's series), checked against hand values below.
fn exact(a: Activation, x: f64) -> f64 {
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    let phi = |x: f64| {
        // Φ(x) = 1/2 + ∫0^x e^{-t²/2} dt / √(2π), Simpson with 2000 panels.
        let n = 2000;
        let h = x / n as f64;
        let g = |t: f64| (-t * t / 2.0).exp();
        let mut s = g(0.0) + g(x);
        for i in 1..n {
            s += g(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        0.5 + s * h / 3.0 / (2.0 * std::f64::consts::PI).sqrt()
    };
    match a {
        Activation::Relu => x.max(0.0),
        Activation::Relu6 => x.clamp(0.0, 6.0),
        Activation::Silu => x * sigmoid(x),
        Activation::Gelu => x * phi(x),
        Activation::Sigmoid => sigmoid(x),
        Activation::Tanh => x.tanh(),
        Activation::Exp => x.exp(),
        _ => unreachable!("a new activation needs its reference"),
    }
}

#[test]
fn the_reference_matches_hand_values_and_the_library() {
    let close = |a: f64, b: f64, tol: f64| (a - b).abs() < tol;
    assert!(close(exact(Activation::Gelu, 1.0), 0.841_344_746, 1e-9));
    assert!(close(exact(Activation::Gelu, -2.0), -0.045_500_263_9, 1e-9));
    assert!(close(exact(Activation::Silu, 1.0), 0.731_058_578_6, 1e-9));
    assert!(close(exact(Activation::Tanh, 0.5), 0.462_117_157_3, 1e-9));
    for a in Activation::ALL {
        for x in [-7.5, -1.25, 0.0, 0.3, 2.0, 5.5] {
            assert!(close(exact(a, x), a.exact(x), 1e-9), "{a} at {x}");
        }
    }
    let r = ops::lut::reference(Activation::Exp, &[f16::from_f32(1.0)]);
    assert!(close(r[0], std::f64::consts::E, 1e-12));
}

/// Every finite fp16 value in `[lo, hi]`.
fn every_fp16(lo: f64, hi: f64) -> Vec<f16> {
    (0..=u16::MAX)
        .map(f16::from_bits)
        .filter(|x| x.is_finite() && f64::from(x.to_f32()) >= lo && f64::from(x.to_f32()) <= hi)
        .collect()
}

/// Max abs, RMS and max relative error (over |f(x)| ≥ 2^-6) of `out` against `a`.
fn errors(a: Activation, xs: &[f16], out: &[f16]) -> (f64, f64, Option<f64>) {
    let (mut max, mut sq, mut rel) = (0f64, 0f64, None::<f64>);
    for (x, y) in xs.iter().zip(out) {
        let want = exact(a, f64::from(x.to_f32()));
        let e = (f64::from(y.to_f32()) - want).abs();
        max = max.max(e);
        sq += e * e;
        if want.abs() >= 1.0 / 64.0 {
            let r = e / want.abs();
            rel = Some(rel.map_or(r, |m: f64| m.max(r)));
        }
    }
    (max, (sq / xs.len() as f64).sqrt(), rel)
}

/// The documented bounds (docs/ops.md, `Activation::error_bound`): max abs error over
/// every fp16 input of the range. Each is about twice the measured figure and far below
/// what a shifted index or a swapped table gives (the shift test below).
fn bound(a: Activation) -> f64 {
    a.error_bound()
}

fn measure(dev: &Device, a: Activation) -> (usize, f64, f64, Option<f64>) {
    let (lo, hi) = a.input_range();
    let mut xs = every_fp16(lo, hi);
    // Whole atoms: pad with zeros (f(0) is measured too).
    while !xs.len().is_multiple_of(8) {
        xs.push(f16::ZERO);
    }
    let cube = Cube::new((xs.len() / 8) as u32, 1, 8, Precision::Fp16).unwrap();
    let out = activation(dev, a, cube, &xs);
    let (max, rms, rel) = errors(a, &xs, &out);
    (xs.len(), max, rms, rel)
}

#[test]
fn measured_errors() {
    let dev = emu();
    println!(
        "| activation | inputs (every fp16 in) | count | max abs | RMS | max rel (|f| >= 2^-6) | bound |"
    );
    println!("|---|---|---|---|---|---|---|");
    for a in Activation::ALL {
        let (n, max, rms, rel) = measure(&dev, a);
        let (lo, hi) = a.input_range();
        println!(
            "| {a} | [{lo}, {hi}] | {n} | {max:.3e} | {rms:.3e} | {} | {:.1e} |",
            rel.map_or("-".into(), |r| format!("{r:.3e}")),
            bound(a)
        );
        assert!(
            max <= bound(a),
            "{a}: max abs error {max} above the bound {}",
            bound(a)
        );
    }
}

#[test]
fn a_shifted_or_swapped_table_breaks_the_bound() {
    // The same sigmoid program with its tables off by one entry, or LE and LO swapped,
    // must fail the bound the measured test asserts.
    let dev = emu();
    let xs = every_fp16(-8.0, 8.0);
    let n = xs.len() / 8 * 8;
    let xs = &xs[..n];
    let cube = Cube::new((n / 8) as u32, 1, 8, Precision::Fp16).unwrap();
    let good = ops::lut::recipe(ops::lut::Gate::Sigmoid);
    let mut shifted = good;
    shifted.tables.lo.rotate_left(1);
    shifted.tables.le.rotate_left(1);
    let mut swapped = good;
    std::mem::swap(&mut swapped.tables.le, &mut swapped.tables.lo);
    for (name, r, ok) in [
        ("good", good, true),
        ("shifted", shifted, false),
        ("swapped", swapped, false),
    ] {
        let t = lut_task(
            &r,
            cube.width,
            1,
            ops::at(ops::INPUT, 0),
            ops::at(ops::OUTPUT, 0),
            true,
        );
        let out = run(&dev, cube, &[t], xs, None);
        let (max, ..) = errors(Activation::Sigmoid, xs, &out);
        assert_eq!(max <= bound(Activation::Sigmoid), ok, "{name}: {max}");
    }
}

fn hand_recipe() -> LutRecipe {
    // LE[i] = -1000 + 2i, LO[i] = 3i + 8; X = 32·x; raw code out; slopes 0.5 below LE,
    // 0.25 above LO.
    let mut tables = LutTables {
        le: [0; LUT_ENTRIES],
        lo: [0; LUT_ENTRIES],
    };
    for i in 0..LUT_ENTRIES {
        tables.le[i] = -1000 + 2 * i as i16;
        tables.lo[i] = 3 * i as i16 + 8;
    }
    let mut lut = Lut::hybrid(5).unwrap();
    lut.le.slope = LutSlope {
        uflow_scale: 16384,
        uflow_shift: 15,
        ..LutSlope::default()
    };
    lut.lo.slope = LutSlope {
        oflow_scale: 8192,
        oflow_shift: 15,
        ..LutSlope::default()
    };
    let mut out_cvt = OutCvt::IDENTITY;
    out_cvt.fp32_to_fp16 = true;
    LutRecipe {
        tables,
        lut,
        bn_mul: f16::from_f32(32.0).to_bits(),
        bn_alu: 0,
        out_cvt,
    }
}

#[test]
fn hand_computed_interpolation_cases() {
    let dev = emu();
    // (x, expected): worked by hand from the tables of `hand_recipe`.
    let cases: [(f32, f32); 8] = [
        (3.0, 17.0),       // X = 96: LO point 3 = 3·3 + 8
        (3.25, 17.75),     // X = 104: a quarter into LO segment 3: 17 + 0.25 · 3
        (0.0, 8.0),        // X = 0 hits both tables: the hybrid priority takes LO[0]
        (-0.5, 23.0),      // X = -16: LE position 511.5: (-1000 + 1022) + 0.5 · 2
        (-512.0, -1000.0), // X = LE_START: LE[0]
        (-600.0, -2408.0), // X = -19200: LE[0] + (-2816) · 0.5
        (512.0, 1544.0),   // X = LO_END: LO[512]
        (600.0, 2248.0),   // X = 19200: LO[512] + 2816 · 0.25
    ];
    let xs: Vec<f16> = cases.iter().map(|c| f16::from_f32(c.0)).collect();
    let cube = Cube::new(1, 1, 8, Precision::Fp16).unwrap();
    let t = lut_task(
        &hand_recipe(),
        1,
        1,
        ops::at(ops::INPUT, 0),
        ops::at(ops::OUTPUT, 0),
        true,
    );
    let out = run(&dev, cube, &[t], &xs, None);
    for ((x, want), got) in cases.iter().zip(&out) {
        assert_eq!(got.to_f32(), *want, "x = {x}");
    }
}

/// Runs `tasks` on a fresh simulator (buffers at fixed addresses), `input` in INPUT.
fn simulate(
    tasks: &[Task],
    input: Vec<u8>,
    out_len: usize,
) -> (Result<CoreRun, SimError>, Vec<u8>) {
    let program = ops::chain(tasks).unwrap();
    let addr = |b: BufferId| -> Option<u64> {
        Some(match b {
            ops::REGCMD => 0x10_0000,
            ops::INPUT => 0x20_0000,
            ops::OUTPUT => 0x40_0000,
            _ => return None,
        })
    };
    let words = program.bind(addr).unwrap();
    let mut sim = Simulator::new();
    sim.memory_mut()
        .map(0x10_0000, words_to_le_bytes(&words))
        .unwrap();
    sim.memory_mut().map(0x20_0000, input).unwrap();
    sim.memory_mut().map_zeroed(0x40_0000, out_len).unwrap();
    let run = sim.kick(&Kick::new(0x10_0000, program.tasks()[0].regcfg_amount));
    let out = sim.memory().read_vec(0x40_0000, out_len).unwrap();
    (run, out)
}

#[test]
fn the_tables_persist_across_a_chain_and_a_lut_task_without_them_is_refused() {
    let cube = Cube::new(2, 1, 8, Precision::Fp16).unwrap();
    let xs: Vec<f16> = (0..16)
        .map(|i| f16::from_f32(i as f32 * 0.75 - 6.0))
        .collect();
    let r = hand_recipe();
    // Task 0 uploads and does the first pixel; task 1 uses the RAM for the second.
    let t0 = lut_task(
        &r,
        1,
        1,
        ops::at(ops::INPUT, 0),
        ops::at(ops::OUTPUT, 0),
        true,
    );
    let t1 = lut_task(
        &r,
        1,
        1,
        ops::at(ops::INPUT, 16),
        ops::at(ops::OUTPUT, 16),
        false,
    );
    assert!(t1.dpu.unwrap().ew.unwrap().lut.unwrap().upload.is_none());
    let (run, bytes) = simulate(&[t0, t1.clone()], cube.pack(&xs).unwrap(), 32);
    let run = run.unwrap();
    assert!(run.completed && run.tasks_run == 2);
    let out: Vec<f16> = cube.unpack(&bytes).unwrap();
    // The hand tables: x in [-6, 5.25] gives X = 32 x in [-192, 168], inside the tables.
    for (x, y) in xs.iter().zip(&out) {
        let big_x = x.to_f32() * 32.0;
        let want = if big_x >= 0.0 {
            8.0 + 3.0 * big_x / 32.0
        } else {
            -1000.0 + 2.0 * (big_x + 16384.0) / 32.0
        };
        assert_eq!(y.to_f32(), f16::from_f32(want).to_f32(), "x = {x}");
    }
    // A fresh core has uploaded nothing: the reusing task alone is a named error.
    let (run, _) = simulate(&[t1], cube.pack(&xs).unwrap(), 32);
    match run {
        Err(SimError::Inconsistent { field, why, .. }) => {
            assert_eq!(field, rknpu_driver::regs::dpu::EwCfg::EW_LUT_BYPASS.name());
            assert!(why.contains("LUT RAM holds no uploaded"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn board_measured_hazards_are_linted() {
    // Tables with a zero entry and a long flat run, and tanh's signed decode; the raw
    // decode of the fp32 SiLU (whose table holds zeros) and sigmoid have none (below and
    // `the_fp32_silu_runs_clean_and_its_error_is_bounded`).
    let cube = Cube::new(1, 1, 8, Precision::Fp16).unwrap();
    let xs = vec![f16::from_f32(0.5); 8];
    let mut r = hand_recipe();
    r.tables.lo[..100].fill(0);
    // Zero entries were measured with the fixed-point decode.
    r.out_cvt.minus_exp = 15;
    r.out_cvt.add_first = true;
    let t = lut_task(
        &r,
        1,
        1,
        ops::at(ops::INPUT, 0),
        ops::at(ops::OUTPUT, 0),
        true,
    );
    let (run, _) = simulate(&[t], cube.pack(&xs).unwrap(), 16);
    let quirks: Vec<String> = run
        .unwrap()
        .lints
        .into_iter()
        .filter(|l| l.kind == LintKind::LutQuirk)
        .map(|l| l.message)
        .collect();
    assert!(
        quirks.iter().any(|m| m.contains("equal to 0")),
        "{quirks:?}"
    );
    assert!(quirks.iter().any(|m| m.contains("flat run")), "{quirks:?}");
    let tanh = ActivationOp::new(Activation::Tanh, cube).unwrap();
    let tasks = tanh
        .tasks(
            ops::at(ops::INPUT, 0),
            ops::at(ops::OUTPUT, 0),
            ops::at(ops::OPERAND, 0),
        )
        .unwrap();
    let (run, _) = simulate(&tasks, cube.pack(&xs).unwrap(), 16);
    let lints = run.unwrap().lints;
    assert!(
        lints
            .iter()
            .any(|l| l.kind == LintKind::LutQuirk && l.message.contains("signed")),
        "{lints:?}"
    );
    // The sigmoid program of the boards has none.
    let sig = ActivationOp::new(Activation::Sigmoid, cube).unwrap();
    let tasks = sig
        .tasks(
            ops::at(ops::INPUT, 0),
            ops::at(ops::OUTPUT, 0),
            ops::at(ops::OPERAND, 0),
        )
        .unwrap();
    let (run, _) = simulate(&tasks, cube.pack(&xs).unwrap(), 16);
    assert!(
        !run.unwrap()
            .lints
            .iter()
            .any(|l| l.kind == LintKind::LutQuirk)
    );
}

#[test]
fn wide_tensors_are_tiled_at_4096_atoms() {
    let cube = Cube::new(4100, 2, 8, Precision::Fp16).unwrap();
    let op = ActivationOp::new(Activation::Sigmoid, cube).unwrap();
    let tasks = op
        .tasks(
            DmaAddr::Fixed(0x10_0000),
            DmaAddr::Fixed(0x80_0000),
            DmaAddr::Fixed(0),
        )
        .unwrap();
    let widths: Vec<(u32, u32, u32)> = tasks.iter().map(|t| t.dpu.unwrap().cube).collect();
    assert_eq!(widths, vec![(4096, 2, 8), (8, 1, 8)]);
    let uploads: Vec<bool> = tasks
        .iter()
        .map(|t| t.dpu.unwrap().ew.unwrap().lut.unwrap().upload.is_some())
        .collect();
    assert_eq!(uploads, vec![true, false]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn activations_match_the_reference_on_small_cubes(
        a in prop::sample::select(Activation::ALL.to_vec()),
        w in 1u32..6,
        h in 1u32..3,
        c in 1u32..20,
        seed in any::<u64>(),
    ) {
        let cube = Cube::new(w, h, c, Precision::Fp16).unwrap();
        let (lo, hi) = a.input_range();
        let mut rng = common::Rng(seed | 1);
        let xs: Vec<f16> = (0..cube.elems())
            .map(|_| f16::from_f64(lo + (hi - lo) * (rng.next() >> 11) as f64 / (1u64 << 53) as f64))
            .collect();
        let out = activation(&emu(), a, cube, &xs);
        for (x, y) in xs.iter().zip(&out) {
            let want = exact(a, f64::from(x.to_f32()));
            let e = (f64::from(y.to_f32()) - want).abs();
            // fp16 output rounding of large values (ReLU's exact results are fp16).
            prop_assert!(e <= bound(a).max(want.abs() * 1e-3), "{} at {}: {} vs {}", a, x, y, want);
        }
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/ops")
        .join(name)
}

#[test]
fn golden_decoded_programs() {
    for (a, name) in [
        (Activation::Sigmoid, "lut-sigmoid-fp16-2x1x16.txt"),
        (Activation::Relu6, "lut-relu6-fp16-2x1x16.txt"),
    ] {
        let cube = Cube::new(2, 1, 16, Precision::Fp16).unwrap();
        let op = ActivationOp::new(a, cube).unwrap();
        let tasks = op
            .tasks(
                ops::at(ops::INPUT, 0),
                ops::at(ops::OUTPUT, 0),
                ops::at(ops::OPERAND, 0),
            )
            .unwrap();
        let text = ops::chain(&tasks)
            .unwrap()
            .decode()
            .to_text(Some(0x10_0000));
        common::check_text_fixture(&fixture(name), &text);
    }
}

#[test]
fn the_vendor_float_scalar_add_and_multiply_run_clean() {
    use rknpu_driver::task::{Alu, AluOp, Mul, Stage};
    // The vendor's fp16 "+2" (BS_CFG 0x20050, BS_ALU_CFG fp32 2.0) and "×2" (BS_CFG 0x42,
    // BS_MUL_CFG fp16 2.0 << 16) stages on a flying fp16 task.
    let add = Stage {
        bypass: false,
        alu: Some(Alu {
            op: AluOp::Add,
            operand: 2f32.to_bits() as i32,
            from_memory: false,
        }),
        mul: None,
        relu: false,
        relux: None,
    };
    let mul = Stage {
        bypass: false,
        alu: None,
        mul: Some(Mul::fp16(f16::from_f32(2.0).to_bits())),
        relu: false,
        relux: None,
    };
    let cube = Cube::new(2, 1, 8, Precision::Fp16).unwrap();
    let xs: Vec<f16> = (0..16)
        .map(|i| f16::from_f32(i as f32 * 0.37 - 3.0))
        .collect();
    for (stage, f) in [
        (add, (|x: f32| x + 2.0) as fn(f32) -> f32),
        (mul, |x| x * 2.0),
    ] {
        let mut t = lut_task(
            &hand_recipe(),
            2,
            1,
            ops::at(ops::INPUT, 0),
            ops::at(ops::OUTPUT, 0),
            false,
        );
        let d = t.dpu.as_mut().unwrap();
        d.ew = None;
        d.bn = Stage::BYPASSED;
        d.bs = stage;
        d.out_cvt = OutCvt::IDENTITY;
        d.out_cvt.fp32_to_fp16 = true;
        let (run, bytes) = simulate(&[t], cube.pack(&xs).unwrap(), 32);
        let run = run.unwrap();
        assert!(run.lints.is_empty(), "{:?}", run.lints);
        let out: Vec<f16> = cube.unpack(&bytes).unwrap();
        for (x, y) in xs.iter().zip(&out) {
            assert_eq!(y.to_f32(), f16::from_f32(f(x.to_f32())).to_f32(), "x = {x}");
        }
    }
}

#[test]
fn the_fp32_silu_runs_clean_and_its_error_is_bounded() {
    use rknpu_driver::kernels::ops::lut::{FP32_SILU_CARRIER, fp32_silu_tasks};
    // Every fp16 value in [-8, 8], as fp32.
    let xs: Vec<f32> = every_fp16(-8.0, 8.0).iter().map(|x| x.to_f32()).collect();
    let atoms = xs.len().div_ceil(4);
    let h = atoms.div_ceil(4096);
    let cube = Cube::new(4096, h as u32, 4, Precision::Fp32).unwrap();
    let mut padded = xs.clone();
    padded.resize(cube.elems(), 0.0);
    let tasks =
        fp32_silu_tasks(&cube, ops::at(ops::INPUT, 0), ops::at(ops::OUTPUT, 0), true).unwrap();
    // The published program's values: no lint at all.
    let (run, _) = simulate(&tasks, cube.pack(&padded).unwrap(), cube.bytes() as usize);
    let run = run.unwrap();
    assert!(run.lints.is_empty(), "{:?}", run.lints);
    let program = ops::chain(&tasks).unwrap();
    let out = run_program(
        &emu(),
        &program,
        ProgramBuffers::new()
            .input(ops::INPUT, cube.pack(&padded).unwrap())
            .output(ops::OUTPUT, cube.bytes() as usize),
    )
    .unwrap();
    let ys: Vec<f32> = cube.unpack(&out[0]).unwrap();
    let (mut max, mut sq, mut rel) = (0f64, 0f64, 0f64);
    for (x, y) in xs.iter().zip(&ys) {
        let want = exact(Activation::Silu, f64::from(*x));
        let e = (f64::from(*y / FP32_SILU_CARRIER) - want).abs();
        max = max.max(e);
        sq += e * e;
        if want.abs() >= 1.0 / 64.0 {
            rel = rel.max(e / want.abs());
        }
    }
    let rms = (sq / xs.len() as f64).sqrt();
    println!(
        "| silu (fp32 pipeline, x 4096 carrier) | [-8, 8] | {} | {max:.3e} | {rms:.3e} | {rel:.3e} | 2.5e-4 |",
        xs.len()
    );
    assert!(max <= 2.5e-4, "fp32 SiLU max abs error {max}");
}

#[test]
fn each_activation_raises_the_lints_its_docs_name() {
    // (activation, lut-quirk messages expected: signed decode, flat run; unvalidated)
    let cases = [
        (Activation::Relu, false, false, false),
        (Activation::Relu6, false, false, true),
        (Activation::Sigmoid, false, false, false),
        (Activation::Tanh, true, false, false),
        (Activation::Exp, false, false, false),
        (Activation::Silu, false, false, false),
        (Activation::Gelu, false, false, false),
    ];
    let cube = Cube::new(1, 1, 8, Precision::Fp16).unwrap();
    let xs = vec![f16::from_f32(-0.75); 8];
    for (a, signed, flat, unvalidated) in cases {
        let op = ActivationOp::new(a, cube).unwrap();
        let tasks = op
            .tasks(
                ops::at(ops::INPUT, 0),
                ops::at(ops::OUTPUT, 0),
                ops::at(ops::OPERAND, 0),
            )
            .unwrap();
        let program = ops::chain(&tasks).unwrap();
        let addr = |b: BufferId| -> Option<u64> {
            Some(match b {
                ops::REGCMD => 0x10_0000,
                ops::INPUT => 0x20_0000,
                ops::OPERAND => 0x30_0000,
                ops::OUTPUT => 0x40_0000,
                _ => return None,
            })
        };
        let words = program.bind(addr).unwrap();
        let mut sim = Simulator::new();
        sim.memory_mut()
            .map(0x10_0000, words_to_le_bytes(&words))
            .unwrap();
        sim.memory_mut()
            .map(0x20_0000, cube.pack(&xs).unwrap())
            .unwrap();
        if let Some(o) = op.operand().unwrap() {
            sim.memory_mut().map(0x30_0000, o).unwrap();
        }
        sim.memory_mut().map_zeroed(0x40_0000, 16).unwrap();
        let run = sim
            .kick(&Kick::new(0x10_0000, program.tasks()[0].regcfg_amount))
            .unwrap();
        let has = |kind: LintKind, text: &str| {
            run.lints
                .iter()
                .any(|l| l.kind == kind && l.message.contains(text))
        };
        assert_eq!(
            has(LintKind::LutQuirk, "signed"),
            signed,
            "{a}: {:?}",
            run.lints
        );
        assert_eq!(
            has(LintKind::LutQuirk, "flat run"),
            flat,
            "{a}: {:?}",
            run.lints
        );
        assert!(
            !has(LintKind::LutQuirk, "equal to 0"),
            "{a}: {:?}",
            run.lints
        );
        assert_eq!(
            has(LintKind::Unvalidated, ""),
            unvalidated,
            "{a}: {:?}",
            run.lints
        );
        let out: Vec<f16> = cube
            .unpack(&sim.memory().read_vec(0x40_0000, 16).unwrap())
            .unwrap();
        let want = exact(a, -0.75);
        assert!(
            (f64::from(out[0].to_f32()) - want).abs() <= bound(a).max(1e-3),
            "{a}"
        );
    }
}
