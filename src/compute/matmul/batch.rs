//! Several matmuls in one job: one program whose chain on each core runs the members'
//! tasks one after another (a layer's gate and up projections, say), one submission.

use super::{
    Matmul, Submitted, all_done, job_ranges, program_job, shape, submit_blocking, submit_chains,
    wait_all,
};
use crate::device::{Bo, BoFlags, Job, Pending};
use crate::error::{Error, Result};
use crate::kernels::matmul::REGCMD;
use crate::regcmd::{BufferId, Program, ProgramBuilder, words_to_le_bytes};
use std::time::{Duration, Instant};

/// Matmuls (each with its own bank, activations and results) submitted as one job.
///
/// ```
/// use rknpu_driver::device::Device;
/// use rknpu_driver::compute::matmul::{Matmul, MatmulBatch, WeightBank, Weights};
/// use std::sync::Arc;
///
/// let dev = Device::open_spec("emu")?;
/// let gate = Arc::new(WeightBank::new(&dev, (64, 32), Weights::I8(&vec![1; 64 * 32]))?);
/// let up = Arc::new(WeightBank::new(&dev, (64, 32), Weights::I8(&vec![2; 64 * 32]))?);
/// let mut both = MatmulBatch::new(vec![Matmul::new(&gate, 1)?, Matmul::new(&up, 1)?])?;
/// let x = vec![0.5f32; 32];
/// let (mut g, mut u) = (vec![0f32; 64], vec![0f32; 64]);
/// both.mul_mat(&[&x, &x], &mut [&mut g, &mut u])?; // one submission
/// assert!((g[0] - 16.0).abs() < 0.1 && (u[0] - 32.0).abs() < 0.2);
/// # Ok::<(), rknpu_driver::Error>(())
/// ```
#[derive(Debug)]
pub struct MatmulBatch {
    members: Vec<Matmul>,
    program: Program,
    regcmd: Bo,
    per_core: Vec<usize>,
    /// The task ranges submitted as separate jobs (on rocket, to stay within its job
    /// timeout).
    jobs: Vec<std::ops::Range<usize>>,
    /// The deadline of a blocking call.
    pub timeout: Duration,
}

/// The relocation targets of member `j`: its A, weights and C.
fn ids(j: usize) -> [BufferId; 3] {
    let base = 1 + 3 * j as u32;
    [BufferId(base), BufferId(base + 1), BufferId(base + 2)]
}

impl MatmulBatch {
    /// Joins `members` (at least one, all on one device: members of another device are
    /// [`Error::InvalidArgument`]) into one program: core `c`
    /// runs every member's tasks for core `c`, in member order. The program has
    /// incremental bodies when every member was made with them
    /// ([`super::MatmulOptions::incremental`]).
    pub fn new(members: Vec<Matmul>) -> Result<MatmulBatch> {
        let Some(first) = members.first() else {
            return Err(Error::ShapeMismatch {
                what: "batch members (at least one)",
                expected: 1,
                actual: 0,
            });
        };
        if members.iter().any(|m| m.npu.is_some()) {
            return Err(Error::NotOffered {
                what: "a batch member that dequantises on the NPU (its dequantisation tasks are not joined)".into(),
            });
        }
        let dev = first.bank.device().clone();
        if members.iter().any(|m| !m.bank.device().same_device(&dev)) {
            return Err(Error::InvalidArgument {
                what: "batch members of different devices (one job runs on one device)".into(),
            });
        }
        let cores = members
            .iter()
            .map(|m| m.plan.per_core.len())
            .max()
            .unwrap_or(1);
        let incremental = members.iter().all(|m| m.incremental);
        let mut p = ProgramBuilder::new(REGCMD).incremental(incremental);
        let mut per_core = vec![0usize; cores];
        for (core, count) in per_core.iter_mut().enumerate() {
            for (j, m) in members.iter().enumerate() {
                m.plan.push_core(&mut p, core, ids(j))?;
                *count += m.plan.per_core.get(core).copied().unwrap_or(0);
            }
            p.end_chain();
        }
        let program = p.build()?;
        // In the members' IOMMU domain (a batch of banks in two is refused at its job).
        let mut regcmd = dev.alloc_beside(
            members[0].bank.buffer(),
            program.byte_len(),
            BoFlags::default(),
        )?;
        let regcmd_addr = regcmd.dma_addr();
        let words = program.bind(|id: BufferId| {
            if id == REGCMD {
                return Some(regcmd_addr as u64);
            }
            let j = (id.0 as usize - 1) / 3;
            let m = members.get(j)?;
            let addr = match (id.0 as usize - 1) % 3 {
                0 => m.a.dma_addr(),
                1 => m.bank.bo.dma_addr(),
                _ => m.c.dma_addr(),
            };
            Some(addr as u64)
        })?;
        regcmd.write(0, &words_to_le_bytes(&words))?;
        let timeout = members.iter().map(|m| m.timeout).max().unwrap_or_default();
        let jobs = job_ranges(&dev, &words, &program)?;
        let batch = MatmulBatch {
            members,
            program,
            regcmd,
            per_core,
            jobs,
            timeout,
        };
        // Verified once, here: every call submits the same words.
        batch.job().verify_on(&dev)?;
        Ok(batch)
    }

    /// Ends the batch and gives its members back, in order, each usable on its own
    /// again (its buffers and program untouched by the batch): a batch does not consume
    /// its members.
    pub fn into_members(self) -> Vec<Matmul> {
        self.members
    }

    /// The members, in order.
    pub fn members(&self) -> &[Matmul] {
        &self.members
    }

    /// Tasks per core of the joined program.
    pub fn per_core(&self) -> &[usize] {
        &self.per_core
    }

    /// The ranges of the joined program's tasks each call submits as one job (see
    /// [`Matmul::jobs`]).
    pub fn jobs(&self) -> &[std::ops::Range<usize>] {
        &self.jobs
    }

    fn job(&self) -> Job<'_> {
        let dev = self.members[0].bank.device();
        let list = (&self.regcmd, &self.program);
        self.with_buffers(program_job(dev, list, &self.per_core, self.timeout))
    }

    /// `job` with every member's buffers.
    fn with_buffers<'a>(&'a self, job: Job<'a>) -> Job<'a> {
        self.members.iter().fold(job, |job, m| m.with_buffers(job))
    }

    /// Quantises or rounds each member's `xs[j]` into its A buffer.
    fn put(&mut self, xs: &[&[f32]]) -> Result<Vec<Submitted>> {
        shape("batch inputs", self.members.len(), xs.len())?;
        self.members
            .iter_mut()
            .zip(xs)
            .map(|(m, x)| m.put_f32(x))
            .collect()
    }

    /// [`Matmul::mul_mat`] for every member in one job: `ys[j] = xs[j] · W_jᵀ`.
    pub fn mul_mat(&mut self, xs: &[&[f32]], ys: &mut [&mut [f32]]) -> Result<()> {
        shape("batch outputs", self.members.len(), ys.len())?;
        let what = self.put(xs)?;
        let dev = self.members[0].bank.device().clone();
        submit_blocking(
            &dev,
            self.job(),
            (&self.regcmd, &self.program, &self.jobs),
            self.timeout,
            |job| self.with_buffers(job),
        )?;
        for ((m, y), w) in self.members.iter().zip(ys.iter_mut()).zip(what) {
            m.read_f32_of(w, y)?;
        }
        Ok(())
    }

    /// Submits [`MatmulBatch::mul_mat`] and returns at once.
    pub fn submit(&mut self, xs: &[&[f32]]) -> Result<PendingBatch<'_>> {
        let what = self.put(xs)?;
        let this: &MatmulBatch = self;
        let pending = submit_chains(
            this.members[0].bank.device(),
            (&this.regcmd, &this.program),
            (&this.per_core, &this.jobs),
            this.timeout,
            |job| this.with_buffers(job),
        )?;
        Ok(PendingBatch {
            batch: this,
            pending,
            what,
        })
    }
}

/// A submitted batch not yet waited for (see [`super::PendingMatmul`]).
#[derive(Debug)]
pub struct PendingBatch<'b> {
    batch: &'b MatmulBatch,
    /// One job, or on the vendor driver one per core's chain.
    pending: Vec<Pending<'b>>,
    what: Vec<Submitted>,
}

impl PendingBatch<'_> {
    /// Whether the job finished (without blocking).
    pub fn is_done(&self) -> Result<bool> {
        all_done(&self.pending)
    }

    /// Waits until `deadline`, then reads each member's results into `ys[j]`.
    pub fn wait(self, deadline: Instant, ys: &mut [&mut [f32]]) -> Result<()> {
        shape("batch outputs", self.batch.members.len(), ys.len())?;
        wait_all(self.pending, deadline)?;
        for ((m, y), &w) in self.batch.members.iter().zip(ys.iter_mut()).zip(&self.what) {
            m.read_f32_of(w, y)?;
        }
        Ok(())
    }
}
