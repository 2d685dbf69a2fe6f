//! Blocking products: one weights handle, or a batch of them sharing their input.

use super::*;

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
        let y_floats = output_span(y, y_stride, (m, weights.n), ("y", "y_stride"))?;
        // Plan before the caller's memory is touched: a refused m reads nothing.
        weights.prepare(m)?;
        // SAFETY: `x` spans `x_len` readable bytes and `y` `y_floats` aligned floats
        // that no one else touches during the call (the C contract; the spans were
        // computed without overflow).
        let (rows, y) = unsafe {
            (
                input_rows(x, ty, x_len, x_stride),
                std::slice::from_raw_parts_mut(y, y_floats),
            )
        };
        weights.mul_mat_rows(rows, m, y, y_stride / 4)
    })
}

/// What `rknpu_mul_mat_write` calls to write the rows: `(user, rows, stride, m, k)`,
/// returning 0, or anything else to stop the product.
pub type RowWriter =
    Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize, u32, u32) -> c_int>;

/// `y = x · wᵀ` for `m` rows of `x_type` that `write` puts straight into the NPU's
/// input buffer, into rows of `y` `y_stride` bytes apart.
///
/// # Safety
///
/// `y` points to the `(m - 1) · y_stride + 4 · n` bytes its rows span, 4-byte aligned,
/// which nothing else accesses during the call; `write` is a function that writes at
/// most the `(m - 1) · stride + 2 · k` bytes from `rows` it is given, and does not call
/// the library on the same weights.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rknpu_mul_mat_write(
    w: *mut WeightsHandle,
    x_type: u32,
    m: u32,
    write: RowWriter,
    user: *mut c_void,
    y: *mut f32,
    y_stride: usize,
) -> c_int {
    call(|| {
        let weights = handle::get(w, "w")?;
        let write = write.ok_or_else(|| Failure::arg("write is NULL"))?;
        let ty = XType::from_code(x_type)?;
        let y_floats = output_span(y, y_stride, (m, weights.n), ("y", "y_stride"))?;
        // SAFETY: `y` spans `y_floats` aligned floats that no one else touches during
        // the call (the C contract; the span was computed without overflow).
        let y = unsafe { std::slice::from_raw_parts_mut(y, y_floats) };
        let fill = |rows: &mut InputRows<'_>| {
            let (stride, k) = (rows.stride(), rows.k() as u32);
            let bytes = rows.bytes_mut();
            // SAFETY: `bytes` is the mapped A buffer's span of the rows, writable for
            // the call; `write` writes within it and does not reenter these weights
            // (the C contract).
            let rc = unsafe { write(user, bytes.as_mut_ptr().cast(), stride, m, k) };
            match rc {
                0 => Ok(()),
                rc => Err(rknpu_driver::Error::InvalidArgument {
                    what: format!("the row writer returned {rc}; the product did not run"),
                }),
            }
        };
        weights.mul_mat_written(ty, m, fill, y, y_stride / 4)
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
        // SAFETY: `x`, `ys` and `y_strides` as this function's C contract says.
        let args = unsafe { batch_args(b, (x_type, x, x_stride), (ys, y_strides), None)? };
        let (batch, rows) = (args.batch, args.rows);
        let count = args.ys.len();
        let mut outs = Vec::with_capacity(count);
        let mut floats = Vec::with_capacity(count);
        for (j, (&(p, stride), &n)) in args.ys.iter().zip(&batch.n).enumerate() {
            let (name, stride_name) = (format!("ys[{j}]"), format!("y_strides[{j}]"));
            let len = output_span(p, stride, (batch.m, n), (&name, &stride_name))?;
            // SAFETY: `ys[j]` spans `len` aligned floats that no one else touches during
            // the call (the C contract; the span was computed without overflow).
            outs.push(unsafe { std::slice::from_raw_parts_mut(p, len) });
            floats.push(stride / 4);
        }
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
