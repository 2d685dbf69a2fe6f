//! `rknpu_batch_*` called as C calls them, on the emulated kernel: one job against
//! several weights sharing one input gives each member's single product bit for bit,
//! into strided outputs, and bad arguments are refused before memory is touched.
//!
//! Calling `extern "C"` functions through raw pointers takes `unsafe`; each call's
//! pointers are to live Rust values at least as long as the call may read or write.
#![allow(unsafe_code)]

mod common;

use common::*;

use rknpu::Code;
use rknpu::ffi::*;
use rknpu::handle::{BatchHandle, WeightsHandle};
use rknpu_driver::seeded::Rng;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

/// One member's single product of `m` dense F32 rows.
fn single(w: *mut WeightsHandle, x: &[f32], m: u32, n: usize) -> Vec<f32> {
    let mut y = vec![0f32; m as usize * n];
    // SAFETY: `x` holds m rows of k floats, `y` m rows of n.
    let rc = unsafe { rknpu_mul_mat(w, x.as_ptr(), m, y.as_mut_ptr()) };
    assert_eq!(rc, 0, "{}", last_error());
    y
}

fn batch_new(ws: &[*mut WeightsHandle], m: u32) -> (c_int, *mut BatchHandle) {
    let mut b = null_mut();
    // SAFETY: `ws` holds `ws.len()` handles; `b` is a local.
    let rc = unsafe { rknpu_batch_new(ws.as_ptr(), ws.len() as u32, m, &mut b) };
    (rc, b)
}

#[test]
fn one_job_gives_each_members_single_product() {
    let dev = open_emu();
    let mut rng = Rng::from_seed(41);
    let (k, ns) = (96usize, [64usize, 32, 48]);
    let ws: Vec<_> = ns
        .iter()
        .map(|&n| f32_weights(dev, &mut rng, n, k))
        .collect();
    for m in [1u32, 7] {
        let x: Vec<f32> = (0..m as usize * k).map(|_| rng.unit()).collect();
        let (rc, b) = batch_new(&ws, m);
        assert_eq!(rc, 0, "{}", last_error());
        // Outputs with gaps between rows (2 floats) that must stay untouched.
        let strides: Vec<usize> = ns.iter().map(|&n| 4 * (n + 2)).collect();
        let mut outs: Vec<Vec<f32>> = ns
            .iter()
            .map(|&n| vec![f32::NAN; m as usize * (n + 2)])
            .collect();
        let ptrs: Vec<*mut f32> = outs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        // SAFETY: `x` holds m dense rows of k floats; each `ptrs[j]` spans m rows at
        // `strides[j]` bytes; `b` is live.
        let rc = unsafe {
            rknpu_batch_mul_mat(
                b,
                F32,
                x.as_ptr().cast(),
                4 * k,
                ptrs.as_ptr(),
                strides.as_ptr(),
            )
        };
        assert_eq!(rc, 0, "{}", last_error());
        assert_eq!(last_error(), "");
        for ((w, &n), out) in ws.iter().zip(&ns).zip(&outs) {
            let want = single(*w, &x, m, n);
            for (r, row) in out.chunks_exact(n + 2).enumerate() {
                let got: Vec<u32> = row[..n].iter().map(|v| v.to_bits()).collect();
                let exp: Vec<u32> = want[r * n..(r + 1) * n]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                assert_eq!(
                    got, exp,
                    "m={m} n={n} row {r}: the batch equals the single product"
                );
                assert!(row[n..].iter().all(|v| v.is_nan()), "the gap is untouched");
            }
        }
        // F16 rows of the same values (exactly representable) give the same results.
        let h: Vec<u16> = x
            .iter()
            .map(|&v| half::f16::from_f32(v).to_bits())
            .collect();
        let xr: Vec<f32> = h
            .iter()
            .map(|&b| half::f16::from_bits(b).to_f32())
            .collect();
        let mut y16: Vec<Vec<f32>> = ns.iter().map(|&n| vec![0f32; m as usize * n]).collect();
        let p16: Vec<*mut f32> = y16.iter_mut().map(|o| o.as_mut_ptr()).collect();
        let dense: Vec<usize> = ns.iter().map(|&n| 4 * n).collect();
        // SAFETY: `h` holds m rows of k fp16 values; outputs are dense m x n.
        let rc = unsafe {
            rknpu_batch_mul_mat(
                b,
                F16,
                h.as_ptr().cast(),
                2 * k,
                p16.as_ptr(),
                dense.as_ptr(),
            )
        };
        assert_eq!(rc, 0, "{}", last_error());
        for ((w, &n), y) in ws.iter().zip(&ns).zip(&y16) {
            assert_eq!(y, &single(*w, &xr, m, n), "F16 rows, n={n}");
        }
        rknpu_batch_free(b);
    }
    // A batch outlives the weights handles it was made from.
    let x: Vec<f32> = (0..k).map(|_| rng.unit()).collect();
    let want = single(ws[0], &x, 1, ns[0]);
    let (rc, b) = batch_new(&ws[..1], 1);
    assert_eq!(rc, 0, "{}", last_error());
    for &w in &ws {
        rknpu_weights_free(w);
    }
    let mut y = vec![0f32; ns[0]];
    let yp = [y.as_mut_ptr()];
    // SAFETY: `x` is one row of k floats, `y` one row of n.
    let rc = unsafe {
        rknpu_batch_mul_mat(
            b,
            F32,
            x.as_ptr().cast(),
            4 * k,
            yp.as_ptr(),
            [4 * ns[0]].as_ptr(),
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    assert_eq!(y, want);
    rknpu_batch_free(b);
    rknpu_batch_free(null_mut());
    rknpu_close(dev);
}

#[test]
fn bad_batches_are_refused_before_memory_is_touched() {
    let dev = open_emu();
    let mut rng = Rng::from_seed(42);
    let a = f32_weights(dev, &mut rng, 32, 64);
    let c = f32_weights(dev, &mut rng, 32, 96);
    let fail = |rc: c_int, what: &str| {
        assert_eq!(rc, Code::Arg as c_int, "{what}: {}", last_error());
        assert!(!last_error().is_empty(), "{what}: a message");
    };
    fail(batch_new(&[], 1).0, "no member");
    fail(batch_new(&[a, c], 1).0, "members of different k");
    fail(batch_new(&[a, null_mut()], 1).0, "a NULL member");
    fail(batch_new(&[a], 0).0, "m = 0");
    let mut b = null_mut();
    // SAFETY: a NULL `ws` with a count, refused before it is read.
    fail(
        unsafe { rknpu_batch_new(std::ptr::null(), 1, 1, &mut b) },
        "NULL ws",
    );
    assert!(b.is_null());
    let (rc, b) = batch_new(&[a], 2);
    assert_eq!(rc, 0, "{}", last_error());
    let x = vec![0.5f32; 2 * 64];
    let mut y = vec![7f32; 2 * 32];
    let yp = [y.as_mut_ptr()];
    let call = |x_type: u32, x_stride: usize, y_stride: usize| {
        // SAFETY: `x` and `y` are live; every call below is refused before they are read
        // or written.
        unsafe {
            rknpu_batch_mul_mat(
                b,
                x_type,
                x.as_ptr().cast::<c_void>(),
                x_stride,
                yp.as_ptr(),
                [y_stride].as_ptr(),
            )
        }
    };
    fail(call(F32, 4 * 63, 128), "x_stride shorter than a row");
    fail(call(F32, 256, 126), "y_stride not a multiple of 4");
    fail(call(F32, 256, 124), "y_stride shorter than a row");
    assert_eq!(
        call(8, 256, 128),
        Code::Unsupported as c_int,
        "{}",
        last_error()
    );
    assert!(y.iter().all(|&v| v == 7.0), "y untouched");
    rknpu_batch_free(b);
    rknpu_weights_free(a);
    rknpu_weights_free(c);
    rknpu_close(dev);
}
