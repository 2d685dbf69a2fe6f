//! Jobs: tasks in a regcmd buffer, the cores that run them, submission and completion.
//! What is checked and recorded is the same on every interface; submitting and waiting
//! are the backend's.

use super::backend::{InFlight, Submitted};
use super::{Bo, Device, Error, Result};
use crate::regcmd::{Program, words_from_le_bytes};
use crate::submit::{self, TaskDesc};
use crate::verify::{self, BufferAccess, JobBuffer, TaskList};
use std::time::{Duration, Instant};

/// Which cores run a job (vendor `core_mask`, docs/hardware/matmul-programs.md#multi-core).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoreMask {
    /// The kernel picks the least busy core.
    Auto,
    /// Core 0 (mask 1).
    Core0,
    /// Core 1 (mask 2).
    Core1,
    /// Core 2 (mask 4).
    Core2,
    /// Cores 0 and 1 (mask 3).
    Cores01,
    /// All three cores (mask 7).
    All,
}

impl CoreMask {
    /// The mask for `bits`; 5 and 6 are refused because the vendor kernel never starts
    /// them, values above 7 because no such core exists.
    pub fn from_bits(bits: u32) -> Result<CoreMask> {
        Ok(match bits {
            0 => CoreMask::Auto,
            1 => CoreMask::Core0,
            2 => CoreMask::Core1,
            4 => CoreMask::Core2,
            3 => CoreMask::Cores01,
            7 => CoreMask::All,
            5 | 6 => return Err(Error::CoreMask { mask: bits }),
            _ => {
                return Err(Error::InvalidArgument {
                    what: format!(
                        "core mask {bits:#x}: the RK3588 has cores 0..=2 (mask at most 7)"
                    ),
                });
            }
        })
    }

    /// The `core_mask` value.
    pub fn bits(self) -> u32 {
        match self {
            CoreMask::Auto => 0,
            CoreMask::Core0 => 1,
            CoreMask::Core1 => 2,
            CoreMask::Core2 => 4,
            CoreMask::Cores01 => 3,
            CoreMask::All => 7,
        }
    }

    /// Cores that run tasks.
    pub fn cores(self) -> usize {
        match self {
            CoreMask::Cores01 => 2,
            CoreMask::All => 3,
            _ => 1,
        }
    }

    /// The cores the vendor kernel starts and the `subcore_task` slot each reads, in
    /// core order ([`submit::started_cores`]). For `Auto` the kernel picks one core, which
    /// reads the slot of its index; the emulated kernel and trace replay take core 0.
    pub fn started(self) -> &'static [(usize, usize)] {
        // Every mask this type can hold starts a core.
        submit::started_cores(self.bits()).unwrap_or(&[])
    }
}

/// A job: tasks in one regcmd buffer, the cores that run them, the buffers it reads and
/// writes, and a timeout. Borrowing the buffers keeps the CPU off them until the job
/// is done.
#[derive(Debug)]
pub struct Job<'a> {
    pub(super) regcmd: &'a Bo,
    pub(super) tasks: Vec<TaskDesc>,
    pub(super) cores: CoreMask,
    /// Tasks per started core, in core order.
    pub(super) split: Vec<usize>,
    pub(super) timeout: Duration,
    pub(super) reads: Vec<&'a Bo>,
    pub(super) writes: Vec<&'a Bo>,
    /// The IOMMU domain asked for with [`Job::iommu_domain`]; otherwise its buffers'.
    pub(super) iommu_domain: Option<u8>,
    /// Whether submission runs the pre-submit verifier.
    pub(super) verify: bool,
}

impl<'a> Job<'a> {
    /// The tasks of a built program whose regcmd buffer is `regcmd`, on one core
    /// (automatic), with a 500 ms timeout (quirk 23, docs/hardware/quirks.md#quirk-23).
    pub fn from_program(regcmd: &'a Bo, program: &Program) -> Job<'a> {
        Job::new(regcmd, program.tasks().to_vec())
    }

    /// A job of explicit tasks, each `offset` inside `regcmd`.
    pub fn new(regcmd: &'a Bo, tasks: Vec<TaskDesc>) -> Job<'a> {
        let n = tasks.len();
        Job {
            regcmd,
            tasks,
            cores: CoreMask::Auto,
            split: vec![n],
            timeout: Duration::from_millis(500),
            reads: Vec::new(),
            writes: Vec::new(),
            iommu_domain: None,
            verify: true,
        }
    }

    /// Submits without the pre-submit verifier. By default every DMA range of every task
    /// must lie inside the regcmd buffer or a buffer given to [`Job::reads`] /
    /// [`Job::writes`], with that access ([`crate::verify`]); the kernel drivers check
    /// nothing of the kind, so a stray address corrupts whatever memory it names. Skip it
    /// only for programs the verifier cannot read (operations the task model does not
    /// describe yet) or when the cost of reading the regcmd buffer per submission
    /// matters and the program was verified before.
    pub fn unverified(mut self) -> Job<'a> {
        self.verify = false;
        self
    }

    /// The vendor IOMMU domain to run in (0.9.6+), which must be the one its buffers lie
    /// in. Without it the job runs in its buffers' domain ([`Bo::iommu_domain`]); a job
    /// whose buffers lie in several is refused ([`Error::MixedDomains`]).
    pub fn iommu_domain(mut self, domain: u8) -> Job<'a> {
        self.iommu_domain = Some(domain);
        self
    }

    /// The domain the job runs in: the one asked for, else its regcmd buffer's (the
    /// checks hold every buffer to it).
    pub(super) fn domain(&self) -> u8 {
        self.iommu_domain
            .unwrap_or_else(|| self.regcmd.iommu_domain())
    }

    /// Refuses a job whose buffers (or the domain asked for) span several domains.
    fn check_domains(&self) -> Result<()> {
        let mut domains: Vec<u8> = self.buffers().map(Bo::iommu_domain).collect();
        domains.extend(self.iommu_domain);
        domains.sort_unstable();
        domains.dedup();
        if domains.len() > 1 {
            let what = match self.iommu_domain {
                Some(d) => format!(
                    "a job of {} tasks asked to run in domain {d}",
                    self.tasks.len()
                ),
                None => format!("a job of {} tasks", self.tasks.len()),
            };
            return Err(Error::MixedDomains { what, domains });
        }
        Ok(())
    }

    /// Runs on `mask` with `per_core[i]` consecutive tasks on its i-th core (one entry for
    /// single-core masks). Each core's range must be chained on its own.
    pub fn on_cores(mut self, mask: CoreMask, per_core: &[usize]) -> Job<'a> {
        self.cores = mask;
        self.split = per_core.to_vec();
        self
    }

    /// The timeout the kernel waits (vendor) or the deadline the wait uses (rocket).
    pub fn timeout(mut self, timeout: Duration) -> Job<'a> {
        self.timeout = timeout;
        self
    }

    /// A buffer the job reads.
    pub fn reads(mut self, bo: &'a Bo) -> Job<'a> {
        self.reads.push(bo);
        self
    }

    /// A buffer the job writes (rocket signals completion through these).
    pub fn writes(mut self, bo: &'a Bo) -> Job<'a> {
        self.writes.push(bo);
        self
    }

    /// The checks every submit makes (tasks, split, cores, domain, verification against
    /// the job's buffers), without submitting: what a layer build runs once.
    pub(crate) fn check(&self, dev: &Device) -> Result<()> {
        let invalid = |what: String| Err(Error::InvalidArgument { what });
        if self.tasks.is_empty() {
            return invalid("a job with no task".into());
        }
        if self.split.len() != self.cores.cores()
            || self.split.iter().sum::<usize>() != self.tasks.len()
        {
            return invalid(format!(
                "{} tasks split as {:?} over {} core(s)",
                self.tasks.len(),
                self.split,
                self.cores.cores()
            ));
        }
        if let Some(d) = self.iommu_domain.filter(|&d| d >= super::IOMMU_DOMAINS) {
            return invalid(format!("IOMMU domain {d}: the driver has 0..=15"));
        }
        if self.split.contains(&0) {
            return invalid("a core with no task".into());
        }
        for t in &self.tasks {
            if t.offset % 16 != 0 || t.end() > self.regcmd.size() as u64 {
                return invalid(format!(
                    "task list at offset {:#x} of {} entries does not fit the {}-byte regcmd buffer 16-byte aligned",
                    t.offset,
                    t.list_bytes() / 8,
                    self.regcmd.size()
                ));
            }
        }
        let limit = dev
            .inner
            .core_limit
            .load(std::sync::atomic::Ordering::SeqCst);
        if self.cores.bits() > limit {
            return Err(Error::NoSuchCore {
                mask: self.cores.bits(),
                cores: dev.cores(),
            });
        }
        for bo in self.buffers() {
            // A buffer of another open has a handle and address of that open's: in this
            // device's job it would name some other buffer, or none.
            if !bo.device().same_device(dev) {
                return invalid(format!(
                    "buffer {} of {} bytes belongs to another device open",
                    bo.handle,
                    bo.size()
                ));
            }
            dev.check_not_held(bo.handle)?;
        }
        self.check_domains()?;
        dev.inner.backend.check(self)?;
        if self.verify {
            self.verify_ranges(dev.capabilities().tasks_run_alone)?;
        }
        Ok(())
    }

    /// Runs the pre-submit verifier alone, as a submit on `dev` would (whether or not
    /// the job is [`Job::unverified`]): what a program bound once and submitted many
    /// times checks when it is bound, before it submits unverified.
    pub(crate) fn verify_on(&self, dev: &Device) -> Result<()> {
        self.verify_ranges(dev.capabilities().tasks_run_alone)
    }

    /// Every buffer the job names: the regcmd buffer, those it reads, those it writes.
    pub(super) fn buffers(&self) -> impl Iterator<Item = &Bo> {
        std::iter::once(self.regcmd)
            .chain(self.reads.iter().copied())
            .chain(self.writes.iter().copied())
    }

    /// The pre-submit verifier: each core's chain of tasks, read from the regcmd buffer,
    /// against the job's buffers. With `alone` (rocket), every task is kicked on its own,
    /// so a tail may also end the chain early.
    fn verify_ranges(&self, alone: bool) -> Result<()> {
        let bytes = self.regcmd.peek()?;
        let buffer =
            |b: &Bo, access| JobBuffer::new(u64::from(b.dma_addr()), b.size() as u64, access);
        let mut buffers = vec![buffer(self.regcmd, BufferAccess::Read)];
        buffers.extend(self.reads.iter().map(|b| buffer(b, BufferAccess::Read)));
        buffers.extend(self.writes.iter().map(|b| buffer(b, BufferAccess::Write)));
        let base = u64::from(self.regcmd.dma_addr());
        let mut first = 0;
        for &n in &self.split {
            let mut words = Vec::with_capacity(n);
            for t in &self.tasks[first..first + n] {
                // check() has placed every list inside the buffer.
                let list = &bytes[t.offset as usize..t.end() as usize];
                words.push(
                    words_from_le_bytes(list).map_err(|e| Error::InvalidArgument {
                        what: format!("task list at {:#x}: {e}", t.offset),
                    })?,
                );
            }
            let lists: Vec<TaskList<'_>> = self.tasks[first..first + n]
                .iter()
                .zip(&words)
                .map(|(t, w)| TaskList {
                    addr: base + u64::from(t.offset),
                    words: w,
                })
                .collect();
            // Each core's range is one chain: the PC runs what its tails name, so they
            // must name exactly the listed tasks.
            let checked = if alone {
                verify::check_kicked_alone(&lists, &buffers)
            } else {
                verify::check_chain(&lists, &buffers)
            };
            checked.map_err(|e| Error::Verify {
                error: e.shift_task(first),
            })?;
            first += n;
        }
        Ok(())
    }
}

/// What a completed job reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobResult {
    /// Tasks completed (vendor: the wait core's counter; rocket: the job's task count,
    /// which the driver does not report).
    pub task_counter: u32,
    /// Per task, the interrupt status the kernel wrote back: vendor, blocking: the wait
    /// core's status in the job's last task only (`rknpu_job.c:242`, `:368`); 0 for
    /// every other task, for non-blocking jobs and on rocket.
    pub int_status: Vec<u32>,
    /// Time from hardware commit to completion (vendor 0.9.6+).
    pub hw_elapsed: Option<Duration>,
}

/// A submitted job not yet waited for. It borrows the job's buffers, so the CPU cannot
/// touch them while it lives. Dropping it without [`Pending::wait`] waits for the job
/// with a bound (vendor: the job's timeout; rocket: past the scheduler's 500 ms job
/// timeout); a job still not finished then may still run, so its buffers are held and,
/// once dropped, leaked on purpose ([`Device::leaked_buffers`]).
#[derive(Debug)]
pub struct Pending<'a> {
    dev: &'a Device,
    job: Job<'a>,
    /// What the backend needs to wait for it.
    flight: InFlight,
    /// The submission's id in the trace being recorded.
    trace: Option<u32>,
    /// Whether the job was waited for (and settled if it timed out).
    waited: bool,
}

impl Pending<'_> {
    /// Whether the job has finished, without blocking: vendor, the fence polled with a
    /// zero timeout; rocket, PREP_BO with a zero timeout on the job's completion sentinel.
    /// It neither waits for nor settles the job: [`Pending::wait`] still gives its
    /// result (at once when this said `true`), and dropping it still settles it.
    ///
    /// "Finished" means the job no longer runs, not that it succeeded: a rocket job the
    /// scheduler stopped after its timeout is finished, and `wait` reports it as
    /// [`Error::Timeout`]; a vendor non-blocking job that hangs is never finished
    /// (the driver never times such jobs out). A vendor kernel that returned no fence is
    /// [`Error::Unsupported`].
    ///
    /// ```
    /// use rknpu_driver::device::{BoFlags, Device, Job};
    /// use rknpu_driver::kernels::single::{Dtype, SingleMatmul};
    /// use std::time::{Duration, Instant};
    ///
    /// // The emulated kernel's asynchronous mode: jobs run on a worker thread.
    /// let dev = Device::open_spec("emu:async")?;
    /// let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    /// let program = mm.program()?;
    /// let (mut regcmd, mut a, mut b, mut c) = (
    ///     dev.alloc(program.byte_len(), BoFlags::default())?,
    ///     dev.alloc(mm.a_bytes(), BoFlags::default())?,
    ///     dev.alloc(mm.b_bytes(), BoFlags::default())?,
    ///     dev.alloc(mm.c_bytes(), BoFlags::default())?,
    /// );
    /// let addr = |id: rknpu_driver::regcmd::BufferId| {
    ///     Some(u64::from([regcmd.dma_addr(), a.dma_addr(), b.dma_addr(), c.dma_addr()][id.0 as usize]))
    /// };
    /// regcmd.write(0, &rknpu_driver::regcmd::words_to_le_bytes(&program.bind(addr)?))?;
    /// a.write(0, &mm.pack_a_int(&vec![1; 4 * 64])?)?;
    /// b.write(0, &mm.pack_b_int(&vec![2; 64 * 32])?)?;
    ///
    /// // Hold the worker so that the job certainly has not run yet.
    /// let hold = dev.emulator().unwrap().hold_worker();
    /// let job = Job::from_program(&regcmd, &program).reads(&a).reads(&b).writes(&c);
    /// let pending = dev.submit_nonblocking(job)?;
    /// assert!(!pending.is_done()?);
    /// drop(hold);
    /// while !pending.is_done()? {
    ///     std::thread::sleep(Duration::from_millis(1)); // or other work
    /// }
    /// let result = pending.wait(Instant::now() + Duration::from_secs(5))?;
    /// assert_eq!(result.task_counter, 1);
    /// let out = mm.unpack_c_int(&c.read_all()?[..mm.c_bytes()])?;
    /// assert!(out.iter().all(|&v| v == 128));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_done(&self) -> Result<bool> {
        self.dev
            .inner
            .backend
            .is_done(self.dev, &self.job, &self.flight)
    }

    /// Waits until `deadline` for the job. A job not finished then is a
    /// [`Error::Timeout`] (counters unknown: 0). After any failed wait the job is
    /// waited for with a bound, as a dropped one, and its buffers held if it may still
    /// run (vendor: also when the kernel returned no fence to wait on).
    pub fn wait(mut self, deadline: Instant) -> Result<JobResult> {
        let r = self
            .dev
            .inner
            .backend
            .wait(self.dev, self.submitted(), deadline);
        let r = self.dev.budget_not_timeout(r);
        self.waited = true;
        // Any failed wait (a timeout, no fence to wait on, a failed poll) leaves a job
        // that may still run.
        if r.is_err() {
            self.dev.settle(self.submitted(), "whose wait failed");
        }
        self.dev.trace_done(self.trace, &self.job, &r);
        r
    }
}

impl<'a> Pending<'a> {
    /// The job and its flight, as the backend waits for or settles them.
    fn submitted(&mut self) -> Submitted<'_, 'a> {
        Submitted::new(&self.job, &mut self.flight)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.waited {
            self.dev
                .settle(self.submitted(), "dropped before it was waited for");
        }
        if let Some(fd) = self.flight.fence.take() {
            self.dev.inner.port.close(fd);
        }
    }
}

impl Device {
    /// Submits `job` and blocks until it completes or times out.
    pub fn submit(&self, job: &Job<'_>) -> Result<JobResult> {
        job.check(self)?;
        let trace = self.trace_submit(job, false);
        let r = self.inner.backend.run(self, job);
        let r = self.budget_not_timeout(r);
        self.trace_done(trace, job, &r);
        r
    }

    /// On the emulated kernel, a timeout whose cause was a bound of the simulator (not
    /// anything a board would do) becomes [`Error::WorkBudget`] or
    /// [`Error::TooLargeToSimulate`].
    fn budget_not_timeout(&self, r: Result<JobResult>) -> Result<JobResult> {
        match r {
            Err(Error::Timeout { .. }) => match self.emulator().and_then(|e| e.take_stop()) {
                Some(crate::emu::EmuStop::WorkBudget(why)) => Err(Error::WorkBudget { why }),
                Some(crate::emu::EmuStop::CubeLimit(why)) => Err(Error::TooLargeToSimulate { why }),
                None => r,
            },
            r => r,
        }
    }

    /// Submits `job` and returns at once; [`Pending::wait`] waits for it (vendor: on the
    /// fence the kernel returns, which needs `CONFIG_ROCKCHIP_RKNPU_FENCE`; rocket: on the
    /// written buffers), and [`Pending::is_done`] tells without waiting whether it
    /// finished. On the emulated kernel the job runs before this returns unless the
    /// kernel is in its asynchronous mode ([`crate::emu::EmuKernel::set_async`],
    /// `emu:async`).
    pub fn submit_nonblocking<'a>(&'a self, job: Job<'a>) -> Result<Pending<'a>> {
        job.check(self)?;
        self.inner.backend.check_nonblocking(&job)?;
        let trace = self.trace_submit(&job, true);
        let flight = self.inner.backend.start(self, &job)?;
        Ok(Pending {
            dev: self,
            job,
            flight,
            trace,
            waited: false,
        })
    }
}
