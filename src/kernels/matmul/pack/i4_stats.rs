//! Sums over packed int4 banks: per-channel column sums and magnitudes, read straight
//! from the packed nibbles.

use super::*;

/// Calls `f(first channel, granule, atom)` for every 1024-byte atom of a packed int4
/// bank: 64 runs of 16 bytes, the 32 weights of 64 consecutive output channels from
/// `first channel` in 32-weight `granule` of K (padding channels included; padding is
/// zero).
pub(super) fn for_each_i4_atom(
    layout: &WeightLayout,
    bank: &[u8],
    mut f: impl FnMut(usize, usize, &[u8]),
) -> Result<()> {
    if layout.dtype != Dtype::Int4 {
        return Err(unsupported(format!(
            "int4 weight atoms of a {:?} layout",
            layout.dtype
        )));
    }
    check_out(layout, bank)?;
    for (wave, &base) in layout.waves.iter().zip(&layout.b_offsets) {
        let kb_count = wave.ai as usize / 32;
        for g in 0..(layout.n as usize).div_ceil(64) {
            for kb in 0..kb_count {
                let atom = base as usize + (g * kb_count + kb) * 1024;
                f(g * 64, wave.k0 as usize / 32 + kb, &bank[atom..atom + 1024]);
            }
        }
    }
    Ok(())
}

/// Each output channel's sum of the weights of a packed int4 bank (`layout.bytes`
/// bytes): what the W4A8 decomposition adds back (padding is zero and adds nothing).
pub fn i4_column_sums(layout: &WeightLayout, bank: &[u8]) -> Result<Vec<i64>> {
    let mut sums = vec![0i64; layout.n as usize];
    for_each_i4_atom(layout, bank, |c0, _, atom| {
        for (sum, run) in sums[c0..].iter_mut().zip(atom.chunks_exact(16)) {
            let run: &[u8; 16] = run.try_into().expect("runs of 16 bytes");
            *sum += nibble_sum(run) as i64;
        }
    })?;
    Ok(sums)
}

/// The [`quant::i4_magnitudes`](crate::kernels::matmul::quant::i4_magnitudes) of the weights of a packed
/// int4 bank: each output channel's Σ|w| per 32-weight granule of K.
pub fn i4_bank_magnitudes(layout: &WeightLayout, bank: &[u8]) -> Result<Vec<u16>> {
    let granules = layout.k.div_ceil(32) as usize;
    let n = layout.n as usize;
    let mut out = vec![0u16; n * granules];
    for_each_i4_atom(layout, bank, |c0, g, atom| {
        for (c, run) in (c0..n).zip(atom.chunks_exact(16)) {
            out[c * granules + g] = crate::kernels::matmul::quant::nibble_magnitudes(run);
        }
    })?;
    Ok(out)
}

/// The sum of the signed nibbles of `bytes` (as [`nibble_sum`], over a whole row): eight
/// bytes at a time into byte lanes (at most 30 per word, so eight words before a lane
/// could overflow), folded into 16-bit lanes every eight words.
pub(super) fn row_nibble_sum(bytes: &[u8]) -> i64 {
    const LOW: u64 = 0x0F0F_0F0F_0F0F_0F0F;
    const FLIP: u64 = 0x8888_8888_8888_8888;
    const BYTE: u64 = 0x00FF_00FF_00FF_00FF;
    let words = bytes.chunks_exact(8);
    let tail = words.remainder();
    let mut total = 0i64;
    let mut block = words.map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")));
    loop {
        let mut lanes = 0u64;
        let mut taken = 0;
        for x in block.by_ref().take(8) {
            let x = x ^ FLIP;
            lanes += (x & LOW) + ((x >> 4) & LOW);
            taken += 1;
        }
        if taken == 0 {
            break;
        }
        let wide = (lanes & BYTE) + ((lanes >> 8) & BYTE);
        total += (wide.wrapping_mul(0x0001_0001_0001_0001) >> 48) as i64 - taken * 16 * 8;
    }
    // The last bytes, one at a time.
    total
        + tail
            .iter()
            .map(|&b| (((b << 4) as i8 >> 4) + ((b as i8) >> 4)) as i64)
            .sum::<i64>()
}

/// Swaps the two nibbles of every byte of `x`.
pub(super) fn swap_nibbles(x: u128) -> u128 {
    const LOW: u128 = 0x0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F;
    ((x >> 4) & LOW) | ((x & LOW) << 4)
}

/// The sum of the 32 signed (two's complement) nibbles of 16 bytes, eight bytes at a
/// time: a signed nibble `v` is `(v ^ 8) - 8` with `v ^ 8` unsigned (0..=15), so the sum
/// is the unsigned sum of the nibbles with their top bits flipped, less 32 × 8.
pub(super) fn nibble_sum(run: &[u8; 16]) -> i32 {
    const LOW: u64 = 0x0F0F_0F0F_0F0F_0F0F;
    const FLIP: u64 = 0x8888_8888_8888_8888;
    const BYTE: u64 = 0x00FF_00FF_00FF_00FF;
    let (a, b) = run.split_at(8);
    // Per byte, both flipped nibbles of both words: at most 60.
    let bytes = [a, b]
        .map(|h| u64::from_le_bytes(h.try_into().expect("8 bytes")) ^ FLIP)
        .iter()
        .map(|&x| (x & LOW) + ((x >> 4) & LOW))
        .sum::<u64>();
    // Pairs of bytes into 16-bit lanes (at most 120 each), then all four (at most 480).
    let lanes = (bytes & BYTE) + ((bytes >> 8) & BYTE);
    (lanes.wrapping_mul(0x0001_0001_0001_0001) >> 48) as i32 - 32 * 8
}
