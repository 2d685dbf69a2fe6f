//! The emulated kernel's memory: buffer objects with a CPU view and a device view, the
//! lookups every request makes, and the copies into and out of the simulator around a
//! job.

use super::{File, State};
use crate::sim::Simulator;
use crate::sys::{DmaMem, Errno, Fd};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// A buffer object.
#[derive(Debug)]
pub(super) struct EmuBo {
    /// Bytes (page-rounded).
    pub(super) size: u64,
    /// The driver's allocation flags.
    pub(super) flags: u32,
    /// Device address.
    pub(super) dma: u32,
    /// Vendor: the kernel address requests name it by.
    pub(super) obj_addr: u64,
    /// Where a CPU mapping of it starts.
    pub(super) mmap_offset: u64,
    /// What CPU mappings show.
    pub(super) cpu: Arc<DmaMem>,
    /// What the NPU reads and writes, for cacheable buffers (otherwise `cpu`). Shared
    /// without copies: a full sync to the device takes the CPU view's bytes
    /// ([`DmaMem::hand_over`]) and the simulator maps the same bytes until it writes
    /// them, so a buffer the CPU fills once and the NPU only reads (a weight bank) is
    /// held once.
    pub(super) dev: Option<Arc<Vec<u8>>>,
    /// Rocket: when the last job writing it finishes.
    pub(super) busy_until: Option<Instant>,
    /// Rocket, asynchronous mode: the ticket of the last queued job that writes it
    /// (PREP_BO waits until the worker has finished that job).
    pub(super) writer: Option<u64>,
    /// Vendor bit 10: the CPU cache still holds dirty lines of the page zeroing, which
    /// a sync (clean or invalidate) resolves and which are otherwise evicted over what
    /// the NPU wrote.
    pub(super) dirty: bool,
    /// Which object this is, for as long as the process runs ([`next_id`]).
    pub(super) id: u64,
    /// Counts the changes of `dev` made outside the simulator (syncs to the device,
    /// write-backs): the simulator's copy of a cacheable object is current while its tag
    /// holds this version, and is not copied in again for the next job.
    pub(super) version: u64,
    /// Vendor: the IOMMU domain it was created in (0 on rocket, and on a vendor kernel
    /// without domains).
    pub(super) domain: u8,
    /// A cacheable object both of whose views hold zeros in allocations no page of
    /// which is resident (fresh, never mapped by the CPU nor written by the NPU): syncs
    /// have nothing to copy, and copying would make every page resident. An object
    /// whose CPU bytes are all zeros when they are synced to the device becomes so
    /// again, so that banks of zeros (tests of the address space) cost no memory.
    pub(super) pristine: bool,
}

/// A new object identity.
pub(super) fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl EmuBo {
    /// What the NPU sees; `None` for an uncached buffer the CPU has mapped right now
    /// (the emulation copies a buffer only while it is unmapped).
    pub(super) fn device_bytes(&self) -> Option<Arc<Vec<u8>>> {
        match &self.dev {
            Some(d) => Some(Arc::clone(d)),
            None => self.cpu.to_vec().map(Arc::new),
        }
    }

    /// Makes `bytes` what the NPU sees (shared, not copied, for a cacheable buffer).
    pub(super) fn set_device_bytes(&mut self, bytes: Arc<Vec<u8>>) -> bool {
        self.version += 1;
        self.pristine = false;
        match &mut self.dev {
            Some(d) => {
                *d = bytes;
                true
            }
            None => self.cpu.write(0, &bytes),
        }
    }

    /// Cache maintenance of a byte range; `EBUSY` while the buffer is mapped (the
    /// emulation's one restriction: it copies only unmapped buffers).
    pub(super) fn sync(&mut self, to_device: bool, offset: u64, size: u64) -> Result<(), Errno> {
        let Some(dev) = &mut self.dev else {
            return Ok(());
        };
        self.dirty = false;
        if self.pristine {
            // Zeros on both sides: nothing to copy.
            return Ok(());
        }
        let start = offset.min(self.size) as usize;
        let end = offset.saturating_add(size).min(self.size) as usize;
        let ok = if to_device {
            self.version += 1;
            if start == 0 && end as u64 == self.size {
                // The whole view: take the CPU's bytes rather than copy them.
                match self.cpu.hand_over() {
                    Some(bytes) if all_zero(&bytes) => {
                        // Both views become fresh zeros, and the resident pages go.
                        self.cpu = Arc::new(DmaMem::zeroed(self.size as usize));
                        *dev = Arc::new(vec![0u8; self.size as usize]);
                        self.pristine = true;
                        true
                    }
                    Some(bytes) => {
                        *dev = bytes;
                        true
                    }
                    None => false,
                }
            } else {
                self.cpu.read(start, &mut Arc::make_mut(dev)[start..end])
            }
        } else {
            self.cpu.write(start, &dev[start..end])
        };
        if ok { Ok(()) } else { Err(Errno::EBUSY) }
    }
}

/// Whether `bytes` are all zeros (page by page, each folded without branches).
fn all_zero(bytes: &[u8]) -> bool {
    bytes
        .chunks(4096)
        .all(|page| page.iter().fold(0u8, |acc, &b| acc | b) == 0)
}

pub(super) fn bo_of(s: &State, fd: Fd, handle: u32) -> Result<Arc<Mutex<EmuBo>>, Errno> {
    match s.files.get(&fd.0) {
        Some(File::Device { handles, .. }) => handles.get(&handle).cloned().ok_or(Errno::ENOENT),
        _ => Err(Errno::EBADF),
    }
}

/// The object a vendor request names by its kernel address. A fabricated address is
/// refused with `EFAULT` and logged: the real driver dereferences it (a kernel oops).
pub(super) fn object(
    s: &mut State,
    obj_addr: u64,
    request: &str,
) -> Result<Arc<Mutex<EmuBo>>, Errno> {
    let found = s.objects.get(&obj_addr).cloned();
    found.ok_or_else(|| {
        s.log.push(format!(
            "{request} with obj_addr {obj_addr:#x}, which is no object: the real driver dereferences it (a kernel oops)"
        ));
        Errno::EFAULT
    })
}

/// Drops the kernel's object entry of `bo` once no fd holds a handle to it.
pub(super) fn release(s: &mut State, bo: &Arc<Mutex<EmuBo>>) {
    let held = s.files.values().any(|f| match f {
        File::Device { handles, .. } => handles.values().any(|b| Arc::ptr_eq(b, bo)),
        File::DmaBuf(b) => Arc::ptr_eq(b, bo),
        File::Fence { .. } | File::Misc | File::Foreign => false,
    }) || s.exports.values().any(|e| Arc::ptr_eq(&e.bo, bo));
    if !held {
        let (obj, dma, size, domain) = {
            let b = lock_bo(bo);
            (b.obj_addr, b.dma, b.size, b.domain)
        };
        // Vendor: the object's domain hands the range out again.
        if s.objects.remove(&obj).is_some() {
            s.domains.free(domain, u64::from(dma), size);
        }
    }
}

pub(super) fn lock_bo(bo: &Mutex<EmuBo>) -> MutexGuard<'_, EmuBo> {
    bo.lock().unwrap_or_else(|e| e.into_inner())
}

/// The objects a job's memory image holds, by device address, with the version of each
/// one's device view when the job started.
pub(super) type Loaded = HashMap<u32, u64>;

/// Places every object's device view in the simulator's memory. An uncached buffer the
/// CPU has mapped at this moment is left out (and logged): a program that reads it stops
/// with a DMA error naming its address.
///
/// The memory image persists between jobs: a cacheable object whose device view has not
/// changed since the simulator's copy was made (the same identity and version) keeps
/// that copy, so a job copies in only what changed, not every buffer of the device (a
/// model's weight banks are copied once). Regions of objects the job does not list are
/// removed, as before. Uncached objects are copied every time (the CPU writes them
/// through its mapping unseen).
pub(super) fn load_memory(
    sim: &mut Simulator,
    objects: &[Arc<Mutex<EmuBo>>],
    log: &mut Vec<String>,
) -> Loaded {
    let mut loaded = Loaded::new();
    let mem = sim.memory_mut();
    mem.forget_writes();
    let current: HashMap<u32, Option<(u64, u64)>> = objects
        .iter()
        .map(|bo| {
            let b = lock_bo(bo);
            (b.dma, b.dev.is_some().then_some((b.id, b.version)))
        })
        .collect();
    let addrs: Vec<u32> = mem.regions().iter().map(|r| r.addr).collect();
    for a in addrs {
        let keep = matches!(current.get(&a), Some(Some(tag)) if mem.tag(a) == Some(*tag));
        if !keep {
            mem.unmap(a);
        }
    }
    for bo in objects {
        let b = lock_bo(bo);
        let tag = (b.id, b.version);
        if b.dev.is_some() && mem.tag(b.dma) == Some(tag) {
            loaded.insert(b.dma, b.version);
            continue;
        }
        match b.device_bytes() {
            // Objects never overlap: the allocators hand out disjoint ranges.
            Some(bytes) => {
                let mapped = if b.dev.is_some() {
                    mem.map_shared(b.dma, bytes, tag)
                } else {
                    mem.map(b.dma, Arc::unwrap_or_clone(bytes))
                };
                if mapped.is_ok() {
                    loaded.insert(b.dma, b.version);
                }
            }
            None => log.push(format!(
                "buffer at {:#x} is mapped by the CPU during a job; the emulation leaves it out",
                b.dma
            )),
        }
    }
    loaded
}

/// Copies what the NPU wrote back into the objects' device views: only the regions the
/// job changed, so that what the CPU put in other buffers while an asynchronous job ran
/// is kept. An object whose CPU cache lines are still dirty from its zeroing (vendor
/// bit 10, never synced) then has them evicted over the NPU's output, as happens on a
/// board sooner or later. A region whose object the CPU changed during the job is
/// dropped from the image, so the next job copies it in afresh.
pub(super) fn store_memory(
    sim: &mut Simulator,
    objects: &[Arc<Mutex<EmuBo>>],
    loaded: &Loaded,
    log: &mut Vec<String>,
) {
    let mem = sim.memory_mut();
    for bo in objects {
        let mut b = lock_bo(bo);
        if let Some(&at_load) = loaded.get(&b.dma) {
            let mut expected = at_load;
            if let Some(before) = mem.take_original(b.dma)
                && let Some(now) = mem.region_bytes(b.dma)
                && before != now
            {
                b.set_device_bytes(now);
                expected += 1;
            }
            if b.dev.is_some() && b.version == expected {
                mem.set_tag(b.dma, (b.id, b.version));
            } else {
                mem.unmap(b.dma);
            }
        }
        if b.dirty {
            b.dirty = false;
            let zeros = vec![0u8; b.size as usize];
            b.set_device_bytes(Arc::new(zeros));
            log.push(format!(
                "buffer at {:#x}: dirty cache lines of its zeroing evicted over the NPU's writes (bit 10 without a clean)",
                b.dma
            ));
        }
    }
}
