//! C API misuse: shapes the library refuses are refused before caller memory is read,
//! so a small buffer with a huge claimed shape gets a typed error, never a crash or an
//! allocation the buffer does not justify.
//!
//! Calling `extern "C"` functions takes `unsafe`; every buffer passed is a live Rust
//! value, shorter than the shape claims exactly where a test says so: those calls must
//! fail before reading it.
#![allow(unsafe_code)]

mod common;

use common::*;

use rknpu::Code;
use rknpu::ffi::*;
use rknpu::handle::{DeviceHandle, WeightsHandle};
use std::ffi::c_void;
use std::ptr::null_mut;

/// fp16 weights of `n` × `k` ones.
fn f16_weights(dev: *mut DeviceHandle, n: u32, k: u32) -> *mut WeightsHandle {
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
    rknpu_close(dev);
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
    rknpu_weights_free(w);
    rknpu_close(dev);
}

/// Expects `rc` to be `RKNPU_ERR_ARG` with a message containing `words`.
fn arg_error(rc: i32, words: &str) {
    let message = last_error();
    assert_eq!(rc, Code::Arg as i32, "{message}");
    assert!(message.contains(words), "{message:?} lacks {words:?}");
}

/// A weights handle used after it was freed, and freed twice, is an argument error;
/// the device handle keeps working, and a new handle in the freed slot is not taken for
/// the old one.
#[test]
fn use_after_free_and_double_free_are_errors() {
    let dev = open_emu();
    let (n, k) = (32u32, 64u32);
    let w = f16_weights(dev, n, k);
    let x = vec![0.5f32; k as usize];
    let mut y = vec![0f32; n as usize];
    // SAFETY: `x` holds one row of k floats and `y` one row of n.
    let rc = unsafe { rknpu_mul_mat(w, x.as_ptr(), 1, y.as_mut_ptr()) };
    assert_eq!(rc, 0, "{}", last_error());
    assert!(y.iter().all(|&v| v == 32.0), "{y:?}");
    assert_eq!(rknpu_weights_free(w), 0);
    y.fill(0.0);
    // SAFETY: as above; `w` is stale, which the call detects.
    let rc = unsafe { rknpu_mul_mat(w, x.as_ptr(), 1, y.as_mut_ptr()) };
    arg_error(rc, "not a live handle");
    assert!(y.iter().all(|&v| v == 0.0), "a stale handle wrote y");
    arg_error(rknpu_weights_free(w), "not a live handle");
    // A new handle may reuse the slot: the old value still names nothing.
    let w2 = f16_weights(dev, n, k);
    assert_ne!(w2, w);
    arg_error(rknpu_weights_free(w), "not a live handle");
    // SAFETY: as above.
    let rc = unsafe { rknpu_mul_mat(w2, x.as_ptr(), 1, y.as_mut_ptr()) };
    assert_eq!(rc, 0, "{}", last_error());
    assert_eq!(rknpu_weights_free(w2), 0);
    assert_eq!(rknpu_close(dev), 0);
    arg_error(rknpu_close(dev), "not a live handle");
    // NULL stays a no-op for every free function.
    assert_eq!(rknpu_close(null_mut()), 0);
    assert_eq!(rknpu_weights_free(null_mut()), 0);
}

/// A handle of one kind where another is expected is an argument error naming both
/// kinds, and the handle stays live.
#[test]
fn wrong_kind_handles_are_errors() {
    let dev = open_emu();
    let w = f16_weights(dev, 32, 64);
    let as_weights: *mut WeightsHandle = dev.cast();
    let as_device: *mut DeviceHandle = w.cast();
    arg_error(
        rknpu_weights_free(as_weights),
        "a device handle, not a weights",
    );
    arg_error(rknpu_close(as_device), "a weights handle, not a device");
    arg_error(
        rknpu_batch_free(w.cast()),
        "a weights handle, not a batch handle",
    );
    let mut out = null_mut();
    let v = [0u16; 64];
    // SAFETY: `v` holds 64 values for a 1 x 64 shape.
    let rc = unsafe { rknpu_weights_f16(as_device, v.as_ptr(), 1, 64, &mut out) };
    arg_error(rc, "not a device handle");
    let x = [0f32; 64];
    let mut y = [0f32; 32];
    // SAFETY: `x` and `y` hold one row each.
    let rc = unsafe { rknpu_mul_mat(as_weights, x.as_ptr(), 1, y.as_mut_ptr()) };
    arg_error(rc, "not a weights handle");
    // Both handles survived the misuse.
    assert_eq!(rknpu_weights_free(w), 0);
    assert_eq!(rknpu_close(dev), 0);
}

/// Values C never got from the library, NULL aside, are refused, not dereferenced:
/// handles are not addresses.
#[test]
fn forged_handles_are_errors() {
    let mut local = 0u64;
    let forged: *mut WeightsHandle = (&raw mut local).cast();
    arg_error(rknpu_weights_free(forged), "not a live handle");
    let huge: *mut DeviceHandle = std::ptr::without_provenance_mut(usize::MAX);
    arg_error(rknpu_close(huge), "not a live handle");
    let x = [0f32; 4];
    let mut y = [0f32; 4];
    // SAFETY: the buffers are valid; the handle is not, which the call detects.
    let rc = unsafe { rknpu_mul_mat(forged, x.as_ptr(), 1, y.as_mut_ptr()) };
    arg_error(rc, "not a live handle");
    assert_eq!(local, 0);
}

/// Freeing a weights handle while other threads multiply with it never crashes: each
/// call either ran on the weights (a correct result) or found the handle gone.
#[test]
fn free_racing_calls_is_defined() {
    let dev = open_emu();
    let (n, k) = (32u32, 64u32);
    for _ in 0..4 {
        let w = f16_weights(dev, n, k);
        let addr = w.addr();
        let threads: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(move || {
                    let w: *mut WeightsHandle = std::ptr::without_provenance_mut(addr);
                    let x = vec![1f32; k as usize];
                    let mut outcomes = (0, 0);
                    for _ in 0..20 {
                        let mut y = vec![0f32; n as usize];
                        // SAFETY: `x` and `y` hold one row each.
                        let rc = unsafe { rknpu_mul_mat(w, x.as_ptr(), 1, y.as_mut_ptr()) };
                        if rc == 0 {
                            assert!(y.iter().all(|&v| v == 64.0), "{y:?}");
                            outcomes.0 += 1;
                        } else {
                            arg_error(rc, "not a live handle");
                            outcomes.1 += 1;
                        }
                    }
                    outcomes
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(rknpu_weights_free(w), 0);
        for t in threads {
            let (ok, gone) = t.join().expect("no panic");
            assert_eq!(ok + gone, 20);
        }
    }
    assert_eq!(rknpu_close(dev), 0);
}

/// A batch of a huge row count is refused after reading only its first member, whatever
/// count is claimed: the plan of m is checked before the rest of the array is read.
#[test]
fn huge_batches_are_refused_before_reading_the_members() {
    let dev = open_emu();
    let w = f16_weights(dev, 32, 64);
    let ws = [w];
    let mut b = null_mut();
    // SAFETY: `ws` holds one handle though 1000 are claimed: the call must refuse m
    // after the first entry (reading further would be the bug this test catches, and
    // would report the garbage entry as a handle error instead).
    let rc = unsafe { rknpu_batch_new(ws.as_ptr(), 1000, 1 << 30, &mut b) };
    let message = refused(rc, "batch");
    assert_eq!(rc, Code::Unsupported as i32, "{message}");
    assert!(b.is_null());
    assert_eq!(rknpu_weights_free(w), 0);
    assert_eq!(rknpu_close(dev), 0);
}
