//! GGUF files opened from disk without reading them whole: the header is read in growing
//! pieces until it parses, and the file is mapped read-only, so a tensor's data is read
//! in place from the page cache when it is asked for (positional reads where the file
//! cannot be mapped; docs/gguf.md, "Opening a file"). A model of several GiB then costs
//! the process its header, not its size.

use super::{Gguf, GgufError, Result, read};
use crate::sys::FileMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// Bytes of a file read first: files no longer than this are held in memory whole;
/// longer ones are read further, doubling, only while their header goes on.
pub(super) const FIRST_READ: u64 = 1 << 20;

/// A file whose tensor data is read when asked for.
#[derive(Clone, Debug)]
pub(super) struct Source {
    pub(super) file: Arc<File>,
    pub(super) path: String,
    /// The whole file mapped, when it could be (otherwise reads go through `file`).
    pub(super) map: Option<Arc<FileMap>>,
}

impl Source {
    /// Fills `out` with the file's bytes from `at`.
    pub(super) fn read_at(&self, at: u64, out: &mut [u8]) -> Result<()> {
        if let Some(bytes) = self.mapped(at, out.len()) {
            out.copy_from_slice(bytes);
            return Ok(());
        }
        self.file.read_exact_at(out, at).map_err(|e| GgufError::Io {
            path: self.path.clone(),
            error: format!("reading {} bytes at {at}: {e}", out.len()),
        })
    }

    /// The file's `len` bytes from `at`, in place, when the file is mapped and holds
    /// them.
    pub(super) fn mapped(&self, at: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(at).ok()?;
        self.map
            .as_ref()?
            .as_slice()
            .get(start..start.checked_add(len)?)
    }
}

/// Opens the file at `path`: its header parsed from as few of its first bytes as it
/// takes; the whole file in memory only when it is at most [`FIRST_READ`] bytes.
pub(super) fn open(path: &Path) -> Result<Gguf> {
    let io = |e: std::io::Error| GgufError::Io {
        path: path.display().to_string(),
        error: e.to_string(),
    };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut source = Source {
        file: Arc::new(file),
        path: path.display().to_string(),
        map: None,
    };
    let mut bytes = Vec::new();
    let mut want = len.min(FIRST_READ);
    loop {
        let have = bytes.len();
        let size = usize::try_from(want).map_err(|_| GgufError::TooLarge {
            offset: 0,
            what: "header size",
            value: want,
            limit: usize::MAX as u64,
        })?;
        bytes.resize(size, 0);
        source.read_at(have as u64, &mut bytes[have..])?;
        match read::header(&bytes, len) {
            Ok(index) if want == len => return Ok(Gguf::whole(index, bytes)),
            Ok(index) => {
                // The names and metadata values lie before the data section.
                bytes.truncate(index.data_offset.min(want) as usize);
                bytes.shrink_to_fit();
                // Tensor data in place; a file that cannot be mapped is read instead.
                source.map = usize::try_from(len)
                    .ok()
                    .and_then(|len| FileMap::new(&source.file, len).ok())
                    .map(Arc::new);
                return Ok(Gguf::header_only(index, bytes, source, len));
            }
            Err(e) if read::needs_more(&e) => {
                let GgufError::Truncated { offset, needed, .. } = e else {
                    return Err(e);
                };
                want = (want * 2).max(offset + needed).min(len);
            }
            Err(e) => return Err(e),
        }
    }
}
