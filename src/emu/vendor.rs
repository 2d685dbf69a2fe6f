//! The emulated vendor `rknpu` driver (DRM flavour): RKNPU_ACTION, the MEM_* requests,
//! and SUBMIT, which runs each started core's range on the simulator as the driver
//! kicks it (the vendor and rocket driver sources, docs/hardware/kernel-behaviours.md#sources).

use super::mem::{EmuBo, bo_of, load_memory, lock_bo, object, release, store_memory};
use super::vendor_mem::{mem_create, mem_sync};
use super::worker::{Job, Shared, lock_sim};
use super::{EmuKernel, EmuStop, File, Flavour, State};
use crate::sim::{DmaCounters, Faults, MAX_TASKS, Simulator};
use crate::submit::{self, TaskDesc};
use crate::sys::uapi::*;
use crate::sys::{Errno, Fd, Ioctl, VendorOp};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use zerocopy::FromBytes;

/// Bytes of one `rknpu_task` in a task array.
const TASK_BYTES: usize = std::mem::size_of::<RknpuTask>();

/// Byte offset of `int_status` in an `rknpu_task`.
const STATUS_AT: usize = std::mem::offset_of!(RknpuTask, int_status);

impl EmuKernel {
    /// A vendor request on the DRM node.
    pub(super) fn vendor(
        &self,
        s: &mut State,
        fd: Fd,
        op: &mut VendorOp<'_>,
    ) -> Result<i32, Errno> {
        match op {
            VendorOp::Action(a) => self.action(s, a),
            VendorOp::MemCreate(c) => mem_create(s, fd, c, self.flavour),
            VendorOp::MemMap(m) => {
                let bo = bo_of(s, fd, m.handle)?;
                if let Some(File::Device { imported, .. }) = s.files.get(&fd.0)
                    && imported.contains(&m.handle)
                {
                    // An imported object has no fake offset of this driver: map the
                    // dma-buf instead.
                    return Err(Errno::EINVAL);
                }
                m.offset = lock_bo(&bo).mmap_offset;
                Ok(0)
            }
            VendorOp::MemDestroy(d) => {
                let Some(File::Device { handles, .. }) = s.files.get_mut(&fd.0) else {
                    return Err(Errno::EBADF);
                };
                // An unknown handle is EINVAL (rknpu_gem.c:935).
                let bo = handles.remove(&d.handle).ok_or(Errno::EINVAL)?;
                release(s, &bo);
                Ok(0)
            }
            VendorOp::MemSync(y) => mem_sync(s, y),
            // SUBMIT takes the kernel lock itself (it may wait for the worker):
            // `EmuKernel::ioctl` sends it to `vendor_submit`.
            VendorOp::Submit(_) => Err(Errno::EINVAL),
        }
    }

    /// A request on the misc node `/dev/rknpu`. Its ioctl handler dispatches on
    /// `_IOC_NR` alone (`rknpu_drv.c:596`), so DRM_IOCTL_VERSION (nr 0) runs
    /// RKNPU_ACTION on the first 8 bytes of `drm_version`: `version_major` is read as
    /// the action (0, GET_HW_VERSION) and the result lands in `version_minor`; the name,
    /// date and description are never written. Of the driver's own requests the
    /// emulation answers RKNPU_ACTION only.
    pub(super) fn misc(&self, s: &mut State, req: &mut Ioctl<'_>) -> Result<i32, Errno> {
        match req {
            Ioctl::DrmVersion { version, .. } => {
                let mut a = RknpuAction {
                    flags: version.version_major as u32,
                    value: version.version_minor as u32,
                };
                self.action(s, &mut a)?;
                version.version_major = a.flags as i32;
                version.version_minor = a.value as i32;
                Ok(0)
            }
            Ioctl::Vendor(VendorNode::Misc, VendorOp::Action(a)) => self.action(s, a),
            _ => Err(Errno::EINVAL),
        }
    }

    /// RKNPU_ACTION: the values a 0.9.x driver reports, and the soft reset.
    fn action(&self, s: &mut State, a: &mut RknpuAction) -> Result<i32, Errno> {
        a.value = match a.flags {
            action::GET_HW_VERSION => 0x0000_0101,
            action::GET_DRV_VERSION => match self.flavour {
                Flavour::Vendor096 => 906,
                _ => 908,
            },
            action::GET_FREQ => 1_000_000_000,
            action::GET_VOLT => 750_000,
            action::ACT_RESET => {
                lock_sim(&s.sim).reset();
                s.log
                    .push("soft reset of all cores (RKNPU_ACT_RESET)".into());
                0
            }
            action::GET_IOMMU_EN => 1,
            action::GET_TOTAL_SRAM_SIZE | action::GET_FREE_SRAM_SIZE => 0,
            action::GET_IOMMU_DOMAIN_ID => 0,
            action::SET_IOMMU_DOMAIN_ID if a.value < 16 => a.value,
            13..=17 => a.value,
            _ => return Err(Errno::EINVAL),
        };
        Ok(0)
    }
    /// SUBMIT: checks the request as the driver does, then runs each started core's
    /// range on the simulator, writes the interrupt status back, and completes, times out
    /// or hands out a fence. In asynchronous mode (or while jobs are queued, which no
    /// submission overtakes) the job goes to the worker's queue: a non-blocking one
    /// returns at once with a fence the worker signals, a blocking one waits for the
    /// worker to have run it.
    pub(super) fn vendor_submit<'a>(
        &'a self,
        mut s: MutexGuard<'a, State>,
        sub: &mut RknpuSubmit,
    ) -> Result<i32, Errno> {
        let mut job = VendorJob::check(&mut s, sub)?;
        // The job holds a reference on its domain from here until it is done.
        s = self.submit_domain(s, sub)?;
        if job.nonblock() && s.knobs.failing_commits > 0 {
            // rknpu_submit installs the out-fence before it schedules the job and
            // returns the commit's error without taking it back (rknpu_job.c).
            s.knobs.failing_commits -= 1;
            fence_out(&mut s, sub, false);
            s.log.push(format!(
                "commit of a non-blocking job failed: EINVAL, out-fence {} left installed",
                sub.fence_fd
            ));
            return Err(Errno::EINVAL);
        }
        if !job.nonblock()
            && let Some(after) = s.knobs.reset_after.take()
        {
            // Another process's soft reset wakes the waiter: the job fails unrun.
            s.log.push(format!(
                "soft reset by another process {after:?} into the wait: EINVAL"
            ));
            drop(s);
            std::thread::sleep(after);
            return Err(Errno::EINVAL);
        }
        let out = if s.queue.goes_to_worker() {
            if job.nonblock() {
                fence_out(&mut s, sub, false);
                job.fence = (sub.fence_fd >= 0).then_some(sub.fence_fd);
                self.enqueue(&mut s, Job::Vendor(job));
                return Ok(0);
            }
            let ticket = self.enqueue(&mut s, Job::Vendor(job));
            loop {
                if let Some(out) = s.queue.results.remove(&ticket) {
                    break out;
                }
                s = self.shared.wait(s);
            }
        } else {
            job.run_inline(&mut s)
        };
        // A blocking wait that ends in an error sleeps without holding the kernel, as
        // the driver's wait does.
        drop(s);
        *sub = out.sub;
        if let Some(wait) = out.wait {
            std::thread::sleep(wait);
        }
        out.result
    }
}

/// A vendor job that passed SUBMIT's checks: what running it needs.
#[derive(Debug)]
pub(super) struct VendorJob {
    sub: RknpuSubmit,
    /// The task array as the kernel read it at submission.
    tasks: Vec<u8>,
    task_bo: Arc<Mutex<EmuBo>>,
    /// The faults in force at submission.
    faults: Faults,
    /// Asynchronous mode: the fence handed out at submission, signalled when the job
    /// completes.
    fence: Option<i32>,
}

/// What a vendor job gives its submitter: the request's result, the submit structure
/// with its counters, and how long a failing blocking wait takes before it returns.
#[derive(Debug)]
pub(super) struct VendorOutcome {
    result: Result<i32, Errno>,
    sub: RknpuSubmit,
    wait: Option<Duration>,
}

/// The cores a job starts with, and every object of its domain, taken when it starts.
struct Plan {
    slots: Vec<(usize, usize)>,
    objects: Vec<Arc<Mutex<EmuBo>>>,
}

impl VendorJob {
    /// SUBMIT's checks of the request, made when it is submitted.
    fn check(s: &mut State, sub: &RknpuSubmit) -> Result<VendorJob, Errno> {
        if sub.flags & job::PC == 0 || sub.task_number == 0 || sub.core_mask > 7 {
            return Err(Errno::EINVAL);
        }
        if sub.core_mask > s.core_limit {
            // `core_mask <= config->core_mask` (rknpu_drv.c:204-223): 0x3 on the RK3583.
            s.log.push(format!(
                "core_mask {:#x} above this NPU's {:#x}: EINVAL",
                sub.core_mask, s.core_limit
            ));
            return Err(Errno::EINVAL);
        }
        if sub.flags & (job::FENCE_IN) != 0 {
            // The emulation has no fence producers to wait for.
            return Err(Errno::EINVAL);
        }
        let task_bo = object(s, sub.task_obj_addr, "SUBMIT")?;
        if lock_bo(&task_bo).flags & mem::KERNEL_MAPPING == 0 {
            s.log.push(
                "SUBMIT with a task array created without RKNPU_MEM_KERNEL_MAPPING: the real driver dereferences a NULL kernel address".into(),
            );
            return Err(Errno::EFAULT);
        }
        // The task array, read through the kernel's own (coherent) mapping: the CPU view.
        let Some(tasks) = lock_bo(&task_bo).cpu.to_vec() else {
            s.log.push("SUBMIT while the task array is mapped by the CPU (the emulation copies only unmapped buffers)".into());
            return Err(Errno::EBUSY);
        };
        Ok(VendorJob {
            sub: *sub,
            tasks,
            task_bo,
            faults: s.faults.clone(),
            fence: None,
        })
    }

    fn nonblock(&self) -> bool {
        self.sub.flags & job::NONBLOCK != 0
    }

    /// Runs the job with the kernel locked throughout (synchronous mode).
    fn run_inline(self, s: &mut State) -> VendorOutcome {
        let plan = match self.plan(s) {
            Ok(plan) => plan,
            Err(out) => return *out,
        };
        let sim = Arc::clone(&s.sim);
        let mut log = Vec::new();
        let run = run_cores(&mut lock_sim(&sim), &self, &plan, &mut log);
        self.finish(s, &plan, run, log)
    }

    /// Runs the job on the worker: the simulator runs without the kernel locked, so
    /// requests (a fence's poll, buffers of other jobs) proceed meanwhile.
    pub(super) fn run_queued<'a>(
        self,
        shared: &'a Shared,
        mut s: MutexGuard<'a, State>,
    ) -> (MutexGuard<'a, State>, VendorOutcome) {
        let plan = match self.plan(&mut s) {
            Ok(plan) => plan,
            Err(out) => return (s, *out),
        };
        let sim = Arc::clone(&s.sim);
        drop(s);
        let mut log = Vec::new();
        let run = run_cores(&mut lock_sim(&sim), &self, &plan, &mut log);
        let mut s = shared.lock();
        let out = self.finish(&mut s, &plan, run, log);
        (s, out)
    }

    /// The outcome of a job that could not run: `errno`, the request unchanged.
    pub(super) fn failed(&self, errno: Errno) -> VendorOutcome {
        VendorOutcome {
            result: Err(errno),
            sub: self.sub,
            wait: None,
        }
    }

    /// Whether the job blocks its submitter (its outcome is handed back).
    pub(super) fn is_blocking(&self) -> bool {
        !self.nonblock()
    }

    /// The cores it starts; a job no core commits ends here.
    fn plan(&self, s: &mut State) -> Result<Plan, Box<VendorOutcome>> {
        let slots = started(s, self.sub.core_mask);
        let timeout = Duration::from_millis(self.sub.timeout as u64);
        if slots.is_empty() {
            // Masks 5 and 6 pass the range check but no core is started.
            s.log.push(format!(
                "core_mask {:#x}: no case commits it; the job never starts",
                self.sub.core_mask
            ));
            return Err(Box::new(self.never_committed(s, timeout)));
        }
        if let Some(&(core, _)) = slots.iter().find(|&&(c, _)| s.occupied[c]) {
            s.log.push(format!(
                "core {core} still runs a non-blocking job that never completed: this job is never committed"
            ));
            // The wait gives up after three timeouts (docs/hardware/kernel-behaviours.md#k4).
            return Err(Box::new(self.never_committed(s, timeout * 3)));
        }
        // The live domain's page table: only objects created in the job's domain are
        // mapped (an address of another domain's object reads what this domain maps
        // there, or faults).
        let domain = s.domains.placed(self.sub.iommu_domain_id as u8);
        Ok(Plan {
            slots,
            objects: s
                .objects
                .values()
                .filter(|b| lock_bo(b).domain == domain)
                .cloned()
                .collect(),
        })
    }

    /// Writes the interrupt status back and completes, times out or settles the fence.
    fn finish(
        mut self,
        s: &mut State,
        plan: &Plan,
        run: CoresRun,
        log: Vec<String>,
    ) -> VendorOutcome {
        s.log.extend(log);
        s.dma += run.dma;
        if run.budget_stop.is_some() {
            s.budget_stop = run.budget_stop.clone();
        }
        let slots = &plan.slots;
        let nonblock = self.nonblock();
        let sub = &mut self.sub;
        if run.completed {
            if !nonblock {
                // Only job->last_task, the last task of the last committed range, gets
                // the wait core's status (rknpu_job.c:242, :368), through the kernel's
                // cacheable vmap: it is in the CPU's cache, not yet in memory, so a
                // FROM_DEVICE sync of the task array discards it.
                let last = sub.subcore_task[slots[slots.len() - 1].1];
                let at = (last.task_start + last.task_number - 1) as usize * TASK_BYTES;
                let mut task_bo = lock_bo(&self.task_bo);
                task_bo.pristine = false;
                task_bo
                    .cpu
                    .write(at + STATUS_AT, &run.wait_status.to_le_bytes());
            }
            // Modelled elapsed time: the int8 peak of 1024 MACs per ns and core.
            let modelled = Duration::from_nanos(run.macs / 1024 / slots.len() as u64 + 10_000);
            sub.task_counter = sub.task_number;
            sub.hw_elapse_time = modelled.max(run.elapsed).as_nanos() as i64;
            if nonblock {
                signal(s, sub, self.fence, true);
            }
            return self.outcome(Ok(0), None);
        }
        if nonblock {
            // Non-blocking jobs never time out (rknpu_job.c:823-830): the cores that did
            // not finish stay held by this job, whatever resets follow.
            for &(core, _) in slots {
                if !run.finished.contains(&core) {
                    s.occupied[core] = true;
                    s.log.push(format!(
                        "core {core}: a non-blocking job never completes; the core stays busy"
                    ));
                }
            }
            signal(s, sub, self.fence, false);
            return self.outcome(Ok(0), None);
        }
        // PC_TASK_STATUS & 0xfff of the wait core (rknpu_job.c:246-256).
        sub.task_counter = run.wait_counter & 0xfff;
        s.log.push(format!(
            "job timeout: task counter {}, int status {:#x}; soft reset of all cores",
            sub.task_counter, run.wait_status
        ));
        let timeout = Duration::from_millis(sub.timeout as u64);
        self.outcome(Err(Errno::ETIMEDOUT), Some(timeout))
    }

    /// A job no core commits: a never-signalled fence, or `EINVAL` once the blocking
    /// wait of `wait` gives up.
    fn never_committed(&self, s: &mut State, wait: Duration) -> VendorOutcome {
        let mut sub = self.sub;
        if self.nonblock() {
            signal(s, &mut sub, self.fence, false);
            return VendorOutcome {
                result: Ok(0),
                sub,
                wait: None,
            };
        }
        VendorOutcome {
            result: Err(Errno::EINVAL),
            sub,
            wait: Some(wait),
        }
    }

    fn outcome(self, result: Result<i32, Errno>, wait: Option<Duration>) -> VendorOutcome {
        VendorOutcome {
            result,
            sub: self.sub,
            wait,
        }
    }
}

/// A non-blocking job's fence: the one handed out at submission (asynchronous mode),
/// signalled if the job completed, or else a new one in that state.
fn signal(s: &mut State, sub: &mut RknpuSubmit, fence: Option<i32>, signalled: bool) {
    match fence {
        Some(fd) => {
            // The caller may have closed it already.
            if let Some(File::Fence { signalled: f }) = s.files.get_mut(&fd) {
                *f = signalled;
            }
        }
        None => fence_out(s, sub, signalled),
    }
}

/// A new fence in `sub.fence_fd`, if the submission asks for one.
fn fence_out(s: &mut State, sub: &mut RknpuSubmit, signalled: bool) {
    if sub.flags & job::FENCE_OUT != 0 {
        let fd = s.next_fd;
        s.next_fd += 1;
        s.files.insert(fd, File::Fence { signalled });
        sub.fence_fd = fd;
    }
}

/// The cores a job of `mask` starts with the slot each reads: for 0 (automatic) the
/// first core no non-blocking job holds, which reads the slot of its index.
fn started(s: &State, mask: u32) -> Vec<(usize, usize)> {
    if mask == 0 {
        let cores = if s.core_limit >= 4 { 3 } else { 2 };
        let core = (0..cores).find(|&c| !s.occupied[c]).unwrap_or(0);
        return vec![(core, core)];
    }
    submit::started_cores(mask).unwrap_or(&[]).to_vec()
}

/// What the started cores of a job did.
struct CoresRun {
    /// Every started core ran its whole range.
    completed: bool,
    /// The cores that ran their whole range.
    finished: Vec<usize>,
    /// The wait core's task counter (within its last kick) and interrupt status.
    wait_counter: u32,
    wait_status: u32,
    /// Multiply-accumulates performed.
    macs: u64,
    /// Bytes the DMA engines moved.
    dma: DmaCounters,
    /// Wall time the simulator took.
    elapsed: Duration,
    /// The work budget's error, when that is what stopped a core.
    budget_stop: Option<EmuStop>,
}

/// Runs each started core's range of the job on the simulator against every object's
/// device view (those of the job's IOMMU domain), in core order, until one does not complete; the
/// cores are reset after a job that did not. What the kernel would log goes to `log`.
fn run_cores(sim: &mut Simulator, job: &VendorJob, plan: &Plan, log: &mut Vec<String>) -> CoresRun {
    let started = Instant::now();
    let read_task = |i: usize| -> Option<RknpuTask> {
        job.tasks
            .get(i * TASK_BYTES..(i + 1) * TASK_BYTES)
            .and_then(|b| RknpuTask::read_from_bytes(b).ok())
    };
    let mut out = CoresRun {
        completed: true,
        finished: Vec::new(),
        wait_counter: 0,
        wait_status: 0,
        macs: 0,
        dma: DmaCounters::default(),
        elapsed: Duration::ZERO,
        budget_stop: None,
    };
    sim.set_faults(job.faults.clone());
    // The work budget bounds one job, not the device's lifetime.
    sim.set_work_budget(sim.work_budget());
    let loaded = load_memory(sim, &plan.objects, log);
    for (k, &(core, slot)) in plan.slots.iter().enumerate() {
        let range = job.sub.subcore_task[slot];
        if range.task_number == 0 {
            log.push(format!(
                "core {core}: subcore_task[{slot}] holds no task; the core never raises its interrupt"
            ));
            out.completed = false;
            break;
        }
        let base = range.task_start as usize;
        let run = sim.run_range(core, range.task_number, |i| {
            read_task(base + i as usize).map(|t| TaskDesc {
                offset: t.regcmd_addr as u32,
                regcfg_amount: t.regcfg_amount,
                int_mask: t.int_mask,
                enable: t.enable_mask,
            })
        });
        out.macs += run.macs;
        out.dma += run.dma;
        let failed = run.failure.is_some();
        if let Some(e) = run.error.as_ref().and_then(EmuStop::of) {
            out.budget_stop = Some(e);
        }
        if let Some(why) = run.failure {
            log.push(format!("core {core}: {why}"));
            out.completed = false;
        } else {
            out.finished.push(core);
        }
        if k == 0 {
            // The wait core (core 0 for masks 1/3/7, 1 for 2, 2 for 4): its PC counts
            // the tasks of the current kick of at most MAX_TASKS.
            out.wait_counter = match (failed, run.done) {
                (true, d) => d % MAX_TASKS,
                (false, 0) => 0,
                (false, d) => (d - 1) % MAX_TASKS + 1,
            };
            out.wait_status = run.int_status;
        }
        if !out.completed {
            break;
        }
    }
    store_memory(sim, &plan.objects, &loaded, log);
    if !out.completed {
        sim.reset();
    }
    out.elapsed = started.elapsed();
    out
}
