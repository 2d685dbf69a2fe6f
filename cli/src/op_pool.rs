//! `rknpu op pool`: max, average or min pooling of a seeded tensor on the PPU.

use crate::element::{ElementArg, only};
use crate::op::{Common, execute, summary, verdict};
use crate::{Failure, usage};
use half::f16;
use rknpu_driver::compute::ops::ProgramBuffers;
use rknpu_driver::kernels::ops::pool::{Pool2d, PoolKind, SCRATCH, reference};
use rknpu_driver::kernels::ops::{Cube, INPUT, OUTPUT};
use rknpu_driver::seeded::Rng;
use rknpu_driver::task::Precision;

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
    /// Input height.
    #[arg(long, value_name = "H", value_parser = clap::value_parser!(u32).range(1..=8192))]
    h: u32,
    /// Input width.
    #[arg(long, value_name = "W", value_parser = clap::value_parser!(u32).range(1..=8192))]
    w: u32,
    /// Channels.
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u32).range(1..=8192))]
    c: u32,
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
    let fail = |e: rknpu_driver::Error| Failure(1, e.to_string());
    let (kind, name) = match a.kind {
        KindArg::Max => (PoolKind::Max, "max"),
        KindArg::Avg => (PoolKind::Avg, "avg"),
        KindArg::Min => (PoolKind::Min, "min"),
    };
    let prec = a.dtype.precision();
    let input = Cube::new(a.w, a.h, a.c, prec).map_err(|e| usage(format!("op pool: {e}")))?;
    let stride = a.stride.unwrap_or(a.k);
    let pool = Pool2d::new(input, kind, a.k)
        .with_stride(stride, stride)
        .with_pad(a.pad.unwrap_or(0));
    let out = pool.output().map_err(|e| usage(format!("op pool: {e}")))?;
    let program = pool.program().map_err(fail)?;
    outln!(
        "pool: {name} {}x{} stride {stride} pad {} of {}x{}x{} {} -> {}x{}x{}",
        a.k,
        a.k,
        a.pad.unwrap_or(0),
        a.h,
        a.w,
        a.c,
        prec,
        out.height,
        out.width,
        out.channels
    );
    summary(&program);
    let dev = a.common.open()?;
    // Values on a grid of 1/16 in [-8, 8) (fp16) or the whole int8 range: exact in
    // either type, so only the average's reciprocals and rounding can differ.
    let mut rng = Rng::from_seed(a.common.seed());
    let x: Vec<f32> = (0..input.elems())
        .map(|_| match prec {
            Precision::Int8 => rng.int(-128, 127) as f32,
            _ => rng.int(-128, 127) as f32 / 16.0,
        })
        .collect();
    let packed = match prec {
        Precision::Int8 => input.pack(&x.iter().map(|&v| v as i8).collect::<Vec<_>>()),
        _ => input.pack(&x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>()),
    }
    .map_err(fail)?;
    let mut buffers = ProgramBuffers::new()
        .input(INPUT, packed)
        .output(OUTPUT, out.bytes() as usize);
    let scratch = pool.scratch_bytes().map_err(fail)?;
    if scratch > 0 {
        buffers = buffers.output(SCRATCH, scratch as usize);
    }
    let bytes = execute(&dev, &program, buffers)?;
    let got: Vec<f32> = match prec {
        Precision::Int8 => out
            .unpack::<i8>(&bytes[0])
            .map_err(fail)?
            .into_iter()
            .map(f32::from)
            .collect(),
        _ => out
            .unpack::<f16>(&bytes[0])
            .map_err(fail)?
            .into_iter()
            .map(f32::from)
            .collect(),
    };
    let want = reference(&pool, &x).map_err(fail)?;
    // Max and min are exact. The average multiplies by the fp16 reciprocal of each side
    // (off by e = |fp16(65536/k)·k/65536 − 1|) and rounds to fp16 (2^-11 relative).
    let recip = f16::from_f64(65536.0 / f64::from(a.k)).to_f64();
    let e = (recip * f64::from(a.k) / 65536.0 - 1.0).abs();
    let rel = match kind {
        PoolKind::Avg => 2.0 * e + 2f64.powi(-11) + 1e-6,
        _ => 0.0,
    };
    let mut worst = 0f64;
    let mut within = true;
    for (g, w) in got.iter().zip(&want) {
        let err = f64::from((g - w).abs());
        worst = worst.max(err);
        within &= err <= rel * f64::from(w.abs()) + 1e-7;
    }
    let bound = match kind {
        PoolKind::Avg => format!("bound {rel:.1e} x |mean| from the fp16 reciprocal and rounding"),
        _ => "exact".to_string(),
    };
    verdict(worst, within, &bound)
}
