//! `rknpu op conv`: a K×K convolution of seeded data on the CNA and CORE.

use crate::element::{ElementArg, only};
use crate::op::{Common, execute, summary, verdict};
use crate::{Failure, usage};
use half::f16;
use rknpu_driver::compute::ops::ProgramBuffers;
use rknpu_driver::kernels::ops::conv::{Conv2d, ConvOut, reference};
use rknpu_driver::kernels::ops::{self, Cube, INPUT, OUTPUT, WEIGHTS};
use rknpu_driver::seeded::Rng;
use rknpu_driver::task::Precision;

/// The arguments of `rknpu op conv`.
#[derive(clap::Args)]
pub(crate) struct ConvArgs {
    /// Input height.
    #[arg(long, value_name = "H", value_parser = clap::value_parser!(u32).range(1..=8192))]
    h: u32,
    /// Input width.
    #[arg(long, value_name = "W", value_parser = clap::value_parser!(u32).range(1..=8192))]
    w: u32,
    /// Input channels.
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u32).range(1..=8192))]
    c: u32,
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
    let fail = |e: rknpu_driver::Error| Failure(1, e.to_string());
    let bad = |e: rknpu_driver::Error| usage(format!("op conv: {e}"));
    let prec = a.dtype.precision();
    let (stride, pad, dil) = (
        a.stride.unwrap_or(1),
        a.pad.unwrap_or(0),
        a.dilation.unwrap_or(1),
    );
    let input = Cube::new(a.w, a.h, a.c, prec).map_err(bad)?;
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
    let (ow, oh) = conv.output_size().map_err(bad)?;
    let tasks = conv
        .tasks_at(ops::at(INPUT, 0), ops::at(WEIGHTS, 0), ops::at(OUTPUT, 0))
        .map_err(fail)?;
    let program = ops::chain(&tasks).map_err(fail)?;
    outln!(
        "conv: {}x{}x{} {prec} * {} kernel(s) of {}x{}{} stride {stride} pad {pad} dilation {dil} -> {oh}x{ow}x{}",
        a.h,
        a.w,
        a.c,
        a.oc,
        a.kh,
        a.kw,
        if a.depthwise { " (depthwise)" } else { "" },
        a.oc
    );
    summary(&program);
    let dev = a.common.open()?;
    let mut rng = Rng::from_seed(a.common.seed());
    let per_kernel = if a.depthwise { 1 } else { a.c as usize };
    let n_w = a.oc as usize * (a.kh * a.kw) as usize * per_kernel;
    let out_cube = conv.output_cube().map_err(fail)?;
    let out_len = out_cube.bytes() as usize;
    let (x, w, packed_x, packed_w): (Vec<f64>, Vec<f64>, Vec<u8>, Vec<u8>) = match prec {
        Precision::Int8 => {
            let x: Vec<i8> = (0..input.elems())
                .map(|_| rng.int(-128, 127) as i8)
                .collect();
            let w: Vec<i8> = (0..n_w).map(|_| rng.int(-127, 127) as i8).collect();
            (
                x.iter().map(|&v| f64::from(v)).collect(),
                w.iter().map(|&v| f64::from(v)).collect(),
                conv.pack_input(&x).map_err(fail)?,
                conv.pack_weights(&w).map_err(fail)?,
            )
        }
        _ => {
            let mut val = || f16::from_f32(rng.int(-1000, 1000) as f32 / 1000.0);
            let x: Vec<f16> = (0..input.elems()).map(|_| val()).collect();
            let w: Vec<f16> = (0..n_w).map(|_| val()).collect();
            (
                x.iter().map(|&v| f64::from(v.to_f32())).collect(),
                w.iter().map(|&v| f64::from(v.to_f32())).collect(),
                conv.pack_input(&x).map_err(fail)?,
                conv.pack_weights(&w).map_err(fail)?,
            )
        }
    };
    let bytes = execute(
        &dev,
        &program,
        ProgramBuffers::new()
            .input(INPUT, packed_x)
            .input(WEIGHTS, packed_w)
            .output(OUTPUT, out_len),
    )?;
    let want = reference(&conv, &x, &w, 0.0).map_err(fail)?;
    let abs = reference(
        &conv,
        &x.iter().map(|v| v.abs()).collect::<Vec<_>>(),
        &w.iter().map(|v| v.abs()).collect::<Vec<_>>(),
        0.0,
    )
    .map_err(fail)?;
    let got: Vec<f64> = match prec {
        Precision::Int8 => conv
            .unpack_output::<i32>(&bytes[0])
            .map_err(fail)?
            .into_iter()
            .map(f64::from)
            .collect(),
        _ => conv
            .unpack_output::<f16>(&bytes[0])
            .map_err(fail)?
            .into_iter()
            .map(|v| f64::from(v.to_f32()))
            .collect(),
    };
    // int8 sums are exact. fp16: fp32 summation in any order of the window's K products
    // keeps |error| <= (K + 1) 2^-24 sum |x w|, and the fp16 result adds at most half an
    // ulp: 2^-11 (|exact| + that) for normal values, 2^-25 below them.
    let k = f64::from(a.kh * a.kw) * per_kernel as f64;
    let mut worst = 0f64;
    let mut within = true;
    for ((g, e), s) in got.iter().zip(&want).zip(&abs) {
        let err = (g - e).abs();
        worst = worst.max(err);
        let bound = match prec {
            Precision::Int8 => 0.0,
            _ => {
                let sum = (k + 1.0) * 2f64.powi(-24) * s;
                sum + 2f64.powi(-11) * (e.abs() + sum) + 2f64.powi(-25)
            }
        };
        within &= err <= bound;
    }
    verdict(
        worst,
        within,
        match prec {
            Precision::Int8 => "exact",
            _ => "fp32 summation and fp16 rounding bound",
        },
    )
}
