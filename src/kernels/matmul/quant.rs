//! Quantisation on the host, as quantised LLM layers need it around an integer matmul:
//! symmetric per-row int8 activations, symmetric per-output-channel int8 and int4
//! weights, packed int4 nibbles (and GGUF's Q4_0 block order), and the W4A8 split of
//! int8 activations into two int4 halves.
//!
//! Symmetric quantisation of a row `x` to `b` bits: `scale = max|x| / (2^(b-1) - 1)` and
//! `q = round_half_even(x / scale)` (a row of zeros has scale 0 and quantises to 0), so
//! `x ≈ q · scale` with an error of at most `scale / 2` per element.
//!
//! ```
//! use rknpu_driver::kernels::matmul::quant;
//!
//! let x = [0.5f32, -1.0, 0.25, 0.0];
//! let (q, scales) = quant::quantize_rows_i8(&x, 4)?;
//! assert_eq!(q, [64, -127, 32, 0]);
//! assert!((scales[0] - 1.0 / 127.0).abs() < 1e-9);
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

use crate::error::{Error, Result};

fn shape(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    Error::check_len(what, expected, actual)
}

fn finite(what: &'static str, x: &[f32]) -> Result<()> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(Error::OutOfRange {
            what,
            index: i,
            value: x[i].to_string(),
            range: "finite",
        }),
        None => Ok(()),
    }
}

/// Quantises each row of `cols` values of `x` to `max`-symmetric integers into `q`,
/// writing one scale per row. A value that is not finite is refused as `what` (by
/// [`finite`], before anything is written).
fn quantize_rows(
    what: &'static str,
    (x, cols): (&[f32], usize),
    max: f32,
    q: &mut [i8],
    scales: &mut [f32],
) -> Result<()> {
    // Every row's largest magnitude first: the check that all are finite, in the
    // same pass.
    let amax: Vec<u32> = x.chunks_exact(cols).map(magnitude_bits).collect();
    if amax.iter().any(|&b| b >= INFINITY_BITS) {
        return finite(what, x);
    }
    for (((row, qrow), scale), &bits) in x
        .chunks_exact(cols)
        .zip(q.chunks_exact_mut(cols))
        .zip(scales.iter_mut())
        .zip(&amax)
    {
        let amax = f32::from_bits(bits);
        *scale = amax / max;
        let inv = if amax > 0.0 { max / amax } else { 0.0 };
        if inv.is_finite() {
            for (d, &v) in qrow.iter_mut().zip(row) {
                *d = round_small(v * inv, max);
            }
        } else {
            // A row whose largest magnitude is subnormal: `max / amax` overflows, so
            // each value is divided first.
            for (d, &v) in qrow.iter_mut().zip(row) {
                *d = round_small(v / amax * max, max);
            }
        }
    }
    Ok(())
}

/// The bits of `f32::INFINITY`: magnitude bits at or above them are not finite.
const INFINITY_BITS: u32 = 0x7F80_0000;

/// The largest `|v|` of `row` as bits, eight lanes at a time: at least
/// [`INFINITY_BITS`] when a value is not finite (`v · 0` is NaN for ±inf and NaN, zero
/// otherwise, so a lane's sum of them is NaN exactly then), otherwise the bits of the
/// largest magnitude (of finite values, the same as a fold of `f32::max`).
fn magnitude_bits(row: &[f32]) -> u32 {
    let (chunks, tail) = row.as_chunks::<8>();
    let (mut most, mut nan) = ([0f32; 8], [0f32; 8]);
    for chunk in chunks {
        for ((m, z), &v) in most.iter_mut().zip(&mut nan).zip(chunk) {
            let a = v.abs();
            *m = if a > *m { a } else { *m };
            *z += v * 0.0;
        }
    }
    let mut amax = 0f32;
    let mut finite = true;
    for (&m, &z) in most.iter().zip(&nan) {
        amax = amax.max(m);
        finite &= !z.is_nan();
    }
    for &v in tail {
        amax = amax.max(v.abs());
        finite &= v.is_finite();
    }
    if finite {
        amax.to_bits()
    } else {
        INFINITY_BITS
    }
}

/// `y` clamped to `[-max, max]` (`max` ≤ 127, a whole number) and rounded to the nearest
/// integer, ties to even, without a libm call: adding 1.5·2²³ leaves a float whose unit
/// in the last place is 1, so the addition itself rounds (ties to even, the default
/// mode), and the integer is the difference of the two bit patterns.
#[inline]
fn round_small(y: f32, max: f32) -> i8 {
    const SHIFT: f32 = 12_582_912.0; // 1.5 · 2^23
    let r = (y.clamp(-max, max) + SHIFT).to_bits() as i32 - SHIFT.to_bits() as i32;
    r as i8
}

/// Quantises `x` (rows of `k` values, row-major) to int8 per row into `q` (same length),
/// with one scale per row into `scales`. Non-finite values are refused.
pub fn quantize_rows_i8_into(x: &[f32], k: usize, q: &mut [i8], scales: &mut [f32]) -> Result<()> {
    if k == 0 {
        return Err(Error::ShapeMismatch {
            what: "values per row",
            expected: 1,
            actual: 0,
        });
    }
    shape("quantised values", x.len(), q.len())?;
    if !x.len().is_multiple_of(k) {
        return Err(Error::ShapeMismatch {
            what: "activation values (a whole number of rows)",
            expected: x.len().next_multiple_of(k) as u64,
            actual: x.len() as u64,
        });
    }
    shape("row scales", x.len() / k, scales.len())?;
    quantize_rows("activations", (x, k), 127.0, q, scales)
}

/// [`quantize_rows_i8_into`] into new vectors: `(values, row scales)`.
pub fn quantize_rows_i8(x: &[f32], k: usize) -> Result<(Vec<i8>, Vec<f32>)> {
    let mut q = vec![0i8; x.len()];
    let mut s = vec![0f32; x.len().checked_div(k).unwrap_or(0)];
    quantize_rows_i8_into(x, k, &mut q, &mut s)?;
    Ok((q, s))
}

/// Quantises f32 weights given as `n` rows (output channels) of `k` values to int8 per
/// output channel: `(values [n][k], scales [n])`.
pub fn quantize_weights_i8(w: &[f32], n: usize, k: usize) -> Result<(Vec<i8>, Vec<f32>)> {
    shape("weight values", n * k, w.len())?;
    finite("weights", w)?;
    let mut q = vec![0i8; w.len()];
    let mut s = vec![0f32; n];
    if k > 0 {
        quantize_rows("weights", (w, k), 127.0, &mut q, &mut s)?;
    }
    Ok((q, s))
}

/// Quantises f32 weights given as `n` rows of `k` values to int4 (−7..=7) per output
/// channel: `(values [n][k] one per byte, scales [n])`; [`pack_nibbles`] packs them.
pub fn quantize_weights_i4(w: &[f32], n: usize, k: usize) -> Result<(Vec<i8>, Vec<f32>)> {
    shape("weight values", n * k, w.len())?;
    finite("weights", w)?;
    let mut q = vec![0i8; w.len()];
    let mut s = vec![0f32; n];
    if k > 0 {
        quantize_rows("weights", (w, k), 7.0, &mut q, &mut s)?;
    }
    Ok((q, s))
}

/// Packs int4 values (−8..=7, an even count) two per byte: value `2i` in the low nibble
/// and `2i + 1` in the high nibble of byte `i`, two's complement — the order of ggml's
/// and most int4 formats' element pairs.
pub fn pack_nibbles(values: &[i8]) -> Result<Vec<u8>> {
    if !values.len().is_multiple_of(2) {
        return Err(Error::ShapeMismatch {
            what: "int4 values (an even count)",
            expected: values.len() as u64 + 1,
            actual: values.len() as u64,
        });
    }
    if let Some(i) = values.iter().position(|v| !(-8..=7).contains(v)) {
        return Err(Error::OutOfRange {
            what: "int4 values",
            index: i,
            value: values[i].to_string(),
            range: "-8..=7",
        });
    }
    Ok(values
        .chunks_exact(2)
        .map(|p| (p[0] as u8 & 0xF) | ((p[1] as u8) << 4))
        .collect())
}

/// Unpacks [`pack_nibbles`]' bytes into int4 values, sign-extended.
pub fn unpack_nibbles(bytes: &[u8]) -> Vec<i8> {
    bytes
        .iter()
        .flat_map(|&b| [((b << 4) as i8) >> 4, (b as i8) >> 4])
        .collect()
}

/// Converts the 16 quant bytes of a GGUF Q4_0 block (32 weights: byte `j` holds weight
/// `j` in its low nibble and weight `j + 16` in its high nibble, unsigned with an offset
/// of 8) into 16 bytes of [`pack_nibbles`] order (weight `2i` low, `2i + 1` high, two's
/// complement). The block's scale is not touched: a Q4_0 tensor has one scale per 32
/// weights, and a weight bank one per output channel, so loading one requantises.
pub fn q4_0_to_nibbles(qs: &[u8; 16]) -> [u8; 16] {
    let value = |e: usize| -> u8 {
        let b = qs[e % 16];
        let u = if e < 16 { b & 0xF } else { b >> 4 };
        u.wrapping_sub(8) & 0xF
    };
    std::array::from_fn(|i| value(2 * i) | (value(2 * i + 1) << 4))
}

/// The W4A8 split of int8 activations into two int4 halves: `a = 16·hi + lo + 8` with
/// `hi = a >> 4` and `lo = (a & 15) − 8`, both in −8..=7. So
/// `A·W = 16·(Hi·W) + Lo·W + 8·colsum(W)` exactly: two int4 × int4 products and a
/// per-column correction. Writes `hi` and `lo` (each `a.len()` values).
pub fn split_w4a8(a: &[i8], hi: &mut [i8], lo: &mut [i8]) -> Result<()> {
    shape("high halves", a.len(), hi.len())?;
    shape("low halves", a.len(), lo.len())?;
    for ((&v, h), l) in a.iter().zip(hi.iter_mut()).zip(lo.iter_mut()) {
        *h = v >> 4;
        *l = (v & 15) - 8;
    }
    Ok(())
}

/// Σ|w| of each of `n` rows of `k` int4 weights (one value per byte, `[out][in]`) over
/// each 32-weight granule of the row: `n` rows of `⌈k/32⌉` sums (at most 256 each), what
/// [`super::WeightLayout::certified_i4`] bounds.
pub fn i4_magnitudes(w: &[i8], n: usize, k: usize) -> Result<Vec<u16>> {
    shape("int4 weight values", n.saturating_mul(k), w.len())?;
    let mut out = Vec::with_capacity(n * k.div_ceil(32));
    for row in w.chunks_exact(k.max(1)).take(n) {
        out.extend(
            row.chunks(32)
                .map(|g| g.iter().map(|&v| v.unsigned_abs() as u16).sum::<u16>()),
        );
    }
    Ok(out)
}

/// [`i4_magnitudes`] of packed nibbles: `n` rows of `k / 2` bytes (`k` even), weight
/// `2i` in the low nibble of byte `i` ([`pack_nibbles`]).
pub fn i4_magnitudes_packed(w: &[u8], n: usize, k: usize) -> Result<Vec<u16>> {
    shape("packed int4 weight bytes", n.saturating_mul(k / 2), w.len())?;
    let mut out = Vec::with_capacity(n * k.div_ceil(32));
    for row in w.chunks_exact((k / 2).max(1)).take(n) {
        out.extend(row.chunks(16).map(nibble_magnitudes));
    }
    Ok(out)
}

/// Σ|v| of the signed nibbles of `bytes` (at most 16 bytes, so at most 256), eight
/// bytes at a time: per nibble, `|v| = (v ^ s·15) + s` with `s` its sign bit (at most 8,
/// so a nibble never carries into the next), then the nibbles of each byte added (at
/// most 16) and the eight bytes summed by one multiplication (at most 128).
pub(crate) fn nibble_magnitudes(bytes: &[u8]) -> u16 {
    const ONES: u64 = 0x1111_1111_1111_1111;
    const LOW: u64 = 0x0F0F_0F0F_0F0F_0F0F;
    let word = |x: u64| {
        let s = (x >> 3) & ONES;
        let a = (x ^ (s * 15)) + s;
        let per_byte = (a & LOW) + ((a >> 4) & LOW);
        (per_byte.wrapping_mul(0x0101_0101_0101_0101) >> 56) as u16
    };
    let mut words = bytes.chunks_exact(8);
    let mut total: u16 = words
        .by_ref()
        .map(|c| word(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
        .sum();
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut b = [0u8; 8];
        b[..tail.len()].copy_from_slice(tail);
        total += word(u64::from_le_bytes(b));
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_rounding_without_libm_is_round_half_even_with_the_clamp() {
        // Every tie and its neighbours in range, values beyond it, and a spread of
        // ordinary values: the same integer as `round_ties_even` then the clamp.
        let mut ys: Vec<f32> = (-300..=300).map(|i| i as f32 * 0.5).collect();
        for i in -140..=140 {
            let t = i as f32 + 0.5;
            ys.extend([t.next_down(), t, t.next_up()]);
        }
        ys.extend((0..10_000).map(|i| ((i as f32) * 0.7331).sin() * 131.0));
        ys.extend([0.0, -0.0, 1e-30, -1e-30, f32::MAX, f32::MIN, f32::INFINITY]);
        for max in [127.0, 7.0] {
            for &y in &ys {
                let want = y.round_ties_even().clamp(-max, max) as i8;
                assert_eq!(round_small(y, max), want, "{y} within ±{max}");
            }
        }
    }

    #[test]
    fn a_row_of_subnormal_values_quantises_to_its_full_range() {
        let tiny = f32::from_bits(1); // the smallest subnormal
        let x = [tiny, -tiny, 0.0, tiny];
        let (mut q, mut s) = ([0i8; 4], [0f32; 1]);
        quantize_rows_i8_into(&x, 4, &mut q, &mut s).unwrap();
        assert_eq!(q, [127, -127, 0, 127]);
    }

    #[test]
    fn nibbles_round_trip_and_q4_0_order() {
        let v: Vec<i8> = (-8..8).chain(-8..8).collect();
        let p = pack_nibbles(&v).unwrap();
        assert_eq!(p[0], 0x98, "-8 low (0x8), -7 high (0x9)");
        assert_eq!(unpack_nibbles(&p), v);
        // A Q4_0 block whose weight e is (e % 16) - 8.
        let qs: [u8; 16] = std::array::from_fn(|j| (j as u8) | ((j as u8) << 4));
        let ours = q4_0_to_nibbles(&qs);
        let want: Vec<i8> = (0..32).map(|e| (e % 16) as i8 - 8).collect();
        assert_eq!(unpack_nibbles(&ours), want);
        assert!(matches!(
            pack_nibbles(&[1]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            pack_nibbles(&[1, 9]),
            Err(Error::OutOfRange { index: 1, .. })
        ));
    }

    proptest! {
        /// The per-row quantiser (largest magnitude and finiteness in one lane-wise
        /// pass) gives the values and scales of a plain fold of `f32::max`, over rows
        /// whole and partial in its 8 lanes, and refuses the first value that is not
        /// finite by its index.
        #[test]
        fn row_quantisation_matches_the_plain_fold(
            k in 1usize..40,
            rows in 1usize..5,
            seed: u64,
            bad in proptest::option::of((any::<prop::sample::Index>(), 0usize..3)),
        ) {
            let mut x: Vec<f32> = (0..rows * k)
                .map(|i| ((seed.wrapping_mul(i as u64 + 1) >> 40) as f32 - 8e6) * 1e-3)
                .collect();
            if let Some((at, kind)) = bad {
                let i = at.index(x.len());
                x[i] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][kind];
                let first = x.iter().position(|v| !v.is_finite()).unwrap();
                let index = match quantize_rows_i8(&x, k) {
                    Err(Error::OutOfRange { index, .. }) => Some(index),
                    _ => None,
                };
                prop_assert_eq!(index, Some(first));
                return Ok(());
            }
            let (q, scales) = quantize_rows_i8(&x, k).unwrap();
            for (r, row) in x.chunks_exact(k).enumerate() {
                let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
                prop_assert_eq!(scales[r].to_bits(), (amax / 127.0).to_bits());
                let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
                for (j, &v) in row.iter().enumerate() {
                    prop_assert_eq!(q[r * k + j], round_small(v * inv, 127.0));
                }
            }
        }
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        assert!(matches!(
            quantize_rows_i8(&[1.0, f32::NAN], 2),
            Err(Error::OutOfRange { index: 1, .. })
        ));
        assert!(matches!(
            quantize_rows_i8(&[1.0, 2.0, 3.0], 2),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(quantize_rows_i8(&[1.0], 0).is_err());
        assert!(matches!(
            quantize_weights_i8(&[1.0; 5], 2, 3),
            Err(Error::ShapeMismatch {
                expected: 6,
                actual: 5,
                ..
            })
        ));
        let (q, s) = quantize_rows_i8(&[0.0; 4], 4).unwrap();
        assert_eq!((q, s), (vec![0; 4], vec![0.0]));
    }

    proptest! {
        #[test]
        fn quantised_rows_are_within_half_a_step(x in prop::collection::vec(-1e4f32..1e4, 1..64), k in 1usize..8) {
            let rows = x.len() / k;
            prop_assume!(rows > 0);
            let x = &x[..rows * k];
            let (q, s) = quantize_rows_i8(x, k).unwrap();
            for (i, (&v, &qv)) in x.iter().zip(&q).enumerate() {
                let scale = s[i / k];
                prop_assert!((qv as f32 * scale - v).abs() <= scale * 0.5001 + f32::EPSILON);
                prop_assert!(qv >= -127);
            }
            let (w4, s4) = quantize_weights_i4(x, rows, k).unwrap();
            for (i, (&v, &qv)) in x.iter().zip(&w4).enumerate() {
                prop_assert!((-7..=7).contains(&qv));
                prop_assert!((qv as f32 * s4[i / k] - v).abs() <= s4[i / k] * 0.5001 + f32::EPSILON);
            }
        }

        #[test]
        fn the_w4a8_split_is_exact(a in prop::collection::vec(any::<i8>(), 1..64)) {
            let (mut hi, mut lo) = (vec![0; a.len()], vec![0; a.len()]);
            split_w4a8(&a, &mut hi, &mut lo).unwrap();
            for ((&v, &h), &l) in a.iter().zip(&hi).zip(&lo) {
                prop_assert!((-8..=7).contains(&h) && (-8..=7).contains(&l));
                prop_assert_eq!(16 * h as i32 + l as i32 + 8, v as i32);
            }
        }
    }
}
