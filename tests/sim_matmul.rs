//! Matmul programs built with the regcmd builder, run on the simulator and compared with a
//! CPU reference: every precision pair, both operand layouts, the DPU post-processing
//! stages, a chained split-K add, several cores, and property tests over shapes and values.
//!
//! Integer results must be exact. Float results (fp16/bf16 inputs, fp32/fp16/bf16
//! outputs) must lie within the error bound of fp32 summation in any order:
//! `|sim − exact| ≤ K·2⁻²⁴·Σ|aᵢ·bᵢ|` plus half an output ulp for 16-bit outputs. The
//! products of two fp16 or bf16 values are exact in fp32, so summation is the only fp32
//! error; the bound holds whatever order the hardware's adder tree uses (docs/simulator.md).

mod common;

use common::Rng;
use proptest::prelude::*;
use rknpu_driver::float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use rknpu_driver::kernels::single::{
    self, Dtype, Layout, OutType, PostOps, SingleMatmul, add_task,
};
use rknpu_driver::regcmd::{BlockMask, BufferId, DmaAddr, ProgramBuilder, words_to_le_bytes};
use rknpu_driver::sim::{CoreRun, Kick, LintKind, Simulator};

/// Device addresses: buffer id b lives at (b + 1) × 256 MiB.
fn addr(b: BufferId) -> Option<u64> {
    Some(0x1000_0000 * (b.0 as u64 + 1))
}

fn a32(b: BufferId) -> u32 {
    addr(b).unwrap() as u32
}

/// Runs a one-task program with the given packed operands; returns the run and C's bytes.
fn run(mm: &SingleMatmul, a: Vec<u8>, b: Vec<u8>, e: Option<Vec<u8>>) -> (CoreRun, Vec<u8>) {
    let program = mm.program().unwrap();
    let words = program.bind(addr).unwrap();
    let mut sim = Simulator::new();
    let mem = sim.memory_mut();
    mem.map(a32(single::REGCMD), words_to_le_bytes(&words))
        .unwrap();
    mem.map(a32(single::A), a).unwrap();
    mem.map(a32(single::B), b).unwrap();
    mem.map_zeroed(a32(single::C), mm.c_bytes()).unwrap();
    if let Some(e) = e {
        mem.map(a32(single::E), e).unwrap();
    }
    let kick = Kick::new(a32(single::REGCMD), program.tasks()[0].regcfg_amount);
    let r = sim.kick(&kick).unwrap();
    assert!(r.completed, "{r:?}");
    assert_eq!(r.tasks_run, 1);
    // The generator writes every register it relies on and stays inside the envelopes:
    // only the int4 saturation hazard of long K may be reported.
    let unexpected: Vec<_> = r
        .lints
        .iter()
        .filter(|l| l.kind != LintKind::Int4Saturation)
        .collect();
    assert!(unexpected.is_empty(), "{mm:?}: {unexpected:?}");
    let c = sim.memory().read_vec(a32(single::C), mm.c_bytes()).unwrap();
    (r, c)
}

fn shr_half_up(v: i64, s: u32) -> i64 {
    if s == 0 { v } else { (v + (1 << (s - 1))) >> s }
}

/// The integer reference: exact sums, then the DPU stages as docs/simulator.md states them.
fn int_reference(mm: &SingleMatmul, a: &[i32], b: &[i32], e: &[i32]) -> Vec<i64> {
    let (m, k, n) = (mm.m as usize, mm.k as usize, mm.n as usize);
    let p = mm.post;
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let mut x: i64 = (0..k)
                .map(|kk| a[i * k + kk] as i64 * b[kk * n + j] as i64)
                .sum();
            if mm.dtype == Dtype::Int4 {
                x = x.clamp(i16::MIN as i64, i16::MAX as i64);
            }
            if let Some(bias) = p.bias {
                x += bias as i64;
            }
            if let Some((mul, shift)) = p.scale {
                x = shr_half_up(x * mul as i64, shift as u32);
            }
            if p.relu {
                x = x.max(0);
            }
            if let Some(cap) = p.clip {
                x = x.min(cap as i64);
            }
            if p.add {
                x += e[i * n + j] as i64;
            }
            if let Some((offset, scale, shift)) = p.out_cvt {
                // Offset after the rounding shift, as measured on RK3588
                // (gregordinary/rocket-userspace `tests/requant_model.h`).
                x = shr_half_even(x * scale as i64, shift as u32) + offset as i64;
            }
            let (lo, hi) = match mm.out {
                OutType::Int8 => (i8::MIN as i64, i8::MAX as i64),
                OutType::Int16 => (i16::MIN as i64, i16::MAX as i64),
                _ => (i32::MIN as i64, i32::MAX as i64),
            };
            out.push(x.clamp(lo, hi));
        }
    }
    out
}

fn shr_half_even(v: i64, s: u32) -> i64 {
    if s == 0 {
        return v;
    }
    let q = v >> s;
    let rem = v - (q << s);
    let half = 1i64 << (s - 1);
    if rem > half || (rem == half && q & 1 == 1) {
        q + 1
    } else {
        q
    }
}

/// Random integer operands, a run, and the comparison with the reference.
fn check_int(mm: SingleMatmul, seed: u64) {
    let mut rng = Rng(seed | 1);
    let (lo, hi) = mm.dtype.int_range();
    let a: Vec<i32> = (0..mm.m * mm.k).map(|_| rng.int(lo, hi)).collect();
    let b: Vec<i32> = (0..mm.k * mm.n).map(|_| rng.int(lo, hi)).collect();
    let e: Vec<i32> = (0..mm.m * mm.n)
        .map(|_| rng.int(-100_000, 100_000))
        .collect();
    check_int_values(mm, &a, &b, &e);
}

fn check_int_values(mm: SingleMatmul, a: &[i32], b: &[i32], e: &[i32]) {
    let e_bytes = mm.post.add.then(|| mm.pack_e_int(e).unwrap());
    let (r, c) = run(
        &mm,
        mm.pack_a_int(a).unwrap(),
        mm.pack_b_int(b).unwrap(),
        e_bytes,
    );
    assert_eq!(
        r.macs,
        mm.m as u64 * mm.padded_k() as u64 * mm.padded_n() as u64
    );
    let want = int_reference(&mm, a, b, e);
    if mm.out == OutType::Fp32 {
        let got = mm.unpack_c_f32(&c).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(*g, *w as f32, "{mm:?}: element {i}");
        }
    } else {
        let got = mm.unpack_c_int(&c).unwrap();
        if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "{mm:?}: element ({}, {}) is {} but the reference says {}",
                i / mm.n as usize,
                i % mm.n as usize,
                got[i],
                want[i]
            );
        }
    }
}

/// Rounds like the packers do, so the reference sees the values the NPU sees.
fn quantise(dtype: Dtype, v: f32) -> f32 {
    match dtype {
        Dtype::Fp16 => f16_to_f32(f32_to_f16(v)),
        _ => bf16_to_f32(f32_to_bf16(v)),
    }
}

fn check_float(mm: SingleMatmul, seed: u64) {
    let mut rng = Rng(seed | 1);
    let a: Vec<f32> = (0..mm.m * mm.k).map(|_| rng.float()).collect();
    let b: Vec<f32> = (0..mm.k * mm.n).map(|_| rng.float()).collect();
    let e: Vec<f32> = (0..mm.m * mm.n).map(|_| rng.float() * 4.0).collect();
    let e_bytes = mm.post.add.then(|| mm.pack_e_f32(&e).unwrap());
    let (_, c) = run(
        &mm,
        mm.pack_a_f32(&a).unwrap(),
        mm.pack_b_f32(&b).unwrap(),
        e_bytes,
    );
    let got = mm.unpack_c_f32(&c).unwrap();
    let (m, k, n) = (mm.m as usize, mm.k as usize, mm.n as usize);
    for i in 0..m {
        for j in 0..n {
            let mut exact = 0f64;
            let mut magnitude = 0f64;
            for kk in 0..k {
                let p = quantise(mm.dtype, a[i * k + kk]) as f64
                    * quantise(mm.dtype, b[kk * n + j]) as f64;
                exact += p;
                magnitude += p.abs();
            }
            if mm.post.add {
                exact += e[i * n + j] as f64;
                magnitude += (e[i * n + j] as f64).abs();
            }
            let mut tol = (k as f64 + 1.0) * 2f64.powi(-24) * magnitude;
            tol += match mm.out {
                OutType::Fp16 => exact.abs() * 2f64.powi(-11) + 2f64.powi(-25),
                OutType::Bf16 => exact.abs() * 2f64.powi(-8) + 2f64.powi(-134),
                _ => 0.0,
            };
            let g = got[i * n + j] as f64;
            assert!(
                (g - exact).abs() <= tol,
                "{mm:?}: ({i}, {j}) = {g}, exact {exact}, tolerance {tol}"
            );
        }
    }
}

fn with(mut mm: SingleMatmul, f: impl FnOnce(&mut SingleMatmul)) -> SingleMatmul {
    f(&mut mm);
    mm
}

#[test]
fn int8_to_int32_in_every_layout() {
    for (a, c) in [
        (Layout::Plain, Layout::Plain),
        (Layout::Plain, Layout::Native),
        (Layout::Native, Layout::Native),
    ] {
        for (m, k, n) in [(1, 32, 32), (5, 70, 40), (16, 96, 64), (33, 31, 97)] {
            check_int(
                with(SingleMatmul::new(m, k, n, Dtype::Int8), |mm| {
                    mm.a_layout = a;
                    mm.c_layout = c;
                }),
                (m * k * n) as u64,
            );
        }
    }
}

#[test]
fn int8_to_fp32_and_int8() {
    check_int(
        with(SingleMatmul::new(7, 64, 32, Dtype::Int8), |mm| {
            mm.out = OutType::Fp32
        }),
        1,
    );
    check_int(
        with(SingleMatmul::new(7, 64, 32, Dtype::Int8), |mm| {
            mm.out = OutType::Int8;
            mm.post.out_cvt = Some((-3, 3, 9));
        }),
        2,
    );
    // Saturation at the int8 output.
    check_int(
        with(SingleMatmul::new(3, 64, 64, Dtype::Int8), |mm| {
            mm.out = OutType::Int8
        }),
        3,
    );
}

#[test]
fn int8_post_processing_stages() {
    let posts = [
        PostOps {
            bias: Some(-5000),
            ..PostOps::default()
        },
        PostOps {
            scale: Some((-3, 4)),
            ..PostOps::default()
        },
        PostOps {
            relu: true,
            ..PostOps::default()
        },
        PostOps {
            clip: Some(1000),
            relu: true,
            ..PostOps::default()
        },
        PostOps {
            add: true,
            ..PostOps::default()
        },
        PostOps {
            bias: Some(77),
            scale: Some((5, 2)),
            relu: true,
            clip: Some(20_000),
            add: true,
            out_cvt: None,
        },
    ];
    for (i, post) in posts.into_iter().enumerate() {
        for c in [Layout::Plain, Layout::Native] {
            check_int(
                with(SingleMatmul::new(6, 64, 64, Dtype::Int8), |mm| {
                    mm.post = post;
                    mm.c_layout = c;
                }),
                10 + i as u64,
            );
        }
    }
}

#[test]
fn int4_to_int16_including_saturation() {
    for (a, c) in [
        (Layout::Plain, Layout::Native),
        (Layout::Native, Layout::Native),
        (Layout::Plain, Layout::Plain),
    ] {
        check_int(
            with(SingleMatmul::new(9, 96, 128, Dtype::Int4), |mm| {
                mm.a_layout = a;
                mm.c_layout = c;
            }),
            5,
        );
    }
    // 1024 × (−8) × (−8) = 65536 overflows int16: the CORE saturates at 32767.
    let mm = SingleMatmul::new(2, 1024, 64, Dtype::Int4);
    let a = vec![-8; 2 * 1024];
    let b = vec![-8; 1024 * 64];
    check_int_values(mm, &a, &b, &[]);
    let (_, c) = run(
        &mm,
        mm.pack_a_int(&a).unwrap(),
        mm.pack_b_int(&b).unwrap(),
        None,
    );
    assert!(mm.unpack_c_int(&c).unwrap().iter().all(|&v| v == 32767));
}

#[test]
fn int4_nibble_order_is_even_index_high() {
    // An asymmetric vector (docs/hardware/matmul-programs.md#int4-nibble-order): A = [1, 0, 0, ...], B column j = [j - 8, 3, ...].
    let mm = SingleMatmul::new(1, 32, 64, Dtype::Int4);
    let mut a = vec![0; 32];
    a[0] = 1;
    let b: Vec<i32> = (0..32 * 64)
        .map(|i| if i < 64 { (i % 16) - 8 } else { 3 })
        .collect();
    let packed_a = mm.pack_a_int(&a).unwrap();
    assert_eq!(packed_a[0], 0x10, "k = 0 in the high nibble");
    check_int_values(mm, &a, &b, &[]);
}

#[test]
fn int16_to_int32() {
    for c in [Layout::Plain, Layout::Native] {
        check_int(
            with(SingleMatmul::new(5, 64, 32, Dtype::Int16), |mm| {
                mm.c_layout = c
            }),
            6,
        );
    }
}

#[test]
fn fp16_and_bf16_within_the_fp32_summation_bound() {
    for dtype in [Dtype::Fp16, Dtype::Bf16] {
        let outs = if dtype == Dtype::Fp16 {
            [OutType::Fp32, OutType::Fp16]
        } else {
            [OutType::Fp32, OutType::Bf16]
        };
        for out in outs {
            for (a, c) in [
                (Layout::Plain, Layout::Plain),
                (Layout::Native, Layout::Native),
            ] {
                check_float(
                    with(SingleMatmul::new(6, 200, 48, dtype), |mm| {
                        mm.out = out;
                        mm.a_layout = a;
                        mm.c_layout = c;
                    }),
                    7,
                );
            }
        }
    }
    check_float(
        with(SingleMatmul::new(4, 64, 32, Dtype::Fp16), |mm| {
            mm.post.add = true
        }),
        8,
    );
}

/// K split in two waves of native int32 partials, then the DPU-only add task
/// (docs/hardware/matmul-programs.md#npu-k-reduction) sums them: three chained tasks in one kick.
#[test]
fn split_k_waves_chained_with_an_add_task() {
    let (m, k, n) = (8u32, 128u32, 64u32);
    let half = |kk| {
        with(SingleMatmul::new(m, kk, n, Dtype::Int8), |mm| {
            mm.a_layout = Layout::Native;
            mm.c_layout = Layout::Native;
        })
    };
    let (w0, w1) = (half(64), half(64));
    let ids = |i: u32| BufferId(10 + i);
    let (a0, a1, b0, b1, p0, p1, out) = (ids(0), ids(1), ids(2), ids(3), ids(4), ids(5), ids(6));
    let r = |b| DmaAddr::reloc(b, 0);
    let mut p = ProgramBuilder::new(single::REGCMD);
    p.push_task(
        w0.body_at(r(a0), r(b0), r(p0), r(ids(7))).unwrap(),
        BlockMask::CONV,
    );
    p.push_task(
        w1.body_at(r(a1), r(b1), r(p1), r(ids(7))).unwrap(),
        BlockMask::CONV,
    );
    p.push_task(
        add_task(m, n, r(p0), r(p1), r(out)).unwrap(),
        BlockMask::ELEMENTWISE,
    );
    let program = p.build().unwrap();
    let place = |b: BufferId| Some(0x0100_0000 * (b.0 as u64 + 1));
    let words = program.bind(place).unwrap();

    let mut rng = Rng(99);
    let a: Vec<i32> = (0..m * k).map(|_| rng.int(-128, 127)).collect();
    let b: Vec<i32> = (0..k * n).map(|_| rng.int(-128, 127)).collect();
    let slice_a = |lo: u32| -> Vec<i32> {
        (0..m)
            .flat_map(|i| (lo..lo + 64).map(move |kk| (i, kk)))
            .map(|(i, kk)| a[(i * k + kk) as usize])
            .collect()
    };
    let slice_b = |lo: u32| -> Vec<i32> { b[(lo * n) as usize..((lo + 64) * n) as usize].to_vec() };
    let mut sim = Simulator::new();
    let at = |b: BufferId| place(b).unwrap() as u32;
    let mem = sim.memory_mut();
    mem.map(at(single::REGCMD), words_to_le_bytes(&words))
        .unwrap();
    mem.map(at(a0), w0.pack_a_int(&slice_a(0)).unwrap())
        .unwrap();
    mem.map(at(a1), w1.pack_a_int(&slice_a(64)).unwrap())
        .unwrap();
    mem.map(at(b0), w0.pack_b_int(&slice_b(0)).unwrap())
        .unwrap();
    mem.map(at(b1), w1.pack_b_int(&slice_b(64)).unwrap())
        .unwrap();
    for buf in [p0, p1, out] {
        mem.map_zeroed(at(buf), w0.c_bytes()).unwrap();
    }
    let run = sim
        .kick(&Kick {
            task_number: Some(3),
            ..Kick::new(at(single::REGCMD), program.tasks()[0].regcfg_amount)
        })
        .unwrap();
    assert!(run.completed && run.tasks_run == 3, "{run:?}");
    assert_eq!(
        run.raw_status & 0x300,
        0x300,
        "tasks alternate ping-pong groups"
    );
    let got = w0
        .unpack_c_int(&sim.memory().read_vec(at(out), w0.c_bytes()).unwrap())
        .unwrap();
    let full = SingleMatmul::new(m, k, n, Dtype::Int8);
    assert_eq!(got, int_reference(&full, &a, &b, &[]));
}

/// N split across three cores, one kick each: each core computes its own columns.
#[test]
fn three_cores_split_n() {
    let (m, k) = (4u32, 64u32);
    let mut rng = Rng(3);
    let a: Vec<i32> = (0..m * k).map(|_| rng.int(-128, 127)).collect();
    let mut sim = Simulator::new();
    let mut kicks = Vec::new();
    let mut expected = Vec::new();
    for core in 0..3u32 {
        let n = 32 * (core + 1);
        let mm = SingleMatmul::new(m, k, n, Dtype::Int8);
        let b: Vec<i32> = (0..k * n).map(|_| rng.int(-128, 127)).collect();
        let base = 0x1000_0000 * (core + 1);
        let program = mm.program().unwrap();
        let words = program
            .bind(|buf| Some(base as u64 + 0x100_0000 * buf.0 as u64))
            .unwrap();
        let mem = sim.memory_mut();
        mem.map(base, words_to_le_bytes(&words)).unwrap();
        mem.map(base + 0x100_0000, mm.pack_a_int(&a).unwrap())
            .unwrap();
        mem.map(base + 0x200_0000, mm.pack_b_int(&b).unwrap())
            .unwrap();
        mem.map_zeroed(base + 0x300_0000, mm.c_bytes()).unwrap();
        kicks.push(Kick {
            core: core as usize,
            ..Kick::new(base, program.tasks()[0].regcfg_amount)
        });
        expected.push((mm, base + 0x300_0000, int_reference(&mm, &a, &b, &[])));
    }
    let runs = sim.kick_all(&kicks).unwrap();
    for (core, run) in runs.iter().enumerate() {
        assert_eq!(run.core, core);
        assert!(run.completed);
        assert!(run.lints.is_empty(), "{:?}", run.lints);
    }
    for (mm, at, want) in expected {
        let got = mm
            .unpack_c_int(&sim.memory().read_vec(at, mm.c_bytes()).unwrap())
            .unwrap();
        assert_eq!(got, want);
    }
    assert!(
        sim.kick_all(&[kicks[0], kicks[0]]).is_err(),
        "one core twice"
    );
}

/// The worked example (mtx512's int8 matmul; docs/provenance.md) (the golden fixture program) with
/// random operands in its layouts: A native [K/16][M][16], C native [N/4][M][4].
#[test]
fn worked_example_gives_the_product() {
    use rknpu_driver::kernels::worked_example as we;
    let program = we::program().unwrap();
    let words = program.bind(we::fixture_address).unwrap();
    let mut rng = Rng(42);
    let a: Vec<i32> = (0..4 * 32).map(|_| rng.int(-128, 127)).collect();
    let b: Vec<i32> = (0..32 * 32).map(|_| rng.int(-128, 127)).collect();
    let mut a_bytes = vec![0u8; 128];
    for m in 0..4 {
        for kk in 0..32 {
            a_bytes[((kk / 16) * 4 + m) * 16 + kk % 16] = a[m * 32 + kk] as i8 as u8;
        }
    }
    let mut b_bytes = vec![0u8; 1024];
    for kk in 0..32 {
        for n in 0..32 {
            b_bytes[n * 32 + kk] = b[kk * 32 + n] as i8 as u8;
        }
    }
    let at = |b| we::fixture_address(b).unwrap() as u32;
    let mut sim = Simulator::new();
    let mem = sim.memory_mut();
    mem.map(at(we::REGCMD), words_to_le_bytes(&words)).unwrap();
    mem.map(at(we::INPUT), a_bytes).unwrap();
    mem.map(at(we::WEIGHTS), b_bytes).unwrap();
    mem.map_zeroed(at(we::OUTPUT), 512).unwrap();
    let run = sim
        .kick(&Kick::new(at(we::REGCMD), program.tasks()[0].regcfg_amount))
        .unwrap();
    assert!(run.completed);
    assert!(run.lints.is_empty(), "{:?}", run.lints);
    let out = sim.memory().read_vec(at(we::OUTPUT), 512).unwrap();
    for m in 0..4 {
        for n in 0..32 {
            let o = ((n / 4) * 4 + m) * 16 + (n % 4) * 4;
            let got = i32::from_le_bytes(out[o..o + 4].try_into().unwrap());
            let want: i32 = (0..32).map(|kk| a[m * 32 + kk] * b[kk * 32 + n]).sum();
            assert_eq!(got, want, "C[{m}][{n}]");
        }
    }
}

fn dtype_strategy() -> impl Strategy<Value = Dtype> {
    prop_oneof![
        Just(Dtype::Int8),
        Just(Dtype::Int4),
        Just(Dtype::Int16),
        Just(Dtype::Fp16),
        Just(Dtype::Bf16)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any shape that fits one task, any layout pair the registers can express, any values:
    /// the simulated result equals the reference.
    #[test]
    fn simulated_matmul_equals_the_reference(
        dtype in dtype_strategy(),
        m in 1u32..40,
        k in 1u32..300,
        n in 1u32..130,
        native_a in any::<bool>(),
        native_c in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mm = with(SingleMatmul::new(m, k, n, dtype), |mm| {
            mm.a_layout = if native_a { Layout::Native } else { Layout::Plain };
            mm.c_layout = if native_a || native_c { Layout::Native } else { Layout::Plain };
        });
        if dtype.is_float() {
            check_float(mm, seed);
        } else {
            check_int(mm, seed);
        }
    }
}
