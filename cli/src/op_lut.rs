//! `rknpu op lut`: a LUT activation of a seeded tensor on the DPU.

use crate::element::{ElementArg, only};
use crate::op::{Common, check};
use crate::{Failure, usage};
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::lut::{Activation, ActivationOp};

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
    let cube = Cube::new(a.w, a.h, a.c, a.dtype.precision()).map_err(bad)?;
    let op = ActivationOp::new(act, cube).map_err(bad)?;
    check("lut", &op, &a.common)
}
