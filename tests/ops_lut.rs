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
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
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
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0))
                .bind(Role::Operand, ops::at(ops::OPERAND, 0)),
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

/// Every finite fp16 value in `[lo, hi]`.
fn every_fp16(lo: f64, hi: f64) -> Vec<f16> {
    (0..=u16::MAX)
        .map(f16::from_bits)
        .filter(|x| x.is_finite() && f64::from(x.to_f32()) >= lo && f64::from(x.to_f32()) <= hi)
        .collect()
}

/// The documented bounds (docs/ops.md, `Activation::error_bound`): max abs error over
/// every fp16 input of the range. Each is about twice the measured figure and far below
/// what a shifted index or a swapped table gives (the shift test below).
fn bound(a: Activation) -> f64 {
    a.error_bound()
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

#[path = "ops_lut/errors.rs"]
mod errors;
#[path = "ops_lut/programs.rs"]
mod programs;
#[path = "ops_lut/ram.rs"]
mod ram;
