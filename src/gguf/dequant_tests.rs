//! Unit tests of `dequant`: blocks built by hand, values worked out from each layout.

use super::*;

#[test]
fn lengths_that_are_not_whole_blocks_are_refused() {
    assert!(matches!(
        dequantize(GgmlType::Q8_0, &[0; 33], 32),
        Err(GgufError::Invalid { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::Q8_0, &[0; 34], 31),
        Err(GgufError::Invalid { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::F32, &[0; 8], u64::MAX),
        Err(GgufError::Invalid { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::IQ2_XXS, &[0; 66], 256),
        Err(GgufError::Unsupported { .. })
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

#[test]
fn a_q5_1_block_by_hand() {
    // d = 0.25 (0x3400), m = 1.0 (0x3C00). qh = 0x8002_0001 (bytes 01 00 02 80): fifth
    // bits of values 0, 17 and 31.
    let mut b = [0u8; 24];
    b[0..2].copy_from_slice(&0x3400u16.to_le_bytes());
    b[2..4].copy_from_slice(&0x3C00u16.to_le_bytes());
    b[4..8].copy_from_slice(&[0x01, 0x00, 0x02, 0x80]);
    // Byte 0 = 0x3A: value 0 = 16 + 10, value 16 = 3. Byte 1 = 0xF0: value 1 = 0,
    // value 17 = 16 + 15. Byte 15 = 0x05: value 15 = 5, value 31 = 16 + 0.
    b[8] = 0x3A;
    b[9] = 0xF0;
    b[8 + 15] = 0x05;
    let y = dequantize(GgmlType::Q5_1, &b, 32).unwrap();
    assert_eq!((y[0], y[16]), (26.0 * 0.25 + 1.0, 3.0 * 0.25 + 1.0));
    assert_eq!((y[1], y[17]), (1.0, 31.0 * 0.25 + 1.0));
    assert_eq!((y[15], y[31]), (5.0 * 0.25 + 1.0, 16.0 * 0.25 + 1.0));
    for i in (2..15).chain(18..31) {
        assert_eq!(y[i], 1.0, "value {i}: q = 0 is the minimum");
    }
}

#[test]
fn a_q2_k_block_by_hand() {
    // Scale bytes at 0..16 (low nibble scale, high nibble minimum of each 16 values),
    // quants at 16..80, d = 2.0 (0x4000) at 80, dmin = 0.5 (0x3800) at 82.
    let mut b = [0u8; 84];
    b[80..82].copy_from_slice(&0x4000u16.to_le_bytes());
    b[82..84].copy_from_slice(&0x3800u16.to_le_bytes());
    let qs = 16;
    b[0] = 0x32; // sub-block 0: scale 2, min 3
    b[1] = 0x15; // sub-block 1: scale 5, min 1
    b[2] = 0x04; // sub-block 2: scale 4, min 0
    b[6] = 0xF1; // sub-block 6: scale 1, min 15
    b[9] = 0x27; // sub-block 9: scale 7, min 2
    b[15] = 0x0A; // sub-block 15: scale 10, min 0
    // Value 0: bits 0..2 of quant byte 0 = 3; value 32 (sub-block 2): bits 2..4 of
    // the same byte = 1.
    b[qs] = 0b01_11;
    // Value 16 (sub-block 1): bits 0..2 of byte 16 = 2.
    b[qs + 16] = 0b10;
    // Value 101 (sub-block 6, the fourth pair of the first half): bits 6..8 of byte 5.
    b[qs + 5] = 0b10 << 6;
    // Value 147 (sub-block 9, second half): bits 0..2 of byte 32 + 16 + 3 = 1.
    b[qs + 51] = 0b01;
    // Value 255 (sub-block 15): bits 6..8 of byte 63 = 3.
    b[qs + 63] = 0b11 << 6;
    let y = dequantize(GgmlType::Q2_K, &b, 256).unwrap();
    assert_eq!(y[0], (2.0 * 2.0) * 3.0 - 0.5 * 3.0);
    assert_eq!(y[1], -1.5, "q = 0: minus the minimum");
    assert_eq!(y[16], (2.0 * 5.0) * 2.0 - 0.5 * 1.0);
    assert_eq!(y[32], (2.0 * 4.0) * 1.0);
    assert_eq!(y[101], (2.0 * 1.0) * 2.0 - 0.5 * 15.0);
    assert_eq!(y[147], (2.0 * 7.0) * 1.0 - 0.5 * 2.0);
    assert_eq!(y[255], (2.0 * 10.0) * 3.0);
    assert_eq!(y[48], 0.0, "sub-block 3: scale and minimum 0");
}

#[test]
fn a_q3_k_block_by_hand() {
    // hmask at 0..32, low bit pairs at 32..96, scales at 96..108, d = 0.5 (0x3800).
    let mut b = [0u8; 110];
    b[108..110].copy_from_slice(&0x3800u16.to_le_bytes());
    let (qs, sc) = (32, 96);
    // Sixteen 6-bit scales offset by 32. Scale 0 = 0b10_0011 − 32 = 3: low nibble
    // of byte 0, top bits in bits 0..2 of byte 8. Scale 5 = 0b01_0100 − 32 = −12: low
    // nibble of byte 5, bits 2..4 of byte 9. Scale 10 = 0b11_0111 − 32 = 23: high
    // nibble of byte 2, bits 4..6 of byte 10. Scale 15 = 0b00_1001 − 32 = −23: high
    // nibble of byte 7, bits 6..8 of byte 11. The others are 0 − 32.
    b[sc] = 0x03;
    b[sc + 8] = 0b10;
    b[sc + 5] = 0x04;
    b[sc + 9] = 0b01 << 2;
    b[sc + 2] = 0x70;
    b[sc + 10] = 0b11 << 4;
    b[sc + 7] = 0x90;
    // Value 0: pair 2 (bits 0..2 of byte 0), hmask[0] bit 0 set: q = 2.
    b[qs] = 0b10;
    b[0] = 1;
    // Value 83 (sub-block 5: bits 4..6 of byte 16 + 3), hmask[19] bit 2 clear:
    // q = 3 − 4. Value 84: pair 1, hmask[20] bit 2 set: q = 1.
    b[qs + 19] = 0b11 << 4;
    b[qs + 20] = 0b01 << 4;
    b[20] = 1 << 2;
    // Value 167 (second half, sub-block 10: bits 2..4 of byte 32 + 7), hmask[7]
    // bit 5 set: q = 2.
    b[qs + 39] = 0b10 << 2;
    b[7] = 1 << 5;
    // Value 255 (sub-block 15: bits 6..8 of byte 63), hmask[31] bit 7 set: q = 3.
    b[qs + 63] = 0b11 << 6;
    b[31] = 1 << 7;
    let y = dequantize(GgmlType::Q3_K, &b, 256).unwrap();
    assert_eq!(y[0], (0.5 * 3.0) * 2.0);
    assert_eq!(y[1], (0.5 * 3.0) * -4.0, "pair 0, bit clear: q = −4");
    assert_eq!(y[83], 6.0, "(0.5 · −12) · (3 − 4)");
    assert_eq!(y[84], (0.5 * -12.0) * 1.0);
    assert_eq!(y[167], (0.5 * 23.0) * 2.0);
    assert_eq!(y[255], (0.5 * -23.0) * 3.0);
    assert_eq!(y[254], (0.5 * -23.0) * -4.0);
    // Value 32 (sub-block 2, scale 0 − 32): bits 2..4 of byte 0 are 0, hmask[0]
    // bit 1 clear.
    assert_eq!(y[32], (0.5 * -32.0) * -4.0);
}

#[test]
fn an_iq4_nl_block_by_hand() {
    // d = 0.5; byte j holds index j (value j) and 15 − j (value j + 16): every level.
    let mut b = [0u8; 18];
    b[0..2].copy_from_slice(&0x3800u16.to_le_bytes());
    for j in 0..16u8 {
        b[2 + j as usize] = j | ((15 - j) << 4);
    }
    let y = dequantize(GgmlType::IQ4_NL, &b, 32).unwrap();
    // Half of −127, −104, −83, −65, −49, −35, −22, −10, 1, 13, 25, 38, 53, 69, 89, 113.
    let levels = [
        -63.5, -52.0, -41.5, -32.5, -24.5, -17.5, -11.0, -5.0, 0.5, 6.5, 12.5, 19.0, 26.5, 34.5,
        44.5, 56.5,
    ];
    for j in 0..16 {
        assert_eq!((y[j], y[j + 16]), (levels[j], levels[15 - j]), "index {j}");
    }
}

#[test]
fn mxfp4_blocks_by_hand() {
    // Block 0: e = 127 (scale 1), byte j holds code j (value j) and 15 − j (value
    // j + 16): the fp4 values themselves, sign in bit 3.
    let fp4 = [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
    ];
    let mut b = vec![127u8];
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    // Block 1: e = 130 (scale 8); byte 0 = 0x7F: value 0 is code 15 (−6), value 16
    // code 7 (6); the rest code 0.
    b.push(130);
    b.push(0x7F);
    b.extend([0u8; 15]);
    // Blocks 2 and 3: e = 0 and 1, scales 2⁻¹²⁷ and 2⁻¹²⁶ (halved, the subnormals
    // ggml builds from bits), code 1 (0.5) in value 0. Block 4: e = 254 (2¹²⁷),
    // code 2 (1.0) in value 0; code 6 (4.0) in value 16 overflows to infinity, as in
    // ggml.
    for e in [0u8, 1] {
        b.push(e);
        b.push(0x01);
        b.extend([0u8; 15]);
    }
    b.extend([254, 0x62]);
    b.extend([0u8; 15]);
    let y = dequantize(GgmlType::MXFP4, &b, 5 * 32).unwrap();
    for j in 0..16 {
        assert_eq!((y[j], y[j + 16]), (fp4[j], fp4[15 - j]), "code {j}");
    }
    assert_eq!((y[32], y[48], y[33]), (-48.0, 48.0, 0.0));
    assert_eq!(y[64] as f64, 0.5 * 2f64.powi(-127));
    assert_eq!(y[96] as f64, 0.5 * 2f64.powi(-126));
    assert_eq!(y[65], 0.0);
    assert_eq!(y[128] as f64, 2f64.powi(127));
    assert_eq!(y[144], f32::INFINITY);
}

#[test]
fn q1_0_blocks_by_hand() {
    // Block 0: d = 0.75 (0x3A00); byte 0 = 0b1010_0101: values 0..8 are the bits
    // from the least significant, 1 0 1 0 0 1 0 1; byte 15 = 0x80: value 127 set.
    // Block 1: d = −2 (0xC000); byte 0 = 1: value 128 is d, the rest −d.
    let mut b = [0u8; 36];
    b[0..2].copy_from_slice(&0x3A00u16.to_le_bytes());
    b[2] = 0b1010_0101;
    b[2 + 15] = 0x80;
    b[18..20].copy_from_slice(&0xC000u16.to_le_bytes());
    b[20] = 1;
    let y = dequantize(GgmlType::Q1_0, &b, 256).unwrap();
    let (p, n) = (0.75, -0.75);
    assert_eq!(y[..8], [p, n, p, n, n, p, n, p]);
    assert!(y[8..127].iter().all(|&v| v == n));
    assert_eq!(y[127], p);
    assert_eq!((y[128], y[129], y[255]), (-2.0, 2.0, 2.0));
}
