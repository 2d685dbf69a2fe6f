//! Any operation of the [`Op`] contract on a device: its buffers allocated by role, its
//! values packed, one job, its result unpacked and held to its reference.

use super::{ProgramBuffers, run_program};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernels::ops;
use crate::kernels::ops::contract::{self, Access, Bindings, Op, Values};
use std::time::{Duration, Instant};

/// Runs `op` on `dev` as one job: each input port holds [`Op::pack`] of its values in
/// `inputs`, constants their bytes, scratch and output fresh buffers; returns the
/// output's values ([`Op::unpack`]). An input port without values, or values of the
/// wrong count, is [`Error::InvalidArgument`] naming the role. Everything allocated is
/// freed when this returns.
pub fn run_op<O: Op + ?Sized>(dev: &Device, op: &O, inputs: &Values) -> Result<Vec<f64>> {
    let ports = op.ports()?;
    let program = ops::chain(&op.tasks(&Bindings::slots(&ports))?)?;
    let out = contract::output(&ports)?;
    let mut buffers = ProgramBuffers::new();
    let mut out_index = 0;
    let mut outputs = 0;
    for p in &ports {
        let id = p.role.buffer();
        buffers = match &p.access {
            Access::Read => {
                let v = inputs.get(&p.role).ok_or_else(|| Error::InvalidArgument {
                    what: format!("no values for the {} of {}", p.role, op.describe()),
                })?;
                buffers.input(id, op.pack(p.role, v)?)
            }
            Access::Constant(bytes) => buffers.input(id, bytes.clone()),
            Access::Scratch | Access::Write => {
                if p.role == out.role {
                    out_index = outputs;
                }
                outputs += 1;
                buffers.output(id, p.bytes as usize)
            }
        };
    }
    let bytes = run_program(dev, &program, buffers)?;
    op.unpack(out.role, &bytes[out_index])
}

/// What [`check_op`] found.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OpCheck {
    /// The largest `|result − reference|` (NaN when a result was NaN).
    pub worst: f64,
    /// Whether every element is within its [`Op::tolerance`].
    pub within: bool,
    /// What the tolerance is.
    pub basis: String,
    /// Elements compared.
    pub elements: usize,
    /// The job's submit and wait.
    pub elapsed: Duration,
}

/// Runs `op` on seeded values ([`contract::sample`] of `seed`) and compares the result
/// with [`Op::reference`] within [`Op::tolerance`].
pub fn check_op<O: Op + ?Sized>(dev: &Device, op: &O, seed: u64) -> Result<OpCheck> {
    let inputs = contract::sample(op, seed)?;
    let t0 = Instant::now();
    let got = run_op(dev, op, &inputs)?;
    let elapsed = t0.elapsed();
    let want = op.reference(&inputs)?;
    let tol = op.tolerance(&inputs, &want)?;
    if got.len() != want.len() || tol.allowed.len() != want.len() {
        return Err(Error::InvalidArgument {
            what: format!(
                "{} results, {} reference values and {} bounds of {}",
                got.len(),
                want.len(),
                tol.allowed.len(),
                op.describe()
            ),
        });
    }
    let mut worst = 0f64;
    let mut within = true;
    for ((g, w), a) in got.iter().zip(&want).zip(&tol.allowed) {
        let err = (g - w).abs();
        worst = if err.is_nan() || worst.is_nan() {
            f64::NAN
        } else {
            worst.max(err)
        };
        within &= err <= *a;
    }
    Ok(OpCheck {
        worst,
        within,
        basis: tol.basis,
        elements: want.len(),
        elapsed,
    })
}
