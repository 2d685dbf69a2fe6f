//! The top rungs: planned matmuls through the executor ([`crate::compute::matmul`]) on one,
//! two and three cores, each checked against the CPU.

use super::check::{Operands, Values};
use super::rungs::{Ctx, Fail, dtype_name, judge};
use crate::Error;
use crate::compute::matmul::Weights;
use crate::compute::matmul::{Matmul, WeightBank};
use crate::kernels::matmul::{MatmulSpec, Plan};
use crate::kernels::single::Dtype;

/// The shapes each core count runs: small enough for a slow clock and the emulated
/// kernel, large enough that the plans have K waves or N tiles on every core.
pub(super) fn shapes(cores: u32) -> [(u32, u32, u32, Dtype); 3] {
    match cores {
        1 => [
            (16, 4608, 64, Dtype::Int8),
            (8, 1000, 128, Dtype::Int4),
            (8, 256, 96, Dtype::Fp16),
        ],
        2 => [
            (16, 512, 128, Dtype::Int8),
            (8, 512, 256, Dtype::Int4),
            (8, 256, 64, Dtype::Fp16),
        ],
        _ => [
            (16, 512, 96, Dtype::Int8),
            (8, 512, 384, Dtype::Int4),
            (8, 256, 96, Dtype::Fp16),
        ],
    }
}

/// The plan of one grid shape on `cores` cores.
pub(super) fn plan(shape: (u32, u32, u32, Dtype), cores: u32) -> Result<Plan, Fail> {
    let (m, k, n, dtype) = shape;
    Plan::new(MatmulSpec::new(m, k, n, dtype).on_cores(cores)).map_err(Fail::build)
}

/// Runs the grid of `cores`; `Ok(false)` (skipped, `detail` saying why) where the driver
/// does not offer that many cores or picks cores itself.
pub(super) fn grid(c: &Ctx<'_>, cores: u32, detail: &mut String) -> Result<bool, Fail> {
    let info = c.dev.info();
    if cores > info.cores {
        *detail = format!("the driver reports {} core(s)", info.cores);
        return Ok(false);
    }
    if cores > 1 && c.dev.capabilities().picks_cores {
        *detail = format!(
            "rocket places every job on a core itself: a {cores}-core split cannot be asked for"
        );
        return Ok(false);
    }
    let mut done = Vec::new();
    for (i, &shape) in shapes(cores).iter().enumerate() {
        let plan = plan(shape, cores)?;
        let (m, k, n, dtype) = shape;
        if plan.per_core.len() != cores as usize {
            return Err(Fail::build(format!(
                "the plan of {} {m}x{k}x{n} uses {} core(s), not {cores}",
                dtype_name(dtype),
                plan.per_core.len()
            )));
        }
        let tasks = plan.tasks.len();
        done.push(format!(
            "{} {m}x{k}x{n} ({tasks} task{})",
            dtype_name(dtype),
            if tasks == 1 { "" } else { "s" }
        ));
        *detail = done.join(", ");
        run_plan(c, plan, i as u64)?;
    }
    Ok(true)
}

/// One plan: weights resident, A packed and run, C reduced and compared.
fn run_plan(c: &Ctx<'_>, plan: Plan, seed: u64) -> Result<bool, Fail> {
    let s = plan.spec;
    let (m, k, n) = (s.m as usize, s.k as usize, s.n as usize);
    let cores = if s.cores == 1 { "core" } else { "cores" };
    let name = format!("{} {m}x{k}x{n} on {} {cores}", dtype_name(s.dtype), s.cores);
    let expected = format!("C = A·B ({name}) as the CPU computes it");
    let mut ops = Operands::new(s.dtype, s.m, s.k, s.n, 100 + seed);
    let want = ops.product(m, k, n);
    if c.corrupt() {
        ops.corrupt();
    }
    let dev_err = |e: Error| Fail::device(expected.as_str())(e);
    let (got, job) = match &ops {
        Operands::Int { a, b, .. } => {
            let bank = std::sync::Arc::new(
                WeightBank::from_kn_in(c.dev, &plan.layout, Weights::Int(b)).map_err(dev_err)?,
            );
            let mut mm = Matmul::for_plan(&bank, plan).map_err(dev_err)?;
            mm.timeout = c.opts.deadline;
            let got = mm.run::<i32, i64>(a).map_err(dev_err)?;
            (Values::Int(got), mm.last.take())
        }
        Operands::Float { a, b } => {
            let bank = std::sync::Arc::new(
                WeightBank::from_kn_in(c.dev, &plan.layout, Weights::F32(b)).map_err(dev_err)?,
            );
            let mut mm = Matmul::for_plan(&bank, plan).map_err(dev_err)?;
            mm.timeout = c.opts.deadline;
            let got = mm.run::<f32, f32>(a).map_err(dev_err)?;
            (Values::Float(got), mm.last.take())
        }
    };
    // The executor's C buffer is new, so zeroed: a result of zeros was never written.
    let before = match &got {
        Values::Int(v) => Values::Int(vec![0; v.len()]),
        Values::Float(v) => Values::Float(vec![0.0; v.len()]),
    };
    let job = job.unwrap_or(crate::device::JobResult {
        task_counter: 0,
        int_status: Vec::new(),
        hw_elapsed: None,
    });
    judge(&expected, "C", &want, &got, n, Some(&before), job)
}
