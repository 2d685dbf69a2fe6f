//! Asynchronous products (`rknpu_job` in C): `rknpu_mul_mat_submit` and
//! `rknpu_batch_submit` return at once with a job, and `rknpu_job_wait` collects it.
//!
//! The library's own pending jobs (`PendingMatmul`, `PendingBatch`) borrow the matmul
//! they run, which a handle C holds cannot lend across calls. A job here is therefore
//! owned: it holds an `Arc` of its weights or batch and a copy of its input rows, and a
//! worker thread of its own runs the synchronous product (the very code
//! `rknpu_mul_mat_ex` and `rknpu_batch_mul_mat` run, so the results are the same bit
//! for bit) into buffers of the job. `rknpu_job_wait` copies them to the caller's
//! outputs, so the library writes caller memory only inside a call the caller made.
//! Products on one weights handle (or one batch) take turns on its lock, as synchronous
//! calls do; products on different handles run at once.

use crate::{Code, Failure, Result, RknpuBatch, RknpuWeights, Rows, panic_message};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Where `rknpu_job_wait` writes one product: row `i` of `n` floats at float
/// `i · stride` from address `addr` (a pointer the caller passed, its provenance
/// exposed so that `ffi` can write through it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Output {
    /// The address of the first row.
    pub addr: usize,
    /// Floats from one row's start to the next's.
    pub stride: usize,
    /// Floats a row holds.
    pub n: usize,
}

/// A job's progress.
#[derive(Debug)]
enum State {
    /// The worker is running the product.
    Running,
    /// The product ended: the results of each output, dense (`m` rows of `n`), or the
    /// failure.
    Finished(Result<Vec<Vec<f32>>>),
    /// `wait` took the result.
    Collected,
}

/// A product running on a worker thread (`rknpu_job` in C).
#[derive(Debug)]
pub struct Job {
    state: Mutex<State>,
    finished: Condvar,
    /// Rows of each product.
    pub m: u32,
    /// Where each product is written when the job is waited for.
    pub outputs: Vec<Output>,
}

impl Job {
    /// Starts `work` on a thread of its own; it returns one dense result per output.
    fn spawn(
        m: u32,
        outputs: Vec<Output>,
        work: impl FnOnce() -> Result<Vec<Vec<f32>>> + Send + 'static,
    ) -> Result<Arc<Job>> {
        let job = Arc::new(Job {
            state: Mutex::new(State::Running),
            finished: Condvar::new(),
            m,
            outputs,
        });
        let worker = Arc::clone(&job);
        std::thread::Builder::new()
            .name("rknpu-job".into())
            .spawn(move || {
                let result = catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|payload| {
                    Err(Failure {
                        code: Code::Panic,
                        message: format!("panic in rknpu: {}", panic_message(&*payload)),
                    })
                });
                worker.finish(result);
            })
            .map_err(|e| Failure {
                code: Code::Internal,
                message: format!("could not start a thread for the job: {e}"),
            })?;
        Ok(job)
    }

    /// `y = x · wᵀ` for `m` rows of `x` (copied: the caller may reuse it at once) on a
    /// worker, as [`RknpuWeights::mul_mat_rows`] computes it; `m` is planned before the
    /// copy, so a refused shape is refused here.
    pub fn mul_mat(weights: Arc<RknpuWeights>, x: Rows<'_>, m: u32, y: Output) -> Result<Arc<Job>> {
        weights.prepare(m)?;
        let (ty, stride, bytes) = (x.ty, x.stride, x.bytes.to_vec());
        let rows = m as usize;
        let n = weights.n as usize;
        Job::spawn(m, vec![y], move || {
            let x = Rows {
                ty,
                bytes: &bytes,
                stride,
            };
            let mut dense = vec![0f32; rows * n];
            weights.mul_mat_rows(x, m, &mut dense, n)?;
            Ok(vec![dense])
        })
    }

    /// `ys[j] = x · W_jᵀ` for every member of `batch` in one NPU job, on a worker, as
    /// [`RknpuBatch::mul_mat_rows`] computes it (`x` copied).
    pub fn batch(batch: Arc<RknpuBatch>, x: Rows<'_>, ys: Vec<Output>) -> Result<Arc<Job>> {
        if ys.len() != batch.n.len() {
            return Err(Failure::arg(format!(
                "{} outputs for a batch of {}",
                ys.len(),
                batch.n.len()
            )));
        }
        let (ty, stride, bytes) = (x.ty, x.stride, x.bytes.to_vec());
        let rows = batch.m as usize;
        Job::spawn(batch.m, ys, move || {
            let x = Rows {
                ty,
                bytes: &bytes,
                stride,
            };
            let widths: Vec<usize> = batch.n.iter().map(|&n| n as usize).collect();
            let mut dense: Vec<Vec<f32>> = widths.iter().map(|&n| vec![0f32; rows * n]).collect();
            let mut outs: Vec<&mut [f32]> = dense.iter_mut().map(Vec::as_mut_slice).collect();
            batch.mul_mat_rows(x, &mut outs, &widths)?;
            Ok(dense)
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is replaced whole, never left half-written: a poisoned lock (a panic
        // elsewhere while holding it) still holds a consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the product has ended (successfully or not).
    pub fn is_done(&self) -> bool {
        !matches!(*self.lock(), State::Running)
    }

    /// Blocks until the product ends and takes its results (one dense vector per
    /// output); a second wait is `RKNPU_ERR_ARG`.
    pub fn wait(&self) -> Result<Vec<Vec<f32>>> {
        let mut state = self.lock();
        while matches!(*state, State::Running) {
            state = self.finished.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        match std::mem::replace(&mut *state, State::Collected) {
            State::Finished(result) => result,
            _ => Err(Failure::arg("the job was waited for already")),
        }
    }

    /// Records the worker's result and wakes the waiters.
    fn finish(&self, result: Result<Vec<Vec<f32>>>) {
        *self.lock() = State::Finished(result);
        self.finished.notify_all();
    }
}
