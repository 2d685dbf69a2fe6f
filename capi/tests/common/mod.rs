//! What every C API test needs: the thread's last error message, an emulated device,
//! and the ggml type codes the tests pass.
//!
//! Calling `extern "C"` functions takes `unsafe`; each call here passes pointers to live
//! values.
#![allow(unsafe_code, dead_code)]

use rknpu::ffi::{rknpu_last_error, rknpu_open, rknpu_weights_ggml};
use rknpu::handle::{DeviceHandle, WeightsHandle};
use rknpu_driver::seeded::Rng;
use std::ffi::CStr;
use std::ptr::null_mut;

/// ggml type code of F32 (`enum ggml_type`).
pub const F32: u32 = 0;
/// ggml type code of F16.
pub const F16: u32 = 1;

/// The calling thread's last error message.
pub fn last_error() -> String {
    // SAFETY: the pointer is to the thread's NUL-terminated message, read before the
    // next call.
    unsafe { CStr::from_ptr(rknpu_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Opens the emulated NPU.
pub fn open_emu() -> *mut DeviceHandle {
    let mut dev = null_mut();
    // SAFETY: a NUL-terminated spec and a pointer to a local.
    let rc = unsafe { rknpu_open(c"emu".as_ptr(), &mut dev) };
    assert_eq!(rc, 0, "{}", last_error());
    dev
}

/// ggml F32 weights of `n` rows of `k` seeded values in [-1, 1), as raw ggml bytes.
pub fn f32_weights(
    dev: *mut DeviceHandle,
    rng: &mut Rng,
    n: usize,
    k: usize,
) -> *mut WeightsHandle {
    let bytes: Vec<u8> = (0..n * k).flat_map(|_| rng.unit().to_le_bytes()).collect();
    let mut w = null_mut();
    // SAFETY: `bytes` holds n rows of k f32 values; `w` is a local.
    let rc = unsafe {
        rknpu_weights_ggml(
            dev,
            F32,
            bytes.as_ptr().cast(),
            bytes.len(),
            n as u32,
            k as u32,
            &mut w,
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    w
}
