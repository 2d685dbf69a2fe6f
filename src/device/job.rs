//! Jobs: tasks in a regcmd buffer, the cores that run them, submission and completion.

use super::{Bo, BoFlags, Device, DeviceError, Interface, Result};
use crate::regcmd::Program;
use crate::submit::{self, BufferTask, TaskDesc};
use crate::sys::uapi::*;
use crate::sys::{Errno, Fd, Ioctl, VendorOp};
use crate::trace::{DoneRecord, SubmitRecord};
use std::time::{Duration, Instant};
use zerocopy::{FromBytes, IntoBytes};

/// An absolute CLOCK_MONOTONIC time `d` from now, in ns (rocket PREP_BO deadlines).
pub(super) fn deadline_ns(d: Duration) -> i64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() * 1_000_000_000 + t.tv_nsec())
        .unwrap_or(0);
    now.saturating_add(d.as_nanos().min(i64::MAX as u128) as i64)
}

/// Which cores run a job (vendor `core_mask`, kernel-interfaces.md 3.5).
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
            5 | 6 => return Err(DeviceError::CoreMask { mask: bits }),
            _ => {
                return Err(DeviceError::InvalidArgument {
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
    regcmd: &'a Bo<'a>,
    tasks: Vec<TaskDesc>,
    cores: CoreMask,
    split: Vec<usize>,
    timeout: Duration,
    reads: Vec<&'a Bo<'a>>,
    writes: Vec<&'a Bo<'a>>,
    iommu_domain: u8,
}

impl<'a> Job<'a> {
    /// The tasks of a built program whose regcmd buffer is `regcmd`, on one core
    /// (automatic), with a 500 ms timeout (matmul-recipe.md quirk 23).
    pub fn from_program(regcmd: &'a Bo<'a>, program: &Program) -> Job<'a> {
        Job::new(regcmd, program.tasks().to_vec())
    }

    /// A job of explicit tasks, each `offset` inside `regcmd`.
    pub fn new(regcmd: &'a Bo<'a>, tasks: Vec<TaskDesc>) -> Job<'a> {
        let n = tasks.len();
        Job {
            regcmd,
            tasks,
            cores: CoreMask::Auto,
            split: vec![n],
            timeout: Duration::from_millis(500),
            reads: Vec::new(),
            writes: Vec::new(),
            iommu_domain: 0,
        }
    }

    /// The vendor IOMMU domain to run in (0.9.6+): the one its buffers were allocated in.
    pub fn iommu_domain(mut self, domain: u8) -> Job<'a> {
        self.iommu_domain = domain;
        self
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
    pub fn reads(mut self, bo: &'a Bo<'a>) -> Job<'a> {
        self.reads.push(bo);
        self
    }

    /// A buffer the job writes (rocket signals completion through these).
    pub fn writes(mut self, bo: &'a Bo<'a>) -> Job<'a> {
        self.writes.push(bo);
        self
    }

    fn check(&self, dev: &Device) -> Result<()> {
        let invalid = |what: String| Err(DeviceError::InvalidArgument { what });
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
        if self.iommu_domain > 15 {
            return invalid(format!(
                "IOMMU domain {}: the driver has 0..=15",
                self.iommu_domain
            ));
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
        if dev.info.interface == Interface::Rocket {
            if self.cores != CoreMask::Auto {
                return Err(DeviceError::Unsupported {
                    what: "core selection: the rocket driver schedules jobs on cores itself".into(),
                });
            }
            if self.writes.is_empty() {
                return invalid("rocket signals completion only through written buffers: name one with Job::writes".into());
            }
        }
        Ok(())
    }
}

/// What a completed job reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobResult {
    /// Tasks completed (vendor: the wait core's counter; rocket: the job's task count,
    /// which the driver does not report).
    pub task_counter: u32,
    /// Per task, the interrupt status the kernel wrote back (vendor: the last task of
    /// each core's range; 0 elsewhere and on rocket).
    pub int_status: Vec<u32>,
    /// Time from hardware commit to completion (vendor 0.9.6+).
    pub hw_elapsed: Option<Duration>,
}

/// A submitted job not yet waited for.
#[derive(Debug)]
pub struct Pending<'a> {
    dev: &'a Device,
    job: Job<'a>,
    kind: PendingKind<'a>,
    /// The submission's id in the trace being recorded.
    trace: Option<u32>,
}

#[derive(Debug)]
enum PendingKind<'a> {
    Vendor { fence: Option<Fd>, tasks: Bo<'a> },
    Rocket,
}

impl Pending<'_> {
    /// Waits until `deadline` for the job. A job still running then is a
    /// [`DeviceError::Timeout`] (counters unknown: 0).
    pub fn wait(mut self, deadline: Instant) -> Result<JobResult> {
        let r = self.wait_inner(deadline);
        self.dev.trace_done(self.trace, &self.job, &r);
        r
    }

    fn wait_inner(&mut self, deadline: Instant) -> Result<JobResult> {
        match &mut self.kind {
            PendingKind::Vendor { fence, tasks } => {
                let Some(fd) = fence.take() else {
                    return Err(DeviceError::Unsupported {
                        what: "waiting: the kernel returned no fence".into(),
                    });
                };
                let mut ready = false;
                while !ready {
                    let left = deadline.saturating_duration_since(Instant::now());
                    ready = self
                        .dev
                        .kernel
                        .poll(fd, left)
                        .map_err(|errno| DeviceError::Ioctl { op: "poll", errno })?;
                    if !ready && Instant::now() >= deadline {
                        break;
                    }
                }
                self.dev.kernel.close(fd);
                if !ready {
                    return Err(DeviceError::Timeout {
                        task_counter: 0,
                        int_status: 0,
                    });
                }
                Ok(JobResult {
                    task_counter: self.job.tasks.len() as u32,
                    int_status: task_statuses(tasks, self.job.tasks.len())?,
                    hw_elapsed: None,
                })
            }
            PendingKind::Rocket => self.dev.rocket_wait(&self.job, deadline),
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let PendingKind::Vendor {
            fence: Some(fd), ..
        } = self.kind
        {
            self.dev.kernel.close(fd);
        }
    }
}

/// The `int_status` words of a task array.
fn task_statuses(tasks: &mut Bo<'_>, n: usize) -> Result<Vec<u32>> {
    let bytes = tasks.read_all()?;
    Ok((0..n)
        .map(|i| {
            bytes
                .get(i * 40..i * 40 + 40)
                .and_then(|b| RknpuTask::read_from_bytes(b).ok())
                .map_or(0, |t| t.int_status)
        })
        .collect())
}

impl Device {
    /// Submits `job` and blocks until it completes or times out.
    pub fn submit(&self, job: &Job<'_>) -> Result<JobResult> {
        job.check(self)?;
        let trace = self.trace_submit(job, false);
        let r = self.submit_blocking(job);
        self.trace_done(trace, job, &r);
        r
    }

    fn submit_blocking(&self, job: &Job<'_>) -> Result<JobResult> {
        match self.info.interface {
            Interface::Vendor => {
                let (mut sub, mut tasks) = self.vendor_submit_args(job, false)?;
                let r = self.vendor(VendorOp::Submit(&mut sub), "RKNPU_SUBMIT");
                let statuses = task_statuses(&mut tasks, job.tasks.len())?;
                match r {
                    Ok(_) => Ok(JobResult {
                        task_counter: sub.task_counter,
                        int_status: statuses,
                        hw_elapsed: Some(Duration::from_nanos(sub.hw_elapse_time.max(0) as u64)),
                    }),
                    Err(DeviceError::Ioctl {
                        errno: Errno::ETIMEDOUT,
                        ..
                    }) => Err(DeviceError::Timeout {
                        task_counter: sub.task_counter,
                        int_status: statuses.last().copied().unwrap_or(0),
                    }),
                    Err(e) => Err(e),
                }
            }
            Interface::Rocket => {
                self.rocket_submit(job)?;
                self.rocket_wait(job, Instant::now() + job.timeout)
            }
        }
    }

    /// Submits `job` and returns at once; [`Pending::wait`] waits for it (vendor: on the
    /// fence the kernel returns, which needs `CONFIG_ROCKCHIP_RKNPU_FENCE`; rocket: on the
    /// written buffers).
    pub fn submit_nonblocking<'a>(&'a self, job: Job<'a>) -> Result<Pending<'a>> {
        job.check(self)?;
        let trace = self.trace_submit(&job, true);
        let kind = match self.info.interface {
            Interface::Vendor => {
                let (mut sub, tasks) = self.vendor_submit_args(&job, true)?;
                self.vendor(VendorOp::Submit(&mut sub), "RKNPU_SUBMIT")?;
                PendingKind::Vendor {
                    fence: (sub.fence_fd >= 0).then_some(Fd(sub.fence_fd)),
                    tasks,
                }
            }
            Interface::Rocket => {
                self.rocket_submit(&job)?;
                PendingKind::Rocket
            }
        };
        Ok(Pending {
            dev: self,
            job,
            kind,
            trace,
        })
    }

    /// Records a submission in the trace being recorded, if any; its trace id.
    fn trace_submit(&self, job: &Job<'_>, nonblocking: bool) -> Option<u32> {
        let mut guard = self.recording();
        let r = guard.as_mut()?;
        let n = job.tasks.len() as u32;
        let ranges = match job.cores {
            CoreMask::Auto => vec![(0, n)],
            _ => submit::ranges(&job.split),
        };
        let record = SubmitRecord {
            flags: match self.info.interface {
                Interface::Vendor => mem_flags(nonblocking),
                Interface::Rocket => 0,
            },
            core_mask: job.cores.bits(),
            timeout_ms: job.timeout.as_millis().min(u32::MAX as u128) as u32,
            ranges,
            tasks: job
                .tasks
                .iter()
                .map(|&task| BufferTask {
                    buffer: job.regcmd.handle(),
                    task,
                })
                .collect(),
            writes: job.writes.iter().map(|b| b.handle()).collect(),
        };
        Some(r.submit(&record, &mut |h| self.trace_contents(h, false)))
    }

    /// Records how a traced submission ended and what it left in the buffers.
    pub(super) fn trace_done(&self, id: Option<u32>, job: &Job<'_>, r: &Result<JobResult>) {
        let Some(id) = id else { return };
        let mut guard = self.recording();
        let Some(rec) = guard.as_mut() else { return };
        let n = job.tasks.len();
        let done = match r {
            Ok(j) => DoneRecord {
                ok: true,
                errno: 0,
                task_counter: j.task_counter,
                elapsed_ns: j.hw_elapsed.map_or(0, |d| d.as_nanos() as u64),
                statuses: j.int_status.clone(),
            },
            Err(e) => {
                let mut statuses = vec![0; n];
                let (errno, task_counter) = match e {
                    DeviceError::Timeout {
                        task_counter,
                        int_status,
                    } => {
                        if let Some(last) = statuses.last_mut() {
                            *last = *int_status;
                        }
                        (Errno::ETIMEDOUT as i32, *task_counter)
                    }
                    DeviceError::Ioctl { errno, .. } => (*errno as i32, 0),
                    _ => (-1, 0),
                };
                DoneRecord {
                    ok: false,
                    errno,
                    task_counter,
                    elapsed_ns: 0,
                    statuses,
                }
            }
        };
        let writes: Vec<u32> = job.writes.iter().map(|b| b.handle()).collect();
        rec.done(id, &done, &writes, &mut |h| self.trace_contents(h, true));
    }

    /// The task array and the submit structure of a vendor job.
    fn vendor_submit_args(
        &self,
        job: &Job<'_>,
        nonblocking: bool,
    ) -> Result<(RknpuSubmit, Bo<'_>)> {
        let flags = BoFlags {
            kernel_mapping: true,
            ..BoFlags::default()
        };
        let mut tasks = self.alloc_with(job.tasks.len() * 40, flags, false)?;
        let mut bytes = Vec::with_capacity(job.tasks.len() * 40);
        for t in &job.tasks {
            let task = RknpuTask {
                enable_mask: t.enable,
                int_mask: t.int_mask,
                int_clear: submit::irq::CLEAR_ALL,
                regcfg_amount: t.regcfg_amount,
                regcmd_addr: job.regcmd.dma_addr() as u64 + t.offset as u64,
                ..RknpuTask::default()
            };
            bytes.extend_from_slice(task.as_bytes());
        }
        tasks.write(0, &bytes)?;
        let mut sub = RknpuSubmit {
            flags: mem_flags(nonblocking),
            timeout: job.timeout.as_millis().min(u32::MAX as u128) as u32,
            task_number: job.tasks.len() as u32,
            task_obj_addr: tasks.obj_addr,
            iommu_domain_id: job.iommu_domain as u32,
            core_mask: job.cores.bits(),
            fence_fd: -1,
            ..RknpuSubmit::default()
        };
        match job.cores {
            // Whichever core the kernel picks finds the whole job in its slot.
            CoreMask::Auto => {
                for slot in 0..3 {
                    sub.subcore_task[slot] = RknpuSubcoreTask {
                        task_start: 0,
                        task_number: job.tasks.len() as u32,
                    };
                }
            }
            _ => {
                let ranges = submit::ranges(&job.split);
                for (&(_, slot), (task_start, task_number)) in
                    job.cores.started().iter().zip(ranges)
                {
                    sub.subcore_task[slot] = RknpuSubcoreTask {
                        task_start,
                        task_number,
                    };
                }
            }
        }
        Ok((sub, tasks))
    }

    /// Waits on every buffer a rocket job writes (PREP_BO with the absolute deadline).
    fn rocket_wait(&self, job: &Job<'_>, deadline: Instant) -> Result<JobResult> {
        let left = deadline.saturating_duration_since(Instant::now());
        for bo in &job.writes {
            let mut p = DrmRocketPrepBo {
                handle: bo.handle,
                reserved: 0,
                timeout_ns: deadline_ns(left),
            };
            match self.ioctl(&mut Ioctl::RocketPrepBo(&mut p)) {
                Ok(_) => {}
                Err(DeviceError::Ioctl {
                    errno: Errno::ETIMEDOUT | Errno::EBUSY,
                    ..
                }) => {
                    return Err(DeviceError::Timeout {
                        task_counter: 0,
                        int_status: 0,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(JobResult {
            task_counter: job.tasks.len() as u32,
            int_status: vec![0; job.tasks.len()],
            hw_elapsed: None,
        })
    }

    fn rocket_submit(&self, job: &Job<'_>) -> Result<()> {
        let tasks: Vec<DrmRocketTask> = job
            .tasks
            .iter()
            .map(|t| DrmRocketTask {
                regcmd: job.regcmd.dma_addr() + t.offset,
                regcmd_count: t.regcmd_count(),
            })
            .collect();
        let ins: Vec<u32> = std::iter::once(job.regcmd)
            .chain(job.reads.iter().copied())
            .map(Bo::handle)
            .collect();
        let outs: Vec<u32> = job.writes.iter().map(|b| b.handle()).collect();
        let mut j = DrmRocketJob::default();
        self.ioctl(&mut Ioctl::RocketSubmit {
            job: &mut j,
            tasks: &tasks,
            in_handles: &ins,
            out_handles: &outs,
        })
        .map(|_| ())
    }
}

fn mem_flags(nonblocking: bool) -> u32 {
    let base = job::PC | job::PINGPONG;
    if nonblocking {
        base | job::NONBLOCK | job::FENCE_OUT
    } else {
        base
    }
}
