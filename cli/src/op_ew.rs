//! `rknpu op ew`: an element-wise operation of two seeded tensors on the DPU.

use crate::element::{ElementArg, only};
use crate::op::{Common, execute, summary, verdict};
use crate::{Failure, usage};
use half::f16;
use rknpu_driver::compute::ops::ProgramBuffers;
use rknpu_driver::kernels::ops::eltwise::{EltwiseOp, EwElement, Operand, reference};
use rknpu_driver::kernels::ops::{self, Cube, Element, INPUT, OPERAND, OUTPUT};
use rknpu_driver::seeded::Rng;
use rknpu_driver::task::Precision;

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
    /// Height.
    #[arg(long, value_name = "H", value_parser = clap::value_parser!(u32).range(1..=8192))]
    h: u32,
    /// Width.
    #[arg(long, value_name = "W", value_parser = clap::value_parser!(u32).range(1..=8192))]
    w: u32,
    /// Channels.
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u32).range(1..=8192))]
    c: u32,
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

/// Runs the operation for element type `T`, made from seeded integers by `make`;
/// returns the largest difference from the reference.
fn check<T: EwElement + Element + PartialEq>(
    dev: &rknpu_driver::device::Device,
    op: EltwiseOp,
    cube: Cube,
    operand: Operand,
    rng: &mut Rng,
    make: impl Fn(&mut Rng) -> T,
    value: impl Fn(T) -> f64,
) -> Result<f64, Failure> {
    let fail = |e: rknpu_driver::Error| Failure(1, e.to_string());
    let ew = rknpu_driver::kernels::ops::eltwise::Eltwise::new(op, cube, operand)
        .map_err(|e| usage(format!("op ew: {e}")))?;
    let b_cube = ew.operand_cube();
    let tasks = ew
        .tasks_at(ops::at(INPUT, 0), ops::at(OPERAND, 0), ops::at(OUTPUT, 0))
        .map_err(fail)?;
    let program = ops::chain(&tasks).map_err(fail)?;
    summary(&program);
    let a: Vec<T> = (0..cube.elems()).map(|_| make(rng)).collect();
    let b: Vec<T> = (0..b_cube.elems()).map(|_| make(rng)).collect();
    let bytes = execute(
        dev,
        &program,
        ProgramBuffers::new()
            .input(INPUT, cube.pack(&a).map_err(fail)?)
            .input(OPERAND, b_cube.pack(&b).map_err(fail)?)
            .output(OUTPUT, cube.bytes() as usize),
    )?;
    let got: Vec<T> = cube.unpack(&bytes[0]).map_err(fail)?;
    let want = reference(op, operand, cube.channels as usize, &a, &b).map_err(fail)?;
    Ok(got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| {
            if g == w {
                0.0
            } else {
                (value(g) - value(w)).abs().max(f64::MIN_POSITIVE)
            }
        })
        .fold(0.0, f64::max))
}

pub(crate) fn run(a: EwArgs) -> Result<(), Failure> {
    let op = match a.op {
        OpArg::Add => EltwiseOp::Add,
        OpArg::Sub => EltwiseOp::Sub,
        OpArg::Mul => EltwiseOp::Mul,
        OpArg::Max => EltwiseOp::Max,
        OpArg::Min => EltwiseOp::Min,
    };
    let prec = a.dtype.precision();
    let operand = if a.per_channel {
        Operand::PerChannel
    } else {
        Operand::Tensor
    };
    let cube = Cube::new(a.w, a.h, a.c, prec).map_err(|e| usage(format!("op ew: {e}")))?;
    outln!(
        "ew: {} of {}x{}x{} {prec} and {}",
        op.name(),
        a.h,
        a.w,
        a.c,
        if a.per_channel {
            format!("{} per-channel values", a.c)
        } else {
            "a tensor of the same shape".to_string()
        }
    );
    let dev = a.common.open()?;
    let mut rng = Rng::from_seed(a.common.seed());
    // The whole range of each integer type (saturation included); fp16 on a grid of
    // 1/64 in [-16, 16) (sums, differences and products of such values round once).
    let err = match prec {
        Precision::Int8 => check(
            &dev,
            op,
            cube,
            operand,
            &mut rng,
            |r| r.int(-128, 127) as i8,
            f64::from,
        )?,
        Precision::Int16 => check(
            &dev,
            op,
            cube,
            operand,
            &mut rng,
            |r| r.int(-32768, 32767) as i16,
            f64::from,
        )?,
        _ => check(
            &dev,
            op,
            cube,
            operand,
            &mut rng,
            |r| f16::from_f32(r.int(-1024, 1023) as f32 / 64.0),
            |v| f64::from(v.to_f32()),
        )?,
    };
    // The CPU saturates and rounds as the DPU does: the results must be equal.
    verdict(err, err == 0.0, "exact")
}
