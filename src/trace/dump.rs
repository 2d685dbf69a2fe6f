//! The stable text of a trace (`rknpu trace dump`): every chunk, and each task's list
//! decoded as it stands when the task is submitted.

use super::{Chunk, Contents, Trace, fnv1a64};
use crate::regcmd::{self, RegCmd};
use crate::submit::BufferTask;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;

/// Contents recorded so far, by buffer: `(offset, bytes)` in file order.
type Recorded<'a> = BTreeMap<u32, Vec<(u64, &'a [u8])>>;

/// Work units (recorded contents chunks looked at, entries decoded) a dump may spend on
/// decoding task lists, per 8-byte word of recorded contents: with
/// [`DUMP_DECODE_BASE`], this bounds the text of every trace to a multiple of its size
/// (a submission of many tasks naming one large list would otherwise print that list
/// once per task). Lists beyond the budget print a line saying so.
pub const DUMP_DECODE_PER_WORD: u64 = 4;

/// Work units every dump may spend on decoding, whatever the trace's size.
pub const DUMP_DECODE_BASE: u64 = 1 << 16;

/// Stable text of a trace: the header, every chunk, and each task's decoded list as it
/// stands when the task is submitted ([`write_dump`] into a string).
pub fn dump(t: &Trace) -> String {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail, and every line is UTF-8.
    let _ = write_dump(t, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Writes the text of [`dump`] to `w` chunk by chunk, so a large trace is never held as
/// one string. Decoding task lists spends at most [`DUMP_DECODE_PER_WORD`] units per
/// recorded word plus [`DUMP_DECODE_BASE`]; the text is linear in the trace's size.
pub fn write_dump(t: &Trace, w: &mut dyn io::Write) -> io::Result<()> {
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
    w.write_all(s.as_bytes())?;
    let words: u64 = t
        .chunks
        .iter()
        .map(|c| match c {
            Chunk::Data {
                contents: Contents::Bytes(b),
                ..
            } => b.len() as u64 / 8,
            _ => 0,
        })
        .sum();
    let mut budget = DUMP_DECODE_BASE.saturating_add(words.saturating_mul(DUMP_DECODE_PER_WORD));
    // Contents as they stand, for decoding each task's list (bounded by the file: only
    // recorded bytes are kept, at their offsets).
    let mut data: Recorded = BTreeMap::new();
    for c in &t.chunks {
        s.clear();
        chunk_text(&mut s, c, &mut data, &mut budget);
        w.write_all(s.as_bytes())?;
    }
    Ok(())
}

fn describe(c: &Contents) -> String {
    match c {
        Contents::Bytes(b) => format!("{} bytes, digest {:#018x}", b.len(), fnv1a64(b)),
        Contents::Digest { len, digest, seed } => {
            format!("{len} bytes redacted, digest {digest:#018x}, seed {seed}")
        }
    }
}

/// The text of one chunk; contents chunks are also recorded in `data`.
fn chunk_text<'a>(s: &mut String, c: &'a Chunk, data: &mut Recorded<'a>, budget: &mut u64) {
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
        Chunk::Submit(sub) => {
            let _ = writeln!(
                s,
                "submit {}: flags {:#x}, core mask {:#x}, timeout {} ms, ranges {:?}, {} task(s)",
                sub.id,
                sub.flags,
                sub.core_mask,
                sub.timeout_ms,
                sub.ranges,
                sub.tasks.len()
            );
            tasks_text(s, &sub.tasks, data, budget);
            Ok(())
        }
        Chunk::Done(d) => writeln!(
            s,
            "done {}: {}, errno {}, task counter {}, {} ns, statuses {:x?}",
            d.id,
            if d.ok { "ok" } else { "failed" },
            d.errno,
            d.task_counter,
            d.elapsed_ns,
            d.statuses
        ),
        Chunk::Free { id } => {
            // Its contents are gone: a list named after this is not in the trace.
            data.remove(id);
            writeln!(s, "free buffer {id}")
        }
        Chunk::Note(n) => writeln!(s, "note: {n}"),
        Chunk::Unknown { kind, len } => writeln!(
            s,
            "unknown chunk {}: {len} bytes skipped",
            super::read::show(kind)
        ),
    };
}

/// One line per task of a submission, each followed by its decoded list.
fn tasks_text(s: &mut String, tasks: &[BufferTask], data: &Recorded<'_>, budget: &mut u64) {
    for (i, t) in tasks.iter().enumerate() {
        let _ = writeln!(
            s,
            "  task {i}: buffer {} + {:#x}, {} body entries, int_mask {:#x}, enable {:#x}",
            t.buffer, t.task.offset, t.task.regcfg_amount, t.task.int_mask, t.task.enable
        );
        if *budget == 0 {
            let _ = writeln!(
                s,
                "    (list not decoded: the dump's decoding budget, {DUMP_DECODE_PER_WORD} units per recorded word + {DUMP_DECODE_BASE}, is spent)"
            );
            continue;
        }
        match recorded_words(data, t, budget) {
            Some(w) if (w.len() as u64) <= *budget => {
                *budget -= w.len() as u64;
                for line in regcmd::decode(&w).to_text(None).lines() {
                    let _ = writeln!(s, "    {line}");
                }
            }
            Some(w) => {
                *budget = 0;
                let _ = writeln!(
                    s,
                    "    (list of {} entries not decoded: the dump's decoding budget, {DUMP_DECODE_PER_WORD} units per recorded word + {DUMP_DECODE_BASE}, is spent)",
                    w.len()
                );
            }
            None if *budget == 0 => {
                let _ = writeln!(
                    s,
                    "    (list not decoded: the dump's decoding budget, {DUMP_DECODE_PER_WORD} units per recorded word + {DUMP_DECODE_BASE}, is spent)"
                );
            }
            None => {
                let _ = writeln!(s, "    (its list is not in the trace)");
            }
        }
    }
}

/// A task's list from the latest recorded contents that hold all of it; each contents
/// chunk looked at costs one unit of `budget` (none: the search stops).
fn recorded_words(data: &Recorded<'_>, t: &BufferTask, budget: &mut u64) -> Option<Vec<RegCmd>> {
    let len = usize::try_from(t.task.list_bytes()).ok()?;
    data.get(&t.buffer)?.iter().rev().find_map(|&(offset, b)| {
        *budget = budget.checked_sub(1)?;
        let start = usize::try_from((t.task.offset as u64).checked_sub(offset)?).ok()?;
        let bytes = b.get(start..start.checked_add(len)?)?;
        regcmd::words_from_le_bytes(bytes).ok()
    })
}
