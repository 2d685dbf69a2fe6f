//! Host values (`f64`) to and from the element types of a cube.

use crate::error::{Error, Result};
use crate::kernels::ops::{Cube, Element};
use crate::task::Precision;
use half::{bf16, f16};

/// `v` as an element of `precision`: floats rounded to nearest even (fp16, bf16, fp32);
/// an integer type takes only an integer in its range ([`Error::OutOfRange`] otherwise,
/// never a truncation); int4 is not a host element type.
pub fn round_to(precision: Precision, v: f64) -> Result<f64> {
    let int = |lo: f64, hi: f64, range: &'static str| {
        if v.fract() == 0.0 && (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(Error::OutOfRange {
                what: "tensor value",
                index: 0,
                value: v.to_string(),
                range,
            })
        }
    };
    match precision {
        Precision::Int8 => int(-128.0, 127.0, "integers in -128..=127 (int8)"),
        Precision::Int16 => int(-32768.0, 32767.0, "integers in -32768..=32767 (int16)"),
        Precision::Int32 => int(
            f64::from(i32::MIN),
            f64::from(i32::MAX),
            "integers in the int32 range",
        ),
        Precision::Fp16 => Ok(f16::from_f64(v).to_f64()),
        Precision::Bf16 => Ok(bf16::from_f64(v).to_f64()),
        Precision::Fp32 => Ok(f64::from(v as f32)),
        Precision::Int4 => Err(Error::Unsupported {
            what: "tensor value",
            why: "int4 is a weight type only".into(),
        }),
    }
}

/// `values` (rounded by [`round_to`]) as elements of type `T`.
pub(crate) fn typed<T>(precision: Precision, values: &[f64], conv: fn(f64) -> T) -> Result<Vec<T>> {
    values
        .iter()
        .map(|&v| round_to(precision, v).map(conv))
        .collect()
}

fn pack_as<T: Element>(cube: &Cube, values: &[f64], conv: fn(f64) -> T) -> Result<Vec<u8>> {
    cube.pack(&typed(cube.precision, values, conv)?)
}

fn unpack_as<T: Element>(cube: &Cube, bytes: &[u8], conv: fn(T) -> f64) -> Result<Vec<f64>> {
    Ok(cube.unpack::<T>(bytes)?.into_iter().map(conv).collect())
}

/// `values` (row-major `[height][width][channels]`) laid out as `cube` in the native
/// layout, each rounded to the cube's element type ([`round_to`]).
pub fn pack_values(cube: &Cube, values: &[f64]) -> Result<Vec<u8>> {
    match cube.precision {
        Precision::Int8 => pack_as(cube, values, |v| v as i8),
        Precision::Int16 => pack_as(cube, values, |v| v as i16),
        Precision::Int32 => pack_as(cube, values, |v| v as i32),
        Precision::Fp16 => pack_as(cube, values, f16::from_f64),
        Precision::Bf16 => pack_as(cube, values, bf16::from_f64),
        Precision::Fp32 => pack_as(cube, values, |v| v as f32),
        Precision::Int4 => Err(Error::Unsupported {
            what: "tensor cube",
            why: "int4 tensors are weights only".into(),
        }),
    }
}

/// The values of `cube` in `bytes` (native layout), row-major `[height][width][channels]`.
pub fn unpack_values(cube: &Cube, bytes: &[u8]) -> Result<Vec<f64>> {
    match cube.precision {
        Precision::Int8 => unpack_as::<i8>(cube, bytes, f64::from),
        Precision::Int16 => unpack_as::<i16>(cube, bytes, f64::from),
        Precision::Int32 => unpack_as::<i32>(cube, bytes, f64::from),
        Precision::Fp16 => unpack_as::<f16>(cube, bytes, f16::to_f64),
        Precision::Bf16 => unpack_as::<bf16>(cube, bytes, bf16::to_f64),
        Precision::Fp32 => unpack_as::<f32>(cube, bytes, f64::from),
        Precision::Int4 => Err(Error::Unsupported {
            what: "tensor cube",
            why: "int4 tensors are weights only".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_never_truncated() {
        assert_eq!(round_to(Precision::Int8, -128.0).unwrap(), -128.0);
        assert!(round_to(Precision::Int8, 128.0).is_err());
        assert!(round_to(Precision::Int8, 1.5).is_err());
        assert!(round_to(Precision::Int16, f64::NAN).is_err());
        // 1 + 2^-11 is a tie between 1 and the next fp16 (1 + 2^-10): even is 1.
        assert_eq!(
            round_to(Precision::Fp16, 1.0 + 2f64.powi(-11)).unwrap(),
            1.0
        );
        assert!(round_to(Precision::Int4, 1.0).is_err());
    }

    #[test]
    fn values_round_trip_through_every_cube_type() {
        for p in [
            Precision::Int8,
            Precision::Int16,
            Precision::Int32,
            Precision::Fp16,
            Precision::Bf16,
            Precision::Fp32,
        ] {
            let cube = Cube::new(3, 2, 5, p).unwrap();
            let v: Vec<f64> = (0..cube.elems()).map(|i| i as f64 - 10.0).collect();
            let bytes = pack_values(&cube, &v).unwrap();
            assert_eq!(bytes.len() as u64, cube.bytes());
            assert_eq!(unpack_values(&cube, &bytes).unwrap(), v, "{p}");
        }
        let cube = Cube::new(1, 1, 2, Precision::Int8).unwrap();
        assert!(pack_values(&cube, &[1.0]).is_err());
    }
}
