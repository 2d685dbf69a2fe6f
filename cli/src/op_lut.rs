//! `rknpu op lut`: a LUT activation of a seeded tensor on the DPU.

use crate::element::{ElementArg, only};
use crate::op::{Common, execute, summary, verdict};
use crate::{Failure, usage};
use half::f16;
use rknpu_driver::compute::ops::ProgramBuffers;
use rknpu_driver::kernels::ops::lut::{Activation, ActivationOp};
use rknpu_driver::kernels::ops::{self, Cube, INPUT, OPERAND, OUTPUT};
use rknpu_driver::seeded::Rng;

/// The function `--fn` names.
#[derive(Clone, Copy, clap::ValueEnum)]
enum FnArg {
    /// max(x, 0).
    Relu,
    /// min(max(x, 0), 6).
    Relu6,
    /// x · sigmoid(x).
    Silu,
    /// x · Φ(x).
    Gelu,
    /// 1 / (1 + e^−x).
    Sigmoid,
    /// tanh(x).
    Tanh,
    /// e^x.
    Exp,
}

/// The arguments of `rknpu op lut`.
#[derive(clap::Args)]
pub(crate) struct LutArgs {
    /// The function.
    #[arg(long = "fn", value_enum, value_name = "FN")]
    function: FnArg,
    /// Height.
    #[arg(long, value_name = "H", value_parser = clap::value_parser!(u32).range(1..=8192))]
    h: u32,
    /// Width.
    #[arg(long, value_name = "W", value_parser = clap::value_parser!(u32).range(1..=8192))]
    w: u32,
    /// Channels.
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u32).range(1..=8192))]
    c: u32,
    /// The element type: fp16, or int8 (refused: no board-run program drives the LUT in
    /// an integer pipeline).
    #[arg(long, value_parser = only(&[ElementArg::Int8, ElementArg::Fp16]))]
    dtype: ElementArg,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(a: LutArgs) -> Result<(), Failure> {
    let fail = |e: rknpu_driver::Error| Failure(1, e.to_string());
    let bad = |e: rknpu_driver::Error| usage(format!("op lut: {e}"));
    let act = match a.function {
        FnArg::Relu => Activation::Relu,
        FnArg::Relu6 => Activation::Relu6,
        FnArg::Silu => Activation::Silu,
        FnArg::Gelu => Activation::Gelu,
        FnArg::Sigmoid => Activation::Sigmoid,
        FnArg::Tanh => Activation::Tanh,
        FnArg::Exp => Activation::Exp,
    };
    let prec = a.dtype.precision();
    let cube = Cube::new(a.w, a.h, a.c, prec).map_err(bad)?;
    let op = ActivationOp::new(act, cube).map_err(bad)?;
    let tasks = op
        .tasks_at(ops::at(INPUT, 0), ops::at(OUTPUT, 0), ops::at(OPERAND, 0))
        .map_err(fail)?;
    let program = ops::chain(&tasks).map_err(fail)?;
    let (lo, hi) = act.input_range();
    outln!(
        "lut: {act} of {}x{}x{} {prec}, inputs in [{lo}, {hi}]",
        a.h,
        a.w,
        a.c
    );
    summary(&program);
    let dev = a.common.open()?;
    // Uniform over the range the bound is stated for, rounded to fp16.
    let mut rng = Rng::from_seed(a.common.seed());
    let x: Vec<f16> = (0..cube.elems())
        .map(|_| {
            let u = f64::from(rng.int(0, 1 << 20)) / f64::from(1 << 20);
            f16::from_f64(lo + (hi - lo) * u)
        })
        .collect();
    let mut buffers = ProgramBuffers::new()
        .input(INPUT, cube.pack(&x).map_err(fail)?)
        .output(OUTPUT, cube.bytes() as usize);
    if let Some(operand) = op.operand().map_err(fail)? {
        buffers = buffers.input(OPERAND, operand);
    }
    let bytes = execute(&dev, &program, buffers)?;
    let got: Vec<f16> = cube.unpack(&bytes[0]).map_err(fail)?;
    let worst = got
        .iter()
        .zip(&x)
        .map(|(g, v)| (f64::from(g.to_f32()) - act.exact(f64::from(v.to_f32()))).abs())
        .fold(0.0, f64::max);
    let bound = act.error_bound();
    verdict(
        worst,
        worst <= bound,
        &format!("bound {bound:.1e} against the exact function (docs/ops.md)"),
    )
}
