//! Residual activations (`MatmulOptions::residual_activations`,
//! `MatmulOptions::activation_passes`): f32 activations quantised in two or three passes,
//! every pass run on the NPU as rows of one product and added by the host. Checked bit for bit against the DPU arithmetic computed here, for accuracy
//! against an f64 product, on every path that serves them, and for the typed refusals.

mod common;

use common::Rng;
use common::reference::rel_err;
use half::f16;
use rknpu_driver::Error;
use rknpu_driver::compute::matmul::{
    Matmul, MatmulOptions, WeightBank, Weights, quantize_groups_i8, quantize_passes_i8,
};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::single::Dtype;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn residual() -> MatmulOptions {
    MatmulOptions::default().residual_activations()
}

fn h(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

/// Whether fp16 holds `s` as zero or a normal number (docs/matmul.md: the NPU multiplies
/// by such a scale; the host by any other).
fn fp16_normal(s: f32) -> bool {
    s == 0.0 || (s.abs() >= 2f32.powi(-14) && s.abs() < 65504.0)
}

/// Each result is, in this order, the first pass's groups and then each later pass's,
/// each group's integer sum times its row scale and its channel scale as the DPU
/// multiplies them (fp16 operands, f32 products; a scale fp16 holds only as a subnormal
/// multiplied on the host), added in f32; for two and three passes.
#[test]
fn every_pass_is_each_groups_dpu_arithmetic_summed() {
    let (n, k, group) = (24usize, 160usize, 64usize);
    let mut rng = Rng(0x2e51);
    let w: Vec<f32> = (0..n * k).map(|_| rng.float() - 0.5).collect();
    let groups = k.div_ceil(group);
    for spec in ["emu", "emu:rocket"] {
        let dev = Device::open_spec(spec).unwrap();
        let bank = Arc::new(
            WeightBank::quantize_f32_nk_grouped(&dev, n as u32, k as u32, &w, group as u32)
                .unwrap(),
        );
        let gs = bank.group_scales().unwrap().to_vec();
        let (wq, _) = quantize_groups_i8(&w, k, group).unwrap();
        for (m, cores, passes) in [(1usize, 1u32, 2u32), (4, 3, 2), (1, 1, 3), (3, 2, 3)] {
            let x: Vec<f32> = (0..m * k).map(|_| 4.0 * rng.float() - 2.0).collect();
            let (xq, xs) = quantize_passes_i8(&x, k, group, passes).unwrap();
            let opts = MatmulOptions::default()
                .activation_passes(passes)
                .cores(cores);
            let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
            let plan_rows = passes * m as u32;
            assert_eq!((mm.rows(), mm.plan().spec.m), (m as u32, plan_rows));
            let mut y = vec![0f32; m * n];
            mm.mul_mat(&x, &mut y).unwrap();
            for r in 0..m {
                for c in 0..n {
                    let mut want = None;
                    for row in (0..passes as usize).map(|p| p * m + r) {
                        for g in 0..groups {
                            let (k0, k1) = (g * group, (g * group + group).min(k));
                            let acc: i64 = (k0..k1)
                                .map(|i| i64::from(xq[row * k + i]) * i64::from(wq[c * k + i]))
                                .sum();
                            let (xs, ws) = (xs[row * groups + g], gs[g * n + c].to_f32());
                            // A row scale fp16 holds only as a subnormal (a third pass's) is
                            // left to the host: the DPU multiplies by 1, the host by it.
                            let d = match fp16_normal(xs) {
                                true => (acc as f32 * h(xs)) * ws,
                                false => (acc as f32 * ws) * xs,
                            };
                            want = Some(want.map_or(d, |s: f32| s + d));
                        }
                    }
                    let got = y[r * n + c];
                    assert_eq!(
                        got.to_bits(),
                        want.unwrap().to_bits(),
                        "{spec} m {m}, {passes} passes [{r}][{c}]"
                    );
                }
            }
        }
    }
}

/// Against the bank's own weights (its integers times its fp16 scales) the activations'
/// rounding is most of a one-pass product's error; two passes take all but a small part
/// of it away, and a third most of what is left, on a grouped bank (with and without
/// offsets) and on a per-channel bank dequantised on the NPU, and on a call of fewer rows
/// than the matmul's.
#[test]
fn each_pass_leaves_a_small_part_of_the_error_before_it() {
    let (m, k, n) = (5usize, 512usize, 48usize);
    let mut rng = Rng(0x7e5d);
    let w: Vec<f32> = (0..n * k).map(|_| rng.float() - 0.5).collect();
    let x: Vec<f32> = (0..m * k).map(|_| 2.0 * rng.float() - 1.0).collect();
    let dev = Device::open_spec("emu").unwrap();
    let grouped =
        Arc::new(WeightBank::quantize_f32_nk_grouped(&dev, n as u32, k as u32, &w, 32).unwrap());
    let (wq, ws) = quantize_groups_i8(&w, k, 32).unwrap();
    let held: Vec<f32> = (0..n * k)
        .map(|i| f32::from(wq[i]) * h(ws[i / k * (k / 32) + i % k / 32]))
        .collect();
    let channel =
        Arc::new(WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &w, Dtype::Int8).unwrap());
    let ch_scales = channel.scales().unwrap().to_vec();
    let (cq, _) = rknpu_driver::kernels::matmul::quant::quantize_weights_i8(&w, n, k).unwrap();
    let ch_held: Vec<f32> = (0..n * k)
        .map(|i| f32::from(cq[i]) * h(ch_scales[i / k]))
        .collect();
    // With an offset per group and channel (multiples of 1/4, exact in fp16), added on
    // the host from the exact activations' group sums.
    let offsets: Vec<f32> = (0..n * k / 32)
        .map(|i| (i % 7) as f32 * 0.25 - 0.75)
        .collect();
    let with_offsets = Arc::new(
        WeightBank::from_i8_nk_grouped_offset(&dev, (n as u32, k as u32, 32), &wq, &ws, &offsets)
            .unwrap(),
    );
    let off_held: Vec<f32> = (0..n * k)
        .map(|i| held[i] + offsets[i / k * (k / 32) + i % k / 32])
        .collect();
    for (bank, weights, opts) in [
        (&grouped, &held, MatmulOptions::default()),
        (&with_offsets, &off_held, MatmulOptions::default()),
        (
            &channel,
            &ch_held,
            MatmulOptions::default().dequantize_on_npu(),
        ),
    ] {
        let err = |opts: MatmulOptions, rows: usize| {
            let mut mm = Matmul::with_options(bank, m as u32, opts).unwrap();
            let mut y = vec![0f32; rows * n];
            mm.mul_mat(&x[..rows * k], &mut y).unwrap();
            rel_err(&x[..rows * k], weights, &y, (rows, k, n))
        };
        for rows in [m, 2] {
            let [one, two, three] = [1, 2, 3].map(|p| err(opts.activation_passes(p), rows));
            eprintln!("rows {rows}: passes one {one:.3e}, two {two:.3e}, three {three:.3e}");
            assert!(two * 20.0 < one, "rows {rows}: {one} -> {two}");
            assert!(three * 5.0 < two, "rows {rows}: {two} -> {three}");
        }
    }
}

/// A submitted call returns what the blocking call returns.
#[test]
fn a_submitted_call_adds_both_passes_too() {
    let (m, k, n) = (3usize, 96usize, 40usize);
    let mut rng = Rng(0x51b);
    let w: Vec<f32> = (0..n * k).map(|_| rng.float() - 0.5).collect();
    let x: Vec<f32> = (0..m * k).map(|_| rng.float() - 0.5).collect();
    let dev = Device::open_spec("emu").unwrap();
    let bank =
        Arc::new(WeightBank::quantize_f32_nk_grouped(&dev, n as u32, k as u32, &w, 32).unwrap());
    let mut mm = Matmul::with_options(&bank, m as u32, residual()).unwrap();
    let mut blocking = vec![0f32; m * n];
    mm.mul_mat(&x, &mut blocking).unwrap();
    let mut submitted = vec![0f32; m * n];
    let pending = mm.submit(&x).unwrap();
    pending
        .wait(Instant::now() + Duration::from_secs(5), &mut submitted)
        .unwrap();
    assert_eq!(blocking, submitted);
}

/// What residual activations do not offer is a typed error.
#[test]
fn residual_activations_refuse_what_they_do_not_compute() {
    let dev = Device::open_spec("emu").unwrap();
    let w = vec![0.25f32; 32 * 64];
    // Not dequantised on the NPU: an int8 bank by default, an fp16 bank.
    let int8 = Arc::new(WeightBank::quantize_f32_nk(&dev, 32, 64, &w, Dtype::Int8).unwrap());
    let halves = vec![f16::from_f32(0.25); 32 * 64];
    let fp16 = Arc::new(WeightBank::new(&dev, (32, 64), Weights::F16(&halves)).unwrap());
    for bank in [&int8, &fp16] {
        assert!(matches!(
            Matmul::with_options(bank, 1, residual()),
            Err(Error::Precision { .. })
        ));
    }
    // Activations quantised by the caller: the second pass needs the f32 values.
    let grouped = Arc::new(WeightBank::quantize_f32_nk_grouped(&dev, 32, 64, &w, 32).unwrap());
    let mut mm = Matmul::with_options(&grouped, 1, residual()).unwrap();
    let mut y = vec![0f32; 32];
    assert!(matches!(
        mm.mul_mat_quantized(&[1; 64], &[0.1; 2], &mut y),
        Err(Error::Precision { .. })
    ));
    // Rows whose two passes are past what a plan counts.
    assert!(matches!(
        Matmul::with_options(&grouped, u32::MAX, residual()),
        Err(Error::OutOfRange { what: "rows", .. })
    ));
    // No pass, or more than three.
    for passes in [0, 4] {
        let opts = MatmulOptions::default().activation_passes(passes);
        assert!(matches!(
            Matmul::with_options(&grouped, 1, opts),
            Err(Error::OutOfRange {
                what: "activation passes",
                ..
            })
        ));
    }
}

/// The cost model counts every task of the program: a host-scaled product's is the
/// plan's own cost; dequantising on the NPU adds tasks, and the second pass adds the
/// dequantisation tasks of its rows, but not a second read of the weights, so it costs
/// less than twice one pass.
#[test]
fn the_second_pass_is_costed_and_costs_less_than_a_second_call() {
    let profile = rknpu_driver::kernels::matmul::cost::HardwareProfile::rk3588();
    let dev = Device::open_spec("emu").unwrap();
    let (n, k) = (256u32, 512u32);
    let w = vec![0.5f32; (n * k) as usize];
    let channel = Arc::new(WeightBank::quantize_f32_nk(&dev, n, k, &w, Dtype::Int8).unwrap());
    let grouped = Arc::new(WeightBank::quantize_f32_nk_grouped(&dev, n, k, &w, 32).unwrap());
    let cost = |bank: &Arc<WeightBank>, opts: MatmulOptions| {
        let mm = Matmul::with_options(bank, 1, opts).unwrap();
        mm.modelled_seconds(&profile).unwrap()
    };
    let host = cost(&channel, MatmulOptions::default());
    // A program of the plan's tasks alone is what the plan's own cost models, on either
    // driver's profile.
    let rocket = rknpu_driver::kernels::matmul::cost::HardwareProfile::rk3588_rocket();
    for (profile, m) in [(&profile, 1), (&profile, 96), (&rocket, 96)] {
        let mm = Matmul::new(&channel, m).unwrap();
        let (got, want) = (
            mm.modelled_seconds(profile).unwrap(),
            mm.plan().cost(profile).unwrap().seconds,
        );
        assert!(
            (got - want).abs() <= 1e-12 * want,
            "m {m}: {got} vs the plan's {want}"
        );
    }
    let npu = cost(&channel, MatmulOptions::default().dequantize_on_npu());
    let one = cost(&grouped, MatmulOptions::default());
    let two = cost(&grouped, residual());
    let three = cost(&grouped, MatmulOptions::default().activation_passes(3));
    eprintln!(
        "host {host:e} s, npu {npu:e} s, grouped {one:e} s, residual {two:e} s, three passes {three:e} s"
    );
    assert!(host < npu && npu < one, "{host} {npu} {one}");
    assert!(one < two && two < 2.0 * one, "{one} {two}");
    assert!(two < three && three < 3.0 * one, "{one} {two} {three}");
    let mut bad = profile.clone();
    bad.per_task_vendor_s = f64::NAN;
    assert!(
        Matmul::new(&grouped, 1)
            .unwrap()
            .modelled_seconds(&bad)
            .is_err()
    );
}
