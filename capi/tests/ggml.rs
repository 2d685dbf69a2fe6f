//! The ggml entry points called as C calls them: `rknpu_weights_ggml` from raw tensor
//! bytes, `rknpu_mul_mat_ex` on rows in caller layout (F32 or F16, padded strides, a
//! gapped `y`), the per-handle plan cache, `rknpu_ggml_supported`, and the refusals with
//! their codes and messages, on the emulated kernel against an f64 reference from
//! `rknpu_driver::gguf::dequantize` of the same bytes.
//!
//! Error bounds (relative RMS over all outputs). The weights are an fp16 bank: F16 data
//! exactly, Q8_0 and Q4_K dequantised and rounded once to fp16. F32 activations are
//! rounded to fp16 on the way; F16 activations on an fp16 bank go to the NPU as they
//! are. Each rounding to nearest has a relative error of standard deviation at most
//! 2^-11/√3 ≈ 2.8e-4, nearly independent between terms, so a sum with two roundings a
//! term is off by at most √2 · 2.8e-4 ≈ 4e-4 RMS of its size: the bound is 1e-3. With no
//! rounding at all (F16 weights, F16 activations) the products of fp16 values are exact
//! in fp32 and only the fp32 sums of 256 terms round (about √k · 2^-24 ≈ 1e-6): the
//! bound is 1e-5.
//!
//! Calling `extern "C"` functions through raw pointers takes `unsafe`; each call's
//! pointers are to live Rust values at least as long as the call may read or write.
#![allow(unsafe_code)]

mod common;
#[path = "../../tests/common/reference.rs"]
mod reference;

use common::*;
use half::f16;
use reference::rel_err;
use rknpu::ffi::*;
use rknpu::handle::{DeviceHandle, WeightsHandle};
use rknpu::{Code, RknpuWeights};
use rknpu_driver::gguf::{self, GgmlType, write::quantize_q8_0};
use rknpu_driver::seeded::Rng;
use std::ffi::{c_int, c_void};
use std::ptr::{null, null_mut};

/// More ggml type codes (`enum ggml_type`; F32 and F16 are in `common`).
const Q8_0: u32 = 8;
const IQ2_XXS: u32 = 16;
const Q4_K: u32 = 12;

/// Relative RMS error allowed when weights or activations are rounded to fp16.
const ROUNDED: f64 = 1e-3;
/// Relative RMS error allowed when neither is (fp32 sums only).
const EXACT: f64 = 1e-5;

/// Asserts that a call failed with `code` and left a message.
fn failed(rc: c_int, code: Code, what: &str) {
    assert_eq!(rc, code as c_int, "{what}: {}", last_error());
    assert!(!last_error().is_empty(), "{what}: no message");
}

/// `len` seeded values in [-1, 1).
fn values(rng: &mut Rng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.unit()).collect()
}

/// `rknpu_weights_ggml` of `data`, returning the code and the handle.
fn weights(
    dev: *mut DeviceHandle,
    ty: u32,
    data: &[u8],
    n: u32,
    k: u32,
) -> (c_int, *mut WeightsHandle) {
    let mut out = null_mut();
    // SAFETY: `dev` is open and `data` holds `data.len()` bytes, the size passed.
    let rc =
        unsafe { rknpu_weights_ggml(dev, ty, data.as_ptr().cast(), data.len(), n, k, &mut out) };
    (rc, out)
}

/// The weights handle `w` names (it must be live).
fn handle(w: *mut WeightsHandle) -> std::sync::Arc<RknpuWeights> {
    rknpu::handle::get(w, "w").expect("a live weights handle")
}

/// `rknpu_mul_mat_ex` on `x` into `y`, after checking that the buffers cover every
/// byte the call may touch for the strides given (a stride shorter than a row counts
/// as a row, which the call refuses before reading).
fn mul_mat_ex(
    w: *mut WeightsHandle,
    (x_type, x, x_stride): (u32, &[u8], usize),
    m: u32,
    (y, y_stride): (&mut [f32], usize),
) -> c_int {
    let h = handle(w);
    let (k, n) = (h.k as usize, h.n as usize);
    let rows = (m as usize).max(1) - 1;
    let row = k * if x_type == F32 { 4 } else { 2 };
    assert!(
        x.len() >= rows * x_stride.max(row) + row,
        "x too short for the call"
    );
    assert!(
        y.len() * 4 >= rows * y_stride.max(4 * n) + 4 * n,
        "y too short"
    );
    // SAFETY: `w` is live; `x` and `y` are live, unaliased and at least as long as the
    // spans the arguments give (checked above); `y` is a slice of f32, so aligned.
    unsafe {
        rknpu_mul_mat_ex(
            w,
            x_type,
            x.as_ptr().cast::<c_void>(),
            x_stride,
            m,
            y.as_mut_ptr(),
            y_stride,
        )
    }
}

/// `m` rows of `values` (`k` each) as bytes of `size` (4: f32, 2: f16 bits), row `i`
/// at byte `i · stride`; every other byte 0xFF, so that any value read from the
/// padding is a NaN (f32 or f16).
fn rows_at(values: &[f32], k: usize, size: usize, stride: usize) -> Vec<u8> {
    let m = values.len() / k;
    let mut out = vec![0xFFu8; (m - 1) * stride + k * size];
    for (i, row) in values.chunks_exact(k).enumerate() {
        let bytes: Vec<u8> = match size {
            4 => row.iter().flat_map(|v| v.to_le_bytes()).collect(),
            _ => row
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect(),
        };
        out[i * stride..i * stride + k * size].copy_from_slice(&bytes);
    }
    out
}

/// Q4_K blocks of random bytes with small positive f16 `d` (byte 0) and `dmin` (2).
fn q4_k_blocks(rng: &mut Rng, blocks: usize) -> Vec<u8> {
    let mut out: Vec<u8> = (0..blocks * 144).map(|_| rng.next_u64() as u8).collect();
    for b in out.chunks_exact_mut(144) {
        for at in [0, 2] {
            let s = f16::from_f32(0.002 + 0.01 * rng.unit().abs());
            b[at..at + 2].copy_from_slice(&s.to_le_bytes());
        }
    }
    out
}

/// One product through `rknpu_mul_mat_ex`: `x` (`m` rows of `k`, given as `x_type` of
/// `x_stride` bytes), into `y` rows `y_stride` bytes apart whose gaps must stay as
/// they were; the dense result, checked against `w` within `bound`.
fn product(
    h: *mut WeightsHandle,
    w: &[f32],
    (x_type, x, x_stride): (u32, &[f32], usize),
    y_stride: usize,
    bound: f64,
) -> Vec<f32> {
    let (n, k) = (handle(h).n as usize, handle(h).k as usize);
    let m = x.len() / k;
    let size = if x_type == F32 { 4 } else { 2 };
    let bytes = rows_at(x, k, size, x_stride);
    // Gaps and the tail of y hold a NaN pattern the call would not write.
    let sentinel = f32::from_bits(0x7FA5_A5A5);
    let y_floats = y_stride / 4;
    let mut y = vec![sentinel; (m - 1) * y_floats + n + 5];
    let rc = mul_mat_ex(h, (x_type, &bytes, x_stride), m as u32, (&mut y, y_stride));
    assert_eq!(rc, 0, "{}", last_error());
    assert_eq!(last_error(), "", "a success leaves no message");
    let mut dense = Vec::with_capacity(m * n);
    for (i, v) in y.iter().enumerate() {
        let (r, c) = (i / y_floats, i % y_floats);
        if r < m && c < n {
            dense.push(*v);
        } else {
            assert_eq!(
                v.to_bits(),
                sentinel.to_bits(),
                "y[{i}] outside the rows written"
            );
        }
    }
    // The reference from the activations as the NPU sees them when they are fp16.
    let x_seen: Vec<f32> = match x_type {
        F32 => x.to_vec(),
        _ => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
    };
    let err = rel_err(&x_seen, w, &dense, (m, k, n));
    assert!(
        err < bound,
        "type {x_type}, strides {x_stride}/{y_stride}, m = {m}: relative RMS {err:e} (bound {bound:e})"
    );
    dense
}

/// Weights of ggml type `ty` from `data`, multiplied by rows in every caller layout.
fn rows_in_caller_layout(dev: *mut DeviceHandle, ty: u32, data: &[u8], (n, k): (usize, usize)) {
    let gtype = GgmlType::from_code(ty).unwrap();
    let w = gguf::dequantize(gtype, data, (n * k) as u64).unwrap();
    let (rc, h) = weights(dev, ty, data, n as u32, k as u32);
    assert_eq!(rc, 0, "type {ty}: {}", last_error());
    assert_eq!(last_error(), "");
    let mut rng = Rng::from_seed(u64::from(ty) + 100);
    // F16 rows on F16 weights round nothing; every other case rounds once or twice.
    let f16_bound = if ty == F16 { EXACT } else { ROUNDED };
    let (r4, r2) = (4 * k, 2 * k);
    // Dense F32 rows, the same as rknpu_mul_mat's bit for bit.
    let x = values(&mut rng, 5 * k);
    let y = product(h, &w, (F32, &x, r4), 4 * n, ROUNDED);
    let mut y_plain = vec![f32::NAN; 5 * n];
    // SAFETY: `h` is live; `x` holds 5 · k floats and `y_plain` 5 · n.
    let rc = unsafe { rknpu_mul_mat(h, x.as_ptr(), 5, y_plain.as_mut_ptr()) };
    assert_eq!(rc, 0, "{}", last_error());
    assert!(
        y.iter()
            .zip(&y_plain)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    // Dense F16 rows.
    product(h, &w, (F16, &values(&mut rng, 3 * k), r2), 4 * n, f16_bound);
    // Rows with NaN padding between them: aligned, then at odd strides.
    product(
        h,
        &w,
        (F32, &values(&mut rng, 4 * k), r4 + 12),
        4 * n,
        ROUNDED,
    );
    product(
        h,
        &w,
        (F32, &values(&mut rng, 3 * k), r4 + 3),
        4 * n,
        ROUNDED,
    );
    product(
        h,
        &w,
        (F16, &values(&mut rng, 4 * k), r2 + 1),
        4 * n,
        f16_bound,
    );
    // Gaps between the rows of y, with padded x.
    product(
        h,
        &w,
        (F32, &values(&mut rng, 3 * k), r4 + 8),
        4 * (n + 3),
        ROUNDED,
    );
    product(
        h,
        &w,
        (F16, &values(&mut rng, 2 * k), r2),
        4 * (n + 1),
        f16_bound,
    );
    rknpu_weights_free(h);
}

#[test]
fn ggml_weights_multiply_rows_in_caller_layout() {
    let dev = open_emu();
    let mut rng = Rng::from_seed(1);
    let (n, k) = (24usize, 256usize);
    let h: Vec<u8> = values(&mut rng, n * k)
        .iter()
        .flat_map(|&v| f16::from_f32(v * 1.5).to_le_bytes())
        .collect();
    rows_in_caller_layout(dev, F16, &h, (n, k));
    let q8 = quantize_q8_0(&values(&mut rng, 40 * 512)).unwrap();
    rows_in_caller_layout(dev, Q8_0, &q8, (40, 512));
    let q4k = q4_k_blocks(&mut rng, 33);
    rows_in_caller_layout(dev, Q4_K, &q4k, (33, 256));
    rknpu_close(dev);
}

/// Runs `m` seeded F32 rows (seeded by `m`) through `h` with `rknpu_mul_mat_ex`.
fn run(h: *mut WeightsHandle, m: u32) -> Vec<f32> {
    let (n, k) = (handle(h).n as usize, handle(h).k as usize);
    let x = values(&mut Rng::from_seed(u64::from(m)), m as usize * k);
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut y = vec![f32::NAN; m as usize * n];
    let rc = mul_mat_ex(h, (F32, &bytes, 4 * k), m, (&mut y, 4 * n));
    assert_eq!(rc, 0, "m = {m}: {}", last_error());
    y
}

#[test]
fn the_plan_cache_keeps_the_last_eight_row_counts() {
    let dev = open_emu();
    let (n, k) = (8u32, 32u32);
    let data: Vec<u8> = values(&mut Rng::from_seed(2), (n * k) as usize)
        .iter()
        .flat_map(|&v| f16::from_f32(v).to_le_bytes())
        .collect();
    let (rc, h) = weights(dev, F16, &data, n, k);
    assert_eq!(rc, 0, "{}", last_error());
    assert!(
        handle(h).cached_rows().is_empty(),
        "no plan before a product"
    );
    // Prompt and decode sizes in turn: both stay, most recently used last, and a
    // cached plan gives the same results as a fresh one.
    let first = run(h, 1);
    let big = run(h, 64);
    assert_eq!(handle(h).cached_rows(), [1, 64]);
    assert_eq!(run(h, 1), first);
    assert_eq!(handle(h).cached_rows(), [64, 1]);
    assert_eq!(run(h, 64), big);
    assert_eq!(handle(h).cached_rows(), [1, 64]);
    // Nine distinct row counts (1 and 64 among the first): the last eight stay.
    for m in 2..=9 {
        run(h, m);
    }
    assert_eq!(handle(h).cached_rows(), [2, 3, 4, 5, 6, 7, 8, 9]);
    // A cached m moves to the end; a new one evicts the least recently used.
    run(h, 3);
    assert_eq!(handle(h).cached_rows(), [2, 4, 5, 6, 7, 8, 9, 3]);
    assert_eq!(run(h, 1), first, "m = 1 planned again after eviction");
    assert_eq!(handle(h).cached_rows(), [4, 5, 6, 7, 8, 9, 3, 1]);
    // rknpu_mul_mat shares the cache.
    let x = vec![0.25f32; 10 * k as usize];
    let mut y = vec![0f32; 10 * n as usize];
    // SAFETY: `h` is live; `x` holds 10 · k floats and `y` 10 · n.
    let rc = unsafe { rknpu_mul_mat(h, x.as_ptr(), 10, y.as_mut_ptr()) };
    assert_eq!(rc, 0, "{}", last_error());
    assert_eq!(handle(h).cached_rows(), [5, 6, 7, 8, 9, 3, 1, 10]);
    // A refused call plans nothing.
    let mut y = vec![0f32; 4 * n as usize];
    failed(
        mul_mat_ex(h, (F32, &[0u8; 128], 4), 1, (&mut y, 4 * n as usize)),
        Code::Arg,
        "x_stride shorter than a row",
    );
    assert_eq!(handle(h).cached_rows(), [5, 6, 7, 8, 9, 3, 1, 10]);
    rknpu_weights_free(h);
    rknpu_close(dev);
}

#[test]
fn weights_are_refused_before_their_bytes_are_read() {
    let dev = open_emu();
    let data = vec![0u8; 4 * 64 + 1];
    let (n, k) = (4u32, 32u32);
    // F16 4 x 32 takes 256 bytes: a byte short, a byte over.
    for size in [255usize, 257, 0] {
        let (rc, out) = weights(dev, F16, &data[..size], n, k);
        failed(rc, Code::Arg, &format!("size {size}"));
        assert!(last_error().contains("size"), "{}", last_error());
        assert!(out.is_null(), "a refused call wrote a handle");
    }
    // NULL pointers.
    let mut out = null_mut();
    // SAFETY: every non-NULL pointer is to a live local of at least the size passed.
    unsafe {
        let p = data.as_ptr().cast::<c_void>();
        failed(
            rknpu_weights_ggml(null_mut(), F16, p, 256, n, k, &mut out),
            Code::Arg,
            "NULL dev",
        );
        assert!(last_error().contains("dev"), "{}", last_error());
        failed(
            rknpu_weights_ggml(dev, F16, null(), 256, n, k, &mut out),
            Code::Arg,
            "NULL data",
        );
        assert!(last_error().contains("data"), "{}", last_error());
        failed(
            rknpu_weights_ggml(dev, F16, p, 256, n, k, null_mut()),
            Code::Arg,
            "NULL out",
        );
    }
    assert!(out.is_null());
    // An unknown type code; a known type without a conversion (IQ2_XXS: 66 bytes a 256).
    let (rc, out) = weights(dev, 99, &data[..256], n, k);
    failed(rc, Code::Unsupported, "type 99");
    assert!(
        last_error().contains("99") && out.is_null(),
        "{}",
        last_error()
    );
    let iq2 = vec![0u8; 2 * 66];
    let (rc, out) = weights(dev, IQ2_XXS, &iq2, 2, 256);
    failed(rc, Code::Unsupported, "IQ2_XXS");
    assert!(out.is_null());
    // k not a whole number of Q8_0 blocks; a zero size.
    let (rc, out) = weights(dev, Q8_0, &[0u8; 2 * 51], 2, 48);
    assert!(rc == -1 || rc == -3, "Q8_0 k = 48: {rc}");
    assert!(!last_error().is_empty() && out.is_null());
    let (rc, _) = weights(dev, F16, &data[..0], 0, k);
    failed(rc, Code::Arg, "n = 0");
    // An F16 infinity: refused with its place.
    let mut inf = vec![0u8; 256];
    inf[2 * 37..2 * 37 + 2].copy_from_slice(&f16::INFINITY.to_le_bytes());
    let (rc, out) = weights(dev, F16, &inf, n, k);
    failed(rc, Code::Unsupported, "an infinity");
    assert!(
        last_error().contains("row 1, column 5") && out.is_null(),
        "{}",
        last_error()
    );
    // And a success clears the message.
    let (rc, out) = weights(dev, F16, &data[..256], n, k);
    assert_eq!((rc, last_error().as_str()), (0, ""));
    rknpu_weights_free(out);
    rknpu_close(dev);
}

#[test]
fn ggml_supported_answers_as_the_weights_do() {
    let dev = open_emu();
    let supported = |ty, n, k, m| rknpu_ggml_supported(dev, ty, n, k, m);
    for (ty, n, k, m) in [
        (F16, 8, 32, 1),
        (Q8_0, 40, 512, 33),
        (Q4_K, 16, 256, 7),
        (30, 9, 3, 2),
    ] {
        assert_eq!(
            supported(ty, n, k, m),
            0,
            "{ty} {n}x{k} m {m}: {}",
            last_error()
        );
        assert_eq!(last_error(), "");
    }
    failed(supported(IQ2_XXS, 8, 256, 1), Code::Unsupported, "IQ2_XXS");
    failed(supported(99, 8, 32, 1), Code::Unsupported, "type 99");
    let rc = supported(Q8_0, 8, 48, 1);
    assert!(rc == -1 || rc == -3, "Q8_0 k = 48: {rc}");
    assert!(!last_error().is_empty());
    failed(supported(F16, 8, 32, 0), Code::Arg, "m = 0");
    failed(supported(F16, 0, 32, 1), Code::Arg, "n = 0");
    // Too many rows for one submission, and weights beyond the NPU's address space.
    failed(
        supported(F16, 8, 32, u32::MAX),
        Code::Unsupported,
        "m = 2^32 - 1",
    );
    failed(
        supported(F16, 65536, 65536, 1),
        Code::Unsupported,
        "8 GiB of weights",
    );
    let rc = rknpu_ggml_supported(null_mut(), F16, 8, 32, 1);
    failed(rc, Code::Arg, "NULL dev");
    rknpu_close(dev);
}

#[test]
fn products_are_refused_before_memory_is_touched() {
    let dev = open_emu();
    let (n, k) = (8usize, 32usize);
    let data: Vec<u8> = (0..n * k)
        .flat_map(|i| f16::from_f32(i as f32 / 256.0).to_le_bytes())
        .collect();
    let (rc, h) = weights(dev, F16, &data, n as u32, k as u32);
    assert_eq!(rc, 0, "{}", last_error());
    let x = vec![0x3Cu8; 4 * 4 * k];
    let mut y = vec![-7.0f32; 4 * (n + 2)];
    // (x type, x_stride, m, y_stride, code, what is wrong)
    let (arg, unsupported) = (Code::Arg, Code::Unsupported);
    let cases = [
        (F32, 4 * k - 4, 2, 4 * n, arg, "x_stride < row"),
        (F16, 2 * k - 1, 2, 4 * n, arg, "F16 x_stride < row"),
        (F32, 4 * k, 2, 4 * n + 2, arg, "y_stride % 4"),
        (F32, 4 * k, 2, 4 * n - 4, arg, "y_stride < row"),
        (Q8_0, 34, 1, 4 * n, unsupported, "Q8_0 x"),
        (99, 4 * k, 1, 4 * n, unsupported, "type 99 x"),
        (F32, 4 * k, 0, 4 * n, arg, "m = 0"),
    ];
    for (ty, xs, m, ys, code, what) in cases {
        failed(mul_mat_ex(h, (ty, &x, xs), m, (&mut y, ys)), code, what);
        assert!(y.iter().all(|&v| v == -7.0), "{what}: y was written");
    }
    // NULL pointers and a y that is not 4-byte aligned.
    // SAFETY: every non-NULL pointer is to a live local longer than the call could
    // read or write; each call is refused before it touches them.
    unsafe {
        let (xp, yp) = (x.as_ptr().cast::<c_void>(), y.as_mut_ptr());
        failed(
            rknpu_mul_mat_ex(null_mut(), F32, xp, 4 * k, 1, yp, 4 * n),
            Code::Arg,
            "NULL w",
        );
        failed(
            rknpu_mul_mat_ex(h, F32, null(), 4 * k, 1, yp, 4 * n),
            Code::Arg,
            "NULL x",
        );
        let rc = rknpu_mul_mat_ex(h, F32, xp, 4 * k, 1, null_mut(), 4 * n);
        failed(rc, Code::Arg, "NULL y");
        let odd = yp.cast::<u8>().add(1).cast::<f32>();
        failed(
            rknpu_mul_mat_ex(h, F32, xp, 4 * k, 1, odd, 4 * n),
            Code::Arg,
            "unaligned y",
        );
    }
    assert!(
        y.iter().all(|&v| v == -7.0),
        "y was written by a refused call"
    );
    // The same buffers with valid arguments: the first n floats written, a message of "".
    let rc = mul_mat_ex(h, (F32, &x, 4 * k), 1, (&mut y, 4 * n));
    assert_eq!((rc, last_error().as_str()), (0, ""));
    assert!(y[..n].iter().all(|v| v.is_finite() && *v != -7.0));
    assert!(y[n..].iter().all(|&v| v == -7.0));
    rknpu_weights_free(h);
    rknpu_close(dev);
}

/// With `RKNPU_GGML_INT8` OR-ed into the type code: an int8 bank requantised per output
/// channel, the one `gguf::bank_from_raw_as` makes, whose products from F32 and F16
/// rows are the library's `Matmul::mul_mat` of the same values bit for bit, within
/// the requantisation's error of the file's weights; `rknpu_ggml_supported` answers for
/// it, and an unknown type with the flag is refused.
#[test]
fn int8_banks_from_ggml_data_are_the_librarys() {
    use rknpu_driver::compute::matmul::Matmul;
    use rknpu_driver::kernels::single::Dtype;
    let dev = open_emu();
    let lib = rknpu_driver::device::Device::open_spec("emu").unwrap();
    let mut rng = Rng::from_seed(0x1a8);
    let (n, k, m) = (48usize, 256usize, 3usize);
    let q8 = quantize_q8_0(&values(&mut rng, n * k)).unwrap();
    for (ty, data) in [(Q8_0, q8), (Q4_K, q4_k_blocks(&mut rng, n * k / 256))] {
        let code = ty | rknpu::GGML_INT8;
        assert_eq!(
            rknpu_ggml_supported(dev, code, n as u32, k as u32, m as u32),
            0
        );
        let (rc, h) = weights(dev, code, &data, n as u32, k as u32);
        assert_eq!(rc, 0, "{}", last_error());
        assert_eq!(handle(h).bank.layout().dtype, Dtype::Int8);
        let gty = GgmlType::from_code(ty).unwrap();
        let bank = gguf::bank_from_raw_as(&lib, (gty, Dtype::Int8), n as u32, k as u32, &data);
        let bank = std::sync::Arc::new(bank.unwrap());
        assert_eq!(handle(h).bank.packed().unwrap(), bank.packed().unwrap());
        let w = gguf::dequantize(gty, &data, (n * k) as u64).unwrap();
        for x_type in [F32, F16] {
            let x: Vec<f32> = values(&mut rng, m * k)
                .iter()
                .map(|&v| {
                    if x_type == F16 {
                        f16::from_f32(v).to_f32()
                    } else {
                        v
                    }
                })
                .collect();
            let y = product(h, &w, (x_type, &x, k * 4 + 12), n * 4, 0.03);
            let mut want = vec![0f32; m * n];
            Matmul::new(&bank, m as u32)
                .unwrap()
                .mul_mat(&x, &mut want)
                .unwrap();
            assert_eq!(y, want, "type {ty}, x type {x_type}");
        }
        assert_eq!(rknpu_weights_free(h), 0);
    }
    // A size error names the type, not its code with the flag.
    let short = quantize_q8_0(&values(&mut rng, n * k)).unwrap();
    let (rc, _) = weights(
        dev,
        Q8_0 | rknpu::GGML_INT8,
        &short[1..],
        n as u32,
        k as u32,
    );
    failed(rc, Code::Arg, "a short size");
    assert!(last_error().contains("values of Q8_0"), "{}", last_error());
    let unknown = 999 | rknpu::GGML_INT8;
    failed(
        rknpu_ggml_supported(dev, unknown, 8, 32, 1),
        Code::Unsupported,
        "unknown type",
    );
    assert_eq!(rknpu_close(dev), 0);
}
