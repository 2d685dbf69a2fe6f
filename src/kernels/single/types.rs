//! The element types, layouts and post-processing a single-task matmul is described in.

use crate::task::Precision;

/// Input element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dtype {
    /// 8-bit two's complement.
    Int8,
    /// 4-bit two's complement, two per byte.
    Int4,
    /// 16-bit two's complement.
    Int16,
    /// IEEE half precision.
    Fp16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// The precision code of CNA/CORE/DPU registers (docs/hardware/registers.md#conventions).
    pub const fn code(self) -> u32 {
        self.precision().code()
    }

    /// The precision in the task model's vocabulary.
    pub const fn precision(self) -> Precision {
        match self {
            Dtype::Int8 => Precision::Int8,
            Dtype::Int16 => Precision::Int16,
            Dtype::Fp16 => Precision::Fp16,
            Dtype::Bf16 => Precision::Bf16,
            Dtype::Int4 => Precision::Int4,
        }
    }

    /// Bits per element.
    pub const fn bits(self) -> u32 {
        match self {
            Dtype::Int4 => 4,
            Dtype::Int8 => 8,
            _ => 16,
        }
    }

    /// Elements per 16-byte feature atom.
    pub const fn atom_elems(self) -> u32 {
        128 / self.bits()
    }

    /// Kernels per 1024-byte weight atom.
    pub const fn kernels_per_atom(self) -> u32 {
        8 * 1024 / (32 * self.bits())
    }

    /// Whether the type is floating point.
    pub const fn is_float(self) -> bool {
        matches!(self, Dtype::Fp16 | Dtype::Bf16)
    }

    /// The range of an integer type.
    pub const fn int_range(self) -> (i32, i32) {
        match self {
            Dtype::Int4 => (-8, 7),
            Dtype::Int8 => (-128, 127),
            Dtype::Int16 => (-32768, 32767),
            _ => (0, 0),
        }
    }

    /// The lower-case name (`int8`, `fp16`), as the CLI spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::Int8 => "int8",
            Dtype::Int4 => "int4",
            Dtype::Int16 => "int16",
            Dtype::Fp16 => "fp16",
            Dtype::Bf16 => "bf16",
        }
    }

    /// The output the hardware natively gives for this input.
    pub const fn default_out(self) -> OutType {
        match self {
            Dtype::Int8 | Dtype::Int16 => OutType::Int32,
            Dtype::Int4 => OutType::Int16,
            Dtype::Fp16 | Dtype::Bf16 => OutType::Fp32,
        }
    }
}

/// Output element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutType {
    /// 8-bit integers (with the output converter's scale and shift).
    Int8,
    /// 16-bit integers.
    Int16,
    /// 32-bit integers.
    Int32,
    /// IEEE half precision.
    Fp16,
    /// bfloat16.
    Bf16,
    /// IEEE single precision.
    Fp32,
}

impl OutType {
    /// The DPU output precision code.
    pub const fn code(self) -> u32 {
        self.precision().code()
    }

    /// The precision in the task model's vocabulary.
    pub const fn precision(self) -> Precision {
        match self {
            OutType::Int8 => Precision::Int8,
            OutType::Int16 => Precision::Int16,
            OutType::Fp16 => Precision::Fp16,
            OutType::Bf16 => Precision::Bf16,
            OutType::Int32 => Precision::Int32,
            OutType::Fp32 => Precision::Fp32,
        }
    }

    /// Bytes per element.
    pub const fn bytes(self) -> u32 {
        match self {
            OutType::Int8 => 1,
            OutType::Int16 | OutType::Fp16 | OutType::Bf16 => 2,
            OutType::Int32 | OutType::Fp32 => 4,
        }
    }

    /// Elements per 16-byte atom.
    pub const fn atom_elems(self) -> u32 {
        16 / self.bytes()
    }

    /// The lower-case name (`int32`, `fp32`), as the CLI spells it.
    pub const fn name(self) -> &'static str {
        match self {
            OutType::Int8 => "int8",
            OutType::Int16 => "int16",
            OutType::Int32 => "int32",
            OutType::Fp16 => "fp16",
            OutType::Bf16 => "bf16",
            OutType::Fp32 => "fp32",
        }
    }

    /// Whether the type is floating point.
    pub const fn is_float(self) -> bool {
        matches!(self, OutType::Fp16 | OutType::Bf16 | OutType::Fp32)
    }
}

/// Operand layouts (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Row-major with rows padded to whole atoms.
    Plain,
    /// NC1HWC2: `[channels/E][M][E]`.
    Native,
}

/// DPU post-processing, in pipeline order: bias, scale, ReLU, clip (the BS stage), then
/// the element-wise add of E, then the output converter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PostOps {
    /// Adds this to every sum (BS ALU, register operand). Integer inputs only.
    pub bias: Option<i32>,
    /// Multiplies by the operand, then shifts right rounding half up (BS MUL). Integer
    /// inputs only.
    pub scale: Option<(i16, u8)>,
    /// Clamps below at 0 (BS ReLU). Integer inputs only.
    pub relu: bool,
    /// Clamps above at this value (BS ReLUX). Integer inputs only.
    pub clip: Option<i32>,
    /// Adds E, an operand shaped and laid out like C with 32-bit elements (int32 for
    /// integer inputs, fp32 for float inputs), read by DPU_RDMA.
    pub add: bool,
    /// Output converter `round_half_even((x × scale) >> shift) + offset` (the offset after
    /// the rounding shift, as measured on RK3588), integer outputs only.
    pub out_cvt: Option<(i32, u16, u16)>,
}

/// The element types as subsets of [`Precision`], the task model's one vocabulary: each
/// converts into it, and a precision converts back where the subset has it
/// (`Error::Unsupported` naming the precision otherwise).
mod subsets {
    use super::{Dtype, OutType};
    use crate::error::{Error, Result};
    use crate::task::Precision;

    fn refused(what: &'static str, p: Precision) -> Error {
        Error::Unsupported {
            what,
            why: format!("{p} is not one of them"),
        }
    }

    impl From<Dtype> for Precision {
        fn from(d: Dtype) -> Precision {
            d.precision()
        }
    }

    impl From<OutType> for Precision {
        fn from(o: OutType) -> Precision {
            o.precision()
        }
    }

    impl TryFrom<Precision> for Dtype {
        type Error = Error;
        fn try_from(p: Precision) -> Result<Dtype> {
            Ok(match p {
                Precision::Int8 => Dtype::Int8,
                Precision::Int4 => Dtype::Int4,
                Precision::Int16 => Dtype::Int16,
                Precision::Fp16 => Dtype::Fp16,
                Precision::Bf16 => Dtype::Bf16,
                Precision::Int32 | Precision::Fp32 => {
                    return Err(refused(
                        "input element type (int4, int8, int16, fp16, bf16)",
                        p,
                    ));
                }
            })
        }
    }

    impl TryFrom<Precision> for OutType {
        type Error = Error;
        fn try_from(p: Precision) -> Result<OutType> {
            Ok(match p {
                Precision::Int8 => OutType::Int8,
                Precision::Int16 => OutType::Int16,
                Precision::Int32 => OutType::Int32,
                Precision::Fp16 => OutType::Fp16,
                Precision::Bf16 => OutType::Bf16,
                Precision::Fp32 => OutType::Fp32,
                Precision::Int4 => {
                    return Err(refused(
                        "output element type (int8, int16, int32, fp16, bf16, fp32)",
                        p,
                    ));
                }
            })
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Every precision either converts into the subset and back unchanged, or is
        /// refused; every member of the subset comes from its precision.
        #[test]
        fn subsets_round_trip_through_precision() {
            let mut inputs = 0;
            let mut outputs = 0;
            for p in Precision::ALL {
                if let Ok(d) = Dtype::try_from(p) {
                    assert_eq!(Precision::from(d), p);
                    inputs += 1;
                }
                if let Ok(o) = OutType::try_from(p) {
                    assert_eq!(Precision::from(o), p);
                    outputs += 1;
                }
            }
            assert_eq!((inputs, outputs), (5, 6));
            assert!(Dtype::try_from(Precision::Fp32).is_err());
            assert!(OutType::try_from(Precision::Int4).is_err());
        }
    }
}
