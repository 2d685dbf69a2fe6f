//! The C API keeps the library's one non-finite policy (docs/matmul.md, "Non-finite
//! values"): NaN and ±inf activations, and on fp16 weights activations that round to
//! infinity in fp16, are refused with `RKNPU_ERR_ARG` on every entry point; non-finite
//! fp16 weights are refused when the weights are made. Nothing is written to `y` by a
//! refused call.
//!
//! Calling `extern "C"` functions takes `unsafe`; every pointer passed is to a live
//! Rust value of the length the call reads.
#![allow(unsafe_code)]

mod common;

use common::*;

use rknpu::Code;
use rknpu::ffi::*;
use rknpu::handle::{DeviceHandle, WeightsHandle};
use std::ffi::c_void;
use std::ptr::null_mut;

const N: u32 = 16;
const K: u32 = 32;

/// fp16 weights (bits) of `n` × `k` values.
fn f16_weights(dev: *mut DeviceHandle, w: &[u16]) -> (i32, *mut WeightsHandle) {
    let mut out = null_mut();
    // SAFETY: `w` holds N * K values; `out` is a local.
    let rc = unsafe { rknpu_weights_f16(dev, w.as_ptr(), N, K, &mut out) };
    (rc, out)
}

fn i8_weights(dev: *mut DeviceHandle) -> *mut WeightsHandle {
    let w = vec![1i8; (N * K) as usize];
    let scale = vec![1f32; N as usize];
    let mut out = null_mut();
    // SAFETY: `w` holds N * K values, `scale` N; `out` is a local.
    let rc = unsafe { rknpu_weights_i8(dev, w.as_ptr(), scale.as_ptr(), N, K, &mut out) };
    assert_eq!(rc, 0, "{}", last_error());
    out
}

/// `rknpu_mul_mat` of two rows of ones with `v` at `index`: its code, message and `y`.
fn mul_mat_with(w: *mut WeightsHandle, v: f32, index: usize) -> (i32, String, Vec<f32>) {
    let mut x = vec![1f32; (2 * K) as usize];
    x[index] = v;
    let mut y = vec![-7f32; (2 * N) as usize];
    // SAFETY: `x` holds 2 * K floats, `y` 2 * N.
    let rc = unsafe { rknpu_mul_mat(w, x.as_ptr(), 2, y.as_mut_ptr()) };
    (rc, last_error(), y)
}

#[test]
fn activations_fp16_cannot_hold_are_refused_on_fp16_weights() {
    let dev = open_emu();
    let (rc, w) = f16_weights(dev, &vec![0x3c00; (N * K) as usize]);
    assert_eq!(rc, 0, "{}", last_error());
    for (v, index) in [
        (f32::NAN, 0),
        (f32::INFINITY, 33),
        (f32::NEG_INFINITY, 63),
        (65520.0, 5),
    ] {
        let (rc, message, y) = mul_mat_with(w, v, index);
        assert_eq!(rc, Code::Arg as i32, "{v}: {message}");
        assert!(
            message.contains(&format!("activations[{index}]")),
            "{message}"
        );
        assert!(y.iter().all(|&r| r == -7.0), "{v}: y was written");
    }
    // The largest value fp16 holds runs.
    let (rc, message, y) = mul_mat_with(w, 65504.0, 0);
    assert_eq!(rc, 0, "{message}");
    assert_eq!(y[0], 65504.0 + (K - 1) as f32);

    // fp16 activations through rknpu_mul_mat_ex: an fp16 infinity is refused too.
    let mut x = vec![0x3c00u16; K as usize];
    x[9] = 0x7c00;
    let mut y = vec![0f32; N as usize];
    // SAFETY: one row of K fp16 values and one row of N floats, strides their sizes.
    let rc = unsafe {
        rknpu_mul_mat_ex(
            w,
            F16,
            x.as_ptr().cast::<c_void>(),
            2 * K as usize,
            1,
            y.as_mut_ptr(),
            4 * N as usize,
        )
    };
    assert_eq!(rc, Code::Arg as i32, "{}", last_error());
    assert_eq!(rknpu_weights_free(w), 0);
    assert_eq!(rknpu_close(dev), 0);
}

#[test]
fn non_finite_activations_are_refused_on_int8_weights() {
    let dev = open_emu();
    let w = i8_weights(dev);
    for v in [f32::NAN, f32::INFINITY] {
        let (rc, message, y) = mul_mat_with(w, v, 17);
        assert_eq!(rc, Code::Arg as i32, "{v}: {message}");
        assert!(y.iter().all(|&r| r == -7.0));
    }
    // No fp16 rounding on this path: 1e5 is quantised like any value.
    let (rc, message, y) = mul_mat_with(w, 1e5, 0);
    assert_eq!(rc, 0, "{message}");
    let want = 1e5 + (K - 1) as f32;
    assert!((y[0] - want).abs() <= want * 0.01, "{} vs {want}", y[0]);
    assert_eq!(rknpu_weights_free(w), 0);
    assert_eq!(rknpu_close(dev), 0);
}

#[test]
fn non_finite_fp16_weights_are_refused() {
    let dev = open_emu();
    for bits in [0x7c00u16, 0xfc00, 0x7e00] {
        let mut w = vec![0x3c00u16; (N * K) as usize];
        w[77] = bits;
        let (rc, out) = f16_weights(dev, &w);
        assert_ne!(rc, 0, "{bits:#06x} accepted");
        assert!(out.is_null());
        assert!(last_error().contains("weights[77]"), "{}", last_error());
    }
    assert_eq!(rknpu_close(dev), 0);
}
