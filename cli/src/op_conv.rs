//! `rknpu op conv`: a K×K convolution of seeded data on the CNA and CORE.

use crate::element::{ElementArg, only};
use crate::op::{Common, check};
use crate::{Failure, usage};
use rknpu_driver::kernels::ops::conv::{Conv2d, ConvOut};

/// The arguments of `rknpu op conv`.
#[derive(clap::Args)]
pub(crate) struct ConvArgs {
    #[command(flatten)]
    shape: crate::op::Shape,
    /// Output channels (with --depthwise: C).
    #[arg(long, value_name = "OC", value_parser = clap::value_parser!(u32).range(1..=8192))]
    oc: u32,
    /// Kernel height.
    #[arg(long, value_name = "KH", value_parser = clap::value_parser!(u32).range(1..=32))]
    kh: u32,
    /// Kernel width.
    #[arg(long, value_name = "KW", value_parser = clap::value_parser!(u32).range(1..=32))]
    kw: u32,
    /// Stride in both directions (default 1).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u32).range(1..=8))]
    stride: Option<u32>,
    /// Padding on every side (default 0).
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u32).range(0..=15))]
    pad: Option<u32>,
    /// Dilation in both directions (default 1).
    #[arg(long, value_name = "D", value_parser = clap::value_parser!(u32).range(1..=32))]
    dilation: Option<u32>,
    /// One kernel per channel.
    #[arg(long)]
    depthwise: bool,
    /// The element type: int8 (int8 input and weights, int32 results, exact) or fp16
    /// (fp16 results, fp32 accumulation).
    #[arg(long, value_parser = only(&[ElementArg::Int8, ElementArg::Fp16]))]
    dtype: ElementArg,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(a: ConvArgs) -> Result<(), Failure> {
    let bad = |e: rknpu_driver::Error| usage(format!("op conv: {e}"));
    let prec = a.dtype.precision();
    let (stride, pad, dil) = (
        a.stride.unwrap_or(1),
        a.pad.unwrap_or(0),
        a.dilation.unwrap_or(1),
    );
    let input = a.shape.cube(prec, "op conv")?;
    let conv = Conv2d::new(input, a.oc, (a.kh, a.kw))
        .with_stride(stride, stride)
        .with_pad_symmetric(pad)
        .with_dilation(dil, dil)
        .with_depthwise(a.depthwise)
        .with_out(match a.dtype {
            ElementArg::Fp16 => ConvOut::Fp16,
            _ => ConvOut::Int32,
        });
    conv.check().map_err(bad)?;
    check("conv", &conv, &a.common)
}
