//! Whole programs: the golden decoded programs, the vendor's float scalar operations, the
//! fp32 SiLU and the lints each activation raises.

use super::*;
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};

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
                &Bindings::new()
                    .bind(Role::Input, ops::at(ops::INPUT, 0))
                    .bind(Role::Output, ops::at(ops::OUTPUT, 0))
                    .bind(Role::Operand, ops::at(ops::OPERAND, 0)),
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
                &Bindings::new()
                    .bind(Role::Input, ops::at(ops::INPUT, 0))
                    .bind(Role::Output, ops::at(ops::OUTPUT, 0))
                    .bind(Role::Operand, ops::at(ops::OPERAND, 0)),
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
