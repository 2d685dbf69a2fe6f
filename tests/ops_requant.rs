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
use rknpu_driver::kernels::ops::contract::{Bindings, DequantOp, Op, RequantOp, Role, program};
use rknpu_driver::kernels::ops::epilogue::{Dequant, OutScale, Requant};
use rknpu_driver::kernels::ops::{self, Cube, eltwise};
use rknpu_driver::regcmd::{BufferId, DmaAddr, Program, words_to_le_bytes};
use rknpu_driver::sim::{CoreRun, Kick, LintKind, Simulator};
use rknpu_driver::task::{Precision, Task};

/// The tasks of `op` with each role at the address given for it.
fn bound(op: &dyn Op, roles: &[(Role, BufferId)]) -> rknpu_driver::Result<Vec<Task>> {
    op.tasks(
        &roles
            .iter()
            .fold(Bindings::new(), |b, &(r, id)| b.bind(r, ops::at(id, 0))),
    )
}

/// A dequantisation's tasks reading `input`, its scales at `PARAMS`, writing `output`.
fn dequant_tasks(
    dq: Dequant,
    cube: Cube,
    w: &[f32],
    input: BufferId,
    output: BufferId,
) -> Vec<Task> {
    let op = DequantOp::new(dq, cube, w).unwrap();
    let roles = [
        (Role::Input, input),
        (Role::Params, ops::PARAMS),
        (Role::Output, output),
    ];
    bound(&op, &roles).unwrap()
}

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

#[path = "ops_requant/chains.rs"]
mod chains;
#[path = "ops_requant/contract.rs"]
mod contract;
#[path = "ops_requant/cube.rs"]
mod cube;
