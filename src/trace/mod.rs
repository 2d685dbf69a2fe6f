//! Traces: a versioned, chunked, little-endian record of what a program asked of the NPU
//! (docs/trace-format.md is the specification). This module reads and writes the
//! format, records devices ([`Recorder`], which [`crate::device`] calls), builds traces
//! from other tools' files ([`import_raw`], [`import_capture`]) and prints them
//! ([`dump()`]); a reader never panics and never allocates more than its input holds.
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

mod capture;
mod dump;
mod import;
mod json;
mod read;
mod record;
mod spans;
mod write;

pub use capture::{MAX_GATHERED_BYTES, import_capture};
pub use dump::{DUMP_DECODE_BASE, DUMP_DECODE_PER_WORD, dump, write_dump};
pub use import::{ImportError, import_raw};
pub use read::ChunkReader;
pub use record::{DoneRecord, MemorySink, Recorder, SubmitRecord};

use crate::submit::BufferTask;
use std::fmt;

/// The file's first eight bytes.
pub const MAGIC: &[u8; 8] = b"RKNPUTRC";

/// The format version this library writes: 2, which added buffer lifetimes
/// ([`Chunk::Free`]).
pub const VERSION: u16 = 2;

/// The oldest format version this library reads (1: no [`Chunk::Free`]; a replay takes
/// a buffer created over a live one's addresses to mean that one was freed).
pub const OLDEST_VERSION: u16 = 1;

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
    /// A header of the current [`VERSION`].
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
#[non_exhaustive]
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
    Submit(Submission),
    /// `DONE`: how a submission completed.
    Done(Completion),
    /// `FREE` (version 2): the buffer was freed; no later chunk names it, and its device
    /// addresses may be given to a buffer created after this chunk.
    Free {
        /// Buffer id.
        id: u32,
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

/// How a submission completed, as a trace records it ([`Chunk::Done`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Submission id.
    pub id: u32,
    /// Completed.
    pub ok: bool,
    /// errno, 0 on success.
    pub errno: i32,
    /// Tasks completed.
    pub task_counter: u32,
    /// Nanoseconds from commit to completion.
    pub elapsed_ns: u64,
    /// Per-task interrupt status.
    pub statuses: Vec<u32>,
}

/// A submission as a trace records it ([`Chunk::Submit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// Submission id.
    pub id: u32,
    /// Submit flags.
    pub flags: u32,
    /// Core mask.
    pub core_mask: u32,
    /// Timeout in milliseconds.
    pub timeout_ms: u32,
    /// Per-core task ranges `(start, count)`.
    pub ranges: Vec<(u32, u32)>,
    /// Tasks, each with the id of the buffer holding its list.
    pub tasks: Vec<BufferTask>,
}

impl Submission {
    /// The submit flags of a submission this library builds: the vendor driver's
    /// `RKNPU_JOB_PC | RKNPU_JOB_PINGPONG` (PC mode, required; the task ping-pong).
    pub const PC_PINGPONG: u32 = 0x5;

    /// A submission `id` of `tasks` in PC mode on one core (`core_mask` 1, 2 or 4; any
    /// other mask means core 0), with the 500 ms timeout the library submits with.
    pub fn one_core(id: u32, core_mask: u32, tasks: Vec<BufferTask>) -> Self {
        Submission {
            id,
            flags: Self::PC_PINGPONG,
            core_mask: if matches!(core_mask, 1 | 2 | 4) {
                core_mask
            } else {
                1
            },
            timeout_ms: 500,
            ranges: vec![(0, tasks.len() as u32)],
            tasks,
        }
    }
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
    fnv1a64_continue(FNV1A64_BASIS, bytes)
}

/// The `len` bytes a non-zero `seed` stands for in redacted contents: the splitmix64
/// stream from `seed`, each output little-endian (docs/trace-format.md). It holds all
/// `len` bytes: [`Seeded`] gives the same stream piece by piece.
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    Seeded::new(seed).fill(&mut out);
    out
}

/// The splitmix64 stream of seeded contents, generated piece by piece so that a reader
/// of large redacted contents holds one piece at a time.
///
/// ```
/// use rknpu_driver::trace::{Seeded, seeded_bytes};
///
/// let mut s = Seeded::new(7);
/// let (mut a, mut b) = ([0u8; 16], [0u8; 5]);
/// s.fill(&mut a);
/// s.fill(&mut b);
/// assert_eq!([&a[..], &b[..]].concat(), seeded_bytes(7, 21));
/// ```
#[derive(Clone, Debug)]
pub struct Seeded {
    state: u64,
}

impl Seeded {
    /// The stream from `seed`.
    pub fn new(seed: u64) -> Seeded {
        Seeded { state: seed }
    }

    /// Fills `out` with the next bytes of the stream. Pieces continue one another when
    /// every piece but the last is a multiple of 8 bytes long (a shorter one drops the
    /// rest of its last word, as the end of the contents does).
    pub fn fill(&mut self, out: &mut [u8]) {
        for word in out.chunks_mut(8) {
            self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let b = (z ^ (z >> 31)).to_le_bytes();
            word.copy_from_slice(&b[..word.len()]);
        }
    }
}

/// FNV-1a 64 continued over `bytes` from the digest `h` of what came before
/// ([`fnv1a64`] starts from the offset basis).
pub fn fnv1a64_continue(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// FNV-1a 64's offset basis: the digest of no bytes.
pub const FNV1A64_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
pub(crate) mod tests;
