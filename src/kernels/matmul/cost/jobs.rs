//! The modelled time of task lists as rocket runs them, and their split into jobs that
//! stay clear of rocket's 500 ms job timeout.
//!
//! Rocket runs the tasks of one job on one core, one after another, and its scheduler
//! stops a job that has not finished after 500 ms (docs/hardware/kernel-behaviours.md#k1),
//! resetting the core. A program the cost model puts near that limit is submitted as
//! several jobs instead, each a run of consecutive tasks modelled within half the
//! timeout ([`split_jobs`]; the device says the timeout,
//! [`Capabilities::job_timeout`](crate::device::Capabilities::job_timeout)): the margin
//! covers what the model leaves out (docs/matmul.md, "Calibration", has how far it can
//! be off).
//!
//! A task's time alone on one core is the cost model's per-core formula for one task:
//! `max(bytes / BW_core, MACs / peak)`, where `bytes` are the task's DMA ranges
//! ([`Task::dma`]) and `MACs` its CNA's (output pixels × kernels × channels × window;
//! depthwise: one kernel per channel). A job of `n` tasks adds one submission and
//! `n − 1` per-task overheads of the profile's path.

use super::HardwareProfile;
use crate::error::{Error, Result};
use crate::kernels::single::Dtype;
use crate::regs::{Block, Register, cna};
use crate::task::{Precision, Task};
use std::ops::Range;

/// Multiply-accumulates the task's CNA runs: output pixels × kernels × input channels ×
/// window (depthwise: each channel its own kernel). 0 without a CNA.
pub fn task_macs(task: &Task) -> u64 {
    let Some(c) = &task.cna else {
        return 0;
    };
    let window = c.kernel.width as u64 * c.kernel.height as u64;
    let pixels = c.conv.out_atomics as u64;
    let channels = c.feature.channels as u64;
    if c.kernel.depthwise {
        pixels * channels * window
    } else {
        pixels * c.weights.kernels as u64 * channels * window
    }
}

/// The type whose MAC rate a precision runs at.
fn rate_dtype(p: Precision) -> Dtype {
    match p {
        Precision::Int4 => Dtype::Int4,
        Precision::Int8 => Dtype::Int8,
        _ => Dtype::Fp16,
    }
}

impl HardwareProfile {
    /// The modelled seconds of `task` alone on one core, without overheads (the module
    /// documentation has the formula).
    pub fn task_seconds(&self, task: &Task) -> f64 {
        // An operand the task finds in the CBUF is not fetched.
        let (data_kept, weights_kept) = task
            .cna
            .as_ref()
            .map_or((false, false), |c| (c.cbuf.data_reuse, c.cbuf.weight_reuse));
        let bytes: u64 = task
            .dma()
            .iter()
            .filter(|r| {
                let kept = (r.register == cna::FeatureDataAddr::NAME && data_kept)
                    || (r.register == cna::DcompAddr0::NAME && weights_kept);
                !(r.block == Block::Cna && kept)
            })
            .map(|r| r.len)
            .sum();
        let stream = bytes as f64 / self.core_dram_bytes_per_s.min(self.dram_bytes_per_s);
        let compute = match &task.cna {
            Some(c) => task_macs(task) as f64 / self.macs_per_s(rate_dtype(c.precision)),
            None => 0.0,
        };
        stream.max(compute)
    }

    /// The modelled seconds of `tasks` as one job run on one core, one after another:
    /// one submission, each task, and the per-task overhead between them.
    pub fn serial_job_seconds(&self, tasks: &[Task]) -> f64 {
        let work: f64 = tasks.iter().map(|t| self.task_seconds(t)).sum();
        let gaps = tasks.len().saturating_sub(1) as f64;
        self.per_submit_s() + work + gaps * self.per_task_s()
    }
}

/// Cuts `tasks`, run one after another on one core, into runs of consecutive tasks each
/// modelled on `profile` within half of `timeout_s` as one job
/// ([`HardwareProfile::serial_job_seconds`]): as few jobs as the greedy cut gives, in
/// order. A task modelled beyond half the timeout on its own is a job of its own, and
/// one beyond the timeout cannot run within it at all: [`Error::Unsupported`] naming
/// it. The profile is checked first ([`HardwareProfile::check`]); an empty list gives
/// no job.
pub fn split_jobs(
    tasks: &[Task],
    profile: &HardwareProfile,
    timeout_s: f64,
) -> Result<Vec<Range<usize>>> {
    let budget_s = timeout_s / 2.0;
    profile.check()?;
    if !(timeout_s.is_finite() && timeout_s > 0.0) {
        return Err(Error::OutOfRange {
            what: "rocket job timeout",
            index: 0,
            value: timeout_s.to_string(),
            range: "finite and positive",
        });
    }
    let mut jobs = Vec::new();
    let mut start = 0;
    let mut length = 0.0;
    for (i, t) in tasks.iter().enumerate() {
        let alone = profile.per_submit_s() + profile.task_seconds(t);
        if alone > timeout_s {
            return Err(Error::Unsupported {
                what: "rocket job",
                why: format!(
                    "task {i} alone is modelled at {:.0} ms, beyond rocket's {:.0} ms job timeout",
                    alone * 1e3,
                    timeout_s * 1e3
                ),
            });
        }
        let with = length + profile.per_task_s() + profile.task_seconds(t);
        if i > start && with > budget_s {
            jobs.push(start..i);
            start = i;
            length = alone;
        } else if i == start {
            length = alone;
        } else {
            length = with;
        }
    }
    if start < tasks.len() {
        jobs.push(start..tasks.len());
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::{MatmulSpec, Plan};
    use crate::regcmd::DmaAddr;

    /// Rocket's job timeout, in seconds.
    const TIMEOUT: f64 = 0.5;

    /// The typed tasks of `plan` bound at fixed addresses.
    fn tasks(plan: &Plan) -> Vec<Task> {
        let buffers = [0x10_0000, 0x2000_0000, 0x8000_0000].map(DmaAddr::Fixed);
        plan.tasks
            .iter()
            .map(|t| plan.task(t, buffers).unwrap())
            .collect()
    }

    fn plan_of(m: u32, k: u32, n: u32, dtype: Dtype) -> Plan {
        Plan::new(MatmulSpec::new(m, k, n, dtype)).unwrap()
    }

    #[test]
    fn a_matmul_tasks_macs_are_its_rows_channels_and_columns() {
        let plan = plan_of(100, 4096, 1024, Dtype::Int8);
        let ts = tasks(&plan);
        let total: u64 = ts.iter().map(task_macs).sum();
        let want: u64 = plan
            .tasks
            .iter()
            .map(|t| t.rows as u64 * plan.layout.waves[t.wave as usize].ai as u64 * t.nt as u64)
            .sum();
        assert_eq!(total, want);
        assert!(total >= 100 * 4096 * 1024);
    }

    #[test]
    fn the_serial_job_of_a_plans_tasks_is_its_one_core_rocket_cost() {
        // On one core, as one job, the tasks' serial time is what `Plan::cost` predicts
        // for the plan on rocket.
        let profile = HardwareProfile::rk3588_rocket();
        let plan = plan_of(64, 4096, 8192, Dtype::Fp16);
        let serial = profile.serial_job_seconds(&tasks(&plan));
        let cost = plan.cost(&profile).unwrap().seconds;
        assert!(plan.tasks.len() > 1);
        assert!((serial - cost).abs() <= 0.02 * cost, "{serial} vs {cost}");
    }

    #[test]
    fn jobs_cover_every_task_in_order_each_within_the_budget() {
        let profile = HardwareProfile::rk3588_rocket();
        // 512×8192×16384 fp16 on one core: nearly a second of work for one rocket job.
        let plan = plan_of(512, 8192, 16384, Dtype::Fp16).without_reuse();
        let ts = tasks(&plan);
        assert!(profile.serial_job_seconds(&ts) > TIMEOUT);
        let jobs = split_jobs(&ts, &profile, TIMEOUT).unwrap();
        assert!(jobs.len() > 2, "{jobs:?}");
        let mut next = 0;
        for j in &jobs {
            assert_eq!(j.start, next);
            assert!(j.end > j.start);
            let s = profile.serial_job_seconds(&ts[j.clone()]);
            assert!(s <= TIMEOUT / 2.0, "{j:?}: {s}");
            next = j.end;
        }
        assert_eq!(next, ts.len());
        // Greedy: no two neighbouring jobs would fit together.
        for w in jobs.windows(2) {
            let both = profile.serial_job_seconds(&ts[w[0].start..w[1].end]);
            assert!(both > TIMEOUT / 2.0);
        }
        // A short program stays one job; no tasks, no job.
        let small = plan_of(4, 256, 256, Dtype::Int8);
        let one = split_jobs(&tasks(&small), &profile, TIMEOUT).unwrap();
        assert_eq!(one, vec![0..small.tasks.len()]);
        assert!(split_jobs(&[], &profile, TIMEOUT).unwrap().is_empty());
    }

    #[test]
    fn a_task_beyond_the_timeout_alone_is_refused() {
        let mut slow = HardwareProfile::rk3588_rocket();
        slow.core_dram_bytes_per_s = 1e6; // 1 MB/s: any real task takes seconds.
        let plan = plan_of(64, 2048, 2048, Dtype::Int8);
        match split_jobs(&tasks(&plan), &slow, TIMEOUT) {
            Err(Error::Unsupported { what, why }) => {
                assert_eq!(what, "rocket job");
                assert!(why.starts_with("task 0 alone"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        slow.per_submit_rocket_s = f64::NAN;
        assert!(matches!(
            split_jobs(&tasks(&plan), &slow, TIMEOUT),
            Err(Error::OutOfRange { .. })
        ));
    }
}
