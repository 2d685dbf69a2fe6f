//! One product over several open rocket devices (`compute::matmul::SpreadMatmul`):
//! each device computes its share of the columns on its own core, and the shares make
//! the whole product.

mod common;

use half::f16;
use rknpu_driver::Error;
use rknpu_driver::compute::matmul::{SpreadMatmul, Weights};
use rknpu_driver::device::Device;
use rknpu_driver::emu::{EmuKernel, Flavour};
use std::sync::Arc;

/// `count` open devices of one emulated rocket kernel.
fn devices(count: usize) -> Vec<Device> {
    let kernel = Arc::new(EmuKernel::new(Flavour::Rocket));
    (0..count)
        .map(|_| Device::open_emulator(kernel.clone()).unwrap())
        .collect()
}

/// Seeded int8 values in -5..=5.
fn values(n: usize, seed: u64) -> Vec<i8> {
    let mut r = common::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..n).map(|_| r.int(-5, 5) as i8).collect()
}

/// `C = A · Wᵀ` in f64 for `w` of `n` rows of `k`.
fn reference(a: &[f64], w: &[f64], (m, k, n): (usize, usize, usize)) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * w[j * k + p]).sum();
        }
    }
    c
}

#[test]
fn int8_shares_on_three_devices_make_the_exact_product() {
    let (m, k, n) = (48usize, 1024usize, 1000usize);
    let devs = devices(3);
    let w = values(n * k, 1);
    let a = values(m * k, 2);
    let mut mm = SpreadMatmul::new(&devs, Weights::I8(&w), (n as u32, k as u32), m as u32).unwrap();
    // 1000 columns: 32 granules, 11 + 11 + 10 of them, the last share 1000 − 704.
    assert_eq!(mm.columns(), vec![0..352, 352..704, 704..1000]);
    let parts: Vec<_> = mm.parts().collect();
    assert!(
        !parts[0]
            .bank()
            .device()
            .same_device(parts[1].bank().device())
    );
    assert!(parts.iter().all(|p| p.plan().per_core.len() == 1));
    let mut c = vec![0i32; m * n];
    mm.run_into(&a, &mut c).unwrap();
    let f = |v: &[i8]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let want = reference(&f(&a), &f(&w), (m, k, n));
    assert!(c.iter().zip(&want).all(|(&g, &e)| g as f64 == e));
    // A second call on the same buffers.
    let a2 = values(m * k, 3);
    mm.run_into(&a2, &mut c).unwrap();
    let want = reference(&f(&a2), &f(&w), (m, k, n));
    assert!(c.iter().zip(&want).all(|(&g, &e)| g as f64 == e));
}

#[test]
fn fp16_shares_match_the_product_within_the_fp32_bound() {
    let (m, k, n) = (16usize, 512usize, 200usize);
    let devs = devices(2);
    let w: Vec<f16> = values(n * k, 4)
        .iter()
        .map(|&v| f16::from_f32(v as f32 / 8.0))
        .collect();
    let a: Vec<f16> = values(m * k, 5)
        .iter()
        .map(|&v| f16::from_f32(v as f32 / 4.0))
        .collect();
    let mut mm =
        SpreadMatmul::new(&devs, Weights::F16(&w), (n as u32, k as u32), m as u32).unwrap();
    assert_eq!(mm.columns().len(), 2);
    let mut c = vec![0f32; m * n];
    mm.run_into(&a, &mut c).unwrap();
    let f = |v: &[f16]| v.iter().map(|x| x.to_f64()).collect::<Vec<_>>();
    let want = reference(&f(&a), &f(&w), (m, k, n));
    for (i, (&g, &e)) in c.iter().zip(&want).enumerate() {
        // Every product is exact in fp32 (multiples of 1/32 below 2^11); the sums of
        // at most 512 of them round at most once each.
        assert!(
            (g as f64 - e).abs() <= 1e-6 * (1.0 + e.abs()) * k as f64,
            "{i}: {g} vs {e}"
        );
    }
}

#[test]
fn bad_input_is_refused_by_name() {
    let w = values(64 * 32, 6);
    match SpreadMatmul::new(&[], Weights::I8(&w), (64, 32), 1) {
        Err(Error::InvalidArgument { what }) => assert!(what.contains("no device"), "{what}"),
        other => panic!("{other:?}"),
    }
    let devs = devices(2);
    assert!(matches!(
        SpreadMatmul::new(&devs, Weights::I8(&w[1..]), (64, 32), 1),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        SpreadMatmul::new(&devs, Weights::I4(&w), (64, 32), 1),
        Err(Error::NotOffered { .. })
    ));
    let mut mm = SpreadMatmul::new(&devs, Weights::I8(&w), (64, 32), 1).unwrap();
    let mut short = vec![0i32; 63];
    assert!(matches!(
        mm.run_into(&[1; 32], &mut short),
        Err(Error::ShapeMismatch { .. })
    ));
}
