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
    quantize_passes_i8(x, k, group, 2)
}

/// [`quantize_residual_i8`] in `passes` passes (1 to [`MAX_ACTIVATION_PASSES`]): each
/// pass after the first quantises what the passes before it left over, its step about
/// 1/254 of the one before. `(values, scales)` of `passes` times the rows, pass `p`'s
/// rows from `p · rows` on. `Σ` over the passes of `q · s` approximates `x` within half
/// a step of the last pass. One pass is [`quantize_groups_i8`]. Errors as
/// [`quantize_groups_i8`]'s, and [`crate::Error::OutOfRange`] for a pass count outside
/// 1..=3.
///
/// ```
/// use rknpu_driver::compute::matmul::{quantize_passes_i8, quantize_residual_i8};
///
/// let x = [0.3f32, -1.7, 2.25, 0.01];
/// let (q, s) = quantize_passes_i8(&x, 4, 4, 3)?;
/// assert_eq!((q.len(), s.len()), (12, 3));
/// assert_eq!(q[..8], quantize_residual_i8(&x, 4, 4)?.0); // the first two passes
/// assert!(s[2] < s[1] / 200.0); // a finer step again
/// # Ok::<(), rknpu_driver::Error>(())
/// ```
pub fn quantize_passes_i8(
    x: &[f32],
    k: usize,
    group: usize,
    passes: u32,
) -> Result<(Vec<i8>, Vec<f32>)> {
    if !(1..=MAX_ACTIVATION_PASSES).contains(&passes) {
        return Err(crate::Error::OutOfRange {
            what: "activation passes",
            index: 0,
            value: passes.to_string(),
            range: "1..=3",
        });
    }
    let (mut q, mut s) = quantize_groups_i8(x, k, group)?;
    let groups = k.div_ceil(group.max(1));
    // What the passes so far left over, in f64 so that each residual is exact.
    let mut rest: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    for p in 1..passes as usize {
        let (qp, sp) = (&q[(p - 1) * x.len()..], &s[(p - 1) * s.len() / p..]);
        for ((row, qrow), srow) in rest
            .chunks_exact_mut(k.max(1))
            .zip(qp.chunks_exact(k.max(1)))
            .zip(sp.chunks_exact(groups.max(1)))
        {
            for ((seg, qseg), &scale) in row.chunks_mut(group).zip(qrow.chunks(group)).zip(srow) {
                let scale = f64::from(applied(scale));
                for (v, &q) in seg.iter_mut().zip(qseg) {
                    *v -= f64::from(q) * scale;
                }
            }
        }
        let next: Vec<f32> = rest.iter().map(|&v| v as f32).collect();
        let (q2, s2) = quantize_groups_i8(&next, k, group)?;
        q.extend(q2);
        s.extend(s2);
    }
    Ok((q, s))
}

/// The most passes [`quantize_passes_i8`] and [`super::MatmulOptions::activation_passes`]
/// take: a third pass's step is about 254⁻² of the first's, far below what the NPU's
/// fp32 arithmetic keeps.
pub const MAX_ACTIVATION_PASSES: u32 = 3;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Two or three passes: the passes before the last are the quantisation of one
        /// pass fewer (the first the usual one), and all of them together are within half
        /// a last-pass step of each value (each earlier pass's scale as the NPU applies
        /// it).
        #[test]
        fn the_passes_are_within_half_their_last_step(
            x in prop::collection::vec(-1e3f32..1e3, 1..96),
            k in 1usize..40,
            group in 1usize..40,
            passes in 2u32..=3,
        ) {
            let rows = x.len() / k;
            prop_assume!(rows > 0);
            let x = &x[..rows * k];
            let (q, s) = quantize_passes_i8(x, k, group, passes).unwrap();
            let (qf, sf) = quantize_passes_i8(x, k, group, passes - 1).unwrap();
            prop_assert_eq!(&q[..qf.len()], &qf[..]);
            prop_assert_eq!(&s[..sf.len()], &sf[..]);
            let (groups, p) = (k.div_ceil(group), passes as usize);
            prop_assert_eq!((q.len(), s.len()), (p * x.len(), p * rows * groups));
            for (i, &v) in x.iter().enumerate() {
                let (r, g) = (i / k, i % k / group);
                let scale = |pass: usize| s[(pass * rows + r) * groups + g];
                let back: f64 = (0..p)
                    .map(|pass| {
                        let sp = if pass + 1 < p { applied(scale(pass)) } else { scale(pass) };
                        f64::from(q[pass * x.len() + i]) * f64::from(sp)
                    })
                    .sum();
                // A third pass quantised the second's residuals rounded to f32: a
                // relative 2^-24 of their magnitude.
                let rounded = match p {
                    3 => f64::from(scale(1)) * 128.0 * 2f64.powi(-24),
                    _ => 0.0,
                };
                let tol = f64::from(scale(p - 1)) / 2.0 * (1.0 + 1e-5)
                    + rounded
                    + 1e-9 * f64::from(v).abs();
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
        for passes in [0, 4] {
            assert!(matches!(
                quantize_passes_i8(&[1.0; 4], 2, 2, passes),
                Err(crate::Error::OutOfRange {
                    what: "activation passes",
                    ..
                })
            ));
        }
        // One pass is the usual quantisation.
        let x = [0.5f32, -2.0, 7.25, 1e-3];
        assert_eq!(
            quantize_passes_i8(&x, 2, 2, 1).unwrap(),
            quantize_groups_i8(&x, 2, 2).unwrap()
        );
    }
}
