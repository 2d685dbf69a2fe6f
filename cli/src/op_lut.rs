//! `rknpu op lut`: a LUT activation of a seeded tensor on the DPU.

use crate::element::{ElementArg, only};
use crate::op::{Common, check};
use crate::{Failure, usage};
use clap::builder::TypedValueParser;
use rknpu_driver::kernels::ops::lut::{Activation, ActivationOp};

/// `--fn`: every activation the library has, by its name (its formula as the help).
fn activation() -> impl TypedValueParser<Value = Activation> {
    let names =
        Activation::ALL.map(|a| clap::builder::PossibleValue::new(a.name()).help(a.formula()));
    clap::builder::PossibleValuesParser::new(names)
        .try_map(|name: String| Activation::from_name(&name).ok_or(format!("no activation {name}")))
}

/// The arguments of `rknpu op lut`.
#[derive(clap::Args)]
pub(crate) struct LutArgs {
    /// The function.
    #[arg(long = "fn", value_name = "FN", value_parser = activation())]
    function: Activation,
    #[command(flatten)]
    shape: crate::op::Shape,
    /// The element type: fp16, or int8 (refused: no board-run program drives the LUT in
    /// an integer pipeline).
    #[arg(long, value_parser = only(&[ElementArg::Int8, ElementArg::Fp16]))]
    dtype: ElementArg,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(a: LutArgs) -> Result<(), Failure> {
    let bad = |e: rknpu_driver::Error| usage(format!("op lut: {e}"));
    let act = a.function;
    let cube = a.shape.cube(a.dtype.precision(), "op lut")?;
    let op = ActivationOp::new(act, cube).map_err(bad)?;
    check("lut", &op, &a.common)
}
