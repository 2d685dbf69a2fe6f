//! Building traces from raw pieces, printing them, and replaying them on the simulator.

use super::{Chunk, Contents, Header, Trace, TraceTask, fnv1a64};
use crate::regcmd::{self, RegCmd, TAIL_ENTRIES};
use crate::sim::{Kick, Simulator};
use std::fmt::Write as _;

/// A trace of one submission built from the inputs `rknpu sim run` takes: the program at
/// `regcmd_addr` with its first task's body length, buffers at addresses, and the
/// contents expected after the run (`expect`, compared by [`replay_model`]).
pub fn import_raw(
    regcmd: &[u8],
    regcmd_addr: u32,
    task_words: u32,
    loads: &[(u32, Vec<u8>)],
    expect: &[(u32, Vec<u8>)],
) -> Trace {
    let mut chunks = Vec::new();
    let mut id = 0u32;
    for (addr, bytes) in std::iter::once(&(regcmd_addr, regcmd.to_vec())).chain(loads) {
        chunks.push(Chunk::Buffer {
            id,
            flags: 0,
            size: bytes.len() as u64,
            dma_addr: *addr,
        });
        chunks.push(Chunk::Data {
            id,
            when: 0,
            offset: 0,
            contents: Contents::Bytes(bytes.clone()),
        });
        id += 1;
    }
    for (addr, bytes) in expect {
        // An expected output inside a loaded buffer belongs to it; else it is a new buffer.
        let owner = chunks.iter().find_map(|c| match c {
            Chunk::Buffer {
                id, size, dma_addr, ..
            } if *addr >= *dma_addr
                && (*addr as u64 + bytes.len() as u64) <= *dma_addr as u64 + size =>
            {
                Some((*id, (*addr - *dma_addr) as u64))
            }
            _ => None,
        });
        let (buf, offset) = owner.unwrap_or_else(|| {
            chunks.push(Chunk::Buffer {
                id,
                flags: 0,
                size: bytes.len() as u64,
                dma_addr: *addr,
            });
            id += 1;
            (id - 1, 0)
        });
        chunks.push(Chunk::Data {
            id: buf,
            when: 1,
            offset,
            contents: Contents::Bytes(bytes.clone()),
        });
    }
    chunks.push(Chunk::Submit {
        id: 1,
        flags: 0x5,
        core_mask: 1,
        timeout_ms: 500,
        ranges: vec![(0, 1)],
        tasks: vec![TraceTask {
            regcmd_buffer: 0,
            offset: 0,
            regcfg_amount: task_words,
            int_mask: crate::sim::irq::DPU,
            enable: 0,
        }],
    });
    Trace {
        header: Header::new("RK3588", 0, "imported", false),
        chunks,
    }
}

/// What replaying a trace found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Submissions replayed.
    pub submits: usize,
    /// Recorded contents compared.
    pub compared: usize,
    /// Where the replay differs from the recording (empty on a match).
    pub mismatches: Vec<String>,
    /// The simulator's warnings.
    pub lints: Vec<String>,
}

impl ReplayReport {
    /// Whether everything compared matched.
    pub fn is_match(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// Where each buffer lives: `(id, device address, size)`.
fn buffers(t: &Trace) -> Vec<(u32, u32, u64)> {
    t.chunks
        .iter()
        .filter_map(|c| match c {
            Chunk::Buffer {
                id, size, dma_addr, ..
            } => Some((*id, *dma_addr, *size)),
            _ => None,
        })
        .collect()
}

/// The cores a vendor core mask runs, in the order of the trace's ranges.
fn cores_of(mask: u32, ranges: usize) -> Vec<usize> {
    match mask {
        2 => vec![1],
        4 => vec![2],
        3 => vec![0, 1],
        7 => vec![0, 1, 2],
        _ => vec![0],
    }
    .into_iter()
    .take(ranges)
    .collect()
}

/// Replays a trace on the simulator ("model" mode): places every buffer with its
/// recorded initial contents, runs each submission as the vendor kernel would kick it,
/// and compares the contents recorded after each submission (bytes exactly; redacted
/// contents by digest) and each recorded completion.
pub fn replay_model(t: &Trace) -> ReplayReport {
    let mut report = ReplayReport::default();
    let bufs = buffers(t);
    let mut sim = Simulator::new();
    for &(id, addr, size) in &bufs {
        if let Err(e) = sim.memory_mut().map_zeroed(addr, size as usize) {
            report.mismatches.push(format!("buffer {id}: {e}"));
        }
    }
    let place = |id: u32| bufs.iter().find(|b| b.0 == id).map(|b| b.1 as u64);
    // Initial contents first, wherever they stand in the file.
    for c in &t.chunks {
        if let Chunk::Data {
            id,
            when: 0,
            offset,
            contents: Contents::Bytes(bytes),
        } = c
        {
            let at = place(*id).map(|a| a + offset);
            match at.and_then(|a| sim.memory_mut().write(a, bytes.len())) {
                Some(dst) => dst.copy_from_slice(bytes),
                None => report
                    .mismatches
                    .push(format!("buffer {id}: contents do not fit it")),
            }
        }
    }
    // Then each submission in order, followed by the contents recorded after it.
    for c in &t.chunks {
        let Chunk::Submit {
            id,
            core_mask,
            ranges,
            tasks,
            ..
        } = c
        else {
            continue;
        };
        report.submits += 1;
        for (&core, &(start, count)) in cores_of(*core_mask, ranges.len()).iter().zip(ranges) {
            let (s0, n) = (start as usize, count as usize);
            if n == 0 || s0 + n > tasks.len() {
                report.mismatches.push(format!(
                    "submit {id}: range {start}+{count} outside its tasks"
                ));
                continue;
            }
            let (first, last) = (&tasks[s0], &tasks[s0 + n - 1]);
            let Some(base) = place(first.regcmd_buffer) else {
                report
                    .mismatches
                    .push(format!("submit {id}: no buffer {}", first.regcmd_buffer));
                continue;
            };
            let kick = Kick {
                core,
                regcmd_addr: (base + first.offset as u64) as u32,
                regcfg_amount: first.regcfg_amount,
                task_number: Some(count),
                int_mask: last.int_mask,
            };
            match sim.kick(&kick) {
                Ok(run) => {
                    report.lints.extend(run.lints.iter().map(|l| l.to_string()));
                    if let Some(s) = run.stall {
                        report
                            .mismatches
                            .push(format!("submit {id}: stalls at {}: {}", s.at, s.why));
                    }
                }
                Err(e) => report.mismatches.push(format!("submit {id}: {e}")),
            }
        }
        for d in &t.chunks {
            let Chunk::Data {
                id: buf,
                when,
                offset,
                contents,
            } = d
            else {
                continue;
            };
            if when != id {
                continue;
            }
            report.compared += 1;
            let len = match contents {
                Contents::Bytes(b) => b.len(),
                Contents::Digest { len, .. } => *len as usize,
            };
            let Some(got) = place(*buf).and_then(|a| sim.memory().read(a + offset, len)) else {
                report
                    .mismatches
                    .push(format!("buffer {buf}: recorded contents do not fit it"));
                continue;
            };
            match contents {
                Contents::Bytes(want) => {
                    if let Some(i) = (0..len).find(|&i| got[i] != want[i]) {
                        report.mismatches.push(format!(
                            "buffer {buf} after submit {when}: byte {} is {:#04x}, recorded {:#04x}",
                            offset + i as u64,
                            got[i],
                            want[i]
                        ));
                    }
                }
                Contents::Digest { digest, .. } => {
                    if fnv1a64(got) != *digest {
                        report.mismatches.push(format!(
                            "buffer {buf} after submit {when}: digest differs from the recording"
                        ));
                    }
                }
            }
        }
    }
    report
}

/// Replays the trace file at `path` on the simulator and panics with the report unless
/// it matches: the one-line check for a user's CI.
///
/// ```no_run
/// rknpu_driver::trace::assert_replays("fixtures/traces/int8.rknputrace");
/// ```
pub fn assert_replays(path: &str) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let t = Trace::from_bytes(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    let r = replay_model(&t);
    assert!(r.is_match(), "{path} does not replay: {:#?}", r.mismatches);
}

/// Stable text of a trace: the header, every chunk, and each task's decoded list.
pub fn dump(t: &Trace) -> String {
    let mut s = String::new();
    let h = &t.header;
    let _ = writeln!(
        s,
        "trace v{} soc {} interface {} driver {:?}{}",
        h.version,
        h.soc,
        if h.interface == 1 { "rocket" } else { "vendor" },
        h.driver,
        if h.emulated { " (emulated)" } else { "" }
    );
    let bufs = buffers(t);
    for c in &t.chunks {
        match c {
            Chunk::Buffer {
                id,
                flags,
                size,
                dma_addr,
            } => {
                let _ = writeln!(
                    s,
                    "buffer {id}: {size} bytes at {dma_addr:#010x}, flags {flags:#x}"
                );
            }
            Chunk::Data {
                id,
                when,
                offset,
                contents,
            } => {
                let what = match contents {
                    Contents::Bytes(b) => format!("{} bytes, digest {:#018x}", b.len(), fnv1a64(b)),
                    Contents::Digest { len, digest, seed } => {
                        format!("{len} bytes redacted, digest {digest:#018x}, seed {seed}")
                    }
                };
                let phase = if *when == 0 {
                    "initial".to_string()
                } else {
                    format!("after submit {when}")
                };
                let _ = writeln!(
                    s,
                    "contents of buffer {id} at +{offset:#x} ({phase}): {what}"
                );
            }
            Chunk::Reloc {
                buffer,
                entry,
                target,
                offset,
            } => {
                let _ = writeln!(
                    s,
                    "reloc: buffer {buffer} entry {entry} -> buffer {target} + {offset:#x}"
                );
            }
            Chunk::Submit {
                id,
                flags,
                core_mask,
                timeout_ms,
                ranges,
                tasks,
            } => {
                let _ = writeln!(
                    s,
                    "submit {id}: flags {flags:#x}, core mask {core_mask:#x}, timeout {timeout_ms} ms, ranges {ranges:?}, {} task(s)",
                    tasks.len()
                );
                for (i, task) in tasks.iter().enumerate() {
                    let _ = writeln!(
                        s,
                        "  task {i}: buffer {} + {:#x}, {} body entries, int_mask {:#x}",
                        task.regcmd_buffer, task.offset, task.regcfg_amount, task.int_mask
                    );
                    let words = initial_words(t, &bufs, task);
                    match words {
                        Some(w) => {
                            for line in regcmd::decode(&w).to_text(None).lines() {
                                let _ = writeln!(s, "    {line}");
                            }
                        }
                        None => {
                            let _ = writeln!(s, "    (its list is not in the trace)");
                        }
                    }
                }
            }
            Chunk::Done {
                id,
                ok,
                errno,
                task_counter,
                elapsed_ns,
                statuses,
            } => {
                let _ = writeln!(
                    s,
                    "done {id}: {}, errno {errno}, task counter {task_counter}, {elapsed_ns} ns, statuses {statuses:x?}",
                    if *ok { "ok" } else { "failed" }
                );
            }
            Chunk::Note(n) => {
                let _ = writeln!(s, "note: {n}");
            }
            Chunk::Unknown { kind, len } => {
                let _ = writeln!(
                    s,
                    "unknown chunk {}: {len} bytes skipped",
                    super::show(kind)
                );
            }
        }
    }
    s
}

/// A task's list (body and tail) from the initial contents of its buffer.
fn initial_words(t: &Trace, bufs: &[(u32, u32, u64)], task: &TraceTask) -> Option<Vec<RegCmd>> {
    bufs.iter().find(|b| b.0 == task.regcmd_buffer)?;
    let len = (task.regcfg_amount as usize + TAIL_ENTRIES) * 8;
    t.chunks.iter().find_map(|c| match c {
        Chunk::Data {
            id,
            when: 0,
            offset,
            contents: Contents::Bytes(b),
        } if *id == task.regcmd_buffer => {
            let start = (task.offset as u64).checked_sub(*offset)? as usize;
            let bytes = b.get(start..start.checked_add(len)?)?;
            regcmd::words_from_le_bytes(bytes).ok()
        }
        _ => None,
    })
}
