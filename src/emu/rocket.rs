//! The emulated `rocket` driver: CREATE_BO in a per-fd address space, SUBMIT as one
//! kick per task, PREP_BO waiting for the jobs that write a buffer, FINI_BO.

use super::mem::{EmuBo, bo_of, load_memory, lock_bo, next_id, store_memory};
use super::worker::{Shared, lock_sim};
use super::{EmuStop, File, PAGE, ROCKET_TIME_MODEL, State};
use crate::regcmd::TAIL_ENTRIES;
use crate::sim::{DmaCounters, Faults, Kick, Simulator};
use crate::submit::irq;
use crate::sys::uapi::*;
use crate::sys::{DmaMem, Errno, Fd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

fn monotonic_ns() -> i64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() * 1_000_000_000 + t.tv_nsec())
        .unwrap_or(0)
}

pub(super) fn rocket_create(
    s: &mut State,
    fd: Fd,
    c: &mut DrmRocketCreateBo,
) -> Result<i32, Errno> {
    if c.size == 0 {
        return Err(Errno::EINVAL);
    }
    let obj = s.next_obj;
    s.next_obj += 0x1000;
    let Some(File::Device {
        handles,
        next_handle,
        iova,
        ..
    }) = s.files.get_mut(&fd.0)
    else {
        return Err(Errno::EBADF);
    };
    let size = (c.size as u64).div_ceil(PAGE) * PAGE;
    // drm_mm: a freed range first, else the lowest free address.
    let dma = iova.alloc(size).ok_or(Errno::ENOMEM)?;
    let handle = *next_handle;
    *next_handle += 1;
    // shmem pages: zeroed, cached CPU mapping, cleaned to the device at creation.
    handles.insert(
        handle,
        Arc::new(Mutex::new(EmuBo {
            size,
            flags: mem::CACHEABLE,
            dma: dma as u32,
            obj_addr: obj,
            mmap_offset: (handle as u64) << 32,
            cpu: Arc::new(DmaMem::zeroed(size as usize)),
            dev: Some(Arc::new(vec![0u8; size as usize])),
            busy_until: None,
            writer: None,
            dirty: false,
            id: next_id(),
            version: 0,
            domain: 0,
            pristine: true,
        })),
    );
    c.handle = handle;
    c.dma_address = dma;
    c.offset = (handle as u64) << 32;
    Ok(0)
}

/// A rocket job that passed SUBMIT: what running it needs.
#[derive(Debug)]
pub(super) struct RocketJob {
    fd: Fd,
    tasks: Vec<DrmRocketTask>,
    /// The buffers it writes, whose fences it signals.
    outs: Vec<Arc<Mutex<EmuBo>>>,
    /// The faults in force at submission.
    faults: Faults,
    /// The scheduler's job timeout at submission.
    timeout: Duration,
}

/// SUBMIT's checks: a job, or `None` for one the driver drops silently (per-job errors
/// are ignored by `rocket_ioctl_submit`, which returns 0).
pub(super) fn rocket_check(
    s: &mut State,
    fd: Fd,
    tasks: &[DrmRocketTask],
    in_handles: &[u32],
    out_handles: &[u32],
) -> Option<RocketJob> {
    if tasks.is_empty() || tasks.iter().any(|t| t.regcmd_count == 0) {
        s.log
            .push("rocket: job with no task or an empty task dropped".into());
        return None;
    }
    let mut bos: Vec<Arc<Mutex<EmuBo>>> = Vec::new();
    for h in in_handles.iter().chain(out_handles) {
        match bo_of(s, fd, *h) {
            // The same BO twice: drm_gem_lock_reservations returns -EALREADY, and
            // rocket_ioctl_submit drops the job and still returns 0 (no fence).
            Ok(b) if bos.iter().any(|x| Arc::ptr_eq(x, &b)) => {
                s.log.push(format!(
                    "rocket: job listing handle {h} twice dropped (-EALREADY from drm_gem_lock_reservations)"
                ));
                return None;
            }
            Ok(b) => bos.push(b),
            Err(_) => {
                s.log
                    .push(format!("rocket: job with unknown handle {h} dropped"));
                return None;
            }
        }
    }
    Some(RocketJob {
        fd,
        tasks: tasks.to_vec(),
        outs: bos.split_off(in_handles.len()),
        faults: s.faults.clone(),
        timeout: s.knobs.rocket_job_timeout,
    })
}

impl RocketJob {
    /// The buffers it writes.
    pub(super) fn outputs(&self) -> &[Arc<Mutex<EmuBo>>] {
        &self.outs
    }

    /// Runs it with the kernel locked throughout (synchronous mode).
    pub(super) fn run_inline(self, s: &mut State) {
        let Some(objects) = self.objects(s) else {
            return;
        };
        let sim = Arc::clone(&s.sim);
        let mut log = Vec::new();
        let mut dma = DmaCounters::default();
        let mut stop = None;
        let ok = self.run(&mut lock_sim(&sim), &objects, &mut log, &mut dma, &mut stop);
        s.dma += dma;
        self.finish(s, ok, log, stop);
    }

    /// Runs it on the worker: the simulator runs without the kernel locked.
    pub(super) fn run_queued<'a>(
        self,
        shared: &'a Shared,
        s: MutexGuard<'a, State>,
    ) -> MutexGuard<'a, State> {
        let Some(objects) = self.objects(&s) else {
            return s;
        };
        let sim = Arc::clone(&s.sim);
        drop(s);
        let mut log = Vec::new();
        let mut dma = DmaCounters::default();
        let mut stop = None;
        let ok = self.run(&mut lock_sim(&sim), &objects, &mut log, &mut dma, &mut stop);
        let mut s = shared.lock();
        s.dma += dma;
        self.finish(&mut s, ok, log, stop);
        s
    }

    /// Every BO of its fd, mapped in the fd's private IOMMU domain; `None` once the fd
    /// is closed.
    fn objects(&self, s: &State) -> Option<Vec<Arc<Mutex<EmuBo>>>> {
        let Some(File::Device { handles, .. }) = s.files.get(&self.fd.0) else {
            return None;
        };
        Some(handles.values().cloned().collect())
    }

    /// Each task is a separate kick with TASK_NUMBER 1 and the DPU pair as the
    /// interrupt mask; whether every task completed. The bytes the kicks' DMA engines
    /// moved are added to `dma`.
    fn run(
        &self,
        sim: &mut Simulator,
        objects: &[Arc<Mutex<EmuBo>>],
        log: &mut Vec<String>,
        dma: &mut DmaCounters,
        budget_stop: &mut Option<EmuStop>,
    ) -> bool {
        sim.set_faults(self.faults.clone());
        // The work budget bounds one job, not the device's lifetime.
        sim.set_work_budget(sim.work_budget());
        let loaded = load_memory(sim, objects, log);
        let mut ok = true;
        let mut modelled = ROCKET_TIME_MODEL.per_submit_s;
        for (i, t) in self.tasks.iter().enumerate() {
            let kick = Kick {
                core: 0,
                regcmd_addr: t.regcmd,
                regcfg_amount: t.regcmd_count.saturating_sub(TAIL_ENTRIES as u32),
                task_number: Some(1),
                int_mask: irq::DPU,
            };
            let run = sim.kick(&kick);
            if let Ok(run) = &run {
                *dma += run.dma;
            }
            if let Ok(run) = &run {
                modelled += ROCKET_TIME_MODEL.task_s(run.macs, &run.dma, i > 0);
            }
            match run {
                Ok(_) if modelled > self.timeout.as_secs_f64() => {
                    log.push(format!(
                        "NPU job timed out: modelled at {:.2} ms after task {i}, beyond the scheduler's job timeout of {:?}",
                        modelled * 1e3,
                        self.timeout
                    ));
                    ok = false;
                    break;
                }
                Ok(run) if run.raw_status & irq::DPU != 0 && run.stall.is_none() => {}
                Ok(run) => {
                    log.push(format!(
                        "NPU job timed out (raw status {:#x}{})",
                        run.raw_status,
                        run.stall
                            .map(|st| format!(", {}", st.why))
                            .unwrap_or_default()
                    ));
                    ok = false;
                    break;
                }
                Err(e) => {
                    log.push(format!("NPU job timed out: {e}"));
                    if let Some(stop) = EmuStop::of(&e) {
                        *budget_stop = Some(stop);
                    }
                    ok = false;
                    break;
                }
            }
        }
        // What the tasks before a hang wrote is in memory, as on a board: the scheduler
        // resets the core after its 500 ms job timeout (PREP_BO waits until then), which
        // stops the NPU but undoes nothing.
        store_memory(sim, objects, &loaded, log);
        if !ok {
            sim.reset();
        }
        ok
    }

    /// The job's fences: its outputs are ready now, or after the scheduler's timeout.
    fn finish(&self, s: &mut State, ok: bool, log: Vec<String>, budget_stop: Option<EmuStop>) {
        s.log.extend(log);
        if budget_stop.is_some() {
            s.budget_stop = budget_stop;
        }
        let until = Instant::now() + if ok { Duration::ZERO } else { self.timeout };
        for b in &self.outs {
            lock_bo(b).busy_until = Some(until);
        }
    }
}

/// PREP_BO: waits until the jobs writing the buffer are done or the absolute deadline
/// passes, then makes the CPU view current. The kernel lock `s` is released while it
/// waits, as the driver's wait does not hold it: on the kernel's condition variable
/// while the worker has a job writing the buffer queued or running, then until the
/// end of a hung job's scheduler timeout.
pub(super) fn rocket_prep_bo(
    shared: &Shared,
    mut s: MutexGuard<'_, State>,
    fd: Fd,
    p: &DrmRocketPrepBo,
) -> Result<i32, Errno> {
    if p.reserved != 0 {
        return Err(Errno::EINVAL);
    }
    let bo = bo_of(&s, fd, p.handle)?;
    let writer = lock_bo(&bo).writer;
    if let Some(ticket) = writer
        && !s.queue.finished(ticket)
    {
        // A deadline already past (or 0) converts to 0 jiffies: -EBUSY.
        if p.timeout_ns <= monotonic_ns() {
            return Err(Errno::EBUSY);
        }
        while !s.queue.finished(ticket) {
            let left = p.timeout_ns - monotonic_ns();
            if left <= 0 {
                drop(s);
                lock_bo(&bo).sync(false, 0, u64::MAX)?;
                return Err(Errno::ETIMEDOUT);
            }
            s = shared.wait_timeout(s, Duration::from_nanos(left as u64));
        }
    }
    drop(s);
    let busy = lock_bo(&bo).busy_until;
    if let Some(until) = busy {
        let now = Instant::now();
        if until > now {
            // A deadline already past (or 0) converts to 0 jiffies: -EBUSY.
            if p.timeout_ns <= monotonic_ns() {
                return Err(Errno::EBUSY);
            }
            let left = Duration::from_nanos((p.timeout_ns - monotonic_ns()).max(0) as u64);
            std::thread::sleep(left.min(until - now));
            if Instant::now() < until {
                lock_bo(&bo).sync(false, 0, u64::MAX)?;
                return Err(Errno::ETIMEDOUT);
            }
        }
    }
    lock_bo(&bo).sync(false, 0, u64::MAX)?;
    // The remaining jiffies: small and positive for near deadlines.
    Ok(1)
}

/// FINI_BO: makes the device view current.
pub(super) fn rocket_fini_bo(s: &State, fd: Fd, f: &DrmRocketFiniBo) -> Result<i32, Errno> {
    if f.reserved != 0 {
        return Err(Errno::EINVAL);
    }
    let bo = bo_of(s, fd, f.handle)?;
    lock_bo(&bo).sync(true, 0, u64::MAX)?;
    Ok(0)
}
