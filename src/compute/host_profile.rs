//! A [`HostProfile`] of the machine the library runs on, measured by running the
//! library's own host routines for a matmul call (docs/matmul.md, "Host work"): the
//! activation quantiser and packer, the one-pass reduction and scaling of the results
//! (`kernels::matmul::finish`), and the pre-submit verifier, on the plan of a
//! 64×4096×4096 int8 product on 3 cores. A backend that wants its plans costed for the
//! CPU it runs on measures once at start and passes the profile on; the cost model
//! itself stays pure arithmetic. Its inputs are small enough to stay in the caches
//! (1 MiB of C), so its rates are upper bounds; `cargo bench --bench finish` measures
//! the reduction out of cache, against memcpy.

use crate::error::Result;
use crate::kernels::matmul::host_cost::HostProfile;
use crate::kernels::matmul::{MatmulSpec, Plan, pack, quant};
use crate::kernels::single::Dtype;
use crate::verify::{self, BufferAccess, JobBuffer};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The shape the routines run on: a prompt-sized product of an LLM layer.
const SHAPE: (u32, u32, u32) = (64, 4096, 4096);

/// Measures the host routines on this machine for about `budget` in all (at least one
/// run of each), keeping each routine's fastest run. Deterministic inputs; no device.
pub fn measure(budget: Duration) -> Result<HostProfile> {
    let (m, k, n) = SHAPE;
    let plan = Plan::new(MatmulSpec::new(m, k, n, Dtype::Int8).on_cores(3))?;
    let per_routine = budget / 3;
    let x: Vec<f32> = (0..m * k)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 16) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let mut q = vec![0i8; x.len()];
    let mut row_scales = vec![0f32; m as usize];
    let prepare = fastest(per_routine, || {
        quant::quantize_rows_i8_into(&x, k as usize, &mut q, &mut row_scales)?;
        black_box(pack::activations_i8(&plan, &q)?);
        Ok(())
    })?;
    let c: Vec<u8> = (0..plan.c_bytes)
        .map(|i| (i.wrapping_mul(40_503) >> 8) as u8 & 0x3F)
        .collect();
    let channel_scales: Vec<f32> = (0..n).map(|j| 1e-3 + j as f32 * 1e-7).collect();
    let mut y = vec![0f32; (m * n) as usize];
    // As a Matmul finishes a call: its Reduction, made once, in one pass.
    let reduction = plan.reduction();
    let finish = fastest(per_routine, || {
        reduction.scale_i32_into(&c, &row_scales, Some(&channel_scales), &mut y)?;
        black_box(&y);
        Ok(())
    })?;
    let (base, words, buffers) = bound_program(&plan)?;
    let verify = fastest(per_routine, || {
        verify::check_words(base, &words, &buffers)
            .map(|r| drop(black_box(r)))
            .map_err(|error| crate::Error::Verify { error })
    })?;
    let profile = HostProfile {
        name: "this machine (measured)",
        prepare_bytes_per_s: plan.a_bytes as f64 / prepare.as_secs_f64(),
        finish_bytes_per_s: plan.c_bytes as f64 / finish.as_secs_f64(),
        verify_task_s: verify.as_secs_f64() / plan.tasks.len() as f64,
    };
    profile.check()?;
    Ok(profile)
}

/// The fastest of the runs of `f` that fit `budget` (at least one).
fn fastest(budget: Duration, mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    let start = Instant::now();
    let mut best = Duration::MAX;
    loop {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().max(Duration::from_nanos(1)));
        if start.elapsed() >= budget {
            return Ok(best);
        }
    }
}

/// The plan's program bound at fixed addresses, and the buffers of its job.
fn bound_program(plan: &Plan) -> Result<(u64, Vec<crate::regcmd::RegCmd>, Vec<JobBuffer>)> {
    let program = plan.program()?;
    let at = |id: u32| 0x1000_0000 * (u64::from(id) + 1);
    let words = program.bind(|b| Some(at(b.0)))?;
    let buffers = plan
        .buffers(&program)
        .iter()
        .map(|b| {
            let access = match b.written {
                true => BufferAccess::Write,
                false => BufferAccess::Read,
            };
            JobBuffer::new(at(b.id.0), b.len, access)
        })
        .collect();
    Ok((at(program.regcmd_buffer().0), words, buffers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measured_profile_is_finite_and_positive_and_costs_plans() {
        let p = measure(Duration::from_millis(60)).unwrap();
        println!("{p:?}");
        assert!(p.check().is_ok(), "{p:?}");
        let plan = Plan::new(MatmulSpec::new(128, 4096, 4096, Dtype::Int8)).unwrap();
        let c = plan.host_cost(&p).unwrap();
        assert!(c.total_s() > 0.0 && c.total_s().is_finite(), "{c}");
    }
}
