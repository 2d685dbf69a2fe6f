//! Asynchronous products: `rknpu_mul_mat_submit` and `rknpu_batch_submit` give the
//! synchronous calls' results bit for bit, from several threads at once; a job writes
//! its outputs only in `rknpu_job_wait`; and `rknpu_mul_mat_supported` answers exactly
//! what the constructors and products accept.
//!
//! Calling `extern "C"` functions takes `unsafe`; each call's pointers are to live Rust
//! values of the lengths its arguments give, kept alive until the job is waited for.
#![allow(unsafe_code)]

mod common;

use common::*;

use rknpu::ffi::*;
use rknpu::handle::{DeviceHandle, JobHandle, WeightsHandle};
use rknpu::{Code, WEIGHTS_I4, WEIGHTS_I8};
use rknpu_driver::seeded::Rng;
use std::ffi::c_int;
use std::ptr::null_mut;

/// Weights of `n` rows of `k` seeded values: int8 with scales, or F32 data packed as fp16.
fn weights(
    dev: *mut DeviceHandle,
    rng: &mut Rng,
    n: usize,
    k: usize,
    int8: bool,
) -> *mut WeightsHandle {
    if !int8 {
        return f32_weights(dev, rng, n, k);
    }
    let values: Vec<i8> = (0..n * k).map(|_| (rng.unit() * 127.0) as i8).collect();
    let scale: Vec<f32> = (0..n).map(|j| 0.01 + j as f32 * 1e-3).collect();
    let mut w = null_mut();
    // SAFETY: n * k values and n scales; `w` is a local.
    let rc = unsafe {
        rknpu_weights_i8(
            dev,
            values.as_ptr(),
            scale.as_ptr(),
            n as u32,
            k as u32,
            &mut w,
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    w
}

/// The synchronous product of `m` dense F32 rows, into rows `n + 3` floats apart.
fn sync(w: *mut WeightsHandle, x: &[f32], m: u32, n: usize, k: usize) -> Vec<f32> {
    let (rc, y) = sync_rc(w, x, m, n, k);
    assert_eq!(rc, 0, "{}", last_error());
    y
}

/// [`sync`] returning the call's code, whatever it is, with the output.
fn sync_rc(w: *mut WeightsHandle, x: &[f32], m: u32, n: usize, k: usize) -> (c_int, Vec<f32>) {
    let mut y = vec![f32::NAN; m as usize * (n + 3)];
    // SAFETY: `x` holds m rows of k floats, `y` m rows n + 3 floats apart.
    let rc = unsafe {
        rknpu_mul_mat_ex(
            w,
            F32,
            x.as_ptr().cast(),
            4 * k,
            m,
            y.as_mut_ptr(),
            4 * (n + 3),
        )
    };
    (rc, y)
}

/// Submits the same product; returns the job and its output buffer (untouched until
/// the wait).
fn submit(
    w: *mut WeightsHandle,
    x: &[f32],
    m: u32,
    n: usize,
    k: usize,
) -> (*mut JobHandle, Vec<f32>) {
    let mut y = vec![f32::NAN; m as usize * (n + 3)];
    let mut job = null_mut();
    // SAFETY: `x` holds m rows of k floats (copied by the call); `y` spans m rows n + 3
    // floats apart and outlives the job's wait (the caller waits before dropping it:
    // moving the Vec does not move its heap buffer).
    let rc = unsafe {
        rknpu_mul_mat_submit(
            w,
            F32,
            x.as_ptr().cast(),
            4 * k,
            m,
            y.as_mut_ptr(),
            4 * (n + 3),
            &mut job,
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    (job, y)
}

/// Bits of every value (NaN gaps compare equal as bits).
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn submit_and_wait_equal_the_synchronous_product() {
    let dev = open_emu();
    let mut rng = Rng::from_seed(7);
    let (n, k) = (48usize, 96usize);
    for int8 in [false, true] {
        let w = weights(dev, &mut rng, n, k, int8);
        for m in [1u32, 5] {
            let x: Vec<f32> = (0..m as usize * k).map(|_| rng.unit()).collect();
            let want = sync(w, &x, m, n, k);
            let (job, mut y) = submit(w, &x, m, n, k);
            // A job writes nothing before it is waited for, even once it is done.
            while rknpu_job_done(job) == 0 {
                std::thread::yield_now();
            }
            assert_eq!(rknpu_job_done(job), 1);
            assert!(y.iter().all(|v| v.is_nan()), "written before the wait");
            // SAFETY: `y` is alive and unshared.
            let rc = unsafe { rknpu_job_wait(job) };
            assert_eq!(rc, 0, "{}", last_error());
            assert_eq!(bits(&y), bits(&want), "int8 {int8} m {m}");
            // A job is collected once.
            // SAFETY: as above.
            let again = unsafe { rknpu_job_wait(job) };
            assert_eq!(again, Code::Arg as i32);
            assert!(last_error().contains("already"), "{}", last_error());
            y.fill(0.0);
            assert_eq!(rknpu_job_free(job), 0);
            assert_eq!(rknpu_job_free(job), Code::Arg as i32);
        }
        assert_eq!(rknpu_weights_free(w), 0);
    }
    assert_eq!(rknpu_close(dev), 0);
}

#[test]
fn jobs_from_several_threads() {
    let dev = open_emu();
    let mut rng = Rng::from_seed(11);
    let (n, k) = (32usize, 64usize);
    // Two handles shared by four threads: jobs on one handle take turns, on two run at
    // once.
    let ws = [
        weights(dev, &mut rng, n, k, false),
        weights(dev, &mut rng, n, k, true),
    ];
    let inputs: Vec<(usize, u32, Vec<f32>)> = (0..8)
        .map(|i| {
            let m = 1 + (i % 3) as u32;
            (i % 2, m, (0..m as usize * k).map(|_| rng.unit()).collect())
        })
        .collect();
    let wants: Vec<Vec<f32>> = inputs
        .iter()
        .map(|(h, m, x)| sync(ws[*h], x, *m, n, k))
        .collect();
    let addrs: Vec<usize> = ws.iter().map(|w| w.addr()).collect();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let mine: Vec<_> = inputs
                .iter()
                .cloned()
                .zip(wants.clone())
                .skip(t)
                .step_by(4)
                .collect();
            let addrs = addrs.clone();
            std::thread::spawn(move || {
                for _ in 0..3 {
                    // Submit all of this thread's products, then wait for them in reverse.
                    let jobs: Vec<_> = mine
                        .iter()
                        .map(|((h, m, x), _)| {
                            let w: *mut WeightsHandle = std::ptr::without_provenance_mut(addrs[*h]);
                            submit(w, x, *m, n, k)
                        })
                        .collect();
                    for ((job, y), (_, want)) in jobs.into_iter().zip(&mine).rev() {
                        // SAFETY: `y` is alive and unshared.
                        let rc = unsafe { rknpu_job_wait(job) };
                        assert_eq!(rc, 0, "{}", last_error());
                        assert_eq!(bits(&y), bits(want));
                        assert_eq!(rknpu_job_free(job), 0);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no panic");
    }
    for w in ws {
        assert_eq!(rknpu_weights_free(w), 0);
    }
    assert_eq!(rknpu_close(dev), 0);
}

#[test]
fn a_freed_job_never_writes_its_output() {
    let dev = open_emu();
    let mut rng = Rng::from_seed(3);
    let (n, k) = (32usize, 64usize);
    let w = weights(dev, &mut rng, n, k, false);
    let x: Vec<f32> = (0..4 * k).map(|_| rng.unit()).collect();
    let (job, y) = submit(w, &x, 4, n, k);
    // The weights may go first: the job holds them.
    assert_eq!(rknpu_weights_free(w), 0);
    assert_eq!(rknpu_job_free(job), 0);
    assert_eq!(rknpu_job_done(job), Code::Arg as i32);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(y.iter().all(|v| v.is_nan()), "a freed job wrote y");
    assert_eq!(rknpu_close(dev), 0);
}

#[test]
fn batch_submit_equals_batch_mul_mat() {
    let dev = open_emu();
    let mut rng = Rng::from_seed(5);
    let (k, ns, m) = (64usize, [32usize, 48], 3u32);
    let ws: Vec<_> = ns
        .iter()
        .map(|&n| weights(dev, &mut rng, n, k, false))
        .collect();
    let mut b = null_mut();
    // SAFETY: `ws` holds two handles; `b` is a local.
    let rc = unsafe { rknpu_batch_new(ws.as_ptr(), 2, m, &mut b) };
    assert_eq!(rc, 0, "{}", last_error());
    let x: Vec<half::f16> = (0..m as usize * k)
        .map(|_| half::f16::from_f32(rng.unit()))
        .collect();
    let strides: Vec<usize> = ns.iter().map(|&n| 4 * n).collect();
    let run = |submit: bool| -> Vec<Vec<f32>> {
        let mut outs: Vec<Vec<f32>> = ns.iter().map(|&n| vec![f32::NAN; m as usize * n]).collect();
        let ptrs: Vec<*mut f32> = outs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        if submit {
            let mut job = null_mut();
            // SAFETY: `x` holds m rows of k f16 values; each output spans m dense rows
            // and lives past the wait.
            let rc = unsafe {
                rknpu_batch_submit(
                    b,
                    F16,
                    x.as_ptr().cast(),
                    2 * k,
                    ptrs.as_ptr(),
                    strides.as_ptr(),
                    &mut job,
                )
            };
            assert_eq!(rc, 0, "{}", last_error());
            // SAFETY: the outputs are alive and unshared.
            assert_eq!(unsafe { rknpu_job_wait(job) }, 0, "{}", last_error());
            assert_eq!(rknpu_job_free(job), 0);
        } else {
            // SAFETY: as above.
            let rc = unsafe {
                rknpu_batch_mul_mat(
                    b,
                    F16,
                    x.as_ptr().cast(),
                    2 * k,
                    ptrs.as_ptr(),
                    strides.as_ptr(),
                )
            };
            assert_eq!(rc, 0, "{}", last_error());
        }
        outs
    };
    let want = run(false);
    let got = run(true);
    for (g, w) in got.iter().zip(&want) {
        assert!(w.iter().all(|v| v.is_finite()));
        assert_eq!(bits(g), bits(w));
    }
    assert_eq!(rknpu_batch_free(b), 0);
    for w in ws {
        assert_eq!(rknpu_weights_free(w), 0);
    }
    assert_eq!(rknpu_close(dev), 0);
}

#[test]
fn supported_answers_what_the_library_accepts() {
    let dev = open_emu();
    let q = |w_type, x_type, n, k, m| rknpu_mul_mat_supported(dev, w_type, x_type, n, k, m);
    // Shapes that run: the answer is 0, and the product really runs.
    let mut rng = Rng::from_seed(9);
    for (w_type, int8) in [(F32, false), (WEIGHTS_I8, true)] {
        assert_eq!(q(w_type, F32, 32, 64, 3), 0, "{}", last_error());
        let w = weights(dev, &mut rng, 32, 64, int8);
        let x = vec![0.25f32; 3 * 64];
        sync(w, &x, 3, 32, 64);
        assert_eq!(rknpu_weights_free(w), 0);
    }
    assert_eq!(q(WEIGHTS_I4, F16, 32, 64, 1), 0, "{}", last_error());
    assert_eq!(q(F16, 30, 32, 64, 1), 0, "{}", last_error());
    // Refusals, each with its code and no allocation: a k no bank takes, an int4 odd k,
    // zero sizes, activations of a quantised type, a weight type with no conversion, and
    // a row count no plan holds.
    assert_eq!(q(F16, F32, 1, 1 << 28, 1), Code::Unsupported as i32);
    assert_eq!(q(WEIGHTS_I8, F32, 1, 1 << 28, 1), Code::Unsupported as i32);
    assert_eq!(q(WEIGHTS_I4, F32, 32, 63, 1), Code::Arg as i32);
    assert_eq!(q(WEIGHTS_I8, F32, 0, 64, 1), Code::Arg as i32);
    assert_eq!(q(F16, F32, 32, 64, 0), Code::Arg as i32);
    assert_eq!(q(F16, 2, 32, 64, 1), Code::Unsupported as i32);
    assert_eq!(q(258, F32, 32, 64, 1), Code::Unsupported as i32);
    assert_ne!(q(F16, F32, 32, 64, 1 << 30), 0);
    assert!(!last_error().is_empty());
    // The constructors agree with the refusals.
    let small = [0i8; 16];
    let scale = [1f32];
    let mut out = null_mut();
    // SAFETY: the buffer is too short for the shape: the call refuses it unread.
    let rc = unsafe { rknpu_weights_i8(dev, small.as_ptr(), scale.as_ptr(), 1, 1 << 28, &mut out) };
    assert_eq!(rc, Code::Unsupported as i32, "{}", last_error());
    assert_eq!(q(F16, F32, 32, 64, 1), 0);
    assert_eq!(
        rknpu_mul_mat_supported(null_mut(), F16, F32, 32, 64, 1),
        Code::Arg as i32
    );
    assert_eq!(rknpu_close(dev), 0);
}

/// The largest `k` the query accepts for `w_type` (n = 32, m = 1), by bisection.
fn k_limit(dev: *mut DeviceHandle, w_type: u32) -> u32 {
    let (mut lo, mut hi) = (32u32, 1u32 << 30);
    assert_eq!(rknpu_mul_mat_supported(dev, w_type, F32, 32, lo, 1), 0);
    assert_ne!(rknpu_mul_mat_supported(dev, w_type, F32, 32, hi, 1), 0);
    while hi - lo > 2 {
        let mid = (lo + (hi - lo) / 2) & !1;
        if rknpu_mul_mat_supported(dev, w_type, F32, 32, mid, 1) == 0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// At the limits the query finds, the constructors and products give the same answers:
/// the largest int4 k is packed and runs, the next is refused with the query's code
/// (before the short buffer passed is read), and so are a row count past the plan's
/// limit and an fp16 k past the layout's.
#[test]
fn supported_is_exact_at_the_limits() {
    let dev = open_emu();
    let k = k_limit(dev, WEIGHTS_I4);
    let past = k + 2;
    let refused = rknpu_mul_mat_supported(dev, WEIGHTS_I4, F32, 32, past, 1);
    assert_ne!(refused, 0);
    let scale = [0.5f32; 32];
    let packed = vec![0x11u8; 32 * past as usize / 2];
    let mut w = null_mut();
    // SAFETY: `packed` holds 32 rows of past / 2 bytes; `scale` 32 floats.
    let rc = unsafe { rknpu_weights_i4(dev, packed.as_ptr(), scale.as_ptr(), 32, past, &mut w) };
    assert_eq!(rc, refused, "{}", last_error());
    // SAFETY: as above, with k / 2 bytes a row (the first 32 * k / 2 bytes).
    let rc = unsafe { rknpu_weights_i4(dev, packed.as_ptr(), scale.as_ptr(), 32, k, &mut w) };
    assert_eq!(rc, 0, "k {k}: {}", last_error());
    let x = vec![1f32; k as usize];
    let mut y = vec![0f32; 32];
    // SAFETY: one row of k floats, one of 32.
    let rc = unsafe { rknpu_mul_mat(w, x.as_ptr(), 1, y.as_mut_ptr()) };
    assert_eq!(rc, 0, "{}", last_error());
    // Every weight is 1 (nibbles 0x1) and x is 1: each sum is k · 0.5, up to the
    // quantisation of x, which 1.0 survives exactly.
    assert!(y.iter().all(|&v| v == k as f32 * 0.5), "{:?}", &y[..4]);
    assert_eq!(rknpu_weights_free(w), 0);

    // fp16: the k past the limit is refused by the constructor as by the query.
    let k16 = k_limit(dev, F16) + 2;
    let q = rknpu_mul_mat_supported(dev, F16, F32, 32, k16, 1);
    let tiny = [0u16; 8];
    // SAFETY: `tiny` is short on purpose: the shape is refused before it is read.
    let rc = unsafe { rknpu_weights_f16(dev, tiny.as_ptr(), 32, k16, &mut w) };
    assert_eq!((rc, q != 0), (q, true), "{}", last_error());

    // Rows: the first m the query refuses is refused by the product with its code.
    let w16 = weights(dev, &mut Rng::from_seed(1), 32, 64, false);
    let (mut lo, mut hi) = (1u32, u32::MAX);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if rknpu_mul_mat_supported(dev, F32, F32, 32, 64, mid) == 0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let q = rknpu_mul_mat_supported(dev, F32, F32, 32, 64, hi);
    let row = [0f32; 64];
    let mut out = [0f32; 32];
    // SAFETY: one row each, for `hi` claimed rows: refused before reading.
    let rc = unsafe { rknpu_mul_mat(w16, row.as_ptr(), hi, out.as_mut_ptr()) };
    assert_eq!(rc, q, "m {hi}: {}", last_error());
    assert_eq!(rknpu_weights_free(w16), 0);
    assert_eq!(rknpu_close(dev), 0);
}

/// A product that fails on its worker (int8 weights refuse a NaN activation) reports
/// the synchronous call's code and message from the wait, and writes nothing.
#[test]
fn a_failing_job_reports_its_error_from_the_wait() {
    let dev = open_emu();
    let (n, k) = (32usize, 64usize);
    let w = weights(dev, &mut Rng::from_seed(2), n, k, true);
    let mut x = vec![0.5f32; k];
    x[3] = f32::NAN;
    let (want, _) = sync_rc(w, &x, 1, n, k);
    let want_message = last_error();
    assert!(want < 0, "a NaN activation on int8 weights ran");
    let (job, y) = submit(w, &x, 1, n, k);
    // SAFETY: `y` is alive and unshared.
    let rc = unsafe { rknpu_job_wait(job) };
    assert_eq!((rc, last_error()), (want, want_message));
    assert!(y.iter().all(|v| v.is_nan()), "a failed job wrote y");
    assert_eq!(rknpu_job_free(job), 0);
    assert_eq!(rknpu_weights_free(w), 0);
    assert_eq!(rknpu_close(dev), 0);
}
