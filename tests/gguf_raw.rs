//! Weight banks from ggml's raw tensor bytes (`gguf::bank_from_raw`, `gguf::check_raw`):
//! every converted type packed into the documented bank type with exactly the values
//! `gguf::dequantize` gives (rounded once to fp16), products on the emulated kernel
//! against an f64 reference, unaligned F16 data, and every refusal with its typed error.
//!
//! Error bound of the products. The reference is `x · Wᵀ` in f64 from the f32 `x` and
//! the f32 values `gguf::dequantize` gives. On an fp16 bank both the weights and the
//! activations are rounded once to fp16 (relative error at most u = 2^-11 each, fp32
//! sums adding ~k · 2^-24, far smaller). Rounding to nearest leaves a relative error of
//! standard deviation at most u/√3 ≈ 2.8e-4 per rounding, nearly independent between
//! terms, so the error of a sum of k terms has an RMS of at most √2 · u/√3 ≈ 4.0e-4 of
//! the sum's RMS (for zero-mean `x`, whatever the weights' mean). The bound 1e-3 is 2.5
//! times that. The measured RMS is a sample of that expectation: with random 6-bit
//! sub-block scales a few weights dominate a K-type row, and one row of few outputs
//! (m = 1, n = 16) measured up to 7.3e-4 over 60 seeds, so the shapes below give m = 1
//! at least 24 outputs (or, for Q4_0, near-uniform weights). On a bf16 bank the weights
//! are exact and the activations are rounded to bf16 (u = 2^-8): at most 2^-8/√3 ≈
//! 2.3e-3, and the bound is 6e-3.

mod common;

use common::reference::rel_err;
use half::{bf16, f16};
use rknpu_driver::compute::matmul::Matmul;
use rknpu_driver::device::Device;
use rknpu_driver::gguf::write::{quantize_q4_0, quantize_q8_0};
use rknpu_driver::gguf::{
    self, GgmlType, GgufError as Error, bank_from_raw, bank_values, check_raw, raw_bank_dtype,
    raw_row_bytes,
};
use rknpu_driver::kernels::matmul::WeightLayout;
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::seeded::Rng;
use std::sync::Arc;
use zerocopy::IntoBytes;

/// Relative RMS error allowed on an fp16 bank (module comment).
const FP16_BOUND: f64 = 1e-3;
/// Relative RMS error allowed on a bf16 bank (module comment).
const BF16_BOUND: f64 = 6e-3;

fn open() -> Device {
    Device::open_spec("emu").expect("the emulated kernel")
}

/// `len` seeded values in [-scale, scale).
fn seeded(rng: &mut Rng, len: usize, scale: f32) -> Vec<f32> {
    (0..len).map(|_| rng.unit() * scale).collect()
}

fn f16_le(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

/// Q4_1 as ggml's reference quantiser: per block `d = (max − min) / 15`, `m = min`,
/// `q = min(15, trunc((x − min) / d + 0.5))`, value `j` in the low nibble of byte `j`
/// and value `j + 16` in its high nibble.
fn quantize_q4_1(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in values.chunks_exact(32) {
        let min = b.iter().copied().fold(f32::INFINITY, f32::min);
        let max = b.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16_le(d));
        out.extend_from_slice(&f16_le(min));
        let q = |x: f32| (((x - min) * id + 0.5) as i32).min(15) as u8;
        out.extend((0..16).map(|j| q(b[j]) | (q(b[j + 16]) << 4)));
    }
    out
}

/// Q5_0 as ggml's reference quantiser: `d = max / −16` (the value of largest
/// magnitude), `q = min(31, trunc(x / d + 16.5))`, the low nibbles packed as in Q4_0 and
/// the fifth bits in the 32-bit word `qh` (bit `i` for value `i`).
fn quantize_q5_0(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in values.chunks_exact(32) {
        let max = b
            .iter()
            .copied()
            .fold(0f32, |m, v| if v.abs() > m.abs() { v } else { m });
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let q: Vec<u32> = b
            .iter()
            .map(|&x| ((x * id + 16.5) as i32).clamp(0, 31) as u32)
            .collect();
        let qh = q
            .iter()
            .enumerate()
            .fold(0u32, |h, (i, &v)| h | ((v >> 4) << i));
        out.extend_from_slice(&f16_le(d));
        out.extend_from_slice(&qh.to_le_bytes());
        out.extend((0..16).map(|j| (q[j] & 0xF) as u8 | (((q[j + 16] & 0xF) as u8) << 4)));
    }
    out
}

/// `blocks` K-type blocks of random bytes with finite, small, positive f16 scales where
/// the type keeps them: Q4_K and Q5_K `d` at byte 0 and `dmin` at 2, Q6_K `d` at 208.
fn k_blocks(ty: GgmlType, rng: &mut Rng, blocks: usize) -> Vec<u8> {
    let size = ty.type_size() as usize;
    let mut out: Vec<u8> = (0..blocks * size).map(|_| rng.next_u64() as u8).collect();
    let scales: &[usize] = if ty == GgmlType::Q6_K {
        &[208]
    } else {
        &[0, 2]
    };
    for block in out.chunks_exact_mut(size) {
        for &at in scales {
            let s = 0.002 + 0.01 * rng.unit().abs();
            block[at..at + 2].copy_from_slice(&f16_le(s));
        }
    }
    out
}

/// Raw data of `n` rows of `k` seeded values of `ty`.
fn raw(ty: GgmlType, rng: &mut Rng, n: usize, k: usize) -> Vec<u8> {
    let w = seeded(rng, n * k, 1.5);
    match ty {
        GgmlType::F32 => w.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => w.iter().flat_map(|&v| f16_le(v)).collect(),
        GgmlType::BF16 => w
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect(),
        GgmlType::Q8_0 => quantize_q8_0(&w).unwrap(),
        GgmlType::Q4_0 => quantize_q4_0(&w).unwrap(),
        GgmlType::Q4_1 => quantize_q4_1(&w),
        GgmlType::Q5_0 => quantize_q5_0(&w),
        t => k_blocks(t, rng, n * k / 256),
    }
}

/// Packs `n` × `k` seeded data of `ty`, checks the bank's type and values against
/// `gguf::dequantize` of the same bytes, and multiplies m = 1, 7 and 33 rows.
fn multiplies_within_bound(dev: &Device, ty: GgmlType, n: usize, k: usize, seed: u64) {
    let mut rng = Rng::from_seed(seed);
    let data = raw(ty, &mut rng, n, k);
    let (n32, k32) = (n as u32, k as u32);
    assert_eq!(raw_row_bytes(ty, n32, k32).unwrap() * n, data.len(), "{ty}");
    let w = gguf::dequantize(ty, &data, (n * k) as u64).unwrap();
    assert!(w.iter().any(|&v| v != 0.0), "{ty}: all zero weights");
    let bank = bank_from_raw(dev, ty, n32, k32, &data).unwrap();
    let want_dtype = if ty == GgmlType::BF16 {
        Dtype::Bf16
    } else {
        Dtype::Fp16
    };
    assert_eq!(bank.layout().dtype, want_dtype, "{ty}");
    assert_eq!(raw_bank_dtype(ty).unwrap(), want_dtype, "{ty}");
    assert_eq!((bank.layout().n, bank.layout().k), (n32, k32), "{ty}");
    // The bank holds the dequantised values rounded once to its type.
    let rounded: Vec<f32> = match want_dtype {
        Dtype::Bf16 => w.iter().map(|&v| bf16::from_f32(v).to_f32()).collect(),
        _ => w.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
    };
    assert!(
        bank_values(&bank).unwrap() == rounded,
        "{ty}: the bank's values are not dequantize's rounded to {want_dtype:?}"
    );
    let bound = if want_dtype == Dtype::Bf16 {
        BF16_BOUND
    } else {
        FP16_BOUND
    };
    let bank = Arc::new(bank);
    for m in [1usize, 7, 33] {
        check_raw(dev, ty, n32, k32, m as u32).unwrap();
        let x = seeded(&mut rng, m * k, 1.0);
        let mut y = vec![f32::NAN; m * n];
        Matmul::new(&bank, m as u32)
            .unwrap()
            .mul_mat(&x, &mut y)
            .unwrap();
        let err = rel_err(&x, &w, &y, (m, k, n));
        assert!(
            err < bound,
            "{ty} {n}x{k}, m = {m}: relative RMS error {err:e} (bound {bound:e})"
        );
    }
}

#[test]
fn float_types_multiply_within_rounding() {
    let dev = open();
    multiplies_within_bound(&dev, GgmlType::F32, 24, 256, 1);
    multiplies_within_bound(&dev, GgmlType::F16, 40, 512, 2);
    multiplies_within_bound(&dev, GgmlType::BF16, 16, 256, 3);
}

#[test]
fn block_types_multiply_within_rounding() {
    let dev = open();
    multiplies_within_bound(&dev, GgmlType::Q8_0, 33, 512, 4);
    multiplies_within_bound(&dev, GgmlType::Q4_0, 8, 256, 5);
    multiplies_within_bound(&dev, GgmlType::Q4_1, 20, 512, 6);
    multiplies_within_bound(&dev, GgmlType::Q5_0, 37, 256, 7);
}

#[test]
fn k_types_multiply_within_rounding() {
    let dev = open();
    multiplies_within_bound(&dev, GgmlType::Q4_K, 24, 512, 8);
    multiplies_within_bound(&dev, GgmlType::Q5_K, 32, 512, 9);
    multiplies_within_bound(&dev, GgmlType::Q6_K, 40, 512, 10);
}

#[test]
fn row_bytes_are_those_of_ggml_common() {
    // Block sizes of ggml-common.h: Q8_0 34 bytes a 32, Q4_0 18, Q4_1 20, Q5_0 22;
    // Q4_K 144 a 256, Q5_K 176, Q6_K 210.
    for (ty, k, bytes) in [
        (GgmlType::F32, 96, 384),
        (GgmlType::F16, 96, 192),
        (GgmlType::BF16, 3, 6),
        (GgmlType::Q8_0, 96, 3 * 34),
        (GgmlType::Q4_0, 64, 36),
        (GgmlType::Q4_1, 64, 40),
        (GgmlType::Q5_0, 64, 44),
        (GgmlType::Q4_K, 512, 288),
        (GgmlType::Q5_K, 256, 176),
        (GgmlType::Q6_K, 768, 630),
    ] {
        assert_eq!(raw_row_bytes(ty, 5, k).unwrap(), bytes, "{ty} k = {k}");
    }
}

/// Products of `data` (F16 or BF16, `n` × `k`) against the same seeded `m` rows.
fn products(dev: &Device, ty: GgmlType, n: usize, k: usize, data: &[u8]) -> (Vec<f32>, Vec<f32>) {
    let bank = bank_from_raw(dev, ty, n as u32, k as u32, data).unwrap();
    let values = bank_values(&bank).unwrap();
    let m = 5;
    let x = seeded(&mut Rng::from_seed(77), m * k, 1.0);
    let mut y = vec![f32::NAN; m * n];
    Matmul::new(&Arc::new(bank), m as u32)
        .unwrap()
        .mul_mat(&x, &mut y)
        .unwrap();
    (values, y)
}

#[test]
fn unaligned_16_bit_data_gives_the_same_products() {
    let dev = open();
    let (n, k) = (24, 96);
    for (ty, seed) in [(GgmlType::F16, 11), (GgmlType::BF16, 12)] {
        let data = raw(ty, &mut Rng::from_seed(seed), n, k);
        let mut buf = vec![0u8; data.len() + 1];
        // An odd address whatever the allocation's alignment.
        let at = usize::from((buf.as_ptr() as usize).is_multiple_of(2));
        buf[at..at + data.len()].copy_from_slice(&data);
        let odd = &buf[at..at + data.len()];
        assert_eq!(odd.as_ptr() as usize % 2, 1);
        // The same bytes in u16 storage: 2-byte aligned.
        let words: Vec<u16> = data
            .chunks_exact(2)
            .map(|p| u16::from_le_bytes([p[0], p[1]]))
            .collect();
        let aligned = words.as_bytes();
        assert_eq!((aligned, aligned.as_ptr() as usize % 2), (&data[..], 0));
        let (va, ya) = products(&dev, ty, n, k, aligned);
        let (vo, yo) = products(&dev, ty, n, k, odd);
        let w = gguf::dequantize(ty, &data, (n * k) as u64).unwrap();
        assert_eq!(va, w, "{ty}: an F16/BF16 bank is the data exactly");
        assert_eq!(vo, va, "{ty}: unaligned data packed differently");
        let same = ya.iter().zip(&yo).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{ty}: unaligned data multiplied differently");
    }
}

/// `bank_from_raw`'s refusal of `data`.
fn refusal(dev: &Device, ty: GgmlType, n: u32, k: u32, data: &[u8]) -> Error {
    bank_from_raw(dev, ty, n, k, data)
        .err()
        .unwrap_or_else(|| panic!("{ty} {n}x{k} of {} bytes was accepted", data.len()))
}

#[test]
fn shapes_and_lengths_are_refused_with_typed_errors() {
    let dev = open();
    // Wrong data length: a byte short, a byte over, a Q8_0 block short.
    for (ty, n, k, len) in [
        (GgmlType::F16, 4, 32, 255),
        (GgmlType::F16, 4, 32, 257),
        (GgmlType::F32, 3, 8, 4 * 24 - 4),
        (GgmlType::Q8_0, 2, 64, 34 * 3),
        (GgmlType::Q4_K, 1, 256, 145),
    ] {
        let e = refusal(&dev, ty, n, k, &vec![0u8; len]);
        assert!(
            matches!(e, Error::Invalid { what, .. } if what.contains("length")),
            "{ty} {n}x{k} of {len} bytes: {e:?}"
        );
    }
    // k not a whole number of blocks.
    for (ty, k) in [
        (GgmlType::Q8_0, 48),
        (GgmlType::Q4_K, 128),
        (GgmlType::Q6_K, 300),
    ] {
        assert!(matches!(
            raw_row_bytes(ty, 2, k),
            Err(Error::Unsupported { .. })
        ));
        let e = refusal(&dev, ty, 2, k, &[0u8; 2 * 51]);
        assert!(
            matches!(&e, Error::Unsupported { what, .. } if what.contains("block")),
            "{ty} k = {k}: {e:?}"
        );
        assert!(matches!(
            check_raw(&dev, ty, 2, k, 1),
            Err(Error::Unsupported { .. })
        ));
    }
    // Empty shapes.
    for (n, k) in [(0, 32), (8, 0), (0, 0)] {
        let e = refusal(&dev, GgmlType::F16, n, k, &[]);
        assert!(matches!(e, Error::Invalid { .. }), "{n}x{k}: {e:?}");
        assert!(matches!(
            raw_row_bytes(GgmlType::F16, n, k),
            Err(Error::Invalid { .. })
        ));
        let c = check_raw(&dev, GgmlType::F16, n, k, 1);
        assert!(matches!(c, Err(Error::Invalid { .. })), "{n}x{k}: {c:?}");
    }
    // Types without a conversion, with data of the right length.
    for ty in [
        GgmlType::IQ2_XXS,
        GgmlType::TQ1_0,
        GgmlType::NVFP4,
        GgmlType::I8,
    ] {
        let k = 256;
        let len = raw_row_bytes(ty, 2, k).unwrap() * 2;
        let e = refusal(&dev, ty, 2, k, &vec![0u8; len]);
        assert!(matches!(e, Error::Unsupported { .. }), "{ty}: {e:?}");
        assert!(matches!(raw_bank_dtype(ty), Err(Error::Unsupported { .. })));
        let c = check_raw(&dev, ty, 2, k, 1);
        assert!(matches!(c, Err(Error::Unsupported { .. })), "{ty}: {c:?}");
    }
    // No rows to multiply.
    let c = check_raw(&dev, GgmlType::F16, 8, 32, 0);
    assert!(matches!(c, Err(Error::Invalid { .. })), "m = 0: {c:?}");
}

/// The message of an `Error::Unsupported` refusal naming the weight's place.
fn unholdable(dev: &Device, ty: GgmlType, n: u32, k: u32, data: &[u8]) -> String {
    let e = refusal(dev, ty, n, k, data);
    match &e {
        Error::Unsupported { what, .. } => what.clone(),
        _ => panic!("{ty}: not Unsupported: {e:?}"),
    }
}

#[test]
fn values_fp16_cannot_hold_are_refused_with_their_place() {
    let dev = open();
    let (n, k) = (4usize, 32usize);
    let f32_data = |at: usize, v: f32| -> Vec<u8> {
        let mut w = vec![0.5f32; n * k];
        w[at] = v;
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    };
    for v in [1e5f32, -1e5, 65520.0, f32::INFINITY, f32::NAN] {
        let msg = unholdable(&dev, GgmlType::F32, 4, 32, &f32_data(2 * k + 5, v));
        assert!(msg.contains("row 2, column 5"), "{v}: {msg}");
    }
    // The largest fp16 value is taken.
    for v in [65504f32, -65504.0] {
        assert!(bank_from_raw(&dev, GgmlType::F32, 4, 32, &f32_data(7, v)).is_ok());
    }
    // F16 and BF16 infinities and NaNs.
    let (inf, nan) = (f16::INFINITY.to_bits(), f16::NAN.to_bits());
    let (binf, bnan) = (bf16::NEG_INFINITY.to_bits(), bf16::NAN.to_bits());
    for (ty, bits, at, place) in [
        (GgmlType::F16, inf, k + 3, "row 1, column 3"),
        (GgmlType::F16, nan, 3 * k + 31, "row 3, column 31"),
        (GgmlType::BF16, binf, 0, "row 0, column 0"),
        (GgmlType::BF16, bnan, 2 * k + 17, "row 2, column 17"),
    ] {
        let mut h = vec![0x3800u16; n * k];
        h[at] = bits;
        let data: Vec<u8> = h.iter().flat_map(|v| v.to_le_bytes()).collect();
        let msg = unholdable(&dev, ty, 4, 32, &data);
        assert!(msg.contains(place), "{ty} {bits:#x}: {msg}");
    }
    // Q8_0 of 4 rows of 64 (two 34-byte blocks a row) whose scale times a quant
    // overflows fp16: block 3 (row 1, values 32..64) has d = 65504 and q = 2 at its
    // value 8, column 40; the other quants are 0.
    let mut q = vec![0u8; 4 * 2 * 34];
    q[3 * 34..3 * 34 + 2].copy_from_slice(&f16::MAX.to_le_bytes());
    q[3 * 34 + 2 + 8] = 2;
    let msg = unholdable(&dev, GgmlType::Q8_0, 4, 64, &q);
    assert!(msg.contains("row 1, column 40"), "{msg}");
    // A NaN scale (NaN · 0 is NaN: every value of block 5 = row 2, values 32..64) is
    // refused at the block's first value.
    let mut q = vec![0u8; 4 * 2 * 34];
    q[5 * 34..5 * 34 + 2].copy_from_slice(&f16::NAN.to_le_bytes());
    let msg = unholdable(&dev, GgmlType::Q8_0, 4, 64, &q);
    assert!(msg.contains("row 2, column 32"), "{msg}");
}

#[test]
fn check_raw_agrees_with_banks_and_plans() {
    let dev = open();
    let mut rng = Rng::from_seed(20);
    // Accepted shapes: check_raw says yes, and the bank and plan are made.
    for (ty, n, k, m) in [
        (GgmlType::F16, 1, 1, 1),
        (GgmlType::F32, 100, 33, 200),
        (GgmlType::Q8_0, 70, 4128, 3),
        (GgmlType::Q4_K, 33, 256, 129),
        (GgmlType::BF16, 9, 64, 17),
    ] {
        check_raw(&dev, ty, n, k, m).unwrap();
        let data = match ty {
            GgmlType::Q8_0 | GgmlType::Q4_K => raw(ty, &mut rng, n as usize, k as usize),
            _ => vec![0u8; raw_row_bytes(ty, n, k).unwrap() * n as usize],
        };
        let bank = Arc::new(bank_from_raw(&dev, ty, n, k, &data).unwrap());
        assert!(Matmul::new(&bank, m).is_ok(), "{ty} {n}x{k}, m = {m}");
    }
    // What WeightLayout::new refuses (N that does not pad in 32 bits, K beyond 4095
    // waves of 4096, weights beyond 4 GiB) check_raw refuses as the bank's error. Banks
    // of these shapes would take gigabytes, so only the layout is compared.
    for (ty, n, k) in [
        (GgmlType::F16, u32::MAX, 32),
        (GgmlType::F16, 1, 4096 * 4096),
        (GgmlType::Q8_0, 65536, 65536),
        (GgmlType::BF16, 40000, 60000),
    ] {
        let dtype = raw_bank_dtype(ty).unwrap();
        assert!(WeightLayout::new(k, n, dtype).is_err(), "{ty} {n}x{k}");
        let c = check_raw(&dev, ty, n, k, 1);
        assert!(
            matches!(c, Err(Error::Bank(rknpu_driver::Error::Unsupported { .. }))),
            "{ty} {n}x{k}: {c:?}"
        );
    }
    // Too many rows for one submission: refused by both, from arithmetic.
    let data = raw(GgmlType::F16, &mut rng, 8, 32);
    let bank = Arc::new(bank_from_raw(&dev, GgmlType::F16, 8, 32, &data).unwrap());
    for m in [u32::MAX, 1 << 24] {
        let c = check_raw(&dev, GgmlType::F16, 8, 32, m);
        assert!(matches!(c, Err(Error::Bank(_))), "m = {m}: {c:?}");
        assert!(Matmul::new(&bank, m).is_err(), "m = {m}");
    }
}

/// Into an int8 bank (`gguf::bank_from_raw_as`): the bank `WeightBank::quantize_f32_nk`
/// makes from the dequantised values, byte for byte and scale for scale, for float,
/// block and K types; `gguf::check_raw_as` plans it. Other bank types than the exact one
/// and int8 are refused, and a NaN by its row and column.
#[test]
fn int8_banks_are_the_dequantised_values_requantised_per_channel() {
    use rknpu_driver::compute::matmul::WeightBank;
    let dev = open();
    let mut rng = Rng::from_seed(31);
    let (n, k) = (40usize, 512usize);
    use GgmlType as T;
    let floats = [T::F32, T::F16, T::BF16];
    let blocks = [T::Q8_0, T::Q4_0, T::Q4_1, T::Q5_0];
    let k_types = [T::Q4_K, T::Q5_K, T::Q6_K];
    for ty in floats.into_iter().chain(blocks).chain(k_types) {
        let data = raw(ty, &mut rng, n, k);
        let shape = (n as u32, k as u32);
        let bank =
            gguf::bank_from_raw_as(&dev, (ty, Dtype::Int8), shape.0, shape.1, &data).unwrap();
        let w = gguf::dequantize(ty, &data, (n * k) as u64).unwrap();
        let want = WeightBank::quantize_f32_nk(&dev, shape.0, shape.1, &w, Dtype::Int8).unwrap();
        assert_eq!(bank.layout(), want.layout(), "{ty}");
        assert_eq!(bank.packed().unwrap(), want.packed().unwrap(), "{ty}");
        assert_eq!(bank.scales(), want.scales(), "{ty}");
        gguf::check_raw_as(&dev, (ty, Dtype::Int8), shape.0, shape.1, 7).unwrap();
    }
    let data = raw(GgmlType::Q8_0, &mut rng, n, k);
    for dtype in [Dtype::Int4, Dtype::Bf16] {
        let as_ = (GgmlType::Q8_0, dtype);
        assert!(matches!(
            gguf::bank_from_raw_as(&dev, as_, n as u32, k as u32, &data),
            Err(Error::Unsupported { .. })
        ));
        assert!(matches!(
            gguf::check_raw_as(&dev, as_, n as u32, k as u32, 1),
            Err(Error::Unsupported { .. })
        ));
    }
    let mut nan = raw(GgmlType::F32, &mut rng, n, k);
    nan[(3 * k + 5) * 4..][..4].copy_from_slice(&f32::NAN.to_le_bytes());
    match gguf::bank_from_raw_as(&dev, (GgmlType::F32, Dtype::Int8), n as u32, k as u32, &nan) {
        Err(Error::Unsupported { what, .. }) => {
            assert!(what.contains("row 3, column 5"), "{what}")
        }
        other => panic!("{other:?}"),
    }
}
