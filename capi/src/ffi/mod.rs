//! The exported C functions: the crate's only `unsafe` code.
//!
//! Each function looks its handles up in the table of [`crate::handle`] (handles are
//! never dereferenced), checks its data pointers for NULL, validates sizes and plans
//! what can be planned without data, and only then turns the data pointers into slices
//! of the lengths its sizes give; it calls the safe functions of the crate inside
//! [`crate::call`], which catches panics. The C caller's side of each contract is in
//! `include/rknpu.h` and docs/capi.md.
//!
//! One file a concern: device handles and the shared checks here, weights in
//! `weights.rs`, blocking products and batches in `mul_mat.rs`, asynchronous jobs in
//! `jobs.rs`.

use crate::handle::{self, BatchHandle, DeviceHandle, Handle, JobHandle, WeightsHandle};
use crate::job::{Job, Output};
use crate::{
    Failure, RknpuBatch, RknpuDevice, RknpuWeights, Rows, XType, call, check_plan, elements,
    ggml_supported, weight_shape,
};
use rknpu_driver::compute::matmul::InputRows;
use rknpu_driver::kernels::single::Dtype;
use std::ffi::c_void;
use std::ffi::{CStr, c_char, c_int};

mod jobs;
mod mul_mat;
mod weights;

pub use jobs::*;
pub use mul_mat::*;
pub use weights::*;

/// Fails with `RKNPU_ERR_ARG` when `p` is NULL.
pub(super) fn non_null<T>(p: *const T, what: &str) -> crate::Result<()> {
    if p.is_null() {
        Err(Failure::arg(format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

/// Checks an output of `m` rows of `n` floats at `y`, `y_stride` bytes apart: not NULL,
/// the pointer and the stride 4-byte aligned, the span without overflow. `names` are
/// how a refusal names the pointer and its stride. Returns the floats the rows span.
pub(super) fn output_span(
    y: *mut f32,
    y_stride: usize,
    (m, n): (u32, u32),
    names: (&str, &str),
) -> crate::Result<usize> {
    non_null(y, names.0)?;
    if !y_stride.is_multiple_of(4) || !y.is_aligned() {
        return Err(Failure::arg(format!(
            "{} and {} ({y_stride}) must be 4-byte aligned",
            names.0, names.1
        )));
    }
    Ok(Rows::span(XType::F32, m, n, y_stride)? / 4)
}

/// The caller's `x` as rows of `ty`, `stride` bytes apart, `len` bytes in all.
///
/// # Safety
///
/// `x` points to `len` bytes that stay readable and unchanged for `'a`.
pub(super) unsafe fn input_rows<'a>(
    x: *const c_void,
    ty: XType,
    len: usize,
    stride: usize,
) -> Rows<'a> {
    // SAFETY: `x` spans `len` readable bytes for `'a` (this function's contract).
    let bytes = unsafe { std::slice::from_raw_parts(x.cast::<u8>(), len) };
    Rows { ty, bytes, stride }
}

/// What a batch product checks before its outputs: the batch, `x` (not NULL, its
/// rows' span), `ys` and `y_strides` (not NULL), and `out` when the product is
/// submitted. Returns the batch, the rows of `x` and each member's output pointer and
/// byte stride.
///
/// # Safety
///
/// `x` spans the batch's rows at `x_stride` for `'a` and `ys` and `y_strides` hold one
/// entry per member for `'a`, where they are not NULL; `out` is NULL or valid for a
/// pointer write.
pub(super) unsafe fn batch_args<'a>(
    b: *mut BatchHandle,
    (x_type, x, x_stride): (u32, *const c_void, usize),
    (ys, y_strides): (*const *mut f32, *const usize),
    out: Option<*mut *mut JobHandle>,
) -> crate::Result<BatchArgs<'a>> {
    let batch = handle::get(b, "b")?;
    non_null(x, "x")?;
    non_null(ys, "ys")?;
    non_null(y_strides, "y_strides")?;
    if let Some(out) = out {
        non_null(out, "out")?;
    }
    let count = batch.n.len();
    let ty = XType::from_code(x_type)?;
    let x_len = Rows::span(ty, batch.m, batch.k, x_stride)?;
    // SAFETY: `ys` and `y_strides` hold one entry per member (this function's contract).
    let (ptrs, strides) = unsafe {
        (
            std::slice::from_raw_parts(ys, count),
            std::slice::from_raw_parts(y_strides, count),
        )
    };
    // SAFETY: `x` spans `x_len` readable bytes (this function's contract; the span was
    // computed without overflow).
    let rows = unsafe { input_rows(x, ty, x_len, x_stride) };
    Ok(BatchArgs {
        batch,
        rows,
        ys: ptrs.iter().copied().zip(strides.iter().copied()).collect(),
    })
}

/// A batch product's checked arguments ([`batch_args`]).
pub(super) struct BatchArgs<'a> {
    /// The batch.
    pub(super) batch: std::sync::Arc<RknpuBatch>,
    /// The caller's rows of `x`.
    pub(super) rows: Rows<'a>,
    /// Each member's output pointer and stride in bytes, not yet checked.
    pub(super) ys: Vec<(*mut f32, usize)>,
}

/// Stores `value` in the handle table and its new handle in `*out`.
///
/// # Safety
///
/// `out` is non-NULL and valid for a write of a pointer.
pub(super) unsafe fn put<H: Handle>(out: *mut *mut H, value: H::Target) -> crate::Result<()> {
    let h = handle::insert::<H>(value)?;
    // SAFETY: the caller guarantees `out` is valid for writes. The value written is a
    // handle (a table slot and its generation), not an address: C gives it back and
    // the table looks it up.
    unsafe { out.write(h) };
    Ok(())
}

/// Stores a shared `value` in the handle table and its new handle in `*out`.
///
/// # Safety
///
/// `out` is non-NULL and valid for a write of a pointer.
pub(super) unsafe fn put_arc<H: Handle>(
    out: *mut *mut H,
    value: std::sync::Arc<H::Target>,
) -> crate::Result<()> {
    let h = handle::insert_arc::<H>(value)?;
    // SAFETY: the caller guarantees `out` is valid for writes; the value is a handle, as
    // in `put`.
    unsafe { out.write(h) };
    Ok(())
}

/// Frees handle `p` (NULL is ignored; a handle that is not live, or is of another
/// kind, is `RKNPU_ERR_ARG`). The object is dropped once no call still uses it.
pub(super) fn release<H: Handle>(p: *mut H, what: &str) -> c_int {
    call(|| {
        drop(handle::remove(p, what)?);
        Ok(())
    })
}

/// Opens an NPU into `*out` (`spec` NULL: a board or `RKNPU_DEVICE`).
///
/// # Safety
///
/// `spec` is NULL or a NUL-terminated string; `out` is valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_open(spec: *const c_char, out: *mut *mut DeviceHandle) -> c_int {
    call(|| {
        non_null(out, "out")?;
        let spec = if spec.is_null() {
            None
        } else {
            // SAFETY: a non-NULL spec is a NUL-terminated string (the C contract).
            Some(unsafe { CStr::from_ptr(spec) })
        };
        let dev = crate::open(spec)?;
        // SAFETY: `out` is non-NULL (checked) and writable (the C contract).
        unsafe { put(out, dev) }
    })
}

/// Releases a device handle (NULL is ignored): 0, or `RKNPU_ERR_ARG` for a handle
/// that is not a live device handle.
#[unsafe(no_mangle)]
pub extern "C" fn rknpu_close(dev: *mut DeviceHandle) -> c_int {
    release(dev, "dev")
}

/// The calling thread's last error message ("" after a success).
#[unsafe(no_mangle)]
pub extern "C" fn rknpu_last_error() -> *const c_char {
    crate::last_error_ptr()
}
