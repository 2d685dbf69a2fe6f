//! A built layer program: its buffers, its bound program, its runs.

use super::Tensor;
use super::spread::LayerJob;
use crate::compute::matmul::WeightBank;
use crate::device::{Bo, Device, Job, JobResult, Pending};
use crate::error::{Error, Result};
use crate::kernels::ops::Cube;
use crate::regcmd::{Program, RegCmd};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A buffer of a layer: its own, or a weight bank's (shared).
#[derive(Debug)]
pub(super) enum Held {
    Own(Bo),
    Bank(Arc<WeightBank>),
}

impl Held {
    pub(super) fn bo(&self) -> &Bo {
        match self {
            Held::Own(bo) => bo,
            Held::Bank(bank) => bank.buffer(),
        }
    }
}

/// One step of a built layer: its name and the indices of its tasks in the program.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerStep {
    /// The name the builder was given.
    pub name: String,
    /// Its tasks, as indices into [`Program::tasks`].
    pub tasks: Range<usize>,
    /// The tensor it writes.
    pub output: Tensor,
}

/// What a built layer knows of a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TensorInfo {
    /// The name the builder was given.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its geometry, when it is a cube.
    pub cube: Option<Cube>,
    /// Whether the host writes it ([`Layer::write`]).
    pub input: bool,
    /// Whether the host reads it ([`Layer::read`]).
    pub output: bool,
    /// Where an intermediate lives in the scratch buffer (`None` for tensors with a
    /// buffer of their own).
    pub scratch_offset: Option<u64>,
}

/// A built layer program: its buffers (owned; freed on drop) and its bound program.
#[derive(Debug)]
pub struct Layer {
    /// The identity its builder gave its tensors.
    pub(super) id: u64,
    pub(super) dev: Device,
    pub(super) program: Program,
    pub(super) regcmd: Bo,
    pub(super) scratch: Option<Bo>,
    pub(super) buffers: Vec<(Tensor, Held)>,
    pub(super) tensors: Vec<TensorInfo>,
    pub(super) steps: Vec<LayerStep>,
    /// The bound program's words, as written into `regcmd`.
    pub(super) words: Vec<RegCmd>,
    /// For each step, the indices into `words` of its tasks' fp16 register multipliers
    /// (`BS_MUL_CFG`), which [`Layer::set_step_scale`] rewrites.
    pub(super) multipliers: Vec<Vec<usize>>,
    pub(super) scratch_sum: u64,
    pub(super) timeout: Duration,
    /// The jobs a whole run submits (on rocket, to stay within
    /// its job timeout: docs/device.md, "Long programs on rocket").
    pub(super) jobs: Vec<LayerJob>,
    /// The result of the last run (of its last job, where it took several).
    pub last: Option<JobResult>,
}

impl Layer {
    fn held(&self, t: Tensor) -> Option<&Held> {
        self.buffers.iter().find(|(x, _)| *x == t).map(|(_, h)| h)
    }

    /// [`Error::Foreign`] for a tensor of another layer (or builder).
    fn info(&self, t: Tensor) -> Result<&TensorInfo> {
        match self.tensors.get(t.index) {
            Some(info) if t.layer == self.id => Ok(info),
            _ => Err(Error::Foreign {
                what: format!("{t:?} used with layer {}", self.id),
            }),
        }
    }

    /// Writes an input tensor's bytes (at most its size; the rest keeps what it held).
    pub fn write(&mut self, t: Tensor, bytes: &[u8]) -> Result<()> {
        let info = self.info(t)?;
        if !info.input {
            return Err(Error::InvalidArgument {
                what: format!("{} is not an input of the layer", info.name),
            });
        }
        if bytes.len() as u64 > info.bytes {
            return Err(Error::ShapeMismatch {
                what: "layer input bytes",
                expected: info.bytes,
                actual: bytes.len() as u64,
            });
        }
        let i = self.buffers.iter().position(|(x, _)| *x == t);
        match i.map(|i| &mut self.buffers[i].1) {
            Some(Held::Own(bo)) => bo.write(0, bytes),
            _ => Err(Error::InvalidArgument {
                what: "an input without a buffer".into(),
            }),
        }
    }

    /// Reads an output tensor's bytes (exactly its size).
    pub fn read(&mut self, t: Tensor) -> Result<Vec<u8>> {
        let info = self.info(t)?;
        if !info.output {
            return Err(Error::InvalidArgument {
                what: format!("{} is not an output of the layer", info.name),
            });
        }
        let len = info.bytes as usize;
        match self.held(t) {
            Some(h) => h.bo().read_with(|b| b[..len].to_vec()),
            None => Err(Error::InvalidArgument {
                what: "an output without a buffer".into(),
            }),
        }
    }

    /// The job running `tasks` (indices into the program) with every buffer of the layer,
    /// verified on submission (what `build` checks once).
    pub(super) fn job(&self, tasks: Range<usize>) -> Job<'_> {
        let mut job =
            Job::new(&self.regcmd, self.program.tasks()[tasks].to_vec()).timeout(self.timeout);
        if let Some(s) = &self.scratch {
            job = job.reads(s).writes(s);
        }
        for (t, h) in &self.buffers {
            let info = &self.tensors[t.index];
            job = if info.output {
                job.reads(h.bo()).writes(h.bo())
            } else {
                job.reads(h.bo())
            };
        }
        job
    }

    /// [`Layer::job`] without the pre-submit verifier: `build` verified the whole chain
    /// against these buffers, and neither the bound words nor the buffers change after
    /// it, so reading and decoding the program again on every run would find the same.
    fn checked_job(&self, tasks: Range<usize>) -> Job<'_> {
        self.job(tasks).unverified()
    }

    /// [`Layer::checked_job`] of `j`, on its cores.
    fn layer_job(&self, j: &LayerJob) -> Job<'_> {
        let (mask, split) = j.cores(&self.dev);
        self.checked_job(j.tasks.clone()).on_cores(mask, &split)
    }

    /// Runs the whole layer as one job (as the jobs of [`Layer::jobs`], one after
    /// another: on rocket, and around steps spread over cores) and waits for it; the
    /// result of the last job.
    pub fn run(&mut self) -> Result<JobResult> {
        let mut last = None;
        for j in &self.jobs {
            last = Some(self.dev.submit(&self.layer_job(j))?);
        }
        let r = last.ok_or_else(|| Error::InvalidArgument {
            what: "a layer of no task".into(),
        })?;
        self.last = Some(r.clone());
        Ok(r)
    }

    /// Submits the whole layer as one job (the jobs of [`Layer::jobs`], in order) and
    /// returns once the last is submitted; the layer's buffers stay borrowed until
    /// [`PendingLayer::wait`]. The jobs of one core (rocket's) run in submission order;
    /// where a step is spread over cores, the kernel could start the next job on a core
    /// the spread job has finished with while another still runs it, so there each job
    /// but the last is waited for before the next is submitted.
    pub fn submit(&mut self) -> Result<PendingLayer<'_>> {
        let spread = self.jobs.iter().any(|j| j.per_core.len() > 1);
        let mut pending = Vec::with_capacity(self.jobs.len());
        for (i, j) in self.jobs.iter().enumerate() {
            let job = self.layer_job(j);
            if spread && i + 1 < self.jobs.len() {
                self.dev.submit(&job)?;
            } else {
                pending.push(self.dev.submit_nonblocking(job)?);
            }
        }
        Ok(PendingLayer { pending })
    }

    /// The ranges of the program's tasks a whole run submits as one job each: the
    /// program; on a driver that stops long jobs (rocket) runs of tasks each modelled
    /// within half its timeout ([`crate::device::Capabilities::job_timeout`]); around a
    /// matmul step spread over cores, the chain before it, the step's own tasks, and the
    /// chain after it.
    pub fn jobs(&self) -> Vec<Range<usize>> {
        self.jobs.iter().map(|j| j.tasks.clone()).collect()
    }

    /// How many tasks each core runs in each job of [`Layer::jobs`] (one entry: one
    /// core).
    pub fn job_cores(&self) -> Vec<Vec<usize>> {
        self.jobs.iter().map(|j| j.per_core.clone()).collect()
    }

    /// Runs each step as a job of its own, one after another (the same tasks and
    /// buffers, a submission and a wait per step): what a backend that calls the NPU
    /// once per operation does. Returns each job's time from submission to completion.
    pub fn run_steps_separately(&mut self) -> Result<Vec<Duration>> {
        let mut times = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            let t0 = Instant::now();
            self.dev.submit(&self.checked_job(s.tasks.clone()))?;
            times.push(t0.elapsed());
        }
        Ok(times)
    }

    /// The bound program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The steps, in chain order.
    pub fn steps(&self) -> &[LayerStep] {
        &self.steps
    }

    /// What the layer knows of `t`.
    /// A tensor of another layer is [`Error::Foreign`].
    pub fn tensor(&self, t: Tensor) -> Result<&TensorInfo> {
        self.info(t)
    }

    /// Bytes of the scratch buffer holding the intermediates, and what they would take
    /// without reuse (each in bytes of its own).
    pub fn scratch_bytes(&self) -> (u64, u64) {
        (
            self.scratch.as_ref().map_or(0, |b| b.size() as u64),
            self.scratch_sum,
        )
    }
}

/// A layer submitted without blocking.
#[derive(Debug)]
pub struct PendingLayer<'l> {
    /// One job, or those of [`Layer::jobs`] not yet waited for.
    pending: Vec<Pending<'l>>,
}

impl PendingLayer<'_> {
    /// Whether it finished, without waiting.
    pub fn is_done(&self) -> Result<bool> {
        for p in &self.pending {
            if !p.is_done()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Waits until it completes or `deadline` passes: the result of its last job, or
    /// the first error (after every job was waited for).
    pub fn wait(self, deadline: Instant) -> Result<JobResult> {
        let mut out = Err(Error::InvalidArgument {
            what: "a layer of no task".into(),
        });
        let mut failed = None;
        for p in self.pending {
            match p.wait(deadline) {
                Ok(r) => out = Ok(r),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => out,
        }
    }
}
