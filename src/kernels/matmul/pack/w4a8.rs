//! The A buffer of a W4A8 call in one pass over int8 activations: each value's high and
//! low int4 halves ([`split_w4a8`](crate::kernels::matmul::quant::split_w4a8)) packed
//! straight into the int4 plan's native A layout, without the halves as separate
//! arrays.

use super::super::{Plan, unsupported};
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

/// [`activations_w4a8_into`]; `vector`: the whole groups of 32 channels of each run of
/// rows by [`simd::w4a8_rows`].
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
    // One block per (wave, M tile); tasks of other column tiles share them: each block
    // is its first task's (found without a list, so a call allocates nothing).
    let blocks = || {
        let tasks = &plan.tasks;
        (0..tasks.len())
            .filter(move |&i| !tasks[..i].iter().any(|u| u.a_offset == tasks[i].a_offset))
            .map(move |i| (tasks[i].a_offset, i))
    };
    let block_bytes = |t: &super::super::TaskTile| {
        let kw = plan.layout.waves[t.wave as usize].kw as usize;
        t.rows as usize * kw.next_multiple_of(32) / 2
    };
    let covered: usize = blocks().map(|(_, i)| block_bytes(&plan.tasks[i])).sum();
    if covered != out.len() {
        out.fill(0);
    }
    for (offset, i) in blocks() {
        let t = &plan.tasks[i];
        let w = plan.layout.waves[t.wave as usize];
        let (k0, kw, rows) = (w.k0 as usize, w.kw as usize, t.rows as usize);
        let block = &mut out[offset as usize..][..block_bytes(t)];
        if vector {
            // The block's high rows, then its low rows: each a run of consecutive rows of
            // A, whole groups of 32 channels by the vector kernel, then each row's tail.
            let m0 = t.m0 as usize;
            let high = m.saturating_sub(m0).min(rows);
            let (whole, tail) = (kw / 32, kw % 32);
            for (r0, run, first, low) in [
                (0, high, m0, false),
                (high, rows - high, (m0 + high).saturating_sub(m), true),
            ] {
                if run == 0 {
                    continue;
                }
                let src = &a[first * k + k0..];
                simd::w4a8_rows(src, (k, run, whole), low, &mut block[r0 * 16..], rows * 16);
                for r in (0..run).filter(|_| tail > 0) {
                    let values = &src[r * k + 32 * whole..][..tail];
                    let at = (whole * rows + r0 + r) * 16;
                    block[at..at + 16].copy_from_slice(&partial_halves(values, low));
                }
            }
            continue;
        }
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
