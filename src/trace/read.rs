//! Reading the format: every length checked before use, every malformed input a
//! [`TraceError`] naming the byte offset.

use super::{
    Chunk, Completion, Contents, Header, MAGIC, OLDEST_VERSION, Submission, Trace, TraceError,
    VERSION,
};
use crate::submit::{BufferTask, TaskDesc};
use std::io::Read;
use std::ops::Range;

/// A bounds-checked cursor over one payload.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    base: u64,
    /// Where the bytes of the contents just read are.
    bytes_at: Option<Range<usize>>,
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
    /// Contents; bytes are left in the payload (an empty [`Contents::Bytes`]) and their
    /// range is kept in `self.bytes_at`, for the caller to move out without a copy.
    fn contents(&mut self) -> Result<Contents, TraceError> {
        Ok(match self.u8("contents kind")? {
            0 => {
                let n = self.u64("length")?;
                let n = self.count(n, 1, "contents")?;
                let start = self.at;
                self.take(n, "contents")?;
                self.bytes_at = Some(start..start + n);
                Contents::Bytes(Vec::new())
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
    /// Reads a trace. Every length is checked before use; unknown chunk types are kept as
    /// [`Chunk::Unknown`] and skipped.
    pub fn from_bytes(bytes: &[u8]) -> Result<Trace, TraceError> {
        Trace::read_from(&mut &bytes[..], bytes.len() as u64)
    }

    /// Reads a trace of `len` bytes from `r` (a file, with its length), one chunk at a
    /// time ([`ChunkReader`]): every length is checked against the bytes that remain of
    /// `len` before anything is reserved, and contents are kept in the buffer they were
    /// read into, so the parsed trace holds at most `len` bytes plus a fixed size per
    /// chunk and reading it never holds the file twice. Reading fewer bytes than `len`
    /// says is an error ("truncated"), as is a read error.
    pub fn read_from(r: &mut dyn Read, len: u64) -> Result<Trace, TraceError> {
        let mut chunks = ChunkReader::new(r, len)?;
        let header = chunks.header().clone();
        let chunks = chunks.by_ref().collect::<Result<Vec<_>, _>>()?;
        Ok(Trace { header, chunks })
    }
}

/// A trace read one chunk at a time from a reader of known length: the header first
/// ([`ChunkReader::new`] reads it), then each chunk as an iterator item, parsed with
/// the checks of [`Trace::from_bytes`]. The first error ends the iteration. Whoever
/// consumes chunks as they come (`crate::replay::replay_stream`) holds one at a time.
///
/// ```
/// use rknpu_driver::trace::{Chunk, ChunkReader, Header, Trace};
///
/// let t = Trace {
///     header: Header::new("RK3588", 0, "rknpu 0.9.8", true),
///     chunks: vec![Chunk::Note("a".into()), Chunk::Free { id: 3 }],
/// };
/// let bytes = t.to_bytes();
/// let mut src = &bytes[..];
/// let mut r = ChunkReader::new(&mut src, bytes.len() as u64)?;
/// assert_eq!(r.header(), &t.header);
/// assert_eq!(r.next(), Some(Ok(Chunk::Note("a".into()))));
/// assert_eq!(r.next(), Some(Ok(Chunk::Free { id: 3 })));
/// assert_eq!(r.next(), None);
/// # Ok::<(), rknpu_driver::trace::TraceError>(())
/// ```
pub struct ChunkReader<'r> {
    r: &'r mut dyn Read,
    len: u64,
    at: u64,
    header: Header,
    failed: bool,
}

impl std::fmt::Debug for ChunkReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkReader")
            .field("len", &self.len)
            .field("at", &self.at)
            .field("header", &self.header)
            .finish()
    }
}

/// A chunk's type, length, offset and payload, as read.
type Raw = ([u8; 4], u64, u64, Vec<u8>);

impl<'r> ChunkReader<'r> {
    /// Reads the magic and the `HEAD` chunk of a trace of `len` bytes from `r`.
    pub fn new(r: &'r mut dyn Read, len: u64) -> Result<ChunkReader<'r>, TraceError> {
        let mut magic = [0u8; 8];
        read_exact(r, &mut magic, 0, "magic")?;
        if &magic != MAGIC {
            return Err(TraceError {
                offset: 0,
                what: "not a trace (no RKNPUTRC magic)".into(),
            });
        }
        let mut at = 8;
        let Some((kind, _, start, payload)) = raw_chunk(r, len, &mut at)? else {
            return Err(TraceError {
                offset: at,
                what: "no HEAD chunk".into(),
            });
        };
        if &kind != b"HEAD" {
            return Err(TraceError {
                offset: start,
                what: format!("the first chunk is {}, not HEAD", show(&kind)),
            });
        }
        let header = read_header(&mut Reader {
            bytes: &payload,
            at: 0,
            base: start + 12,
            bytes_at: None,
        })?;
        Ok(ChunkReader {
            r,
            len,
            at,
            header,
            failed: false,
        })
    }

    /// The trace's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The next chunk after the header, or `None` at the end.
    fn chunk(&mut self) -> Result<Option<Chunk>, TraceError> {
        let Some((kind, n, start, payload)) = raw_chunk(self.r, self.len, &mut self.at)? else {
            return Ok(None);
        };
        let mut p = Reader {
            bytes: &payload,
            at: 0,
            base: start + 12,
            bytes_at: None,
        };
        let mut chunk = read_chunk(kind, n, &mut p)?;
        if let Some(range) = p.bytes_at.take() {
            // The contents stay in the payload's allocation: no copy.
            let mut payload = payload;
            payload.truncate(range.end);
            payload.drain(..range.start);
            if let Chunk::Data { contents, .. } | Chunk::Output { contents, .. } = &mut chunk {
                *contents = Contents::Bytes(payload);
            }
        }
        Ok(Some(chunk))
    }
}

impl Iterator for ChunkReader<'_> {
    type Item = Result<Chunk, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let c = self.chunk();
        self.failed = c.is_err();
        c.transpose()
    }
}

/// The chunk at `*at` of an input of `len` bytes, its length checked against what
/// remains before its payload is reserved; `None` at the end.
fn raw_chunk(r: &mut dyn Read, len: u64, at: &mut u64) -> Result<Option<Raw>, TraceError> {
    if *at >= len {
        return Ok(None);
    }
    let start = *at;
    let mut head = [0u8; 12];
    read_exact(r, &mut head, start, "chunk header")?;
    *at += 12;
    let kind: [u8; 4] = head[..4].try_into().unwrap_or_default();
    let n = u64::from_le_bytes(head[4..].try_into().unwrap_or_default());
    let left = len.saturating_sub(*at);
    if n > left {
        return Err(TraceError {
            offset: *at,
            what: format!(
                "chunk {} of {n} bytes: truncated ({left} remain)",
                show(&kind)
            ),
        });
    }
    let payload = read_payload(r, n, *at)?;
    *at += n;
    Ok(Some((kind, n, start, payload)))
}

/// Fills `buf` from `r`; too few bytes is an error naming `what` at byte `at`.
fn read_exact(r: &mut dyn Read, buf: &mut [u8], at: u64, what: &str) -> Result<(), TraceError> {
    r.read_exact(buf).map_err(|e| TraceError {
        offset: at,
        what: match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                format!("{what}: needs {} bytes, the input ends first", buf.len())
            }
            _ => format!("{what}: {e}"),
        },
    })
}

/// A chunk's payload of `n` bytes (already checked against the input's length), read
/// into an allocation of exactly `n` bytes.
fn read_payload(r: &mut dyn Read, n: u64, at: u64) -> Result<Vec<u8>, TraceError> {
    let too_big = || TraceError {
        offset: at,
        what: format!("chunk payload of {n} bytes: more than this machine can hold"),
    };
    let size = usize::try_from(n).map_err(|_| too_big())?;
    let mut payload = Vec::new();
    payload.try_reserve_exact(size).map_err(|_| too_big())?;
    // Into the reserved capacity, without zeroing it first; `take` keeps the read (and
    // so the allocation) within the payload.
    r.take(n)
        .read_to_end(&mut payload)
        .map_err(|e| TraceError {
            offset: at,
            what: format!("chunk payload: {e}"),
        })?;
    if payload.len() != size {
        return Err(TraceError {
            offset: at + payload.len() as u64,
            what: format!(
                "chunk payload: needs {n} bytes, the input ends after {}",
                payload.len()
            ),
        });
    }
    Ok(payload)
}

/// The `HEAD` payload.
fn read_header(p: &mut Reader<'_>) -> Result<Header, TraceError> {
    let version = p.u16("version")?;
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(p.err(format!(
            "format version {version}; this reader knows {OLDEST_VERSION} to {VERSION}"
        )));
    }
    Ok(Header {
        version,
        soc: p.str("soc")?,
        interface: p.u8("interface")?,
        driver: p.str("driver")?,
        emulated: p.u8("emulated")? != 0,
    })
}

/// Any chunk after `HEAD`; a type this reader does not know is [`Chunk::Unknown`].
fn read_chunk(kind: [u8; 4], len: u64, p: &mut Reader<'_>) -> Result<Chunk, TraceError> {
    Ok(match &kind {
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
        b"SUBM" => read_submit(p)?,
        b"DONE" => read_done(p)?,
        b"FREE" => Chunk::Free { id: p.u32("id")? },
        b"NOTE" => Chunk::Note(p.str("note")?),
        _ => Chunk::Unknown { kind, len },
    })
}

/// The `SUBM` payload.
fn read_submit(p: &mut Reader<'_>) -> Result<Chunk, TraceError> {
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
    Ok(Chunk::Submit(Submission {
        id,
        flags,
        core_mask,
        timeout_ms,
        ranges,
        tasks,
    }))
}

/// The `DONE` payload.
fn read_done(p: &mut Reader<'_>) -> Result<Chunk, TraceError> {
    let (id, ok, errno) = (p.u32("id")?, p.u8("ok")? != 0, p.u32("errno")? as i32);
    let (task_counter, elapsed_ns) = (p.u32("task_counter")?, p.u64("elapsed_ns")?);
    let n = p.u32("statuses")? as u64;
    let n = p.count(n, 4, "statuses")?;
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        statuses.push(p.u32("status")?);
    }
    Ok(Chunk::Done(Completion {
        id,
        ok,
        errno,
        task_counter,
        elapsed_ns,
        statuses,
    }))
}

/// A chunk type for messages.
pub(super) fn show(kind: &[u8; 4]) -> String {
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
