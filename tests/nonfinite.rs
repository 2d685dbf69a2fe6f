//! One policy for non-finite activations on every matmul path (docs/matmul.md,
//! "Non-finite values"): NaN, ±inf, and on fp16/bf16 banks a finite value that rounds
//! to infinity in the bank's type, are refused with `Error::OutOfRange` naming the
//! first such value by its index, before anything is submitted; the largest values the
//! type holds still run.

use half::{bf16, f16};
use rknpu_driver::Error;
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, MatmulBatch, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::emu::{EmuKernel, Flavour};
use std::sync::Arc;

const N: u32 = 16;
const K: u32 = 32;
const M: u32 = 2;

/// A device of an emulated vendor kernel of its own: the tests compare its work
/// counter before and after a refusal, which other tests' jobs on a shared kernel move.
fn dev() -> Device {
    Device::open_emulator(Arc::new(EmuKernel::new(Flavour::Vendor098))).unwrap()
}

/// Asserts `r` is the refusal of the activation at `index`.
fn refused<T: std::fmt::Debug>(r: rknpu_driver::Result<T>, index: usize, case: &str) {
    match r {
        Err(Error::OutOfRange { what, index: i, .. }) => {
            assert_eq!(what, "activations", "{case}");
            assert_eq!(i, index, "{case}");
        }
        Err(e) => panic!("{case}: expected an out-of-range refusal, got {e}"),
        Ok(_) => panic!("{case}: accepted"),
    }
}

/// Activations of ones with `v` at `index`.
fn with(v: f32, index: usize) -> Vec<f32> {
    let mut x = vec![1.0f32; (M * K) as usize];
    x[index] = v;
    x
}

fn f16_bank(dev: &Device, w: f32) -> Arc<WeightBank> {
    let w = vec![f16::from_f32(w); (N * K) as usize];
    Arc::new(WeightBank::new(dev, (N, K), Weights::F16(&w)).unwrap())
}

#[test]
fn fp16_bank_refuses_what_fp16_cannot_hold() {
    let dev = dev();
    let mut mm = Matmul::new(&f16_bank(&dev, 0.0), M).unwrap();
    let cases = [
        ("NaN", f32::NAN),
        ("+inf", f32::INFINITY),
        ("-inf", f32::NEG_INFINITY),
        ("65520 (rounds to +inf)", 65520.0),
        ("-65520 (rounds to -inf)", -65520.0),
        ("1e5", 1e5),
    ];
    for (i, (case, v)) in cases.into_iter().enumerate() {
        let index = 7 + i * 5;
        refused(mm.run::<f32, f32>(&with(v, index)), index, case);
        let mut y = vec![0f32; (M * N) as usize];
        refused(mm.mul_mat(&with(v, index), &mut y), index, case);
        refused(mm.submit::<f32>(&with(v, index)).map(|_| ()), index, case);
    }
    // fp16 inputs that are already infinite or NaN.
    for (case, v) in [("f16 +inf", f16::INFINITY), ("f16 NaN", f16::NAN)] {
        let mut a = vec![f16::ONE; (M * K) as usize];
        a[40] = v;
        refused(mm.run::<_, f32>(&a), 40, case);
    }
}

#[test]
fn fp16_bank_runs_the_largest_values_fp16_holds() {
    let dev = dev();
    let mut mm = Matmul::new(&f16_bank(&dev, 1.0 / 1024.0), M).unwrap();
    // 65519 rounds down to 65504, fp16's largest finite value.
    for v in [65504.0f32, 65519.0, -65519.0] {
        let y = mm.run::<f32, f32>(&with(v, 3)).unwrap();
        let want = (65504.0f32.copysign(v) + (K - 1) as f32) / 1024.0;
        assert!(
            (y[0] - want).abs() <= want.abs() * 1e-3,
            "{v}: {} vs {want}",
            y[0]
        );
        assert!(y.iter().all(|r| r.is_finite()));
    }
}

#[test]
fn bf16_bank_refuses_what_bf16_cannot_hold() {
    let dev = dev();
    let w = vec![bf16::from_f32(0.0); (N * K) as usize];
    let bank = Arc::new(WeightBank::new(&dev, (N, K), Weights::Bf16(&w)).unwrap());
    let mut mm = Matmul::new(&bank, M).unwrap();
    refused(mm.run::<f32, f32>(&with(f32::NAN, 0)), 0, "NaN");
    refused(
        mm.run::<f32, f32>(&with(3.4e38, 9)),
        9,
        "3.4e38 rounds to +inf",
    );
    let mut a = vec![bf16::ONE; (M * K) as usize];
    a[63] = bf16::NEG_INFINITY;
    let mut y = vec![0f32; (M * N) as usize];
    refused(mm.run_into(&a, &mut y), 63, "bf16 -inf");
    // The largest finite bf16 runs (the zero weights keep the sums finite).
    let y = mm.run::<f32, f32>(&with(3.38e38, 9)).unwrap();
    assert!(y.iter().all(|&r| r == 0.0));
}

#[test]
fn int8_bank_refuses_non_finite_and_quantises_large_finite_values() {
    let dev = dev();
    let bank =
        Arc::new(WeightBank::new(&dev, (N, K), Weights::I8(&vec![1; (N * K) as usize])).unwrap());
    let mut mm = Matmul::new(&bank, M).unwrap();
    let mut y = vec![0f32; (M * N) as usize];
    refused(mm.mul_mat(&with(f32::NAN, 5), &mut y), 5, "NaN");
    refused(mm.mul_mat(&with(f32::INFINITY, 5), &mut y), 5, "+inf");
    // No 16-bit rounding on this path: 1e5 is an ordinary value (it sets its row's scale).
    let x = with(1e5, 0);
    mm.mul_mat(&x, &mut y).unwrap();
    let want: f32 = x[..K as usize].iter().sum();
    assert!((y[0] - want).abs() <= want * 0.01, "{} vs {want}", y[0]);
}

#[test]
fn a_refused_batch_member_submits_nothing_and_the_batch_still_runs() {
    let dev = dev();
    let members = vec![
        Matmul::new(&f16_bank(&dev, 1.0), M).unwrap(),
        Matmul::new(&f16_bank(&dev, 2.0), M).unwrap(),
    ];
    let mut batch = MatmulBatch::new(members).unwrap();
    let good = vec![1.0f32; (M * K) as usize];
    let bad = with(f32::INFINITY, 11);
    let (mut y0, mut y1) = (vec![0f32; (M * N) as usize], vec![0f32; (M * N) as usize]);
    let before = dev.emulator().unwrap().work_used();
    refused(
        batch.mul_mat(&[&good, &bad], &mut [&mut y0, &mut y1]),
        11,
        "second member +inf",
    );
    assert_eq!(dev.emulator().unwrap().work_used(), before, "nothing ran");
    batch
        .mul_mat(&[&good, &good], &mut [&mut y0, &mut y1])
        .unwrap();
    assert!(y0.iter().all(|&v| v == K as f32));
    assert!(y1.iter().all(|&v| v == 2.0 * K as f32));
}

#[test]
fn weights_that_are_or_round_to_infinity_are_refused() {
    let dev = dev();
    let refused_weights = |r: rknpu_driver::Result<WeightBank>, index: usize, case: &str| match r {
        Err(Error::OutOfRange { what, index: i, .. }) => {
            assert_eq!((what, i), ("weights", index), "{case}");
        }
        Err(e) => panic!("{case}: expected an out-of-range refusal, got {e}"),
        Ok(_) => panic!("{case}: accepted"),
    };
    let mut w = vec![0.5f32; (N * K) as usize];
    w[100] = 70000.0;
    refused_weights(
        WeightBank::new(&dev, (N, K), Weights::F32(&w)),
        100,
        "f32 70000 to fp16",
    );
    let mut h = vec![f16::ONE; (N * K) as usize];
    h[3] = f16::NAN;
    refused_weights(
        WeightBank::new(&dev, (N, K), Weights::F16(&h)),
        3,
        "f16 NaN",
    );
    let mut b = vec![bf16::ONE; (N * K) as usize];
    b[N as usize * K as usize - 1] = bf16::INFINITY;
    refused_weights(
        WeightBank::new(&dev, (N, K), Weights::Bf16(&b)),
        (N * K) as usize - 1,
        "bf16 +inf",
    );
    assert_eq!(dev.live_buffers(), 0, "refused banks free their buffers");
}
