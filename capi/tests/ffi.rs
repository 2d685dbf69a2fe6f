//! The exported functions called as C calls them: argument validation, error codes and
//! messages, and products on the emulated kernel against a CPU reference.
//!
//! Calling `extern "C"` functions through raw pointers takes `unsafe`; each call's
//! pointers are to live Rust values of the lengths the arguments give.
#![allow(unsafe_code)]

mod common;

use common::*;

use rknpu::Code;
use rknpu::ffi::*;
use rknpu::handle::WeightsHandle;
use std::ffi::c_int;
use std::ptr::{null, null_mut};

/// Seeded values in [-1, 1).
fn values(seed: u64, len: usize) -> Vec<f32> {
    let mut rng = rknpu_driver::seeded::Rng::from_seed(seed);
    (0..len).map(|_| rng.unit()).collect()
}

/// The largest difference between `y` and `reference`, relative to the largest value
/// of `reference`.
fn relative_error(y: &[f32], reference: &[f64]) -> f64 {
    let scale = reference.iter().fold(0f64, |a, v| a.max(v.abs()));
    let diff = y
        .iter()
        .zip(reference)
        .fold(0f64, |a, (&v, r)| a.max((f64::from(v) - r).abs()));
    diff / scale
}

/// `x · wᵀ` in f64, `w` given as `n` rows of `k` floats.
fn reference(x: &[f32], w: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut y = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k).map(|p| f64::from(x[i * k + p]) * w[j * k + p]).sum();
        }
    }
    y
}

/// Runs `rknpu_mul_mat`, returning the code and `y`.
fn mul_mat(w: *mut WeightsHandle, x: &[f32], m: u32, n: usize) -> (c_int, Vec<f32>) {
    let mut y = vec![f32::NAN; m as usize * n];
    // SAFETY: `w` is live; `x` holds m * k floats (the tests make it so) and `y` m * n.
    let rc = unsafe { rknpu_mul_mat(w, x.as_ptr(), m, y.as_mut_ptr()) };
    (rc, y)
}

#[test]
fn null_arguments_are_refused_with_a_message() {
    let dev = open_emu();
    let w = [1i8; 8];
    let scale = [1f32; 2];
    let mut out = null_mut();
    // SAFETY: every non-NULL pointer is to a live local of the given size.
    unsafe {
        assert_eq!(rknpu_open(null(), null_mut()), Code::Arg as c_int);
        assert!(last_error().contains("out is NULL"), "{}", last_error());
        assert_eq!(
            rknpu_weights_i8(null_mut(), w.as_ptr(), scale.as_ptr(), 2, 4, &mut out),
            -1
        );
        assert!(last_error().contains("dev"));
        assert_eq!(
            rknpu_weights_i8(dev, null(), scale.as_ptr(), 2, 4, &mut out),
            -1
        );
        assert_eq!(
            rknpu_weights_i8(dev, w.as_ptr(), null(), 2, 4, &mut out),
            -1
        );
        assert_eq!(
            rknpu_weights_i8(dev, w.as_ptr(), scale.as_ptr(), 2, 4, null_mut()),
            -1
        );
        assert_eq!(rknpu_weights_f16(dev, null(), 2, 4, &mut out), -1);
        assert_eq!(
            rknpu_mul_mat(null_mut(), [0f32].as_ptr(), 1, [0f32].as_mut_ptr()),
            -1
        );
        assert!(out.is_null(), "a failed call wrote a handle");
        // Freeing and closing NULL do nothing.
        rknpu_weights_free(null_mut());
        rknpu_close(null_mut());
        rknpu_close(dev);
    }
}

#[test]
fn sizes_are_validated() {
    let dev = open_emu();
    let bytes = [0u8; 16];
    let scale = [1f32; 4];
    let mut out = null_mut();
    // SAFETY: every pointer is to a live local at least as long as the sizes passed
    // where a call reads it; the refused calls read nothing.
    unsafe {
        assert_eq!(
            rknpu_weights_i4(dev, bytes.as_ptr(), scale.as_ptr(), 4, 7, &mut out),
            -1
        );
        assert!(last_error().contains("even k"), "{}", last_error());
        assert_eq!(
            rknpu_weights_i4(dev, bytes.as_ptr(), scale.as_ptr(), 0, 8, &mut out),
            -1
        );
        assert!(last_error().contains("zero"), "{}", last_error());
        assert_eq!(
            rknpu_weights_f16(dev, [0u16].as_ptr(), u32::MAX, u32::MAX, &mut out),
            Code::Arg as c_int
        );
        assert!(last_error().contains("overflow"), "{}", last_error());
        // A scale that is not finite is the library's refusal, mapped to RKNPU_ERR_ARG.
        let w = [1i8; 16];
        let bad = [1.0, f32::NAN, 1.0, 1.0];
        assert_eq!(
            rknpu_weights_i8(dev, w.as_ptr(), bad.as_ptr(), 4, 4, &mut out),
            -1
        );
        assert!(last_error().contains("scale"), "{}", last_error());
        assert!(out.is_null());
        // A spec that names no device.
        let mut other = null_mut();
        assert!(rknpu_open(c"emu:no-such-flavour".as_ptr(), &mut other) < 0);
        assert!(!last_error().is_empty());
        assert!(other.is_null());
        rknpu_close(dev);
    }
}

#[test]
fn int8_int4_and_f16_products_on_emu() {
    let dev = open_emu();
    let (n, k) = (40usize, 96usize);
    let raw = values(1, n * k);
    let scale: Vec<f32> = (0..n).map(|j| 0.01 + j as f32 * 0.001).collect();
    let w8: Vec<i8> = raw.iter().map(|v| (v * 127.0).round() as i8).collect();
    let w4: Vec<i8> = raw.iter().map(|v| (v * 7.0).round() as i8).collect();
    let packed: Vec<u8> = w4
        .chunks(2)
        .map(|p| (p[0] as u8 & 0xf) | ((p[1] as u8 & 0xf) << 4))
        .collect();
    let h: Vec<half::f16> = raw.iter().map(|&v| half::f16::from_f32(v)).collect();
    let bits: Vec<u16> = h.iter().map(|v| v.to_bits()).collect();
    let deq = |w: &[i8]| -> Vec<f64> {
        w.iter()
            .enumerate()
            .map(|(i, &v)| f64::from(v) * f64::from(scale[i / k]))
            .collect()
    };
    let cases = [
        ("int8", deq(&w8), 0.02),
        ("int4", deq(&w4), 0.02),
        (
            "f16",
            h.iter().map(|v| f64::from(v.to_f32())).collect(),
            0.002,
        ),
    ];
    for (name, wref, bound) in cases {
        let mut w = null_mut();
        // SAFETY: the weights hold n * k values (n * k / 2 bytes for int4) and the
        // scales n; `w` is a local.
        let rc = unsafe {
            match name {
                "int8" => rknpu_weights_i8(dev, w8.as_ptr(), scale.as_ptr(), 40, 96, &mut w),
                "int4" => rknpu_weights_i4(dev, packed.as_ptr(), scale.as_ptr(), 40, 96, &mut w),
                _ => rknpu_weights_f16(dev, bits.as_ptr(), 40, 96, &mut w),
            }
        };
        assert_eq!(rc, 0, "{name}: {}", last_error());
        for m in [1u32, 5, 5, 1] {
            let x = values(100 + u64::from(m), m as usize * k);
            let (rc, y) = mul_mat(w, &x, m, n);
            assert_eq!(rc, 0, "{name} m={m}: {}", last_error());
            assert_eq!(last_error(), "", "a success leaves no message");
            let err = relative_error(&y, &reference(&x, &wref, m as usize, n, k));
            assert!(err < bound, "{name} m={m}: relative error {err}");
        }
        let cached = rknpu::handle::get(w, "w").expect("live").cached_rows();
        assert_eq!(
            cached,
            vec![5, 1],
            "the plans of both m are kept, the last used last"
        );
        rknpu_weights_free(w);
    }
    rknpu_close(dev);
}

#[test]
fn weights_outlive_their_device_handle() {
    let dev = open_emu();
    let w8 = [3i8; 64];
    let scale = [0.5f32; 8];
    let mut w = null_mut();
    // SAFETY: 8 * 8 weights and 8 scales; each handle is released once.
    unsafe {
        assert_eq!(
            rknpu_weights_i8(dev, w8.as_ptr(), scale.as_ptr(), 8, 8, &mut w),
            0
        );
        rknpu_close(dev);
    }
    let x = [1f32; 8];
    let (rc, y) = mul_mat(w, &x, 1, 8);
    assert_eq!(rc, 0, "{}", last_error());
    // Each result is 8 × 3 × 1 (x quantises exactly) × 0.5.
    assert!(y.iter().all(|&v| (v - 12.0).abs() < 1e-4), "{y:?}");
    rknpu_weights_free(w);
}

#[test]
fn a_panic_becomes_a_code() {
    let rc = rknpu::call(|| panic!("boom"));
    assert_eq!(rc, Code::Panic as c_int);
    assert!(last_error().contains("boom"), "{}", last_error());
    assert_eq!(rknpu::call(|| Ok(())), 0);
    assert_eq!(last_error(), "");
}

#[test]
fn handles_are_send_and_sync() {
    fn shared<T: Send + Sync>() {}
    shared::<rknpu::RknpuDevice>();
    shared::<rknpu::RknpuWeights>();
}

#[test]
fn one_weights_handle_from_several_threads() {
    let dev = open_emu();
    let (n, k) = (16usize, 32usize);
    let w8: Vec<i8> = (0..n * k).map(|i| (i % 11) as i8 - 5).collect();
    let scale = vec![1f32; n];
    let mut w = null_mut();
    // SAFETY: n * k weights and n scales; `w` is a local.
    let rc = unsafe { rknpu_weights_i8(dev, w8.as_ptr(), scale.as_ptr(), 16, 32, &mut w) };
    assert_eq!(rc, 0, "{}", last_error());
    // Integer activations quantise exactly (their row maximum is 127), so every thread
    // gets the exact product whichever m it runs and however the calls interleave.
    let address = w as usize;
    std::thread::scope(|scope| {
        for m in 1..=4u32 {
            let w8 = &w8;
            scope.spawn(move || {
                let w = address as *mut WeightsHandle;
                let x: Vec<f32> = (0..m as usize * k)
                    .map(|i| if i % k == 0 { 127.0 } else { (i % 7) as f32 })
                    .collect();
                for _ in 0..3 {
                    let (rc, y) = mul_mat(w, &x, m, n);
                    assert_eq!(rc, 0, "{}", last_error());
                    for i in 0..m as usize {
                        for j in 0..n {
                            let want: f32 = (0..k)
                                .map(|p| x[i * k + p] * f32::from(w8[j * k + p]))
                                .sum();
                            assert_eq!(y[i * n + j], want, "m={m} ({i}, {j})");
                        }
                    }
                }
            });
        }
    });
    rknpu_weights_free(w);
    rknpu_close(dev);
}
