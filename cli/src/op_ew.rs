//! `rknpu op ew`: an element-wise operation of two seeded tensors on the DPU.

use crate::element::{ElementArg, only};
use crate::op::{Common, check};
use crate::{Failure, usage};
use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};

/// The operation `--op` names.
#[derive(Clone, Copy, clap::ValueEnum)]
enum OpArg {
    /// A + B.
    Add,
    /// A − B.
    Sub,
    /// A × B.
    Mul,
    /// max(A, B).
    Max,
    /// min(A, B).
    Min,
}

/// The arguments of `rknpu op ew`.
#[derive(clap::Args)]
pub(crate) struct EwArgs {
    /// The operation.
    #[arg(long, value_enum)]
    op: OpArg,
    #[command(flatten)]
    shape: crate::op::Shape,
    /// The element type: int8 or int16 (saturating), or fp16.
    #[arg(long, value_parser = only(&[ElementArg::Int8, ElementArg::Int16, ElementArg::Fp16]))]
    dtype: ElementArg,
    /// B holds one value per channel (broadcast over the pixels) instead of a tensor
    /// of A's shape.
    #[arg(long)]
    per_channel: bool,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(a: EwArgs) -> Result<(), Failure> {
    let op = match a.op {
        OpArg::Add => EltwiseOp::Add,
        OpArg::Sub => EltwiseOp::Sub,
        OpArg::Mul => EltwiseOp::Mul,
        OpArg::Max => EltwiseOp::Max,
        OpArg::Min => EltwiseOp::Min,
    };
    let operand = if a.per_channel {
        Operand::PerChannel
    } else {
        Operand::Tensor
    };
    let bad = |e: rknpu_driver::Error| usage(format!("op ew: {e}"));
    let cube = a.shape.cube(a.dtype.precision(), "op ew")?;
    let ew = Eltwise::new(op, cube, operand).map_err(bad)?;
    check("ew", &ew, &a.common)
}
