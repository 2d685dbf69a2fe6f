//! Dequantisation of blocks written by hand, and quantisation by the reference rules.

use super::*;

/// A file whose one tensor `t` has type `ty`, dims `dims` and the given bytes.
fn raw_file(ty: GgmlType, dims: &[u64], data: Vec<u8>) -> Gguf {
    let mut w = Writer::new();
    w.tensor_raw("t", ty, dims, data).unwrap();
    Gguf::parse(&w.to_bytes()).unwrap()
}

#[test]
fn dequantisation_of_blocks_written_by_hand() {
    // Q8_0: d = 0.5 (f16 0x3800), quants 1, −2, 127, −128, then zeros.
    let mut b = vec![0x00, 0x38, 1, (-2i8) as u8, 127, 0x80];
    b.resize(34, 0);
    let y = raw_file(GgmlType::Q8_0, &[32], b).dequantize("t").unwrap();
    assert_eq!(y[..5], [0.5, -1.0, 63.5, -64.0, 0.0]);

    // Q4_0: d = 0.25 (0x3400); byte 0 = 0x9F: value 0 = (15 − 8)·0.25, value 16 =
    // (9 − 8)·0.25; byte 1 = 0x08: value 1 = 0, value 17 = (0 − 8)·0.25; the other
    // bytes 0x88: values 0.
    let mut b = vec![0x00, 0x34, 0x9F, 0x08];
    b.resize(18, 0x88);
    let y = raw_file(GgmlType::Q4_0, &[32], b).dequantize("t").unwrap();
    assert_eq!((y[0], y[16], y[1], y[17]), (1.75, 0.25, 0.0, -2.0));
    assert!(
        y.iter()
            .enumerate()
            .all(|(i, &v)| [0, 1, 16, 17].contains(&i) || v == 0.0)
    );

    // F16 and BF16: 1.0, −2.0 / 1.0, −3.0.
    let y = raw_file(GgmlType::F16, &[2], vec![0x00, 0x3C, 0x00, 0xC0]).dequantize("t");
    assert_eq!(y.unwrap(), [1.0, -2.0]);
    let y = raw_file(GgmlType::BF16, &[2], vec![0x80, 0x3F, 0x40, 0xC0]).dequantize("t");
    assert_eq!(y.unwrap(), [1.0, -3.0]);

    // A type the library reads but does not dequantise.
    let g = raw_file(GgmlType::Q8_1, &[32], vec![0; 40]);
    assert_eq!(g.tensor("t").unwrap().ggml_type, GgmlType::Q8_1);
    assert!(matches!(
        g.dequantize("t"),
        Err(Error::Unsupported { ref tensor, .. }) if tensor == "t"
    ));
}

#[test]
fn quantisation_follows_ggml_reference_rules_by_hand() {
    // Q8_0: amax 127 → d = 1 (0x3C00), q = round half away from zero.
    let mut x = [0f32; 32];
    x[..5].copy_from_slice(&[127.0, 0.5, -0.5, 2.5, -1.49]);
    let q = quantize_q8_0(&x).unwrap();
    assert_eq!(q[..2], [0x00, 0x3C]);
    assert_eq!(q[2..7], [127, 1, (-1i8) as u8, 3, (-1i8) as u8]);
    assert!(q[7..].iter().all(|&b| b == 0));

    // Q4_0: the value of largest magnitude is −4 (first of −4 and 4): d = −4 / −8 = 0.5
    // (0x3800), q = min(15, trunc(x / d + 8.5)): −4 → 0, 4 → 16 → 15, 0.3 → 9,
    // −0.3 → 7, 0.25 → 9 (a half rounds up), 0 → 8.
    let mut x = [0f32; 32];
    x[..5].copy_from_slice(&[-4.0, 4.0, 0.3, -0.3, 0.25]);
    let q = quantize_q4_0(&x).unwrap();
    assert_eq!(q[..2], [0x00, 0x38]);
    // Byte j: value j low, value j + 16 (here 0 → 8) high.
    assert_eq!(q[2..7], [0x80, 0x8F, 0x89, 0x87, 0x89]);
    assert!(q[7..].iter().all(|&b| b == 0x88));
}
