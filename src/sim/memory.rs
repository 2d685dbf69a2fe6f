//! The memory image the simulated NPU reads and writes: regions at 32-bit device addresses.

use super::error::{At, SimError};
use crate::regs::Block;
use std::collections::HashMap;
use std::sync::Arc;

/// One region: a run of bytes at a device address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// Device address of the first byte.
    pub addr: u32,
    /// The contents, shared with whoever mapped them ([`Memory::map_shared`]) until the
    /// first write makes the region's own copy.
    pub bytes: Arc<Vec<u8>>,
}

impl Region {
    /// One past the last byte's address (may be 2^32).
    pub fn end(&self) -> u64 {
        self.addr as u64 + self.bytes.len() as u64
    }
}

/// Regions that do not overlap, at 32-bit device addresses (the NPU sees 32-bit IOVAs).
///
/// Reads and writes are bounds-checked: an access must lie inside one region. The
/// simulator turns a failed access into [`SimError::Dma`] naming the block and register
/// that produced the address.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    regions: Vec<Region>,
    /// The bytes of every region together.
    mapped: u64,
    /// What each region written since it was mapped (or since
    /// [`Memory::forget_writes`]) held before its first write, by its address: the one
    /// copy a caller needs to tell what a run changed.
    originals: HashMap<u32, Arc<Vec<u8>>>,
    /// The tag a caller gave a region when it mapped it ([`Memory::map_tagged`]).
    tags: HashMap<u32, (u64, u64)>,
}

impl Memory {
    /// An empty image.
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Places `bytes` at `addr`. Fails when the region is empty, runs past 2^32, or
    /// overlaps a region already placed.
    pub fn map(&mut self, addr: u32, bytes: Vec<u8>) -> Result<(), SimError> {
        self.map_arc(addr, Arc::new(bytes))
    }

    /// Places shared `bytes` at `addr` without copying them: the region copies them
    /// only when the simulated NPU first writes it, so a caller that keeps the same
    /// bytes (the emulated kernel's device view of a weight bank) holds them once.
    /// Tagged as in [`Memory::map_tagged`].
    pub fn map_shared(
        &mut self,
        addr: u32,
        bytes: Arc<Vec<u8>>,
        tag: (u64, u64),
    ) -> Result<(), SimError> {
        self.map_arc(addr, bytes)?;
        self.tags.insert(addr, tag);
        Ok(())
    }

    /// The contents of the region that starts at `addr`, shared.
    pub fn region_bytes(&self, addr: u32) -> Option<Arc<Vec<u8>>> {
        let i = self.regions.binary_search_by_key(&addr, |r| r.addr).ok()?;
        Some(Arc::clone(&self.regions[i].bytes))
    }

    fn map_arc(&mut self, addr: u32, bytes: Arc<Vec<u8>>) -> Result<(), SimError> {
        let end = addr as u64 + bytes.len() as u64;
        if bytes.is_empty() {
            return Err(SimError::Setup {
                why: format!("empty region at {addr:#x}"),
            });
        }
        if end > 1 << 32 {
            return Err(SimError::Setup {
                why: format!(
                    "region at {addr:#x} of {} bytes runs past the 32-bit device address space",
                    bytes.len()
                ),
            });
        }
        let i = self.regions.partition_point(|r| r.addr < addr);
        let clash = self
            .regions
            .get(i)
            .filter(|r| (r.addr as u64) < end)
            .or_else(|| {
                i.checked_sub(1)
                    .map(|j| &self.regions[j])
                    .filter(|r| r.end() > addr as u64)
            });
        if let Some(r) = clash {
            return Err(SimError::Setup {
                why: format!(
                    "region at {addr:#x}..{end:#x} overlaps the region at {:#x}..{:#x}",
                    r.addr,
                    r.end()
                ),
            });
        }
        self.mapped += bytes.len() as u64;
        self.originals.remove(&addr);
        self.tags.remove(&addr);
        self.regions.insert(i, Region { addr, bytes });
        Ok(())
    }

    /// [`Memory::map`] with a tag the caller chooses (an identity and a version of what
    /// the bytes are a copy of), so that a later run can keep the region instead of
    /// copying the same bytes in again ([`Memory::tag`]).
    pub fn map_tagged(
        &mut self,
        addr: u32,
        bytes: Vec<u8>,
        tag: (u64, u64),
    ) -> Result<(), SimError> {
        self.map(addr, bytes)?;
        self.tags.insert(addr, tag);
        Ok(())
    }

    /// The tag of the region at `addr`, if it was mapped with one.
    pub fn tag(&self, addr: u32) -> Option<(u64, u64)> {
        self.tags.get(&addr).copied()
    }

    /// Sets the tag of the region at `addr` (a caller that brought the bytes it copies
    /// from up to date with the region); nothing when no region starts there.
    pub fn set_tag(&mut self, addr: u32, tag: (u64, u64)) {
        if self.regions.binary_search_by_key(&addr, |r| r.addr).is_ok() {
            self.tags.insert(addr, tag);
        }
    }

    /// What the region at `addr` held before its first write since it was mapped or
    /// since [`Memory::forget_writes`], and forgets it (`None`: not written since).
    pub fn take_original(&mut self, addr: u32) -> Option<Arc<Vec<u8>>> {
        self.originals.remove(&addr)
    }

    /// The addresses of the regions written since they were mapped or since
    /// [`Memory::forget_writes`].
    pub fn written(&self) -> Vec<u32> {
        self.originals.keys().copied().collect()
    }

    /// Forgets every region's pre-write copy: writes from now on count as new.
    pub fn forget_writes(&mut self) {
        self.originals.clear();
    }

    /// Places `len` zero bytes at `addr` (an output buffer).
    pub fn map_zeroed(&mut self, addr: u32, len: usize) -> Result<(), SimError> {
        self.map(addr, vec![0; len])
    }

    /// Removes and returns the region that starts at `addr`.
    pub fn unmap(&mut self, addr: u32) -> Option<Region> {
        self.unmap_written(addr).map(|(r, _)| r)
    }

    /// Removes the region that starts at `addr` and returns it with what it held before
    /// its first write since it was mapped (`None`: it was not written, so it holds what
    /// it was mapped with).
    pub fn unmap_written(&mut self, addr: u32) -> Option<(Region, Option<Arc<Vec<u8>>>)> {
        let i = self.regions.binary_search_by_key(&addr, |r| r.addr).ok()?;
        let r = self.regions.remove(i);
        self.mapped -= r.bytes.len() as u64;
        let before = self.originals.remove(&addr);
        self.tags.remove(&addr);
        Some((r, before))
    }

    /// The regions, by address.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// The bytes of every region together.
    pub fn mapped_bytes(&self) -> u64 {
        self.mapped
    }

    /// The index of the region holding `[addr, addr + len)`, if one does (none when the
    /// end overflows).
    fn find(&self, addr: u64, len: u64) -> Option<usize> {
        let i = self.regions.partition_point(|r| (r.addr as u64) <= addr);
        let i = i.checked_sub(1)?;
        let r = &self.regions[i];
        (addr.checked_add(len)? <= r.end()).then_some(i)
    }

    /// The bytes `[addr, addr + len)`, if one region holds them all.
    pub fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let i = self.find(addr, len as u64)?;
        let r = &self.regions[i];
        let start = (addr - r.addr as u64) as usize;
        Some(&r.bytes[start..start + len])
    }

    /// The bytes `[addr, addr + len)` for writing, if one region holds them all. The
    /// first write to a region since it was mapped keeps a copy of what it held
    /// ([`Memory::unmap_written`]); a region whose bytes are shared gets its own copy
    /// then.
    pub fn write(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let i = self.find(addr, len as u64)?;
        let r = &mut self.regions[i];
        self.originals
            .entry(r.addr)
            .or_insert_with(|| Arc::clone(&r.bytes));
        let start = (addr - r.addr as u64) as usize;
        Some(&mut Arc::make_mut(&mut r.bytes)[start..start + len])
    }

    /// Copies `[addr, addr + len)` out, if one region holds it.
    pub fn read_vec(&self, addr: u32, len: usize) -> Option<Vec<u8>> {
        self.read(addr as u64, len).map(<[u8]>::to_vec)
    }
}

/// The DMA fault of `len` bytes at `addr` (a read, or a `write`) of `block`'s `register`.
pub(super) fn dma_err(
    at: At,
    addr: i64,
    len: usize,
    block: Block,
    register: &'static str,
    write: bool,
) -> SimError {
    SimError::Dma {
        at,
        addr: addr.max(0) as u64,
        len: len as u64,
        block,
        register,
        write,
    }
}

/// Bytes of one (surface, line) run, bounds-checked.
pub(in crate::sim) fn run<'m>(
    mem: &'m Memory,
    addr: i64,
    len: usize,
    at: At,
    block: Block,
    register: &'static str,
) -> Result<&'m [u8], SimError> {
    if !(0..1 << 32).contains(&addr) {
        return Err(dma_err(at, addr, len, block, register, false));
    }
    mem.read(addr as u64, len)
        .ok_or_else(|| dma_err(at, addr, len, block, register, false))
}

#[cfg(test)]
mod tests {
    use super::Memory;
    use std::sync::Arc;

    #[test]
    fn the_first_write_keeps_what_a_region_held() {
        let mut mem = Memory::new();
        mem.map(0x1000, vec![1, 2, 3, 4]).unwrap();
        mem.map(0x2000, vec![9; 4]).unwrap();
        assert!(mem.written().is_empty());
        mem.write(0x1001, 2).unwrap().copy_from_slice(&[7, 8]);
        mem.write(0x1000, 1).unwrap()[0] = 5;
        assert_eq!(mem.written(), vec![0x1000], "only the written region");
        let (region, before) = mem.unmap_written(0x1000).unwrap();
        assert_eq!(*region.bytes, vec![5, 7, 8, 4]);
        assert_eq!(
            before.as_deref(),
            Some(&vec![1, 2, 3, 4]),
            "the bytes before the first write"
        );
        assert_eq!(mem.unmap_written(0x2000).unwrap().1, None, "never written");
    }

    #[test]
    fn tags_last_until_the_region_is_replaced_and_writes_can_be_forgotten() {
        let mut mem = Memory::new();
        mem.map_tagged(0x1000, vec![0; 8], (3, 1)).unwrap();
        assert_eq!(mem.tag(0x1000), Some((3, 1)));
        mem.set_tag(0x1000, (3, 2));
        assert_eq!(mem.tag(0x1000), Some((3, 2)));
        mem.set_tag(0x5000, (1, 1));
        assert_eq!(mem.tag(0x5000), None, "no region there");
        mem.write(0x1000, 1).unwrap()[0] = 1;
        mem.forget_writes();
        assert!(mem.written().is_empty());
        assert_eq!(mem.take_original(0x1000), None);
        mem.write(0x1004, 1).unwrap()[0] = 2;
        assert_eq!(
            mem.take_original(0x1000).as_deref(),
            Some(&vec![1, 0, 0, 0, 0, 0, 0, 0])
        );
        mem.unmap(0x1000);
        mem.map(0x1000, vec![0; 8]).unwrap();
        assert_eq!(mem.tag(0x1000), None, "a new region has no tag");
    }

    #[test]
    fn shared_regions_are_copied_on_the_first_write_only() {
        let mut mem = Memory::new();
        let view = Arc::new(vec![1u8, 2, 3, 4]);
        mem.map_shared(0x1000, Arc::clone(&view), (7, 1)).unwrap();
        assert_eq!(mem.tag(0x1000), Some((7, 1)));
        assert!(
            Arc::ptr_eq(&mem.region_bytes(0x1000).unwrap(), &view),
            "no copy to map"
        );
        assert_eq!(mem.read(0x1001, 2), Some(&[2u8, 3][..]));
        mem.write(0x1000, 1).unwrap()[0] = 9;
        assert_eq!(
            *view,
            vec![1, 2, 3, 4],
            "the caller's bytes are not written"
        );
        let now = mem.region_bytes(0x1000).unwrap();
        assert_eq!(*now, vec![9, 2, 3, 4]);
        assert!(Arc::ptr_eq(&mem.take_original(0x1000).unwrap(), &view));
        assert!(mem.region_bytes(0x2000).is_none());
    }
}
