//! Dequantisation of ggml tensor data to f32. Block layouts are those of `ggml-common.h`
//! (github.com/ggml-org/ggml); the arithmetic is ggml's reference order (`d * q`, and for
//! the K types `(d * scale) * q - dmin * min`), so results equal ggml's and gguf-py's
//! bit for bit.

use super::types::GgmlType;
use super::{Error, Result};
use crate::float::{bf16_to_f32, f16_to_f32};

/// The types [`dequantize`] converts.
pub const DEQUANTIZED: [GgmlType; 7] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_K,
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

/// The 6-bit scale and minimum of sub-block `i` (0..8) of a Q4_K block's 12 scale
/// bytes: sub-blocks 0–3 keep theirs in the low six bits of bytes `i` and `i + 4`;
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
                "dequantising {ty} (this library converts F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K)"
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
    // `count` values take `data.len()` bytes, at least one each but for Q4_0 and Q4_K
    // (two a byte): so the output is at most eight times the data in memory.
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
                GgmlType::Q4_K => q4_k,
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
            dequantize(GgmlType::Q5_K, &[0; 176], 256),
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
}
