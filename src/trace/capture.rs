//! Importing a capture folder: the layout of board recordings (a folder of regcmd files,
//! buffers named by address, and a `meta.json`).

use super::import::{ImportError, Placed, buffer_chunks, int_mask_for};
use super::json::Json;
use super::spans::Spans;
use super::{Chunk, Header, Submission, Trace};
use crate::regcmd::{self, TAIL_ENTRIES};
use crate::submit::{BufferTask, TaskDesc};
use std::path::Path;

/// The buffer id of a task list not yet given a buffer.
const LOOSE: u32 = u32::MAX;

/// Most bytes the regcmd buffers gathered around loose task lists may hold together
/// (1 GiB): lists within 64 KiB of each other share a buffer, so a capture of small
/// lists far apart could otherwise name gigabytes of gaps. Beyond it the import fails.
pub const MAX_GATHERED_BYTES: u64 = 1 << 30;

/// One task file of a capture, with what `meta.json` says of it.
struct TaskFile {
    words: Vec<u8>,
    addr: Option<u32>,
    amount: Option<u32>,
    int_mask: Option<u32>,
    enable: Option<u32>,
}

/// The folder being imported: its sorted file names.
struct Folder<'a> {
    dir: &'a Path,
    names: Vec<String>,
}

impl Folder<'_> {
    fn err(&self, name: &str, what: String) -> ImportError {
        ImportError {
            path: self.dir.join(name),
            what,
        }
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, ImportError> {
        std::fs::read(self.dir.join(name)).map_err(|e| self.err(name, e.to_string()))
    }

    /// `meta.json`, or `null` when there is none.
    fn meta(&self) -> Result<Json, ImportError> {
        if !self.names.iter().any(|n| n == "meta.json") {
            return Ok(Json::Null);
        }
        let text = String::from_utf8(self.read("meta.json")?)
            .map_err(|_| self.err("meta.json", "not UTF-8".into()))?;
        Json::parse(&text).map_err(|e| self.err("meta.json", e))
    }

    /// Every task file in name order, with the descriptor of the same index.
    fn task_files(&self, meta: &Json) -> Result<Vec<TaskFile>, ImportError> {
        let descriptors = meta.get("task_descriptors").items();
        let task_names: Vec<&String> = self
            .names
            .iter()
            .filter(|n| {
                *n == "regcmd.bin" || (n.starts_with("task-") && n.ends_with(".regcmd.bin"))
            })
            .collect();
        if task_names.is_empty() {
            return Err(ImportError {
                path: self.dir.to_path_buf(),
                what: "no regcmd.bin or task-NN.regcmd.bin".into(),
            });
        }
        let mut files = Vec::new();
        for (i, name) in task_names.iter().enumerate() {
            let words = self.read(name)?;
            if words.len() % 8 != 0 || words.len() < TAIL_ENTRIES * 8 {
                return Err(self.err(
                    name,
                    format!("{} bytes: not a task list of 8-byte entries", words.len()),
                ));
            }
            let d = descriptors.get(i).unwrap_or(&Json::Null);
            let field = |key: &str| -> Result<Option<u32>, ImportError> {
                d.get(key)
                    .number()
                    .map(|v| {
                        u32::try_from(v).map_err(|_| {
                            self.err(
                                "meta.json",
                                format!("task descriptor {i}: {key} {v:#x} does not fit 32 bits"),
                            )
                        })
                    })
                    .transpose()
            };
            files.push(TaskFile {
                words,
                addr: field("regcmd_addr")?,
                amount: field("regcfg_amount")?,
                int_mask: field("int_mask")?,
                enable: field("enable_mask")?,
            });
        }
        Ok(files)
    }

    /// The buffers named by address (`buf-XXXXXXXX.bin`); a note for each that is not.
    fn buffers(&self, notes: &mut Vec<String>) -> Result<Vec<Placed>, ImportError> {
        let mut bufs: Vec<Placed> = Vec::new();
        for name in &self.names {
            let Some(stem) = name
                .strip_prefix("buf-")
                .and_then(|s| s.strip_suffix(".bin"))
            else {
                continue;
            };
            match u32::from_str_radix(stem, 16) {
                Ok(addr) if stem.len() == 8 => bufs.push(Placed {
                    id: bufs.len() as u32,
                    addr,
                    bytes: self.read(name)?,
                }),
                _ => notes.push(format!("{name}: its address is not known; not placed")),
            }
        }
        Ok(bufs)
    }
}

/// Builds a trace from a capture folder: `regcmd.bin` or `task-NN.regcmd.bin` (each
/// `regcfg_amount + 4` entries), `buf-XXXXXXXX.bin` (a buffer at that address), and
/// `meta.json` (task descriptors with `regcmd_addr`, `regcfg_amount`, `int_mask`,
/// `enable_mask`; `submit.core_mask`; the runtime). Task lists that lie inside a
/// captured buffer point into it; the others are gathered into a regcmd buffer of their
/// own at their recorded addresses (chained tasks follow their chain when no address is
/// recorded). Each chain is one submission, as the PC stops at a tail that names no next
/// task. Captures do not say whether buffers were saved before or after the run,
/// so the trace records them as inputs and no outputs.
pub fn import_capture(dir: &Path) -> Result<Trace, ImportError> {
    let listing = std::fs::read_dir(dir).map_err(|e| ImportError {
        path: dir.to_path_buf(),
        what: e.to_string(),
    })?;
    let mut names: Vec<String> = listing
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let folder = Folder { dir, names };
    let meta = folder.meta()?;
    let files = folder.task_files(&meta)?;
    let mut notes = Vec::new();
    let mut bufs = folder.buffers(&mut notes)?;
    let Placement {
        mut tasks,
        chained,
        loose,
    } = place_tasks(&files, &bufs, &mut notes);
    let mut regcmd_ids: Vec<u32> = tasks
        .iter()
        .map(|t| t.buffer)
        .filter(|&b| b != LOOSE)
        .collect();
    gather_loose(loose, &mut tasks, &mut bufs, &mut regcmd_ids).map_err(|what| ImportError {
        path: dir.to_path_buf(),
        what,
    })?;
    let runtime = meta.get("runtime");
    let driver = runtime
        .get("rknpu_driver")
        .string()
        .or(runtime.get("librknnrt").string())
        .unwrap_or("unknown");
    let mut chunks = vec![Chunk::Note(format!(
        "imported from the capture {}{}",
        dir.file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        meta.get("source_repo")
            .string()
            .map_or(String::new(), |r| format!(" of {r}"))
    ))];
    chunks.extend(notes.into_iter().map(Chunk::Note));
    chunks.push(Chunk::Note(
        "captures do not say when buffers were saved: they are inputs here, and no output is recorded".into(),
    ));
    chunks.extend(buffer_chunks(&bufs, &regcmd_ids));
    let core_mask = meta
        .get("submit")
        .get("core_mask")
        .number()
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(1);
    chunks.extend(submissions(&tasks, &chained, core_mask));
    Ok(Trace {
        header: Header::new("RK3588", 0, driver, false),
        chunks,
    })
}

/// Where the task lists of a capture live.
struct Placement<'f> {
    /// The tasks, loose ones with buffer [`LOOSE`] and their address as offset.
    tasks: Vec<BufferTask>,
    /// Whether each task's tail chains to another task.
    chained: Vec<bool>,
    /// The lists inside no captured buffer, by address.
    loose: Vec<(u32, &'f [u8])>,
}

/// Where each task list lives: inside a captured buffer (a note when its file differs
/// from the buffer), or at its own address.
fn place_tasks<'f>(
    files: &'f [TaskFile],
    bufs: &[Placed],
    notes: &mut Vec<String>,
) -> Placement<'f> {
    let mut loose: Vec<(u32, &[u8])> = Vec::new();
    let mut tasks = Vec::new();
    let mut chained = Vec::new();
    let mut next_addr: Option<u32> = None;
    let mut prev_end = 0x1000_0000u32;
    let spans = Spans::new(
        bufs.iter()
            .map(|b| (b.addr as u64, b.addr as u64 + b.bytes.len() as u64)),
    );
    for (i, f) in files.iter().enumerate() {
        let words = regcmd::words_from_le_bytes(&f.words).unwrap_or_default();
        let amount = f.amount.unwrap_or((words.len() - TAIL_ENTRIES) as u32);
        let addr = f.addr.or(next_addr).unwrap_or(
            prev_end
                .checked_next_multiple_of(64)
                .unwrap_or(prev_end & !63),
        );
        let d = regcmd::decode(&words);
        next_addr = d
            .tasks
            .first()
            .and_then(|t| t.next_address)
            .map(|a| a & !0xf);
        chained.push(next_addr.is_some());
        prev_end = addr.saturating_add(u32::try_from(f.words.len()).unwrap_or(u32::MAX));
        let enable = f
            .enable
            .or(d.tasks.first().and_then(|t| t.enable.map(|m| m.0)))
            .unwrap_or(0);
        let int_mask = f
            .int_mask
            .unwrap_or_else(|| int_mask_for(&words, 0, amount as usize));
        let inside = spans
            .find(addr as u64, addr as u64 + f.words.len() as u64)
            .map(|k| &bufs[k]);
        let (buffer, offset) = match inside {
            Some(b) => {
                let at = (addr - b.addr) as usize;
                if b.bytes[at..at + f.words.len()] != f.words[..] {
                    notes.push(format!(
                        "task {i}: its file differs from buffer {:#010x} at +{at:#x}; the buffer is what the NPU reads",
                        b.addr
                    ));
                }
                (b.id, at as u32)
            }
            None => {
                loose.push((addr, &f.words));
                (LOOSE, addr)
            }
        };
        tasks.push(BufferTask {
            buffer,
            task: TaskDesc {
                offset,
                regcfg_amount: amount,
                int_mask,
                enable,
            },
        });
    }
    Placement {
        tasks,
        chained,
        loose,
    }
}

/// Gathers the loose lists into regcmd buffers at their recorded addresses: lists within
/// 64 KiB of each other share a page-aligned buffer. Their tasks then point into it. The
/// buffers hold at most [`MAX_GATHERED_BYTES`] together (an error names the total
/// otherwise), checked before any is allocated; the work is linear-logarithmic.
fn gather_loose(
    mut loose: Vec<(u32, &[u8])>,
    tasks: &mut [BufferTask],
    bufs: &mut Vec<Placed>,
    regcmd_ids: &mut Vec<u32>,
) -> Result<(), String> {
    loose.sort_by_key(|l| l.0);
    // (base, end, first list, lists), by base; groups do not overlap.
    let mut groups: Vec<(u32, u64, usize, usize)> = Vec::new();
    for (k, (addr, w)) in loose.iter().enumerate() {
        let end = *addr as u64 + w.len() as u64;
        match groups.last_mut() {
            Some(g) if (*addr as u64) <= g.1 + 0x1_0000 => {
                g.1 = g.1.max(end);
                g.3 += 1;
            }
            _ => groups.push((addr & !0xfff, end, k, 1)),
        }
    }
    let size = |g: &(u32, u64, usize, usize)| (g.1 - g.0 as u64).next_multiple_of(4096);
    let total: u64 = groups.iter().map(size).sum();
    if total > MAX_GATHERED_BYTES {
        return Err(format!(
            "the task lists outside every captured buffer span {total} bytes of regcmd buffers; at most {MAX_GATHERED_BYTES} are gathered"
        ));
    }
    let first_id = bufs.len() as u32;
    for (gi, g) in groups.iter().enumerate() {
        let mut bytes = vec![0u8; size(g) as usize];
        for (addr, w) in &loose[g.2..g.2 + g.3] {
            let at = (addr - g.0) as usize;
            bytes[at..at + w.len()].copy_from_slice(w);
        }
        bufs.push(Placed {
            id: first_id + gi as u32,
            addr: g.0,
            bytes,
        });
        regcmd_ids.push(first_id + gi as u32);
    }
    // Each loose task into the group holding its address (the last group starting at or
    // before it).
    for t in tasks.iter_mut().filter(|t| t.buffer == LOOSE) {
        let gi = groups.partition_point(|g| g.0 <= t.task.offset);
        if let Some(gi) = gi
            .checked_sub(1)
            .filter(|&gi| (t.task.offset as u64) < groups[gi].1)
        {
            t.buffer = first_id + gi as u32;
            t.task.offset -= groups[gi].0;
        }
    }
    Ok(())
}

/// One submission per chain: the PC stops at a tail that names no next task.
fn submissions(tasks: &[BufferTask], chained: &[bool], core_mask: u32) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut id = 1;
    let mut start = 0;
    for end in 1..=tasks.len() {
        if end < tasks.len() && chained[end - 1] {
            continue;
        }
        let run = tasks[start..end].to_vec();
        out.push(Chunk::Submit(Submission::one_core(id, core_mask, run)));
        id += 1;
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loose_task(addr: u32) -> BufferTask {
        BufferTask {
            buffer: LOOSE,
            task: TaskDesc {
                offset: addr,
                regcfg_amount: 0,
                int_mask: 0,
                enable: 0,
            },
        }
    }

    #[test]
    fn gathering_30k_loose_lists_is_linear() {
        // Lists 128 KiB apart: a buffer each. Every group searched every list and every
        // task: 9 x 10^8 steps each.
        let list = [7u8; 32];
        let addrs: Vec<u32> = (0..30_000u32).map(|i| 0x1000 + i * 0x2_0000).collect();
        let loose = addrs.iter().map(|&a| (a, &list[..])).collect();
        let mut tasks: Vec<BufferTask> = addrs.iter().map(|&a| loose_task(a)).collect();
        let (mut bufs, mut ids) = (Vec::new(), Vec::new());
        gather_loose(loose, &mut tasks, &mut bufs, &mut ids).unwrap();
        assert_eq!((bufs.len(), ids.len()), (30_000, 30_000));
        assert!(
            tasks
                .iter()
                .all(|t| t.buffer != LOOSE && t.task.offset == 0)
        );
        assert_eq!(tasks[29_999].buffer, 29_999);
        assert_eq!(&bufs[123].bytes[..32], &list);
    }

    #[test]
    fn loose_lists_spanning_too_much_are_refused_before_allocating() {
        // Lists 60 KiB apart share one buffer: 20 000 of them would gather 1.2 GB of gaps.
        let list = [7u8; 32];
        let loose = (0..20_000u32)
            .map(|i| (0x1000 + i * 60 * 1024, &list[..]))
            .collect();
        let (mut bufs, mut ids) = (Vec::new(), Vec::new());
        let e = gather_loose(loose, &mut [], &mut bufs, &mut ids).unwrap_err();
        assert!(e.contains(&format!("at most {MAX_GATHERED_BYTES}")), "{e}");
        assert!(bufs.is_empty());
    }
}
