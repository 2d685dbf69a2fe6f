//! Where a float plan's A buffer is the activations' own rows: fp16 or bf16 values,
//! row after row at a fixed stride, so that a caller can write them where the NPU reads
//! them instead of handing them to a packer (docs/matmul.md, "Writing activations in
//! place").

use super::super::{Plan, TaskTile, unsupported};
use super::blocks;
use crate::error::{Error, Result};
use crate::kernels::single::{Dtype, not_finite, special_exponent};

/// How the rows of a float plan's activations lie in its A buffer when they lie there
/// as rows ([`plain_rows`]): value `k` of row `m` is the two bytes at
/// `m · stride + 2 · k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowLayout {
    /// Rows (the plan's M).
    pub rows: usize,
    /// Values a row (the plan's K).
    pub k: usize,
    /// Bytes from one row's start to the next's: `2 · K` rounded up to the NPU's atom
    /// of 32 channels (its padding bytes are zeros), or the whole buffer for one row.
    pub stride: usize,
    /// The bytes the rows span from the buffer's start.
    pub span: usize,
}

/// The layout of `plan`'s A buffer as rows, or why it is not one ([`Error::Unsupported`]):
/// a float (fp16 or bf16) plan whose A block per K wave covers every row, in one wave
/// (rows padded to 32 channels), or of one row whose waves follow each other with no
/// padding between them. Other plans cut the rows into M tiles or interleave waves, and
/// only their packers put values where they go.
pub fn plain_rows(plan: &Plan) -> Result<RowLayout> {
    let (m, k) = (plan.spec.m as usize, plan.spec.k as usize);
    if !plan.spec.dtype.is_float() {
        return Err(unsupported(format!(
            "activations written in place on a {:?} plan (fp16 or bf16: integer \
             activations are quantised by the library)",
            plan.spec.dtype
        )));
    }
    let mut tiles: Vec<&TaskTile> = blocks(plan).collect();
    tiles.sort_by_key(|t| t.wave);
    let mut span = 0usize;
    for (i, t) in tiles.iter().enumerate() {
        let w = plan.layout.waves[t.wave as usize];
        let whole_rows = t.m0 == 0 && t.rows as usize == m;
        let in_place = t.a_offset == 2 * w.k0 as u64;
        let last = i + 1 == tiles.len();
        // Padding between two waves' values would sit inside the row.
        let unpadded = last || w.ai == w.kw;
        if !(whole_rows && in_place && unpadded && (m == 1 || tiles.len() == 1)) {
            return Err(unsupported(format!(
                "activations written in place: the plan of {m} rows cuts them into M tiles \
                 or K waves (one wave, or one row, is written in place)"
            )));
        }
        span = span.max(t.a_offset as usize + m * 2 * w.ai as usize);
    }
    let stride = match tiles.first() {
        Some(t) if m > 1 => 2 * plan.layout.waves[t.wave as usize].ai as usize,
        _ => span,
    };
    Ok(RowLayout {
        rows: m,
        k,
        stride,
        span,
    })
}

/// Makes `out` (the plan's A buffer, `rows` written by a caller) what the packer would
/// have made of the same values: the padding after each row's values, and the bytes
/// past the rows, zeroed; then checks every value is finite in the plan's type `dtype`
/// (fp16 or bf16), naming the first that is not as [`Error::OutOfRange`] with its index
/// in row-major M×K.
pub(crate) fn seal_rows(rows: &RowLayout, dtype: Dtype, out: &mut [u8]) -> Result<()> {
    if out.len() < rows.span {
        return Err(Error::ShapeMismatch {
            what: "A buffer bytes (at least the rows' span)",
            expected: rows.span as u64,
            actual: out.len() as u64,
        });
    }
    let (values, stride) = (2 * rows.k, rows.stride);
    for r in 0..rows.rows {
        let end = match r + 1 == rows.rows {
            true => rows.span,
            false => (r + 1) * stride,
        };
        out[r * stride + values..end].fill(0);
    }
    out[rows.span..].fill(0);
    let exponent = special_exponent(dtype);
    for r in 0..rows.rows {
        let row = &out[r * stride..][..values];
        let bits = |i: usize| u16::from_le_bytes([row[2 * i], row[2 * i + 1]]);
        if let Some(i) = (0..rows.k).find(|&i| bits(i) & exponent == exponent) {
            let what = "activations written in place";
            return Err(not_finite(dtype, what, r * rows.k + i, bits(i)));
        }
    }
    Ok(())
}

/// Puts each row of every block of `plan` (`a` row-major M×K) into `out`, its A buffer
/// (each block row-major, rows of the wave's `ai` channels of `SIZE` bytes each),
/// through `convert` (a run of source values into their bytes; whether all were finite),
/// and zeroes the rows' padding and any byte no block covers. Returns whether every
/// value was finite. The caller checks that the plan's type is `SIZE` bytes a value.
#[inline(always)]
pub(super) fn rows_into<T, const SIZE: usize>(
    plan: &Plan,
    a: &[T],
    out: &mut [u8],
    mut convert: impl FnMut(&[T], &mut [u8]) -> bool,
) -> Result<bool> {
    let (m, k) = (plan.spec.m as usize, plan.spec.k as usize);
    Error::check_len("activation values", m * k, a.len())?;
    Error::check_len("A buffer bytes", plan.a_bytes as usize, out.len())?;
    let block_bytes =
        |t: &TaskTile| t.rows as usize * plan.layout.waves[t.wave as usize].ai as usize * SIZE;
    zero_uncovered(plan, out, block_bytes);
    let mut finite = true;
    for t in blocks(plan) {
        let w = plan.layout.waves[t.wave as usize];
        let (k0, kw, row_bytes) = (w.k0 as usize, w.kw as usize, w.ai as usize * SIZE);
        let block = &mut out[t.a_offset as usize..][..block_bytes(t)];
        for (r, dst) in block.chunks_exact_mut(row_bytes).enumerate() {
            let src = &a[(t.m0 as usize + r) * k + k0..][..kw];
            let (values, padding) = dst.split_at_mut(SIZE * kw);
            finite &= convert(src, values);
            padding.fill(0);
        }
    }
    Ok(finite)
}

/// Zeroes `out`, `plan`'s A buffer, when its blocks (of `block_bytes` each) do not
/// cover every byte of it, so that a packer writing only the blocks leaves no stale
/// byte.
pub(super) fn zero_uncovered(
    plan: &Plan,
    out: &mut [u8],
    block_bytes: impl Fn(&TaskTile) -> usize,
) {
    if blocks(plan).map(block_bytes).sum::<usize>() != out.len() {
        out.fill(0);
    }
}

#[cfg(test)]
mod tests {
    //! Rows written through the layout, sealed, against the packer's buffer of the same
    //! values; the plans refused; the seal's zeroing and its finiteness check.

    use super::*;
    use crate::float::{f32_to_bf16, f32_to_f16};
    use crate::kernels::matmul::MatmulSpec;
    use crate::kernels::matmul::pack::activations_float_into;

    fn plan(m: u32, k: u32, dtype: Dtype) -> Plan {
        Plan::new(MatmulSpec::new(m, k, 64, dtype)).unwrap()
    }

    /// Writes `a` through `rows` into a buffer of stale bytes and seals it.
    fn written(plan: &Plan, rows: &RowLayout, a: &[f32]) -> Result<Vec<u8>> {
        let dtype = plan.spec.dtype;
        let mut out = vec![0xA5u8; plan.a_bytes as usize];
        for (r, row) in a.chunks_exact(rows.k).enumerate() {
            for (i, &v) in row.iter().enumerate() {
                let bits = match dtype {
                    Dtype::Bf16 => f32_to_bf16(v),
                    _ => f32_to_f16(v),
                };
                out[r * rows.stride + 2 * i..][..2].copy_from_slice(&bits.to_le_bytes());
            }
        }
        seal_rows(rows, dtype, &mut out)?;
        Ok(out)
    }

    #[test]
    fn rows_written_in_place_are_the_packers_buffer() {
        let mut rng = crate::seeded::Rng::new(41);
        // One wave with and without padding, several rows; one row over several waves.
        for (m, k) in [(1, 64), (3, 40), (7, 96), (1, 4100), (1, 9000), (5, 4096)] {
            for dtype in [Dtype::Fp16, Dtype::Bf16] {
                let p = plan(m, k, dtype);
                let rows = plain_rows(&p).unwrap();
                assert_eq!((rows.rows, rows.k), (m as usize, k as usize));
                let a: Vec<f32> = (0..m * k).map(|_| rng.unit() * 4.0 - 2.0).collect();
                let mut packed = vec![0x5Au8; p.a_bytes as usize];
                activations_float_into(&p, &a, &mut packed).unwrap();
                assert_eq!(written(&p, &rows, &a).unwrap(), packed, "{m}×{k} {dtype:?}");
            }
        }
    }

    #[test]
    fn plans_whose_rows_are_not_plain_are_refused() {
        // Several rows over several waves, and integer plans.
        for (m, k, dtype) in [
            (4, 9000, Dtype::Fp16),
            (1, 64, Dtype::Int8),
            (2, 64, Dtype::Int4),
        ] {
            let r = plain_rows(&plan(m, k, dtype));
            assert!(
                matches!(r, Err(Error::Unsupported { .. })),
                "{m}×{k} {dtype:?}: {r:?}"
            );
        }
    }

    #[test]
    fn a_value_that_is_not_finite_is_named_by_its_index() {
        for (dtype, bad) in [(Dtype::Fp16, f32::INFINITY), (Dtype::Bf16, f32::NAN)] {
            let p = plan(3, 40, dtype);
            let rows = plain_rows(&p).unwrap();
            let mut a = vec![1.0f32; 120];
            a[77] = bad;
            let e = written(&p, &rows, &a).unwrap_err();
            assert!(matches!(e, Error::OutOfRange { index: 77, .. }), "{e:?}");
        }
    }
}
