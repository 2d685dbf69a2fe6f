//! Dequantisation of ggml tensor data to f32. Block layouts are those of `ggml-common.h`
//! (github.com/ggml-org/ggml); the arithmetic is ggml's reference order (`d * q`, for
//! Q4_1 and Q5_1 `q * d + m`, for Q2_K, Q4_K and Q5_K `(d * scale) * q - dmin * min`, for
//! Q3_K and Q6_K `(d * scale) * q`), so results equal ggml's and gguf-py's bit for bit.

use super::types::GgmlType;
use super::{GgufError, Result};
use crate::float::{bf16_to_f32, f16_to_f32};

/// The types [`dequantize`] converts.
pub const DEQUANTIZED: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::MXFP4,
    GgmlType::Q1_0,
];

pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Q8_0 (`block_q8_0`): an f16 scale `d`, then 32 `i8` quants; `x = d · q`.
fn q8_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (y, &q) in out.iter_mut().zip(&block[2..34]) {
        *y = (q as i8) as f32 * d;
    }
}

/// Q4_0 (`block_q4_0`): an f16 scale `d`, then 16 bytes; byte `j` holds value `j` in its
/// low nibble and value `j + 16` in its high nibble, unsigned with an offset of 8;
/// `x = d · (q − 8)`.
fn q4_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let (lo, hi) = out.split_at_mut(16);
    for ((&b, l), h) in block[2..18].iter().zip(lo).zip(hi) {
        *l = ((b & 0xF) as i32 - 8) as f32 * d;
        *h = ((b >> 4) as i32 - 8) as f32 * d;
    }
}

/// Q4_1 (`block_q4_1`): an f16 scale `d`, an f16 offset `m`, then 16 bytes packed as in
/// Q4_0 (byte `j`: value `j` in the low nibble, value `j + 16` in the high one), the
/// nibbles unsigned; `x = q · d + m`.
fn q4_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let mut q = [0u8; 32];
    nibbles_32(&block[4..20], &mut q);
    for (y, &q) in out.iter_mut().zip(&q) {
        *y = q as f32 * d + m;
    }
}

/// The 32 unsigned nibbles of 16 bytes packed as Q4_0 and Q4_1 pack them: byte `j`
/// holds value `j` in its low nibble and value `j + 16` in its high one.
pub(super) fn nibbles_32(qs: &[u8], q: &mut [u8; 32]) {
    let (lo, hi) = q.split_at_mut(16);
    for ((&b, l), h) in qs.iter().zip(lo).zip(hi) {
        *l = b & 0xF;
        *h = b >> 4;
    }
}

/// Q5_0 (`block_q5_0`): an f16 scale `d`, four bytes `qh` read as one little-endian
/// 32-bit word, then 16 bytes of nibbles packed as in Q4_0. Value `i` (0..32) takes its
/// fifth bit (worth 16) from bit `i` of that word: byte `j`'s low nibble (value `j`)
/// from bit `j`, its high nibble (value `j + 16`) from bit `j + 16`. The 5-bit `q` is
/// unsigned with an offset of 16: `x = (q − 16) · d`.
fn q5_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let fifth = |i: usize| (((qh >> i) & 1) << 4) as i32;
    let (lo, hi) = out.split_at_mut(16);
    for (j, ((&b, l), h)) in block[6..22].iter().zip(lo).zip(hi).enumerate() {
        *l = (((b & 0xF) as i32 | fifth(j)) - 16) as f32 * d;
        *h = (((b >> 4) as i32 | fifth(j + 16)) - 16) as f32 * d;
    }
}

/// Q5_1 (`block_q5_1`): an f16 scale `d`, an f16 offset `m`, the 32 fifth bits `qh` as
/// one little-endian word (bit `i` belongs to value `i`), then 16 bytes of nibbles packed
/// as in Q4_0. The 5-bit `q` is unsigned, without an offset: `x = q · d + m`.
fn q5_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
    let fifth = |i: usize| (((qh >> i) & 1) << 4) as u8;
    let (lo, hi) = out.split_at_mut(16);
    for (j, ((&b, l), h)) in block[8..24].iter().zip(lo).zip(hi).enumerate() {
        *l = ((b & 0xF) | fifth(j)) as f32 * d + m;
        *h = ((b >> 4) | fifth(j + 16)) as f32 * d + m;
    }
}

/// Where value `16s + l` (sub-block `s` of 16, `l` in 0..16) of a Q2_K or Q3_K block
/// keeps its two low bits: the first byte of its run of 16 in the 64 quant bytes and
/// the shift of its bit pair. Each half of 128 values owns 32 bytes; within a half,
/// pair `p` (bits `2p..2p+2`) of those bytes holds values `32p..32p+32`, so sub-block
/// `s` reads bytes `32·(s / 8) + 16·(s mod 2)` onwards at shift `2·((s mod 8) / 2)`.
fn k_pair_at(s: usize) -> (usize, u32) {
    (32 * (s / 8) + 16 * (s % 2), 2 * ((s % 8) / 2) as u32)
}

/// Q2_K (`block_q2_K`, 256 values): 16 scale bytes (one per sub-block of 16 values:
/// the low nibble its scale, the high nibble its minimum), 64 bytes of 2-bit quants
/// (arranged as [`k_pair_at`] says), then f16 `d` and f16 `dmin`;
/// `x = (d · scale) · q − dmin · min`.
fn q2_k(block: &[u8], out: &mut [f32]) {
    let (scales, rest) = block.split_at(16);
    let (qs, rest) = rest.split_at(64);
    let (d, dmin) = (f16_at(rest, 0), f16_at(rest, 2));
    for (s, (y, &sc)) in out.chunks_exact_mut(16).zip(scales).enumerate() {
        let (dl, ml) = (d * (sc & 0xF) as f32, dmin * (sc >> 4) as f32);
        let (at, shift) = k_pair_at(s);
        for (v, &b) in y.iter_mut().zip(&qs[at..at + 16]) {
            *v = dl * ((b >> shift) & 3) as f32 - ml;
        }
    }
}

/// The scale of sub-block `s` (0..16) of a Q3_K block's 12 scale bytes, 6 bits offset
/// by 32: its low four bits are the low nibble of byte `s` for `s` < 8 and the high
/// nibble of byte `s − 8` otherwise; its top two bits are bits `2·(s / 4)..+2` of byte
/// `8 + s mod 4`.
fn scale_k3(sc: &[u8], s: usize) -> i32 {
    let low = if s < 8 { sc[s] & 0xF } else { sc[s - 8] >> 4 };
    let high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    (low | (high << 4)) as i32 - 32
}

/// Q3_K (`block_q3_K`, 256 values): 32 bytes `hmask`, 64 bytes of low bit pairs
/// (arranged as [`k_pair_at`] says), 12 bytes of sixteen 6-bit scales ([`scale_k3`]),
/// then an f16 `d`. Value `i` has its third bit in bit `i / 32` of `hmask[i mod 32]`;
/// the bit *clear* subtracts 4, so `q` = pair − 4 · (1 − bit) lies in −4 to 3;
/// `x = (d · scale) · q`.
fn q3_k(block: &[u8], out: &mut [f32]) {
    let (hmask, rest) = block.split_at(32);
    let (qs, rest) = rest.split_at(64);
    let (scales, d) = rest.split_at(12);
    let d = f16_at(d, 0);
    for (s, y) in out.chunks_exact_mut(16).enumerate() {
        let dl = d * scale_k3(scales, s) as f32;
        let (at, shift) = k_pair_at(s);
        let bit = s / 2;
        let hm = &hmask[16 * (s % 2)..16 * (s % 2) + 16];
        for ((v, &b), &h) in y.iter_mut().zip(&qs[at..at + 16]).zip(hm) {
            let minus = if (h >> bit) & 1 == 1 { 0 } else { 4 };
            *v = dl * (((b >> shift) & 3) as i32 - minus) as f32;
        }
    }
}

/// The sixteen values a 4-bit IQ4_NL index stands for: `kvalues_iq4nl` of
/// `ggml-common.h`.
const IQ4_NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// IQ4_NL (`block_iq4_nl`): an f16 scale `d`, then 16 bytes of indices packed as in
/// Q4_0 (byte `j`: value `j` low nibble, `j + 16` high), each index naming one of the
/// sixteen non-uniform levels of [`IQ4_NL_VALUES`]; `x = d · level`.
fn iq4_nl(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let level = |n: u8| IQ4_NL_VALUES[n as usize] as f32;
    let (lo, hi) = out.split_at_mut(16);
    for ((&b, l), h) in block[2..18].iter().zip(lo).zip(hi) {
        *l = d * level(b & 0xF);
        *h = d * level(b >> 4);
    }
}

/// The e2m1 (fp4) values doubled, so that they are integers: `kvalues_mxfp4`
/// (`kvalues_fp4`) of `ggml-common.h`, after the OCP Microscaling (MX) specification
/// 1.0. Index bit 3 is the sign.
const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half of the e8m0 scale `e`, i.e. 2^(e − 128), as ggml's `ggml_e8m0_to_fp32_half`
/// (`ggml-impl.h`) builds it from bits: for `e` ≥ 2 the f32 exponent field is `e − 1`,
/// for 0 and 1 the subnormals 2⁻¹²⁸ and 2⁻¹²⁷. Every byte is a power of two (ggml makes
/// no NaN of 255), so there is no rounding.
fn e8m0_half(e: u8) -> f32 {
    f32::from_bits(if e < 2 {
        0x0020_0000 << e
    } else {
        u32::from(e - 1) << 23
    })
}

/// MXFP4 (`block_mxfp4`, 17 bytes): one e8m0 exponent byte `e`, then 16 bytes of e2m1
/// codes packed as in Q4_0 (byte `j`: value `j` low nibble, `j + 16` high). Each code
/// stands for twice its fp4 value ([`MXFP4_VALUES`]), which the halved scale undoes:
/// `x = level · 2^(e − 128)`, exact.
fn mxfp4(block: &[u8], out: &mut [f32]) {
    let d = e8m0_half(block[0]);
    let level = |n: u8| MXFP4_VALUES[n as usize] as f32;
    let (lo, hi) = out.split_at_mut(16);
    for ((&b, l), h) in block[1..17].iter().zip(lo).zip(hi) {
        *l = level(b & 0xF) * d;
        *h = level(b >> 4) * d;
    }
}

/// Q1_0 (`block_q1_0`, 128 values, 18 bytes): an f16 scale `d`, then 16 bytes of sign
/// bits, value `i` in bit `i mod 8` of byte `i / 8` (least significant first); a set bit
/// is `d`, a clear one `−d`.
fn q1_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (y, &b) in out.chunks_exact_mut(8).zip(&block[2..18]) {
        for (bit, v) in y.iter_mut().enumerate() {
            *v = if (b >> bit) & 1 == 1 { d } else { -d };
        }
    }
}

/// The 6-bit scale and minimum of sub-block `i` (0..8) of a Q4_K or Q5_K block's 12
/// scale bytes: sub-blocks 0–3 keep theirs in the low six bits of bytes `i` and `i + 4`;
/// sub-blocks 4–7 in the nibbles of byte `i + 4` with their top two bits in the top bits
/// of bytes `i − 4` and `i` (ggml's `get_scale_min_k4`).
pub(super) fn scale_min_k4(s: &[u8], i: usize) -> (u8, u8) {
    if i < 4 {
        (s[i] & 63, s[i + 4] & 63)
    } else {
        (
            (s[i + 4] & 0xF) | ((s[i - 4] >> 6) << 4),
            (s[i + 4] >> 4) | ((s[i] >> 6) << 4),
        )
    }
}

/// Q4_K (`block_q4_K`, 256 values): f16 `d`, f16 `dmin`, 12 bytes of sub-block scales
/// and minimums, 128 bytes of quants. Each 64 values share 32 quant bytes: the low
/// nibbles are the first 32 values (sub-block `2j`), the high nibbles the next 32
/// (sub-block `2j + 1`); `x = (d · scale) · q − dmin · min`.
fn q4_k(block: &[u8], out: &mut [f32]) {
    let mut q = [0u8; 256];
    quants_k(&block[16..144], None, &mut q);
    scale_k_subblocks(block, &q, out);
}

/// The 256 unsigned quants of a Q4_K block's 128 quant bytes `qs` (`qh` `None`, 0..=15)
/// or of a Q5_K block's, with its 32 bytes `qh` of fifth bits (0..=31). Each 64 values
/// share 32 bytes of `qs`: low nibbles for sub-block `2j`, high ones for `2j + 1`; value
/// `l` (0..32) of sub-block `s` adds 16 when bit `s` of `qh[l]` is set.
pub(super) fn quants_k(qs: &[u8], qh: Option<&[u8]>, q: &mut [u8; 256]) {
    for (j, (chunk, bytes)) in q.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
        let (lo, hi) = chunk.split_at_mut(32);
        for (l, ((&b, lo), hi)) in bytes.iter().zip(lo).zip(hi).enumerate() {
            let fifth = |s: usize| qh.map_or(0, |h| ((h[l] >> s) & 1) << 4);
            *lo = (b & 0xF) | fifth(2 * j);
            *hi = (b >> 4) | fifth(2 * j + 1);
        }
    }
}

/// `x = (d · scale) · q − dmin · min` for the eight sub-blocks of 32 of a Q4_K or Q5_K
/// block (`d`, `dmin` and the 12 scale bytes first in the block).
fn scale_k_subblocks(block: &[u8], q: &[u8; 256], out: &mut [f32]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    for (s, (y, q)) in out.chunks_exact_mut(32).zip(q.chunks_exact(32)).enumerate() {
        let (sc, m) = scale_min_k4(&block[4..16], s);
        let (d1, min1) = (d * sc as f32, dmin * m as f32);
        for (y, &q) in y.iter_mut().zip(q) {
            *y = d1 * q as f32 - min1;
        }
    }
}

/// Q5_K (`block_q5_K`, 256 values): f16 `d`, f16 `dmin`, the same 12 scale bytes as
/// Q4_K, 32 bytes `qh` of fifth bits, then 128 bytes of nibbles arranged as in Q4_K
/// ([`quants_k`]); `x = (d · scale) · q − dmin · min`.
fn q5_k(block: &[u8], out: &mut [f32]) {
    let mut q = [0u8; 256];
    quants_k(&block[48..176], Some(&block[16..48]), &mut q);
    scale_k_subblocks(block, &q, out);
}

/// Q6_K (`block_q6_K`, 256 values): 128 bytes of low nibbles `ql`, 64 bytes of high
/// bit pairs `qh`, sixteen `i8` scales (one per 16 values, from byte 192), an f16 `d`
/// (byte 208); `x = (d · scale) · q` with the quants of [`quants_q6_k`].
fn q6_k(block: &[u8], out: &mut [f32]) {
    let mut q = [0i8; 256];
    quants_q6_k(block, &mut q);
    let d = f16_at(block, 208);
    for (i, (v, &q)) in out.iter_mut().zip(&q).enumerate() {
        let scale = block[192 + i / 16] as i8;
        *v = (d * scale as f32) * q as f32;
    }
}

/// The 256 signed quants (−32..=31) of a Q6_K block. In each half of 128 values, value
/// `32g + l` (g in 0..4, l in 0..32) takes its low four bits from `ql[l + 32·(g mod 2)]`
/// (low nibble for g < 2, high otherwise) and its top two bits from bits `2g..2g+2` of
/// `qh[l]`, unsigned with an offset of 32.
pub(super) fn quants_q6_k(block: &[u8], q: &mut [i8; 256]) {
    let (ql, qh) = (&block[..128], &block[128..192]);
    for (half, y) in q.chunks_exact_mut(128).enumerate() {
        let ql = &ql[64 * half..64 * half + 64];
        let qh = &qh[32 * half..32 * half + 32];
        for (i, v) in y.iter_mut().enumerate() {
            let (g, l) = (i / 32, i % 32);
            let low = ql[l + 32 * (g % 2)] >> (4 * (g / 2)) & 0xF;
            let high = (qh[l] >> (2 * g)) & 3;
            *v = (low | (high << 4)) as i8 - 32;
        }
    }
}

/// `count` values of type `ty` from `data` (exactly their bytes) to f32, in the order
/// they are stored. Types outside [`DEQUANTIZED`] are [`GgufError::Unsupported`]; a length
/// that is not that of `count` values is [`GgufError::Invalid`].
pub fn dequantize(ty: GgmlType, data: &[u8], count: u64) -> Result<Vec<f32>> {
    // `count` values take `data.len()` bytes (checked before anything is allocated): the
    // densest type, Q1_0, packs 128 values in 18 bytes, so the output (4 bytes a value)
    // is at most 4 · 128 / 18 < 29 times the data in memory (at most eight times for the
    // 4- to 8-bit types).
    let len = checked_len(ty, data, count)?;
    let mut out = vec![0f32; len];
    dequantize_into(ty, data, &mut out)?;
    Ok(out)
}

/// The values `data` holds as `count` values of `ty`, as a length, or the error
/// [`dequantize`] names.
fn checked_len(ty: GgmlType, data: &[u8], count: u64) -> Result<usize> {
    if !DEQUANTIZED.contains(&ty) {
        return Err(GgufError::Unsupported {
            tensor: String::new(),
            what: format!(
                "dequantising {ty} (this library converts F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4 and Q1_0)"
            ),
        });
    }
    let (block, size) = (ty.block_size(), ty.type_size());
    let want = (count / block).checked_mul(size);
    let len = usize::try_from(count).ok();
    match (
        count.is_multiple_of(block) && want == Some(data.len() as u64),
        len,
    ) {
        (true, Some(len)) => Ok(len),
        _ => Err(GgufError::Invalid {
            offset: 0,
            what: "tensor data length (whole blocks of its values)",
            value: format!("{} bytes for {count} {ty} values", data.len()),
        }),
    }
}

/// [`dequantize`] into `out`, whose length is the number of values: a caller converting
/// a tensor a piece at a time reuses one buffer.
pub fn dequantize_into(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<()> {
    checked_len(ty, data, out.len() as u64)?;
    let (block, size) = (ty.block_size(), ty.type_size());
    let (block, size) = (block as usize, size as usize);
    match ty {
        GgmlType::F32 => {
            for (y, b) in out.iter_mut().zip(data.chunks_exact(4)) {
                *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (y, b) in out.iter_mut().zip(data.chunks_exact(2)) {
                *y = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        GgmlType::BF16 => {
            for (y, b) in out.iter_mut().zip(data.chunks_exact(2)) {
                *y = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        _ => {
            let f = match ty {
                GgmlType::Q8_0 => q8_0,
                GgmlType::Q4_0 => q4_0,
                GgmlType::Q4_1 => q4_1,
                GgmlType::Q5_0 => q5_0,
                GgmlType::Q5_1 => q5_1,
                GgmlType::Q2_K => q2_k,
                GgmlType::Q3_K => q3_k,
                GgmlType::Q4_K => q4_k,
                GgmlType::Q5_K => q5_k,
                GgmlType::Q6_K => q6_k,
                GgmlType::IQ4_NL => iq4_nl,
                GgmlType::MXFP4 => mxfp4,
                _ => q1_0,
            };
            for (y, b) in out.chunks_exact_mut(block).zip(data.chunks_exact(size)) {
                f(b, y);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "dequant_tests.rs"]
mod tests;
