//! What differs between the kernel interfaces, behind one private trait: [`Backend`],
//! implemented for the vendor `rknpu` driver (`vendor.rs`) and for `rocket`
//! (`rocket.rs`). A device picks its backend once, by the driver name DRM_VERSION
//! reports, and from then on every operation that depends on the interface — buffers,
//! syncs, submission, completion, reset — asks it, never the interface enum.

use super::{Bo, BoMeta, Capabilities, Device, DeviceInfo, Error, Interface, Job, JobResult};
use super::{BoFlags, Result};
use crate::sys::uapi::{
    DRM_CLOEXEC, DRM_RDWR, DmaBufSync, DrmPrimeHandle, RknpuAction, VendorNode,
};
use crate::sys::{Errno, Fd, Ioctl, Kernel, Mapping, VendorOp};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The seam and the descriptor every request of a device goes through; the descriptor
/// is closed when the port is dropped.
#[derive(Debug)]
pub(super) struct Port {
    pub(super) kernel: Arc<dyn Kernel>,
    pub(super) fd: Fd,
    /// Set when buffers were leaked on purpose: closing the node would free them under
    /// a job that may still run, so it stays open until the process exits.
    pub(super) keep_open: AtomicBool,
}

fn ioctl_err(op: &'static str) -> impl Fn(Errno) -> Error {
    move |errno| Error::Ioctl {
        op,
        errno: crate::sys::os_error(errno),
    }
}

impl Port {
    /// A generic request (DRM, rocket), its errors named after the request.
    /// A rocket PREP_BO interrupted by a signal (`EINTR`: its reservation wait is
    /// interruptible, `rocket_gem.c` `rocket_ioctl_prep_bo`) is asked again: its
    /// deadline is absolute, so the retry waits no longer than the first call would
    /// have. No other request is repeated (a vendor SUBMIT may have started its job).
    pub(super) fn ioctl(&self, req: &mut Ioctl<'_>) -> Result<i32> {
        let name = req.name();
        loop {
            match self.kernel.ioctl(self.fd, req) {
                Err(Errno::EINTR) if matches!(req, Ioctl::RocketPrepBo(_)) => continue,
                r => return r.map_err(ioctl_err(name)),
            }
        }
    }

    /// A vendor request on the DRM node, its errors named `name`.
    pub(super) fn vendor(&self, op: VendorOp<'_>, name: &'static str) -> Result<i32> {
        self.kernel
            .ioctl(self.fd, &mut Ioctl::Vendor(VendorNode::Drm, op))
            .map_err(ioctl_err(name))
    }

    /// A vendor `RKNPU_ACTION`: its value out.
    pub(super) fn action(&self, code: u32, value: u32) -> Result<u32> {
        let mut a = RknpuAction { flags: code, value };
        self.vendor(VendorOp::Action(&mut a), "RKNPU_ACTION")?;
        Ok(a.value)
    }

    /// Maps `len` bytes at the driver's mmap `offset`.
    pub(super) fn mmap(&self, len: usize, offset: u64) -> Result<Mapping> {
        self.kernel
            .mmap(self.fd, len, offset)
            .map_err(ioctl_err("mmap"))
    }

    /// Waits up to `timeout` for `fd` (a fence) to be readable. A poll a signal
    /// interrupts (`EINTR`: `poll(2)` is never restarted) goes on for the time left.
    pub(super) fn poll(&self, fd: Fd, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now().checked_add(timeout);
        let mut left = timeout;
        loop {
            match self.kernel.poll(fd, left) {
                Err(Errno::EINTR) => {
                    if let Some(d) = deadline {
                        left = d.saturating_duration_since(Instant::now());
                    }
                }
                r => return r.map_err(ioctl_err("poll")),
            }
        }
    }

    /// Closes a descriptor the kernel handed out (a fence, a dma-buf).
    pub(super) fn close(&self, fd: Fd) {
        self.kernel.close(fd);
    }

    /// Lends the kernel a descriptor (a dma-buf to import): its own duplicate's number.
    pub(super) fn adopt(&self, fd: BorrowedFd<'_>) -> Result<Fd> {
        self.kernel.adopt(fd).map_err(ioctl_err("dup"))
    }

    /// Takes a descriptor the kernel returned (an exported dma-buf) out of its hands.
    pub(super) fn release(&self, fd: Fd) -> Result<OwnedFd> {
        self.kernel.release(fd).map_err(ioctl_err("dup"))
    }

    /// DMA_BUF_IOCTL_SYNC on the dma-buf the kernel holds as `fd`: `flags` is
    /// `dma_buf::START` or `dma_buf::END` with the access.
    pub(super) fn dmabuf_sync(&self, fd: Fd, flags: u64) -> Result<()> {
        let mut y = DmaBufSync { flags };
        self.kernel
            .ioctl(fd, &mut Ioctl::DmaBufSync(&mut y))
            .map(|_| ())
            .map_err(ioctl_err("DMA_BUF_IOCTL_SYNC"))
    }

    /// Maps `len` bytes of the dma-buf the kernel holds as `fd` (an imported buffer's).
    pub(super) fn mmap_fd(&self, fd: Fd, len: usize) -> Result<Mapping> {
        self.kernel.mmap(fd, len, 0).map_err(ioctl_err("mmap"))
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        if self.keep_open.load(Ordering::SeqCst) {
            // The kernel owns the descriptor (RealKernel closes what it holds when it
            // is dropped): keep it, and so the node, for the life of the process.
            std::mem::forget(Arc::clone(&self.kernel));
        } else {
            self.kernel.close(self.fd);
        }
    }
}

/// What a job submitted without waiting keeps until it is waited for: the vendor
/// driver's fence and task array; on rocket, which signals through the buffers the job
/// writes, the sentinel buffer whose overwriting confirms that the job completed.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    /// The out-fence, closed when waited for or dropped.
    pub(super) fence: Option<Fd>,
    /// The task array the kernel writes each task's interrupt status into.
    pub(super) tasks: Option<Bo>,
    /// Rocket: the buffer the job's appended last task overwrites.
    pub(super) sentinel: Option<Bo>,
}

/// A job [`Backend::start`] submitted, as waiting for it or settling it sees it: the
/// job, and what its submission keeps in flight.
pub(super) struct Submitted<'s, 'a> {
    /// The job.
    pub(super) job: &'s Job<'a>,
    /// What waiting for it needs.
    pub(super) flight: &'s mut InFlight,
}

impl<'s, 'a> Submitted<'s, 'a> {
    /// `job` and its `flight`.
    pub(super) fn new(job: &'s Job<'a>, flight: &'s mut InFlight) -> Self {
        Submitted { job, flight }
    }
}

/// One kernel interface's way of doing what a [`Device`] offers.
pub(super) trait Backend: std::fmt::Debug + Send + Sync {
    /// Which interface this is.
    fn interface(&self) -> Interface;

    /// Completes `info` after DRM_VERSION named the driver (its version, IOMMU state,
    /// clock), refusing versions whose layout the library does not speak.
    fn identify(&self, port: &Port, info: &mut DeviceInfo) -> Result<()>;

    /// The allocation flags as the driver takes them (what a trace records).
    fn alloc_bits(&self, dev: &Device, flags: &BoFlags) -> u32;

    /// Creates a buffer object of at least `size` (non-zero) bytes and tracks it;
    /// `traced` says whether a trace records it.
    fn alloc(&self, dev: &Device, size: usize, flags: BoFlags, traced: bool) -> Result<Bo>;

    /// Makes a buffer object of a dma-buf and tracks it.
    fn import(&self, dev: &Device, dmabuf: BorrowedFd<'_>) -> Result<Bo>;

    /// Exports buffer `handle` as a dma-buf: its descriptor.
    fn export(&self, dev: &Device, handle: u32) -> Result<Fd>;

    /// Frees buffer `handle`.
    fn free(&self, dev: &Device, handle: u32, m: &BoMeta) -> Result<()>;

    /// Ownership transition device → CPU: invalidate CPU caches.
    fn to_cpu(&self, dev: &Device, handle: u32, m: &BoMeta) -> Result<()>;

    /// Ownership transition CPU → device: clean CPU caches.
    fn to_device(&self, dev: &Device, handle: u32, m: &BoMeta) -> Result<()>;

    /// Soft-resets every core.
    fn reset(&self, dev: &Device) -> Result<()>;

    /// What this interface offers the layers above (which plans and jobs it runs).
    fn capabilities(&self) -> Capabilities;

    /// Refuses what this interface cannot run, before asking the kernel (the checks
    /// every interface shares are done already).
    fn check(&self, job: &Job<'_>) -> Result<()>;

    /// Refuses what this interface cannot run without blocking (after [`Backend::check`]).
    fn check_nonblocking(&self, job: &Job<'_>) -> Result<()>;

    /// The submit flags a trace records for a job.
    fn submit_flags(&self, nonblocking: bool) -> u32;

    /// Submits `job` and blocks until it completes or times out.
    fn run(&self, dev: &Device, job: &Job<'_>) -> Result<JobResult>;

    /// Submits `job` and returns at once with what waiting for it needs.
    fn start<'a>(&self, dev: &'a Device, job: &Job<'a>) -> Result<InFlight>;

    /// Waits until `deadline` for a job [`Backend::start`] submitted.
    fn wait(&self, dev: &Device, s: Submitted<'_, '_>, deadline: Instant) -> Result<JobResult>;

    /// Whether a job [`Backend::start`] submitted has finished (it no longer runs), without
    /// blocking and without settling it: a later [`Backend::wait`] still gives its result.
    fn is_done(&self, dev: &Device, job: &Job<'_>, flight: &InFlight) -> Result<bool>;

    /// How long [`Backend::settle`] may wait for a job that may still run.
    fn settle_bound(&self, job: &Job<'_>) -> Duration;

    /// Waits until `deadline` for a job that timed out or was dropped: whether it
    /// certainly no longer runs then (false when that cannot be known).
    fn settle(&self, dev: &Device, s: Submitted<'_, '_>, deadline: Instant) -> bool;
}

/// The backend of the driver DRM_VERSION names, or `None` for a driver that is not an
/// NPU driver the library knows.
pub(super) fn for_driver(name: &str) -> Option<Box<dyn Backend>> {
    match name {
        "rknpu" => Some(Box::new(super::vendor::Vendor)),
        "rocket" => Some(Box::new(super::rocket::Rocket)),
        _ => None,
    }
}

/// DRM_IOCTL_PRIME_HANDLE_TO_FD of buffer `handle`, read-write and close-on-exec: the
/// dma-buf's descriptor, held by the kernel seam.
pub(super) fn prime_export(dev: &Device, handle: u32) -> Result<Fd> {
    let mut p = DrmPrimeHandle {
        handle,
        flags: DRM_CLOEXEC | DRM_RDWR,
        fd: -1,
    };
    dev.inner.port.ioctl(&mut Ioctl::PrimeHandleToFd(&mut p))?;
    Ok(Fd(p.fd))
}

/// An absolute CLOCK_MONOTONIC time `d` from now, in ns (rocket PREP_BO deadlines).
pub(super) fn deadline_ns(d: Duration) -> i64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() * 1_000_000_000 + t.tv_nsec())
        .unwrap_or(0);
    now.saturating_add(d.as_nanos().min(i64::MAX as u128) as i64)
}
