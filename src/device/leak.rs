//! Buffers of jobs that may still run. A job dropped (or timed out) before it finished
//! is waited for with a bound; if it still has not finished, its buffers are held: the
//! CPU may not map them, no job may use them, and when their `Bo`s are dropped they are
//! deliberately leaked (never freed while the NPU may write them, so their addresses
//! are never handed to another buffer), counted and logged, with the reason kept
//! (docs/hardware/kernel-behaviours.md#k7).

use super::backend::{InFlight, Submitted};
use super::{Bo, Device, Error, Job, Result};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A buffer the device leaked on purpose because a job that may still use it did not
/// finish in time.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeakedBuffer {
    /// Its GEM handle.
    pub handle: u32,
    /// Its device address (kept reserved).
    pub dma_addr: u32,
    /// Its size in bytes.
    pub size: usize,
    /// Why it was not freed.
    pub reason: String,
}

/// What the device holds back: buffers of unfinished jobs and those already leaked.
#[derive(Debug, Default)]
pub(super) struct Quarantine {
    /// Live buffers a job may still use, with the reason.
    held: HashMap<u32, String>,
    /// Buffers dropped while held, never freed.
    pub(super) leaked: Vec<LeakedBuffer>,
}

impl Device {
    fn quarantine(&self) -> std::sync::MutexGuard<'_, Quarantine> {
        self.inner
            .quarantine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Buffers leaked on purpose because a job that may still use them did not finish
    /// within its bound (each with the reason). The device also keeps its node open
    /// when dropped while any exist, since closing it would free them.
    pub fn leaked_buffers(&self) -> Vec<LeakedBuffer> {
        self.quarantine().leaked.clone()
    }

    /// Refuses CPU or job access to a held buffer.
    pub(super) fn check_not_held(&self, handle: u32) -> Result<()> {
        match self.quarantine().held.get(&handle) {
            Some(reason) => Err(Error::StillRunning {
                what: format!("buffer {handle}: {reason}"),
            }),
            None => Ok(()),
        }
    }

    /// Whether `bo` is held; if so it is recorded as leaked (its drop then frees
    /// nothing).
    pub(super) fn leak_if_held(&self, bo: &Bo) -> bool {
        let mut q = self.quarantine();
        let Some(reason) = q.held.remove(&bo.handle) else {
            return false;
        };
        eprintln!(
            "rknpu-driver: leaking buffer {} ({} bytes at {:#x}): {reason}",
            bo.handle, bo.size, bo.dma
        );
        q.leaked.push(LeakedBuffer {
            handle: bo.handle,
            dma_addr: bo.dma,
            size: bo.size,
            reason,
        });
        true
    }

    /// Holds every buffer of `job` and of what its submission keeps in flight.
    pub(super) fn hold(&self, job: &Job<'_>, flight: &InFlight, reason: &str) {
        let mut q = self.quarantine();
        let bos = job
            .buffers()
            .chain(flight.tasks.iter())
            .chain(flight.sentinel.iter());
        for bo in bos {
            q.held.insert(bo.handle, reason.to_string());
        }
    }

    /// Waits up to the backend's bound for a job that may still run; if it does not
    /// finish, holds its buffers. `why` says how the job was left.
    pub(super) fn settle(&self, s: Submitted<'_, '_>, why: &str) {
        let Submitted { job, flight } = s;
        let bound = self.inner.backend.settle_bound(job);
        let again = Submitted::new(job, &mut *flight);
        if self
            .inner
            .backend
            .settle(self, again, Instant::now() + bound)
        {
            return;
        }
        let reason = format!(
            "a job {why} had not finished {} ms later; the NPU may still use its buffers, so they are never freed",
            bound.as_millis()
        );
        self.hold(job, flight, &reason);
    }
}

/// The bound a settling wait on the vendor driver uses: the job's own timeout, within
/// 50 ms..5 s.
pub(super) fn vendor_bound(timeout: Duration) -> Duration {
    timeout.clamp(Duration::from_millis(50), Duration::from_secs(5))
}
