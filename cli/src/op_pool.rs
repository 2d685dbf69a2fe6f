//! `rknpu op pool`: max, average or min pooling of a seeded tensor on the PPU.

use crate::Failure;
use crate::element::{ElementArg, only};
use crate::op::{Common, check};
use rknpu_driver::kernels::ops::pool::{Pool2d, PoolKind};

/// The reduction `--kind` names.
#[derive(Clone, Copy, clap::ValueEnum)]
enum KindArg {
    /// The largest value of each window.
    Max,
    /// The mean of each window (padding counted as 0).
    Avg,
    /// The smallest value of each window.
    Min,
}

/// The arguments of `rknpu op pool`.
#[derive(clap::Args)]
pub(crate) struct PoolArgs {
    /// The reduction.
    #[arg(long, value_enum)]
    kind: KindArg,
    #[command(flatten)]
    shape: crate::op::Shape,
    /// The window side (1..=16).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=16))]
    k: u32,
    /// The step between windows (default: K).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u32).range(1..=16))]
    stride: Option<u32>,
    /// Padding on every side (default 0).
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u32).range(0..=7))]
    pad: Option<u32>,
    /// The element type: int8 (max and min) or fp16.
    #[arg(long, value_parser = only(&[ElementArg::Int8, ElementArg::Fp16]))]
    dtype: ElementArg,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(a: PoolArgs) -> Result<(), Failure> {
    let kind = match a.kind {
        KindArg::Max => PoolKind::Max,
        KindArg::Avg => PoolKind::Avg,
        KindArg::Min => PoolKind::Min,
    };
    let prec = a.dtype.precision();
    let input = a.shape.cube(prec, "op pool")?;
    let stride = a.stride.unwrap_or(a.k);
    let pool = Pool2d::new(input, kind, a.k)
        .with_stride(stride, stride)
        .with_pad(a.pad.unwrap_or(0));
    check("pool", &pool, &a.common)
}
