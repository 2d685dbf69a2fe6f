//! What the emulated kernel shows of itself and lets a test set: its log, faults to
//! inject, DMA counters, the simulator's work budget, the bound that stopped the last
//! job, and the objects and files alive.

use super::mem::EmuBo;
use super::worker;
use super::{EmuKernel, File};
use crate::sim::{DmaCounters, Faults};
use std::sync::{Arc, Mutex};

impl EmuKernel {
    /// Faults for the next submissions (task indices count within each core's kick).
    /// A queued job keeps the faults in force when it was submitted.
    pub fn inject(&self, faults: Faults) {
        self.lock().faults = faults;
    }

    /// What the kernel would have printed to its log (timeouts, refused requests).
    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Why the last job that did not finish stopped, when it was a bound of the
    /// simulator (docs/simulator.md, "Bounds") and not anything a board does; taken
    /// once. The device layer asks after a job times out, so that an emulation limit is
    /// reported as such ([`crate::Error::WorkBudget`],
    /// [`crate::Error::TooLargeToSimulate`]), never as a timeout.
    pub fn take_stop(&self) -> Option<EmuStop> {
        self.lock().budget_stop.take()
    }

    /// Bytes the simulated DMA engines moved, per engine, summed over every job the
    /// kernel ran since it was made or [`EmuKernel::reset_dma_counters`] last ran —
    /// synchronous and asynchronous jobs alike, each added when it finishes (a job the
    /// worker is running is not in it yet). A kick the simulator stops with an error
    /// adds nothing. What the model moves, not a measurement (docs/simulator.md).
    pub fn dma_counters(&self) -> DmaCounters {
        self.lock().dma
    }

    /// Sets the counters of [`EmuKernel::dma_counters`] to zero.
    pub fn reset_dma_counters(&self) {
        self.lock().dma = DmaCounters::default();
    }

    /// Sets the simulator's work budget for each job from now on (docs/simulator.md,
    /// "Bounds"; [`crate::sim::DEFAULT_WORK_BUDGET`] unless set). A job that needs more
    /// stops where it ran out, and the device layer reports
    /// [`crate::Error::WorkBudget`].
    pub fn set_work_budget(&self, units: u64) {
        let sim = Arc::clone(&self.lock().sim);
        worker::lock_sim(&sim).set_work_budget(units);
    }

    /// The work units the last job used (the simulator's count since the job started).
    pub fn work_used(&self) -> u64 {
        let sim = Arc::clone(&self.lock().sim);
        worker::lock_sim(&sim).work_used()
    }

    /// Buffer objects alive in the kernel (across every fd).
    pub fn live_objects(&self) -> usize {
        let s = self.lock_pruned();
        let mut seen: Vec<*const Mutex<EmuBo>> = Vec::new();
        for f in s.files.values() {
            match f {
                File::Device { handles, .. } => seen.extend(handles.values().map(Arc::as_ptr)),
                File::DmaBuf(bo) => seen.push(Arc::as_ptr(bo)),
                File::Fence { .. } | File::Misc | File::Foreign => {}
            }
        }
        seen.extend(s.exports.values().map(|e| Arc::as_ptr(&e.bo)));
        seen.sort();
        seen.dedup();
        seen.len()
    }

    /// Descriptors open in the kernel (device nodes, fences, dma-bufs lent to it or not
    /// yet handed out), for leak checks.
    pub fn open_files(&self) -> usize {
        self.lock().files.len()
    }

    /// Device-address bytes handed out and not given back: the vendor domains' and every
    /// open rocket fd's, for leak checks (a closed rocket fd takes its space with it).
    pub fn iova_in_use(&self) -> u64 {
        let s = self.lock();
        let rocket: u64 = s
            .files
            .values()
            .map(|f| match f {
                File::Device { iova, .. } => iova.in_use(),
                _ => 0,
            })
            .sum();
        s.domains.in_use() + rocket
    }
}

/// A bound of the simulator that stopped a job: what a board would not do, so the
/// device layer reports it by name instead of as a timeout ([`EmuKernel::take_stop`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmuStop {
    /// The job's work budget ran out ([`crate::sim::SimError::WorkBudget`]); the text
    /// is the simulator's.
    WorkBudget(String),
    /// A task's cube is larger than the simulator holds
    /// ([`crate::sim::SimError::CubeLimit`]); the text is the simulator's.
    CubeLimit(String),
}

impl EmuStop {
    /// The stop `e` is, when it is a bound of the simulator.
    pub fn of(e: &crate::sim::SimError) -> Option<EmuStop> {
        match e {
            crate::sim::SimError::WorkBudget { .. } => Some(EmuStop::WorkBudget(e.to_string())),
            crate::sim::SimError::CubeLimit { .. } => Some(EmuStop::CubeLimit(e.to_string())),
            _ => None,
        }
    }
}
