//! Buffer objects: allocation and import, CPU mappings with ownership transitions,
//! dma-buf export. What the driver is asked is the backend's; what the device keeps of a
//! buffer (for traces) is here.

use super::{Device, Error, Result};
use crate::sys::uapi::dma_buf;
use crate::sys::{Fd, Mapping};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;

/// The page both kernels round buffer sizes to.
const PAGE_BYTES: usize = 4096;

/// The largest buffer either kernel can map for the NPU: its whole 32-bit address space.
const MAX_BUFFER_BYTES: u64 = 1 << 32;

/// What the device keeps of a live buffer (to sync, free and read it for a trace).
#[derive(Clone, Copy, Debug)]
pub(super) struct BoMeta {
    pub(super) size: usize,
    pub(super) dma: u32,
    pub(super) obj_addr: u64,
    pub(super) mmap_offset: u64,
    pub(super) cacheable: bool,
    /// Whether a trace records it (not the internal task arrays or imported buffers).
    pub(super) traced: bool,
    /// The CPU may have written it since a trace last read it (mapped, or exported as a
    /// dma-buf that anyone may write at any time): only such buffers are read before a
    /// submission.
    pub(super) cpu_written: bool,
    /// Exported as a dma-buf.
    pub(super) exported: bool,
    /// The vendor driver's IOMMU domain it lies in.
    pub(super) domain: u8,
}

/// How a buffer is allocated. The default is what board-run programs use for buffers
/// the CPU touches: non-contiguous, cacheable, with explicit syncs (quirk 17,
/// docs/hardware/quirks.md#quirk-17).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct BoFlags {
    /// One physically contiguous block (CMA) instead of IOMMU-mapped pages.
    pub contiguous: bool,
    /// A cacheable CPU mapping (syncs copy between CPU caches and memory).
    pub cacheable: bool,
    /// A kernel mapping (vendor: required for task arrays; the device adds it there).
    pub kernel_mapping: bool,
    /// The vendor driver's IOMMU domain (0..=15; 0.9.6 and later), each a 4 GiB window
    /// of its own; `None` (the default): the first domain with room, domain 0 until it
    /// is full (docs/device.md, "Beyond 4 GiB: IOMMU domains"). rocket has domain 0 only.
    pub iommu_domain: Option<u8>,
}

impl Default for BoFlags {
    fn default() -> Self {
        BoFlags {
            contiguous: false,
            cacheable: true,
            kernel_mapping: false,
            iommu_domain: None,
        }
    }
}

impl BoFlags {
    /// These flags with `contiguous` set to `on`.
    pub fn with_contiguous(mut self, on: bool) -> BoFlags {
        self.contiguous = on;
        self
    }

    /// These flags with `cacheable` set to `on`.
    pub fn with_cacheable(mut self, on: bool) -> BoFlags {
        self.cacheable = on;
        self
    }

    /// These flags with `kernel_mapping` set to `on`.
    pub fn with_kernel_mapping(mut self, on: bool) -> BoFlags {
        self.kernel_mapping = on;
        self
    }

    /// These flags in the vendor driver's IOMMU domain `domain` (exactly that one).
    pub fn with_iommu_domain(mut self, domain: u8) -> BoFlags {
        self.iommu_domain = Some(domain);
        self
    }
}

impl Device {
    /// Allocates a buffer object of at least `size` bytes: in the IOMMU domain `flags`
    /// name, or else (vendor driver) in the first domain with room, so that a process
    /// can hold more than the 4 GiB one domain maps ([`Device::alloc_in`] places one
    /// beside another buffer).
    pub fn alloc(&self, size: usize, flags: BoFlags) -> Result<Bo> {
        let bo = self.alloc_with(size, flags, true)?;
        if let Some(r) = self.recording().as_mut() {
            let bits = self.inner.backend.alloc_bits(self, &flags);
            r.buffer_created(bo.handle, bits, bo.size as u64, bo.dma);
        }
        Ok(bo)
    }

    /// Allocates a buffer; `traced` says whether a trace records it.
    pub(super) fn alloc_with(&self, size: usize, flags: BoFlags, traced: bool) -> Result<Bo> {
        if size == 0 {
            return Err(Error::InvalidArgument {
                what: "a buffer of 0 bytes".into(),
            });
        }
        // Both kernels round to pages, and the NPU addresses 4 GiB: a larger buffer can
        // never be mapped (and rounding the largest sizes would overflow).
        let pages = size.checked_next_multiple_of(PAGE_BYTES);
        if pages.is_none_or(|p| p as u64 > MAX_BUFFER_BYTES) {
            return Err(Error::InvalidArgument {
                what: format!(
                    "a buffer of {size} bytes: the NPU's 32-bit address space holds at most {MAX_BUFFER_BYTES} bytes (in 4096-byte pages)"
                ),
            });
        }
        self.place(size, flags, traced)
    }

    /// Imports a dma-buf — one [`Bo::export_dmabuf`] made, on this or another device, or
    /// one of other DRM code — as a buffer of this device (docs/device.md, "Sharing
    /// buffers as dma-bufs"). The descriptor is only borrowed: the buffer keeps its own
    /// duplicate, and the caller may close theirs at once.
    ///
    /// Vendor driver: PRIME_FD_TO_HANDLE attaches it in the live IOMMU domain, then
    /// MEM_CREATE with that handle gives its address and size. The buffer is not
    /// cacheable (no syncs) and is mapped through the dma-buf, since the driver's
    /// MEM_MAP refuses imported objects; it cannot hold a task array (no kernel
    /// mapping). A dma-buf of this very device's fd is refused with
    /// [`Error::InvalidArgument`] (DRM would give back the existing buffer).
    ///
    /// rocket: refused with [`Error::NotOffered`] before any request, because
    /// the driver cannot attach a dma-buf.
    pub fn import_dmabuf(&self, dmabuf: BorrowedFd<'_>) -> Result<Bo> {
        self.inner.backend.import(self, dmabuf)
    }
}

/// A buffer object: NPU-visible memory at a 32-bit device address, freed on drop.
#[derive(Debug)]
pub struct Bo {
    pub(super) dev: Device,
    pub(super) handle: u32,
    pub(super) size: usize,
    pub(super) dma: u32,
    /// The vendor driver's kernel address of the object (0 on rocket).
    pub(super) obj_addr: u64,
    /// The vendor driver's IOMMU domain it was created in (0 on rocket).
    pub(super) domain: u8,
    pub(super) mmap_offset: u64,
    pub(super) cacheable: bool,
    /// An imported buffer's dma-buf, held by the kernel seam: its CPU mappings are of
    /// the dma-buf, since the driver maps only its own objects.
    pub(super) dmabuf: Option<Fd>,
}

impl Bo {
    /// What the device keeps of the buffer; `traced` says whether a trace records it.
    pub(super) fn meta(&self, traced: bool) -> BoMeta {
        BoMeta {
            size: self.size,
            dma: self.dma,
            obj_addr: self.obj_addr,
            mmap_offset: self.mmap_offset,
            cacheable: self.cacheable,
            traced,
            cpu_written: false,
            exported: false,
            domain: self.domain,
        }
    }

    /// The vendor driver's IOMMU domain the buffer lies in (0..=15; always 0 on rocket
    /// and for imported buffers): a job runs in one domain, so every buffer it names
    /// must lie in the same one ([`Device::alloc_in`]).
    pub fn iommu_domain(&self) -> u8 {
        self.domain
    }

    /// The device address the NPU uses.
    pub fn dma_addr(&self) -> u32 {
        self.dma
    }

    /// Bytes (page-rounded).
    pub fn size(&self) -> usize {
        self.size
    }

    /// The GEM handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The device it belongs to.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Makes the buffer CPU-owned and maps it. While the returned map lives the buffer
    /// cannot be submitted (it borrows the buffer exclusively); dropping it hands the
    /// buffer back to the device (cleaning CPU caches).
    pub fn map(&mut self) -> Result<CpuMap<'_>> {
        let mapping = self.cpu_mapping()?;
        self.dev.note_cpu_write(self.handle);
        self.dev.inner.live_maps.fetch_add(1, Ordering::SeqCst);
        Ok(CpuMap {
            bo: self,
            mapping: Some(mapping),
        })
    }

    /// Ownership to the CPU: the driver's transition, or for an imported buffer the
    /// start of CPU access to its dma-buf (its exporter's cache maintenance).
    fn to_cpu(&self) -> Result<()> {
        match self.dmabuf {
            Some(fd) => (self.dev.inner.port).dmabuf_sync(fd, dma_buf::START | dma_buf::RW),
            None => (self.dev.inner.backend).to_cpu(&self.dev, self.handle, &self.meta(false)),
        }
    }

    /// Ownership back to the device: the driver's transition, or the end of CPU access
    /// to an imported buffer's dma-buf.
    fn to_device(&self) -> Result<()> {
        match self.dmabuf {
            Some(fd) => (self.dev.inner.port).dmabuf_sync(fd, dma_buf::END | dma_buf::RW),
            None => (self.dev.inner.backend).to_device(&self.dev, self.handle, &self.meta(false)),
        }
    }

    /// Copies `data` in at `offset` (map, copy, hand back to the device).
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        let end = offset.checked_add(data.len()).filter(|&e| e <= self.size);
        let end = end.ok_or_else(|| Error::InvalidArgument {
            what: format!(
                "{} bytes at offset {offset} of a {}-byte buffer",
                data.len(),
                self.size
            ),
        })?;
        let mut m = self.map()?;
        m[offset..end].copy_from_slice(data);
        m.finish()
    }

    /// Copies the whole buffer out.
    pub fn read_all(&mut self) -> Result<Vec<u8>> {
        Ok(self.cpu_mapping()?.as_slice().to_vec())
    }

    /// Calls `f` on the buffer's bytes, CPU-owned for the call, through a shared borrow,
    /// and hands the buffer back to the device: reading a job's results without a copy
    /// while the job's other borrows live.
    pub fn read_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.dev.check_not_held(self.handle)?;
        self.to_cpu()?;
        let r = self.mmap_all().map(|m| f(m.as_slice()));
        self.to_device()?;
        r
    }

    /// Copies the whole buffer out and hands it back to the device, through a shared
    /// borrow: what a job's checks read of a buffer the job borrows.
    pub(super) fn peek(&self) -> Result<Vec<u8>> {
        self.dev.check_not_held(self.handle)?;
        self.to_cpu()?;
        let bytes = self.mmap_all().map(|m| m.as_slice().to_vec());
        self.to_device()?;
        bytes
    }

    /// Makes the buffer CPU-owned and maps all of it.
    fn cpu_mapping(&mut self) -> Result<Mapping> {
        // A buffer of a job that may still run stays away from the CPU.
        self.dev.check_not_held(self.handle)?;
        self.to_cpu()?;
        self.mmap_all()
    }

    /// Maps all of the buffer: through the driver, or through the dma-buf it was
    /// imported from.
    fn mmap_all(&self) -> Result<Mapping> {
        let port = &self.dev.inner.port;
        match self.dmabuf {
            Some(fd) => port.mmap_fd(fd, self.size),
            None => port.mmap(self.size, self.mmap_offset),
        }
    }

    /// Exports the buffer as a dma-buf (DRM PRIME, read-write, close-on-exec) that other
    /// DRM code, or another [`Device`] through [`Device::import_dmabuf`], can use. The
    /// descriptor is the caller's; the memory lives until both the buffer is dropped
    /// and every copy of the descriptor is closed, in either order.
    pub fn export_dmabuf(&self) -> Result<OwnedFd> {
        let port = &self.dev.inner.port;
        let fd = self.dev.inner.backend.export(&self.dev, self.handle)?;
        let owned = port.release(fd).inspect_err(|_| port.close(fd))?;
        if let Some(m) = self.dev.handles().get_mut(&self.handle) {
            m.exported = true;
        }
        Ok(owned)
    }
}

impl Drop for Bo {
    fn drop(&mut self) {
        // Never free a buffer a job may still use: the kernel would unmap it under the
        // NPU, and hand its address to the next buffer.
        if self.dev.leak_if_held(self) {
            self.dev.untrack(self.handle);
            return;
        }
        let _ = self
            .dev
            .inner
            .backend
            .free(&self.dev, self.handle, &self.meta(false));
        self.dev.untrack(self.handle);
        self.dev.freed_in(self.domain);
        if let Some(fd) = self.dmabuf {
            self.dev.inner.port.close(fd);
        }
    }
}

/// A CPU mapping of a buffer, borrowed from it; the buffer is CPU-owned while it lives.
#[derive(Debug)]
pub struct CpuMap<'b> {
    bo: &'b mut Bo,
    mapping: Option<Mapping>,
}

impl CpuMap<'_> {
    /// Unmaps and hands the buffer back to the device, reporting a failed cache clean
    /// (dropping the map does the same but cannot report).
    pub fn finish(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        if self.mapping.take().is_some() {
            self.bo.dev.inner.live_maps.fetch_sub(1, Ordering::SeqCst);
            return self.bo.to_device();
        }
        Ok(())
    }
}

impl std::ops::Deref for CpuMap<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.mapping.as_ref().map_or(&[], |m| m.as_slice())
    }
}

impl std::ops::DerefMut for CpuMap<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.mapping.as_mut().map_or(&mut [], |m| m.as_mut_slice())
    }
}

impl Drop for CpuMap<'_> {
    fn drop(&mut self) {
        let _ = self.release();
    }
}
