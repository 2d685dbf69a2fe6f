//! Epilogues in programs: after an fp16 multiply, on an int8 matmul, from int32
//! accumulators, and the whole feed-forward chain.

use super::*;
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};

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
    let dq = Dequant::new(s, Precision::Fp16).unwrap();
    let mut tasks = dequant_tasks(dq, cube, &w, ops::INPUT, MIDDLE);
    let mul = eltwise::Eltwise::new(eltwise::EltwiseOp::Mul, h16, eltwise::Operand::Tensor)
        .unwrap()
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(MIDDLE, 0))
                .bind(Role::Operand, ops::at(ops::OPERAND, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
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
    let dq = Dequant::new(s, Precision::Fp16).unwrap();
    let op = DequantOp::new(dq, cube, &w).unwrap();
    let roles = [
        (Role::Input, ops::INPUT),
        (Role::Scratch, SCRATCH),
        (Role::Params, ops::PARAMS),
        (Role::Output, ops::OUTPUT),
    ];
    let tasks = bound(&op, &roles).unwrap();
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
    // An fp32 cube has no cast task; the int32 path's scratch is not its.
    let op = DequantOp::new(dq, f32cube, &w).unwrap();
    assert!(op.ports().unwrap().iter().all(|p| p.role != Role::Scratch));
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
    let dq = Dequant::new(s, Precision::Fp16).unwrap();
    tasks.extend(dequant_tasks(dq, acc_cube, &w, ACC, MIDDLE));
    tasks.extend(
        eltwise::Eltwise::new(eltwise::EltwiseOp::Mul, h16, eltwise::Operand::Tensor)
            .unwrap()
            .tasks(
                &Bindings::new()
                    .bind(Role::Input, ops::at(MIDDLE, 0))
                    .bind(Role::Operand, ops::at(ops::OPERAND, 0))
                    .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
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
