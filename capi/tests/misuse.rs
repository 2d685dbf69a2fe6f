//! C API misuse: shapes the library refuses are refused before caller memory is read,
//! so a small buffer with a huge claimed shape gets a typed error, never a crash or an
//! allocation the buffer does not justify.
//!
//! Calling `extern "C"` functions takes `unsafe`; every buffer passed is a live Rust
//! value, shorter than the shape claims exactly where a test says so: those calls must
//! fail before reading it.
#![allow(unsafe_code)]

use rknpu::ffi::*;
use rknpu::{Code, RknpuDevice, RknpuWeights};
use std::ffi::{CStr, c_void};
use std::ptr::null_mut;

/// The calling thread's last error message.
fn last_error() -> String {
    // SAFETY: the pointer is to the thread's NUL-terminated message, read before the
    // next call.
    unsafe { CStr::from_ptr(rknpu_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Opens the emulated NPU.
fn open_emu() -> *mut RknpuDevice {
    let mut dev = null_mut();
    // SAFETY: a NUL-terminated spec and a pointer to a local.
    let rc = unsafe { rknpu_open(c"emu".as_ptr(), &mut dev) };
    assert_eq!(rc, 0, "{}", last_error());
    dev
}

/// fp16 weights of `n` × `k` ones.
fn f16_weights(dev: *mut RknpuDevice, n: u32, k: u32) -> *mut RknpuWeights {
    let w = vec![0x3c00u16; (n * k) as usize];
    let mut out = null_mut();
    // SAFETY: `w` holds n * k values; `out` is a local.
    let rc = unsafe { rknpu_weights_f16(dev, w.as_ptr(), n, k, &mut out) };
    assert_eq!(rc, 0, "{}", last_error());
    out
}

/// A code and its message, checked to be a refusal (never success, never a panic).
fn refused(rc: i32, what: &str) -> String {
    let message = last_error();
    assert!(
        rc == Code::Arg as i32 || rc == Code::Unsupported as i32,
        "{what}: code {rc} ({message})"
    );
    assert!(!message.is_empty(), "{what}: no message");
    message
}

/// 1 × 2^28 weights from a 16-value buffer: every constructor refuses the shape before
/// reading a value (reading would run 512 MB past the buffer and fault).
#[test]
fn huge_weight_shapes_are_refused_before_reading() {
    let dev = open_emu();
    let k = 1u32 << 28;
    let small16 = [0u16; 16];
    let small8 = [0i8; 16];
    let small4 = [0u8; 16];
    let scale = [1f32; 1];
    let mut out = null_mut();
    // SAFETY: the buffers are too short for the shape on purpose: the call must refuse
    // it before reading them.
    let rc = unsafe { rknpu_weights_f16(dev, small16.as_ptr(), 1, k, &mut out) };
    refused(rc, "f16");
    assert!(out.is_null());
    // SAFETY: as above.
    let rc = unsafe { rknpu_weights_i8(dev, small8.as_ptr(), scale.as_ptr(), 1, k, &mut out) };
    refused(rc, "i8");
    // SAFETY: as above.
    let rc = unsafe { rknpu_weights_i4(dev, small4.as_ptr(), scale.as_ptr(), 1, k, &mut out) };
    refused(rc, "i4");
    // ggml F16 (type 1): the size is consistent with the shape, but the NPU cannot run
    // it, so not a byte is read.
    // SAFETY: as above.
    let rc = unsafe {
        rknpu_weights_ggml(
            dev,
            1,
            small16.as_ptr().cast::<c_void>(),
            2 * k as usize,
            1,
            k,
            &mut out,
        )
    };
    refused(rc, "ggml");
    assert!(out.is_null());
    // SAFETY: `dev` is live and closed once.
    unsafe { rknpu_close(dev) };
}

/// A huge row count against real weights, with a one-row buffer: the plan is refused
/// before the rows are gathered, for every type of activations.
#[test]
fn huge_row_counts_are_refused_before_reading() {
    let dev = open_emu();
    let (n, k) = (32u32, 64u32);
    let w = f16_weights(dev, n, k);
    let m = 1u32 << 30;
    let x = [0u8; 256];
    let mut y = [0f32; 32];
    for ty in [0u32, 1, 30] {
        let row = if ty == 0 { 4 * k } else { 2 * k } as usize;
        // SAFETY: `x` and `y` hold one row, far fewer than m: the call must refuse the
        // plan before reading or writing them.
        let rc = unsafe {
            rknpu_mul_mat_ex(
                w,
                ty,
                x.as_ptr().cast(),
                row,
                m,
                y.as_mut_ptr(),
                4 * n as usize,
            )
        };
        refused(rc, "mul_mat_ex");
    }
    // SAFETY: as above.
    let rc = unsafe { rknpu_mul_mat(w, x.as_ptr().cast(), m, y.as_mut_ptr()) };
    refused(rc, "mul_mat");
    assert!(y.iter().all(|&v| v == 0.0), "y was written");
    // SAFETY: the handles are live and released once.
    unsafe {
        rknpu_weights_free(w);
        rknpu_close(dev);
    }
}
