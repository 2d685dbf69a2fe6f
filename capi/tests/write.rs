//! `rknpu_mul_mat_write` as C calls it: rows written by a callback straight into the
//! NPU's input buffer give what `rknpu_mul_mat_ex` gives for the same rows; the calls it
//! refuses, before the callback runs, and a callback that stops the product.
//!
//! Calling `extern "C"` functions takes `unsafe`; each call passes pointers to live
//! values of the lengths the arguments give.
#![allow(unsafe_code)]

mod common;

use common::*;

use rknpu::Code;
use rknpu::ffi::*;
use rknpu::handle::WeightsHandle;
use rknpu_driver::seeded::Rng;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

/// What the callback copies: `m` rows of `k` values' bits, and how often it ran.
struct Source {
    bits: Vec<u16>,
    calls: usize,
    rc: c_int,
}

/// The callback: copies `Source::bits` row by row to `rows` at `stride`.
unsafe extern "C" fn copy_rows(
    user: *mut c_void,
    rows: *mut c_void,
    stride: usize,
    m: u32,
    k: u32,
) -> c_int {
    // SAFETY: `user` is the `Source` the test passed, alive for the call.
    let src = unsafe { &mut *user.cast::<Source>() };
    src.calls += 1;
    let k = k as usize;
    for (r, row) in src.bits.chunks_exact(k).take(m as usize).enumerate() {
        // SAFETY: the library hands `m` rows of `k` two-byte values at `stride`.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(rows.cast::<u8>().add(r * stride), 2 * k) };
        for (d, s) in dst.chunks_exact_mut(2).zip(row) {
            d.copy_from_slice(&s.to_le_bytes());
        }
    }
    src.rc
}

/// fp16 weights of `n` rows of `k` seeded values.
fn f16_weights(rng: &mut Rng, n: usize, k: usize) -> *mut WeightsHandle {
    let dev = open_emu();
    let bits: Vec<u16> = (0..n * k)
        .map(|_| half::f16::from_f32(rng.unit()).to_bits())
        .collect();
    let mut w = null_mut();
    // SAFETY: `bits` holds n rows of k values; `w` is a local.
    let rc = unsafe { rknpu_weights_f16(dev, bits.as_ptr(), n as u32, k as u32, &mut w) };
    assert_eq!(rc, 0, "{}", last_error());
    // The weights keep what they need of the device.
    assert_eq!(rknpu_close(dev), 0);
    w
}

/// `rknpu_mul_mat_write` of `src` into `m` rows of `n` at `y_stride` floats.
fn write(w: *mut WeightsHandle, m: u32, src: &mut Source, y: &mut [f32], y_stride: usize) -> c_int {
    let user: *mut Source = src;
    // SAFETY: `y` spans `m` rows at `y_stride` floats; `user` lives for the call.
    unsafe {
        rknpu_mul_mat_write(
            w,
            F16,
            m,
            Some(copy_rows),
            user.cast(),
            y.as_mut_ptr(),
            4 * y_stride,
        )
    }
}

/// `rknpu_mul_mat_ex` of `m` rows of `k` fp16 values' bits into `m` rows of `n`.
fn mul_mat_ex(w: *mut WeightsHandle, bits: &[u16], m: usize, n: usize, k: usize) -> Vec<f32> {
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let mut y = vec![0f32; m * n];
    // SAFETY: `bytes` holds m rows of k fp16 values; `y` m rows of n floats.
    let rc = unsafe {
        rknpu_mul_mat_ex(
            w,
            F16,
            bytes.as_ptr().cast(),
            2 * k,
            m as u32,
            y.as_mut_ptr(),
            4 * n,
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    y
}

#[test]
fn written_rows_give_what_mul_mat_ex_gives() {
    let mut rng = Rng::from_seed(71);
    let (n, k) = (40usize, 96usize);
    let w = f16_weights(&mut rng, n, k);
    for (m, y_stride) in [(1usize, n), (5, n), (3, n + 7)] {
        let bits: Vec<u16> = (0..m * k)
            .map(|_| half::f16::from_f32(rng.unit() * 2.0 - 1.0).to_bits())
            .collect();
        let want = mul_mat_ex(w, &bits, m, n, k);
        // Other rows through the same cached plan, so that the buffer holds other values.
        mul_mat_ex(w, &vec![0x3C00u16; m * k], m, n, k);
        let mut src = Source {
            bits,
            calls: 0,
            rc: 0,
        };
        let mut y = vec![f32::NAN; (m - 1) * y_stride + n];
        assert_eq!(
            write(w, m as u32, &mut src, &mut y, y_stride),
            0,
            "{}",
            last_error()
        );
        assert_eq!(src.calls, 1);
        for r in 0..m {
            assert_eq!(
                y[r * y_stride..][..n],
                want[r * n..][..n],
                "m = {m}, row {r}"
            );
        }
    }
    assert_eq!(rknpu_weights_free(w), 0);
}

#[test]
fn refusals_come_before_the_callback() {
    let mut rng = Rng::from_seed(72);
    let (n, k) = (32usize, 9000usize);
    let w = f16_weights(&mut rng, n, k);
    let mut src = Source {
        bits: vec![0; 4 * k],
        calls: 0,
        rc: 0,
    };
    let mut y = vec![0f32; 4 * n];
    // Four rows over several K waves are not plain rows: the caller falls back.
    assert_eq!(write(w, 4, &mut src, &mut y, n), Code::Unsupported as c_int);
    assert!(last_error().contains("K waves"), "{}", last_error());
    // Rows of another type than the bank's.
    let user: *mut Source = &mut src;
    // SAFETY: as in `write`, with another type code and a NULL callback.
    let (f32_rows, no_writer) = unsafe {
        (
            rknpu_mul_mat_write(
                w,
                F32,
                1,
                Some(copy_rows),
                user.cast(),
                y.as_mut_ptr(),
                4 * n,
            ),
            rknpu_mul_mat_write(w, F16, 1, None, user.cast(), y.as_mut_ptr(), 4 * n),
        )
    };
    assert_eq!(f32_rows, Code::Unsupported as c_int);
    assert_eq!(no_writer, Code::Arg as c_int);
    assert_eq!(src.calls, 0, "the callback ran for a refused call");
    // One row is written in place; a callback that returns non-zero stops the product.
    src.rc = 3;
    y.fill(f32::NAN);
    assert_eq!(write(w, 1, &mut src, &mut y, n), Code::Arg as c_int);
    assert_eq!(src.calls, 1);
    assert!(last_error().contains("returned 3"), "{}", last_error());
    assert_eq!(rknpu_weights_free(w), 0);
}
