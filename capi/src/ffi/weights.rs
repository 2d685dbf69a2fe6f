//! Weights: from int8, int4 and fp16 values and from ggml's raw tensor data.

use super::*;

/// The signature of [`RknpuWeights::i8`] and [`RknpuWeights::i4`].
type MakeScaled<T> = fn(&RknpuDevice, &[T], &[f32], u32, u32) -> crate::Result<RknpuWeights>;

/// Integer weights made by `make` into `*out`: `n` rows of `k` values of `dtype` (int8,
/// or int4 as `k / 2` bytes of nibbles, `k` even), and `n` scales. The return code of
/// [`rknpu_weights_i8`] and [`rknpu_weights_i4`].
///
/// # Safety
///
/// `w` is NULL or points to the `n` rows of `T` the shape spans, `scale` is NULL or
/// points to `n` floats; `out` is NULL or valid for a pointer write.
unsafe fn scaled<T>(
    dev: *mut DeviceHandle,
    w: *const T,
    scale: *const f32,
    (n, k): (u32, u32),
    (dtype, out): (Dtype, *mut *mut WeightsHandle),
    make: MakeScaled<T>,
) -> c_int {
    call(|| {
        let row = if dtype == Dtype::Int4 {
            weight_shape(n, k, true)?;
            k / 2
        } else {
            k
        };
        let len = elements("weights", n, row)?;
        let dev = handle::get(dev, "dev")?;
        non_null(w, "w")?;
        non_null(scale, "scale")?;
        non_null(out, "out")?;
        // The shape is checked against what the NPU can run before `w` is read.
        check_plan(&dev.device, dtype, n, k, 1)?;
        // SAFETY: `w` holds `len` values and `scale` `n` (this function's contract;
        // `len` was computed without overflow).
        let (w, scale) = unsafe {
            (
                std::slice::from_raw_parts(w, len),
                std::slice::from_raw_parts(scale, n as usize),
            )
        };
        let weights = make(&dev, w, scale, n, k)?;
        // SAFETY: `out` is non-NULL (checked) and writable (this function's contract).
        unsafe { put(out, weights) }
    })
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
    // SAFETY: the C contract is `scaled`'s, with `n` rows of `k` values.
    unsafe { scaled(dev, w, scale, (n, k), (Dtype::Int8, out), RknpuWeights::i8) }
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
    // SAFETY: the C contract is `scaled`'s, with `n` rows of `k / 2` bytes.
    unsafe { scaled(dev, w, scale, (n, k), (Dtype::Int4, out), RknpuWeights::i4) }
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
        let (t, _) = crate::ggml_bank(ty)?;
        let row = rknpu_driver::gguf::raw_row_bytes(t, n, k).map_err(Failure::from)?;
        if row.checked_mul(n as usize) != Some(size) {
            return Err(Failure::arg(format!(
                "size {size} is not {n} rows of {row} bytes ({k} values of {t})"
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
