//! The layers of an LLM's feed-forward block on the NPU, through the backend-facing
//! matmul API: weight banks packed once and shared by every M, f32 activations in and
//! f32 results out (`Matmul::mul_mat`), checked against a CPU reference computed in f64
//! from the unquantised weights and activations.
//!
//! It shows:
//!
//! 1. an int8 (W8A8) 4096 → 11008 layer, quantised per output channel from f32 weights,
//!    run for M = 1, 32 and 100 against one bank;
//! 2. an fp16 layer;
//! 3. an int4-weight layer (W4A8: int8 activations against int4 weights);
//! 4. an FFN's gate and up projections submitted as one job with `MatmulBatch`, checked
//!    bit for bit against separate runs.
//!
//! It opens a board if there is one and the emulated kernel (a strict simulator)
//! otherwise, prints the relative error and the time of each product, exits non-zero if
//! an error exceeds its bound, and prints `OK` last. Run it with:
//!
//! ```text
//! cargo run --release --example llm_layer
//! ```

use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, MatmulBatch, MatmulOptions, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::seeded::Rng;
use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Input features of the layers (a 7B model's hidden size).
const HIDDEN: u32 = 4096;
/// Output features of the int8 layer (a 7B model's FFN size).
const FFN: u32 = 11008;
/// Rows of activations the int8 layer runs: one token, a short and a longer prompt.
const INT8_ROWS: [u32; 3] = [1, 32, 100];
/// Output features of the fp16 layer.
const FP16_OUT: u32 = 11008;
/// Rows of the fp16 layer.
const FP16_ROWS: u32 = 32;
/// Output features of the int4-weight layer.
const INT4_OUT: u32 = 11008;
/// Rows of the int4-weight layer.
const INT4_ROWS: u32 = 32;
/// Output features of each of the gate and up projections.
const GATE_UP_OUT: u32 = 11008;
/// Rows of the gate/up batch.
const GATE_UP_ROWS: u32 = 32;

/// Bound on the relative error of int8 (W8A8) products. Weights and activations are
/// uniform in [-1, 1) and quantised symmetrically (weights per output channel,
/// activations per row), each to a step of about 1/127, so each value is off by at most
/// half a step. Over K = 4096 products the error of a result has a standard deviation of
/// about 0.12 against results whose largest is about 90, so the largest error of a few
/// hundred thousand results is near 0.6 %: measured, 0.49 % to 0.59 %. 2 % leaves a margin
/// of more than three times.
const INT8_BOUND: f64 = 0.02;
/// Bound on the relative error of fp16 products: fp16 rounding of weights and
/// activations (at most 2^-11 relative each) and fp32 sums give a standard deviation of
/// about 0.009 per result, a largest error near 0.04 % of the largest result: measured,
/// 0.024 %. 0.2 % leaves a margin of eight times.
const FP16_BOUND: f64 = 0.002;
/// Bound on the relative error of W4A8 products. Int4 weights per output channel take a
/// step of 1/7 (±7 symmetric), 18 times the int8 step: the error of a result has a
/// standard deviation of about 1.5 against results near 90 at most, and the largest
/// error of a few hundred thousand results is near 8 %. Measured: 7.8 % (9.0 % on a
/// 4096 × 4096 layer of 8 rows). 20 % leaves a margin of more than two times; a worst
/// case with every error aligned would be far larger, and is not what a layer sees.
const INT4_BOUND: f64 = 0.20;

/// The example's result type.
type Res<T = ()> = Result<T, Box<dyn Error>>;

/// `len` seeded values uniform in [-1, 1).
fn uniform(seed: u64, len: usize) -> Vec<f32> {
    let mut rng = Rng::from_seed(seed);
    (0..len).map(|_| rng.unit()).collect()
}

/// `y = x · wᵀ` in f64 for `x` (M×K row-major) and `w` (`[out][in]`, N×K), split over
/// the machine's cores by output channel.
fn reference(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let per = n.div_ceil(threads);
    // Results per thread, channel-major (`[n][m]`), transposed at the end.
    let parts: Vec<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = w
            .chunks(per * k)
            .map(|rows| {
                let x64 = &x64;
                s.spawn(move || {
                    let mut out = Vec::with_capacity(rows.len() / k * m);
                    for row in rows.chunks_exact(k) {
                        let row64: Vec<f64> = row.iter().map(|&v| v as f64).collect();
                        for xr in x64.chunks_exact(k) {
                            out.push(dot(xr, &row64));
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a reference thread panicked"))
            .collect()
    });
    let by_channel: Vec<f64> = parts.into_iter().flatten().collect();
    let mut y = vec![0f64; m * n];
    for (j, col) in by_channel.chunks_exact(m).enumerate() {
        for (i, &v) in col.iter().enumerate() {
            y[i * n + j] = v;
        }
    }
    y
}

/// A dot product in f64 with eight independent sums (so that it vectorises).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0f64; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f64 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// Milliseconds of `t`.
fn ms(t: Duration) -> f64 {
    t.as_secs_f64() * 1e3
}

/// `max |y − ref| / max |ref|`; infinite if a result is not finite.
fn relative_error(y: &[f32], reference: &[f64]) -> f64 {
    if y.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let diff = y
        .iter()
        .zip(reference)
        .fold(0f64, |d, (&a, &b)| d.max((a as f64 - b).abs()));
    let scale = reference.iter().fold(0f64, |s, v| s.max(v.abs()));
    if scale > 0.0 { diff / scale } else { diff }
}

/// Checks `y` against `reference` and prints the line of `what`; an error if the
/// relative error exceeds `bound`.
fn check(what: &str, y: &[f32], reference: &[f64], bound: f64, time: Option<Duration>) -> Res {
    let err = relative_error(y, reference);
    let time = time.map_or(String::new(), |t| format!(", {:.1} ms", ms(t)));
    println!(
        "{what}: relative error {:.4} % (bound {:.2} %){time}",
        err * 100.0,
        bound * 100.0,
    );
    if err > bound {
        return Err(format!(
            "{what}: relative error {:.4} % exceeds the bound of {:.2} %",
            err * 100.0,
            bound * 100.0
        )
        .into());
    }
    Ok(())
}

/// Runs `mul_mat` of `m` seeded rows against `bank` and checks it against the f64
/// product with the unquantised weights `w`.
fn run_layer(what: &str, bank: &Arc<WeightBank>, w: &[f32], m: u32, seed: u64, bound: f64) -> Res {
    run_layer_with(what, bank, w, (m, seed, bound), MatmulOptions::default())
}

/// [`run_layer`] with matmul options.
fn run_layer_with(
    what: &str,
    bank: &Arc<WeightBank>,
    w: &[f32],
    (m, seed, bound): (u32, u64, f64),
    options: MatmulOptions,
) -> Res {
    let (k, n) = (bank.layout().k as usize, bank.layout().n as usize);
    let x = uniform(seed, m as usize * k);
    let mut y = vec![0f32; m as usize * n];
    let mut mm = Matmul::with_options(bank, m, options)?;
    let t = Instant::now();
    mm.mul_mat(&x, &mut y)?;
    let time = t.elapsed();
    let want = reference(&x, w, m as usize, k, n);
    check(&format!("{what} M={m}"), &y, &want, bound, Some(time))
}

/// The int8 4096 → 11008 layer for every M of [`INT8_ROWS`], against one bank.
fn int8_layer(dev: &Device) -> Res {
    let (n, k) = (FFN, HIDDEN);
    let w = uniform(1, n as usize * k as usize);
    let t = Instant::now();
    let bank = Arc::new(WeightBank::quantize_f32_nk(dev, n, k, &w, Dtype::Int8)?);
    println!(
        "int8 {k}x{n}: bank of {} bytes quantised and packed in {:.1} ms",
        bank.layout().bytes,
        ms(t.elapsed())
    );
    for (i, &m) in INT8_ROWS.iter().enumerate() {
        run_layer(
            &format!("int8 {k}x{n}"),
            &bank,
            &w,
            m,
            100 + i as u64,
            INT8_BOUND,
        )?;
    }
    // The same bank with the scaling and the f32 conversion done by the DPU (one K
    // wave: K = 4096); the scales are read as fp16, which the bound absorbs.
    run_layer_with(
        &format!("int8 {k}x{n} dequantised on the NPU"),
        &bank,
        &w,
        (1, 100, INT8_BOUND),
        MatmulOptions::default().dequantize_on_npu(),
    )?;
    Ok(())
}

/// The fp16 layer.
fn fp16_layer(dev: &Device) -> Res {
    let (n, k) = (FP16_OUT, HIDDEN);
    let w = uniform(2, n as usize * k as usize);
    let bank = Arc::new(WeightBank::new(dev, (n, k), Weights::F32(&w))?);
    run_layer(
        &format!("fp16 {k}x{n}"),
        &bank,
        &w,
        FP16_ROWS,
        200,
        FP16_BOUND,
    )
}

/// The int4-weight (W4A8) layer.
fn int4_layer(dev: &Device) -> Res {
    let (n, k) = (INT4_OUT, HIDDEN);
    let w = uniform(3, n as usize * k as usize);
    let bank = Arc::new(WeightBank::quantize_f32_nk(dev, n, k, &w, Dtype::Int4)?);
    run_layer(
        &format!("w4a8 {k}x{n}"),
        &bank,
        &w,
        INT4_ROWS,
        300,
        INT4_BOUND,
    )
}

/// The gate and up projections in one job, against separate runs and the reference.
fn gate_up(dev: &Device) -> Res {
    let (n, k, m) = (GATE_UP_OUT, HIDDEN, GATE_UP_ROWS);
    let wg = uniform(4, n as usize * k as usize);
    let wu = uniform(5, n as usize * k as usize);
    let gate = Arc::new(WeightBank::quantize_f32_nk(dev, n, k, &wg, Dtype::Int8)?);
    let up = Arc::new(WeightBank::quantize_f32_nk(dev, n, k, &wu, Dtype::Int8)?);
    let x = uniform(400, m as usize * k as usize);
    let len = m as usize * n as usize;

    let mut batch = MatmulBatch::new(vec![Matmul::new(&gate, m)?, Matmul::new(&up, m)?])?;
    let (mut g, mut u) = (vec![0f32; len], vec![0f32; len]);
    let t = Instant::now();
    batch.mul_mat(&[&x, &x], &mut [&mut g, &mut u])?;
    let time = t.elapsed();

    let (mut g1, mut u1) = (vec![0f32; len], vec![0f32; len]);
    let (mut mg, mut mu) = (Matmul::new(&gate, m)?, Matmul::new(&up, m)?);
    let t = Instant::now();
    mg.mul_mat(&x, &mut g1)?;
    mu.mul_mat(&x, &mut u1)?;
    let separate = t.elapsed();
    let what = format!("gate/up {k}x{n} M={m}");
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits());
    if !same(&g, &g1) || !same(&u, &u1) {
        return Err(format!("{what}: the batch differs from separate runs").into());
    }
    println!(
        "{what}: one job {:.1} ms (two jobs {:.1} ms), bit-identical to separate runs",
        ms(time),
        ms(separate)
    );

    check(
        &format!("{what} gate"),
        &g,
        &reference(&x, &wg, m as usize, k as usize, n as usize),
        INT8_BOUND,
        None,
    )?;
    check(
        &format!("{what} up"),
        &u,
        &reference(&x, &wu, m as usize, k as usize, n as usize),
        INT8_BOUND,
        None,
    )
}

fn main() -> Res {
    let start = Instant::now();
    let dev = Device::open_or_emulated()?;
    println!("device: {}", dev.info());
    int8_layer(&dev)?;
    fp16_layer(&dev)?;
    int4_layer(&dev)?;
    gate_up(&dev)?;
    println!("total {:.1} s", start.elapsed().as_secs_f64());
    println!("OK");
    Ok(())
}
