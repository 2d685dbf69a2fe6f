//! Residual activations: int8 activations in two passes. The first pass is the usual
//! quantisation of each row (per group on a grouped bank); the second quantises what
//! the first left over, `x − q · s` with `s` the scale the NPU multiplies by, so its
//! step is about 1/254 of the first's. The NPU runs both passes as rows of one product
//! (the plan has twice the rows, as W4A8's has) and the host adds each row's two
//! dequantised results. The activations' rounding then all but leaves the error, at
//! the price of twice the rows of NPU work: worth it where the weights carry an error
//! of their own (a requantised bank, docs/matmul.md "Residual activations").

use super::npu_dequant::fp16_normal;
use super::quantize_groups_i8;
use crate::error::Result;
use half::f16;

/// The scale the NPU multiplies a row's group by: `s` rounded to fp16 where fp16 holds
/// it to its precision, else `s` itself (the host applies such a scale exactly).
fn applied(s: f32) -> f32 {
    if fp16_normal(s) {
        f16::from_f32(s).to_f32()
    } else {
        s
    }
}

/// Quantises `x` (rows of `k` values, row-major) in two passes with one scale per row
/// and group of `group` values, as [`quantize_groups_i8`] does: `(values, scales)` of
/// twice the rows, the first `rows` rows `x`'s quantisation and the next `rows` rows the
/// quantisation of each value's residual `x − q · s` (`s` as the NPU applies it: rounded
/// to fp16 where that is a normal fp16 number). `Σ` over both passes of `q · s`
/// approximates `x` within half a step of the second pass. Errors as
/// [`quantize_groups_i8`]'s.
///
/// ```
/// use rknpu_driver::compute::matmul::{quantize_groups_i8, quantize_residual_i8};
///
/// let x = [0.3f32, -1.7, 2.25, 0.01];
/// let (q, s) = quantize_residual_i8(&x, 4, 4)?;
/// assert_eq!((q.len(), s.len()), (8, 2));
/// assert_eq!(q[..4], quantize_groups_i8(&x, 4, 4)?.0); // the usual first pass
/// assert!(s[1] < s[0] / 200.0); // a far finer second step
/// # Ok::<(), rknpu_driver::Error>(())
/// ```
pub fn quantize_residual_i8(x: &[f32], k: usize, group: usize) -> Result<(Vec<i8>, Vec<f32>)> {
    let (mut q, mut s) = quantize_groups_i8(x, k, group)?;
    let groups = k.div_ceil(group.max(1));
    let mut rest = Vec::with_capacity(x.len());
    for ((row, qrow), srow) in x
        .chunks_exact(k.max(1))
        .zip(q.chunks_exact(k.max(1)))
        .zip(s.chunks_exact(groups.max(1)))
    {
        for ((seg, qseg), &scale) in row.chunks(group).zip(qrow.chunks(group)).zip(srow) {
            let scale = f64::from(applied(scale));
            rest.extend(
                seg.iter()
                    .zip(qseg)
                    .map(|(&v, &q)| (f64::from(v) - f64::from(q) * scale) as f32),
            );
        }
    }
    let (q2, s2) = quantize_groups_i8(&rest, k, group)?;
    q.extend(q2);
    s.extend(s2);
    Ok((q, s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Both passes together are within half a second-pass step of each value, with
        /// the first pass's scale as the NPU applies it; the first pass is the usual one.
        #[test]
        fn two_passes_are_within_half_a_fine_step(
            x in prop::collection::vec(-1e3f32..1e3, 1..96),
            k in 1usize..40,
            group in 1usize..40,
        ) {
            let rows = x.len() / k;
            prop_assume!(rows > 0);
            let x = &x[..rows * k];
            let (q, s) = quantize_residual_i8(x, k, group).unwrap();
            let (q1, s1) = quantize_groups_i8(x, k, group).unwrap();
            let groups = k.div_ceil(group);
            prop_assert_eq!(&q[..x.len()], &q1[..]);
            prop_assert_eq!(&s[..s1.len()], &s1[..]);
            prop_assert_eq!((q.len(), s.len()), (2 * x.len(), 2 * s1.len()));
            for (i, &v) in x.iter().enumerate() {
                let (r, g) = (i / k, i % k / group);
                let (hi, lo) = (s[r * groups + g], s[(rows + r) * groups + g]);
                let back = f64::from(q[i]) * f64::from(applied(hi))
                    + f64::from(q[x.len() + i]) * f64::from(lo);
                let tol = f64::from(lo) / 2.0 * (1.0 + 1e-5) + 1e-9 * f64::from(v).abs();
                prop_assert!((back - f64::from(v)).abs() <= tol, "{} {} {}", v, back, tol);
            }
        }
    }

    #[test]
    fn the_second_step_is_far_finer_than_the_first() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 64) as f32 - 31.5) * 0.11)
            .collect();
        let (_, s) = quantize_residual_i8(&x, 64, 32).unwrap();
        for g in 0..2 {
            assert!(s[2 + g] <= s[g] / 200.0, "{s:?}");
        }
        assert!(quantize_residual_i8(&[f32::NAN, 1.0], 2, 2).is_err());
        assert!(quantize_residual_i8(&[1.0; 3], 2, 2).is_err());
    }
}
