//! Dequantisation on the NPU on the device under test: per-channel int8 banks with
//! `dequantize_on_npu`, grouped int8 banks (a K wave per group) with one pass of
//! activations and with residual activations (two and three passes). Each result is checked bit
//! for bit against the DPU arithmetic the library's simulator defines (the int32 sum
//! cast to fp32, times the row scale and the channel scale read as fp16, in fp32; the
//! host adds the waves and passes in order), so a board that reads an operand another
//! way fails here by name rather than by a tolerance.

use half::f16;
use rknpu_driver::compute::matmul::{
    Matmul, MatmulOptions, WeightBank, quantize_groups_i8, quantize_passes_i8,
};
use rknpu_driver::kernels::single::Dtype;
use std::sync::Arc;

fn h(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

/// Seeded values in [−1, 1).
fn floats(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// What the NPU computes for result `[r][c]`: over `rows` (the passes of row `r`) and
/// the `groups` of `group` channels, each group's exact sum times its row scale and its
/// channel scale as fp16, added in f32 in that order; a row scale fp16 cannot hold as a
/// normal number applied by the host after the NPU's product.
fn expected(
    (xq, xs): (&[i8], &[f32]),
    (wq, ws): (&[i8], &dyn Fn(usize, usize) -> f32),
    rows: &[usize],
    c: usize,
    (k, group): (usize, usize),
) -> f32 {
    let groups = k.div_ceil(group);
    let mut sum = None;
    for &row in rows {
        for g in 0..groups {
            let acc: i64 = (g * group..(g * group + group).min(k))
                .map(|i| i64::from(xq[row * k + i]) * i64::from(wq[c * k + i]))
                .sum();
            let s = xs[row * groups + g];
            // A row scale below fp16's normal range is the host's: the NPU multiplies
            // by 1 and the host by the scale (a residual pass's scales often are).
            let d = if s == 0.0 || s.abs() >= 2f32.powi(-14) {
                (acc as f32 * h(s)) * ws(c, g)
            } else {
                (acc as f32 * ws(c, g)) * s
            };
            sum = Some(sum.map_or(d, |s: f32| s + d));
        }
    }
    sum.unwrap_or(0.0)
}

/// A per-channel int8 bank dequantised on the NPU, on one core and on every core: each
/// result is the DPU's product of the sum and the two fp16 scales.
#[test]
fn npu_dequantisation_is_the_dpu_arithmetic() {
    let dev = super::dev();
    let (m, k, n) = (3usize, 320usize, 96usize);
    let w = floats(n * k, 7);
    let bank =
        Arc::new(WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &w, Dtype::Int8).unwrap());
    let ws = bank.scales().unwrap().to_vec();
    let (wq, _) = rknpu_driver::kernels::matmul::quant::quantize_weights_i8(&w, n, k).unwrap();
    let x = floats(m * k, 11);
    let (xq, xs) = quantize_groups_i8(&x, k, k).unwrap();
    for cores in [1, 3] {
        let opts = MatmulOptions::default().dequantize_on_npu().cores(cores);
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        let mut y = vec![0f32; m * n];
        mm.mul_mat(&x, &mut y).unwrap();
        for r in 0..m {
            for c in 0..n {
                let want = expected((&xq, &xs), (&wq, &|c, _| h(ws[c])), &[r], c, (k, k));
                assert_eq!(
                    y[r * n + c].to_bits(),
                    want.to_bits(),
                    "cores {cores} [{r}][{c}]: {} vs {want}",
                    y[r * n + c]
                );
            }
        }
    }
}

/// A grouped bank (groups of 64, K not a multiple of them): one pass and residual
/// activations in two and three passes, on one core and on every core, each result the
/// DPU arithmetic of every group of every pass.
#[test]
fn grouped_banks_and_residual_activations_are_the_dpu_arithmetic() {
    let dev = super::dev();
    let (m, k, n, group) = (2usize, 224usize, 64usize, 64usize);
    let w = floats(n * k, 13);
    let bank = Arc::new(
        WeightBank::quantize_f32_nk_grouped(&dev, n as u32, k as u32, &w, group as u32).unwrap(),
    );
    let gs = bank.group_scales().unwrap().to_vec();
    let (wq, _) = quantize_groups_i8(&w, k, group).unwrap();
    let ws = |c: usize, g: usize| gs[g * n + c].to_f32();
    let x = floats(m * k, 17);
    for passes in 1..=3u32 {
        let (xq, xs) = quantize_passes_i8(&x, k, group, passes).unwrap();
        for cores in [1, 3] {
            let opts = MatmulOptions::default()
                .cores(cores)
                .activation_passes(passes);
            let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
            let mut y = vec![0f32; m * n];
            mm.mul_mat(&x, &mut y).unwrap();
            for r in 0..m {
                let rows: Vec<usize> = (0..passes as usize).map(|p| p * m + r).collect();
                for c in 0..n {
                    let want = expected((&xq, &xs), (&wq, &ws), &rows, c, (k, group));
                    let got = y[r * n + c];
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{passes} passes, cores {cores} [{r}][{c}]: {got} vs {want}"
                    );
                }
            }
        }
    }
}
