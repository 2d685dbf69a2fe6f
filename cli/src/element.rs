//! `--dtype`: the element types every command names, as one vocabulary. Each command
//! takes the subset it computes ([`only`]), so its help lists those values and any other
//! is a usage error; the library converts the value into its own subset types
//! (`Dtype`, `Activations`) from the task model's [`Precision`].

use clap::ValueEnum;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::task::Precision;

/// An element type `--dtype` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ElementArg {
    /// 4-bit integers.
    Int4,
    /// 8-bit integers.
    Int8,
    /// 16-bit integers.
    Int16,
    /// IEEE half precision.
    Fp16,
}

impl ElementArg {
    /// The task model's precision.
    pub(crate) fn precision(self) -> Precision {
        match self {
            ElementArg::Int4 => Precision::Int4,
            ElementArg::Int8 => Precision::Int8,
            ElementArg::Int16 => Precision::Int16,
            ElementArg::Fp16 => Precision::Fp16,
        }
    }

    /// The library's input type of that precision (every value [`only`] lets a matmul
    /// command take has one).
    pub(crate) fn dtype(self) -> Dtype {
        match self {
            ElementArg::Int4 => Dtype::Int4,
            ElementArg::Int8 => Dtype::Int8,
            ElementArg::Int16 => Dtype::Int16,
            ElementArg::Fp16 => Dtype::Fp16,
        }
    }
}

/// A `--dtype` parser taking only `allowed` (by their names); the help lists just them.
pub(crate) fn only(allowed: &'static [ElementArg]) -> impl TypedValueParser<Value = ElementArg> {
    PossibleValuesParser::new(allowed.iter().filter_map(ValueEnum::to_possible_value))
        .try_map(|name| ElementArg::from_str(&name, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each value's precision and input type agree, and the names are the precisions'
    /// names.
    #[test]
    fn values_name_their_precision() {
        for e in ElementArg::value_variants() {
            assert_eq!(Precision::from(e.dtype()), e.precision());
            let name = e.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(name, e.precision().to_string());
        }
    }
}
