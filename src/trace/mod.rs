//! Traces: a versioned, chunked, little-endian record of what a program asked of the NPU
//! (docs/trace-format.md is the specification). This module reads and writes the
//! format, records devices ([`Recorder`], which [`crate::device`] calls), builds traces
//! from other tools' files ([`import_raw`], [`import_capture`]) and prints them
//! ([`dump`]); a reader never panics and never allocates more than its input holds.
//! Replaying a trace is [`crate::replay`]'s: this module imports only `regs`, `regcmd`
//! and `submit`, so that the device can call the recorder without an import cycle.
//!
//! ```
//! use rknpu_driver::trace::{Chunk, Header, Trace};
//!
//! let t = Trace {
//!     header: Header::new("RK3588", 0, "rknpu 0.9.8", true),
//!     chunks: vec![Chunk::Note("hello".into())],
//! };
//! let bytes = t.to_bytes();
//! assert_eq!(Trace::from_bytes(&bytes)?, t);
//! assert!(Trace::from_bytes(&bytes[..bytes.len() - 1]).is_err());
//! # Ok::<(), rknpu_driver::trace::TraceError>(())
//! ```

mod dump;
mod import;
mod record;

pub use dump::dump;
pub use import::{ImportError, import_capture, import_raw};
pub use record::{DoneRecord, MemorySink, Recorder, SubmitRecord};

use crate::submit::{BufferTask, TaskDesc};
use std::fmt;

/// The file's first eight bytes.
pub const MAGIC: &[u8; 8] = b"RKNPUTRC";

/// The format version this library writes and reads.
pub const VERSION: u16 = 1;

/// Who recorded the trace (`HEAD`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Format version.
    pub version: u16,
    /// SoC, e.g. `RK3588`.
    pub soc: String,
    /// 0 vendor `rknpu`, 1 `rocket`.
    pub interface: u8,
    /// Driver name and version, e.g. `rknpu 0.9.8`.
    pub driver: String,
    /// Recorded on the emulated kernel.
    pub emulated: bool,
}

impl Header {
    /// A version-1 header.
    pub fn new(soc: &str, interface: u8, driver: &str, emulated: bool) -> Header {
        Header {
            version: VERSION,
            soc: soc.into(),
            interface,
            driver: driver.into(),
            emulated,
        }
    }
}

/// Buffer contents: the bytes, or a digest where they are redacted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Contents {
    /// The bytes.
    Bytes(Vec<u8>),
    /// Their length, FNV-1a 64 digest and the seed that generated them (0 when none).
    Digest {
        /// Bytes covered.
        len: u64,
        /// FNV-1a 64 of the bytes.
        digest: u64,
        /// Generator seed, 0 when none.
        seed: u64,
    },
}

/// One chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chunk {
    /// `BUFC`: a buffer was created.
    Buffer {
        /// Buffer id.
        id: u32,
        /// Allocation flags.
        flags: u32,
        /// Bytes.
        size: u64,
        /// Device address.
        dma_addr: u32,
    },
    /// `BUFD`: contents the program put in a buffer; they hold for every submission
    /// after this chunk in file order.
    Data {
        /// Buffer id.
        id: u32,
        /// Byte offset in the buffer.
        offset: u64,
        /// The contents.
        contents: Contents,
    },
    /// `OUTD`: contents read back after a submission completed; replay compares them.
    Output {
        /// Buffer id.
        id: u32,
        /// The submission after which they were read.
        submit: u32,
        /// Byte offset in the buffer.
        offset: u64,
        /// The contents.
        contents: Contents,
    },
    /// `RELO`: a regcmd word holds a buffer's address.
    Reloc {
        /// The regcmd buffer.
        buffer: u32,
        /// Index of the word (8-byte entries).
        entry: u64,
        /// The buffer it points into.
        target: u32,
        /// Byte offset in that buffer.
        offset: u32,
    },
    /// `SUBM`: a submission.
    Submit {
        /// Submission id.
        id: u32,
        /// Submit flags.
        flags: u32,
        /// Core mask.
        core_mask: u32,
        /// Timeout in milliseconds.
        timeout_ms: u32,
        /// Per-core task ranges `(start, count)`.
        ranges: Vec<(u32, u32)>,
        /// Tasks, each with the id of the buffer holding its list.
        tasks: Vec<BufferTask>,
    },
    /// `DONE`: how a submission completed.
    Done {
        /// Submission id.
        id: u32,
        /// Completed.
        ok: bool,
        /// errno, 0 on success.
        errno: i32,
        /// Tasks completed.
        task_counter: u32,
        /// Nanoseconds from commit to completion.
        elapsed_ns: u64,
        /// Per-task interrupt status.
        statuses: Vec<u32>,
    },
    /// `NOTE`: free text.
    Note(String),
    /// A chunk type this reader does not know, skipped.
    Unknown {
        /// Its type.
        kind: [u8; 4],
        /// Its payload length.
        len: u64,
    },
}

/// A trace: header and chunks in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The `HEAD` chunk.
    pub header: Header,
    /// Every other chunk.
    pub chunks: Vec<Chunk>,
}

/// Why bytes are not a trace: what and at which byte offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// Byte offset in the file.
    pub offset: u64,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trace byte {}: {}", self.offset, self.what)
    }
}

impl std::error::Error for TraceError {}

/// FNV-1a 64 of `bytes` (the digest of redacted contents).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The `len` bytes a non-zero `seed` stands for in redacted contents: the splitmix64
/// stream from `seed`, each output little-endian (docs/trace-format.md).
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len.div_ceil(8) * 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

impl Chunk {
    /// Appends the chunk's encoding to `out` (nothing for [`Chunk::Unknown`], whose
    /// payload was not kept). A file is [`Header::start_bytes`] followed by chunks, so a
    /// recorder can stream them.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let mut w = Writer(std::mem::take(out));
        self.put(&mut w);
        *out = w.0;
    }

    fn put(&self, w: &mut Writer) {
        let mut p = Writer(Vec::new());
        let kind: &[u8; 4] = match self {
            Chunk::Buffer {
                id,
                flags,
                size,
                dma_addr,
            } => {
                p.u32(*id);
                p.u32(*flags);
                p.u64(*size);
                p.u32(*dma_addr);
                b"BUFC"
            }
            Chunk::Data {
                id,
                offset,
                contents,
            } => {
                p.u32(*id);
                p.u64(*offset);
                p.contents(contents);
                b"BUFD"
            }
            Chunk::Output {
                id,
                submit,
                offset,
                contents,
            } => {
                p.u32(*id);
                p.u32(*submit);
                p.u64(*offset);
                p.contents(contents);
                b"OUTD"
            }
            Chunk::Reloc {
                buffer,
                entry,
                target,
                offset,
            } => {
                p.u32(*buffer);
                p.u64(*entry);
                p.u32(*target);
                p.u32(*offset);
                b"RELO"
            }
            Chunk::Submit {
                id,
                flags,
                core_mask,
                timeout_ms,
                ranges,
                tasks,
            } => {
                p.u32(*id);
                p.u32(*flags);
                p.u32(*core_mask);
                p.u32(*timeout_ms);
                p.u32(ranges.len() as u32);
                for (s, n) in ranges {
                    p.u32(*s);
                    p.u32(*n);
                }
                p.u32(tasks.len() as u32);
                for t in tasks {
                    p.u32(t.buffer);
                    p.u32(t.task.offset);
                    p.u32(t.task.regcfg_amount);
                    p.u32(t.task.int_mask);
                    p.u32(t.task.enable);
                }
                b"SUBM"
            }
            Chunk::Done {
                id,
                ok,
                errno,
                task_counter,
                elapsed_ns,
                statuses,
            } => {
                p.u32(*id);
                p.u8(u8::from(*ok));
                p.u32(*errno as u32);
                p.u32(*task_counter);
                p.u64(*elapsed_ns);
                p.u32(statuses.len() as u32);
                for s in statuses {
                    p.u32(*s);
                }
                b"DONE"
            }
            Chunk::Note(s) => {
                p.str(s);
                b"NOTE"
            }
            // Unknown chunks carry no payload of their own: they are not written back.
            // Unknown chunks carry no payload of their own: they are not written back.
            Chunk::Unknown { .. } => return,
        };
        w.chunk(kind, p);
    }
}

impl Header {
    /// The first bytes of a file: the magic and this `HEAD` chunk.
    pub fn start_bytes(&self) -> Vec<u8> {
        let mut w = Writer(MAGIC.to_vec());
        let mut p = Writer(Vec::new());
        p.u16(self.version);
        p.str(&self.soc);
        p.u8(self.interface);
        p.str(&self.driver);
        p.u8(u8::from(self.emulated));
        w.chunk(b"HEAD", p);
        w.0
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn contents(&mut self, c: &Contents) {
        match c {
            Contents::Bytes(b) => {
                self.u8(0);
                self.u64(b.len() as u64);
                self.0.extend_from_slice(b);
            }
            Contents::Digest { len, digest, seed } => {
                self.u8(1);
                self.u64(*len);
                self.u64(*digest);
                self.u64(*seed);
            }
        }
    }
    fn chunk(&mut self, kind: &[u8; 4], payload: Writer) {
        self.0.extend_from_slice(kind);
        self.u64(payload.0.len() as u64);
        self.0.extend_from_slice(&payload.0);
    }
}

/// A bounds-checked cursor over one payload.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    base: u64,
}

impl<'a> Reader<'a> {
    fn err(&self, what: impl Into<String>) -> TraceError {
        TraceError {
            offset: self.base + self.at as u64,
            what: what.into(),
        }
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], TraceError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| {
            self.err(format!(
                "{what}: needs {n} bytes, {} remain",
                self.bytes.len() - self.at
            ))
        })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, TraceError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, TraceError> {
        Ok(u16::from_le_bytes(
            self.take(2, what)?.try_into().unwrap_or_default(),
        ))
    }
    fn u32(&mut self, what: &str) -> Result<u32, TraceError> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64, TraceError> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().unwrap_or_default(),
        ))
    }
    fn str(&mut self, what: &str) -> Result<String, TraceError> {
        let n = self.u32(what)? as usize;
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| self.err(format!("{what}: not UTF-8")))
    }
    fn contents(&mut self) -> Result<Contents, TraceError> {
        Ok(match self.u8("contents kind")? {
            0 => {
                let n = self.u64("length")?;
                let n = self.count(n, 1, "contents")?;
                Contents::Bytes(self.take(n, "contents")?.to_vec())
            }
            1 => Contents::Digest {
                len: self.u64("length")?,
                digest: self.u64("digest")?,
                seed: self.u64("seed")?,
            },
            k => return Err(self.err(format!("contents kind {k} (0 bytes, 1 digest)"))),
        })
    }
    /// A count of items of `size` bytes each, checked against what remains.
    fn count(&mut self, n: u64, size: usize, what: &str) -> Result<usize, TraceError> {
        let left = (self.bytes.len() - self.at) as u64;
        if n.saturating_mul(size as u64) > left {
            return Err(self.err(format!(
                "{what}: {n} items of {size} bytes, {left} bytes remain"
            )));
        }
        Ok(n as usize)
    }
}

impl Trace {
    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.header.start_bytes();
        for c in &self.chunks {
            c.write_to(&mut out);
        }
        out
    }

    /// Reads a trace. Every length is checked before use; unknown chunk types are kept as
    /// [`Chunk::Unknown`] and skipped.
    pub fn from_bytes(bytes: &[u8]) -> Result<Trace, TraceError> {
        let mut file = Reader {
            bytes,
            at: 0,
            base: 0,
        };
        if file.take(8, "magic")? != MAGIC {
            return Err(TraceError {
                offset: 0,
                what: "not a trace (no RKNPUTRC magic)".into(),
            });
        }
        let mut header = None;
        let mut chunks = Vec::new();
        while file.at < bytes.len() {
            let start = file.at;
            let kind: [u8; 4] = file.take(4, "chunk type")?.try_into().unwrap_or_default();
            let len = file.u64("chunk length")?;
            let left = (bytes.len() - file.at) as u64;
            if len > left {
                return Err(file.err(format!(
                    "chunk {} of {len} bytes: truncated ({left} remain)",
                    show(&kind)
                )));
            }
            let payload = file.take(len as usize, "chunk payload")?;
            let mut p = Reader {
                bytes: payload,
                at: 0,
                base: file.at as u64 - len,
            };
            if header.is_none() {
                if &kind != b"HEAD" {
                    return Err(TraceError {
                        offset: start as u64,
                        what: format!("the first chunk is {}, not HEAD", show(&kind)),
                    });
                }
                let version = p.u16("version")?;
                if version != VERSION {
                    return Err(p.err(format!(
                        "format version {version}; this reader knows {VERSION}"
                    )));
                }
                header = Some(Header {
                    version,
                    soc: p.str("soc")?,
                    interface: p.u8("interface")?,
                    driver: p.str("driver")?,
                    emulated: p.u8("emulated")? != 0,
                });
                continue;
            }
            chunks.push(match &kind {
                b"BUFC" => Chunk::Buffer {
                    id: p.u32("id")?,
                    flags: p.u32("flags")?,
                    size: p.u64("size")?,
                    dma_addr: p.u32("dma_addr")?,
                },
                b"BUFD" => Chunk::Data {
                    id: p.u32("id")?,
                    offset: p.u64("offset")?,
                    contents: p.contents()?,
                },
                b"OUTD" => Chunk::Output {
                    id: p.u32("id")?,
                    submit: p.u32("submit")?,
                    offset: p.u64("offset")?,
                    contents: p.contents()?,
                },
                b"RELO" => Chunk::Reloc {
                    buffer: p.u32("buffer")?,
                    entry: p.u64("entry")?,
                    target: p.u32("target")?,
                    offset: p.u32("offset")?,
                },
                b"SUBM" => {
                    let (id, flags, core_mask, timeout_ms) = (
                        p.u32("id")?,
                        p.u32("flags")?,
                        p.u32("core_mask")?,
                        p.u32("timeout")?,
                    );
                    let n = p.u32("ranges")? as u64;
                    let n = p.count(n, 8, "ranges")?;
                    let mut ranges = Vec::with_capacity(n);
                    for _ in 0..n {
                        ranges.push((p.u32("range start")?, p.u32("range count")?));
                    }
                    let n = p.u32("tasks")? as u64;
                    let n = p.count(n, 20, "tasks")?;
                    let mut tasks = Vec::with_capacity(n);
                    for _ in 0..n {
                        tasks.push(BufferTask {
                            buffer: p.u32("task buffer")?,
                            task: TaskDesc {
                                offset: p.u32("task offset")?,
                                regcfg_amount: p.u32("task regcfg_amount")?,
                                int_mask: p.u32("task int_mask")?,
                                enable: p.u32("task enable")?,
                            },
                        });
                    }
                    Chunk::Submit {
                        id,
                        flags,
                        core_mask,
                        timeout_ms,
                        ranges,
                        tasks,
                    }
                }
                b"DONE" => {
                    let (id, ok, errno) = (p.u32("id")?, p.u8("ok")? != 0, p.u32("errno")? as i32);
                    let (task_counter, elapsed_ns) = (p.u32("task_counter")?, p.u64("elapsed_ns")?);
                    let n = p.u32("statuses")? as u64;
                    let n = p.count(n, 4, "statuses")?;
                    let mut statuses = Vec::with_capacity(n);
                    for _ in 0..n {
                        statuses.push(p.u32("status")?);
                    }
                    Chunk::Done {
                        id,
                        ok,
                        errno,
                        task_counter,
                        elapsed_ns,
                        statuses,
                    }
                }
                b"NOTE" => Chunk::Note(p.str("note")?),
                _ => Chunk::Unknown { kind, len },
            });
        }
        let header = header.ok_or(TraceError {
            offset: bytes.len() as u64,
            what: "no HEAD chunk".into(),
        })?;
        Ok(Trace { header, chunks })
    }
}

/// A chunk type for messages.
fn show(kind: &[u8; 4]) -> String {
    kind.iter()
        .map(|&b| {
            if b.is_ascii_graphic() {
                (b as char).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
