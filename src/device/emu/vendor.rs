//! The emulated vendor `rknpu` driver (DRM flavour): RKNPU_ACTION, the MEM_* requests,
//! and SUBMIT, which runs each started core's range on the simulator as the driver
//! kicks it (kernel-interfaces.md 3).

use super::mem::{EmuBo, bo_of, load_memory, lock_bo, object, release, store_memory};
use super::{EmuKernel, File, Flavour, PAGE, State};
use crate::submit::{self, TaskDesc};
use crate::sys::uapi::*;
use crate::sys::{DmaMem, Errno, Fd, VendorOp};
use std::sync::{Arc, Mutex};
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
            VendorOp::MemCreate(c) => mem_create(s, fd, c),
            VendorOp::MemMap(m) => {
                let bo = bo_of(s, fd, m.handle)?;
                m.offset = lock_bo(&bo).mmap_offset;
                Ok(0)
            }
            VendorOp::MemDestroy(d) => {
                let Some(File::Device { handles, .. }) = s.files.get_mut(&fd.0) else {
                    return Err(Errno::EBADF);
                };
                let bo = handles.remove(&d.handle).ok_or(Errno::ENOENT)?;
                release(s, &bo);
                Ok(0)
            }
            VendorOp::MemSync(y) => mem_sync(s, y),
            VendorOp::Submit(sub) => self.vendor_submit(s, sub),
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
                s.sim.reset();
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
    /// SUBMIT: checks the request as the driver does, runs each started core's range on
    /// the simulator, writes the interrupt statuses back, and completes, times out or
    /// hands out a fence.
    fn vendor_submit(&self, s: &mut State, sub: &mut RknpuSubmit) -> Result<i32, Errno> {
        if sub.flags & job::PC == 0 || sub.task_number == 0 || sub.core_mask > 7 {
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
        let Some(tasks_bytes) = lock_bo(&task_bo).cpu.to_vec() else {
            s.log.push("SUBMIT while the task array is mapped by the CPU (the emulation copies only unmapped buffers)".into());
            return Err(Errno::EBUSY);
        };
        // Which cores run which task ranges (kernel-interfaces.md 3.5).
        let slots = submit::started_cores(sub.core_mask).unwrap_or(&[]);
        let timeout = Duration::from_millis(sub.timeout as u64);
        let nonblock = sub.flags & job::NONBLOCK != 0;
        if slots.is_empty() {
            // Masks 5 and 6 pass the range check but no core is started.
            s.log.push(format!(
                "core_mask {:#x}: no case commits it; the job never starts",
                sub.core_mask
            ));
            if nonblock {
                return self.fence_out(s, sub, false);
            }
            s.wait = Some(timeout);
            return Err(Errno::EINVAL);
        }
        let started = Instant::now();
        let run = run_cores(s, sub, slots, &tasks_bytes);
        // The kernel writes the status through its own mapping of the task array.
        for (at, status) in run.status_writes {
            let mut b = lock_bo(&task_bo);
            b.cpu.write(at, &status.to_le_bytes());
            if let Some(dev) = &mut b.dev {
                dev[at..at + 4].copy_from_slice(&status.to_le_bytes());
            }
        }
        if run.completed {
            // Modelled elapsed time: the int8 peak of 1024 MACs per ns and core.
            let modelled = Duration::from_nanos(run.macs / 1024 / slots.len() as u64 + 10_000);
            sub.task_counter = sub.task_number;
            sub.hw_elapse_time = modelled.max(started.elapsed()).as_nanos() as i64;
            if nonblock {
                return self.fence_out(s, sub, true);
            }
            return Ok(0);
        }
        sub.task_counter = run.wait_counter;
        s.log.push(format!(
            "job timeout: task counter {}, int status {:#x}; soft reset of all cores",
            run.wait_counter, run.wait_status
        ));
        s.sim.reset();
        if nonblock {
            return self.fence_out(s, sub, false);
        }
        s.wait = Some(timeout);
        Err(Errno::ETIMEDOUT)
    }

    fn fence_out(
        &self,
        s: &mut State,
        sub: &mut RknpuSubmit,
        signalled: bool,
    ) -> Result<i32, Errno> {
        if sub.flags & job::FENCE_OUT != 0 {
            let fd = s.next_fd;
            s.next_fd += 1;
            s.files.insert(fd, File::Fence { signalled });
            sub.fence_fd = fd;
        }
        Ok(0)
    }
}

/// MEM_CREATE: a new object top-down from 4 GiB in the one shared domain, or the
/// information of an existing handle (after PRIME import).
fn mem_create(s: &mut State, fd: Fd, c: &mut RknpuMemCreate) -> Result<i32, Errno> {
    if c.handle != 0 {
        // An existing handle (after PRIME import): its information, no allocation.
        let bo = bo_of(s, fd, c.handle)?;
        let b = lock_bo(&bo);
        c.size = b.size;
        c.obj_addr = b.obj_addr;
        c.dma_addr = b.dma as u64;
        c.sram_size = 0;
        return Ok(0);
    }
    if c.size == 0 || !(0..16).contains(&c.iommu_domain_id) {
        return Err(Errno::EINVAL);
    }
    let size = c.size.div_ceil(PAGE) * PAGE;
    let top = s.vendor_iova_top;
    if size > top {
        return Err(Errno::ENOMEM);
    }
    s.vendor_iova_top = top - size;
    let obj = s.next_obj;
    s.next_obj += 0x1000;
    let cacheable = c.flags & mem::CACHEABLE != 0;
    let bo = Arc::new(Mutex::new(EmuBo {
        size,
        flags: c.flags,
        dma: (top - size) as u32,
        obj_addr: obj,
        mmap_offset: 0,
        cpu: Arc::new(DmaMem::zeroed(size as usize)),
        dev: cacheable.then(|| vec![0u8; size as usize]),
        busy_until: None,
    }));
    let Some(File::Device {
        handles,
        next_handle,
        ..
    }) = s.files.get_mut(&fd.0)
    else {
        return Err(Errno::EBADF);
    };
    let handle = *next_handle;
    *next_handle += 1;
    lock_bo(&bo).mmap_offset = (handle as u64) << 32;
    handles.insert(handle, Arc::clone(&bo));
    s.objects.insert(obj, bo);
    c.handle = handle;
    c.size = size;
    c.obj_addr = obj;
    c.dma_addr = top - size;
    c.sram_size = 0;
    Ok(0)
}

/// MEM_SYNC: copies between the CPU and the device view of a cacheable object.
fn mem_sync(s: &mut State, y: &RknpuMemSync) -> Result<i32, Errno> {
    if y.obj_addr == 0 {
        return Err(Errno::EINVAL);
    }
    let bo = object(s, y.obj_addr, "MEM_SYNC")?;
    let mut b = lock_bo(&bo);
    if b.flags & mem::CACHEABLE == 0 {
        return Err(Errno::EINVAL);
    }
    if y.flags & mem::SYNC_TO_DEVICE != 0 {
        b.sync(true, y.offset, y.size)?;
    }
    if y.flags & mem::SYNC_FROM_DEVICE != 0 {
        b.sync(false, y.offset, y.size)?;
    }
    Ok(0)
}

/// What the started cores of a job did.
struct CoresRun {
    /// Every started core ran its whole range.
    completed: bool,
    /// The wait core's task counter and interrupt status.
    wait_counter: u32,
    wait_status: u32,
    /// Multiply-accumulates performed.
    macs: u64,
    /// `(byte offset in the task array, status)` for the last task of each range that
    /// completed.
    status_writes: Vec<(usize, u32)>,
}

/// Runs each started core's range of `sub` on the simulator against every object's
/// device view (one shared domain), in core order, until one does not complete.
fn run_cores(
    s: &mut State,
    sub: &RknpuSubmit,
    slots: &[(usize, usize)],
    tasks_bytes: &[u8],
) -> CoresRun {
    let read_task = |i: usize| -> Option<RknpuTask> {
        tasks_bytes
            .get(i * TASK_BYTES..(i + 1) * TASK_BYTES)
            .and_then(|b| RknpuTask::read_from_bytes(b).ok())
    };
    let objects: Vec<Arc<Mutex<EmuBo>>> = s.objects.values().cloned().collect();
    let mut out = CoresRun {
        completed: true,
        wait_counter: 0,
        wait_status: 0,
        macs: 0,
        status_writes: Vec::new(),
    };
    let faults = s.faults.clone();
    s.sim.set_faults(faults);
    load_memory(&mut s.sim, &objects, &mut s.log);
    for (k, &(core, slot)) in slots.iter().enumerate() {
        let range = sub.subcore_task[slot];
        if range.task_number == 0 {
            s.log.push(format!(
                "core {core}: subcore_task[{slot}] holds no task; the core never raises its interrupt"
            ));
            out.completed = false;
            break;
        }
        let base = range.task_start as usize;
        let run = s.sim.run_range(core, range.task_number, |i| {
            read_task(base + i as usize).map(|t| TaskDesc {
                offset: t.regcmd_addr as u32,
                regcfg_amount: t.regcfg_amount,
                int_mask: t.int_mask,
                enable: t.enable_mask,
            })
        });
        out.macs += run.macs;
        let (done, status) = (run.done, run.int_status);
        match run.failure {
            Some(why) => {
                s.log.push(format!("core {core}: {why}"));
                out.completed = false;
            }
            // The last task of each core's range receives its status.
            None => out
                .status_writes
                .push(((base + done as usize - 1) * TASK_BYTES + STATUS_AT, status)),
        }
        if k == 0 {
            // The wait core: core 0 for masks 1/3/7, 1 for 2, 2 for 4.
            out.wait_counter = done;
            out.wait_status = status;
        }
        if !out.completed {
            break;
        }
    }
    store_memory(&mut s.sim, &objects);
    out
}
