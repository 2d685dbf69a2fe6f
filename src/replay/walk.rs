//! The one walk over a trace's chunks behind every mode.

use super::check::check_tasks;
use super::compare::{compare, output_kind};
use super::contents::write_contents;
use super::model::cores_of;
use super::target::{Outcome, Run, Span, Target};
use super::{MAX_REPLAY_BYTES, MAX_SEEDED_BYTES, ReplayReport, Tolerance};
use crate::regcmd::RegCmd;
use crate::submit::{BufferTask, irq, started_cores};
use crate::trace::{Chunk, ChunkReader, Completion, Contents, Submission, Trace, TraceError};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Where a buffer was recorded and where the target placed it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Placed {
    /// The recorded device address.
    pub recorded: u32,
    /// Where the target put it.
    pub at: u32,
    /// Bytes.
    pub size: u64,
}

/// Replays `t` on `target`; `runs` says whether the target executes, so that recorded
/// completions and outputs can be compared.
pub(super) fn replay_on(
    t: &Trace,
    target: &mut dyn Target,
    tol: Tolerance,
    runs: bool,
) -> ReplayReport {
    let mut w = Walk::new(target, tol, runs, t.header.version);
    for c in &t.chunks {
        w.step(c);
    }
    w.finish()
}

/// [`replay_on`] over chunks as `chunks` reads them, one at a time (none is kept); the
/// first read error ends the replay.
pub(super) fn replay_read(
    chunks: &mut ChunkReader<'_>,
    target: &mut dyn Target,
    tol: Tolerance,
    runs: bool,
) -> Result<ReplayReport, TraceError> {
    let mut w = Walk::new(target, tol, runs, chunks.header().version);
    for c in chunks {
        w.step(&c?);
    }
    Ok(w.finish())
}

/// The walk's state between chunks.
struct Walk<'a> {
    target: &'a mut dyn Target,
    tol: Tolerance,
    /// Whether the target executes (completions and outputs are compared).
    runs: bool,
    rep: ReplayReport,
    /// The live buffers.
    bufs: BTreeMap<u32, Placed>,
    /// Buffers freed: their ids are not created again.
    freed: BTreeSet<u32>,
    /// The live buffers by recorded address (they do not overlap), for version-1 traces.
    by_addr: BTreeMap<u32, u32>,
    /// A version-1 trace has no `FREE`: a buffer created over live ones' recorded
    /// addresses retires them (the kernel gave their addresses again, so they were freed).
    infer_frees: bool,
    /// Bytes of the live buffers.
    total: u64,
    /// Seeded bytes the replay may still generate.
    seeded_left: u64,
    outcomes: BTreeMap<u32, Outcome>,
    /// Each submission's tasks, to find what writes an output.
    submits: BTreeMap<u32, Vec<BufferTask>>,
    /// The submissions whose completion the trace records.
    recorded_done: HashSet<u32>,
}

impl<'a> Walk<'a> {
    fn new(target: &'a mut dyn Target, tol: Tolerance, runs: bool, version: u16) -> Walk<'a> {
        Walk {
            target,
            tol,
            runs,
            rep: ReplayReport::default(),
            bufs: BTreeMap::new(),
            freed: BTreeSet::new(),
            by_addr: BTreeMap::new(),
            infer_frees: version < 2,
            total: 0,
            seeded_left: MAX_SEEDED_BYTES,
            outcomes: BTreeMap::new(),
            submits: BTreeMap::new(),
            recorded_done: HashSet::new(),
        }
    }

    /// Applies one chunk, in file order.
    fn step(&mut self, c: &Chunk) {
        let runs = self.runs;
        match c {
            Chunk::Buffer {
                id, size, dma_addr, ..
            } => self.buffer(*id, *size, *dma_addr),
            Chunk::Data {
                id,
                offset,
                contents,
            } => {
                let (bufs, left) = (&self.bufs, &mut self.seeded_left);
                if let Err(e) = write_contents(self.target, bufs, *id, *offset, contents, left) {
                    self.bad(format!("contents of buffer {id}: {e}"));
                }
            }
            Chunk::Free { id } => self.free(*id),
            Chunk::Reloc {
                buffer,
                entry,
                target: to,
                offset,
            } => {
                if let Err(e) = relocate(self.target, &self.bufs, *buffer, *entry, *to, *offset) {
                    self.bad(format!("reloc buffer {buffer} entry {entry}: {e}"));
                }
            }
            Chunk::Submit(s) => self.submit(s),
            Chunk::Done(Completion {
                id,
                ok,
                task_counter,
                statuses,
                ..
            }) => {
                self.recorded_done.insert(*id);
                if runs {
                    self.done(*id, *ok, *task_counter, statuses);
                }
            }
            Chunk::Output {
                id,
                submit,
                offset,
                contents,
            } if runs => self.output(*id, *submit, *offset, contents),
            _ => {}
        }
    }

    /// The report, once every chunk is applied: a run that failed where the trace
    /// records no completion has nothing to compare, but is worth saying.
    fn finish(mut self) -> ReplayReport {
        for (id, o) in &self.outcomes {
            if !o.ok && !self.recorded_done.contains(id) {
                self.rep.lints.push(format!(
                    "submit {id} does not complete here ({}); the trace records no completion to compare",
                    o.why.as_deref().unwrap_or("no reason given")
                ));
            }
        }
        self.rep
    }

    fn bad(&mut self, m: String) {
        self.rep.mismatches.push(m);
    }

    /// `BUFC`: places the buffer, unless it cannot be.
    fn buffer(&mut self, id: u32, size: u64, dma_addr: u32) {
        if self.bufs.contains_key(&id) || self.freed.contains(&id) {
            return self.bad(format!("buffer {id} is created twice"));
        }
        let Some(end) = (dma_addr as u64)
            .checked_add(size)
            .filter(|&end| end <= 1 << 32)
        else {
            return self.bad(format!(
                "buffer {id}: {size} bytes at {dma_addr:#x} pass the 32-bit address space"
            ));
        };
        if self.infer_frees {
            self.retire_overlapping(id, dma_addr as u64, end.max(dma_addr as u64 + 1));
        }
        if self.total.saturating_add(size) > MAX_REPLAY_BYTES {
            return self.bad(format!(
                "buffer {id}: the trace's live buffers pass the replay limit of {MAX_REPLAY_BYTES} bytes"
            ));
        }
        match self.target.place(id, size, dma_addr) {
            Ok(at) => {
                let placed = Placed {
                    recorded: dma_addr,
                    at,
                    size,
                };
                self.total += size;
                self.bufs.insert(id, placed);
                self.by_addr.insert(dma_addr, id);
            }
            Err(e) => self.bad(e),
        }
    }

    /// `FREE`: the buffer is gone from the target and from the live set.
    fn free(&mut self, id: u32) {
        match self.bufs.remove(&id) {
            Some(p) => {
                self.total -= p.size;
                if self.by_addr.get(&p.recorded) == Some(&id) {
                    self.by_addr.remove(&p.recorded);
                }
                self.freed.insert(id);
                self.target.free(id);
            }
            None if self.freed.contains(&id) => self.bad(format!("buffer {id} is freed twice")),
            // Placing it failed, and that was reported.
            None => {}
        }
    }

    /// Version 1: retires the live buffers whose recorded addresses `[start, end)` of
    /// new buffer `id` overlaps (one look-up per retired buffer: live ones do not overlap).
    fn retire_overlapping(&mut self, id: u32, start: u64, end: u64) {
        let mut gone = Vec::new();
        for (&addr, &old) in self.by_addr.range(..=(end - 1) as u32).rev() {
            let old_end = addr as u64 + self.bufs.get(&old).map_or(0, |p| p.size.max(1));
            if old_end <= start {
                break;
            }
            gone.push(old);
        }
        for old in gone {
            self.rep.lints.push(format!(
                "buffer {old} is taken to be freed: buffer {id} was created over its addresses (a version-1 trace records no frees)"
            ));
            self.free(old);
        }
    }

    /// `SUBM`: checks the submission's shape and its task lists, then runs it.
    fn submit(&mut self, s: &Submission) {
        let Submission {
            id,
            core_mask,
            timeout_ms,
            ref ranges,
            ref tasks,
            ..
        } = *s;
        self.rep.submits += 1;
        self.submits.insert(id, tasks.to_vec());
        let run = match plan(id, core_mask, ranges, tasks, &self.bufs) {
            Ok(addrs) => Run {
                id,
                core_mask,
                timeout_ms,
                ranges,
                tasks,
                addrs,
            },
            Err(e) => return self.bad(e),
        };
        self.rep.tasks += tasks.len();
        check_tasks(self.target, &run, &mut self.rep);
        match self.target.run(&run) {
            Ok(Some(o)) => {
                let lints = o.lints.iter().map(|l| format!("submit {id}: {l}"));
                self.rep.lints.extend(lints);
                self.outcomes.insert(id, o);
            }
            Ok(None) => {}
            Err(e) => self.bad(e),
        }
    }

    /// `DONE`: compares the recorded completion with the replayed one.
    fn done(&mut self, id: u32, ok: bool, task_counter: u32, statuses: &[u32]) {
        let Some(o) = self.outcomes.get(&id) else {
            return self.bad(format!("done {id}: the submission did not run"));
        };
        self.rep.compared += 1;
        let mut found = Vec::new();
        if o.ok != ok {
            let why = o.why.as_deref().unwrap_or("it completed");
            found.push(format!(
                "submit {id}: recorded {}, replayed {} ({why})",
                if ok { "completed" } else { "failed" },
                if o.ok { "completed" } else { "failed" }
            ));
        } else if o.task_counter != task_counter {
            found.push(format!(
                "submit {id}: task counter {} recorded, {} replayed",
                task_counter, o.task_counter
            ));
        }
        // A core's ping-pong group depends on what it ran before, so the status bit
        // within each pair does too: compare as the vendor kernel reads them.
        for (i, (&want, &got)) in statuses.iter().zip(&o.statuses).enumerate() {
            if want != 0 && got != 0 && irq::fuzz(want) != irq::fuzz(got) {
                found.push(format!(
                    "submit {id} task {i}: interrupt status {want:#x} recorded, {got:#x} replayed"
                ));
            }
        }
        self.rep.mismatches.extend(found);
    }

    /// `OUTD`: compares a recorded output with what the buffer holds now (where the
    /// target holds it: no copy).
    fn output(&mut self, id: u32, submit: u32, offset: u64, contents: &Contents) {
        self.rep.compared += 1;
        let len = match contents {
            Contents::Bytes(b) => b.len(),
            Contents::Digest { len, .. } => usize::try_from(*len).unwrap_or(usize::MAX),
        };
        let tasks = self.submits.get(&submit).map_or(&[][..], Vec::as_slice);
        let kind = output_kind(self.target, &self.bufs, tasks, id);
        let tol = self.tol;
        let mut found = None;
        let read = self.target.inspect(Span { id, offset, len }, &mut |got| {
            found = compare(got, contents, kind, tol);
        });
        if let Err(e) = read {
            return self.bad(format!("output of buffer {id}: {e}"));
        }
        if let Some(m) = found {
            self.bad(format!(
                "buffer {id} after submit {submit}, at +{offset:#x}: {m}"
            ));
        }
    }
}

/// Patches one relocated word for the placement, after checking it holds the recorded
/// address it names.
fn relocate(
    target: &mut dyn Target,
    bufs: &BTreeMap<u32, Placed>,
    buffer: u32,
    entry: u64,
    to: u32,
    offset: u32,
) -> Result<(), String> {
    let p = *bufs.get(&to).ok_or(format!("no buffer {to}"))?;
    if offset as u64 >= p.size.max(1) {
        return Err(format!("offset {offset:#x} is outside buffer {to}"));
    }
    let at = entry.checked_mul(8).ok_or("entry out of range")?;
    let b = target.read(buffer, at, 8)?;
    let w = RegCmd(u64::from_le_bytes(b.try_into().unwrap_or_default()));
    let want = p.recorded.wrapping_add(offset);
    if w.value() != want {
        return Err(format!(
            "holds {:#010x}, but buffer {to} + {offset:#x} was recorded at {want:#010x}",
            w.value()
        ));
    }
    let patched = w.with_value(p.at.wrapping_add(offset));
    target.write(buffer, at, &patched.0.to_le_bytes())
}

/// The placed address of every task's list, after checking the submission's shape.
fn plan(
    id: u32,
    core_mask: u32,
    ranges: &[(u32, u32)],
    tasks: &[BufferTask],
    bufs: &BTreeMap<u32, Placed>,
) -> Result<Vec<u32>, String> {
    if started_cores(core_mask).is_none() {
        return Err(format!(
            "submit {id}: core mask {core_mask:#x} starts no core"
        ));
    }
    let cores = cores_of(core_mask).count();
    if ranges.len() != cores {
        return Err(format!(
            "submit {id}: {} task range(s) for core mask {core_mask:#x} ({cores} core(s))",
            ranges.len()
        ));
    }
    let mut next = 0u64;
    for &(s, n) in ranges {
        if n == 0 || s as u64 != next || s as u64 + n as u64 > tasks.len() as u64 {
            return Err(format!(
                "submit {id}: range {s}+{n} is not the next run of its {} tasks",
                tasks.len()
            ));
        }
        next = s as u64 + n as u64;
    }
    if next != tasks.len() as u64 {
        return Err(format!("submit {id}: its ranges leave tasks out"));
    }
    tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let p = bufs
                .get(&t.buffer)
                .ok_or(format!("submit {id} task {i}: no buffer {}", t.buffer))?;
            let end = t.task.end();
            if end > p.size {
                return Err(format!(
                    "submit {id} task {i}: its list ends at +{end:#x}, past its {}-byte buffer",
                    p.size
                ));
            }
            Ok(p.at.wrapping_add(t.task.offset))
        })
        .collect()
}
