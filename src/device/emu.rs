//! The emulated kernel: the vendor `rknpu` (0.9.8 or 0.9.6, DRM flavour) and mainline
//! `rocket` drivers' ioctl semantics, in-process, behind the same seam as the real kernel
//! ([`crate::sys::Kernel`]), executing submitted programs on the simulator against the
//! buffers' memory.
//!
//! It is a stand-in for the kernel, not a mock: it refuses what the reference says the
//! drivers refuse, with the same errno, and where a real kernel would crash (a task array
//! without a kernel mapping, a fabricated `obj_addr`) it refuses with `EFAULT` and a line
//! in its log instead. Caches are modelled: a cacheable buffer has a CPU view (what a
//! mapping shows) and a device view (what the NPU reads); MEM_SYNC (vendor) and
//! PREP_BO/FINI_BO (rocket) copy between them, so a program that forgets a sync reads
//! stale data here as it would on a board. docs/hw-testing.md lists the behaviours.

use crate::regcmd::TAIL_ENTRIES;
use crate::sim::{Faults, Kick, Simulator};
use crate::submit::{self, TaskDesc, irq};
use crate::sys::uapi::{self, *};
use crate::sys::{DmaMem, Errno, Fd, Ioctl, Kernel, Mapping, VendorOp};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use zerocopy::FromBytes;

/// Which driver the emulated kernel plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// Vendor `rknpu` 0.9.8, DRM render node.
    Vendor098,
    /// Vendor `rknpu` 0.9.6 (no IOVA-alignment flag; offset 44 of mem_create reserved).
    Vendor096,
    /// Mainline `rocket` (Linux 6.18).
    Rocket,
}

impl Flavour {
    fn is_vendor(self) -> bool {
        self != Flavour::Rocket
    }
}

/// The rocket scheduler's job timeout (kernel-interfaces.md 4.5).
pub const ROCKET_JOB_TIMEOUT: Duration = Duration::from_millis(500);

const PAGE: u64 = 4096;

/// A buffer object.
#[derive(Debug)]
struct EmuBo {
    size: u64,
    flags: u32,
    dma: u32,
    obj_addr: u64,
    mmap_offset: u64,
    /// What CPU mappings show.
    cpu: Arc<DmaMem>,
    /// What the NPU reads and writes, for cacheable buffers (otherwise `cpu`).
    dev: Option<Vec<u8>>,
    /// Rocket: when the last job writing it finishes.
    busy_until: Option<Instant>,
}

impl EmuBo {
    /// What the NPU sees; `None` for an uncached buffer the CPU has mapped right now
    /// (the emulation copies a buffer only while it is unmapped).
    fn device_bytes(&self) -> Option<Vec<u8>> {
        match &self.dev {
            Some(d) => Some(d.clone()),
            None => self.cpu.to_vec(),
        }
    }

    fn set_device_bytes(&mut self, bytes: &[u8]) -> bool {
        match &mut self.dev {
            Some(d) => {
                d.copy_from_slice(bytes);
                true
            }
            None => self.cpu.write(0, bytes),
        }
    }

    /// Cache maintenance of a byte range; `EBUSY` while the buffer is mapped (the
    /// emulation's one restriction: it copies only unmapped buffers).
    fn sync(&mut self, to_device: bool, offset: u64, size: u64) -> Result<(), Errno> {
        let Some(dev) = &mut self.dev else {
            return Ok(());
        };
        let start = offset.min(self.size) as usize;
        let end = offset.saturating_add(size).min(self.size) as usize;
        let ok = if to_device {
            self.cpu.read(start, &mut dev[start..end])
        } else {
            self.cpu.write(start, &dev[start..end])
        };
        if ok { Ok(()) } else { Err(Errno::EBUSY) }
    }
}

#[derive(Debug)]
enum File {
    Device {
        handles: HashMap<u32, Arc<Mutex<EmuBo>>>,
        next_handle: u32,
        /// Rocket: the next free IOVA of this fd's private space.
        next_iova: u64,
    },
    /// A sync_file: signalled, or never (a job that did not complete).
    Fence { signalled: bool },
    /// An exported dma-buf of a buffer.
    DmaBuf(Arc<Mutex<EmuBo>>),
}

#[derive(Debug)]
struct State {
    files: HashMap<i32, File>,
    next_fd: i32,
    /// Vendor: objects by `obj_addr` (one IOMMU domain for every fd).
    objects: HashMap<u64, Arc<Mutex<EmuBo>>>,
    next_obj: u64,
    /// Vendor: IOVAs are handed out top-down from 4 GiB.
    vendor_iova_top: u64,
    sim: Simulator,
    faults: Faults,
    log: Vec<String>,
    /// How long the current blocking request waits before it returns its error.
    wait: Option<Duration>,
}

/// The emulated kernel. Create it with [`EmuKernel::new`]; [`crate::device::Device`]
/// opens it for `RKNPU_DEVICE=emu`, `emu:vendor-0.9.6` and `emu:rocket`.
#[derive(Debug)]
pub struct EmuKernel {
    flavour: Flavour,
    state: Mutex<State>,
}

/// The node path the emulated kernel answers to.
pub fn node_path(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::Rocket => "/dev/accel/accel0",
        _ => "/dev/dri/renderD129",
    }
}

fn monotonic_ns() -> i64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() * 1_000_000_000 + t.tv_nsec())
        .unwrap_or(0)
}

impl EmuKernel {
    /// A kernel playing `flavour`, with nothing allocated.
    pub fn new(flavour: Flavour) -> EmuKernel {
        EmuKernel {
            flavour,
            state: Mutex::new(State {
                files: HashMap::new(),
                next_fd: 1000,
                objects: HashMap::new(),
                next_obj: 0xFFFF_FF80_1000_0000,
                vendor_iova_top: 1 << 32,
                sim: Simulator::new(),
                faults: Faults::default(),
                log: Vec::new(),
                wait: None,
            }),
        }
    }

    /// The process-wide kernel of `flavour`: like a real driver, one per machine, whatever
    /// number of devices open it.
    pub fn shared(flavour: Flavour) -> Arc<EmuKernel> {
        static KERNELS: std::sync::OnceLock<Mutex<HashMap<Flavour, Arc<EmuKernel>>>> =
            std::sync::OnceLock::new();
        let map = KERNELS.get_or_init(Default::default);
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            map.entry(flavour)
                .or_insert_with(|| Arc::new(EmuKernel::new(flavour))),
        )
    }

    /// The driver it plays.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Faults for the next submissions (task indices count within each core's kick).
    pub fn inject(&self, faults: Faults) {
        self.lock().faults = faults;
    }

    /// What the kernel would have printed to its log (timeouts, refused requests).
    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Buffer objects alive in the kernel (across every fd).
    pub fn live_objects(&self) -> usize {
        let s = self.lock();
        let mut seen: Vec<*const Mutex<EmuBo>> = Vec::new();
        for f in s.files.values() {
            match f {
                File::Device { handles, .. } => seen.extend(handles.values().map(Arc::as_ptr)),
                File::DmaBuf(bo) => seen.push(Arc::as_ptr(bo)),
                File::Fence { .. } => {}
            }
        }
        seen.sort();
        seen.dedup();
        seen.len()
    }

    fn version(&self) -> (i32, i32, i32, &'static str, &'static str, &'static str) {
        match self.flavour {
            Flavour::Vendor098 => (0, 9, 8, "rknpu", "20240828", "RKNPU driver"),
            Flavour::Vendor096 => (0, 9, 6, "rknpu", "20240322", "RKNPU driver"),
            Flavour::Rocket => (0, 0, 0, "rocket", "", "rocket DRM"),
        }
    }
}

fn bo_of(s: &State, fd: Fd, handle: u32) -> Result<Arc<Mutex<EmuBo>>, Errno> {
    match s.files.get(&fd.0) {
        Some(File::Device { handles, .. }) => handles.get(&handle).cloned().ok_or(Errno::ENOENT),
        _ => Err(Errno::EBADF),
    }
}

/// The object a vendor request names by its kernel address. A fabricated address is
/// refused with `EFAULT` and logged: the real driver dereferences it (a kernel oops).
fn object(s: &mut State, obj_addr: u64, request: &str) -> Result<Arc<Mutex<EmuBo>>, Errno> {
    let found = s.objects.get(&obj_addr).cloned();
    found.ok_or_else(|| {
        s.log.push(format!(
            "{request} with obj_addr {obj_addr:#x}, which is no object: the real driver dereferences it (a kernel oops)"
        ));
        Errno::EFAULT
    })
}

/// Drops the kernel's object entry of `bo` once no fd holds a handle to it.
fn release(s: &mut State, bo: &Arc<Mutex<EmuBo>>) {
    let held = s.files.values().any(|f| match f {
        File::Device { handles, .. } => handles.values().any(|b| Arc::ptr_eq(b, bo)),
        File::DmaBuf(b) => Arc::ptr_eq(b, bo),
        File::Fence { .. } => false,
    });
    if !held {
        let obj = lock_bo(bo).obj_addr;
        s.objects.remove(&obj);
    }
}

fn lock_bo(bo: &Mutex<EmuBo>) -> MutexGuard<'_, EmuBo> {
    bo.lock().unwrap_or_else(|e| e.into_inner())
}

impl Kernel for EmuKernel {
    fn open(&self, path: &str) -> Result<Fd, Errno> {
        if path != node_path(self.flavour) {
            return Err(Errno::ENOENT);
        }
        let mut s = self.lock();
        let fd = s.next_fd;
        s.next_fd += 1;
        s.files.insert(
            fd,
            File::Device {
                handles: HashMap::new(),
                next_handle: 1,
                next_iova: 0,
            },
        );
        Ok(Fd(fd))
    }

    fn close(&self, fd: Fd) {
        let mut s = self.lock();
        // Closing the fd frees every object only it holds (kernel-interfaces.md 2.4).
        let released: Vec<Arc<Mutex<EmuBo>>> = match s.files.remove(&fd.0) {
            Some(File::Device { handles, .. }) => handles.into_values().collect(),
            Some(File::DmaBuf(bo)) => vec![bo],
            _ => Vec::new(),
        };
        for bo in &released {
            release(&mut s, bo);
        }
    }

    fn ioctl(&self, fd: Fd, req: &mut Ioctl<'_>) -> Result<i32, Errno> {
        let mut s = self.lock();
        if !matches!(s.files.get(&fd.0), Some(File::Device { .. })) {
            return Err(Errno::EBADF);
        }
        match req {
            Ioctl::DrmVersion {
                version,
                name,
                date,
                desc,
            } => {
                let (ma, mi, pa, n, d, e) = self.version();
                version.version_major = ma;
                version.version_minor = mi;
                version.version_patchlevel = pa;
                for (buf, text, len) in [
                    (&mut **name, n, &mut version.name_len),
                    (&mut **date, d, &mut version.date_len),
                    (&mut **desc, e, &mut version.desc_len),
                ] {
                    let k = buf.len().min(text.len());
                    buf[..k].copy_from_slice(&text.as_bytes()[..k]);
                    *len = text.len() as u64;
                }
                Ok(0)
            }
            Ioctl::GemClose(c) => {
                let Some(File::Device { handles, .. }) = s.files.get_mut(&fd.0) else {
                    return Err(Errno::EBADF);
                };
                let bo = handles.remove(&c.handle).ok_or(Errno::EINVAL)?;
                release(&mut s, &bo);
                Ok(0)
            }
            Ioctl::PrimeHandleToFd(p) => {
                if self.flavour == Flavour::Rocket {
                    // Export through generic PRIME is untested on rocket; the library does
                    // not offer it there, and neither does the emulation.
                    return Err(Errno::EOPNOTSUPP);
                }
                let bo = bo_of(&s, fd, p.handle)?;
                let new = s.next_fd;
                s.next_fd += 1;
                s.files.insert(new, File::DmaBuf(bo));
                p.fd = new;
                Ok(0)
            }
            Ioctl::PrimeFdToHandle(p) => {
                if self.flavour == Flavour::Rocket {
                    return Err(Errno::EOPNOTSUPP);
                }
                let Some(File::DmaBuf(bo)) = s.files.get(&p.fd) else {
                    return Err(Errno::EBADF);
                };
                let bo = Arc::clone(bo);
                let Some(File::Device {
                    handles,
                    next_handle,
                    ..
                }) = s.files.get_mut(&fd.0)
                else {
                    return Err(Errno::EBADF);
                };
                if let Some((&h, _)) = handles.iter().find(|(_, b)| Arc::ptr_eq(b, &bo)) {
                    p.handle = h;
                } else {
                    p.handle = *next_handle;
                    *next_handle += 1;
                    handles.insert(p.handle, bo);
                }
                Ok(0)
            }
            Ioctl::Vendor(node, op) => {
                if !self.flavour.is_vendor() || *node != uapi::VendorNode::Drm {
                    // rocket has no such numbers; the emulation plays the DRM flavour only.
                    return Err(Errno::EINVAL);
                }
                let r = self.vendor(&mut s, fd, op);
                // A blocking wait that ends in a timeout sleeps without holding the
                // kernel, as the driver's wait does.
                if let Some(wait) = s.wait.take() {
                    drop(s);
                    std::thread::sleep(wait);
                }
                r
            }
            Ioctl::RocketCreateBo(c) if self.flavour == Flavour::Rocket => {
                rocket_create(&mut s, fd, c)
            }
            Ioctl::RocketSubmit {
                job,
                tasks,
                in_handles,
                out_handles,
            } if self.flavour == Flavour::Rocket => {
                rocket_submit(&mut s, fd, job, tasks, in_handles, out_handles);
                Ok(0)
            }
            Ioctl::RocketPrepBo(p) if self.flavour == Flavour::Rocket => {
                if p.reserved != 0 {
                    return Err(Errno::EINVAL);
                }
                let bo = bo_of(&s, fd, p.handle)?;
                drop(s);
                let busy = lock_bo(&bo).busy_until;
                if let Some(until) = busy {
                    let now = Instant::now();
                    if until > now {
                        if p.timeout_ns == 0 {
                            return Err(Errno::EBUSY);
                        }
                        let left =
                            Duration::from_nanos((p.timeout_ns - monotonic_ns()).max(0) as u64);
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
            Ioctl::RocketFiniBo(f) if self.flavour == Flavour::Rocket => {
                if f.reserved != 0 {
                    return Err(Errno::EINVAL);
                }
                let bo = bo_of(&s, fd, f.handle)?;
                lock_bo(&bo).sync(true, 0, u64::MAX)?;
                Ok(0)
            }
            // Rocket numbers on a vendor node: unknown ioctl.
            _ => Err(Errno::EINVAL),
        }
    }

    fn mmap(&self, fd: Fd, len: usize, offset: u64) -> Result<Mapping, Errno> {
        let s = self.lock();
        let bo = match s.files.get(&fd.0) {
            Some(File::Device { handles, .. }) => handles
                .values()
                .find(|b| lock_bo(b).mmap_offset == offset)
                .cloned()
                .ok_or(Errno::EINVAL)?,
            Some(File::DmaBuf(bo)) if offset == 0 => Arc::clone(bo),
            _ => return Err(Errno::EBADF),
        };
        let bo = lock_bo(&bo);
        if len as u64 > bo.size || len == 0 {
            return Err(Errno::EINVAL);
        }
        // One CPU mapping of a buffer at a time (the emulation's restriction).
        bo.cpu.map(len).ok_or(Errno::EBUSY)
    }

    fn poll(&self, fd: Fd, timeout: Duration) -> Result<bool, Errno> {
        let signalled = match self.lock().files.get(&fd.0) {
            Some(File::Fence { signalled }) => *signalled,
            Some(_) => true,
            None => return Err(Errno::EBADF),
        };
        if !signalled {
            std::thread::sleep(timeout);
        }
        Ok(signalled)
    }

    fn is_emulated(&self) -> bool {
        true
    }
}

impl EmuKernel {
    fn vendor(&self, s: &mut State, fd: Fd, op: &mut VendorOp<'_>) -> Result<i32, Errno> {
        match op {
            VendorOp::Action(a) => {
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
            VendorOp::MemCreate(c) => {
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
            VendorOp::MemSync(y) => {
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
            VendorOp::Submit(sub) => self.vendor_submit(s, sub),
        }
    }

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
        let read_task = |i: usize| -> Option<RknpuTask> {
            tasks_bytes
                .get(i * 40..i * 40 + 40)
                .and_then(|b| RknpuTask::read_from_bytes(b).ok())
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

        // Memory: every object's device view at its address (one shared domain).
        let objects: Vec<Arc<Mutex<EmuBo>>> = s.objects.values().cloned().collect();
        let started = Instant::now();
        let mut completed = true;
        let mut wait_counter = 0u32;
        let mut wait_status = 0u32;
        let mut macs = 0u64;
        let mut status_writes = Vec::new();
        let faults = s.faults.clone();
        s.sim.set_faults(faults);
        load_memory(&mut s.sim, &objects, &mut s.log);
        for (k, &(core, slot)) in slots.iter().enumerate() {
            let range = sub.subcore_task[slot];
            if range.task_number == 0 {
                s.log.push(format!(
                    "core {core}: subcore_task[{slot}] holds no task; the core never raises its interrupt"
                ));
                completed = false;
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
            macs += run.macs;
            let (done, status) = (run.done, run.int_status);
            match run.failure {
                Some(why) => {
                    s.log.push(format!("core {core}: {why}"));
                    completed = false;
                }
                // The last task of each core's range receives its status.
                None => status_writes.push(((base + done as usize - 1) * 40 + 20, status)),
            }
            if k == 0 {
                // The wait core: core 0 for masks 1/3/7, 1 for 2, 2 for 4.
                wait_counter = done;
                wait_status = status;
            }
            if !completed {
                break;
            }
        }
        store_memory(&mut s.sim, &objects);
        // The kernel writes the status through its own mapping of the task array.
        for (at, status) in status_writes {
            let mut b = lock_bo(&task_bo);
            b.cpu.write(at, &status.to_le_bytes());
            if let Some(dev) = &mut b.dev {
                dev[at..at + 4].copy_from_slice(&status.to_le_bytes());
            }
        }
        if completed {
            // Modelled elapsed time: the int8 peak of 1024 MACs per ns and core.
            let modelled = Duration::from_nanos(macs / 1024 / slots.len() as u64 + 10_000);
            sub.task_counter = sub.task_number;
            sub.hw_elapse_time = modelled.max(started.elapsed()).as_nanos() as i64;
            if nonblock {
                return self.fence_out(s, sub, true);
            }
            return Ok(0);
        }
        sub.task_counter = wait_counter;
        s.log.push(format!(
            "job timeout: task counter {wait_counter}, int status {wait_status:#x}; soft reset of all cores"
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

/// Places every object's device view in the simulator's memory. An uncached buffer the
/// CPU has mapped at this moment is left out (and logged): a program that reads it stops
/// with a DMA error naming its address.
fn load_memory(sim: &mut Simulator, objects: &[Arc<Mutex<EmuBo>>], log: &mut Vec<String>) {
    let mem = sim.memory_mut();
    let addrs: Vec<u32> = mem.regions().iter().map(|r| r.addr).collect();
    for a in addrs {
        mem.unmap(a);
    }
    for bo in objects {
        let b = lock_bo(bo);
        match b.device_bytes() {
            // Objects never overlap: the allocators hand out disjoint ranges.
            Some(bytes) => {
                let _ = mem.map(b.dma, bytes);
            }
            None => log.push(format!(
                "buffer at {:#x} is mapped by the CPU during a job; the emulation leaves it out",
                b.dma
            )),
        }
    }
}

/// Copies what the NPU wrote back into the objects' device views.
fn store_memory(sim: &mut Simulator, objects: &[Arc<Mutex<EmuBo>>]) {
    for bo in objects {
        let mut b = lock_bo(bo);
        if let Some(region) = sim.memory_mut().unmap(b.dma) {
            b.set_device_bytes(&region.bytes);
        }
    }
}

fn rocket_create(s: &mut State, fd: Fd, c: &mut DrmRocketCreateBo) -> Result<i32, Errno> {
    if c.size == 0 {
        return Err(Errno::EINVAL);
    }
    let obj = s.next_obj;
    s.next_obj += 0x1000;
    let Some(File::Device {
        handles,
        next_handle,
        next_iova,
    }) = s.files.get_mut(&fd.0)
    else {
        return Err(Errno::EBADF);
    };
    let size = (c.size as u64).div_ceil(PAGE) * PAGE;
    if *next_iova + size > 1 << 32 {
        return Err(Errno::ENOMEM);
    }
    let handle = *next_handle;
    *next_handle += 1;
    let dma = *next_iova;
    *next_iova += size;
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
        })),
    );
    c.handle = handle;
    c.dma_address = dma;
    c.offset = (handle as u64) << 32;
    Ok(0)
}

/// One rocket job: each task is a separate kick with TASK_NUMBER 1 and the DPU pair as
/// the interrupt mask. Per-job errors are dropped silently, as the driver does.
fn rocket_submit(
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
    let mut bos = Vec::new();
    for h in in_handles.iter().chain(out_handles) {
        match bo_of(s, fd, *h) {
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
        store_memory(&mut s.sim, &objects);
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
