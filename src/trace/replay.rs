//! Replaying traces: check (static), model (the simulator) and hw (a device).
//!
//! One walk over the chunks serves every mode: buffers are placed where the target puts
//! them, contents are written in file order, relocations are patched for the placement,
//! submissions run, and completions and outputs are compared with the recording.

use super::{Chunk, Contents, Trace, fnv1a64, seeded_bytes};
use crate::device::{Bo, BoFlags, CoreMask, Device, DeviceError, Job};
use crate::regcmd::{self, EntryKind, RegCmd};
use crate::sim::Simulator;
use crate::submit::{BufferTask, TaskDesc, irq};
use std::collections::BTreeMap;
use std::time::Duration;

/// The most buffer bytes a replay maps (a trace declares sizes; this bounds what a
/// hostile or mistaken one can make a replay allocate).
pub const MAX_REPLAY_BYTES: u64 = 1 << 30;

/// Where a replay runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Decode and check every task and relocation; nothing runs.
    Check,
    /// Run on the simulator and compare completions and outputs.
    Model,
    /// Run on a device and compare completions and outputs.
    Hw,
}

/// How outputs are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tolerance {
    /// Floating-point outputs (fp16, bf16, fp32, found from the DPU task that writes the
    /// buffer) may differ by this many units in the last place; integers and other
    /// bytes compare exactly.
    pub float_ulps: u32,
}

impl Tolerance {
    /// The tolerance for `t`: exact for a trace recorded on the emulated kernel (the same
    /// simulator made it), 2 ULP for one recorded on a board, whose accumulation order
    /// the simulator does not reproduce bit for bit.
    pub fn for_trace(t: &Trace) -> Tolerance {
        Tolerance {
            float_ulps: if t.header.emulated { 0 } else { 2 },
        }
    }
}

/// How a replay places buffers and compares outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// How outputs are compared.
    pub tolerance: Tolerance,
    /// Model mode: every buffer is placed this many bytes (wrapping) from its recorded
    /// address, so that only the trace's relocations can make the program find its data.
    pub shift: u32,
}

impl ReplayOptions {
    /// The defaults for `t`: [`Tolerance::for_trace`], buffers where they were recorded.
    pub fn for_trace(t: &Trace) -> ReplayOptions {
        ReplayOptions {
            tolerance: Tolerance::for_trace(t),
            shift: 0,
        }
    }
}

/// What replaying a trace found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Submissions replayed (run, or checked in check mode).
    pub submits: usize,
    /// Tasks decoded and checked.
    pub tasks: usize,
    /// Recorded outputs and completions compared.
    pub compared: usize,
    /// Where the replay differs from the recording, or why it could not be replayed
    /// (empty on a match).
    pub mismatches: Vec<String>,
    /// Warnings: the simulator's lints, and what check mode finds suspicious but legal.
    pub lints: Vec<String>,
}

impl ReplayReport {
    /// Whether everything compared matched.
    pub fn is_match(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// What a submission did on a target.
struct Outcome {
    ok: bool,
    task_counter: u32,
    statuses: Vec<u32>,
    lints: Vec<String>,
    why: Option<String>,
}

/// A submission as a target runs it: tasks with the placed address of their lists.
struct Run<'a> {
    id: u32,
    core_mask: u32,
    timeout_ms: u32,
    ranges: &'a [(u32, u32)],
    tasks: &'a [BufferTask],
    /// The placed address of each task's list.
    addrs: Vec<u32>,
}

trait Target {
    /// Places buffer `id` of `size` bytes recorded at `addr`; returns where it is now.
    fn place(&mut self, id: u32, size: u64, addr: u32) -> Result<u32, String>;
    fn write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<(), String>;
    fn read(&mut self, id: u32, offset: u64, len: usize) -> Result<Vec<u8>, String>;
    /// Runs a submission; `None` where the target does not execute (check mode).
    fn run(&mut self, r: &Run<'_>) -> Result<Option<Outcome>, String>;
}

/// The cores a vendor core mask starts, in order ([`CoreMask::started`]; a mask that
/// starts none is refused by [`plan`] before anything runs).
fn cores_of(mask: u32) -> impl Iterator<Item = usize> {
    let started = CoreMask::from_bits(mask).map_or(&[][..], |m| m.started());
    started.iter().map(|&(core, _)| core)
}

/// Buffers in plain memory: the check target.
#[derive(Default)]
struct Plain {
    bufs: BTreeMap<u32, Vec<u8>>,
}

impl Plain {
    fn slice(&mut self, id: u32, offset: u64, len: usize) -> Result<&mut [u8], String> {
        let b = self
            .bufs
            .get_mut(&id)
            .ok_or_else(|| format!("buffer {id} was never created"))?;
        let size = b.len();
        let start = usize::try_from(offset).ok().filter(|&o| o <= size);
        start
            .and_then(|s| Some(s..s.checked_add(len).filter(|&e| e <= size)?))
            .map(|r| &mut b[r])
            .ok_or_else(|| {
                format!("{len} bytes at +{offset:#x} do not fit buffer {id} ({size} bytes)")
            })
    }
}

impl Target for Plain {
    fn place(&mut self, id: u32, size: u64, addr: u32) -> Result<u32, String> {
        self.bufs.insert(id, vec![0; size as usize]);
        Ok(addr)
    }
    fn write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<(), String> {
        self.slice(id, offset, bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }
    fn read(&mut self, id: u32, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        Ok(self.slice(id, offset, len)?.to_vec())
    }
    fn run(&mut self, _: &Run<'_>) -> Result<Option<Outcome>, String> {
        Ok(None)
    }
}

/// The simulator, with buffers at their recorded addresses moved by `shift`.
struct Model {
    sim: Simulator,
    at: BTreeMap<u32, u32>,
    shift: u32,
}

impl Target for Model {
    fn place(&mut self, id: u32, size: u64, addr: u32) -> Result<u32, String> {
        let a = addr.wrapping_add(self.shift);
        self.sim
            .memory_mut()
            .map_zeroed(a, size as usize)
            .map_err(|e| format!("buffer {id}: {e}"))?;
        self.at.insert(id, a);
        Ok(a)
    }
    fn write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<(), String> {
        let a = *self.at.get(&id).ok_or(format!("no buffer {id}"))? as u64;
        let dst = a
            .checked_add(offset)
            .and_then(|at| self.sim.memory_mut().write(at, bytes.len()));
        dst.ok_or(format!(
            "{} bytes at +{offset:#x} do not fit buffer {id}",
            bytes.len()
        ))?
        .copy_from_slice(bytes);
        Ok(())
    }
    fn read(&mut self, id: u32, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let a = *self.at.get(&id).ok_or(format!("no buffer {id}"))? as u64;
        let src = a
            .checked_add(offset)
            .and_then(|at| self.sim.memory().read(at, len));
        Ok(src
            .ok_or(format!(
                "{len} bytes at +{offset:#x} do not fit buffer {id}"
            ))?
            .to_vec())
    }
    /// Runs each core's range as the vendor kernel does ([`Simulator::run_range`]), the
    /// last task of each range receiving the interrupt status.
    fn run(&mut self, r: &Run<'_>) -> Result<Option<Outcome>, String> {
        let mut out = Outcome {
            ok: true,
            task_counter: 0,
            statuses: vec![0; r.tasks.len()],
            lints: Vec::new(),
            why: None,
        };
        for (k, (core, &(start, count))) in cores_of(r.core_mask).zip(r.ranges).enumerate() {
            let base = start as usize;
            let run = self.sim.run_range(core, count, |i| {
                let at = base + i as usize;
                let t = r.tasks.get(at)?;
                Some(TaskDesc {
                    offset: r.addrs[at],
                    ..t.task
                })
            });
            out.lints.extend(run.lints.iter().map(|l| l.to_string()));
            if k == 0 {
                out.task_counter = run.done;
            }
            match run.failure {
                Some(why) => {
                    out.ok = false;
                    out.why = Some(format!("core {core}: {why}"));
                    break;
                }
                None => out.statuses[base + count as usize - 1] = run.int_status,
            }
        }
        if out.ok {
            out.task_counter = r.tasks.len() as u32;
        } else {
            self.sim.reset();
        }
        Ok(Some(out))
    }
}

/// A device: buffers are allocated anew and the regcmd relocated into them.
struct Hw<'d> {
    dev: &'d Device,
    bos: BTreeMap<u32, Bo<'d>>,
}

impl<'d> Hw<'d> {
    fn bo(&mut self, id: u32) -> Result<&mut Bo<'d>, String> {
        self.bos.get_mut(&id).ok_or(format!("no buffer {id}"))
    }
}

impl Target for Hw<'_> {
    fn place(&mut self, id: u32, size: u64, _addr: u32) -> Result<u32, String> {
        let size = usize::try_from(size).map_err(|_| format!("buffer {id}: {size} bytes"))?;
        let bo = self
            .dev
            .alloc(size, BoFlags::default())
            .map_err(|e| format!("buffer {id}: {e}"))?;
        let a = bo.dma_addr();
        self.bos.insert(id, bo);
        Ok(a)
    }
    fn write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<(), String> {
        let offset = usize::try_from(offset).map_err(|_| format!("offset {offset}"))?;
        self.bo(id)?
            .write(offset, bytes)
            .map_err(|e| format!("buffer {id}: {e}"))
    }
    fn read(&mut self, id: u32, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let all = self
            .bo(id)?
            .read_all()
            .map_err(|e| format!("buffer {id}: {e}"))?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        all.get(start..start.saturating_add(len))
            .map(<[u8]>::to_vec)
            .ok_or(format!(
                "{len} bytes at +{offset:#x} do not fit buffer {id}"
            ))
    }
    fn run(&mut self, r: &Run<'_>) -> Result<Option<Outcome>, String> {
        let Some(first) = r.tasks.first() else {
            return Err(format!("submit {}: no task", r.id));
        };
        if r.tasks.iter().any(|t| t.buffer != first.buffer) {
            return Err(format!(
                "submit {}: tasks in several regcmd buffers; a job has one",
                r.id
            ));
        }
        let regcmd = self
            .bos
            .get(&first.buffer)
            .ok_or(format!("no buffer {}", first.buffer))?;
        let tasks = r.tasks.iter().map(|t| t.task).collect();
        let mask = CoreMask::from_bits(r.core_mask).map_err(|e| e.to_string())?;
        let split: Vec<usize> = match mask {
            CoreMask::Auto => vec![r.tasks.len()],
            _ => r.ranges.iter().map(|&(_, n)| n as usize).collect(),
        };
        let mut job = Job::new(regcmd, tasks)
            .on_cores(mask, &split)
            .timeout(Duration::from_millis(r.timeout_ms.max(1) as u64));
        for (id, bo) in &self.bos {
            if *id != first.buffer {
                job = job.writes(bo);
            }
        }
        Ok(Some(match self.dev.submit(&job) {
            Ok(j) => Outcome {
                ok: true,
                task_counter: j.task_counter,
                statuses: j.int_status,
                lints: Vec::new(),
                why: None,
            },
            Err(DeviceError::Timeout {
                task_counter,
                int_status,
            }) => {
                let mut statuses = vec![0; r.tasks.len()];
                if let Some(l) = statuses.last_mut() {
                    *l = int_status;
                }
                Outcome {
                    ok: false,
                    task_counter,
                    statuses,
                    lints: Vec::new(),
                    why: Some("the job timed out".into()),
                }
            }
            Err(e) => return Err(format!("submit {}: {e}", r.id)),
        }))
    }
}

/// Replays a trace on the simulator ("model" mode): places every buffer at its recorded
/// address, writes contents in file order, runs each submission as the vendor kernel
/// would kick it, and compares each recorded completion and output (see [`Tolerance`]).
///
/// ```
/// use rknpu_driver::trace::{Trace, replay_model};
///
/// let bytes = std::fs::read("fixtures/traces/int8-64x256x128.rknputrace")?;
/// let report = replay_model(&Trace::from_bytes(&bytes)?);
/// assert!(report.is_match(), "{:?}", report.mismatches);
/// assert!(report.compared > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_model(t: &Trace) -> ReplayReport {
    replay_model_with(t, &ReplayOptions::for_trace(t))
}

/// [`replay_model`] with options: another tolerance, or every buffer moved.
///
/// ```
/// use rknpu_driver::trace::{ReplayOptions, Trace, replay_model_with};
///
/// let t = Trace::from_bytes(&std::fs::read("fixtures/traces/int8-64x256x128.rknputrace")?)?;
/// // 256 MiB lower: only the trace's relocations can make the program find its data.
/// let moved = ReplayOptions { shift: 0xF000_0000, ..ReplayOptions::for_trace(&t) };
/// assert!(replay_model_with(&t, &moved).is_match());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_model_with(t: &Trace, opts: &ReplayOptions) -> ReplayReport {
    let mut m = Model {
        sim: Simulator::new(),
        at: BTreeMap::new(),
        shift: opts.shift,
    };
    replay_on(t, &mut m, opts.tolerance, true)
}

/// Checks a trace without running it ("check" mode): every buffer and content fits,
/// every task's list decodes with no unknown register (set reserved bits are warnings in
/// [`ReplayReport::lints`]), its op-enable entry matches the task's enable mask, chained
/// tasks point at the next task of their range, and every relocated word holds the
/// recorded address it names.
pub fn replay_check(t: &Trace) -> ReplayReport {
    replay_on(t, &mut Plain::default(), Tolerance::for_trace(t), false)
}

/// Replays a trace on a device ("hw" mode): allocates every buffer anew, writes the
/// contents, patches the relocations for the new addresses, submits and compares.
pub fn replay_hw(t: &Trace, dev: &Device) -> ReplayReport {
    replay_hw_with(t, dev, &ReplayOptions::for_trace(t))
}

/// [`replay_hw`] with another tolerance (the device places the buffers: `shift` does not
/// apply).
pub fn replay_hw_with(t: &Trace, dev: &Device, opts: &ReplayOptions) -> ReplayReport {
    let mut hw = Hw {
        dev,
        bos: BTreeMap::new(),
    };
    replay_on(t, &mut hw, opts.tolerance, true)
}

/// Replays `t` in `mode` (hw mode on `Device::open()`).
pub fn replay(t: &Trace, mode: Mode, opts: &ReplayOptions) -> Result<ReplayReport, DeviceError> {
    Ok(match mode {
        Mode::Check => replay_check(t),
        Mode::Model => replay_model_with(t, opts),
        Mode::Hw => replay_hw_with(t, &Device::open()?, opts),
    })
}

/// Replays the trace file at `path` on the simulator and panics with the report unless
/// it matches: the one-line check for a user's CI.
///
/// ```
/// rknpu_driver::trace::assert_replays("fixtures/traces/int8-64x256x128.rknputrace");
/// ```
pub fn assert_replays(path: &str) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let t = Trace::from_bytes(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    let r = replay_model(&t);
    assert!(r.is_match(), "{path} does not replay: {:#?}", r.mismatches);
}

/// The bytes that contents stand for: themselves, or the seeded stream checked against
/// its digest.
fn resolve(c: &Contents) -> Result<Vec<u8>, String> {
    match c {
        Contents::Bytes(b) => Ok(b.clone()),
        Contents::Digest { seed: 0, len, .. } => Err(format!(
            "{len} bytes are redacted without a seed: the replay cannot know them"
        )),
        Contents::Digest { len, digest, seed } => {
            let n = usize::try_from(*len)
                .ok()
                .filter(|&n| n as u64 <= MAX_REPLAY_BYTES)
                .ok_or(format!("{len} redacted bytes: more than a replay maps"))?;
            let b = seeded_bytes(*seed, n);
            if fnv1a64(&b) != *digest {
                return Err(format!(
                    "seed {seed} does not give the recorded digest {digest:#018x}"
                ));
            }
            Ok(b)
        }
    }
}

/// The one walk behind every mode.
fn replay_on(t: &Trace, target: &mut dyn Target, tol: Tolerance, runs: bool) -> ReplayReport {
    let mut rep = ReplayReport::default();
    let bad = |rep: &mut ReplayReport, m: String| rep.mismatches.push(m);
    // id -> (recorded address, placed address, size)
    let mut bufs: BTreeMap<u32, (u32, u32, u64)> = BTreeMap::new();
    let mut total = 0u64;
    let mut outcomes: BTreeMap<u32, Outcome> = BTreeMap::new();
    let mut submits: BTreeMap<u32, &[BufferTask]> = BTreeMap::new();
    for c in &t.chunks {
        match c {
            Chunk::Buffer {
                id, size, dma_addr, ..
            } => {
                total = total.saturating_add(*size);
                if bufs.contains_key(id) {
                    bad(&mut rep, format!("buffer {id} is created twice"));
                } else if (*dma_addr as u64)
                    .checked_add(*size)
                    .is_none_or(|end| end > 1 << 32)
                {
                    bad(
                        &mut rep,
                        format!(
                            "buffer {id}: {size} bytes at {dma_addr:#x} pass the 32-bit address space"
                        ),
                    );
                } else if total > MAX_REPLAY_BYTES {
                    bad(
                        &mut rep,
                        format!(
                            "buffer {id}: the trace's buffers pass the replay limit of {MAX_REPLAY_BYTES} bytes"
                        ),
                    );
                } else {
                    match target.place(*id, *size, *dma_addr) {
                        Ok(a) => {
                            bufs.insert(*id, (*dma_addr, a, *size));
                        }
                        Err(e) => bad(&mut rep, e),
                    }
                }
            }
            Chunk::Data {
                id,
                offset,
                contents,
            } => {
                if let Err(e) = resolve(contents).and_then(|b| target.write(*id, *offset, &b)) {
                    bad(&mut rep, format!("contents of buffer {id}: {e}"));
                }
            }
            Chunk::Reloc {
                buffer,
                entry,
                target: to,
                offset,
            } => {
                if let Err(e) = relocate(target, &bufs, *buffer, *entry, *to, *offset) {
                    bad(
                        &mut rep,
                        format!("reloc buffer {buffer} entry {entry}: {e}"),
                    );
                }
            }
            Chunk::Submit {
                id,
                core_mask,
                timeout_ms,
                ranges,
                tasks,
                ..
            } => {
                rep.submits += 1;
                submits.insert(*id, tasks);
                let run = match plan(*id, *core_mask, ranges, tasks, &bufs) {
                    Ok(addrs) => Run {
                        id: *id,
                        core_mask: *core_mask,
                        timeout_ms: *timeout_ms,
                        ranges,
                        tasks,
                        addrs,
                    },
                    Err(e) => {
                        bad(&mut rep, e);
                        continue;
                    }
                };
                rep.tasks += tasks.len();
                check_tasks(target, &run, &mut rep);
                match target.run(&run) {
                    Ok(Some(o)) => {
                        rep.lints
                            .extend(o.lints.iter().map(|l| format!("submit {id}: {l}")));
                        outcomes.insert(*id, o);
                    }
                    Ok(None) => {}
                    Err(e) => bad(&mut rep, e),
                }
            }
            Chunk::Done {
                id,
                ok,
                task_counter,
                statuses,
                ..
            } if runs => {
                let Some(o) = outcomes.get(id) else {
                    bad(&mut rep, format!("done {id}: the submission did not run"));
                    continue;
                };
                rep.compared += 1;
                if o.ok != *ok {
                    let why = o.why.as_deref().unwrap_or("it completed");
                    bad(
                        &mut rep,
                        format!(
                            "submit {id}: recorded {}, replayed {} ({why})",
                            if *ok { "completed" } else { "failed" },
                            if o.ok { "completed" } else { "failed" }
                        ),
                    );
                } else if o.task_counter != *task_counter {
                    bad(
                        &mut rep,
                        format!(
                            "submit {id}: task counter {} recorded, {} replayed",
                            task_counter, o.task_counter
                        ),
                    );
                }
                // A core's ping-pong group depends on what it ran before, so the status
                // bit within each pair does too: compare as the vendor kernel reads them.
                for (i, (&want, &got)) in statuses.iter().zip(&o.statuses).enumerate() {
                    if want != 0 && got != 0 && irq::fuzz(want) != irq::fuzz(got) {
                        bad(
                            &mut rep,
                            format!(
                                "submit {id} task {i}: interrupt status {want:#x} recorded, {got:#x} replayed"
                            ),
                        );
                    }
                }
            }
            Chunk::Output {
                id,
                submit,
                offset,
                contents,
            } if runs => {
                rep.compared += 1;
                let len = match contents {
                    Contents::Bytes(b) => b.len(),
                    Contents::Digest { len, .. } => *len as usize,
                };
                let got = match target.read(*id, *offset, len) {
                    Ok(g) => g,
                    Err(e) => {
                        bad(&mut rep, format!("output of buffer {id}: {e}"));
                        continue;
                    }
                };
                let tasks = submits.get(submit).copied().unwrap_or(&[]);
                let kind = output_kind(target, &bufs, tasks, *id);
                if let Some(m) = compare(&got, contents, kind, tol) {
                    bad(
                        &mut rep,
                        format!("buffer {id} after submit {submit}, at +{offset:#x}: {m}"),
                    );
                }
            }
            _ => {}
        }
    }
    // A run that failed where the trace recorded no completion: nothing to compare, but
    // worth saying.
    for (id, o) in &outcomes {
        let recorded = t
            .chunks
            .iter()
            .any(|c| matches!(c, Chunk::Done { id: d, .. } if d == id));
        if !o.ok && !recorded {
            rep.lints.push(format!(
                "submit {id} does not complete here ({}); the trace records no completion to compare",
                o.why.as_deref().unwrap_or("no reason given")
            ));
        }
    }
    rep
}

/// Patches one relocated word for the placement, after checking it holds the recorded
/// address it names.
fn relocate(
    target: &mut dyn Target,
    bufs: &BTreeMap<u32, (u32, u32, u64)>,
    buffer: u32,
    entry: u64,
    to: u32,
    offset: u32,
) -> Result<(), String> {
    let &(rec, placed, size) = bufs.get(&to).ok_or(format!("no buffer {to}"))?;
    if offset as u64 >= size.max(1) {
        return Err(format!("offset {offset:#x} is outside buffer {to}"));
    }
    let at = entry.checked_mul(8).ok_or("entry out of range")?;
    let b = target.read(buffer, at, 8)?;
    let w = RegCmd(u64::from_le_bytes(b.try_into().unwrap_or_default()));
    let want = rec.wrapping_add(offset);
    if w.value() != want {
        return Err(format!(
            "holds {:#010x}, but buffer {to} + {offset:#x} was recorded at {want:#010x}",
            w.value()
        ));
    }
    let patched = w.with_value(placed.wrapping_add(offset));
    target.write(buffer, at, &patched.0.to_le_bytes())
}

/// The placed address of every task's list, after checking the submission's shape.
fn plan(
    id: u32,
    core_mask: u32,
    ranges: &[(u32, u32)],
    tasks: &[BufferTask],
    bufs: &BTreeMap<u32, (u32, u32, u64)>,
) -> Result<Vec<u32>, String> {
    if CoreMask::from_bits(core_mask).is_err() {
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
            let &(_, placed, size) = bufs
                .get(&t.buffer)
                .ok_or(format!("submit {id} task {i}: no buffer {}", t.buffer))?;
            let end = t.task.end();
            if end > size {
                return Err(format!(
                    "submit {id} task {i}: its list ends at +{end:#x}, past its {size}-byte buffer"
                ));
            }
            Ok(placed.wrapping_add(t.task.offset))
        })
        .collect()
}

/// A task's list (body and tail) as the target holds it now.
fn task_words(target: &mut dyn Target, t: &BufferTask) -> Result<Vec<RegCmd>, String> {
    let len = t.task.list_bytes() as usize;
    let b = target.read(t.buffer, t.task.offset as u64, len)?;
    regcmd::words_from_le_bytes(&b).map_err(|e| e.to_string())
}

/// The static checks of every task of a submission.
fn check_tasks(target: &mut dyn Target, r: &Run<'_>, rep: &mut ReplayReport) {
    let range_end: Vec<usize> = r
        .ranges
        .iter()
        .flat_map(|&(s, n)| std::iter::repeat_n((s + n) as usize, n as usize))
        .collect();
    for (i, t) in r.tasks.iter().enumerate() {
        let at = format!("submit {} task {i}", r.id);
        let words = match task_words(target, t) {
            Ok(w) => w,
            Err(e) => {
                rep.mismatches.push(format!("{at}: {e}"));
                continue;
            }
        };
        let d = regcmd::decode(&words);
        for e in &d.entries {
            if e.is_unknown() {
                rep.mismatches.push(format!(
                    "{at} entry {}: {:?} is no register of the model",
                    e.index, e.word
                ));
            } else if e.reserved_bits() != 0 {
                rep.lints.push(format!(
                    "{at} entry {}: reserved bits {:#x} set",
                    e.index,
                    e.reserved_bits()
                ));
            }
        }
        let Some(span) = d.tasks.first() else {
            rep.mismatches.push(format!("{at}: an empty list"));
            continue;
        };
        match span.enable {
            Some(m) if t.task.enable != 0 && m.0 != t.task.enable => rep.mismatches.push(format!(
                "{at}: op-enable {:#x} in the list, {:#x} in the task",
                m.0, t.task.enable
            )),
            None => rep
                .mismatches
                .push(format!("{at}: the list has no op-enable entry")),
            _ => {}
        }
        // Within a core's range the PC follows the chain: it must name the next task.
        if i + 1 < range_end[i] {
            let next = r.addrs[i + 1];
            match span.next_address {
                Some(a) if a & !0xf == next & !0xf => {}
                Some(a) => rep.mismatches.push(format!(
                    "{at}: chains to {a:#010x}, but the next task is at {next:#010x}"
                )),
                None => rep.mismatches.push(format!(
                    "{at}: the next task of its core's range is not chained"
                )),
            }
        }
    }
}

/// What a buffer's outputs are, from the DPU task that writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OutKind {
    Bytes,
    F16,
    Bf16,
    F32,
}

fn output_kind(
    target: &mut dyn Target,
    bufs: &BTreeMap<u32, (u32, u32, u64)>,
    tasks: &[BufferTask],
    buffer: u32,
) -> OutKind {
    let Some(&(_, placed, size)) = bufs.get(&buffer) else {
        return OutKind::Bytes;
    };
    let mut kind = OutKind::Bytes;
    for t in tasks {
        let Ok(words) = task_words(target, t) else {
            continue;
        };
        let mut writes_here = false;
        let mut precision = None;
        for e in regcmd::decode(&words).entries {
            if let EntryKind::Write(info) = e.kind {
                let v = e.word.value();
                match info.full_name {
                    "DPU.DST_BASE_ADDR" => {
                        writes_here = v >= placed && (v - placed) as u64 <= size;
                    }
                    "DPU.DATA_FORMAT" => precision = Some(v >> 29),
                    _ => {}
                }
            }
        }
        if writes_here {
            kind = match precision {
                Some(2) => OutKind::F16,
                Some(3) => OutKind::Bf16,
                Some(5) => OutKind::F32,
                _ => OutKind::Bytes,
            };
        }
    }
    kind
}

/// An ordered integer of a float's bits, so that adjacent floats differ by one.
fn ordered(bits: u32, width: u32) -> i64 {
    let sign = 1u32 << (width - 1);
    let mag = (bits & (sign - 1)) as i64;
    if bits & sign != 0 { -mag } else { mag }
}

/// Why `got` does not match the recorded contents, or `None`.
fn compare(got: &[u8], want: &Contents, kind: OutKind, tol: Tolerance) -> Option<String> {
    let want = match want {
        Contents::Bytes(b) => b,
        Contents::Digest { digest, .. } => {
            return (fnv1a64(got) != *digest)
                .then(|| "its digest differs from the recording".to_string());
        }
    };
    let width = match kind {
        OutKind::F16 | OutKind::Bf16 if tol.float_ulps > 0 => 2,
        OutKind::F32 if tol.float_ulps > 0 => 4,
        _ => 0,
    };
    if width == 0 {
        let diff = (0..want.len()).filter(|&i| got[i] != want[i]).count();
        let first = (0..want.len()).find(|&i| got[i] != want[i])?;
        return Some(format!(
            "{diff} byte(s) differ; the first, at +{first:#x}, is {:#04x}, recorded {:#04x}",
            got[first], want[first]
        ));
    }
    let read = |b: &[u8], i: usize| -> u32 {
        if width == 2 {
            u16::from_le_bytes([b[i], b[i + 1]]) as u32
        } else {
            u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
        }
    };
    let bits = (width * 8) as u32;
    let mut worst: Option<(usize, u32, u32, i64)> = None;
    for i in (0..want.len() / width * width).step_by(width) {
        let (g, w) = (read(got, i), read(want, i));
        let d = (ordered(g, bits) - ordered(w, bits)).abs();
        if d > tol.float_ulps as i64 && worst.is_none_or(|x| d > x.3) {
            worst = Some((i, g, w, d));
        }
    }
    worst.map(|(i, g, w, d)| {
        format!(
            "element at +{i:#x} is {g:#x}, recorded {w:#x}: {d} ULP apart, beyond the {} ULP tolerance",
            tol.float_ulps
        )
    })
}

/// Stable text of a trace: the header, every chunk, and each task's decoded list as it
/// stands when the task is submitted.
pub fn dump(t: &Trace) -> String {
    use std::fmt::Write as _;
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
    let mut data: BTreeMap<u32, Vec<(u64, &[u8])>> = BTreeMap::new();
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
                for (i, task) in tasks.iter().enumerate() {
                    let _ = writeln!(
                        s,
                        "  task {i}: buffer {} + {:#x}, {} body entries, int_mask {:#x}, enable {:#x}",
                        task.buffer,
                        task.task.offset,
                        task.task.regcfg_amount,
                        task.task.int_mask,
                        task.task.enable
                    );
                    match recorded_words(&data, task) {
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
                super::show(kind)
            ),
        };
    }
    s
}

/// A task's list from the latest recorded contents that hold all of it.
fn recorded_words(data: &BTreeMap<u32, Vec<(u64, &[u8])>>, t: &BufferTask) -> Option<Vec<RegCmd>> {
    let len = t.task.list_bytes() as usize;
    data.get(&t.buffer)?.iter().rev().find_map(|&(offset, b)| {
        let start = usize::try_from((t.task.offset as u64).checked_sub(offset)?).ok()?;
        let bytes = b.get(start..start.checked_add(len)?)?;
        regcmd::words_from_le_bytes(bytes).ok()
    })
}
