//! The dequantisation and the requantisation over a cube against the CPU reference:
//! property tests and edge shapes.

use super::*;

/// Row-major `[m][n]` values as an fp32 cube `Cube::new(m, 1, n)`.
fn dequant_case(m: u32, n: u32, out: Precision, seed: u64) {
    let mut rng = Rng(seed | 1);
    let cube = Cube::new(m, 1, n, Precision::Fp32).unwrap();
    let x: Vec<f32> = (0..m * n).map(|_| rng.int(-40000, 40000) as f32).collect();
    let w: Vec<f32> = (0..n).map(|_| rng.float() * 0.01 + 0.02).collect();
    let s = 0.003f32;
    let dq = Dequant::new(s, out).unwrap();
    let tasks = dequant_tasks(dq, cube, &w, ops::INPUT, ops::OUTPUT);
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
    let op = RequantOp::new(rq, cube, &b, &mults).unwrap();
    let roles = [
        (Role::Input, ops::INPUT),
        (Role::Params, ops::PARAMS),
        (Role::Output, ops::OUTPUT),
    ];
    let tasks = bound(&op, &roles).unwrap();
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
