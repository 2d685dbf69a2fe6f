//! What the walk needs of a target, and the simplest one: plain memory (check mode).

use crate::submit::BufferTask;
use std::collections::BTreeMap;

/// What a submission did on a target.
pub(super) struct Outcome {
    /// Whether every task completed.
    pub ok: bool,
    /// The task counter the kernel would report.
    pub task_counter: u32,
    /// Per task, the interrupt status written back.
    pub statuses: Vec<u32>,
    /// The simulator's lints.
    pub lints: Vec<String>,
    /// Why it did not complete.
    pub why: Option<String>,
}

/// A submission as a target runs it: tasks with the placed address of their lists.
pub(super) struct Run<'a> {
    /// Submission id.
    pub id: u32,
    /// Vendor core mask.
    pub core_mask: u32,
    /// Timeout in milliseconds.
    pub timeout_ms: u32,
    /// Per-core task ranges `(start, count)`.
    pub ranges: &'a [(u32, u32)],
    /// The tasks, offsets in their recorded buffers.
    pub tasks: &'a [BufferTask],
    /// The placed address of each task's list.
    pub addrs: Vec<u32>,
}

/// `len` bytes at `offset` of buffer `id`: a place a target reads.
#[derive(Clone, Copy)]
pub(super) struct Span {
    /// The recorded buffer id.
    pub id: u32,
    /// Byte offset in the buffer.
    pub offset: u64,
    /// Number of bytes.
    pub len: usize,
}

impl Span {
    /// The error every target reports for a span outside its buffer.
    pub(super) fn misfit(&self) -> String {
        let Span { id, offset, len } = *self;
        format!("{len} bytes at +{offset:#x} do not fit buffer {id}")
    }
}

/// Where a replay places buffers and runs submissions.
pub(super) trait Target {
    /// Places buffer `id` of `size` bytes recorded at `addr`; returns where it is now.
    fn place(&mut self, id: u32, size: u64, addr: u32) -> Result<u32, String>;
    /// Writes `bytes` at `offset` of buffer `id`.
    fn write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<(), String>;
    /// Calls `f` on the bytes of `at`, where the target holds them (no copy where it
    /// can).
    fn inspect(&mut self, at: Span, f: &mut dyn FnMut(&[u8])) -> Result<(), String>;
    /// A copy of the `len` bytes at `offset` of buffer `id` (for small reads: words of a
    /// list, a relocated entry).
    fn read(&mut self, id: u32, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        self.inspect(Span { id, offset, len }, &mut |b| out = b.to_vec())?;
        Ok(out)
    }
    /// Buffer `id` was freed: the target forgets it and what it held (its addresses may
    /// be placed again).
    fn free(&mut self, id: u32);
    /// Runs a submission; `None` where the target does not execute (check mode).
    fn run(&mut self, r: &Run<'_>) -> Result<Option<Outcome>, String>;
}

/// Buffers in plain memory: the check target.
#[derive(Default)]
pub(super) struct Plain {
    bufs: BTreeMap<u32, Vec<u8>>,
}

impl Plain {
    fn slice(&mut self, at: Span) -> Result<&mut [u8], String> {
        let Span { id, offset, len } = at;
        let b = self
            .bufs
            .get_mut(&id)
            .ok_or_else(|| format!("buffer {id} was never created"))?;
        let size = b.len();
        let start = usize::try_from(offset).ok().filter(|&o| o <= size);
        start
            .and_then(|s| Some(s..s.checked_add(len).filter(|&e| e <= size)?))
            .map(|r| &mut b[r])
            .ok_or_else(|| format!("{} ({size} bytes)", at.misfit()))
    }
}

impl Target for Plain {
    fn place(&mut self, id: u32, size: u64, addr: u32) -> Result<u32, String> {
        self.bufs.insert(id, vec![0; size as usize]);
        Ok(addr)
    }
    fn write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<(), String> {
        let len = bytes.len();
        self.slice(Span { id, offset, len })?.copy_from_slice(bytes);
        Ok(())
    }
    fn inspect(&mut self, at: Span, f: &mut dyn FnMut(&[u8])) -> Result<(), String> {
        f(self.slice(at)?);
        Ok(())
    }
    fn free(&mut self, id: u32) {
        self.bufs.remove(&id);
    }
    fn run(&mut self, _: &Run<'_>) -> Result<Option<Outcome>, String> {
        Ok(None)
    }
}
