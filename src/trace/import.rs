//! Building traces from what other tools leave behind: raw pieces (the inputs of
//! `rknpu sim run`) here, and the capture layout of board recordings in `capture.rs`.

use super::record::{buffer_spans, relocations_in};
use super::spans::Spans;
use super::{Chunk, Contents, Header, Submission, Trace};
use crate::regcmd::{self, BlockMask, RegCmd, TAIL_ENTRIES};
use crate::submit::{BufferTask, TaskDesc, irq};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::PathBuf;

/// Why a folder could not be imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError {
    /// The file or folder at fault.
    pub path: PathBuf,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.what)
    }
}

impl std::error::Error for ImportError {}

/// A buffer being assembled: id, address, bytes.
pub(super) struct Placed {
    pub(super) id: u32,
    pub(super) addr: u32,
    pub(super) bytes: Vec<u8>,
}

/// Chunks for `bufs` (creation and contents) and the relocations of the words in
/// `regcmd_ids`.
pub(super) fn buffer_chunks(bufs: &[Placed], regcmd_ids: &[u32]) -> Vec<Chunk> {
    let placed: Vec<_> = bufs
        .iter()
        .map(|b| (b.id, b.addr, b.bytes.len() as u64))
        .collect();
    let spans = buffer_spans(&placed);
    let regcmd_ids: HashSet<u32> = regcmd_ids.iter().copied().collect();
    let mut chunks = Vec::new();
    for b in bufs {
        chunks.push(Chunk::Buffer {
            id: b.id,
            flags: 0,
            size: b.bytes.len() as u64,
            dma_addr: b.addr,
        });
    }
    for b in bufs {
        chunks.push(Chunk::Data {
            id: b.id,
            offset: 0,
            contents: Contents::Bytes(b.bytes.clone()),
        });
        if regcmd_ids.contains(&b.id) {
            chunks.extend(relocations_in(b.id, &b.bytes, &placed, &spans));
        }
    }
    chunks
}

/// A trace of one submission built from the inputs `rknpu sim run` takes: the program at
/// `regcmd_addr` with its first task's body length (the PC follows its chain), buffers
/// at addresses, and the contents expected after the run (`expect`, each inside a loaded
/// buffer or a buffer of its own), which replay compares.
pub fn import_raw(
    regcmd: &[u8],
    regcmd_addr: u32,
    task_words: u32,
    loads: &[(u32, Vec<u8>)],
    expect: &[(u32, Vec<u8>)],
) -> Trace {
    let mut bufs: Vec<Placed> = std::iter::once(&(regcmd_addr, regcmd.to_vec()))
        .chain(loads)
        .enumerate()
        .map(|(i, (addr, bytes))| Placed {
            id: i as u32,
            addr: *addr,
            bytes: bytes.clone(),
        })
        .collect();
    let mut outputs = Vec::new();
    // Look-ups in O(log n): the loaded buffers, then the buffers made for earlier outputs
    // (by address).
    let loaded = Spans::new(
        bufs.iter()
            .map(|b| (b.addr as u64, b.addr as u64 + b.bytes.len() as u64)),
    );
    let mut made: BTreeMap<u32, usize> = BTreeMap::new();
    for (addr, bytes) in expect {
        let (lo, hi) = (*addr as u64, *addr as u64 + bytes.len() as u64);
        let earlier = made
            .range(..=*addr)
            .next_back()
            .map(|(_, &i)| i)
            .filter(|&i| hi <= bufs[i].addr as u64 + bufs[i].bytes.len() as u64);
        let (id, offset) = match loaded.find(lo, hi).or(earlier) {
            Some(i) => (bufs[i].id, (*addr - bufs[i].addr) as u64),
            None => {
                let id = bufs.len() as u32;
                made.entry(*addr).or_insert(bufs.len());
                bufs.push(Placed {
                    id,
                    addr: *addr,
                    bytes: vec![0; bytes.len()],
                });
                (id, 0)
            }
        };
        outputs.push(Chunk::Output {
            id,
            submit: 1,
            offset,
            contents: Contents::Bytes(bytes.clone()),
        });
    }
    let mut chunks = buffer_chunks(&bufs, &[0]);
    // Buffers that exist only to receive an output start zeroed: no contents chunk.
    let fresh = 1 + loads.len() as u32..;
    chunks.retain(|c| !matches!(c, Chunk::Data { id, .. } if fresh.contains(id)));
    let words = regcmd::words_from_le_bytes(&regcmd[..regcmd.len() / 8 * 8]).unwrap_or_default();
    let int_mask = int_mask_for(&words, 0, task_words as usize);
    let task = BufferTask {
        buffer: 0,
        task: TaskDesc {
            offset: 0,
            regcfg_amount: task_words,
            int_mask,
            enable: 0,
        },
    };
    chunks.push(Chunk::Submit(Submission::one_core(1, 1, vec![task])));
    chunks.extend(outputs);
    Trace {
        header: Header::new("RK3588", 0, "imported", false),
        chunks,
    }
}

/// The completion mask of the task at `start` of `body` entries: the PPU pair when its
/// op-enable starts the PPU, else the DPU pair.
pub(super) fn int_mask_for(words: &[RegCmd], start: usize, body: usize) -> u32 {
    let end = (start + body + TAIL_ENTRIES).min(words.len());
    let enable = words
        .get(start..end)
        .map(regcmd::decode)
        .and_then(|d| d.tasks.first().and_then(|t| t.enable));
    match enable {
        Some(m) if m.0 & BlockMask::PPU.0 != 0 => irq::PPU,
        _ => irq::DPU,
    }
}
