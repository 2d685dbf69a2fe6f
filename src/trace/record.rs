//! Recording: a [`Recorder`] turns what a device does into trace chunks, streamed to a
//! sink as they happen. [`crate::device::Device`] drives it (see
//! [`crate::device::Device::start_recording`] and `RKNPU_TRACE`); it works the same over
//! every backend because it sees buffers, contents and submissions, not ioctls.

use super::spans::Spans;
use super::{Chunk, Completion, Contents, Header, Submission, fnv1a64};
use crate::regcmd::{self, EntryKind, RegCmd};
use crate::submit::BufferTask;
use std::collections::BTreeMap;
use std::io::Write;

/// The PC register that holds a chained task's list address (docs/hardware/registers.md#pc-chain).
const PC_BASE_ADDRESS: u16 = 0x0010;

/// A submission, as the device describes it to the recorder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitRecord {
    /// Submit flags.
    pub flags: u32,
    /// Core mask (vendor bits; 0 when the kernel picks).
    pub core_mask: u32,
    /// Timeout in milliseconds.
    pub timeout_ms: u32,
    /// Per-core task ranges `(start, count)`, in core order.
    pub ranges: Vec<(u32, u32)>,
    /// The tasks, each `buffer` the GEM handle of the buffer holding its list.
    pub tasks: Vec<BufferTask>,
    /// Handles of the buffers the job declares it writes.
    pub writes: Vec<u32>,
}

/// How a submission ended, as the device describes it to the recorder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoneRecord {
    /// Completed.
    pub ok: bool,
    /// errno, 0 on success.
    pub errno: i32,
    /// Tasks completed.
    pub task_counter: u32,
    /// Nanoseconds from commit to completion (0 when unknown).
    pub elapsed_ns: u64,
    /// Per-task interrupt status.
    pub statuses: Vec<u32>,
}

/// A recording sink in memory: clones share one buffer, so a program can hand one to
/// [`crate::device::Device::start_recording`] and read the trace back from another.
///
/// ```
/// use rknpu_driver::device::Device;
/// use rknpu_driver::trace::{MemorySink, Trace};
///
/// let dev = Device::open_spec("emu")?;
/// let sink = MemorySink::default();
/// dev.start_recording(Box::new(sink.clone()))?;
/// dev.stop_recording()?;
/// assert!(Trace::from_bytes(&sink.bytes())?.chunks.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemorySink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl MemorySink {
    /// A copy of everything written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Write for MemorySink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What the trace knows of a live buffer.
#[derive(Debug)]
struct Buf {
    id: u32,
    dma: u32,
    size: u64,
    /// Digest of the contents as a replay would have them; `None` while all zero.
    known: Option<u64>,
}

impl Buf {
    /// Whether `bytes` (of digest `digest`) differ from what the trace knows.
    fn differs(&self, bytes: &[u8], digest: u64) -> bool {
        match self.known {
            Some(d) => d != digest,
            None => bytes.iter().any(|&b| b != 0),
        }
    }
}

/// Writes a trace as a device works. Chunks go to the sink as they happen, so a trace
/// survives a program that dies mid-run up to its last completed submission.
pub struct Recorder {
    sink: Box<dyn Write + Send>,
    bufs: BTreeMap<u32, Buf>,
    next_buffer: u32,
    next_submit: u32,
    redact_outputs: bool,
    error: Option<std::io::Error>,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("buffers", &self.bufs.len())
            .field("submits", &self.next_submit)
            .field("redact_outputs", &self.redact_outputs)
            .field("error", &self.error)
            .finish()
    }
}

impl Recorder {
    /// A recorder writing to `sink`, starting with the magic and `header`.
    pub fn new(mut sink: Box<dyn Write + Send>, header: &Header) -> std::io::Result<Recorder> {
        sink.write_all(&header.start_bytes())?;
        Ok(Recorder {
            sink,
            bufs: BTreeMap::new(),
            next_buffer: 0,
            next_submit: 1,
            redact_outputs: false,
            error: None,
            scratch: Vec::new(),
        })
    }

    /// Records outputs as digests instead of bytes (smaller traces; replay still compares).
    pub fn redact_outputs(&mut self, on: bool) {
        self.redact_outputs = on;
    }

    /// The first write error, if one happened (recording stops at it).
    pub fn error(&self) -> Option<&std::io::Error> {
        self.error.as_ref()
    }

    /// Flushes the sink; returns the first error of the recording.
    pub fn finish(&mut self) -> std::io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.sink.flush()
    }

    fn emit(&mut self, c: &Chunk) {
        if self.error.is_some() {
            return;
        }
        self.scratch.clear();
        c.write_to(&mut self.scratch);
        if let Err(e) = self.sink.write_all(&self.scratch) {
            self.error = Some(e);
        }
    }

    /// A buffer was created (`flags` as the driver took them).
    pub fn buffer_created(&mut self, handle: u32, flags: u32, size: u64, dma_addr: u32) {
        let id = self.next_buffer;
        self.next_buffer += 1;
        self.bufs.insert(
            handle,
            Buf {
                id,
                dma: dma_addr,
                size,
                known: None,
            },
        );
        self.emit(&Chunk::Buffer {
            id,
            flags,
            size,
            dma_addr,
        });
    }

    /// A buffer was freed: records its end of life (`FREE`), after which its handle and
    /// its device addresses may be reused for a new buffer. A handle the recorder does
    /// not know (not traced, or freed already) records nothing.
    pub fn buffer_freed(&mut self, handle: u32) {
        if let Some(b) = self.bufs.remove(&handle) {
            self.emit(&Chunk::Free { id: b.id });
        }
    }

    /// Handles of the buffers being recorded.
    pub fn handles(&self) -> Vec<u32> {
        self.bufs.keys().copied().collect()
    }

    /// A submission is about to start: records every buffer whose contents changed since
    /// the trace last knew them (`contents` reads a buffer by handle), the relocations of
    /// the regcmd buffers among them, and the submission. Returns its id.
    pub fn submit(
        &mut self,
        s: &SubmitRecord,
        contents: &mut dyn FnMut(u32) -> Option<Vec<u8>>,
    ) -> u32 {
        let id = self.next_submit;
        self.next_submit += 1;
        // A set: a job of many tasks and buffers costs one look-up per buffer.
        let regcmd_handles: std::collections::HashSet<u32> =
            s.tasks.iter().map(|t| t.buffer).collect();
        let mut placed = None;
        for handle in self.handles() {
            let Some(bytes) = contents(handle) else {
                continue;
            };
            let digest = fnv1a64(&bytes);
            let buf = &self.bufs[&handle];
            if !buf.differs(&bytes, digest) {
                continue;
            }
            let buf_id = buf.id;
            let relocs = if regcmd_handles.contains(&handle) {
                // The buffers and their look-up, built once per submission.
                let (placed, spans) = placed.get_or_insert_with(|| {
                    let p: Vec<_> = self.bufs.values().map(|b| (b.id, b.dma, b.size)).collect();
                    let spans = buffer_spans(&p);
                    (p, spans)
                });
                relocations_in(buf_id, &bytes, placed, spans)
            } else {
                Vec::new()
            };
            if let Some(b) = self.bufs.get_mut(&handle) {
                b.known = Some(digest);
            }
            self.emit(&Chunk::Data {
                id: buf_id,
                offset: 0,
                contents: Contents::Bytes(bytes),
            });
            for r in relocs {
                self.emit(&r);
            }
        }
        let tasks = s
            .tasks
            .iter()
            .map(|t| BufferTask {
                buffer: self.bufs.get(&t.buffer).map_or(u32::MAX, |b| b.id),
                task: t.task,
            })
            .collect();
        self.emit(&Chunk::Submit(Submission {
            id,
            flags: s.flags,
            core_mask: s.core_mask,
            timeout_ms: s.timeout_ms,
            ranges: s.ranges.clone(),
            tasks,
        }));
        id
    }

    /// Submission `id` ended: records its completion, then the contents of every buffer
    /// it declared it writes and of every other buffer that changed.
    pub fn done(
        &mut self,
        id: u32,
        d: &DoneRecord,
        writes: &[u32],
        contents: &mut dyn FnMut(u32) -> Option<Vec<u8>>,
    ) {
        self.emit(&Chunk::Done(Completion {
            id,
            ok: d.ok,
            errno: d.errno,
            task_counter: d.task_counter,
            elapsed_ns: d.elapsed_ns,
            statuses: d.statuses.clone(),
        }));
        let writes: std::collections::HashSet<u32> = writes.iter().copied().collect();
        for handle in self.handles() {
            let Some(bytes) = contents(handle) else {
                continue;
            };
            let digest = fnv1a64(&bytes);
            let buf = &self.bufs[&handle];
            if !buf.differs(&bytes, digest) && !writes.contains(&handle) {
                continue;
            }
            let buf_id = buf.id;
            if let Some(b) = self.bufs.get_mut(&handle) {
                b.known = Some(digest);
            }
            let contents = if self.redact_outputs {
                Contents::Digest {
                    len: bytes.len() as u64,
                    digest,
                    seed: 0,
                }
            } else {
                Contents::Bytes(bytes)
            };
            self.emit(&Chunk::Output {
                id: buf_id,
                submit: id,
                offset: 0,
                contents,
            });
        }
        if self.error.is_none()
            && let Err(e) = self.sink.flush()
        {
            self.error = Some(e);
        }
    }

    /// A free-text note.
    pub fn note(&mut self, text: &str) {
        self.emit(&Chunk::Note(text.into()));
    }
}

/// The look-up of [`relocations_in`] over `bufs` (a buffer of size 0 holds its address).
pub(super) fn buffer_spans(bufs: &[(u32, u32, u64)]) -> Spans {
    Spans::new(
        bufs.iter()
            .map(|&(_, addr, size)| (addr as u64, addr as u64 + size.max(1))),
    )
}

/// The relocations of regcmd buffer `buffer` holding `bytes`: every address register
/// (and chain address) whose value falls inside one of `bufs`, given as `(id, device
/// address, size)`, with the look-up over `bufs` built once by the caller
/// ([`buffer_spans`]) so that many regcmd buffers cost one sort. A value inside several
/// buffers goes to the one [`Spans::find`] picks.
pub(super) fn relocations_in(
    buffer: u32,
    bytes: &[u8],
    bufs: &[(u32, u32, u64)],
    spans: &Spans,
) -> Vec<Chunk> {
    let words = regcmd::words_from_le_bytes(&bytes[..bytes.len() / 8 * 8]).unwrap_or_default();
    address_entries(&words)
        .into_iter()
        .filter_map(|(entry, value)| {
            let (target, addr, _) = bufs[spans.find(value as u64, value as u64 + 1)?];
            Some(Chunk::Reloc {
                buffer,
                entry: entry as u64,
                target,
                offset: value - addr,
            })
        })
        .collect()
}

/// The entries of `words` whose value is a device address: writes of DMA-address
/// registers and chain addresses (`PC.BASE_ADDRESS`), as `(index, value)`.
pub(super) fn address_entries(words: &[RegCmd]) -> Vec<(usize, u32)> {
    regcmd::decode(words)
        .entries
        .iter()
        .filter(|e| match e.kind {
            EntryKind::Write(info) => info.dma_address || info.offset == PC_BASE_ADDRESS,
            _ => false,
        })
        .map(|e| (e.index, e.word.value()))
        .collect()
}
