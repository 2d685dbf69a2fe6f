//! Fast packers for 8-bit and 4-bit inputs held as `i8`, and the fast unpacking of
//! int32 results. They produce the same bytes as the general packers of the plan (tested);
//! these are the ones to use per call, and the ones `rknpu bench pack` measures.

use super::{Plan, WeightLayout, unsupported};
use crate::error::{Error, Result};
use crate::kernels::single::{Dtype, OutType, check_float_bits};
use crate::sys::simd;
use zerocopy::IntoBytes;

mod float;
mod i4_stats;
mod rows;
mod w4a8;

pub use float::{activations_float_into, activations_half_into};
pub use i4_stats::{i4_bank_magnitudes, i4_column_sums};
use i4_stats::{row_nibble_sum, swap_nibbles};
pub(crate) use rows::seal_rows;
pub use rows::{RowLayout, plain_rows};
pub use w4a8::activations_w4a8_into;

/// Whether the plan's weight bank has padding (N to the tile granule, K to 32).
fn padded(layout: &WeightLayout) -> bool {
    layout.n_pad != layout.n || layout.waves.iter().any(|w| w.kw != w.ai)
}

/// Channel blocks of 32 packed together from K×N: their rows (`KB_BLOCK · 32` rows
/// of B) are read while they stay in cache, and each group's atoms of them are one
/// contiguous run of the output.
const KB_BLOCK: usize = 4;

/// The `(channel block, kernel group)` of each atom of a wave, in the order the K×N
/// packers visit them: [`KB_BLOCK`] channel blocks at a time, every group across them.
fn atom_order(kb_count: usize, groups: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..kb_count).step_by(KB_BLOCK).flat_map(move |kb0| {
        (0..groups).flat_map(move |g| (kb0..(kb0 + KB_BLOCK).min(kb_count)).map(move |kb| (kb, g)))
    })
}

/// Packs int8 B from row-major K×N into the weight bank of `layout`: one 32×32 transpose
/// per atom, through a tile that stays in L1.
pub fn weights_i8_kn(layout: &WeightLayout, b: &[i8]) -> Result<Vec<u8>> {
    let mut out = vec![0u8; layout.bytes as usize];
    weights_i8_kn_into(layout, b, &mut out)?;
    Ok(out)
}

/// Packs int8 B (row-major K×N) into `out`, which holds `layout.bytes` bytes (a buffer reused across
/// calls, or a device mapping); every byte is written.
pub fn weights_i8_kn_into(layout: &WeightLayout, b: &[i8], out: &mut [u8]) -> Result<()> {
    i8_kn(layout, b, out, simd::avx2())
}

/// [`weights_i8_kn_into`]; `vector`: whole atoms transposed from the copy of their rows
/// by [`simd::transpose_i8_atom`], otherwise by [`i8_atom_from_rows`].
fn i8_kn(layout: &WeightLayout, b: &[i8], out: &mut [u8], vector: bool) -> Result<()> {
    if out.len() as u64 != layout.bytes {
        return Err(unsupported(format!(
            "{} bytes for a {}-byte weight bank",
            out.len(),
            layout.bytes
        )));
    }
    check(layout, Dtype::Int8, b.len())?;
    let n = layout.n as usize;
    let n_pad = layout.n_pad as usize;
    let bytes_b = b.as_bytes();
    for (w, &base) in layout.waves.iter().zip(&layout.b_offsets) {
        let kb_count = w.ai as usize / 32;
        // Whole atoms (32 channels, 32 real kernels): 32 rows of a strip of groups
        // copied as contiguous runs, then transposed from the copy.
        let (full_kb, full_g) = (w.kw as usize / 32, n / 32);
        for kb0 in (0..full_kb).step_by(KB_BLOCK) {
            for s0 in (0..full_g).step_by(2 * STRIP) {
                let groups = (full_g - s0).min(2 * STRIP);
                for kb in kb0..(kb0 + KB_BLOCK).min(full_kb) {
                    let first = (w.k0 as usize + kb * 32) * n + s0 * 32;
                    let mut rows = [[0u8; 64 * STRIP]; 32];
                    for (i, row) in rows.iter_mut().enumerate() {
                        row[..groups * 32]
                            .copy_from_slice(&bytes_b[first + i * n..][..groups * 32]);
                    }
                    for gl in 0..groups {
                        let at = base as usize + ((s0 + gl) * kb_count + kb) * 1024;
                        let atom = &mut out[at..at + 1024];
                        match atom.first_chunk_mut::<1024>() {
                            Some(atom) if vector => {
                                let copy = rows.as_flattened();
                                simd::transpose_i8_atom(copy, gl * 32, 64 * STRIP, atom);
                            }
                            _ => i8_atom_from_rows(&rows, gl * 32, atom),
                        }
                    }
                }
            }
        }
        for (kb, g) in atom_order(kb_count, n_pad / 32) {
            if kb < full_kb && g < full_g {
                continue;
            }
            // An atom with padding: byte by byte.
            let k_rows = (w.kw as usize).saturating_sub(kb * 32).min(32);
            let cols = n.saturating_sub(g * 32).min(32);
            let at = base as usize + (g * kb_count + kb) * 1024;
            let atom = &mut out[at..at + 1024];
            atom.fill(0);
            for kk in 0..k_rows {
                let row = &b[(w.k0 as usize + kb * 32 + kk) * n + g * 32..][..cols];
                for (nn, &v) in row.iter().enumerate() {
                    atom[nn * 32 + kk] = v as u8;
                }
            }
        }
    }
    Ok(())
}

/// One full int8 atom (32 channels × 32 kernels, `[kernel][32 channels]`) from 32 rows
/// of K×N values, its kernels from column `col` on: sixteen 8×8 byte transposes.
fn i8_atom_from_rows(rows: &[[u8; 64 * STRIP]; 32], col: usize, atom: &mut [u8]) {
    for k8 in 0..4 {
        for n8 in 0..4 {
            let block: [u64; 8] = std::array::from_fn(|i| {
                let at = col + n8 * 8;
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(&rows[k8 * 8 + i][at..at + 8]);
                u64::from_le_bytes(bytes)
            });
            for (j, word) in transpose8(block).iter().enumerate() {
                let at = (n8 * 8 + j) * 32 + k8 * 8;
                atom[at..at + 8].copy_from_slice(&word.to_le_bytes());
            }
        }
    }
}

/// Packs int8 B given as N×K (each kernel's channels contiguous, the layout of a
/// `[out_features][in_features]` weight matrix) into the weight bank of `layout`.
pub fn weights_i8_nk(layout: &WeightLayout, bt: &[i8]) -> Result<Vec<u8>> {
    let mut out = vec![0u8; layout.bytes as usize];
    weights_i8_nk_into(layout, bt, &mut out)?;
    Ok(out)
}

/// Packs int8 B given as N×K into `out` (`layout.bytes` bytes); every byte is written.
/// Each kernel's channels are contiguous in both layouts, so this is a copy of 32-byte
/// runs.
pub fn weights_i8_nk_into(layout: &WeightLayout, bt: &[i8], out: &mut [u8]) -> Result<()> {
    check(layout, Dtype::Int8, bt.len())?;
    if out.len() as u64 != layout.bytes {
        return Err(unsupported(format!(
            "{} bytes for a {}-byte weight bank",
            out.len(),
            layout.bytes
        )));
    }
    if padded(layout) {
        out.fill(0);
    }
    let k_all = layout.k as usize;
    let bt = bt.as_bytes();
    let n = layout.n as usize;
    // Group by group of 32 kernels: their rows are one contiguous run of the input, read
    // while it stays in cache; atom by atom within each wave, so the writes stream.
    for g in 0..n.div_ceil(32) {
        let kernels = (n - g * 32).min(32);
        let rows = &bt[g * 32 * k_all..][..kernels * k_all];
        for (w, &base) in layout.waves.iter().zip(&layout.b_offsets) {
            let kb_count = w.ai as usize / 32;
            for kb in 0..kb_count {
                let k0 = w.k0 as usize + kb * 32;
                let len = (w.kw as usize - kb * 32).min(32);
                let atom = base as usize + (g * kb_count + kb) * 1024;
                let dst = out[atom..atom + kernels * 32].chunks_exact_mut(32);
                for (dst, src) in dst.zip(rows.chunks_exact(k_all)) {
                    dst[..len].copy_from_slice(&src[k0..k0 + len]);
                }
            }
        }
    }
    Ok(())
}

/// Packs int4 B (values −8..=7, row-major K×N) into the weight bank of `layout`: 64 kernels
/// of 32 channels per 1024-byte atom, the even channel in the high nibble.
pub fn weights_i4_kn(layout: &WeightLayout, b: &[i8]) -> Result<Vec<u8>> {
    let mut out = vec![0u8; layout.bytes as usize];
    weights_i4_kn_into(layout, b, &mut out)?;
    Ok(out)
}

/// Packs int4 B (row-major K×N) into `out`, which holds `layout.bytes` bytes (a buffer reused across
/// calls, or a device mapping); every byte is written.
pub fn weights_i4_kn_into(layout: &WeightLayout, b: &[i8], out: &mut [u8]) -> Result<()> {
    if out.len() as u64 != layout.bytes {
        return Err(unsupported(format!(
            "{} bytes for a {}-byte weight bank",
            out.len(),
            layout.bytes
        )));
    }
    check(layout, Dtype::Int4, b.len())?;
    // One pass that vectorises; the value is looked for only when one is out of range.
    let outside = b
        .iter()
        .fold(0u8, |acc, &v| acc | ((v as u8).wrapping_add(8) & 0xF0));
    if outside != 0
        && let Some(v) = b.iter().find(|v| !(-8..=7).contains(*v))
    {
        return Err(unsupported(format!("int4 weight {v} is outside -8..=7")));
    }
    let n = layout.n as usize;
    let n_pad = layout.n_pad as usize;
    let bytes_b = b.as_bytes();
    for (w, &base) in layout.waves.iter().zip(&layout.b_offsets) {
        let kb_count = w.ai as usize / 32;
        // Whole atoms (32 channels, 64 real kernels), a strip of groups at a time.
        let (full_kb, full_g) = (w.kw as usize / 32, n / 64);
        for kb0 in (0..full_kb).step_by(KB_BLOCK) {
            for s0 in (0..full_g).step_by(STRIP) {
                let groups = (full_g - s0).min(STRIP);
                for kb in kb0..(kb0 + KB_BLOCK).min(full_kb) {
                    let first = (w.k0 as usize + kb * 32) * n + s0 * 64;
                    let pairs = i4_pairs(bytes_b, (first, n), groups * 64);
                    for gl in 0..groups {
                        let at = base as usize + ((s0 + gl) * kb_count + kb) * 1024;
                        i4_atom_from_pairs(&pairs, gl * 64, &mut out[at..at + 1024]);
                    }
                }
            }
        }
        for (kb, g) in atom_order(kb_count, n_pad / 64) {
            if kb < full_kb && g < full_g {
                continue;
            }
            let k_rows = (w.kw as usize).saturating_sub(kb * 32).min(32);
            let cols = n.saturating_sub(g * 64).min(64);
            let at = base as usize + (g * kb_count + kb) * 1024;
            let mut tile = [0u8; 1024];
            for pair in 0..k_rows.div_ceil(2) {
                let k = w.k0 as usize + kb * 32 + 2 * pair;
                let hi = &b[k * n + g * 64..][..cols];
                if 2 * pair + 1 < k_rows {
                    let lo = &b[(k + 1) * n + g * 64..][..cols];
                    for nn in 0..cols {
                        tile[nn * 16 + pair] = ((hi[nn] as u8) << 4) | (lo[nn] as u8 & 0xF);
                    }
                } else {
                    for nn in 0..cols {
                        tile[nn * 16 + pair] = (hi[nn] as u8) << 4;
                    }
                }
            }
            out[at..at + 1024].copy_from_slice(&tile);
        }
    }
    Ok(())
}

/// Kernel groups of 64 whose channel pairs [`i4_pairs`] packs together.
const STRIP: usize = 8;

/// The 16 channel pairs of 32 rows of K×N values one a byte (the first row's first
/// value at `first`, rows `n` apart), `width` columns of each (at most `64 · STRIP`):
/// byte `j` of pair `p` holds column `j` of row `2p` in its high nibble and of row
/// `2p + 1` in its low nibble (the values were checked to lie in −8..=7). Each row is
/// read as one contiguous run.
fn i4_pairs(b: &[u8], (first, n): (usize, usize), width: usize) -> [[u8; 64 * STRIP]; 16] {
    let mut pairs = [[0u8; 64 * STRIP]; 16];
    for (p, pair) in pairs.iter_mut().enumerate() {
        let hi = &b[first + 2 * p * n..][..width];
        let lo = &b[first + (2 * p + 1) * n..][..width];
        for ((d, &h), &l) in pair[..width].iter_mut().zip(hi).zip(lo) {
            *d = (h << 4) | (l & 0xF);
        }
    }
    pairs
}

/// One full int4 atom (32 channels × 64 kernels, `[kernel][16 pair bytes]`) from the
/// channel pairs of [`i4_pairs`], its kernels from column `col` on: sixteen 8×8 byte
/// transposes.
fn i4_atom_from_pairs(pairs: &[[u8; 64 * STRIP]; 16], col: usize, atom: &mut [u8]) {
    for p8 in 0..2 {
        for c8 in 0..8 {
            let rows: [u64; 8] = std::array::from_fn(|i| {
                let at = col + c8 * 8;
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(&pairs[p8 * 8 + i][at..at + 8]);
                u64::from_le_bytes(bytes)
            });
            for (j, w) in transpose8(rows).iter().enumerate() {
                let at = (c8 * 8 + j) * 16 + p8 * 8;
                atom[at..at + 8].copy_from_slice(&w.to_le_bytes());
            }
        }
    }
}

/// Packs fp16 (or bf16, for a bf16 layout) B given as N×K bits (each kernel's channels
/// contiguous, the layout of an `[out_features][in_features]` matrix) into `out`
/// (`layout.bytes` bytes): a copy of 64-byte runs, 16 kernels of 32 channels per atom.
/// Every byte is written. NaN and ±inf are refused ([`Error::OutOfRange`]).
pub fn weights_f16_nk_into(layout: &WeightLayout, bt: &[u16], out: &mut [u8]) -> Result<()> {
    let sixteen = if layout.dtype == Dtype::Bf16 {
        Dtype::Bf16
    } else {
        Dtype::Fp16
    };
    check(layout, sixteen, bt.len())?;
    check_out(layout, out)?;
    check_float_bits(sixteen, "weights", bt)?;
    if padded(layout) {
        out.fill(0);
    }
    let (k_all, n) = (layout.k as usize, layout.n as usize);
    let bt = bt.as_bytes();
    for (w, &base) in layout.waves.iter().zip(&layout.b_offsets) {
        let kb_count = w.ai as usize / 32;
        for g in 0..n.div_ceil(16) {
            for kb in 0..kb_count {
                let k0 = w.k0 as usize + kb * 32;
                let len = (w.kw as usize - kb * 32).min(32) * 2;
                let atom = base as usize + (g * kb_count + kb) * 1024;
                for nn in 0..(n - g * 16).min(16) {
                    let src = ((g * 16 + nn) * k_all + k0) * 2;
                    out[atom + nn * 64..atom + nn * 64 + len].copy_from_slice(&bt[src..src + len]);
                }
            }
        }
    }
    Ok(())
}

/// Packs int4 B given as packed nibbles, N rows of K/2 bytes (K even), channel `2i` in
/// the low nibble and `2i + 1` in the high nibble of byte `i` (two's complement; the
/// order of [`super::quant::pack_nibbles`]), into `out` (`layout.bytes` bytes). The NPU
/// keeps the even channel in the high nibble, so each 16-byte run (one kernel's 32
/// channels) is copied with its nibbles swapped. Every byte is written.
pub fn weights_i4_packed_nk_into(layout: &WeightLayout, w: &[u8], out: &mut [u8]) -> Result<()> {
    i4_packed::<false>(layout, w, out, &mut [])
}

/// [`weights_i4_packed_nk_into`], also returning each output channel's sum of weights
/// (what [`i4_column_sums`] computes), summed while the runs are copied: one pass over
/// the weights instead of two.
pub fn weights_i4_packed_nk_sums_into(
    layout: &WeightLayout,
    w: &[u8],
    out: &mut [u8],
) -> Result<Vec<i64>> {
    let mut sums = vec![0i64; layout.n as usize];
    i4_packed::<true>(layout, w, out, &mut sums)?;
    Ok(sums)
}

/// The int4 packer; with `SUM`, each channel's sum of weights is also written to `sums`
/// (`layout.n` of them).
fn i4_packed<const SUM: bool>(
    layout: &WeightLayout,
    w: &[u8],
    out: &mut [u8],
    sums: &mut [i64],
) -> Result<()> {
    if layout.dtype != Dtype::Int4 {
        return Err(unsupported(format!(
            "an int4 packer for a {:?} layout",
            layout.dtype
        )));
    }
    if !layout.k.is_multiple_of(2) {
        return Err(unsupported(format!(
            "packed int4 rows need an even K, not {}",
            layout.k
        )));
    }
    let row = layout.k as usize / 2;
    let want = row * layout.n as usize;
    if w.len() != want {
        return Err(Error::ShapeMismatch {
            what: "packed int4 weight bytes",
            expected: want as u64,
            actual: w.len() as u64,
        });
    }
    check_out(layout, out)?;
    if padded(layout) {
        out.fill(0);
    }
    let n = layout.n as usize;
    // Group by group of 64 kernels: their rows are one contiguous run of the input,
    // read while it stays in cache, and each wave's atoms of the group one contiguous
    // run of the output.
    for g in 0..n.div_ceil(64) {
        let kernels = (n - g * 64).min(64);
        let rows = &w[g * 64 * row..][..kernels * row];
        if SUM {
            // The group's rows, summed while they come into cache for the packing below.
            for (sum, r) in sums[g * 64..].iter_mut().zip(rows.chunks_exact(row)) {
                *sum = row_nibble_sum(r);
            }
        }
        for (wave, &base) in layout.waves.iter().zip(&layout.b_offsets) {
            let kb_count = wave.ai as usize / 32;
            for kb in 0..kb_count {
                // Waves start at multiples of 32 and K is even, so every run is whole
                // bytes of this wave's channels.
                let k0 = wave.k0 as usize + kb * 32;
                let len = (wave.kw as usize - kb * 32).min(32) / 2;
                let atom = base as usize + (g * kb_count + kb) * 1024;
                let dst = out[atom..atom + kernels * 16].chunks_exact_mut(16);
                for (dst, src) in dst.zip(rows.chunks_exact(row)) {
                    let src = &src[k0 / 2..k0 / 2 + len];
                    if let Ok(whole) = <&[u8; 16]>::try_from(src) {
                        // A whole run: the swap on 16 bytes at once.
                        let swapped = swap_nibbles(u128::from_le_bytes(*whole));
                        dst.copy_from_slice(&swapped.to_le_bytes());
                    } else {
                        for (d, &b) in dst.iter_mut().zip(src) {
                            *d = b.rotate_left(4);
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Packs int8 B given as N×K into `out` for an int8 layout, or int4 values (−8..=7, one
/// per byte) given as N×K into `out` for an int4 layout.
pub fn weights_nk_into(layout: &WeightLayout, bt: &[i8], out: &mut [u8]) -> Result<()> {
    match layout.dtype {
        Dtype::Int8 => weights_i8_nk_into(layout, bt, out),
        Dtype::Int4 => {
            if let Some(i) = bt.iter().position(|v| !(-8..=7).contains(v)) {
                return Err(Error::OutOfRange {
                    what: "int4 weights",
                    index: i,
                    value: bt[i].to_string(),
                    range: "-8..=7",
                });
            }
            if layout.k.is_multiple_of(2) {
                let packed = super::quant::pack_nibbles(bt)?;
                weights_i4_packed_nk_into(layout, &packed, out)
            } else {
                // An odd K: through the general packer (rows are not whole bytes).
                let wide: Vec<i32> = bt.iter().map(|&v| v as i32).collect();
                let bytes = super::pack_weights_int_nk(layout, &wide)?;
                check_out(layout, out)?;
                out.copy_from_slice(&bytes);
                Ok(())
            }
        }
        d => Err(unsupported(format!("8-bit weights for a {d:?} layout"))),
    }
}

fn check_out(layout: &WeightLayout, out: &[u8]) -> Result<()> {
    if out.len() as u64 != layout.bytes {
        return Err(Error::ShapeMismatch {
            what: "weight bank bytes",
            expected: layout.bytes,
            actual: out.len() as u64,
        });
    }
    Ok(())
}

/// The tasks that name each A block (wave, M tile) once: of the column tiles that share
/// a block, the first. Found without a list, so that a packing call allocates nothing
/// (quadratic in the tasks, which are few).
fn blocks(plan: &Plan) -> impl Iterator<Item = &super::TaskTile> + '_ {
    let tasks = &plan.tasks;
    (tasks.iter().enumerate())
        .filter(move |(i, t)| !tasks[..*i].iter().any(|u| u.a_offset == t.a_offset))
        .map(|(_, t)| t)
}

/// Packs int8 A (row-major M×K) into the A buffer of `plan`
/// ([`activations_i8_into`] into a new buffer).
pub fn activations_i8(plan: &Plan, a: &[i8]) -> Result<Vec<u8>> {
    if plan.spec.dtype != Dtype::Int8 {
        return Err(unsupported("activations_i8 packs int8 plans".into()));
    }
    let mut out = plan.a_buffer(a.len())?;
    activations_i8_into(plan, a, &mut out)?;
    Ok(out)
}

/// Packs int8 A (row-major M×K) into `out`, the A buffer of an int8 `plan`
/// (`plan.a_bytes` bytes): each block (wave, M tile) row-major, rows padded with zeros
/// to 32 channels. Every byte of `out` is written. Errors: a plan that is not int8
/// ([`Error::Unsupported`]); `a` or `out` of the wrong size ([`Error::ShapeMismatch`]).
pub fn activations_i8_into(plan: &Plan, a: &[i8], out: &mut [u8]) -> Result<()> {
    if plan.spec.dtype != Dtype::Int8 {
        return Err(unsupported("activations_i8_into packs int8 plans".into()));
    }
    rows::rows_into::<_, 1>(plan, a, out, |src, values| {
        values.copy_from_slice(src.as_bytes());
        true
    })?;
    Ok(())
}

/// Reads int32 partials (int8 plans) into row-major M×N, summing waves exactly in one
/// pass ([`Plan::reduction`]; a caller that finishes many calls of one plan keeps the
/// [`Reduction`](super::finish::Reduction) and calls it directly). A result that leaves
/// the int32 range is an [`Error::OutOfRange`] naming it ([`Plan::reduce_int`] returns
/// it exactly, in i64); `out` is then unspecified. Nothing is wrapped.
pub fn unpack_i32(plan: &Plan, c: &[u8], out: &mut [i32]) -> Result<()> {
    if plan.spec.dtype != Dtype::Int8 || plan.c_type() != OutType::Int32 {
        return Err(unsupported(
            "unpack_i32 reads the int32 results of int8 plans".into(),
        ));
    }
    plan.reduction().sum_i32_into(c, out)
}

/// Transposes an 8×8 byte matrix held as eight little-endian rows: byte `j` of row `i`
/// becomes byte `i` of row `j` (three rounds of block swaps: 4, 2 and 1 bytes).
fn transpose8(mut r: [u64; 8]) -> [u64; 8] {
    for i in 0..4 {
        let (a, b) = (r[i], r[i + 4]);
        r[i] = (a & 0x0000_0000_FFFF_FFFF) | (b << 32);
        r[i + 4] = (a >> 32) | (b & 0xFFFF_FFFF_0000_0000);
    }
    for i in [0, 1, 4, 5] {
        let (a, b) = (r[i], r[i + 2]);
        r[i] = (a & 0x0000_FFFF_0000_FFFF) | ((b & 0x0000_FFFF_0000_FFFF) << 16);
        r[i + 2] = ((a >> 16) & 0x0000_FFFF_0000_FFFF) | (b & 0xFFFF_0000_FFFF_0000);
    }
    for i in [0, 2, 4, 6] {
        let (a, b) = (r[i], r[i + 1]);
        r[i] = (a & 0x00FF_00FF_00FF_00FF) | ((b & 0x00FF_00FF_00FF_00FF) << 8);
        r[i + 1] = ((a >> 8) & 0x00FF_00FF_00FF_00FF) | (b & 0xFF00_FF00_FF00_FF00);
    }
    r
}

fn check(layout: &WeightLayout, dtype: Dtype, len: usize) -> Result<()> {
    if layout.dtype != dtype {
        return Err(unsupported(format!(
            "a {dtype:?} packer for a {:?} layout",
            layout.dtype
        )));
    }
    let want = layout.k as usize * layout.n as usize;
    if len != want {
        return Err(Error::ShapeMismatch {
            what: "weight values",
            expected: want as u64,
            actual: len as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "pack_tests.rs"]
mod tests;
