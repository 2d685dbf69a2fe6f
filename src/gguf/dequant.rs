//! Dequantisation of ggml tensor data to f32. Block layouts are those of `ggml-common.h`
//! (github.com/ggml-org/ggml); the arithmetic is ggml's reference order (`d * q`, for
//! Q4_1 `q * d + m`, for Q4_K and Q5_K `(d * scale) * q - dmin * min`), so results equal
//! ggml's and gguf-py's bit for bit.

use super::types::GgmlType;
use super::{Error, Result};
use crate::float::{bf16_to_f32, f16_to_f32};

/// The types [`dequantize`] converts.
pub const DEQUANTIZED: [GgmlType; 10] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

fn f16_at(b: &[u8], at: usize) -> f32 {
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
    let (lo, hi) = out.split_at_mut(16);
    for ((&b, l), h) in block[4..20].iter().zip(lo).zip(hi) {
        *l = (b & 0xF) as f32 * d + m;
        *h = (b >> 4) as f32 * d + m;
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

/// The 6-bit scale and minimum of sub-block `i` (0..8) of a Q4_K or Q5_K block's 12
/// scale bytes: sub-blocks 0–3 keep theirs in the low six bits of bytes `i` and `i + 4`;
/// sub-blocks 4–7 in the nibbles of byte `i + 4` with their top two bits in the top bits
/// of bytes `i − 4` and `i` (ggml's `get_scale_min_k4`).
fn scale_min_k4(s: &[u8], i: usize) -> (u8, u8) {
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
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let scales = &block[4..16];
    let qs = &block[16..144];
    for (j, (chunk, q)) in out
        .chunks_exact_mut(64)
        .zip(qs.chunks_exact(32))
        .enumerate()
    {
        let (sc1, m1) = scale_min_k4(scales, 2 * j);
        let (sc2, m2) = scale_min_k4(scales, 2 * j + 1);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        let (lo, hi) = chunk.split_at_mut(32);
        for ((&b, l), h) in q.iter().zip(lo).zip(hi) {
            *l = d1 * (b & 0xF) as f32 - min1;
            *h = d2 * (b >> 4) as f32 - min2;
        }
    }
}

/// Q5_K (`block_q5_K`, 256 values): f16 `d`, f16 `dmin`, the same 12 scale bytes as
/// Q4_K, 32 bytes `qh` of fifth bits, then 128 bytes of nibbles arranged as in Q4_K
/// (each 64 values: 32 bytes, low nibbles for sub-block `2j`, high ones for `2j + 1`).
/// Value `l` (0..32) of sub-block `s` adds 16 when bit `s` of `qh[l]` is set;
/// `x = (d · scale) · q − dmin · min`.
fn q5_k(block: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let scales = &block[4..16];
    let qh = &block[16..48];
    let qs = &block[48..176];
    for (j, (chunk, q)) in out
        .chunks_exact_mut(64)
        .zip(qs.chunks_exact(32))
        .enumerate()
    {
        let (sc1, m1) = scale_min_k4(scales, 2 * j);
        let (sc2, m2) = scale_min_k4(scales, 2 * j + 1);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        let (lo, hi) = chunk.split_at_mut(32);
        for (((&b, &h), l), u) in q.iter().zip(qh).zip(lo).zip(hi) {
            let fifth = |s: usize| ((h >> s) & 1) << 4;
            *l = d1 * ((b & 0xF) | fifth(2 * j)) as f32 - min1;
            *u = d2 * ((b >> 4) | fifth(2 * j + 1)) as f32 - min2;
        }
    }
}

/// Q6_K (`block_q6_K`, 256 values): 128 bytes of low nibbles `ql`, 64 bytes of high
/// bit pairs `qh`, sixteen `i8` scales (one per 16 values), an f16 `d`. In each half of
/// 128 values, value `32g + l` (g in 0..4, l in 0..32) takes its low four bits from
/// `ql[l + 32·(g mod 2)]` (low nibble for g < 2, high otherwise) and its top two bits
/// from bits `2g..2g+2` of `qh[l]`; `x = (d · scale) · (q − 32)`.
fn q6_k(block: &[u8], out: &mut [f32]) {
    let (ql, rest) = block.split_at(128);
    let (qh, rest) = rest.split_at(64);
    let (scales, d) = rest.split_at(16);
    let d = f16_at(d, 0);
    for (half, y) in out.chunks_exact_mut(128).enumerate() {
        let ql = &ql[64 * half..64 * half + 64];
        let qh = &qh[32 * half..32 * half + 32];
        for (i, v) in y.iter_mut().enumerate() {
            let (g, l) = (i / 32, i % 32);
            let low = ql[l + 32 * (g % 2)] >> (4 * (g / 2)) & 0xF;
            let high = (qh[l] >> (2 * g)) & 3;
            let q = (low | (high << 4)) as i32 - 32;
            let scale = scales[(128 * half + i) / 16] as i8;
            *v = (d * scale as f32) * q as f32;
        }
    }
}

/// `count` values of type `ty` from `data` (exactly their bytes) to f32, in the order
/// they are stored. Types outside [`DEQUANTIZED`] are [`Error::Unsupported`]; a length
/// that is not that of `count` values is [`Error::Invalid`].
pub fn dequantize(ty: GgmlType, data: &[u8], count: u64) -> Result<Vec<f32>> {
    if !DEQUANTIZED.contains(&ty) {
        return Err(Error::Unsupported {
            tensor: String::new(),
            what: format!(
                "dequantising {ty} (this library converts F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K and Q6_K)"
            ),
        });
    }
    let (block, size) = (ty.block_size(), ty.type_size());
    let want = (count / block).checked_mul(size);
    let len = usize::try_from(count).ok();
    let (true, Some(len)) = (
        count.is_multiple_of(block) && want == Some(data.len() as u64),
        len,
    ) else {
        return Err(Error::Invalid {
            offset: 0,
            what: "tensor data length (whole blocks of its values)",
            value: format!("{} bytes for {count} {ty} values", data.len()),
        });
    };
    // `count` values take `data.len()` bytes, at least one each but for the 4- and 5-bit
    // types (at most two a byte): so the output is at most eight times the data in memory.
    let mut out = vec![0f32; len];
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
                GgmlType::Q4_K => q4_k,
                GgmlType::Q5_K => q5_k,
                _ => q6_k,
            };
            for (y, b) in out.chunks_exact_mut(block).zip(data.chunks_exact(size)) {
                f(b, y);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_that_are_not_whole_blocks_are_refused() {
        assert!(matches!(
            dequantize(GgmlType::Q8_0, &[0; 33], 32),
            Err(Error::Invalid { .. })
        ));
        assert!(matches!(
            dequantize(GgmlType::Q8_0, &[0; 34], 31),
            Err(Error::Invalid { .. })
        ));
        assert!(matches!(
            dequantize(GgmlType::F32, &[0; 8], u64::MAX),
            Err(Error::Invalid { .. })
        ));
        assert!(matches!(
            dequantize(GgmlType::Q2_K, &[0; 84], 256),
            Err(Error::Unsupported { .. })
        ));
    }

    #[test]
    fn a_q4_k_block_by_hand() {
        // d = 1.0 (0x3C00), dmin = 0.5 (0x3800). Sub-block scales and minimums:
        // 0..4 in the low six bits of bytes 0..4 and 4..8; 4..8 in bytes 8..12 with the
        // top bits of bytes 0..8. Sub-block 0: scale 2, min 3; sub-block 5: scale
        // 0b01_0001 = 17 (low nibble 1 of byte 9, top bits 01 from byte 1), min
        // 0b10_0010 = 34 (high nibble 2 of byte 9, top bits 10 from byte 5).
        let mut b = [0u8; 144];
        b[0..2].copy_from_slice(&0x3C00u16.to_le_bytes());
        b[2..4].copy_from_slice(&0x3800u16.to_le_bytes());
        b[4] = 2; // sc0
        b[4 + 4] = 3; // m0
        b[4 + 1] = 0b0100_0000; // sc1 = 0, top bits of sc5 = 01
        b[4 + 5] = 0b1000_0000; // m1 = 0, top bits of m5 = 10
        b[4 + 9] = 0x21; // sc5 low nibble 1, m5 low nibble 2
        // Value 0 (sub-block 0, low nibble of quant byte 0) = 5; value 160 (sub-block 5:
        // chunk 2, high nibbles of bytes 64..96; its first is byte 64) = 9.
        b[16] = 5;
        b[16 + 64] = 9 << 4;
        let y = dequantize(GgmlType::Q4_K, &b, 256).unwrap();
        assert_eq!(y[0], 1.0 * 2.0 * 5.0 - 0.5 * 3.0);
        assert_eq!(y[1], -1.5, "q = 0: minus the minimum");
        assert_eq!(y[160], 17.0 * 9.0 - 0.5 * 34.0);
        assert_eq!(y[161], -17.0);
        // Sub-block 1 has scale 0 and minimum 0.
        assert_eq!(y[32], 0.0);
    }

    #[test]
    fn a_q6_k_block_by_hand() {
        // d = 0.5; scale of values 0..16 is 3, of values 208..224 (index 13) is −2.
        let mut b = [0u8; 210];
        b[208..210].copy_from_slice(&0x3800u16.to_le_bytes());
        b[192] = 3;
        b[192 + 13] = (-2i8) as u8;
        // Value 0: low nibble of ql[0] = 0xA, qh[0] bits 0..2 = 2 → q = 0x2A − 32 = 10.
        b[0] = 0x0A;
        b[128] = 0b10;
        // Value 208 = half 1, i = 80: g = 2, l = 16 → high nibble of ql[64 + 16],
        // bits 4..6 of qh[32 + 16]: q = 0b11_0001 − 32 = 17.
        b[64 + 16] = 0x10;
        b[128 + 32 + 16] = 0b11 << 4;
        let y = dequantize(GgmlType::Q6_K, &b, 256).unwrap();
        assert_eq!(y[0], 0.5 * 3.0 * 10.0);
        assert_eq!(y[1], 0.5 * 3.0 * -32.0, "q = 0 is −32");
        assert_eq!(y[208], 0.5 * -2.0 * 17.0);
    }

    #[test]
    fn a_q4_1_block_by_hand() {
        // d = 0.5 (0x3800), m = −1 (0xBC00). Byte 0 = 0x3F: value 0 = 15 · 0.5 − 1,
        // value 16 = 3 · 0.5 − 1; byte 15 = 0xA2: value 15 = 2 · 0.5 − 1, value 31 =
        // 10 · 0.5 − 1; the other bytes 0: their values are m.
        let mut b = [0u8; 20];
        b[0..2].copy_from_slice(&0x3800u16.to_le_bytes());
        b[2..4].copy_from_slice(&0xBC00u16.to_le_bytes());
        b[4] = 0x3F;
        b[4 + 15] = 0xA2;
        let y = dequantize(GgmlType::Q4_1, &b, 32).unwrap();
        assert_eq!((y[0], y[16]), (6.5, 0.5));
        assert_eq!((y[15], y[31]), (0.0, 4.0));
        assert!(
            y.iter()
                .enumerate()
                .all(|(i, &v)| [0, 15, 16, 31].contains(&i) || v == -1.0)
        );
        // Two blocks: the second one's d = 2, m = 0.25, byte 0 = 0x10.
        let mut two = b.to_vec();
        two.extend_from_slice(&[0x00, 0x40, 0x00, 0x34, 0x10]);
        two.resize(40, 0);
        let y = dequantize(GgmlType::Q4_1, &two, 64).unwrap();
        assert_eq!((y[31], y[32], y[48]), (4.0, 0.25, 2.25));
    }

    #[test]
    fn a_q5_0_block_by_hand() {
        // d = 0.25 (0x3400). qh = 0x8001_0003 (bytes 03 00 01 80): fifth bits of
        // values 0, 1 (low half), 16 and 31 (high half).
        let mut b = [0u8; 22];
        b[0..2].copy_from_slice(&0x3400u16.to_le_bytes());
        b[2..6].copy_from_slice(&[0x03, 0x00, 0x01, 0x80]);
        // Byte 0 = 0x2F: value 0 = (16 + 15) − 16 = 15, value 16 = (16 + 2) − 16 = 2.
        // Byte 1 = 0: value 1 = 16 − 16 = 0 (fifth bit alone), value 17 = −16.
        // Byte 15 = 0x70: value 15 = 0 − 16 (no fifth bit), value 31 = (16 + 7) − 16 = 7.
        // Bytes 2..15 = 0x88: no fifth bits, so 8 − 16 = −8.
        b[6..22].fill(0x88);
        b[6] = 0x2F;
        b[7] = 0;
        b[6 + 15] = 0x70;
        let y = dequantize(GgmlType::Q5_0, &b, 32).unwrap();
        assert_eq!((y[0], y[16]), (15.0 * 0.25, 2.0 * 0.25));
        assert_eq!((y[1], y[17]), (0.0, -16.0 * 0.25));
        assert_eq!((y[15], y[31]), (-16.0 * 0.25, 7.0 * 0.25));
        for i in (2..15).chain(18..31) {
            assert_eq!(y[i], -8.0 * 0.25, "value {i}");
        }
    }

    #[test]
    fn a_q5_k_block_by_hand() {
        // d = 1.0 (0x3C00), dmin = 0.5 (0x3800); scale bytes at 4..16, qh at 16..48,
        // nibbles at 48..176.
        let mut b = [0u8; 176];
        b[0..2].copy_from_slice(&0x3C00u16.to_le_bytes());
        b[2..4].copy_from_slice(&0x3800u16.to_le_bytes());
        let (s, qh, qs) = (4, 16, 48);
        // Sub-blocks 0..4: scale in the low six bits of byte i, minimum of byte i + 4.
        b[s] = 2; // scale 0 = 2
        b[s + 4] = 3; // min 0 = 3
        b[s + 1] = 5; // scale 1 = 5
        b[s + 5] = 1; // min 1 = 1
        b[s + 3] = 1; // scale 3 = 1, min 3 = 0
        // Sub-block 2: low bits 0 (scale and min 0), top bits 10 and 01 for sub-block 6.
        b[s + 2] = 0b1000_0000;
        b[s + 6] = 0b0100_0000;
        // Sub-blocks 6 and 7 from the nibbles of bytes 10 and 11: scale 6 = 0b10_0011 =
        // 35, min 6 = 0b01_0100 = 20; scale 7 = 2, min 7 = 1 (no top bits).
        b[s + 10] = 0x43;
        b[s + 11] = 0x12;
        // Value 0 (sub-block 0, low nibble of byte 0, bit 0 of qh[0]) = 16 + 7;
        // value 32 (sub-block 1, its high nibble, bit 1 of qh[0] clear) = 12.
        b[qs] = 0xC7;
        // Value 101 (sub-block 3, l = 5: high nibble of byte 32 + 5, bit 3 of qh[5]) = 16 + 4.
        b[qs + 37] = 0x40;
        b[qh + 5] = 0b1000;
        // Value 64 (sub-block 2, scale 0): any quant gives 0.
        b[qs + 32] = 0x0F;
        // Value 192 (sub-block 6, l = 0: low nibble of byte 96, bit 6 of qh[0]) = 16 + 10;
        // value 224 (sub-block 7, its high nibble, bit 7 of qh[0]) = 16 + 5.
        b[qs + 96] = 0x5A;
        b[qh] = 0b1100_0001;
        // Value 255 (sub-block 7, l = 31: high nibble of byte 127, bit 7 of qh[31]) = 31;
        // value 223 (sub-block 6, l = 31: low nibble 0, bit 6 clear) = 0.
        b[qs + 127] = 0xF0;
        b[qh + 31] = 0b1000_0000;
        let y = dequantize(GgmlType::Q5_K, &b, 256).unwrap();
        assert_eq!(y[0], 2.0 * 23.0 - 0.5 * 3.0);
        assert_eq!(y[1], -1.5, "q = 0: minus the minimum");
        assert_eq!(y[32], 5.0 * 12.0 - 0.5 * 1.0);
        assert_eq!(y[64], 0.0);
        assert_eq!(y[101], 20.0);
        assert_eq!(y[100], 0.0, "sub-block 3 has minimum 0");
        assert_eq!(y[192], 35.0 * 26.0 - 0.5 * 20.0);
        assert_eq!(y[224], 2.0 * 21.0 - 0.5 * 1.0);
        assert_eq!(y[255], 2.0 * 31.0 - 0.5 * 1.0);
        assert_eq!(y[223], -0.5 * 20.0);
    }
}
