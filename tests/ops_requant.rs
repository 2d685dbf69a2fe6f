//! Requantisation epilogues (`kernels::ops::epilogue`) on the emulated kernel and the
//! simulator against an independent CPU reference (plain loops on row-major data written
//! here): the fp32 → fp16 dequantisation over a whole cube and its chain into an fp16
//! element-wise multiply (the feed-forward path), the int32 → int8 requantisation with
//! bias and per-channel multipliers, the output converter's rounding, and refusals.

mod common;

use common::Rng;
use half::f16;
use proptest::prelude::*;
use rknpu_driver::Error;
use rknpu_driver::compute::ops::{ProgramBuffers, run_program};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::ops::epilogue::{Dequant, OutScale, Requant};
use rknpu_driver::kernels::ops::{self, Cube, eltwise};
use rknpu_driver::regcmd::{BufferId, DmaAddr, Program, words_to_le_bytes};
use rknpu_driver::sim::{CoreRun, Kick, LintKind, Simulator};
use rknpu_driver::task::Precision;

/// The intermediate tensor of a two-operation chain.
const MIDDLE: BufferId = BufferId(6);

fn addr(b: BufferId) -> Option<u64> {
    Some(0x1000_0000 * (b.0 as u64 + 1))
}

/// Runs a program on the simulator with the given inputs; returns the run and the
/// output buffer's first `out_len` bytes.
fn on_sim(p: &Program, inputs: &[(BufferId, Vec<u8>)], out_len: usize) -> (CoreRun, Vec<u8>) {
    let words = p.bind(addr).unwrap();
    let a32 = |id| addr(id).unwrap() as u32;
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    m.map(a32(ops::REGCMD), words_to_le_bytes(&words)).unwrap();
    for (id, bytes) in inputs {
        m.map(a32(*id), bytes.clone()).unwrap();
    }
    m.map_zeroed(a32(ops::OUTPUT), out_len).unwrap();
    let r = sim
        .kick(&Kick::new(a32(ops::REGCMD), p.tasks()[0].regcfg_amount))
        .unwrap();
    assert!(r.completed, "{r:?}");
    let out = sim.memory().read_vec(a32(ops::OUTPUT), out_len).unwrap();
    (r, out)
}

fn f16r(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// The independent dequantisation reference: `(x · fp16(s)) · fp16(w[c])` in fp32.
fn dequant_ref(x: &[f32], s: f32, w: &[f32], fp16: bool) -> Vec<f32> {
    let c = w.len();
    let mut out = Vec::new();
    for p in 0..x.len() / c {
        for ch in 0..c {
            let y = (x[p * c + ch] * f16r(s)) * f16r(w[ch]);
            out.push(if fp16 { f16r(y) } else { y });
        }
    }
    out
}

/// Row-major `[m][n]` values as an fp32 cube `Cube::new(m, 1, n)`.
fn dequant_case(m: u32, n: u32, out: Precision, seed: u64) {
    let mut rng = Rng(seed | 1);
    let cube = Cube::new(m, 1, n, Precision::Fp32).unwrap();
    let x: Vec<f32> = (0..m * n).map(|_| rng.int(-40000, 40000) as f32).collect();
    let w: Vec<f32> = (0..n).map(|_| rng.float() * 0.01 + 0.02).collect();
    let s = 0.003f32;
    let dq = Dequant::new(s, out).unwrap();
    let tasks = dq
        .tasks(
            cube,
            ops::at(ops::INPUT, 0),
            ops::at(ops::PARAMS, 0),
            ops::at(ops::OUTPUT, 0),
        )
        .unwrap();
    let program = ops::chain(&tasks).unwrap();
    let oc = cube.with_precision(out).unwrap();
    let dev = Device::open_spec("emu").unwrap();
    let got = run_program(
        &dev,
        &program,
        ProgramBuffers::new()
            .input(ops::INPUT, cube.pack(&x).unwrap())
            .input(ops::PARAMS, Dequant::coefficients(&w).unwrap())
            .output(ops::OUTPUT, oc.bytes() as usize),
    )
    .unwrap();
    let want = dequant_ref(&x, s, &w, out == Precision::Fp16);
    let got: Vec<f32> = if out == Precision::Fp16 {
        oc.unpack::<f16>(&got[0])
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect()
    } else {
        oc.unpack::<f32>(&got[0]).unwrap()
    };
    assert_eq!(got, want, "{m}x{n} to {out}");
    assert_eq!(dq.reference(&x, &w).unwrap(), want);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn dequant_over_a_cube_matches_the_reference(
        m in 1u32..=9, n8 in 1u32..=6, fp16 in any::<bool>(), seed in any::<u64>(),
    ) {
        let out = if fp16 { Precision::Fp16 } else { Precision::Fp32 };
        dequant_case(m, n8 * 8, out, seed);
    }

    #[test]
    fn requant_matches_the_reference(
        w in 1u32..=5, h in 1u32..=2, c16 in 1u32..=3, bias in any::<bool>(),
        per_channel in any::<bool>(), zp in -20i32..=20, seed in any::<u64>(),
    ) {
        requant_case(w, h, c16 * 16, bias, per_channel, zp, seed);
    }
}

#[test]
fn dequant_edges() {
    // fp32 channel counts not a multiple of 8; one pixel; the tiling limit.
    dequant_case(3, 12, Precision::Fp32, 5);
    dequant_case(1, 64, Precision::Fp16, 6);
    dequant_case(eltwise::MAX_TASK_WIDTH + 1, 8, Precision::Fp16, 7);
}

/// The feed-forward path after the int8 matmul's fp32 output: dequantisation to fp16,
/// then an fp16 multiply by a second tensor (`SiLU(gate) · up` with the activation
/// computed elsewhere), in one program with the intermediate tensor in device memory.
#[test]
fn dequant_to_fp16_then_fp16_multiply_in_one_program() {
    let (m, n) = (6u32, 32u32);
    let mut rng = Rng(99);
    let cube = Cube::new(m, 1, n, Precision::Fp32).unwrap();
    let x: Vec<f32> = (0..m * n).map(|_| rng.int(-3000, 3000) as f32).collect();
    let w: Vec<f32> = (0..n).map(|_| rng.float() * 0.004 + 0.005).collect();
    let up: Vec<f16> = (0..m * n)
        .map(|_| f16::from_f32(rng.float() * 4.0))
        .collect();
    let s = 0.02;
    let h16 = cube.with_precision(Precision::Fp16).unwrap();
    let mut tasks = Dequant::new(s, Precision::Fp16)
        .unwrap()
        .tasks(
            cube,
            ops::at(ops::INPUT, 0),
            ops::at(ops::PARAMS, 0),
            ops::at(MIDDLE, 0),
        )
        .unwrap();
    let mul = eltwise::Eltwise::new(eltwise::EltwiseOp::Mul, h16, eltwise::Operand::Tensor)
        .unwrap()
        .tasks(
            ops::at(MIDDLE, 0),
            ops::at(ops::OPERAND, 0),
            ops::at(ops::OUTPUT, 0),
        )
        .unwrap();
    tasks.extend(mul);
    let program = ops::chain(&tasks).unwrap();
    // On the simulator, with the intermediate tensor in a region of its own: written by
    // the first task, read by the second (the layer programs of examples/ffn_block.rs
    // run the same chain through the emulated kernel).
    let (r, out) = on_sim(
        &program,
        &[
            (ops::INPUT, cube.pack(&x).unwrap()),
            (ops::PARAMS, Dequant::coefficients(&w).unwrap()),
            (ops::OPERAND, h16.pack(&up).unwrap()),
            (MIDDLE, vec![0; h16.bytes() as usize]),
        ],
        h16.bytes() as usize,
    );
    let got: Vec<f16> = h16.unpack(&out).unwrap();
    let middle = dequant_ref(&x, s, &w, true);
    for (i, g) in got.iter().enumerate() {
        let want = f16r(middle[i] * up[i].to_f32());
        assert_eq!(g.to_f32(), want, "element {i}");
    }
    // The fp16 output of the fp32 pipeline is derived: the simulator says so.
    assert_eq!(r.tasks_run, 2);
    assert!(
        r.lints.iter().any(|l| l.kind == LintKind::Unvalidated),
        "{:?}",
        r.lints
    );
}

/// `v ⟫ s` rounded to nearest: ties up or to even (written here independently).
fn round_shift(v: i64, s: u32, half_up: bool) -> i64 {
    if s == 0 {
        return v;
    }
    let d = (1i64 << s) as f64;
    let exact = v as f64 / d;
    let fl = exact.floor();
    let frac = exact - fl;
    let fl = fl as i64;
    if frac > 0.5 || (frac == 0.5 && (half_up || fl % 2 != 0)) {
        fl + 1
    } else {
        fl
    }
}

fn requant_case(w: u32, h: u32, c: u32, bias: bool, per_channel: bool, zp: i32, seed: u64) {
    let mut rng = Rng(seed | 1);
    let cube = Cube::new(w, h, c, Precision::Int32).unwrap();
    let acc: Vec<i32> = (0..cube.elems()).map(|_| rng.int(-60000, 60000)).collect();
    let b: Vec<i32> = if bias {
        (0..c).map(|_| rng.int(-5000, 5000)).collect()
    } else {
        Vec::new()
    };
    let (rq, mults) = if per_channel {
        let scales: Vec<f32> = (0..c).map(|_| rng.float().abs() * 0.002 + 0.0005).collect();
        let (mut rq, m) = Requant::per_channel(&scales, zp).unwrap();
        if bias {
            rq = rq.with_bias();
        }
        (rq, m)
    } else {
        let mut rq = Requant::per_tensor(OutScale::from_scale(0.0017, zp).unwrap());
        if bias {
            rq = rq.with_bias();
        }
        (rq, Vec::new())
    };
    let params = rq.params(c, &b, &mults).unwrap();
    let tasks = rq
        .tasks(
            cube,
            ops::at(ops::INPUT, 0),
            ops::at(ops::PARAMS, 0),
            ops::at(ops::OUTPUT, 0),
        )
        .unwrap();
    let oc = cube.with_precision(Precision::Int8).unwrap();
    let dev = Device::open_spec("emu").unwrap();
    let out = run_program(
        &dev,
        &ops::chain(&tasks).unwrap(),
        ProgramBuffers::new()
            .input(ops::INPUT, cube.pack(&acc).unwrap())
            .input(ops::PARAMS, params)
            .output(ops::OUTPUT, oc.bytes() as usize),
    )
    .unwrap();
    let got: Vec<i8> = oc.unpack(&out[0]).unwrap();
    for (i, &a) in acc.iter().enumerate() {
        let ch = i % c as usize;
        let mut v = a as i64;
        if bias {
            v += b[ch] as i64;
        }
        if let Some(s) = rq.channel_shift {
            v = round_shift(v * mults[ch] as i64, s, true);
        }
        v = round_shift(v * rq.out.scale as i64, rq.out.shift, false) + rq.out.offset as i64;
        assert_eq!(got[i] as i64, v.clamp(-128, 127), "element {i} ({a})");
    }
    assert_eq!(rq.reference(&acc, c as usize, &b, &mults).unwrap(), got);
}

#[test]
fn requant_edges() {
    requant_case(3, 1, 16, true, true, 5, 1);
    requant_case(eltwise::MAX_TASK_WIDTH + 2, 1, 16, true, false, -3, 2);
}

/// The output converter rounds ties to even and adds its offset after the rounding
/// shift, then saturates: the RK3588 measurement of gregordinary/rocket-userspace
/// (`tests/requant_model.h`, probe `tests/requant_round_probe`). With SCALE 1, SHIFT 1,
/// OFFSET 1: 3 → round(1.5) = 2, + 1 = 3 (adding the offset first would give
/// (3 + 1) / 2 = 2); 5 → round(2.5) = 2 → 3; 7 → 4 → 5; −3 → −2 → −1; 300 → 151 → 127.
#[test]
fn the_output_converter_rounds_ties_to_even_and_offsets_after_rounding() {
    let rq = Requant::per_tensor(OutScale::new(1, 1, 1));
    let cube = Cube::new(1, 1, 16, Precision::Int32).unwrap();
    let mut acc = vec![0i32; 16];
    acc[..6].copy_from_slice(&[3, 5, 7, -3, 300, -300]);
    let tasks = rq
        .tasks(
            cube,
            ops::at(ops::INPUT, 0),
            ops::at(ops::PARAMS, 0),
            ops::at(ops::OUTPUT, 0),
        )
        .unwrap();
    let (r, out) = on_sim(
        &ops::chain(&tasks).unwrap(),
        &[
            (ops::INPUT, cube.pack(&acc).unwrap()),
            (ops::PARAMS, vec![0; 16]),
        ],
        16,
    );
    assert_eq!(
        out[..6].iter().map(|&b| b as i8).collect::<Vec<_>>(),
        [3, 3, 5, -1, 127, -128]
    );
    // A flying int32 → int8 task is derived from Mesa's convolution: the lint says so.
    assert!(r.lints.iter().any(|l| l.kind == LintKind::Unvalidated));
}

#[test]
fn refusals_are_typed_errors() {
    let a = ops::at(ops::INPUT, 0);
    assert!(matches!(
        Dequant::new(1e9, Precision::Fp16),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        Dequant::new(0.5, Precision::Int8),
        Err(Error::Unsupported { .. })
    ));
    let dq = Dequant::new(0.5, Precision::Fp16).unwrap();
    let odd = Cube::new(2, 1, 12, Precision::Fp32).unwrap();
    assert!(matches!(
        dq.tasks(odd, a, a, a),
        Err(Error::Unsupported { .. })
    ));
    let i32c = Cube::new(2, 1, 8, Precision::Int32).unwrap();
    assert!(matches!(
        dq.tasks(i32c, a, a, a),
        Err(Error::Unsupported { .. })
    ));
    let rq = Requant::per_tensor(OutScale::new(1, 0, 0));
    assert!(matches!(
        rq.tasks(i32c, a, a, a),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        rq.with_channel_multipliers(64),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        Requant::per_channel(&[0.1, -0.2], 0),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        rq.with_bias().params(4, &[1, 2], &[]),
        Err(Error::InvalidArgument { .. })
    ));
    let mut no_dpu = rknpu_driver::kernels::single::add_task_model(
        4,
        4,
        DmaAddr::Fixed(0),
        DmaAddr::Fixed(0),
        DmaAddr::Fixed(0),
    )
    .unwrap();
    no_dpu.dpu = None;
    assert!(matches!(
        rq.apply(&mut no_dpu, a),
        Err(Error::InvalidArgument { .. })
    ));
}

/// The decoded programs, reviewed: the dequantisation to fp16 of a 4 × 1 × 32 fp32 cube,
/// and the int32 → int8 requantisation with bias and per-channel multipliers of a
/// 4 × 1 × 16 cube.
#[test]
fn decoded_programs_match_the_golden_fixtures() {
    let fixture = |name: &str| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/ops")
            .join(name)
    };
    let (i, p, o) = (
        ops::at(ops::INPUT, 0),
        ops::at(ops::PARAMS, 0),
        ops::at(ops::OUTPUT, 0),
    );
    let dq = Dequant::new(0.125, Precision::Fp16)
        .unwrap()
        .tasks(Cube::new(4, 1, 32, Precision::Fp32).unwrap(), i, p, o)
        .unwrap();
    common::check_text_fixture(
        &fixture("requant-dequant-fp16-4x1x32.txt"),
        &ops::chain(&dq).unwrap().decode().to_text(None),
    );
    let rq = Requant::per_tensor(OutScale::from_scale(0.0017, -5).unwrap())
        .with_bias()
        .with_channel_multipliers(14)
        .unwrap()
        .tasks(Cube::new(4, 1, 16, Precision::Int32).unwrap(), i, p, o)
        .unwrap();
    common::check_text_fixture(
        &fixture("requant-int8-bias-per-channel-4x1x16.txt"),
        &ops::chain(&rq).unwrap().decode().to_text(None),
    );
}

/// The epilogue on an int8 matmul's DPU (the conv-fed path of Mesa's int8 convolution):
/// bias through BRDMA and the per-tensor converter, int8 out in the native layout
/// `[N/16][M][16]`, checked against plain loops. Only the bias path is Mesa's; the
/// per-channel multiplier variant raises `unvalidated`.
#[test]
fn the_epilogue_on_an_int8_matmul() {
    use rknpu_driver::kernels::single::{Dtype, Layout, SingleMatmul};
    let (m, k, n) = (4u32, 64u32, 32u32);
    let mut rng = Rng(5);
    let a: Vec<i32> = (0..m * k).map(|_| rng.int(-128, 127)).collect();
    let b: Vec<i32> = (0..k * n).map(|_| rng.int(-128, 127)).collect();
    let bias: Vec<i32> = (0..n).map(|_| rng.int(-20000, 20000)).collect();
    let mm = SingleMatmul {
        c_layout: Layout::Native,
        ..SingleMatmul::new(m, k, n, Dtype::Int8)
    };
    for per_channel in [false, true] {
        let (rq, mults) = if per_channel {
            let scales: Vec<f32> = (0..n).map(|c| 0.001 + c as f32 * 0.0001).collect();
            let (rq, ms) = Requant::per_channel(&scales, 3).unwrap();
            (rq.with_bias(), ms)
        } else {
            (
                Requant::per_tensor(OutScale::from_scale(0.0021, 3).unwrap()).with_bias(),
                Vec::new(),
            )
        };
        let mut task = mm
            .task_at(
                ops::at(ops::INPUT, 0),
                ops::at(ops::WEIGHTS, 0),
                ops::at(ops::OUTPUT, 0),
                ops::at(ops::OPERAND, 0),
            )
            .unwrap();
        rq.apply(&mut task, ops::at(ops::PARAMS, 0)).unwrap();
        let program = ops::chain(&[task]).unwrap();
        let oc = Cube::new(m, 1, n, Precision::Int8).unwrap();
        let (r, out) = on_sim(
            &program,
            &[
                (ops::INPUT, mm.pack_a_int(&a).unwrap()),
                (ops::WEIGHTS, mm.pack_b_int(&b).unwrap()),
                (ops::PARAMS, rq.params(n, &bias, &mults).unwrap()),
            ],
            oc.bytes() as usize,
        );
        let got: Vec<i8> = oc.unpack(&out).unwrap();
        let mut acc = vec![0i32; (m * n) as usize];
        for i in 0..m as usize {
            for j in 0..n as usize {
                acc[i * n as usize + j] = (0..k as usize)
                    .map(|x| a[i * k as usize + x] * b[x * n as usize + j])
                    .sum();
            }
        }
        for (i, &v) in acc.iter().enumerate() {
            let ch = i % n as usize;
            let mut x = v as i64 + bias[ch] as i64;
            if per_channel {
                x = round_shift(x * mults[ch] as i64, 14, true);
            }
            x = round_shift(x * rq.out.scale as i64, rq.out.shift, false) + rq.out.offset as i64;
            assert_eq!(got[i] as i64, x.clamp(-128, 127), "element {i}");
        }
        let derived = r.lints.iter().any(|l| l.kind == LintKind::Unvalidated);
        assert_eq!(derived, per_channel, "{:?}", r.lints);
    }
}

/// int32 accumulators → fp32 (a flying cast into a scratch cube) → fp16 dequantisation,
/// against plain loops; the cast and the fp16 output are derived and say so.
#[test]
fn dequant_from_int32_accumulators() {
    const SCRATCH: BufferId = BufferId(7);
    let (m, n) = (5u32, 24u32);
    let mut rng = Rng(17);
    let cube = Cube::new(m, 1, n, Precision::Int32).unwrap();
    // Full-range values: most need rounding to fit fp32's 24 bits.
    let acc: Vec<i32> = (0..m * n).map(|_| (rng.next() >> 32) as i32).collect();
    let w: Vec<f32> = (0..n).map(|_| rng.float() * 0.001 + 0.002).collect();
    let s = 1.0 / 4096.0;
    let tasks = Dequant::new(s, Precision::Fp16)
        .unwrap()
        .int32_tasks(
            cube,
            ops::at(ops::INPUT, 0),
            ops::at(SCRATCH, 0),
            ops::at(ops::PARAMS, 0),
            ops::at(ops::OUTPUT, 0),
        )
        .unwrap();
    assert_eq!(tasks.len(), 2);
    let oc = cube.with_precision(Precision::Fp16).unwrap();
    let (r, out) = on_sim(
        &ops::chain(&tasks).unwrap(),
        &[
            (ops::INPUT, cube.pack(&acc).unwrap()),
            (ops::PARAMS, Dequant::coefficients(&w).unwrap()),
            (SCRATCH, vec![0; cube.bytes() as usize]),
        ],
        oc.bytes() as usize,
    );
    assert_eq!(r.tasks_run, 2);
    let got: Vec<f16> = oc.unpack(&out).unwrap();
    // int32 → fp32 rounds to nearest even, as `as f32` does.
    let x: Vec<f32> = acc.iter().map(|&v| v as f32).collect();
    let want = dequant_ref(&x, s, &w, true);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.to_f32(), want[i], "element {i}");
    }
    let derived = r
        .lints
        .iter()
        .filter(|l| l.kind == LintKind::Unvalidated)
        .count();
    assert!(derived >= 2, "{:?}", r.lints);
    let f32cube = cube.with_precision(Precision::Fp32).unwrap();
    let a = ops::at(ops::INPUT, 0);
    assert!(matches!(
        Dequant::new(s, Precision::Fp16)
            .unwrap()
            .int32_tasks(f32cube, a, a, a, a),
        Err(Error::Unsupported { .. })
    ));
}

/// The feed-forward path from the matmul itself: an int8 matmul writing fp32 in the native
/// layout, the dequantisation to fp16 and the fp16 multiply, chained in one program: the
/// matmul's output cube is `Cube::new(m, 1, n, Fp32)` and the multiply's output is the
/// fp16 cube an fp16 matmul reads.
#[test]
fn int8_matmul_then_dequant_then_fp16_multiply() {
    use rknpu_driver::kernels::single::{Dtype, Layout, OutType, SingleMatmul};
    const ACC: BufferId = BufferId(7);
    let (m, k, n) = (3u32, 64u32, 32u32);
    let mut rng = Rng(41);
    let a: Vec<i32> = (0..m * k).map(|_| rng.int(-128, 127)).collect();
    let b: Vec<i32> = (0..k * n).map(|_| rng.int(-128, 127)).collect();
    let w: Vec<f32> = (0..n).map(|_| rng.float() * 0.002 + 0.003).collect();
    let up: Vec<f16> = (0..m * n)
        .map(|_| f16::from_f32(rng.float() * 2.0))
        .collect();
    let s = 0.01;
    let mm = SingleMatmul {
        out: OutType::Fp32,
        c_layout: Layout::Native,
        ..SingleMatmul::new(m, k, n, Dtype::Int8)
    };
    let acc_cube = Cube::new(m, 1, n, Precision::Fp32).unwrap();
    let h16 = acc_cube.with_precision(Precision::Fp16).unwrap();
    let mut tasks = vec![
        mm.task_at(
            ops::at(ops::INPUT, 0),
            ops::at(ops::WEIGHTS, 0),
            ops::at(ACC, 0),
            ops::at(ops::OPERAND, 0),
        )
        .unwrap(),
    ];
    tasks.extend(
        Dequant::new(s, Precision::Fp16)
            .unwrap()
            .tasks(
                acc_cube,
                ops::at(ACC, 0),
                ops::at(ops::PARAMS, 0),
                ops::at(MIDDLE, 0),
            )
            .unwrap(),
    );
    tasks.extend(
        eltwise::Eltwise::new(eltwise::EltwiseOp::Mul, h16, eltwise::Operand::Tensor)
            .unwrap()
            .tasks(
                ops::at(MIDDLE, 0),
                ops::at(ops::OPERAND, 0),
                ops::at(ops::OUTPUT, 0),
            )
            .unwrap(),
    );
    let (r, out) = on_sim(
        &ops::chain(&tasks).unwrap(),
        &[
            (ops::INPUT, mm.pack_a_int(&a).unwrap()),
            (ops::WEIGHTS, mm.pack_b_int(&b).unwrap()),
            (ops::PARAMS, Dequant::coefficients(&w).unwrap()),
            (ops::OPERAND, h16.pack(&up).unwrap()),
            (ACC, vec![0; acc_cube.bytes() as usize]),
            (MIDDLE, vec![0; h16.bytes() as usize]),
        ],
        h16.bytes() as usize,
    );
    assert_eq!(r.tasks_run, 3);
    let got: Vec<f16> = h16.unpack(&out).unwrap();
    for i in 0..m as usize {
        for j in 0..n as usize {
            let sum: i32 = (0..k as usize)
                .map(|x| a[i * k as usize + x] * b[x * n as usize + j])
                .sum();
            let d = f16r((sum as f32 * f16r(s)) * f16r(w[j]));
            let want = f16r(d * up[i * n as usize + j].to_f32());
            assert_eq!(got[i * n as usize + j].to_f32(), want, "({i}, {j})");
        }
    }
}
