//! The memory image the simulated NPU reads and writes: regions at 32-bit device addresses.

use super::error::SimError;

/// One region: a run of bytes at a device address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// Device address of the first byte.
    pub addr: u32,
    /// The contents.
    pub bytes: Vec<u8>,
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
}

impl Memory {
    /// An empty image.
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Places `bytes` at `addr`. Fails when the region is empty, runs past 2^32, or
    /// overlaps a region already placed.
    pub fn map(&mut self, addr: u32, bytes: Vec<u8>) -> Result<(), SimError> {
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
        self.regions.insert(i, Region { addr, bytes });
        Ok(())
    }

    /// Places `len` zero bytes at `addr` (an output buffer).
    pub fn map_zeroed(&mut self, addr: u32, len: usize) -> Result<(), SimError> {
        self.map(addr, vec![0; len])
    }

    /// Removes and returns the region that starts at `addr`.
    pub fn unmap(&mut self, addr: u32) -> Option<Region> {
        let i = self.regions.binary_search_by_key(&addr, |r| r.addr).ok()?;
        let r = self.regions.remove(i);
        self.mapped -= r.bytes.len() as u64;
        Some(r)
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

    /// The bytes `[addr, addr + len)` for writing, if one region holds them all.
    pub fn write(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let i = self.find(addr, len as u64)?;
        let r = &mut self.regions[i];
        let start = (addr - r.addr as u64) as usize;
        Some(&mut r.bytes[start..start + len])
    }

    /// Copies `[addr, addr + len)` out, if one region holds it.
    pub fn read_vec(&self, addr: u32, len: usize) -> Option<Vec<u8>> {
        self.read(addr as u64, len).map(<[u8]>::to_vec)
    }
}
