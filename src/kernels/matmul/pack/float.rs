//! The A buffer of an fp16 or bf16 plan from f32 activations, or from values already of
//! the plan's type, in one pass: each block
//! (wave, M tile) is row-major with rows of the wave's channels padded to 32, so every
//! row is one run of values converted where they land, then its padding zeroed. What
//! [`Plan::pack_a_f32`] returns, without its per-element layout arithmetic and
//! intermediate vectors (docs/matmul.md, "Host work").

use super::super::{Plan, unsupported};
use super::rows::rows_into;
use crate::error::Result;
use crate::kernels::single::{Dtype, check_float, check_float_bits, special_exponent};
use crate::sys::simd;

/// Packs f32 activations `a` (row-major M×K) into `out`, the A buffer of a float
/// `plan` (`plan.a_bytes` bytes), each value rounded to the plan's type to nearest,
/// ties to even. Every byte of `out` is written.
///
/// Errors: a plan that is not fp16 or bf16 ([`Error::Unsupported`](crate::error::Error::Unsupported)), `a` or `out` of
/// the wrong size ([`Error::ShapeMismatch`](crate::error::Error::ShapeMismatch)), a value that is not finite or rounds to
/// infinity in the plan's type ([`Error::OutOfRange`](crate::error::Error::OutOfRange) with its index, as
/// [`Plan::pack_a_f32`]); `out` is then unspecified.
pub fn activations_float_into(plan: &Plan, a: &[f32], out: &mut [u8]) -> Result<()> {
    let dtype = plan.spec.dtype;
    float_plan(plan)?;
    let finite = rows_into::<_, 2>(plan, a, out, |src, values| match dtype {
        Dtype::Fp16 => simd::f32_to_f16_bytes(src, values),
        _ => to_bf16(src, values),
    })?;
    match finite {
        true => Ok(()),
        // The general check names the first such value, as the general packer does.
        false => check_float(dtype, "activations", a),
    }
}

/// Packs activations already of a float `plan`'s type (`a`: the fp16 or bf16 values'
/// bits, row-major M×K) into `out`, its A buffer, as they are: the layout of
/// [`activations_float_into`] without a conversion. Errors as there; a value that is
/// not finite is [`Error::OutOfRange`](crate::error::Error::OutOfRange) with its index.
pub fn activations_half_into(plan: &Plan, a: &[u16], out: &mut [u8]) -> Result<()> {
    let exponent = special_exponent(plan.spec.dtype);
    float_plan(plan)?;
    let finite = rows_into::<_, 2>(plan, a, out, |src, values| {
        let mut special = 0u16;
        for (d, &v) in values.chunks_exact_mut(2).zip(src) {
            d.copy_from_slice(&v.to_le_bytes());
            special |= u16::from(v & exponent == exponent);
        }
        special == 0
    })?;
    match finite {
        true => Ok(()),
        false => check_float_bits(plan.spec.dtype, "activations", a),
    }
}

/// Refuses a plan that is not fp16 or bf16.
fn float_plan(plan: &Plan) -> Result<()> {
    let dtype = plan.spec.dtype;
    match dtype.is_float() {
        true => Ok(()),
        false => Err(unsupported(format!(
            "float activations packed for a {dtype:?} plan (fp16 or bf16)"
        ))),
    }
}

/// `src` rounded to bf16 (to nearest, ties to even), little-endian into `dst`. Returns
/// whether every value is finite and does not round to infinity: its magnitude's bits
/// below those of the midpoint between bf16's largest finite value and the next power
/// of two (which rounds up, to infinity, since that value's last mantissa bit is odd);
/// magnitudes' bits order as the magnitudes do and put infinities and NaNs above every
/// finite value. The bits of a value so refused are unspecified.
fn to_bf16(src: &[f32], dst: &mut [u8]) -> bool {
    let mut beyond = 0u32;
    for (d, &v) in dst.chunks_exact_mut(2).zip(src) {
        let b = v.to_bits();
        beyond |= ((b & 0x7FFF_FFFF) >= 0x7F7F_8000) as u32;
        let rounded = (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
        d.copy_from_slice(&rounded.to_le_bytes());
    }
    beyond == 0
}

#[cfg(test)]
mod tests {
    //! The range check and the bf16 rounding against the library's own conversions, on
    //! the edges of each type's range and on seeded values.

    use super::*;
    use crate::error::Error;
    use crate::float::{f32_to_bf16, f32_to_f16};

    /// Values at and around each type's overflow edge, the subnormal edges, zeros and
    /// the non-finite ones.
    fn edges() -> Vec<f32> {
        let mut v = vec![0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
        for x in [
            65504.0f32,
            65520.0,
            65536.0,
            f32::from_bits(0x7F7F_8000),
            f32::MAX,
        ] {
            for bits in [x.to_bits() - 1, x.to_bits(), x.to_bits() + 1] {
                let y = f32::from_bits(bits);
                v.extend([y, -y]);
            }
        }
        v.extend([6.0e-8f32, 5.9e-8, 1.0e-40, -1.0e-45, 1.5, -2.5]);
        v
    }

    /// `values` converted to `dtype` one at a time: each one's bits and whether the
    /// conversion called it finite.
    fn convert(dtype: Dtype, values: &[f32]) -> Vec<(u16, bool)> {
        let one = |v: f32| {
            let mut d = [0u8; 2];
            let finite = match dtype {
                Dtype::Fp16 => simd::f32_to_f16_bytes(&[v], &mut d),
                _ => to_bf16(&[v], &mut d),
            };
            (u16::from_le_bytes(d), finite)
        };
        values.iter().map(|&v| one(v)).collect()
    }

    #[test]
    fn the_conversions_refuse_exactly_what_rounds_to_infinity_or_is_not_finite() {
        let mut rng = crate::seeded::Rng::new(5);
        let mut values = edges();
        values.extend((0..4096).map(|_| f32::from_bits(rng.next_u64() as u32)));
        for dtype in [Dtype::Fp16, Dtype::Bf16] {
            for (&v, (_, finite)) in values.iter().zip(convert(dtype, &values)) {
                let want = check_float(dtype, "activations", &[v]).is_ok();
                assert_eq!(finite, want, "{dtype:?} {v:e}");
            }
        }
    }

    #[test]
    fn bad_plans_sizes_and_values_are_refused_with_the_general_packers_errors() {
        use crate::kernels::matmul::MatmulSpec;
        let plan = |dtype| Plan::new(MatmulSpec::new(3, 40, 8, dtype)).unwrap();
        let (fp16, int8) = (plan(Dtype::Fp16), plan(Dtype::Int8));
        let a = vec![0.5f32; 120];
        let mut out = vec![0u8; fp16.a_bytes as usize];
        let unsupported = activations_float_into(&int8, &a, &mut out);
        assert!(
            matches!(unsupported, Err(Error::Unsupported { .. })),
            "{unsupported:?}"
        );
        for (a_len, out_len) in [(119, out.len()), (120, out.len() - 1)] {
            let mut o = vec![0u8; out_len];
            let r = activations_float_into(&fp16, &a[..a_len.min(120)], &mut o);
            assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
        }
        for (at, v) in [(5, f32::NAN), (9, 70000.0), (119, -65520.0)] {
            let mut bad = a.clone();
            bad[at] = v;
            let got = activations_float_into(&fp16, &bad, &mut out).unwrap_err();
            let want = check_float(Dtype::Fp16, "activations", &bad).unwrap_err();
            assert_eq!(got.to_string(), want.to_string());
            assert!(
                matches!(got, Error::OutOfRange { index, .. } if index == at),
                "{got:?}"
            );
        }
    }

    #[test]
    fn values_of_the_plans_type_pack_as_their_f32_values_do() {
        use crate::kernels::matmul::MatmulSpec;
        let mut rng = crate::seeded::Rng::new(7);
        // One wave, padded rows, several waves and several rows over several waves.
        for (m, k) in [(1, 64), (3, 40), (1, 9000), (5, 9000)] {
            for dtype in [Dtype::Fp16, Dtype::Bf16] {
                let plan = Plan::new(MatmulSpec::new(m, k, 64, dtype)).unwrap();
                let bits: Vec<u16> = (0..m * k)
                    .map(|_| match dtype {
                        Dtype::Fp16 => f32_to_f16(rng.unit() * 4.0 - 2.0),
                        _ => f32_to_bf16(rng.unit() * 4.0 - 2.0),
                    })
                    .collect();
                let wide: Vec<f32> = (bits.iter())
                    .map(|&b| match dtype {
                        Dtype::Fp16 => half::f16::from_bits(b).to_f32(),
                        _ => half::bf16::from_bits(b).to_f32(),
                    })
                    .collect();
                let (mut want, mut got) = (
                    vec![1u8; plan.a_bytes as usize],
                    vec![2u8; plan.a_bytes as usize],
                );
                activations_float_into(&plan, &wide, &mut want).unwrap();
                activations_half_into(&plan, &bits, &mut got).unwrap();
                assert!(got == want, "{m}×{k} {dtype:?}");
                let mut bad = bits.clone();
                bad[(m * k - 3) as usize] |= 0x7F80 | 0x7C00;
                let e = activations_half_into(&plan, &bad, &mut got).unwrap_err();
                assert!(
                    matches!(e, Error::OutOfRange { index, .. } if index == (m * k - 3) as usize),
                    "{e:?}"
                );
            }
        }
    }

    #[test]
    fn conversions_round_as_the_library_does() {
        let mut rng = crate::seeded::Rng::new(6);
        let mut values = edges();
        values.extend((0..4096).map(|_| f32::from_bits(rng.next_u64() as u32)));
        values.extend((0..4096).map(|_| rng.unit() * 8.0 - 4.0));
        for dtype in [Dtype::Fp16, Dtype::Bf16] {
            for (&v, (bits, finite)) in values.iter().zip(convert(dtype, &values)) {
                let want = match dtype {
                    Dtype::Fp16 => f32_to_f16(v),
                    _ => f32_to_bf16(v),
                };
                if finite {
                    assert_eq!(bits, want, "{dtype:?} {v:e}");
                }
            }
        }
    }
}
