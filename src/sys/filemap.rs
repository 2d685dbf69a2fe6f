//! Read-only mappings of whole files: a GGUF file's tensor data read in place from the
//! page cache, without a copy into the process's heap (`gguf::Gguf::open`).

use nix::errno::Errno;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
use std::fs::File;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

/// A private, read-only mapping of the first `len` bytes of a file, unmapped on drop.
///
/// The bytes are those of the file as long as the file is not changed: a file written
/// or truncated by someone else while mapped shows the change (or, past a new end,
/// stops the process with `SIGBUS`). The GGUF reader requires files not to change while
/// they are open, as it requires of every read.
#[derive(Debug)]
pub struct FileMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value; nothing in the process writes
// it, so sharing or moving the pointer between threads races with nothing.
unsafe impl Send for FileMap {}
// SAFETY: as for Send: only shared reads ever reach the mapping.
unsafe impl Sync for FileMap {}

impl FileMap {
    /// Maps the first `len` bytes of `file` (opened for reading) read-only; `EINVAL` for
    /// `len` 0, the kernel's error otherwise.
    pub fn new(file: &File, len: usize) -> Result<FileMap, Errno> {
        let length = NonZeroUsize::new(len).ok_or(Errno::EINVAL)?;
        // SAFETY: no fixed address, so no existing memory is replaced; a private read-only
        // mapping of a file the caller keeps open for the call, owned by the value below.
        let p = unsafe {
            mmap(
                None,
                length,
                ProtFlags::PROT_READ,
                MapFlags::MAP_PRIVATE,
                file,
                0,
            )
        }?;
        Ok(FileMap { ptr: p.cast(), len })
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` starts a live read-only mapping of `len` bytes that lasts as long
        // as `self`, and no Rust code can write through it (PROT_READ). Its bytes change
        // only if the file itself is changed, which the type's contract excludes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: the region was created by `mmap` in `new` with this address and length
        // and is unmapped once, here; no slice of it outlives `self` (`as_slice` borrows).
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_mapped_file_shows_its_bytes_and_an_empty_one_is_refused() {
        let path = std::env::temp_dir().join(format!("rknpu-filemap-{}", std::process::id()));
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(&bytes))
            .unwrap();
        let file = File::open(&path).unwrap();
        let map = FileMap::new(&file, bytes.len()).unwrap();
        drop(file);
        assert_eq!(map.as_slice(), &bytes[..]);
        assert_eq!(
            FileMap::new(&File::open(&path).unwrap(), 0).unwrap_err(),
            Errno::EINVAL
        );
        let _ = std::fs::remove_file(&path);
    }
}
