//! The runs of `rknpu matmul`: seeded operands, the product on one device (or, through
//! the rocket driver, spread over one open device per core), and the check against a
//! CPU product computed here.

use crate::Failure;
use crate::matmul::fail;
use half::f16;
use rknpu_driver::compute::matmul::{
    Matmul, MatmulOptions, SpreadMatmul, Timings, WeightBank, Weights,
};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::{Dtype, OutType};
use rknpu_driver::seeded::Rng;
use rknpu_driver::sim::DmaCounters;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a run went: weight packing time, the executor's timings, the largest error and
/// how far it passes the bound (positive: a mismatch).
pub(crate) struct Checked {
    pub(crate) t_pack_b: Duration,
    pub(crate) timings: Timings,
    pub(crate) err: f64,
    pub(crate) bound: f64,
    /// What the emulated kernel's DMA engines moved for the product (not the weight
    /// packing), when the device is the emulated kernel.
    pub(crate) dma: Option<DmaCounters>,
}

/// Seeded fp16-representable operands of `spec`: A (M×K) and B (K×N), row-major, in [-1, 1).
fn float_operands(spec: &MatmulSpec, rng: &mut Rng) -> (Vec<f32>, Vec<f32>) {
    use rknpu_driver::float::{f16_to_f32, f32_to_f16};
    let (m, k, n) = (spec.m as usize, spec.k as usize, spec.n as usize);
    let q = |v: f32| f16_to_f32(f32_to_f16(v));
    let a = (0..m * k).map(|_| q(rng.unit())).collect();
    let b = (0..k * n).map(|_| q(rng.unit())).collect();
    (a, b)
}

/// Seeded integer operands of `spec` (int4: -8..=7, int8: -128..=127), as
/// [`float_operands`].
fn int_operands(spec: &MatmulSpec, rng: &mut Rng) -> (Vec<i32>, Vec<i32>) {
    let (m, k, n) = (spec.m as usize, spec.k as usize, spec.n as usize);
    let (lo, hi) = if spec.dtype == Dtype::Int4 {
        (-8, 7)
    } else {
        (-128, 127)
    };
    let a = (0..m * k).map(|_| rng.int(lo, hi)).collect();
    let b = (0..k * n).map(|_| rng.int(lo, hi)).collect();
    (a, b)
}

/// The largest error of the fp16 product `c` and how far it passes its bound: fp32
/// summation in any order keeps |error| <= E = (K + 1) 2^-24 sum |a b|; an fp16 result is
/// that sum rounded to nearest fp16 by the DPU, which adds at most half an fp16 ulp of
/// it: 2^-11 (|exact| + E) for normal values, 2^-25 below them.
fn check_f32(spec: &MatmulSpec, (a, b): (&[f32], &[f32]), c: &[f32]) -> (f64, f64) {
    let (mu, ku, nu) = (spec.m as usize, spec.k as usize, spec.n as usize);
    let fp16_out = spec.out == OutType::Fp16;
    let (mut worst, mut bound) = (0f64, 0f64);
    let mut row = vec![0f64; nu];
    let mut mag = vec![0f64; nu];
    for i in 0..mu {
        row.fill(0.0);
        mag.fill(0.0);
        for kk in 0..ku {
            let x = a[i * ku + kk] as f64;
            for j in 0..nu {
                let p = x * b[kk * nu + j] as f64;
                row[j] += p;
                mag[j] += p.abs();
            }
        }
        for j in 0..nu {
            let e = (c[i * nu + j] as f64 - row[j]).abs();
            let mut tol = (ku as f64 + 1.0) * 2f64.powi(-24) * mag[j];
            if fp16_out {
                tol += (row[j].abs() + tol) * 2f64.powi(-11) + 2f64.powi(-25);
            }
            worst = worst.max(e);
            bound = bound.max(e - tol);
        }
    }
    (worst, bound)
}

/// The largest difference of the integer product `c` from the exact one (an int16 result
/// is the sum saturated to int16); any difference is a mismatch.
fn check_int(spec: &MatmulSpec, (a, b): (&[i32], &[i32]), c: &[i64]) -> (f64, f64) {
    let (mu, ku, nu) = (spec.m as usize, spec.k as usize, spec.n as usize);
    let mut reference = vec![0i64; mu * nu];
    for i in 0..mu {
        let r = &mut reference[i * nu..(i + 1) * nu];
        for kk in 0..ku {
            let x = a[i * ku + kk] as i64;
            for (o, &y) in r.iter_mut().zip(&b[kk * nu..(kk + 1) * nu]) {
                *o += x * y as i64;
            }
        }
        if spec.out == OutType::Int16 {
            for o in r {
                *o = (*o).clamp(i16::MIN.into(), i16::MAX.into());
            }
        }
    }
    let worst = c
        .iter()
        .zip(&reference)
        .map(|(x, y)| (x - y).abs())
        .max()
        .unwrap_or(0) as f64;
    (worst, worst)
}

/// An operand element `rknpu matmul` checks on one device: fp16-representable `f32`
/// values or integers, each with its seeded operands, its weights, its result type and
/// its CPU check.
trait Operand: Copy + Sized {
    /// The element of the product read back.
    type Out;
    /// Seeded A (M×K) and B (K×N) of `spec`, row-major.
    fn operands(spec: &MatmulSpec, rng: &mut Rng) -> (Vec<Self>, Vec<Self>);
    /// B as the weights a bank packs.
    fn weights(b: &[Self]) -> Weights<'_>;
    /// The product of `a` and the bank of `mm`.
    fn run(mm: &mut Matmul, a: &[Self]) -> rknpu_driver::Result<Vec<Self::Out>>;
    /// The largest error of `c` and how far it passes its bound.
    fn check(spec: &MatmulSpec, ab: (&[Self], &[Self]), c: &[Self::Out]) -> (f64, f64);
}

impl Operand for f32 {
    type Out = f32;
    fn operands(spec: &MatmulSpec, rng: &mut Rng) -> (Vec<f32>, Vec<f32>) {
        float_operands(spec, rng)
    }
    fn weights(b: &[f32]) -> Weights<'_> {
        Weights::F32(b)
    }
    fn run(mm: &mut Matmul, a: &[f32]) -> rknpu_driver::Result<Vec<f32>> {
        mm.run::<f32, f32>(a)
    }
    fn check(spec: &MatmulSpec, ab: (&[f32], &[f32]), c: &[f32]) -> (f64, f64) {
        check_f32(spec, ab, c)
    }
}

impl Operand for i32 {
    type Out = i64;
    fn operands(spec: &MatmulSpec, rng: &mut Rng) -> (Vec<i32>, Vec<i32>) {
        int_operands(spec, rng)
    }
    fn weights(b: &[i32]) -> Weights<'_> {
        Weights::Int(b)
    }
    fn run(mm: &mut Matmul, a: &[i32]) -> rknpu_driver::Result<Vec<i64>> {
        mm.run::<i32, i64>(a)
    }
    fn check(spec: &MatmulSpec, ab: (&[i32], &[i32]), c: &[i64]) -> (f64, f64) {
        check_int(spec, ab, c)
    }
}

/// `plan` on one device: fp16 operands checked against an f64 product ([`check_f32`]),
/// int8 or int4 operands checked exactly ([`check_int`]).
pub(crate) fn run_one(
    dev: &Device,
    plan: Plan,
    options: MatmulOptions,
    rng: &mut Rng,
) -> Result<Checked, Failure> {
    if plan.spec.dtype == Dtype::Fp16 {
        run_as::<f32>(dev, (plan, options), rng)
    } else {
        run_as::<i32>(dev, (plan, options), rng)
    }
}

/// One product on one device with `T` operands: seeded, B packed into a bank, run and
/// checked (largest error, how far past its bound).
fn run_as<T: Operand>(
    dev: &Device,
    (plan, options): (Plan, MatmulOptions),
    rng: &mut Rng,
) -> Result<Checked, Failure> {
    let spec = plan.spec;
    let (a, b) = T::operands(&spec, rng);
    let t = Instant::now();
    let bank = WeightBank::from_kn_in(dev, &plan.layout, T::weights(&b)).map_err(|e| fail(&e))?;
    let bank = Arc::new(bank);
    let t_pack_b = t.elapsed();
    let mut mm = Matmul::for_plan_with(&bank, plan, options).map_err(|e| fail(&e))?;
    let counting = Counting::start(dev);
    let c = T::run(&mut mm, &a).map_err(|e| fail(&e))?;
    let dma = counting.stop();
    let (err, bound) = T::check(&spec, (&a, &b), &c);
    Ok(Checked {
        t_pack_b,
        timings: mm.timings,
        err,
        bound,
        dma,
    })
}

/// `v` (rows × cols, row-major) transposed and converted by `f`.
fn transposed<T: Copy, U>(v: &[T], (rows, cols): (usize, usize), f: impl Fn(T) -> U) -> Vec<U> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| (r, c)))
        .map(|(r, c)| f(v[r * cols + c]))
        .collect()
}

/// Whether `spec` runs as a [`SpreadMatmul`] over `devices` open files of the rocket
/// driver: int8 or fp16 with the widest result type (what a spread matmul computes), on
/// more than one device.
pub(crate) fn spreads(spec: &MatmulSpec, devices: u32) -> bool {
    devices > 1
        && matches!(
            (spec.dtype, spec.out),
            (Dtype::Int8, OutType::Int32) | (Dtype::Fp16, OutType::Fp32)
        )
}

/// `spec` as a [`SpreadMatmul`] over `devices` (each an open file of the rocket driver,
/// one core each; every share submitted at once), checked as on one device. The
/// timings: weight packing is every share's bank, `submit_wait` the whole call (every
/// share's A, submission, wait and results).
pub(crate) fn run_spread(
    devices: &[Device],
    spec: MatmulSpec,
    rng: &mut Rng,
) -> Result<Checked, Failure> {
    let (m, k, n) = (spec.m as usize, spec.k as usize, spec.n as usize);
    let spread = |w: Weights<'_>| -> Result<(SpreadMatmul, Duration), Failure> {
        let t = Instant::now();
        let mm = SpreadMatmul::new(devices, w, (spec.n, spec.k), spec.m).map_err(|e| fail(&e))?;
        let t_pack_b = t.elapsed();
        for (i, (part, cols)) in mm.parts().zip(mm.columns()).enumerate() {
            outln!(
                "share: device {i}, columns {}..{}: {}",
                cols.start,
                cols.end,
                part.plan()
            );
        }
        Ok((mm, t_pack_b))
    };
    let mut timings = Timings::default();
    if spec.dtype == Dtype::Fp16 {
        let (a, b) = float_operands(&spec, rng);
        let (mut mm, t_pack_b) = spread(Weights::F16(&transposed(&b, (k, n), f16::from_f32)))?;
        let a16: Vec<f16> = a.iter().map(|&v| f16::from_f32(v)).collect();
        let mut c = vec![0f32; m * n];
        let counting = Counting::start(&devices[0]);
        let t = Instant::now();
        mm.run_into(&a16, &mut c).map_err(|e| fail(&e))?;
        timings.submit_wait = t.elapsed();
        let dma = counting.stop();
        let (err, bound) = check_f32(&spec, (&a, &b), &c);
        return Ok(Checked {
            t_pack_b,
            timings,
            err,
            bound,
            dma,
        });
    }
    let (a, b) = int_operands(&spec, rng);
    let (mut mm, t_pack_b) = spread(Weights::I8(&transposed(&b, (k, n), |v| v as i8)))?;
    let a8: Vec<i8> = a.iter().map(|&v| v as i8).collect();
    let mut c = vec![0i32; m * n];
    let counting = Counting::start(&devices[0]);
    let t = Instant::now();
    mm.run_into(&a8, &mut c).map_err(|e| fail(&e))?;
    timings.submit_wait = t.elapsed();
    let dma = counting.stop();
    let wide: Vec<i64> = c.iter().map(|&v| v.into()).collect();
    let (err, bound) = check_int(&spec, (&a, &b), &wide);
    Ok(Checked {
        t_pack_b,
        timings,
        err,
        bound,
        dma,
    })
}

/// The emulated kernel's DMA counters over one product: zeroed at the start (the kernel
/// may be the process-wide one), read at the end. Nothing on a real device.
struct Counting<'d>(Option<&'d rknpu_driver::emu::EmuKernel>);

impl<'d> Counting<'d> {
    fn start(dev: &'d Device) -> Counting<'d> {
        let emu = dev.emulator();
        if let Some(k) = emu {
            k.reset_dma_counters();
        }
        Counting(emu)
    }

    fn stop(self) -> Option<DmaCounters> {
        self.0.map(|k| k.dma_counters())
    }
}
