//! `rknpu matmul`: seeded random matrices multiplied on the NPU (or the emulated kernel)
//! and checked against the CPU.

use crate::{Failure, parse_u32, usage};
use rknpu_driver::compute::matmul::{Matmul, MatmulOptions, Timings, WeightBank};
use rknpu_driver::device::{Device, Interface};
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::{Dtype, OutType};
use rknpu_driver::seeded::Rng;
use rknpu_driver::sim::DmaCounters;
use std::time::{Duration, Instant};

/// The weight precision `--dtype` names (`rknpu matmul`, `rknpu model-cost`).
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum DtypeArg {
    /// int8 (a random run: values -128..127).
    Int8,
    /// int4, run as W4A8 with int8 activations (a random run: values -8..7).
    Int4,
    /// fp16 (a random run: values in [-1, 1)).
    Fp16,
}

impl DtypeArg {
    /// The library's type.
    pub(crate) fn dtype(self) -> Dtype {
        match self {
            DtypeArg::Int8 => Dtype::Int8,
            DtypeArg::Int4 => Dtype::Int4,
            DtypeArg::Fp16 => Dtype::Fp16,
        }
    }
}

/// The result type `--out` names.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OutArg {
    /// int32 (int8 or int4 input).
    Int32,
    /// int16, the sum saturated (int4 input).
    Int16,
    /// fp32 (fp16 input).
    Fp32,
    /// fp16 (fp16 input): written by the NPU where K is within one wave, the host's
    /// rounding of the summed fp32 partials beyond.
    Fp16,
}

/// The arguments of `rknpu matmul`.
#[derive(clap::Args)]
pub(crate) struct MatmulArgs {
    /// Rows of A and C.
    #[arg(long, value_name = "M", value_parser = parse_positive)]
    m: u32,
    /// Columns of A, rows of B (with --gguf: the tensor's first dimension).
    #[arg(long, value_name = "K", value_parser = parse_positive, required_unless_present = "gguf", conflicts_with = "gguf")]
    k: Option<u32>,
    /// Columns of B and C (with --gguf: the tensor's second dimension).
    #[arg(long, value_name = "N", value_parser = parse_positive, required_unless_present = "gguf", conflicts_with = "gguf")]
    n: Option<u32>,
    /// The input precision (with --gguf, the bank's type; default int8 for quantised
    /// tensors, fp16 for F16, F32 and BF16).
    #[arg(long, value_enum, required_unless_present = "gguf")]
    dtype: Option<DtypeArg>,
    /// Take the weights from this GGUF file (the tensor --tensor names, n rows of k:
    /// ggml's src0 of mul_mat) through the library's loader, multiply seeded f32
    /// activations with mul_mat and check them against an f64 product with the
    /// dequantised tensor.
    #[arg(long, value_name = "FILE", requires = "tensor", conflicts_with_all = ["out", "trace", "emit", "plan_only", "incremental"])]
    gguf: Option<String>,
    /// The tensor of --gguf to load.
    #[arg(long, value_name = "NAME", requires = "gguf")]
    tensor: Option<String>,
    /// The result type, where the precision offers it: int32 (int8, int4), int16 (int4),
    /// fp32 or fp16 (fp16). Default: the widest, int32 or fp32.
    #[arg(long, value_enum, value_name = "TYPE")]
    out: Option<OutArg>,
    /// The most cores the columns (or K, or M) are split over (the plan may use fewer
    /// where the cost model says so). Default: every core the device has (three, the
    /// RK3588's, with --plan-only and --emit).
    #[arg(long, value_name = "1|2|3", value_parser = clap::value_parser!(u32).range(1..=3))]
    cores: Option<u32>,
    /// The device: auto (the NPU, else the emulated kernel), emu, emu:rocket,
    /// emu:vendor-0.9.6 or a node path. Default: auto.
    #[arg(long, value_name = "DEVICE")]
    device: Option<String>,
    /// The seed of the random matrices (default 1).
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// Record the run to FILE (docs/trace-format.md).
    #[arg(long, value_name = "FILE")]
    trace: Option<String>,
    /// Write the plan's program to FILE, bound at fixed addresses, without running it (no
    /// device is opened); print its buffers and the `rknpu verify` command that checks
    /// them.
    #[arg(long, value_name = "FILE")]
    emit: Option<String>,
    /// Print the plan, the minimum bytes and the modelled cost only (no device).
    #[arg(long)]
    plan_only: bool,
    /// Write the tasks after the first two of each core's chain as incremental bodies
    /// (vendor driver only; refused on rocket).
    #[arg(long)]
    incremental: bool,
}

/// A positive decimal or `0x` hexadecimal number of 32 bits (a `clap` value parser).
fn parse_positive(s: &str) -> Result<u32, String> {
    match parse_u32(s)? {
        0 => Err("not a positive number".into()),
        v => Ok(v),
    }
}

/// How a run went: weight packing time, the executor's timings, the largest error and
/// how far it passes the bound (positive: a mismatch).
struct Checked {
    t_pack_b: Duration,
    timings: Timings,
    err: f64,
    bound: f64,
    /// What the emulated kernel's DMA engines moved for the product (not the weight
    /// packing), when the device is the emulated kernel.
    dma: Option<DmaCounters>,
}

/// The bytes of A (M×K), B (K×N) and C (M×N) once each, in their element types: A and B at
/// the input's bits (int4: half a byte per element, rounded up to whole bytes), C at the
/// result type's bytes. No schedule can move less.
fn minimum_bytes(spec: &MatmulSpec) -> (u64, u64, u64) {
    let (m, k, n) = (u64::from(spec.m), u64::from(spec.k), u64::from(spec.n));
    let bits = u64::from(spec.dtype.bits());
    (
        (m * k * bits).div_ceil(8),
        (k * n * bits).div_ceil(8),
        m * n * u64::from(spec.out.bytes()),
    )
}

/// The plan of the layout whose cost on the RK3588 profile is least
/// ([`Plan::cheapest`]).
fn cheapest(spec: MatmulSpec) -> Result<Plan, Failure> {
    Plan::cheapest(
        spec,
        &rknpu_driver::kernels::matmul::cost::HardwareProfile::rk3588(),
    )
    .map_err(|e| fail(&e))
}

/// The `cost:` line: the plan's modelled traffic, task counts and time on the RK3588
/// profile (docs/matmul.md, "Cost model").
fn cost_line(plan: &Plan, profile: &HardwareProfile) -> Result<String, Failure> {
    let cost = plan.cost(profile).map_err(|e| fail(&e))?;
    Ok(cost.to_string())
}

/// The `minimum:` line of `--plan-only`.
fn minimum_line(spec: &MatmulSpec) -> String {
    let (a, b, c) = minimum_bytes(spec);
    format!("minimum: {} bytes (A {a}, B {b}, C {c})", a + b + c)
}

/// The `dma:` line: bytes read and written by the emulated DMA engines, the minimum and
/// their ratio.
fn dma_line(spec: &MatmulSpec, dma: &DmaCounters) -> String {
    let (a, b, c) = minimum_bytes(spec);
    let min = a + b + c;
    let (r, w) = (dma.read(), dma.written());
    format!(
        "dma: {r} bytes read, {w} bytes written, minimum {min} (ratio {:.2})",
        (r + w) as f64 / min as f64
    )
}

/// A failure of exit code 1 with `e`'s message.
pub(crate) fn fail(e: &dyn std::fmt::Display) -> Failure {
    Failure(1, e.to_string())
}

/// Plans, runs and checks one matmul, printing the plan, a time breakdown, the largest
/// error and OK.
pub(crate) fn run(a: MatmulArgs) -> Result<(), Failure> {
    if let Some(file) = &a.gguf {
        return crate::gguf::matmul(&crate::gguf::GgufMatmul {
            file,
            tensor: a.tensor.as_deref().unwrap_or_default(),
            m: a.m,
            dtype: a.dtype.map(DtypeArg::dtype),
            cores: a.cores,
            device: a.device.as_deref().unwrap_or("auto"),
            seed: a.seed.unwrap_or(1),
        });
    }
    check(&a)?;
    let spec = product_spec(&a)?;
    if let Some(file) = &a.emit {
        return crate::emit::matmul(spec, file);
    }
    if a.plan_only {
        let plan = cheapest(spec)?;
        outln!("plan: {plan}");
        outln!("{}", minimum_line(&spec));
        outln!("{}", cost_line(&plan, &HardwareProfile::rk3588())?);
        return Ok(());
    }
    let dev = open(a.device.as_deref().unwrap_or("auto"))?;
    outln!("device: {}", dev.info());
    if let Some(path) = &a.trace {
        dev.record_to_file(std::path::Path::new(path))
            .map_err(|e| fail(&e))?;
    }
    // Without --cores, every core of the device the run opened.
    let spec = match a.cores {
        Some(_) => spec,
        None => spec.on_cores(dev.info().cores.max(1)),
    };
    let t0 = Instant::now();
    let plan = cheapest(spec)?;
    // What the device runs (rocket starts each task on its own, without CBUF reuse),
    // costed on the profile of its interface.
    let (plan, profile) = match dev.info().interface {
        Interface::Rocket => (plan.without_reuse(), HardwareProfile::rk3588_rocket()),
        _ => (plan, HardwareProfile::rk3588()),
    };
    let t_plan = t0.elapsed();
    outln!("plan: {plan}");
    outln!("{}", cost_line(&plan, &profile)?);
    let mut rng = Rng::from_seed(a.seed.unwrap_or(1));
    let options = MatmulOptions::default().incremental(a.incremental);
    let c = if spec.dtype == Dtype::Fp16 {
        run_f32(&dev, plan, options, &mut rng)?
    } else {
        run_int(&dev, plan, options, &mut rng)?
    };
    let timings = c.timings;
    outln!(
        "time: plan {:.3} ms, pack {:.3} ms (weights {:.3} ms, A {:.3} ms), submit+wait {:.3} ms, unpack {:.3} ms",
        t_plan.as_secs_f64() * 1e3,
        (c.t_pack_b + timings.pack).as_secs_f64() * 1e3,
        c.t_pack_b.as_secs_f64() * 1e3,
        timings.pack.as_secs_f64() * 1e3,
        timings.submit_wait.as_secs_f64() * 1e3,
        timings.unpack.as_secs_f64() * 1e3
    );
    if spec.dtype == Dtype::Fp16 {
        outln!(
            "largest error: {:e} (fp32 summation{} bound respected: {})",
            c.err,
            if spec.out == OutType::Fp16 {
                " and fp16 rounding"
            } else {
                ""
            },
            c.bound <= 0.0
        );
    } else {
        outln!("largest error: {}", c.err);
    }
    if let Some(dma) = &c.dma {
        outln!("{}", dma_line(&spec, dma));
        outln!(
            "regcmd: {} bytes fetched by the PC ({} bodies)",
            dma.pc_regcmd,
            if a.incremental { "incremental" } else { "full" }
        );
    }
    if c.bound > 0.0 {
        return Err(Failure(
            1,
            "MISMATCH: the result differs from the CPU reference".into(),
        ));
    }
    if let Some(path) = &a.trace {
        dev.stop_recording().map_err(|e| fail(&e))?;
        outln!("trace: {path}");
    }
    outln!("OK");
    Ok(())
}

/// Checks the combination of options: `--emit` and `--plan-only` build no run.
fn check(a: &MatmulArgs) -> Result<(), Failure> {
    if a.tensor.is_some() {
        return Err(usage("matmul: --tensor names a tensor of --gguf FILE"));
    }
    let run_option = a.device.is_some() || a.seed.is_some() || a.trace.is_some();
    if a.emit.is_some() && run_option {
        return Err(usage(
            "matmul: --emit builds the program without running it; --device, --seed and --trace apply to a run",
        ));
    }
    if a.incremental && (a.plan_only || a.emit.is_some()) {
        return Err(usage(
            "matmul: --incremental applies to a run; --plan-only and --emit do not build its program",
        ));
    }
    if a.plan_only && (run_option || a.emit.is_some()) {
        return Err(usage(
            "matmul: --plan-only touches no device; --device, --seed, --trace and --emit do not apply to it",
        ));
    }
    Ok(())
}

/// The product `a` asks for.
fn product_spec(a: &MatmulArgs) -> Result<MatmulSpec, Failure> {
    // clap requires --k, --n and --dtype without --gguf.
    let missing = |what: &str| usage(format!("matmul: {what} is required without --gguf"));
    let k = a.k.ok_or_else(|| missing("--k"))?;
    let n = a.n.ok_or_else(|| missing("--n"))?;
    let dtype = a.dtype.ok_or_else(|| missing("--dtype"))?.dtype();
    Ok(MatmulSpec {
        out: out_type(dtype, a.out)?,
        ..MatmulSpec::new(a.m, k, n, dtype)
    }
    .on_cores(a.cores.unwrap_or(HardwareProfile::rk3588().cores)))
}

/// The result type `--out` names, where the input precision offers it; by default the
/// widest (int32, or fp32 for fp16).
fn out_type(dtype: Dtype, out: Option<OutArg>) -> Result<OutType, Failure> {
    let (input, offered): (&str, &[(OutArg, &str, OutType)]) = match dtype {
        Dtype::Int8 => ("int8", &[(OutArg::Int32, "int32", OutType::Int32)]),
        Dtype::Int4 => (
            "int4",
            &[
                (OutArg::Int32, "int32", OutType::Int32),
                (OutArg::Int16, "int16", OutType::Int16),
            ],
        ),
        _ => (
            "fp16",
            &[
                (OutArg::Fp32, "fp32", OutType::Fp32),
                (OutArg::Fp16, "fp16", OutType::Fp16),
            ],
        ),
    };
    let Some(want) = out else {
        return Ok(offered[0].2);
    };
    if let Some(o) = offered.iter().find(|o| o.0 == want) {
        return Ok(o.2);
    }
    let name = clap::ValueEnum::to_possible_value(&want)
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    let names: Vec<&str> = offered.iter().map(|o| o.1).collect();
    Err(usage(format!(
        "--out {name}: {input} input gives {}",
        names.join(" or ")
    )))
}

/// The device `--device` names; `auto` falls back to the emulated kernel when no NPU
/// is found.
pub(crate) fn open(device: &str) -> Result<Device, Failure> {
    Ok(match device {
        "auto" => match Device::open() {
            Ok(d) => d,
            Err(rknpu_driver::device::DeviceError::NotFound { .. }) => {
                outln!("no NPU found: running on the emulated kernel (RKNPU_DEVICE=emu)");
                Device::open_spec("emu").map_err(|e| fail(&e))?
            }
            Err(e) => return Err(fail(&e)),
        },
        spec => Device::open_spec(spec).map_err(|e| fail(&e))?,
    })
}

/// fp16 operands, checked against an fp64 product: fp32 summation in any order keeps
/// |error| <= E = (K + 1) 2^-24 sum |a b|. An fp16 result is that sum rounded to nearest
/// fp16 by the DPU, which adds at most half an fp16 ulp of it: 2^-11 (|exact| + E) for
/// normal values, 2^-25 below them.
fn run_f32(
    dev: &Device,
    plan: Plan,
    options: MatmulOptions,
    rng: &mut Rng,
) -> Result<Checked, Failure> {
    let fp16_out = plan.spec.out == OutType::Fp16;
    use rknpu_driver::float::{f16_to_f32, f32_to_f16};
    let (mu, ku, nu) = (
        plan.spec.m as usize,
        plan.spec.k as usize,
        plan.spec.n as usize,
    );
    let q = |v: f32| f16_to_f32(f32_to_f16(v));
    let a: Vec<f32> = (0..mu * ku).map(|_| q(rng.unit())).collect();
    let b: Vec<f32> = (0..ku * nu).map(|_| q(rng.unit())).collect();
    let t = Instant::now();
    let bank =
        std::sync::Arc::new(WeightBank::from_f32_kn(dev, &plan.layout, &b).map_err(|e| fail(&e))?);
    let t_pack_b = t.elapsed();
    let mut mm = Matmul::for_plan_with(&bank, plan, options).map_err(|e| fail(&e))?;
    let counting = Counting::start(dev);
    let c = mm.run_f32(&a).map_err(|e| fail(&e))?;
    let dma = counting.stop();
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
    Ok(Checked {
        t_pack_b,
        timings: mm.timings,
        err: worst,
        bound,
        dma,
    })
}

/// int8 or int4 operands, checked exactly; an int16 result is the sum saturated to int16.
fn run_int(
    dev: &Device,
    plan: Plan,
    options: MatmulOptions,
    rng: &mut Rng,
) -> Result<Checked, Failure> {
    let int16 = plan.spec.out == OutType::Int16;
    let (mu, ku, nu) = (
        plan.spec.m as usize,
        plan.spec.k as usize,
        plan.spec.n as usize,
    );
    let (lo, hi) = if plan.spec.dtype == Dtype::Int4 {
        (-8, 7)
    } else {
        (-128, 127)
    };
    let a: Vec<i32> = (0..mu * ku).map(|_| rng.int(lo, hi)).collect();
    let b: Vec<i32> = (0..ku * nu).map(|_| rng.int(lo, hi)).collect();
    let t = Instant::now();
    let bank =
        std::sync::Arc::new(WeightBank::from_int_kn(dev, &plan.layout, &b).map_err(|e| fail(&e))?);
    let t_pack_b = t.elapsed();
    let mut mm = Matmul::for_plan_with(&bank, plan, options).map_err(|e| fail(&e))?;
    let counting = Counting::start(dev);
    let c = mm.run_int(&a).map_err(|e| fail(&e))?;
    let dma = counting.stop();
    let mut reference = vec![0i64; mu * nu];
    for i in 0..mu {
        let r = &mut reference[i * nu..(i + 1) * nu];
        for kk in 0..ku {
            let x = a[i * ku + kk] as i64;
            for (o, &y) in r.iter_mut().zip(&b[kk * nu..(kk + 1) * nu]) {
                *o += x * y as i64;
            }
        }
        if int16 {
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
    Ok(Checked {
        t_pack_b,
        timings: mm.timings,
        err: worst,
        bound: worst,
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
