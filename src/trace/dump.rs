//! The stable text of a trace (`rknpu trace dump`): every chunk, and each task's list
//! decoded as it stands when the task is submitted.

use super::{Chunk, Contents, Trace, fnv1a64};
use crate::regcmd::{self, RegCmd};
use crate::submit::BufferTask;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Contents recorded so far, by buffer: `(offset, bytes)` in file order.
type Recorded<'a> = BTreeMap<u32, Vec<(u64, &'a [u8])>>;

/// Stable text of a trace: the header, every chunk, and each task's decoded list as it
/// stands when the task is submitted.
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
    // Contents as they stand, for decoding each task's list (bounded by the file: only
    // recorded bytes are kept, at their offsets).
    let mut data: Recorded = BTreeMap::new();
    let describe = |c: &Contents| match c {
        Contents::Bytes(b) => format!("{} bytes, digest {:#018x}", b.len(), fnv1a64(b)),
        Contents::Digest { len, digest, seed } => {
            format!("{len} bytes redacted, digest {digest:#018x}, seed {seed}")
        }
    };
    for c in &t.chunks {
        let _ = match c {
            Chunk::Buffer {
                id,
                flags,
                size,
                dma_addr,
            } => writeln!(
                s,
                "buffer {id}: {size} bytes at {dma_addr:#010x}, flags {flags:#x}"
            ),
            Chunk::Data {
                id,
                offset,
                contents,
            } => {
                if let Contents::Bytes(b) = contents {
                    data.entry(*id).or_default().push((*offset, b));
                }
                writeln!(
                    s,
                    "contents of buffer {id} at +{offset:#x}: {}",
                    describe(contents)
                )
            }
            Chunk::Output {
                id,
                submit,
                offset,
                contents,
            } => writeln!(
                s,
                "output of buffer {id} at +{offset:#x} after submit {submit}: {}",
                describe(contents)
            ),
            Chunk::Reloc {
                buffer,
                entry,
                target,
                offset,
            } => writeln!(
                s,
                "reloc: buffer {buffer} entry {entry} -> buffer {target} + {offset:#x}"
            ),
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
                tasks_text(&mut s, tasks, &data);
                Ok(())
            }
            Chunk::Done {
                id,
                ok,
                errno,
                task_counter,
                elapsed_ns,
                statuses,
            } => writeln!(
                s,
                "done {id}: {}, errno {errno}, task counter {task_counter}, {elapsed_ns} ns, statuses {statuses:x?}",
                if *ok { "ok" } else { "failed" }
            ),
            Chunk::Note(n) => writeln!(s, "note: {n}"),
            Chunk::Unknown { kind, len } => writeln!(
                s,
                "unknown chunk {}: {len} bytes skipped",
                super::read::show(kind)
            ),
        };
    }
    s
}

/// One line per task of a submission, each followed by its decoded list.
fn tasks_text(s: &mut String, tasks: &[BufferTask], data: &Recorded<'_>) {
    for (i, t) in tasks.iter().enumerate() {
        let _ = writeln!(
            s,
            "  task {i}: buffer {} + {:#x}, {} body entries, int_mask {:#x}, enable {:#x}",
            t.buffer, t.task.offset, t.task.regcfg_amount, t.task.int_mask, t.task.enable
        );
        match recorded_words(data, t) {
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

/// A task's list from the latest recorded contents that hold all of it.
fn recorded_words(data: &Recorded<'_>, t: &BufferTask) -> Option<Vec<RegCmd>> {
    let len = t.task.list_bytes() as usize;
    data.get(&t.buffer)?.iter().rev().find_map(|&(offset, b)| {
        let start = usize::try_from((t.task.offset as u64).checked_sub(offset)?).ok()?;
        let bytes = b.get(start..start.checked_add(len)?)?;
        regcmd::words_from_le_bytes(bytes).ok()
    })
}
