//! Asynchronous products: submitted to a worker thread, waited for, freed.

use super::*;

/// Checks `y` and `y_stride` for `m` rows of `n` floats and returns the output a job
/// writes there.
fn output(y: *mut f32, y_stride: usize, m: u32, n: u32, what: &str) -> crate::Result<Output> {
    output_span(y, y_stride, (m, n), (what, "its stride"))?;
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
        let rows = unsafe { input_rows(x, ty, x_len, x_stride) };
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
        // SAFETY: `x`, `ys`, `y_strides` and `out` as this function's C contract says;
        // `x` is copied by `Job::batch` before the call returns.
        let args = unsafe { batch_args(b, (x_type, x, x_stride), (ys, y_strides), Some(out))? };
        let m = args.batch.m;
        let outputs = args
            .ys
            .iter()
            .zip(&args.batch.n)
            .enumerate()
            .map(|(j, (&(p, stride), &n))| output(p, stride, m, n, &format!("ys[{j}]")))
            .collect::<crate::Result<Vec<_>>>()?;
        let job = Job::batch(args.batch, args.rows, outputs)?;
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
