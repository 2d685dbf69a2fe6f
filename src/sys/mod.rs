//! The only module that may use `unsafe`: the kernel's structures ([`uapi`]) and the one
//! narrow seam through which every request reaches a kernel ([`Kernel`]): open, ioctl,
//! mmap, munmap (by dropping a [`Mapping`]), poll, close, and taking in or handing out a
//! descriptor (dma-bufs).
//!
//! Two kernels stand behind the seam: [`RealKernel`] calls the operating system through
//! drm-rs (generic DRM requests) and nix (the rest); the emulated kernel
//! (`crate::emu`) implements the drivers' semantics in-process on the
//! simulator. Requests are typed ([`Ioctl`]): each carries the
//! structure and, where the C interface takes user pointers, the borrowed slices they
//! point to, so the emulated kernel reads the same data without pointers and the real
//! one builds the pointers here, from borrows that outlive the call. Every `unsafe`
//! block is listed in docs/unsafe-audit.md.
#![allow(unsafe_code)]

mod filemap;
mod mem;
mod real;
pub(crate) mod simd;
pub mod uapi;

pub use filemap::FileMap;
pub use mem::{DmaMem, Mapping};
pub use nix::errno::Errno;
pub use real::RealKernel;

use crate::error::OsError;
use std::fmt::Debug;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;
use uapi::*;

/// The library's error value of an `errno` the seam returned (nix stays inside the
/// crate: the public [`OsError`] carries the raw number).
pub(crate) fn os_error(e: Errno) -> OsError {
    OsError::from_raw(e as i32)
}

/// A file descriptor as the seam names it (a real fd, or the emulated kernel's number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fd(pub i32);

/// The vendor driver's six commands.
#[derive(Debug)]
pub enum VendorOp<'a> {
    /// `RKNPU_ACTION`.
    Action(&'a mut RknpuAction),
    /// `RKNPU_SUBMIT`.
    Submit(&'a mut RknpuSubmit),
    /// `RKNPU_MEM_CREATE`.
    MemCreate(&'a mut RknpuMemCreate),
    /// `RKNPU_MEM_MAP`.
    MemMap(&'a mut RknpuMemMap),
    /// `RKNPU_MEM_DESTROY`.
    MemDestroy(&'a mut RknpuMemDestroy),
    /// `RKNPU_MEM_SYNC`.
    MemSync(&'a mut RknpuMemSync),
}

/// One ioctl request with everything it points to.
#[derive(Debug)]
pub enum Ioctl<'a> {
    /// `DRM_IOCTL_VERSION`, with the buffers the kernel fills.
    DrmVersion {
        /// The structure (lengths are set from the buffers).
        version: &'a mut DrmVersion,
        /// Driver name.
        name: &'a mut [u8],
        /// Driver date.
        date: &'a mut [u8],
        /// Driver description.
        desc: &'a mut [u8],
    },
    /// `DRM_IOCTL_GEM_CLOSE`.
    GemClose(&'a mut DrmGemClose),
    /// `DRM_IOCTL_PRIME_HANDLE_TO_FD`.
    PrimeHandleToFd(&'a mut DrmPrimeHandle),
    /// `DRM_IOCTL_PRIME_FD_TO_HANDLE`.
    PrimeFdToHandle(&'a mut DrmPrimeHandle),
    /// A vendor `rknpu` command on a DRM or misc node.
    Vendor(VendorNode, VendorOp<'a>),
    /// `DRM_IOCTL_ROCKET_CREATE_BO`.
    RocketCreateBo(&'a mut DrmRocketCreateBo),
    /// `DRM_IOCTL_ROCKET_SUBMIT` of one job.
    RocketSubmit {
        /// The job (its pointers and counts are set from the slices).
        job: &'a mut DrmRocketJob,
        /// Its tasks.
        tasks: &'a [DrmRocketTask],
        /// BOs the job reads.
        in_handles: &'a [u32],
        /// BOs the job writes.
        out_handles: &'a [u32],
    },
    /// `DRM_IOCTL_ROCKET_PREP_BO`.
    RocketPrepBo(&'a mut DrmRocketPrepBo),
    /// `DRM_IOCTL_ROCKET_FINI_BO`.
    RocketFiniBo(&'a mut DrmRocketFiniBo),
    /// `DMA_BUF_IOCTL_SYNC`, on a dma-buf's descriptor.
    DmaBufSync(&'a mut DmaBufSync),
}

impl Ioctl<'_> {
    /// The request code.
    pub fn code(&self) -> u32 {
        match self {
            Ioctl::DrmVersion { .. } => DRM_IOCTL_VERSION,
            Ioctl::GemClose(_) => DRM_IOCTL_GEM_CLOSE,
            Ioctl::PrimeHandleToFd(_) => DRM_IOCTL_PRIME_HANDLE_TO_FD,
            Ioctl::PrimeFdToHandle(_) => DRM_IOCTL_PRIME_FD_TO_HANDLE,
            Ioctl::Vendor(node, op) => match op {
                VendorOp::Action(_) => vendor_code::<RknpuAction>(*node, 0),
                VendorOp::Submit(_) => vendor_code::<RknpuSubmit>(*node, 1),
                VendorOp::MemCreate(_) => vendor_code::<RknpuMemCreate>(*node, 2),
                VendorOp::MemMap(_) => vendor_code::<RknpuMemMap>(*node, 3),
                VendorOp::MemDestroy(_) => vendor_code::<RknpuMemDestroy>(*node, 4),
                VendorOp::MemSync(_) => vendor_code::<RknpuMemSync>(*node, 5),
            },
            Ioctl::RocketCreateBo(_) => DRM_IOCTL_ROCKET_CREATE_BO,
            Ioctl::RocketSubmit { .. } => DRM_IOCTL_ROCKET_SUBMIT,
            Ioctl::RocketPrepBo(_) => DRM_IOCTL_ROCKET_PREP_BO,
            Ioctl::RocketFiniBo(_) => DRM_IOCTL_ROCKET_FINI_BO,
            Ioctl::DmaBufSync(_) => DMA_BUF_IOCTL_SYNC,
        }
    }

    /// The request's name, for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Ioctl::DrmVersion { .. } => "DRM_IOCTL_VERSION",
            Ioctl::GemClose(_) => "DRM_IOCTL_GEM_CLOSE",
            Ioctl::PrimeHandleToFd(_) => "DRM_IOCTL_PRIME_HANDLE_TO_FD",
            Ioctl::PrimeFdToHandle(_) => "DRM_IOCTL_PRIME_FD_TO_HANDLE",
            Ioctl::Vendor(_, op) => match op {
                VendorOp::Action(_) => "RKNPU_ACTION",
                VendorOp::Submit(_) => "RKNPU_SUBMIT",
                VendorOp::MemCreate(_) => "RKNPU_MEM_CREATE",
                VendorOp::MemMap(_) => "RKNPU_MEM_MAP",
                VendorOp::MemDestroy(_) => "RKNPU_MEM_DESTROY",
                VendorOp::MemSync(_) => "RKNPU_MEM_SYNC",
            },
            Ioctl::RocketCreateBo(_) => "DRM_IOCTL_ROCKET_CREATE_BO",
            Ioctl::RocketSubmit { .. } => "DRM_IOCTL_ROCKET_SUBMIT",
            Ioctl::RocketPrepBo(_) => "DRM_IOCTL_ROCKET_PREP_BO",
            Ioctl::RocketFiniBo(_) => "DRM_IOCTL_ROCKET_FINI_BO",
            Ioctl::DmaBufSync(_) => "DMA_BUF_IOCTL_SYNC",
        }
    }
}

/// The narrow seam: everything the library asks of a kernel.
pub trait Kernel: Send + Sync + Debug {
    /// Opens a device node read-write with close-on-exec.
    fn open(&self, path: &str) -> Result<Fd, Errno>;
    /// Closes a descriptor (device or fence); errors are ignored as `close(2)`'s are.
    fn close(&self, fd: Fd);
    /// Issues one request; returns the ioctl's non-negative result.
    fn ioctl(&self, fd: Fd, req: &mut Ioctl<'_>) -> Result<i32, Errno>;
    /// Maps `len` bytes of `fd` at `offset`, shared and read-write.
    fn mmap(&self, fd: Fd, len: usize, offset: u64) -> Result<Mapping, Errno>;
    /// Waits up to `timeout` for `fd` to become readable (a signalled fence).
    fn poll(&self, fd: Fd, timeout: Duration) -> Result<bool, Errno>;
    /// Takes a descriptor the caller lends (a dma-buf to import): the kernel keeps its
    /// own duplicate, named by the returned number, until [`Kernel::close`].
    fn adopt(&self, fd: BorrowedFd<'_>) -> Result<Fd, Errno>;
    /// Hands a descriptor this kernel returned (an exported dma-buf) to the caller: it
    /// leaves the kernel's table, and closing it is the caller's.
    fn release(&self, fd: Fd) -> Result<OwnedFd, Errno>;
    /// Whether this kernel is the in-process emulation.
    fn is_emulated(&self) -> bool;
}
