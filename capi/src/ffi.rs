//! The exported C functions: the crate's only `unsafe` code.
//!
//! Each function looks its handles up in the table of [`crate::handle`] (handles are
//! never dereferenced), checks its data pointers for NULL, validates sizes and plans
//! what can be planned without data, and only then turns the data pointers into slices
//! of the lengths its sizes give; it calls the safe functions of the crate inside
//! [`crate::call`], which catches panics. The C caller's side of each contract is in
//! `include/rknpu.h` and docs/capi.md.

use crate::handle::{self, BatchHandle, DeviceHandle, Handle, JobHandle, WeightsHandle};
use crate::job::{Job, Output};
use crate::{
    Failure, RknpuBatch, RknpuDevice, RknpuWeights, Rows, XType, call, check_plan, elements,
    ggml_supported, weight_shape,
};
use rknpu_driver::kernels::single::Dtype;
use std::ffi::c_void;
use std::ffi::{CStr, c_char, c_int};

/// Fails with `RKNPU_ERR_ARG` when `p` is NULL.
fn non_null<T>(p: *const T, what: &str) -> crate::Result<()> {
    if p.is_null() {
        Err(Failure::arg(format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

/// Stores `value` in the handle table and its new handle in `*out`.
///
/// # Safety
///
/// `out` is non-NULL and valid for a write of a pointer.
unsafe fn put<H: Handle>(out: *mut *mut H, value: H::Target) -> crate::Result<()> {
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
unsafe fn put_arc<H: Handle>(
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
fn release<H: Handle>(p: *mut H, what: &str) -> c_int {
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

/// The signature of [`RknpuWeights::i8`] and [`RknpuWeights::i4`].
type MakeScaled<T> = fn(&RknpuDevice, &[T], &[f32], u32, u32) -> crate::Result<RknpuWeights>;

/// Integer weights of `bytes` elements `T` with `n` scales, made by `make` into `*out`.
///
/// # Safety
///
/// `w` is NULL or points to `bytes` values, `scale` is NULL or points to `n` floats;
/// `out` is NULL or valid for a pointer write.
unsafe fn scaled<T>(
    dev: *mut DeviceHandle,
    w: *const T,
    scale: *const f32,
    (n, k, bytes): (u32, u32, usize),
    (dtype, out): (Dtype, *mut *mut WeightsHandle),
    make: MakeScaled<T>,
) -> crate::Result<()> {
    let dev = handle::get(dev, "dev")?;
    non_null(w, "w")?;
    non_null(scale, "scale")?;
    non_null(out, "out")?;
    // The shape is checked against what the NPU can run before `w` is read.
    check_plan(&dev.device, dtype, n, k, 1)?;
    // SAFETY: `w` holds `bytes` values and `scale` `n` (this function's contract; the
    // caller computed `bytes` without overflow).
    let (w, scale) = unsafe {
        (
            std::slice::from_raw_parts(w, bytes),
            std::slice::from_raw_parts(scale, n as usize),
        )
    };
    let weights = make(&dev, w, scale, n, k)?;
    // SAFETY: `out` is non-NULL (checked) and writable (this function's contract).
    unsafe { put(out, weights) }
}

/// int8 weights: `n` rows of `k` values, and `n` scales.
///
/// # Safety
///
/// `w` points to `n * k` int8 values, `scale` to `n` floats;
/// `out` is valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_weights_i8(
    dev: *mut DeviceHandle,
    w: *const i8,
    scale: *const f32,
    n: u32,
    k: u32,
    out: *mut *mut WeightsHandle,
) -> c_int {
    call(|| {
        let len = elements("weights", n, k)?;
        // SAFETY: the C contract is `scaled`'s, with `len` = `n * k` values.
        unsafe {
            scaled(
                dev,
                w,
                scale,
                (n, k, len),
                (Dtype::Int8, out),
                RknpuWeights::i8,
            )
        }
    })
}

/// int4 weights: `n` rows of `k / 2` bytes of nibbles (`k` even), and `n` scales.
///
/// # Safety
///
/// As [`rknpu_weights_i8`], with `w` pointing to `n * k / 2` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_weights_i4(
    dev: *mut DeviceHandle,
    w: *const u8,
    scale: *const f32,
    n: u32,
    k: u32,
    out: *mut *mut WeightsHandle,
) -> c_int {
    call(|| {
        weight_shape(n, k, true)?;
        let len = elements("weights", n, k / 2)?;
        // SAFETY: the C contract is `scaled`'s, with `len` = `n * k / 2` bytes.
        unsafe {
            scaled(
                dev,
                w,
                scale,
                (n, k, len),
                (Dtype::Int4, out),
                RknpuWeights::i4,
            )
        }
    })
}

/// fp16 weights: `n` rows of `k` binary16 bit patterns.
///
/// # Safety
///
/// `w` points to `n * k` values; `out` is valid for a pointer
/// write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_weights_f16(
    dev: *mut DeviceHandle,
    w: *const u16,
    n: u32,
    k: u32,
    out: *mut *mut WeightsHandle,
) -> c_int {
    call(|| {
        let dev = handle::get(dev, "dev")?;
        non_null(w, "w")?;
        non_null(out, "out")?;
        let len = elements("weights", n, k)?;
        // The shape is checked against what the NPU can run before `w` is read.
        check_plan(&dev.device, Dtype::Fp16, n, k, 1)?;
        // SAFETY: `w` holds `n * k` values (the C contract; `len` did not overflow), and
        // `half::f16` is `repr(transparent)` over the `u16` of its bits, so the values
        // are read in place, without a copy.
        let w = unsafe { std::slice::from_raw_parts(w.cast::<half::f16>(), len) };
        let weights = RknpuWeights::f16(&dev, w, n, k)?;
        // SAFETY: `out` is non-NULL (checked) and writable (the C contract).
        unsafe { put(out, weights) }
    })
}

/// Whether `rknpu_weights_ggml` takes an `n` × `k` tensor of ggml type `ty` and a
/// product of `m` rows can run against it.
#[unsafe(no_mangle)]
pub extern "C" fn rknpu_ggml_supported(
    dev: *mut DeviceHandle,
    ty: u32,
    n: u32,
    k: u32,
    m: u32,
) -> c_int {
    call(|| ggml_supported(&*handle::get(dev, "dev")?, ty, n, k, m))
}

/// Weights from ggml's raw data: `n` rows of `k` values of ggml type `ty`, `size`
/// bytes in all.
///
/// # Safety
///
/// `data` points to `size` readable bytes; `out` is valid for
/// a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_weights_ggml(
    dev: *mut DeviceHandle,
    ty: u32,
    data: *const c_void,
    size: usize,
    n: u32,
    k: u32,
    out: *mut *mut WeightsHandle,
) -> c_int {
    call(|| {
        let dev = handle::get(dev, "dev")?;
        non_null(data, "data")?;
        non_null(out, "out")?;
        if size > isize::MAX as usize {
            return Err(Failure::arg(format!("size {size} is larger than memory")));
        }
        // The shape and the type's row size are checked against `size` before a byte
        // is read.
        let row = crate::ggml_type(ty)
            .and_then(|t| rknpu_driver::gguf::raw_row_bytes(t, n, k).map_err(Failure::from))?;
        if row.checked_mul(n as usize) != Some(size) {
            return Err(Failure::arg(format!(
                "size {size} is not {n} rows of {row} bytes ({k} values of type {ty})"
            )));
        }
        // The shape is checked against what the NPU can run before `data` is read.
        ggml_supported(&dev, ty, n, k, 1)?;
        // SAFETY: `data` points to `size` readable bytes (the C contract; `size` fits an
        // isize, checked).
        let data = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) };
        let weights = RknpuWeights::ggml(&dev, ty, data, n, k)?;
        // SAFETY: `out` is non-NULL (checked) and writable (the C contract).
        unsafe { put(out, weights) }
    })
}

/// Frees weights (NULL is ignored): 0, or `RKNPU_ERR_ARG` for a handle that is not a
/// live weights handle. A call still using them on another thread finishes first.
#[unsafe(no_mangle)]
pub extern "C" fn rknpu_weights_free(w: *mut WeightsHandle) -> c_int {
    release(w, "w")
}

/// `y[m][n] = x[m][k] · wᵀ`.
///
/// # Safety
///
/// `x` points to `m * k` floats and `y` to `m * n`
/// floats that nothing else accesses during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_mul_mat(
    w: *mut WeightsHandle,
    x: *const f32,
    m: u32,
    y: *mut f32,
) -> c_int {
    call(|| {
        let weights = handle::get(w, "w")?;
        non_null(x, "x")?;
        non_null(y, "y")?;
        let x_len = elements("x", m, weights.k)?;
        let y_len = elements("y", m, weights.n)?;
        // Plan before the caller's memory is touched: a refused m reads nothing.
        weights.prepare(m)?;
        // SAFETY: `x` holds `m * k` floats and `y` `m * n` floats that no one else
        // touches during the call (the C contract; the lengths did not overflow).
        let (x, y) = unsafe {
            (
                std::slice::from_raw_parts(x, x_len),
                std::slice::from_raw_parts_mut(y, y_len),
            )
        };
        weights.mul_mat(x, m, y)
    })
}

/// `y = x · wᵀ` for `m` rows of ggml type `x_type`, `x_stride` bytes apart, into rows
/// of `y` `y_stride` bytes apart.
///
/// # Safety
///
/// `x` points to the `(m - 1) · x_stride + k · size`
/// bytes the rows span and `y` to the `(m - 1) · y_stride + 4 · n` bytes its rows span,
/// 4-byte aligned, which nothing else accesses during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_mul_mat_ex(
    w: *mut WeightsHandle,
    x_type: u32,
    x: *const c_void,
    x_stride: usize,
    m: u32,
    y: *mut f32,
    y_stride: usize,
) -> c_int {
    call(|| {
        let weights = handle::get(w, "w")?;
        non_null(x, "x")?;
        non_null(y, "y")?;
        let ty = XType::from_code(x_type)?;
        let x_len = Rows::span(ty, m, weights.k, x_stride)?;
        if !y_stride.is_multiple_of(4) || !y.is_aligned() {
            return Err(Failure::arg(format!(
                "y and y_stride ({y_stride}) must be 4-byte aligned"
            )));
        }
        let y_floats = Rows::span(XType::F32, m, weights.n, y_stride)? / 4;
        // Plan before the caller's memory is touched: a refused m reads nothing.
        weights.prepare(m)?;
        // SAFETY: `x` spans `x_len` readable bytes and `y` `y_floats` aligned floats
        // that no one else touches during the call (the C contract; the spans were
        // computed without overflow).
        let (x, y) = unsafe {
            (
                std::slice::from_raw_parts(x.cast::<u8>(), x_len),
                std::slice::from_raw_parts_mut(y, y_floats),
            )
        };
        let rows = Rows {
            ty,
            bytes: x,
            stride: x_stride,
        };
        weights.mul_mat_rows(rows, m, y, y_stride / 4)
    })
}

/// A batch of `m` rows against the `count` weights handles of `ws`, run as one job.
///
/// # Safety
///
/// `ws` points to `count` handles; `out` is valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_batch_new(
    ws: *const *mut WeightsHandle,
    count: u32,
    m: u32,
    out: *mut *mut BatchHandle,
) -> c_int {
    call(|| {
        non_null(ws, "ws")?;
        non_null(out, "out")?;
        if count == 0 {
            return Err(Failure::arg("count is zero"));
        }
        // SAFETY: `ws` holds `count` pointers, so at least one (the C contract; `count`
        // is not zero, checked).
        let first = handle::get(unsafe { ws.read() }, "ws[0]")?;
        // Members share the first one's k: plan m against it before reading the rest of
        // `ws`, so a refused m reads one entry, whatever `count` claims.
        let dtype = first.bank.layout().dtype;
        crate::check_plan(first.bank.device(), dtype, first.n, first.k, m)?;
        // SAFETY: `ws` holds `count` pointers (the C contract).
        let ptrs = unsafe { std::slice::from_raw_parts(ws, count as usize) };
        let handles = ptrs
            .iter()
            .enumerate()
            .map(|(i, &p)| handle::get(p, &format!("ws[{i}]")))
            .collect::<crate::Result<Vec<_>>>()?;
        let members: Vec<&RknpuWeights> = handles.iter().map(|w| &**w).collect();
        let batch = RknpuBatch::new(&members, m)?;
        // SAFETY: `out` is non-NULL (checked) and writable (the C contract).
        unsafe { put(out, batch) }
    })
}

/// `ys[j] = x · W_jᵀ` for every member of a batch, in one job.
///
/// # Safety
///
/// `x` spans its `m` rows at `x_stride` as for
/// [`rknpu_mul_mat_ex`]; `ys` and `y_strides` hold one entry per member, each `ys[j]`
/// pointing to the `(m - 1) · y_strides[j] + 4 · n_j` bytes its rows span, 4-byte
/// aligned, which nothing else accesses during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_batch_mul_mat(
    b: *mut BatchHandle,
    x_type: u32,
    x: *const c_void,
    x_stride: usize,
    ys: *const *mut f32,
    y_strides: *const usize,
) -> c_int {
    call(|| {
        let batch = handle::get(b, "b")?;
        non_null(x, "x")?;
        non_null(ys, "ys")?;
        non_null(y_strides, "y_strides")?;
        let count = batch.n.len();
        let ty = XType::from_code(x_type)?;
        let x_len = Rows::span(ty, batch.m, batch.k, x_stride)?;
        // SAFETY: `ys` and `y_strides` hold one entry per member (the C contract).
        let (ptrs, strides) = unsafe {
            (
                std::slice::from_raw_parts(ys, count),
                std::slice::from_raw_parts(y_strides, count),
            )
        };
        let mut outs = Vec::with_capacity(count);
        let mut floats = Vec::with_capacity(count);
        for (j, ((&p, &stride), &n)) in ptrs.iter().zip(strides).zip(&batch.n).enumerate() {
            non_null(p, &format!("ys[{j}]"))?;
            if !stride.is_multiple_of(4) || !p.is_aligned() {
                return Err(Failure::arg(format!(
                    "ys[{j}] and y_strides[{j}] ({stride}) must be 4-byte aligned"
                )));
            }
            let len = Rows::span(XType::F32, batch.m, n, stride)? / 4;
            // SAFETY: `ys[j]` spans `len` aligned floats that no one else touches during
            // the call (the C contract; the span was computed without overflow).
            outs.push(unsafe { std::slice::from_raw_parts_mut(p, len) });
            floats.push(stride / 4);
        }
        // SAFETY: `x` spans `x_len` readable bytes (the C contract).
        let x = unsafe { std::slice::from_raw_parts(x.cast::<u8>(), x_len) };
        let rows = Rows {
            ty,
            bytes: x,
            stride: x_stride,
        };
        batch.mul_mat_rows(rows, &mut outs, &floats)
    })
}

/// Frees a batch (NULL is ignored): 0, or `RKNPU_ERR_ARG` for a handle that is not a
/// live batch handle.
#[unsafe(no_mangle)]
pub extern "C" fn rknpu_batch_free(b: *mut BatchHandle) -> c_int {
    release(b, "b")
}

/// Whether a product of `m` rows of ggml type `x_type` runs against `n` × `k` weights of
/// `w_type` (`RKNPU_WEIGHTS_I8`, `RKNPU_WEIGHTS_I4` or a ggml type code): 0, or the
/// reason. Arithmetic only; nothing is allocated.
#[unsafe(no_mangle)]
pub extern "C" fn rknpu_mul_mat_supported(
    dev: *mut DeviceHandle,
    w_type: u32,
    x_type: u32,
    n: u32,
    k: u32,
    m: u32,
) -> c_int {
    call(|| {
        let dev = handle::get(dev, "dev")?;
        crate::mul_mat_supported(&dev, w_type, x_type, (n, k, m))
    })
}

/// Checks `y` and `y_stride` for `m` rows of `n` floats and returns the output a job
/// writes there.
fn output(y: *mut f32, y_stride: usize, m: u32, n: u32, what: &str) -> crate::Result<Output> {
    non_null(y, what)?;
    if !y_stride.is_multiple_of(4) || !y.is_aligned() {
        return Err(Failure::arg(format!(
            "{what} and its stride ({y_stride}) must be 4-byte aligned"
        )));
    }
    Rows::span(XType::F32, m, n, y_stride)?;
    Ok(Output {
        addr: y.expose_provenance(),
        stride: y_stride / 4,
        n: n as usize,
    })
}

/// `rknpu_mul_mat_ex` started on a worker thread: the job is stored in `*out`, and
/// `y` is written by `rknpu_job_wait`.
///
/// # Safety
///
/// `x` spans its rows as for [`rknpu_mul_mat_ex`] during the call (it is copied); `y`
/// spans its rows from this call until `rknpu_job_wait` or `rknpu_job_free` of the job
/// returns; `out` is valid for a pointer write.
// The C prototype takes each value separately, as `rknpu_mul_mat_ex` does, plus `out`.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_mul_mat_submit(
    w: *mut WeightsHandle,
    x_type: u32,
    x: *const c_void,
    x_stride: usize,
    m: u32,
    y: *mut f32,
    y_stride: usize,
    out: *mut *mut JobHandle,
) -> c_int {
    call(|| {
        let weights = handle::get(w, "w")?;
        non_null(x, "x")?;
        non_null(out, "out")?;
        let ty = XType::from_code(x_type)?;
        let x_len = Rows::span(ty, m, weights.k, x_stride)?;
        let y = output(y, y_stride, m, weights.n, "y")?;
        // Plan before the caller's memory is touched: a refused m reads nothing.
        weights.prepare(m)?;
        // SAFETY: `x` spans `x_len` readable bytes during the call (the C contract; the
        // span was computed without overflow).
        let x = unsafe { std::slice::from_raw_parts(x.cast::<u8>(), x_len) };
        let rows = Rows {
            ty,
            bytes: x,
            stride: x_stride,
        };
        let job = Job::mul_mat(weights, rows, m, y)?;
        // SAFETY: `out` is non-NULL (checked) and writable (the C contract).
        unsafe { put_arc(out, job) }
    })
}

/// `rknpu_batch_mul_mat` started on a worker thread: the job is stored in `*out`, and
/// `ys` are written by `rknpu_job_wait`.
///
/// # Safety
///
/// `x`, `ys` and `y_strides` as for [`rknpu_batch_mul_mat`], `x` during the call (it is
/// copied), each `ys[j]` from this call until `rknpu_job_wait` or `rknpu_job_free` of
/// the job returns; `out` is valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_batch_submit(
    b: *mut BatchHandle,
    x_type: u32,
    x: *const c_void,
    x_stride: usize,
    ys: *const *mut f32,
    y_strides: *const usize,
    out: *mut *mut JobHandle,
) -> c_int {
    call(|| {
        let batch = handle::get(b, "b")?;
        non_null(x, "x")?;
        non_null(ys, "ys")?;
        non_null(y_strides, "y_strides")?;
        non_null(out, "out")?;
        let count = batch.n.len();
        let ty = XType::from_code(x_type)?;
        let x_len = Rows::span(ty, batch.m, batch.k, x_stride)?;
        // SAFETY: `ys` and `y_strides` hold one entry per member (the C contract).
        let (ptrs, strides) = unsafe {
            (
                std::slice::from_raw_parts(ys, count),
                std::slice::from_raw_parts(y_strides, count),
            )
        };
        let outputs = ptrs
            .iter()
            .zip(strides)
            .zip(&batch.n)
            .enumerate()
            .map(|(j, ((&p, &stride), &n))| output(p, stride, batch.m, n, &format!("ys[{j}]")))
            .collect::<crate::Result<Vec<_>>>()?;
        // SAFETY: `x` spans `x_len` readable bytes during the call (the C contract).
        let x = unsafe { std::slice::from_raw_parts(x.cast::<u8>(), x_len) };
        let rows = Rows {
            ty,
            bytes: x,
            stride: x_stride,
        };
        let job = Job::batch(batch, rows, outputs)?;
        // SAFETY: `out` is non-NULL (checked) and writable (the C contract).
        unsafe { put_arc(out, job) }
    })
}

/// Whether a job has ended: 1 if so (`rknpu_job_wait` returns at once), 0 while it
/// runs, `RKNPU_ERR_ARG` for a handle that is not a live job.
#[unsafe(no_mangle)]
pub extern "C" fn rknpu_job_done(job: *mut JobHandle) -> c_int {
    let mut done = false;
    let rc = call(|| {
        done = handle::get(job, "job")?.is_done();
        Ok(())
    });
    if rc == 0 { c_int::from(done) } else { rc }
}

/// Waits for a job and writes its results to the outputs given at submission: 0, or
/// the product's error (nothing written). A second wait is `RKNPU_ERR_ARG`.
///
/// # Safety
///
/// The outputs given to the submission are still valid for writes and not accessed by
/// anyone else during this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_job_wait(job: *mut JobHandle) -> c_int {
    call(|| {
        let job = handle::get(job, "job")?;
        let results = job.wait()?;
        for (dense, out) in results.iter().zip(&job.outputs) {
            let len = (job.m as usize - 1) * out.stride + out.n;
            let p = std::ptr::with_exposed_provenance_mut::<f32>(out.addr);
            // SAFETY: `p` is the output pointer the submission checked (non-NULL,
            // aligned, spanning `len` floats without overflow) and exposed; it is
            // writable and unshared during this call (the C contract).
            let y = unsafe { std::slice::from_raw_parts_mut(p, len) };
            for (r, row) in dense.chunks_exact(out.n).enumerate() {
                let at = r * out.stride;
                y.get_mut(at..at + out.n)
                    .ok_or_else(|| Failure::arg("an output is shorter than its rows"))?
                    .copy_from_slice(row);
            }
        }
        Ok(())
    })
}

/// Frees a job (NULL is ignored): 0, or `RKNPU_ERR_ARG` for a handle that is not a live
/// job. A job still running is detached: it finishes on its worker and its outputs are
/// never written.
#[unsafe(no_mangle)]
pub extern "C" fn rknpu_job_free(job: *mut JobHandle) -> c_int {
    release(job, "job")
}

/// The calling thread's last error message ("" after a success).
#[unsafe(no_mangle)]
pub extern "C" fn rknpu_last_error() -> *const c_char {
    crate::last_error_ptr()
}
