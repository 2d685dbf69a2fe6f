//! `rknpu matmul`: seeded random matrices multiplied on the NPU (or the emulated kernel)
//! and checked against the CPU.

use crate::element::{ElementArg, only};
use crate::matmul_run::{run_one, run_spread, spreads};
use crate::{Failure, parse_u32, usage};
use rknpu_driver::compute::matmul::MatmulOptions;
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::{Dtype, OutType};
use rknpu_driver::seeded::Rng;
use rknpu_driver::sim::DmaCounters;
use std::time::Instant;

/// The weight types of `rknpu matmul` and `rknpu model-cost`: int8 (a random run:
/// values -128..127), int4 (run as W4A8 with int8 activations; values -8..7) and fp16
/// (values in [-1, 1)).
pub(crate) const MATMUL_TYPES: &[ElementArg] =
    &[ElementArg::Int8, ElementArg::Int4, ElementArg::Fp16];

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
    /// The input precision: int8 (a random run: values -128..127), int4 (run as W4A8
    /// with int8 activations; values -8..7) or fp16 (values in [-1, 1)). With --gguf,
    /// the bank's type (default: a grouped int8 bank of the file's groups of 32 for Q8_0,
    /// Q4_0, Q5_0, Q4_1, Q5_K and Q6_K within their size bound, else int8 for quantised
    /// tensors, fp16 for F16, F32 and BF16).
    #[arg(long, value_parser = only(MATMUL_TYPES), required_unless_present = "gguf")]
    dtype: Option<ElementArg>,
    /// Take the weights from this GGUF file (the tensor --tensor names, n rows of k:
    /// ggml's src0 of mul_mat) through the library's loader, multiply seeded f32
    /// activations with mul_mat and check them against an f64 product with the
    /// dequantised tensor.
    #[arg(long, value_name = "FILE", requires = "tensor", conflicts_with_all = ["out", "trace", "emit", "plan_only", "incremental"])]
    gguf: Option<String>,
    /// The tensor of --gguf to load.
    #[arg(long, value_name = "NAME", requires = "gguf")]
    tensor: Option<String>,
    /// With --gguf, on a grouped bank: quantise the activations in this many passes (the
    /// later ones the residuals of the earlier; `gguf::outlier_options` gives three or
    /// two, which keep outliers in the activations harmless). Default: the type's
    /// `gguf::grouped_options` (two for Q6_K, else one).
    #[arg(long, value_name = "1|2|3", requires = "gguf", conflicts_with = "dtype", value_parser = clap::value_parser!(u32).range(1..=3))]
    passes: Option<u32>,
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
            dtype: a.dtype.map(ElementArg::dtype),
            cores: a.cores,
            passes: a.passes,
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
    // Through rocket, one open file runs on one core: where the cost model spreads the
    // product over several cores, each takes an open file of its own and a share of the
    // columns (a trace records one device and incremental bodies are refused on rocket:
    // those runs stay on one).
    let caps = dev.capabilities();
    let rocket = caps.picks_cores && !caps.cbuf_reuse;
    let may_spread = rocket && a.trace.is_none() && !a.incremental && spreads(&spec, spec.cores);
    let t0 = Instant::now();
    // What the device runs (rocket starts each task on its own, without CBUF reuse),
    // costed on the profile of its interface.
    let (plan, profile) = if rocket {
        let mut profile = HardwareProfile::rk3588_rocket();
        if may_spread {
            profile.rocket_devices = spec.cores;
        }
        let plan = Plan::cheapest(spec, &profile).map_err(|e| fail(&e))?;
        profile.rocket_devices = match may_spread {
            true => plan.cores_used(),
            false => 1,
        };
        (plan.without_reuse(), profile)
    } else {
        (cheapest(spec)?, HardwareProfile::rk3588())
    };
    let spread = profile.rocket_devices > 1;
    let t_plan = t0.elapsed();
    let mut rng = Rng::from_seed(a.seed.unwrap_or(1));
    let options = MatmulOptions::default().incremental(a.incremental);
    let c = if spread {
        let mut devices = vec![dev.clone()];
        for _ in 1..profile.rocket_devices {
            devices.push(open(a.device.as_deref().unwrap_or("auto"))?);
        }
        outln!(
            "spread: {} open devices of the rocket driver, one core each, a share of the columns each",
            devices.len()
        );
        outln!("plan: {plan}");
        outln!("{}", cost_line(&plan, &profile)?);
        run_spread(&devices, spec, &mut rng)?
    } else {
        outln!("plan: {plan}");
        outln!("{}", cost_line(&plan, &profile)?);
        run_one(&dev, plan, options, &mut rng)?
    };
    report(&a, &spec, &c, t_plan);
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

/// Prints a run's times, its largest error against the CPU and its DMA and regcmd bytes.
fn report(
    a: &MatmulArgs,
    spec: &MatmulSpec,
    c: &crate::matmul_run::Checked,
    t_plan: std::time::Duration,
) {
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
        outln!("{}", dma_line(spec, dma));
        outln!(
            "regcmd: {} bytes fetched by the PC ({} bodies)",
            dma.pc_regcmd,
            if a.incremental { "incremental" } else { "full" }
        );
    }
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
            Err(rknpu_driver::Error::NotFound { .. }) => {
                outln!("no NPU found: running on the emulated kernel (RKNPU_DEVICE=emu)");
                Device::open_spec("emu").map_err(|e| fail(&e))?
            }
            Err(e) => return Err(fail(&e)),
        },
        spec => Device::open_spec(spec).map_err(|e| fail(&e))?,
    })
}
