//! The emulated vendor driver's memory requests: MEM_CREATE in the IOMMU domain the
//! request names ([`super::domains`]) and MEM_SYNC between a cacheable object's CPU and
//! device views.

use super::mem::{EmuBo, bo_of, lock_bo, next_id, object};
use super::{File, Flavour, PAGE, State};
use crate::sys::uapi::*;
use crate::sys::{DmaMem, Errno, Fd};
use std::sync::{Arc, Mutex};

/// The byte a contiguous object created without `RKNPU_MEM_ZEROING` holds: what the
/// memory held before (the emulation's stand-in for it).
pub const STALE_BYTE: u8 = 0x5A;

/// MEM_CREATE: a new object in the domain the request names (a freed range of its
/// window first, else top-down from 4 GiB), or the information of an existing handle (after PRIME
/// import). An unknown non-zero handle allocates a new object, as the driver does
/// (`rknpu_gem.c:883-895`).
pub(super) fn mem_create(
    s: &mut State,
    fd: Fd,
    c: &mut RknpuMemCreate,
    flavour: Flavour,
) -> Result<i32, Errno> {
    if c.handle != 0
        && let Ok(bo) = bo_of(s, fd, c.handle)
    {
        let b = lock_bo(&bo);
        c.size = b.size;
        c.obj_addr = b.obj_addr;
        c.dma_addr = b.dma as u64;
        c.sram_size = 0;
        return Ok(0);
    }
    // rknpu_gem_object_create (rknpu_gem.c) refuses a zero size, then rounds up to
    // pages, which wraps to 0 for the last page's sizes: what follows can at best make
    // a zero-sized object. The emulation refuses those sizes as zero ones instead of
    // overflowing (the library never asks for them).
    let size = c.size.wrapping_add(PAGE - 1) & !(PAGE - 1);
    if size == 0 || !(0..16).contains(&c.iommu_domain_id) {
        return Err(Errno::EINVAL);
    }
    // The request's domain, which the caller has made live (every object in domain 0's
    // window on a kernel without domains).
    let domain = s.domains.placed(c.iommu_domain_id as u8);
    let dma = s.domains.alloc(domain, size).ok_or(Errno::ENOMEM)?;
    let obj = s.next_obj;
    s.next_obj += 0x1000;
    let cacheable = c.flags & mem::CACHEABLE != 0;
    // Bit 10 maps the pages without the DMA API's cache clean (rknpu_iommu.c:222-283):
    // the CPU cache still holds the dirty lines of the page zeroing (0.9.7 and later).
    let dirty = cacheable
        && c.flags & mem::IOMMU_LIMIT_IOVA_ALIGNMENT != 0
        && flavour != Flavour::Vendor096;
    // The contiguous path allocates with DMA_ATTR_SKIP_ZEROING unless the request
    // sets RKNPU_MEM_ZEROING (rknpu_gem.c, rknpu_gem_alloc_buf): the memory keeps what
    // it held. Pages (non-contiguous) come from shmem, always zeroed.
    let stale = c.flags & (mem::NON_CONTIGUOUS | mem::ZEROING) == 0;
    let fill = if stale { STALE_BYTE } else { 0 };
    let cpu = DmaMem::zeroed(size as usize);
    if stale {
        cpu.write(0, &vec![fill; size as usize]);
    }
    let bo = Arc::new(Mutex::new(EmuBo {
        size,
        flags: c.flags,
        dma: dma as u32,
        obj_addr: obj,
        mmap_offset: 0,
        cpu: Arc::new(cpu),
        dev: cacheable.then(|| Arc::new(vec![fill; size as usize])),
        busy_until: None,
        writer: None,
        dirty,
        id: next_id(),
        version: 0,
        domain,
        // Pages are zeroed, lazily: nothing of either view is resident yet.
        pristine: !stale && cacheable,
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
    c.dma_addr = dma;
    c.sram_size = 0;
    Ok(0)
}

/// MEM_SYNC: copies between the CPU and the device view of a cacheable object.
pub(super) fn mem_sync(s: &mut State, y: &RknpuMemSync) -> Result<i32, Errno> {
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
