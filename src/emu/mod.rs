//! The emulated kernel: the vendor `rknpu` (0.9.8 or 0.9.6, DRM flavour) and mainline
//! `rocket` drivers' ioctl semantics, in-process, behind the same seam as the real kernel
//! (the crate-private `sys::Kernel` trait), executing submitted programs on the simulator against the
//! buffers' memory.
//!
//! It is a stand-in for the kernel, not a mock: it refuses what the driver sources show the
//! drivers refuse (docs/hardware/kernel-behaviours.md), with the same errno, and where a real kernel would crash (a task array
//! without a kernel mapping, a fabricated `obj_addr`) it refuses with `EFAULT` and a line
//! in its log instead. Caches are modelled: a cacheable buffer has a CPU view (what a
//! mapping shows) and a device view (what the NPU reads); MEM_SYNC (vendor) and
//! PREP_BO/FINI_BO (rocket) copy between them, so a program that forgets a sync reads
//! stale data here as it would on a board. The vendor driver's sixteen IOMMU domains are
//! modelled in `domains.rs`. docs/hw-testing.md lists the behaviours.

mod domains;
mod drm;
mod inspect;
mod iova;
mod knobs;
mod mem;
mod rocket;
mod vendor;
mod vendor_mem;
mod worker;

use crate::sim::{DmaCounters, Faults, Simulator};
use crate::sys::uapi;
use crate::sys::{Errno, Fd, Ioctl, Kernel, Mapping};
pub use domains::{DOMAIN_SWITCH_WAIT, IOMMU_DOMAINS};
pub use inspect::EmuStop;
use iova::Iova;
use mem::{EmuBo, bo_of, lock_bo, release};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
pub use worker::WorkerHold;
use worker::{Queue, Shared};

/// Which driver the emulated kernel plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
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

/// The rocket scheduler's job timeout (docs/hardware/kernel-behaviours.md#k1).
pub const ROCKET_JOB_TIMEOUT: Duration = Duration::from_millis(500);

/// How long the emulated rocket kernel takes a job to run, for its job timeout: the
/// cost model's figures for one core (`kernels::matmul::cost::HardwareProfile::
/// rk3588_rocket()`, which `tests/rocket_jobs.rs` holds these equal to), with every MAC
/// at the fastest rate (int4 at 1 GHz), so that the time is a lower bound of the
/// model's and the kernel stops only jobs the model puts beyond the timeout at any
/// precision and clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeModel {
    /// Seconds per submission, the first task included.
    pub per_submit_s: f64,
    /// Seconds per task after the first.
    pub per_task_s: f64,
    /// DRAM bytes per second one core streams.
    pub bytes_per_s: f64,
    /// MACs per second of one core at the fastest precision.
    pub macs_per_s: f64,
}

impl TimeModel {
    /// Seconds of one task that ran `macs` and moved `dma` (its task-list fetch left
    /// out), plus the per-task overhead when it is not the job's first.
    pub fn task_s(&self, macs: u64, dma: &DmaCounters, after_first: bool) -> f64 {
        let bytes = dma.read() - dma.pc_regcmd + dma.written();
        let work = (bytes as f64 / self.bytes_per_s).max(macs as f64 / self.macs_per_s);
        work + if after_first { self.per_task_s } else { 0.0 }
    }
}

/// The emulated rocket kernel's [`TimeModel`].
pub const ROCKET_TIME_MODEL: TimeModel = TimeModel {
    per_submit_s: 52.0e-6,
    per_task_s: 44.0e-6,
    bytes_per_s: 10.0e9,
    macs_per_s: 1.72e12,
};

const PAGE: u64 = 4096;

/// The vendor driver's misc node (the DMA-heap flavour).
pub const MISC_NODE: &str = "/dev/rknpu";

#[derive(Debug)]
enum File {
    Device {
        handles: HashMap<u32, Arc<Mutex<EmuBo>>>,
        next_handle: u32,
        /// Handles PRIME import made: attachments, which the vendor MEM_MAP refuses.
        /// (The real driver gives a dma-buf of its own device back as the very object;
        /// the emulation treats every import as the attachment a foreign one gets.)
        imported: std::collections::HashSet<u32>,
        /// Rocket: this fd's private address space.
        iova: Iova,
    },
    /// The vendor misc node (`/dev/rknpu`), which dispatches on the request number only.
    Misc,
    /// A sync_file: signalled, or never (a job that did not complete).
    Fence { signalled: bool },
    /// An exported dma-buf of a buffer.
    DmaBuf(Arc<Mutex<EmuBo>>),
    /// A descriptor lent to the kernel that is none of its dma-bufs.
    Foreign,
}

/// A dma-buf handed to the caller as a real descriptor: the read end of a pipe whose
/// write end the kernel keeps, so that it learns when the caller has closed every copy
/// (the write end then reports `POLLERR`) and drops its reference to the buffer.
#[derive(Debug)]
struct Export {
    bo: Arc<Mutex<EmuBo>>,
    writer: std::io::PipeWriter,
}

/// What names an open file whatever descriptor refers to it (a `dup` included).
fn identity(fd: BorrowedFd<'_>) -> Result<(u64, u64), Errno> {
    use std::os::unix::fs::MetadataExt;
    let owned = fd
        .try_clone_to_owned()
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(Errno::EIO as i32)))?;
    let meta = std::fs::File::from(owned)
        .metadata()
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(Errno::EIO as i32)))?;
    Ok((meta.dev(), meta.ino()))
}

#[derive(Debug)]
struct State {
    files: HashMap<i32, File>,
    next_fd: i32,
    /// Dma-bufs handed out as real descriptors, by the identity of their file.
    exports: HashMap<(u64, u64), Export>,
    /// Vendor: objects by `obj_addr` (every fd shares the driver's IOMMU domains).
    objects: HashMap<u64, Arc<Mutex<EmuBo>>>,
    next_obj: u64,
    /// Vendor: the IOMMU domains, each handing IOVAs out top-down from 4 GiB.
    domains: domains::Domains,
    /// Vendor: cores held for good by a non-blocking job that never completed (the
    /// driver never times such jobs out, and a soft reset does not clear them).
    occupied: [bool; 3],
    /// Vendor: the highest `core_mask` SUBMIT accepts (0x7 RK3588, 0x3 RK3583).
    core_limit: u32,
    /// The simulator, locked on its own so that the worker runs a job without holding
    /// the kernel (lock order: the state, then the simulator; the worker never takes the
    /// state while it holds the simulator).
    sim: Arc<Mutex<Simulator>>,
    faults: Faults,
    log: Vec<String>,
    /// Why the last job the simulator could not finish stopped, when the reason was the
    /// simulator's work budget rather than anything a board would do (taken by the
    /// device layer, which reports it instead of a timeout).
    budget_stop: Option<EmuStop>,
    /// Bytes the DMA engines moved in every job run since creation or the last reset.
    dma: DmaCounters,
    /// Asynchronous mode: the job queue and its worker's progress.
    queue: Queue,
    /// Events armed by a test ([`knobs`]).
    knobs: knobs::Knobs,
}

/// The emulated kernel. Create it with [`EmuKernel::new`] (synchronous: a job runs
/// inside its submit request) or [`EmuKernel::new_async`] (jobs run on a worker thread
/// the kernel owns, and non-blocking submissions return at once: [`EmuKernel::set_async`]); [`crate::device::Device`]
/// opens it for `RKNPU_DEVICE=emu`, `emu:vendor-0.9.6`, `emu:rocket`, and `emu:async`,
/// `emu:rocket:async` for the asynchronous mode.
#[derive(Debug)]
pub struct EmuKernel {
    flavour: Flavour,
    shared: Arc<Shared>,
    /// The worker thread, started when the asynchronous mode is first enabled and
    /// joined when the kernel is dropped.
    worker: Mutex<Option<JoinHandle<()>>>,
}

/// The node path the emulated kernel answers to.
pub fn node_path(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::Rocket => "/dev/accel/accel0",
        _ => "/dev/dri/renderD129",
    }
}

impl EmuKernel {
    /// A kernel playing `flavour`, with nothing allocated.
    pub fn new(flavour: Flavour) -> EmuKernel {
        EmuKernel {
            flavour,
            worker: Mutex::new(None),
            shared: Arc::new(Shared {
                changed: Condvar::new(),
                state: Mutex::new(State {
                    files: HashMap::new(),
                    next_fd: 1000,
                    exports: HashMap::new(),
                    objects: HashMap::new(),
                    next_obj: 0xFFFF_FF80_1000_0000,
                    domains: domains::Domains::new(),
                    occupied: [false; 3],
                    core_limit: 7,
                    sim: Arc::new(Mutex::new(Simulator::new())),
                    faults: Faults::default(),
                    log: Vec::new(),
                    budget_stop: None,
                    dma: DmaCounters::default(),
                    queue: Queue::default(),
                    knobs: knobs::Knobs::default(),
                }),
            }),
        }
    }

    /// A vendor kernel playing `flavour` on the RK3583, whose fuses leave two cores:
    /// SUBMIT refuses `core_mask` values above 0x3 with `EINVAL` (`rknpu_drv.c:204-223`).
    pub fn rk3583(flavour: Flavour) -> EmuKernel {
        let k = EmuKernel::new(flavour);
        k.lock().core_limit = 0x3;
        k
    }

    /// The process-wide kernel of `flavour`: like a real driver, one per machine, whatever
    /// number of devices open it.
    pub fn shared(flavour: Flavour) -> Arc<EmuKernel> {
        EmuKernel::process_wide(flavour, false)
    }

    /// The process-wide kernel of `flavour` in asynchronous mode ([`EmuKernel::set_async`]):
    /// another kernel than [`EmuKernel::shared`]'s, so that devices opened synchronous
    /// stay so. `RKNPU_DEVICE=emu:async` and `emu:rocket:async` open these.
    pub fn shared_async(flavour: Flavour) -> Arc<EmuKernel> {
        EmuKernel::process_wide(flavour, true)
    }

    fn process_wide(flavour: Flavour, asynchronous: bool) -> Arc<EmuKernel> {
        type Kernels = Mutex<HashMap<(Flavour, bool), Arc<EmuKernel>>>;
        static KERNELS: std::sync::OnceLock<Kernels> = std::sync::OnceLock::new();
        let map = KERNELS.get_or_init(Default::default);
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry((flavour, asynchronous)).or_insert_with(|| {
            let k = EmuKernel::new(flavour);
            k.set_async(asynchronous);
            Arc::new(k)
        }))
    }

    /// The driver it plays.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// The state, after dropping the buffers of exported dma-bufs whose every descriptor
    /// the caller has closed (as the last `close` of a dma-buf drops its reference).
    fn lock_pruned(&self) -> MutexGuard<'_, State> {
        let mut s = self.lock();
        let closed: Vec<(u64, u64)> = s
            .exports
            .iter()
            .filter(|(_, e)| {
                let mut fds = [PollFd::new(e.writer.as_fd(), PollFlags::empty())];
                nix::poll::poll(&mut fds, PollTimeout::ZERO).is_ok_and(|_| {
                    fds[0]
                        .revents()
                        .is_some_and(|r| r.contains(PollFlags::POLLERR))
                })
            })
            .map(|(k, _)| *k)
            .collect();
        for k in closed {
            if let Some(e) = s.exports.remove(&k) {
                release(&mut s, &e.bo);
            }
        }
        s
    }

    fn version(&self) -> (i32, i32, i32, &'static str, &'static str, &'static str) {
        match self.flavour {
            Flavour::Vendor098 => (0, 9, 8, "rknpu", "20240828", "RKNPU driver"),
            Flavour::Vendor096 => (0, 9, 6, "rknpu", "20240322", "RKNPU driver"),
            // Linux 6.14 and later report the date "0".
            Flavour::Rocket => (0, 0, 0, "rocket", "0", "rocket DRM"),
        }
    }
}

impl Kernel for EmuKernel {
    fn open(&self, path: &str) -> Result<Fd, Errno> {
        let mut s = self.lock();
        let file = if path == node_path(self.flavour) {
            File::Device {
                handles: HashMap::new(),
                next_handle: 1,
                imported: Default::default(),
                iova: Iova::bottom_up(s.knobs.rocket_iova_base),
            }
        } else if path == MISC_NODE && self.flavour.is_vendor() {
            File::Misc
        } else {
            return Err(Errno::ENOENT);
        };
        let fd = s.next_fd;
        s.next_fd += 1;
        s.files.insert(fd, file);
        Ok(Fd(fd))
    }

    fn close(&self, fd: Fd) {
        let mut s = self.lock_pruned();
        // Closing the fd frees every object only it holds (the vendor and rocket driver sources, docs/hardware/kernel-behaviours.md#sources).
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
        let mut s = self.lock_pruned();
        match s.files.get(&fd.0) {
            Some(File::DmaBuf(_)) => return drm::dma_buf_sync(req),
            Some(File::Device { .. }) => {}
            Some(File::Misc) => return self.misc(&mut s, req),
            _ => return Err(Errno::EBADF),
        }
        match req {
            Ioctl::DrmVersion { .. } => {
                self.drm_version(req);
                Ok(0)
            }
            Ioctl::GemClose(c) => {
                let Some(File::Device { handles, iova, .. }) = s.files.get_mut(&fd.0) else {
                    return Err(Errno::EBADF);
                };
                let bo = handles.remove(&c.handle).ok_or(Errno::EINVAL)?;
                if self.flavour == Flavour::Rocket {
                    // drm_mm hands the range out again once the object is gone.
                    let b = lock_bo(&bo);
                    iova.free(u64::from(b.dma), b.size);
                }
                release(&mut s, &bo);
                Ok(0)
            }
            Ioctl::PrimeHandleToFd(p) => {
                // Both drivers export through DRM's generic PRIME helpers.
                let bo = bo_of(&s, fd, p.handle)?;
                let new = s.next_fd;
                s.next_fd += 1;
                s.files.insert(new, File::DmaBuf(bo));
                p.fd = new;
                Ok(0)
            }
            Ioctl::PrimeFdToHandle(p) => self.prime_fd_to_handle(&mut s, fd, p),
            Ioctl::Vendor(node, op) => {
                if !self.flavour.is_vendor() || *node != uapi::VendorNode::Drm {
                    // rocket has no such numbers; the emulation plays the DRM flavour only.
                    return Err(Errno::EINVAL);
                }
                self.vendor_request(s, fd, op)
            }
            Ioctl::RocketCreateBo(c) if self.flavour == Flavour::Rocket => {
                rocket::rocket_create(&mut s, fd, c)
            }
            Ioctl::RocketSubmit {
                job,
                tasks,
                in_handles,
                out_handles,
            } if self.flavour == Flavour::Rocket => {
                // The job's flags are not read (rocket defines none).
                let _ = job;
                let Some(job) = rocket::rocket_check(&mut s, fd, tasks, in_handles, out_handles)
                else {
                    return Ok(0);
                };
                if s.queue.goes_to_worker() {
                    // Every rocket submission is asynchronous in the real driver.
                    let outs = job.outputs().to_vec();
                    let ticket = self.enqueue(&mut s, worker::Job::Rocket(job));
                    for b in &outs {
                        lock_bo(b).writer = Some(ticket);
                    }
                } else {
                    job.run_inline(&mut s);
                }
                Ok(0)
            }
            Ioctl::RocketPrepBo(p) if self.flavour == Flavour::Rocket => {
                if s.knobs.eintr_prep_bos > 0 {
                    s.knobs.eintr_prep_bos -= 1;
                    return Err(Errno::EINTR);
                }
                rocket::rocket_prep_bo(&self.shared, s, fd, p)
            }
            Ioctl::RocketFiniBo(f) if self.flavour == Flavour::Rocket => {
                rocket::rocket_fini_bo(&s, fd, f)
            }
            // Rocket numbers on a vendor node: unknown ioctl.
            _ => Err(Errno::EINVAL),
        }
    }

    fn mmap(&self, fd: Fd, len: usize, offset: u64) -> Result<Mapping, Errno> {
        let mut s = self.lock();
        let bo = match s.files.get(&fd.0) {
            Some(File::Device { handles, .. }) => handles
                .values()
                .find(|b| lock_bo(b).mmap_offset == offset)
                .cloned()
                .ok_or(Errno::EINVAL)?,
            Some(File::DmaBuf(bo)) if offset == 0 => Arc::clone(bo),
            Some(File::DmaBuf(_) | File::Foreign) => return Err(Errno::EINVAL),
            _ => return Err(Errno::EBADF),
        };
        let mut bo = lock_bo(&bo);
        if len as u64 > bo.size || len == 0 {
            return Err(Errno::EINVAL);
        }
        let f = bo.flags;
        if self.flavour.is_vendor()
            && f & uapi::mem::NON_CONTIGUOUS != 0
            && f & (uapi::mem::CACHEABLE | uapi::mem::WRITE_COMBINE) == 0
        {
            // rknpu_gem.c:1353-1362: pgprot_noncached, Device-nGnRnE on arm64.
            s.log.push(format!(
                "buffer at {:#x} mapped as device memory (no CACHEABLE or WRITE_COMBINE): an unaligned CPU access faults with SIGBUS",
                bo.dma
            ));
        }
        // One CPU mapping of a buffer at a time (the emulation's restriction).
        bo.pristine = false;
        bo.cpu.map(len).ok_or(Errno::EBUSY)
    }

    /// Waits on the kernel's condition variable (never spinning) until the fence is
    /// signalled, by a job completing inside SUBMIT or on the worker, or `timeout`
    /// passes. Other descriptors are always ready.
    fn poll(&self, fd: Fd, timeout: Duration) -> Result<bool, Errno> {
        let deadline = Instant::now().checked_add(timeout);
        let mut s = self.lock();
        if s.knobs.eintr_polls > 0 {
            s.knobs.eintr_polls -= 1;
            return Err(Errno::EINTR);
        }
        loop {
            match s.files.get(&fd.0) {
                Some(File::Fence { signalled: false }) => {}
                Some(_) => return Ok(true),
                None => return Err(Errno::EBADF),
            }
            s = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    self.shared.wait_timeout(s, left)
                }
                None => self.shared.wait(s),
            };
        }
    }

    /// A dma-buf this kernel exported (any copy of its descriptor) becomes a
    /// descriptor of the buffer; anything else a foreign file, which PRIME import
    /// refuses.
    fn adopt(&self, fd: BorrowedFd<'_>) -> Result<Fd, Errno> {
        let id = identity(fd)?;
        let mut s = self.lock_pruned();
        let file = match s.exports.get(&id) {
            Some(e) => File::DmaBuf(Arc::clone(&e.bo)),
            None => File::Foreign,
        };
        let n = s.next_fd;
        s.next_fd += 1;
        s.files.insert(n, file);
        Ok(Fd(n))
    }

    /// A dma-buf of this kernel becomes a real descriptor (see [`Export`]).
    fn release(&self, fd: Fd) -> Result<OwnedFd, Errno> {
        let mut s = self.lock_pruned();
        let Some(File::DmaBuf(bo)) = s.files.get(&fd.0) else {
            return Err(Errno::EBADF);
        };
        let bo = Arc::clone(bo);
        let (reader, writer) = std::io::pipe()
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(Errno::EMFILE as i32)))?;
        let reader = OwnedFd::from(reader);
        let id = identity(reader.as_fd())?;
        s.exports.insert(id, Export { bo, writer });
        // The buffer is held by the export now; the number is gone.
        s.files.remove(&fd.0);
        Ok(reader)
    }

    fn is_emulated(&self) -> bool {
        true
    }
}
