//! The emulated kernel's asynchronous mode: one queue of jobs per kernel and the worker
//! thread that runs them, in submission order, on the simulator.
//!
//! Each submission draws a ticket; the worker runs jobs in ticket order and records the
//! highest ticket finished, so "has the job writing this buffer finished" (rocket
//! PREP_BO) and "has this blocking job run" are comparisons. Every change a waiter
//! may be waiting for — a job queued or finished, a fence signalled, a hold released,
//! the kernel closing — is announced on one condition variable paired with the kernel
//! lock; no one spins.

use super::rocket::RocketJob;
use super::vendor::{VendorJob, VendorOutcome};
use super::{EmuKernel, Flavour, State};
use crate::sim::Simulator;
use crate::sys::Errno;
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// What the kernel and its worker share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    /// Announces every change of the state a waiter may be waiting for.
    pub(super) changed: Condvar,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the next change, releasing the lock meanwhile.
    pub(super) fn wait<'a>(&self, s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(s).unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the next change or `timeout`, releasing the lock meanwhile.
    pub(super) fn wait_timeout<'a>(
        &self,
        s: MutexGuard<'a, State>,
        timeout: Duration,
    ) -> MutexGuard<'a, State> {
        match self.changed.wait_timeout(s, timeout) {
            Ok((s, _)) => s,
            Err(e) => e.into_inner().0,
        }
    }
}

pub(super) fn lock_sim(sim: &Mutex<Simulator>) -> MutexGuard<'_, Simulator> {
    sim.lock().unwrap_or_else(|e| e.into_inner())
}

/// A job waiting for the worker.
#[derive(Debug)]
pub(super) enum Job {
    Vendor(VendorJob),
    Rocket(RocketJob),
}

/// The queue and the worker's progress, kept in the kernel state.
#[derive(Debug, Default)]
pub(super) struct Queue {
    /// Whether the asynchronous mode is on.
    on: bool,
    jobs: VecDeque<(u64, Job)>,
    /// The last ticket handed out.
    issued: u64,
    /// Every job up to this ticket has finished (run, or dropped at shutdown).
    done: u64,
    /// Live [`WorkerHold`]s: the worker starts no job while there is one.
    holds: usize,
    /// The kernel is being dropped: the worker exits.
    shutdown: bool,
    /// The outcomes of blocking vendor jobs, by ticket, for their submitters.
    pub(super) results: HashMap<u64, VendorOutcome>,
}

impl Queue {
    /// Whether a submission goes to the worker: in asynchronous mode, and while jobs are
    /// queued or running (after the mode was switched off), which no job overtakes.
    pub(super) fn goes_to_worker(&self) -> bool {
        self.on || self.done < self.issued
    }

    /// Whether a job is queued or running (each holds a reference on the vendor
    /// driver's live IOMMU domain).
    pub(super) fn busy(&self) -> bool {
        self.done < self.issued
    }

    /// Whether the job of `ticket` has finished.
    pub(super) fn finished(&self, ticket: u64) -> bool {
        self.done >= ticket
    }
}

/// While it lives, the worker of an asynchronous [`EmuKernel`] starts no job (one it
/// is running finishes): jobs submitted meanwhile stay queued, so a test can observe a
/// job that has certainly not finished, or a deadline that passes before it runs.
/// Dropping it lets the worker go on. Made by [`EmuKernel::hold_worker`].
///
/// A blocking submission made while the worker is held waits for it like any other
/// job, so the thread holding the guard must not submit blocking jobs (it would wait
/// for itself).
#[derive(Debug)]
#[must_use = "the worker is released when the hold is dropped"]
pub struct WorkerHold {
    shared: Arc<Shared>,
}

impl Drop for WorkerHold {
    fn drop(&mut self) {
        self.shared.lock().queue.holds -= 1;
        self.shared.changed.notify_all();
    }
}

impl EmuKernel {
    /// A kernel playing `flavour` in asynchronous mode ([`EmuKernel::set_async`]).
    pub fn new_async(flavour: Flavour) -> EmuKernel {
        let k = EmuKernel::new(flavour);
        k.set_async(true);
        k
    }

    /// Switches the asynchronous mode on or off (off by default).
    ///
    /// On, a non-blocking submission — vendor `RKNPU_JOB_NONBLOCK`, every rocket
    /// SUBMIT — is queued to a worker thread the kernel owns and the request returns at
    /// once: the vendor fence is signalled when the worker has run the job, and rocket
    /// PREP_BO on a buffer the job writes waits for it (with its deadline). A blocking
    /// vendor submission is queued too, and its request returns once the worker has
    /// run it. The queue is one per kernel and runs jobs in submission order; each runs
    /// on the simulator as a synchronous submission would (the faults in force when it
    /// was submitted, the same log lines, the same core accounting).
    ///
    /// Off, jobs run inside the request again, once the jobs already queued have run
    /// (a submission made while any are queued still goes behind them).
    pub fn set_async(&self, on: bool) {
        let mut s = self.lock();
        s.queue.on = on;
        if on {
            let mut worker = self.worker.lock().unwrap_or_else(|e| e.into_inner());
            if worker.is_none() {
                let shared = Arc::clone(&self.shared);
                *worker = Some(
                    std::thread::Builder::new()
                        .name("rknpu-emu-worker".into())
                        .spawn(move || work(&shared))
                        .expect("spawning the emulated kernel's worker thread"),
                );
            }
        }
    }

    /// Whether the asynchronous mode is on.
    pub fn is_async(&self) -> bool {
        self.lock().queue.on
    }

    /// Holds the worker until the returned guard is dropped: see [`WorkerHold`].
    pub fn hold_worker(&self) -> WorkerHold {
        self.lock().queue.holds += 1;
        WorkerHold {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Queues `job`: its ticket.
    pub(super) fn enqueue(&self, s: &mut State, job: Job) -> u64 {
        let q = &mut s.queue;
        q.issued += 1;
        let ticket = q.issued;
        q.jobs.push_back((ticket, job));
        self.shared.changed.notify_all();
        ticket
    }
}

impl Drop for EmuKernel {
    /// Stops the worker and joins it: a job it is running finishes, jobs still queued
    /// are dropped without running (each logged). No request can be waiting for them:
    /// a kernel is dropped only when nothing refers to it any more.
    fn drop(&mut self) {
        self.lock().queue.shutdown = true;
        self.shared.changed.notify_all();
        let worker = self.worker.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = worker.take() {
            let _ = w.join();
        }
    }
}

/// The worker: runs queued jobs in ticket order until the kernel shuts down.
fn work(shared: &Shared) {
    let mut s = shared.lock();
    loop {
        if s.queue.shutdown {
            while let Some((ticket, _)) = s.queue.jobs.pop_front() {
                s.log.push(format!(
                    "emulated kernel closing: queued job {ticket} dropped without running"
                ));
                s.queue.done = ticket;
            }
            shared.changed.notify_all();
            return;
        }
        if s.queue.holds > 0 {
            s = shared.wait(s);
            continue;
        }
        let Some((ticket, job)) = s.queue.jobs.pop_front() else {
            s = shared.wait(s);
            continue;
        };
        // A blocking submitter waits for an outcome even if the simulator panics: it
        // gets EIO then (the panic is printed as usual), a non-blocking job's fence
        // stays unsignalled, and the worker goes on with the next job.
        let blocking = match &job {
            Job::Vendor(job) if job.is_blocking() => Some(job.failed(Errno::EIO)),
            _ => None,
        };
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| match job {
            Job::Vendor(job) => {
                let (mut s, out) = job.run_queued(shared, s);
                if blocking.is_some() {
                    s.queue.results.insert(ticket, out);
                }
                s
            }
            Job::Rocket(job) => job.run_queued(shared, s),
        }));
        s = match ran {
            Ok(s) => s,
            Err(_) => {
                let mut s = shared.lock();
                s.log.push(format!(
                    "emulated kernel: job {ticket} panicked in the worker"
                ));
                if let Some(out) = blocking {
                    s.queue.results.insert(ticket, out);
                }
                s
            }
        };
        s.queue.done = ticket;
        shared.changed.notify_all();
    }
}

/// Test hook: watches a kernel's shared state from outside it, so a test can see what
/// happened to queued jobs when the kernel was dropped and that its worker ended.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct ShutdownProbe(std::sync::Weak<Shared>);

#[cfg(test)]
impl ShutdownProbe {
    /// The kernel's log, while anything (the kernel, its worker, a hold) keeps its
    /// state alive.
    pub(crate) fn log(&self) -> Option<Vec<String>> {
        self.0.upgrade().map(|s| s.lock().log.clone())
    }

    /// Whether the state is gone: the kernel, its worker thread and every hold ended.
    pub(crate) fn gone(&self) -> bool {
        self.0.upgrade().is_none()
    }
}

#[cfg(test)]
impl EmuKernel {
    pub(crate) fn shutdown_probe(&self) -> ShutdownProbe {
        ShutdownProbe(Arc::downgrade(&self.shared))
    }
}
