//! CPU mappings of device memory, and the emulated kernel's device memory.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

/// Memory the emulated kernel hands out as a buffer object: a fixed allocation that is
/// either mapped by the CPU (one [`Mapping`] at a time) or copied in and out by the
/// kernel, never both at once.
///
/// Its bytes can also be handed over whole to the kernel's device view without a copy
/// ([`DmaMem::hand_over`]): the allocation moves out, a fresh one takes its place with
/// no page of it resident, and the handed-over bytes are copied back only when the CPU
/// next touches the memory. A weight bank written once and then only read by the NPU is
/// so held once, not once per view.
#[derive(Debug)]
pub struct DmaMem {
    len: usize,
    /// The allocation and its state; every access holds this lock.
    state: Mutex<MemState>,
}

#[derive(Debug)]
struct MemState {
    /// The allocation: `len.max(1)` bytes from a boxed slice.
    ptr: NonNull<u8>,
    /// Whether a Mapping is alive.
    mapped: bool,
    /// What the memory holds while its own bytes were handed over: the allocation is
    /// then a fresh one, and these bytes are copied into it before the next access.
    handed: Option<Arc<Vec<u8>>>,
}

// SAFETY: DmaMem owns its allocation. Bytes are reached only by `read`/`write`, which
// copy while holding `state` and only when no Mapping exists, or through the single
// Mapping that `map` hands out (also under `state`); the allocation is replaced only
// under `state` while no Mapping exists. So no two accesses race.
unsafe impl Send for DmaMem {}
// SAFETY: as for Send: every access is serialised by `state`.
unsafe impl Sync for DmaMem {}

/// A zeroed allocation of `len.max(1)` bytes (the zeroing is the allocator's, so large
/// allocations are fresh pages, resident only once written).
fn zeroed_alloc(len: usize) -> NonNull<u8> {
    let boxed: Box<[u8]> = vec![0u8; len.max(1)].into_boxed_slice();
    NonNull::from(Box::leak(boxed)).cast::<u8>()
}

impl DmaMem {
    /// `len` zero bytes (at least one, so the pointer is a real allocation).
    pub fn zeroed(len: usize) -> DmaMem {
        DmaMem {
            len,
            state: Mutex::new(MemState {
                ptr: zeroed_alloc(len),
                mapped: false,
                handed: None,
            }),
        }
    }

    /// The state, with handed-over bytes copied back (every access but
    /// [`DmaMem::hand_over`] wants the memory's own bytes present).
    fn lock(&self) -> MutexGuard<'_, MemState> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bytes) = state.handed.take() {
            // SAFETY: the allocation holds `len` bytes and no Mapping exists (handing
            // over requires none, and mapping restores first); `bytes` holds `len`
            // bytes (`hand_over` made it from the allocation) in a distinct allocation.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), state.ptr.as_ptr(), self.len) };
        }
        state
    }

    /// Whether a CPU mapping is alive.
    #[cfg(test)]
    fn is_mapped(&self) -> bool {
        self.lock().mapped
    }

    /// Whether the memory's bytes are handed over (no CPU copy of them is resident).
    #[cfg(test)]
    fn is_handed_over(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .handed
            .is_some()
    }

    /// The memory's bytes, without a copy, for a holder that keeps them from now on
    /// (the emulated kernel's device view after a full sync to the device); `None`
    /// while mapped. The memory still holds the same bytes as far as any caller can
    /// tell: the next read, write or mapping copies them back into a fresh allocation.
    pub fn hand_over(&self) -> Option<Arc<Vec<u8>>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.mapped {
            return None;
        }
        if let Some(bytes) = &state.handed {
            return Some(Arc::clone(bytes));
        }
        let fresh = zeroed_alloc(self.len);
        let old = std::mem::replace(&mut state.ptr, fresh);
        let slice = std::ptr::slice_from_raw_parts_mut(old.as_ptr(), self.len.max(1));
        // SAFETY: `old` came from `Box::leak` of a boxed slice of exactly this length
        // (`zeroed_alloc`), is no longer the allocation (replaced above, under the lock)
        // and no Mapping of it exists (checked), so this is its only owner.
        let mut bytes = Vec::from(unsafe { Box::from_raw(slice) });
        bytes.truncate(self.len);
        let bytes = Arc::new(bytes);
        state.handed = Some(Arc::clone(&bytes));
        Some(bytes)
    }

    /// Copies `out.len()` bytes from `offset`; false when out of bounds or mapped.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        let state = self.lock();
        if state.mapped
            || offset
                .checked_add(out.len())
                .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the range is inside the allocation (checked above), `out` is a distinct
        // Rust allocation, and no Mapping exists while `state` is held and unmapped.
        unsafe {
            std::ptr::copy_nonoverlapping(
                state.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        true
    }

    /// Copies `data` to `offset`; false when out of bounds or mapped.
    pub fn write(&self, offset: usize, data: &[u8]) -> bool {
        let state = self.lock();
        if state.mapped
            || offset
                .checked_add(data.len())
                .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: as in `read`, with the copy going the other way.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), state.ptr.as_ptr().add(offset), data.len())
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
        let mut state = self.lock();
        if state.mapped || len > self.len {
            return None;
        }
        state.mapped = true;
        Some(Mapping {
            ptr: state.ptr,
            len,
            owner: Owner::Emulated(Arc::clone(self)),
        })
    }

    /// Ends the mapping `map` handed out.
    fn unmap(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).mapped = false;
    }
}

impl Drop for DmaMem {
    fn drop(&mut self) {
        let ptr = self.state.get_mut().unwrap_or_else(|e| e.into_inner()).ptr;
        let slice = std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), self.len.max(1));
        // SAFETY: `ptr` came from `Box::leak` of a boxed slice of exactly this length in
        // `zeroed_alloc` and is freed once, here (a handed-over allocation was replaced
        // and now belongs to its Vec); every Mapping holds an Arc, so none outlives it.
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
            Owner::Emulated(mem) => mem.unmap(),
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

    #[test]
    fn handed_over_bytes_are_shared_then_copied_back_on_the_next_access() {
        let mem = Arc::new(DmaMem::zeroed(8192));
        assert!(mem.write(4000, &[1, 2, 3]));
        let m = mem.map(16).unwrap();
        assert!(mem.hand_over().is_none(), "not while mapped");
        drop(m);
        let bytes = mem.hand_over().unwrap();
        assert_eq!(bytes.len(), 8192);
        assert_eq!(&bytes[4000..4003], &[1, 2, 3]);
        assert!(mem.is_handed_over());
        let again = mem.hand_over().unwrap();
        assert!(
            Arc::ptr_eq(&bytes, &again),
            "handed over once, shared after"
        );
        let mut out = [0u8; 3];
        assert!(mem.read(4000, &mut out));
        assert_eq!(out, [1, 2, 3], "the memory still holds its bytes");
        assert!(!mem.is_handed_over(), "copied back by the access");
        let mut m = mem.map(8192).unwrap();
        m.as_mut_slice()[0] = 9;
        drop(m);
        assert_eq!(
            bytes[0], 0,
            "what was handed over is not changed by the CPU"
        );
        assert_eq!(mem.to_vec().unwrap()[0], 9);
        let empty = DmaMem::zeroed(0);
        assert_eq!(empty.hand_over().unwrap().len(), 0);
        assert_eq!(empty.to_vec().unwrap().len(), 0);
    }
}
