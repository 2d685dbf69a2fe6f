//! CPU mappings of device memory, and the emulated kernel's device memory.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

/// Memory the emulated kernel hands out as a buffer object: a fixed allocation that is
/// either mapped by the CPU (one [`Mapping`] at a time) or copied in and out by the
/// kernel, never both at once.
#[derive(Debug)]
pub struct DmaMem {
    ptr: NonNull<u8>,
    len: usize,
    /// Whether a Mapping is alive; held while the kernel copies.
    mapped: Mutex<bool>,
}

// SAFETY: DmaMem owns its allocation. Bytes are reached only by `read`/`write`, which
// copy while holding `mapped` and only when no Mapping exists, or through the single
// Mapping that `map` hands out (also under `mapped`); so no two accesses race.
unsafe impl Send for DmaMem {}
// SAFETY: as for Send: every access is serialised by `mapped`.
unsafe impl Sync for DmaMem {}

impl DmaMem {
    /// `len` zero bytes (at least one, so the pointer is a real allocation).
    pub fn zeroed(len: usize) -> DmaMem {
        let boxed: Box<[u8]> = vec![0u8; len.max(1)].into_boxed_slice();
        let ptr = NonNull::from(Box::leak(boxed)).cast::<u8>();
        DmaMem {
            ptr,
            len,
            mapped: Mutex::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, bool> {
        self.mapped.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a CPU mapping is alive.
    #[cfg(test)]
    fn is_mapped(&self) -> bool {
        *self.lock()
    }

    /// Copies `out.len()` bytes from `offset`; false when out of bounds or mapped.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        let mapped = self.lock();
        if *mapped
            || offset
                .checked_add(out.len())
                .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the range is inside the allocation (checked above), `out` is a distinct
        // Rust allocation, and no Mapping exists while `mapped` is held and false.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        true
    }

    /// Copies `data` to `offset`; false when out of bounds or mapped.
    pub fn write(&self, offset: usize, data: &[u8]) -> bool {
        let mapped = self.lock();
        if *mapped
            || offset
                .checked_add(data.len())
                .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: as in `read`, with the copy going the other way.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        };
        true
    }

    /// A copy of all bytes, or `None` while mapped.
    pub fn to_vec(&self) -> Option<Vec<u8>> {
        let mut v = vec![0u8; self.len];
        self.read(0, &mut v).then_some(v)
    }

    /// The CPU mapping of the first `len` bytes, keeping the memory alive; `None` when
    /// `len` is too large or a mapping already exists (one at a time).
    pub fn map(self: &Arc<DmaMem>, len: usize) -> Option<Mapping> {
        let mut mapped = self.lock();
        if *mapped || len > self.len {
            return None;
        }
        *mapped = true;
        Some(Mapping {
            ptr: self.ptr,
            len,
            owner: Owner::Emulated(Arc::clone(self)),
        })
    }
}

impl Drop for DmaMem {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len.max(1));
        // SAFETY: `ptr` came from `Box::leak` of a boxed slice of exactly this length in
        // `zeroed` and is freed once, here; every Mapping holds an Arc, so none outlives it.
        drop(unsafe { Box::from_raw(slice) });
    }
}

#[derive(Debug)]
enum Owner {
    /// A real `mmap(2)` region, unmapped on drop.
    Real,
    /// Emulated device memory, kept alive by the mapping.
    Emulated(Arc<DmaMem>),
}

/// A CPU mapping of a buffer object: `len` bytes, unmapped when dropped.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    owner: Owner,
}

// SAFETY: the mapping is plain shared memory owned by this value; moving it to another
// thread moves that ownership. Concurrent device access is excluded by the device layer.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Wraps a region returned by a successful `mmap(2)`.
    ///
    /// # Safety
    /// `ptr` must be the start of a live `len`-byte read-write shared mapping that
    /// nothing else unmaps; the returned value unmaps it on drop.
    pub(super) unsafe fn from_mmap(ptr: NonNull<u8>, len: usize) -> Mapping {
        Mapping {
            ptr,
            len,
            owner: Owner::Real,
        }
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is mapped (real) or allocated and kept alive by the Arc
        // (emulated) for the life of `self`. No Rust code writes it meanwhile: an emulated
        // DmaMem refuses copies while mapped and hands out one mapping at a time; a real
        // mapping is written only by the device's DMA, outside the language, and the
        // device layer orders CPU and device access by ownership transitions.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapped bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only slice of the mapping.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        match &self.owner {
            Owner::Real => {
                // SAFETY: the region was created by mmap with this address and length
                // (`from_mmap`'s contract) and is unmapped exactly once, here.
                let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast(), self.len) };
            }
            Owner::Emulated(mem) => *mem.lock() = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_memory_is_mapped_or_copied_never_both() {
        let mem = Arc::new(DmaMem::zeroed(64));
        assert!(mem.write(8, &[1, 2, 3]));
        assert!(!mem.write(62, &[1, 2, 3]), "out of bounds");
        let mut m = mem.map(64).unwrap();
        assert_eq!(&m.as_slice()[8..11], &[1, 2, 3]);
        assert!(mem.map(64).is_none(), "one mapping at a time");
        assert!(mem.is_mapped());
        assert!(!mem.write(0, &[9]), "no kernel copy while mapped");
        assert!(mem.to_vec().is_none());
        m.as_mut_slice()[0] = 7;
        drop(m);
        assert_eq!(mem.to_vec().unwrap()[0], 7);
        assert!(mem.map(65).is_none(), "longer than the memory");
    }
}
