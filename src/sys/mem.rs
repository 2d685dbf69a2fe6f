//! CPU mappings of device memory, and the emulated kernel's device memory.

use std::ptr::NonNull;
use std::sync::Arc;

/// Memory the emulated kernel hands out as a buffer object: a fixed allocation that a
/// [`Mapping`] may point into while the kernel also copies in and out of it.
#[derive(Debug)]
pub struct DmaMem {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: DmaMem owns its allocation; all access goes through `&self` methods that copy
// with raw pointers, or through a Mapping; the device layer never lets a mapping's slice
// and a kernel copy of the same buffer overlap in time (mappings borrow their buffer
// exclusively, submissions borrow it shared).
unsafe impl Send for DmaMem {}
// SAFETY: as for Send: shared references only copy bytes in and out through raw pointers.
unsafe impl Sync for DmaMem {}

impl DmaMem {
    /// `len` zero bytes (at least one, so the pointer is a real allocation).
    pub fn zeroed(len: usize) -> DmaMem {
        let boxed: Box<[u8]> = vec![0u8; len.max(1)].into_boxed_slice();
        let ptr = NonNull::from(Box::leak(boxed)).cast::<u8>();
        DmaMem { ptr, len }
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the memory is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `out.len()` bytes from `offset`; false when out of bounds.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        if offset
            .checked_add(out.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the range is inside the allocation (checked above), `out` is a distinct
        // Rust allocation, and no Mapping slice of this memory is alive during a kernel
        // copy (the device layer's borrow rules).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        true
    }

    /// Copies `data` to `offset`; false when out of bounds.
    pub fn write(&self, offset: usize, data: &[u8]) -> bool {
        if offset
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

    /// A copy of all bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.read(0, &mut v);
        v
    }

    /// A CPU mapping of the first `len` bytes that keeps the memory alive.
    pub fn map(self: &Arc<DmaMem>, len: usize) -> Option<Mapping> {
        (len <= self.len).then(|| Mapping {
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
    Emulated(#[allow(dead_code)] Arc<DmaMem>),
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

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is mapped (or allocated) for the life of `self`, and the
        // device layer keeps kernel copies out while this borrow is alive.
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
        if let Owner::Real = self.owner {
            // SAFETY: the region was created by mmap with this address and length
            // (`from_mmap`'s contract) and is unmapped exactly once, here.
            let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast(), self.len) };
        }
    }
}
