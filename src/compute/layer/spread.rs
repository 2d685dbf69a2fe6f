//! Matmul steps over several cores: which steps the cost model spreads, and the jobs a
//! layer with such steps runs as.
//!
//! A layer's steps depend on one another, and the cores of one submission run their
//! chains side by side without waiting for each other, so a step whose tasks are spread
//! over cores is a job of its own: the jobs before it end first, and the step's adds of
//! later K waves and the steps after it start a new one-core job once all its cores are
//! done. A step is spread only when the cost model has its own job on several cores
//! faster than its tasks inside the one-core chain, the extra submission included.

use super::Layer;
use crate::compute::matmul::cores_of;
use crate::device::{CoreMask, Device};
use crate::error::{Error, Result};
use crate::kernels::matmul::cost::HardwareProfile;
use crate::kernels::matmul::{Plan, WeightLayout};
use crate::kernels::single::OutType;
use std::ops::Range;

/// The plan of a matmul step on at most `cores` cores, and whether it is spread (its
/// tasks run as a job of their own on several cores). One core on a device that places
/// jobs itself (rocket), or when the cost model says the extra job does not pay.
pub(super) fn choose_plan(
    dev: &Device,
    layout: &WeightLayout,
    (m, out): (u32, OutType),
    cores: u32,
) -> Result<(Plan, bool)> {
    let one = Plan::for_layout(layout, m, out, 1)?;
    let cores = cores.min(dev.cores());
    if cores < 2 || dev.capabilities().picks_cores {
        return Ok((one, false));
    }
    let many = Plan::for_layout(layout, m, out, cores)?;
    if many.cores_used() < 2 {
        return Ok((one, false));
    }
    let profile = HardwareProfile::rk3588();
    // Inside the chain a step pays no submission of its own; spread, it does.
    let inside = one.cost(&profile)?.seconds - profile.per_submit_s();
    let spread = many.cost(&profile)?.seconds;
    Ok(match spread < inside {
        true => (many, true),
        false => (one, false),
    })
}

/// One job of a whole run: its tasks and how many of them each core runs (one entry:
/// one core, the kernel's pick).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LayerJob {
    pub(super) tasks: Range<usize>,
    pub(super) per_core: Vec<usize>,
}

impl LayerJob {
    /// A one-core job of `tasks`.
    pub(super) fn chain(tasks: Range<usize>) -> LayerJob {
        let n = tasks.len();
        LayerJob {
            tasks,
            per_core: vec![n],
        }
    }

    /// The core mask and split the device takes for it.
    pub(super) fn cores(&self, dev: &Device) -> (CoreMask, Vec<usize>) {
        match self.per_core.len() {
            1 => (CoreMask::Auto, self.per_core.clone()),
            _ => cores_of(dev, &self.per_core),
        }
    }
}

/// The jobs of a layer of `total` tasks whose spread steps start at the given task
/// index with the given per-core counts: one-core jobs of the tasks between them.
pub(super) fn jobs(total: usize, spread: &[(usize, Vec<usize>)]) -> Vec<LayerJob> {
    let mut v = Vec::new();
    let mut at = 0;
    for (start, per_core) in spread {
        if *start > at {
            v.push(LayerJob::chain(at..*start));
        }
        let end = start + per_core.iter().sum::<usize>();
        v.push(LayerJob {
            tasks: *start..end,
            per_core: per_core.clone(),
        });
        at = end;
    }
    if total > at {
        v.push(LayerJob::chain(at..total));
    }
    v
}

impl Layer {
    /// The modelled seconds of a whole run on `profile`: each job of [`Layer::jobs`] one
    /// submission, a one-core job its tasks one after another
    /// ([`HardwareProfile::serial_job_seconds`]), a spread job its slowest core. For
    /// comparing a layer with the separate calls it replaces (a matmul's
    /// `Plan::cost(..).total_s()`, NPU and host), plan for plan.
    pub fn modelled_seconds(&self, profile: &HardwareProfile) -> Result<f64> {
        profile.check()?;
        let tasks =
            crate::verify::tasks_of_words(&self.words).map_err(|error| Error::Verify { error })?;
        let mut total = 0.0;
        for j in &self.jobs {
            let Some(all) = tasks.get(j.tasks.clone()) else {
                return Err(Error::InvalidArgument {
                    what: format!(
                        "job of tasks {:?} beyond the program's {}",
                        j.tasks,
                        tasks.len()
                    ),
                });
            };
            let mut at = 0;
            let mut slowest = 0f64;
            for &n in &j.per_core {
                let chain = &all[at..at + n];
                slowest = slowest.max(profile.serial_job_seconds(chain) - profile.per_submit_s());
                at += n;
            }
            total += profile.per_submit_s() + slowest;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_steps_cut_the_chain_into_jobs() {
        let j = jobs(20, &[(3, vec![2, 2, 1]), (8, vec![4, 4])]);
        let got: Vec<_> = j
            .iter()
            .map(|j| (j.tasks.clone(), j.per_core.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0..3, vec![3]),
                (3..8, vec![2, 2, 1]),
                (8..16, vec![4, 4]),
                (16..20, vec![4]),
            ]
        );
        // A spread step first and last: no empty job around it.
        let j = jobs(5, &[(0, vec![3, 2])]);
        assert_eq!(
            j,
            vec![LayerJob {
                tasks: 0..5,
                per_core: vec![3, 2]
            }]
        );
    }
}
