//! The A buffer of a W4A8 call in one pass over int8 activations: each value's high and
//! low int4 halves ([`split_w4a8`](crate::kernels::matmul::quant::split_w4a8)) packed
//! straight into the int4 plan's native A layout, without the halves as separate
//! arrays.

use super::super::{Plan, unsupported};
use super::blocks;
use super::rows::zero_uncovered;
use crate::error::{Error, Result};
use crate::kernels::single::Dtype;
use crate::sys::simd;

/// Packs int8 activations `a` (row-major M×K) for the int4 plan of `2·M` rows that runs
/// them against an int4 bank (W4A8): plan rows `0..M` hold the high halves `a >> 4`,
/// rows `M..2M` the low halves `(a & 15) − 8`, as [`Plan::pack_a_int`] packs them from
/// [`split_w4a8`](crate::kernels::matmul::quant::split_w4a8)'s output (the same bytes,
/// tested). `out` holds `plan.a_bytes` bytes; every byte is written.
pub fn activations_w4a8_into(plan: &Plan, a: &[i8], out: &mut [u8]) -> Result<()> {
    w4a8(plan, a, out, simd::avx2())
}

/// [`activations_w4a8_into`]; `vector`: each run of rows whose high halves share a block
/// and whose low halves share a block by [`Run::pack`].
pub(super) fn w4a8(plan: &Plan, a: &[i8], out: &mut [u8], vector: bool) -> Result<()> {
    if plan.spec.dtype != Dtype::Int4 || !plan.spec.m.is_multiple_of(2) {
        return Err(unsupported(format!(
            "W4A8 activations for a {:?} plan of {} rows (an int4 plan of 2·M rows)",
            plan.spec.dtype, plan.spec.m
        )));
    }
    let (m, k) = (plan.spec.m as usize / 2, plan.spec.k as usize);
    Error::check_len("activation values", m * k, a.len())?;
    Error::check_len("A buffer bytes", plan.a_bytes as usize, out.len())?;
    let block_bytes = |t: &super::super::TaskTile| {
        let kw = plan.layout.waves[t.wave as usize].kw as usize;
        t.rows as usize * kw.next_multiple_of(32) / 2
    };
    zero_uncovered(plan, out, block_bytes);
    for t in blocks(plan) {
        let offset = t.a_offset;
        let w = plan.layout.waves[t.wave as usize];
        let (k0, kw, rows) = (w.k0 as usize, w.kw as usize, t.rows as usize);
        if vector {
            // The block's high rows with their low rows, wherever those are.
            if t.m0 as usize >= m {
                continue;
            }
            let high = t.m0 as usize..(t.m0 as usize + rows).min(m);
            let mut s = high.start;
            while s < high.end {
                // The block holding the low half of source row s: plan row s + m of this
                // wave (any task of it: the tasks of a block share its offset).
                let low = plan.tasks.iter().find(|u| {
                    u.wave == t.wave && (u.m0 as usize..(u.m0 + u.rows) as usize).contains(&(s + m))
                });
                let Some(u) = low else {
                    return Err(unsupported(format!(
                        "W4A8 activations: no task of wave {} holds plan row {}",
                        t.wave,
                        s + m
                    )));
                };
                let end = high.end.min((u.m0 + u.rows) as usize - m);
                let high_block = Block {
                    at: offset as usize,
                    rows,
                    row: s - t.m0 as usize,
                };
                let low_block = Block {
                    at: u.a_offset as usize,
                    rows: u.rows as usize,
                    row: s + m - u.m0 as usize,
                };
                let run = Run {
                    k0,
                    kw,
                    rows: s..end,
                    k,
                };
                run.pack(a, out, high_block, low_block);
                s = end;
            }
            continue;
        }
        let block = &mut out[offset as usize..][..block_bytes(t)];
        for r in 0..rows {
            let p = t.m0 as usize + r;
            let (src, low) = if p < m { (p, false) } else { (p - m, true) };
            let src = &a[src * k + k0..][..kw];
            // Native layout: 32 channels of a row are 16 bytes, rows of a channel
            // group one after another.
            let (whole, tail) = src.as_chunks::<32>();
            let mut put = |g: usize, packed: [u8; 16]| {
                let at = (g * rows + r) * 16;
                block[at..at + 16].copy_from_slice(&packed);
            };
            if low {
                for (g, chunk) in whole.iter().enumerate() {
                    put(g, halves::<true>(chunk));
                }
            } else {
                for (g, chunk) in whole.iter().enumerate() {
                    put(g, halves::<false>(chunk));
                }
            }
            if !tail.is_empty() {
                put(whole.len(), partial_halves(tail, low));
            }
        }
    }
    Ok(())
}

/// A block of a W4A8 plan's A buffer that one half of a run's values goes to: `rows`
/// plan rows from byte `at`, the run's first row going to row `row` of them.
#[derive(Clone, Copy)]
struct Block {
    at: usize,
    rows: usize,
    row: usize,
}

/// Source rows `rows` of A (rows of `k` values) over channels `k0..k0 + kw` of a wave,
/// whose high halves all go to one block and whose low halves to another.
struct Run {
    k0: usize,
    kw: usize,
    rows: std::ops::Range<usize>,
    k: usize,
}

impl Run {
    /// Packs both halves of the run's values into `out`: whole groups of 32 channels by
    /// [`simd::w4a8_halves`], then each row's tail.
    fn pack(&self, a: &[i8], out: &mut [u8], high: Block, low: Block) {
        let (whole, tail) = (self.kw / 32, self.kw % 32);
        let src = &a[self.rows.start * self.k + self.k0..];
        let place = |b: Block| simd::HalfOut {
            at: b.at + b.row * 16,
            stride: b.rows * 16,
        };
        let (hi, lo) = (place(high), place(low));
        let shape = (self.k, self.rows.len(), whole);
        simd::w4a8_halves(src, shape, out, hi, lo);
        for r in (0..self.rows.len()).filter(|_| tail > 0) {
            let values = &src[r * self.k + 32 * whole..][..tail];
            for (half, is_low) in [(hi, false), (lo, true)] {
                let at = half.at + whole * half.stride + r * 16;
                out[at..at + 16].copy_from_slice(&partial_halves(values, is_low));
            }
        }
    }
}

/// 32 int8 values as 16 bytes of int4 halves (`LOW`: `(v & 15) − 8`, else `v >> 4`),
/// the even channel in the high nibble: the nibble of `v >> 4` is `v`'s high nibble,
/// that of `(v & 15) − 8` is `v`'s low nibble with its top bit flipped. Each pair is
/// one 16-bit lane (even value in the low byte), narrowed to its byte at the end.
#[inline]
fn halves<const LOW: bool>(v: &[i8; 32]) -> [u8; 16] {
    let lanes: [u16; 16] =
        std::array::from_fn(|j| u16::from_le_bytes([v[2 * j] as u8, v[2 * j + 1] as u8]));
    if LOW {
        lanes.map(|l| ((((l & 0x0F) ^ 8) << 4) | (((l >> 8) & 0x0F) ^ 8)) as u8)
    } else {
        lanes.map(|l| ((l & 0xF0) | (l >> 12)) as u8)
    }
}

/// [`halves`] of fewer than 32 values: the padding channels' nibbles are zero.
fn partial_halves(v: &[i8], low: bool) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, &x) in v.iter().enumerate() {
        let x = x as u8;
        let nib = if low { (x & 0xF) ^ 8 } else { x >> 4 };
        out[i / 2] |= if i % 2 == 0 { nib << 4 } else { nib };
    }
    out
}
