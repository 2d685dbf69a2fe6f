//! The emulated `rocket` driver: CREATE_BO in a per-fd address space, SUBMIT as one
//! kick per task, PREP_BO waiting for the jobs that write a buffer, FINI_BO.

use super::mem::{EmuBo, bo_of, load_memory, lock_bo, store_memory};
use super::{File, PAGE, ROCKET_JOB_TIMEOUT, State};
use crate::regcmd::TAIL_ENTRIES;
use crate::sim::Kick;
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
            dev: Some(vec![0u8; size as usize]),
            busy_until: None,
            dirty: false,
        })),
    );
    c.handle = handle;
    c.dma_address = dma;
    c.offset = (handle as u64) << 32;
    Ok(0)
}

/// One rocket job: each task is a separate kick with TASK_NUMBER 1 and the DPU pair as
/// the interrupt mask. Per-job errors are dropped silently, as the driver does.
pub(super) fn rocket_submit(
    s: &mut State,
    fd: Fd,
    job: &DrmRocketJob,
    tasks: &[DrmRocketTask],
    in_handles: &[u32],
    out_handles: &[u32],
) {
    let _ = job;
    if tasks.is_empty() || tasks.iter().any(|t| t.regcmd_count == 0) {
        s.log
            .push("rocket: job with no task or an empty task dropped".into());
        return;
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
                return;
            }
            Ok(b) => bos.push(b),
            Err(_) => {
                s.log
                    .push(format!("rocket: job with unknown handle {h} dropped"));
                return;
            }
        }
    }
    let Some(File::Device { handles, .. }) = s.files.get(&fd.0) else {
        return;
    };
    // Every BO of this fd is mapped in its private IOMMU domain.
    let objects: Vec<Arc<Mutex<EmuBo>>> = handles.values().cloned().collect();
    let faults = s.faults.clone();
    s.sim.set_faults(faults);
    load_memory(&mut s.sim, &objects, &mut s.log);
    let mut ok = true;
    for t in tasks {
        let kick = Kick {
            core: 0,
            regcmd_addr: t.regcmd,
            regcfg_amount: t.regcmd_count.saturating_sub(TAIL_ENTRIES as u32),
            task_number: Some(1),
            int_mask: irq::DPU,
        };
        match s.sim.kick(&kick) {
            Ok(run) if run.raw_status & irq::DPU != 0 && run.stall.is_none() => {}
            Ok(run) => {
                s.log.push(format!(
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
                s.log.push(format!("NPU job timed out: {e}"));
                ok = false;
                break;
            }
        }
    }
    if ok {
        store_memory(&mut s.sim, &objects, &mut s.log);
    } else {
        // The scheduler resets the core after its 500 ms job timeout; outputs are not
        // written and PREP_BO waits until then.
        s.sim.reset();
    }
    let until = Instant::now()
        + if ok {
            Duration::ZERO
        } else {
            ROCKET_JOB_TIMEOUT
        };
    for h in out_handles {
        if let Ok(b) = bo_of(s, fd, *h) {
            lock_bo(&b).busy_until = Some(until);
        }
    }
}

/// PREP_BO: waits until the jobs writing the buffer are done or the absolute deadline
/// passes, then makes the CPU view current. The kernel lock `s` is released while it
/// waits, as the driver's wait does not hold it.
pub(super) fn rocket_prep_bo(
    s: MutexGuard<'_, State>,
    fd: Fd,
    p: &DrmRocketPrepBo,
) -> Result<i32, Errno> {
    if p.reserved != 0 {
        return Err(Errno::EINVAL);
    }
    let bo = bo_of(&s, fd, p.handle)?;
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
