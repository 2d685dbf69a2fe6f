//! Replaying traces (docs/trace-format.md): check (static), model (the simulator) and hw
//! (a device).
//!
//! One walk over the chunks serves every mode (`walk.rs`): buffers are placed where the
//! target puts them, contents are written in file order, relocations are patched for the
//! placement, submissions run, and completions and outputs are compared with the
//! recording. A target is where the walk places buffers and runs submissions: plain
//! memory for check mode (`target.rs`), the simulator (`model.rs`), a device (`hw.rs`).
//!
//! Replay sits above `trace`, `sim` and `device` and imports all three; `trace` itself
//! imports none of them, so the device can call its recorder without a cycle.

mod check;
mod compare;
mod contents;
mod hw;
mod model;
mod target;
mod walk;

use crate::Error;
use crate::device::Device;
use crate::trace::{ChunkReader, Header, Trace, TraceError};
use hw::Hw;
use model::Model;
use target::Plain;
use walk::{replay_on, replay_read};

/// The most buffer bytes a replay maps at once: the live buffers together (a trace
/// declares sizes; this bounds what a hostile or mistaken one can make a replay
/// allocate). A buffer is live from its `BUFC` to its `FREE`.
pub const MAX_REPLAY_BYTES: u64 = 1 << 30;

/// The most bytes of seeded (redacted) contents a replay generates, every contents
/// chunk together: a few bytes of trace stand for that many, so this bounds the work a
/// small trace can ask for. Contents past it are a mismatch naming the limit, checked
/// before any byte of them is generated.
pub const MAX_SEEDED_BYTES: u64 = 1 << 30;

/// Where a replay runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
        Tolerance::for_header(&t.header)
    }

    /// [`Tolerance::for_trace`] from the trace's header alone.
    pub fn for_header(h: &Header) -> Tolerance {
        Tolerance {
            float_ulps: if h.emulated { 0 } else { 2 },
        }
    }
}

/// How a replay places buffers and compares outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// How outputs are compared.
    pub tolerance: Tolerance,
    /// Model mode: every buffer is placed this many bytes (wrapping) from its recorded
    /// address, so that only the trace's relocations can make the program find its data.
    pub shift: u32,
    /// Model mode: the simulator's work budget for the whole replay
    /// ([`crate::sim::Simulator::set_work_budget`]); a submission that would exceed it
    /// fails with the budget named. [`crate::sim::DEFAULT_WORK_BUDGET`] by default.
    pub work_budget: u64,
}

impl ReplayOptions {
    /// The defaults for `t`: [`Tolerance::for_trace`], buffers where they were recorded.
    pub fn for_trace(t: &Trace) -> ReplayOptions {
        ReplayOptions::for_header(&t.header)
    }

    /// [`ReplayOptions::for_trace`] from the trace's header alone (for
    /// [`replay_stream`], which never holds the whole trace).
    pub fn for_header(h: &Header) -> ReplayOptions {
        ReplayOptions {
            tolerance: Tolerance::for_header(h),
            shift: 0,
            work_budget: crate::sim::DEFAULT_WORK_BUDGET,
        }
    }

    /// These options comparing outputs with `tolerance`.
    pub fn with_tolerance(mut self, tolerance: Tolerance) -> ReplayOptions {
        self.tolerance = tolerance;
        self
    }

    /// These options placing every buffer `shift` bytes from its recorded address.
    pub fn with_shift(mut self, shift: u32) -> ReplayOptions {
        self.shift = shift;
        self
    }

    /// These options with a simulator work budget of `budget` for the whole replay.
    pub fn with_work_budget(mut self, budget: u64) -> ReplayOptions {
        self.work_budget = budget;
        self
    }
}

/// What replaying a trace found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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

/// Replays a trace on the simulator ("model" mode): places every buffer at its recorded
/// address, writes contents in file order, runs each submission as the vendor kernel
/// would kick it, and compares each recorded completion and output (see [`Tolerance`]).
///
/// ```
/// use rknpu_driver::{replay::replay_model, trace::Trace};
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
/// use rknpu_driver::replay::{ReplayOptions, replay_model_with};
/// use rknpu_driver::trace::Trace;
///
/// let t = Trace::from_bytes(&std::fs::read("fixtures/traces/int8-64x256x128.rknputrace")?)?;
/// // 256 MiB lower: only the trace's relocations can make the program find its data.
/// let moved = ReplayOptions::for_trace(&t).with_shift(0xF000_0000);
/// assert!(replay_model_with(&t, &moved).is_match());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_model_with(t: &Trace, opts: &ReplayOptions) -> ReplayReport {
    replay_on(
        t,
        &mut Model::new(opts.shift, opts.work_budget),
        opts.tolerance,
        true,
    )
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
    replay_on(t, &mut Hw::new(dev), opts.tolerance, true)
}

/// Replays `t` in `mode` (hw mode on `Device::open()`).
pub fn replay(t: &Trace, mode: Mode, opts: &ReplayOptions) -> Result<ReplayReport, Error> {
    Ok(match mode {
        Mode::Check => replay_check(t),
        Mode::Model => replay_model_with(t, opts),
        Mode::Hw => replay_hw_with(t, &Device::open()?, opts),
    })
}

/// Why [`replay_stream`] could not replay a trace to its end.
#[derive(Debug)]
#[non_exhaustive]
pub enum StreamError {
    /// The trace stops being a trace at this chunk (the replay stops there).
    Trace(TraceError),
    /// Hw mode could not open a device.
    Device(Error),
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::Trace(e) => e.fmt(f),
            StreamError::Device(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for StreamError {}

/// [`replay`] over the chunks `chunks` reads, applied as they come and dropped: a
/// replay of a trace file holds one chunk at a time besides the live buffers, never the
/// whole trace. A chunk that does not read ends the replay with its error (what was
/// replayed before it is not reported).
///
/// ```
/// use rknpu_driver::replay::{Mode, ReplayOptions, replay_stream};
/// use rknpu_driver::trace::ChunkReader;
///
/// let path = "fixtures/traces/int8-64x256x128.rknputrace";
/// let f = std::fs::File::open(path)?;
/// let len = f.metadata()?.len();
/// let mut r = std::io::BufReader::new(f);
/// let mut chunks = ChunkReader::new(&mut r, len)?;
/// let opts = ReplayOptions::for_header(chunks.header());
/// let report = replay_stream(&mut chunks, Mode::Model, &opts)?;
/// assert!(report.is_match() && report.compared > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_stream(
    chunks: &mut ChunkReader<'_>,
    mode: Mode,
    opts: &ReplayOptions,
) -> Result<ReplayReport, StreamError> {
    let tol = opts.tolerance;
    match mode {
        Mode::Check => replay_read(chunks, &mut Plain::default(), tol, false),
        Mode::Model => replay_read(
            chunks,
            &mut Model::new(opts.shift, opts.work_budget),
            tol,
            true,
        ),
        Mode::Hw => {
            let dev = Device::open().map_err(StreamError::Device)?;
            replay_read(chunks, &mut Hw::new(&dev), tol, true)
        }
    }
    .map_err(StreamError::Trace)
}

/// Replays the trace file at `path` on the simulator and panics with the report unless
/// it matches: the one-line check for a user's CI.
///
/// ```
/// rknpu_driver::replay::assert_replays("fixtures/traces/int8-64x256x128.rknputrace");
/// ```
pub fn assert_replays(path: &str) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let t = Trace::from_bytes(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    let r = replay_model(&t);
    assert!(r.is_match(), "{path} does not replay: {:#?}", r.mismatches);
}

#[cfg(test)]
mod tests;
