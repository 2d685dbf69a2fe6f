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
use common::lowered::push_k_waves;
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

#[path = "sim_matmul/floats.rs"]
mod floats;
#[path = "sim_matmul/integers.rs"]
mod integers;
#[path = "sim_matmul/programs.rs"]
mod programs;
