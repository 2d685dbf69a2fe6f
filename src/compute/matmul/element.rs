//! The element types a [`super::Matmul`] reads and writes ([`Input`], [`Output`]), and
//! [`Activations`] as a subset of [`Precision`], the task model's one element vocabulary.

use super::Activations;
use crate::error::{Error, Result};
use crate::task::Precision;
use half::{bf16, f16};

mod sealed {
    /// Closes [`super::Input`] and [`super::Output`] to the types listed here.
    pub trait Sealed {}
    impl Sealed for i8 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for f32 {}
}

/// A borrowed slice of activations, as one of the element types a matmul reads.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum InputSlice<'a> {
    /// int8 activations (int8 banks; int4 banks through W4A8): integer results.
    I8(&'a [i8]),
    /// Integers of the matmul's activation type (int8 or int4), each checked against
    /// it: integer results.
    I32(&'a [i32]),
    /// fp16 activations on an fp16 bank: float results.
    F16(&'a [f16]),
    /// bf16 activations on a bf16 bank: float results.
    Bf16(&'a [bf16]),
    /// f32 activations, the scaled float path: rounded to a float bank's type, or
    /// quantised to int8 per row (per row and group on a grouped bank) with the results
    /// scaled back.
    F32(&'a [f32]),
}

impl InputSlice<'_> {
    /// Whether the product of these activations is an integer.
    pub fn is_integer(&self) -> bool {
        matches!(self, InputSlice::I8(_) | InputSlice::I32(_))
    }
}

/// A borrowed slice for a matmul's results, as one of the element types it writes.
#[derive(Debug)]
#[non_exhaustive]
pub enum OutputSlice<'a> {
    /// Exact int32 results of integer activations; a result beyond the int32 range is
    /// an error.
    I32(&'a mut [i32]),
    /// Exact results of integer activations.
    I64(&'a mut [i64]),
    /// f32 results: float sums, scaled quantised sums, or integer results converted.
    F32(&'a mut [f32]),
}

impl OutputSlice<'_> {
    /// Whether these results are integers (integer activations only).
    pub fn is_integer(&self) -> bool {
        !matches!(self, OutputSlice::F32(_))
    }

    /// Values the slice holds.
    pub fn len(&self) -> usize {
        match self {
            OutputSlice::I32(s) => s.len(),
            OutputSlice::I64(s) => s.len(),
            OutputSlice::F32(s) => s.len(),
        }
    }

    /// Whether the slice holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An element type a matmul reads as activations (`A`, row-major M×K): `i8`, `i32`
/// (integers of the matmul's activation type), `f16`, `bf16`, or `f32` (the scaled
/// float path). What each computes is on [`InputSlice`].
pub trait Input: sealed::Sealed + Copy {
    /// `a` as the slice a matmul reads.
    fn slice(a: &[Self]) -> InputSlice<'_>;
}

/// An element type a matmul writes its results in (`C`, row-major M×N): `i32`, `i64`
/// (integer activations only) or `f32`. What each holds is on [`OutputSlice`].
pub trait Output: sealed::Sealed + Copy + Default {
    /// `c` as the slice a matmul writes.
    fn slice_mut(c: &mut [Self]) -> OutputSlice<'_>;
}

macro_rules! element {
    ($($ty:ty => $variant:ident),* ; $($oty:ty => $ovariant:ident),*) => {
        $(impl Input for $ty {
            fn slice(a: &[$ty]) -> InputSlice<'_> {
                InputSlice::$variant(a)
            }
        })*
        $(impl Output for $oty {
            fn slice_mut(c: &mut [$oty]) -> OutputSlice<'_> {
                OutputSlice::$ovariant(c)
            }
        })*
    };
}

element!(i8 => I8, i32 => I32, f16 => F16, bf16 => Bf16, f32 => F32;
    i32 => I32, i64 => I64, f32 => F32);

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
