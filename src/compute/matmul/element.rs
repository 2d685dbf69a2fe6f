//! [`Activations`] as a subset of [`Precision`], the task model's one element vocabulary.

use super::Activations;
use crate::error::{Error, Result};
use crate::task::Precision;

impl From<Activations> for Precision {
    fn from(a: Activations) -> Precision {
        match a {
            Activations::Int8 => Precision::Int8,
            Activations::Int4 => Precision::Int4,
            Activations::Fp16 => Precision::Fp16,
            Activations::Bf16 => Precision::Bf16,
        }
    }
}

impl TryFrom<Precision> for Activations {
    type Error = Error;
    /// The activations of that precision; `Error::Unsupported` for the precisions no
    /// matmul takes as activations (int16, int32, fp32).
    fn try_from(p: Precision) -> Result<Activations> {
        match p {
            Precision::Int8 => Ok(Activations::Int8),
            Precision::Int4 => Ok(Activations::Int4),
            Precision::Fp16 => Ok(Activations::Fp16),
            Precision::Bf16 => Ok(Activations::Bf16),
            _ => Err(Error::Unsupported {
                what: "activations (int8, int4, fp16, bf16)",
                why: format!("{p} is not one of them"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_round_trip_through_precision() {
        let ok: Vec<Activations> = Precision::ALL
            .into_iter()
            .filter_map(|p| Activations::try_from(p).ok())
            .collect();
        assert_eq!(ok.len(), 4);
        for a in ok {
            assert_eq!(Activations::try_from(Precision::from(a)).unwrap(), a);
        }
        assert!(Activations::try_from(Precision::Int16).is_err());
    }
}
