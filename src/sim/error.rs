//! What the simulator reports: hard errors ([`SimError`]) and warnings ([`Lint`]).

use crate::regs::{Block, Field, Register};
use crate::task::{DecodeError, DecodeErrorKind};
use std::fmt;

/// Where in a run something happened: the core and the task index within the kick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct At {
    /// Core index (0..=2).
    pub core: usize,
    /// Task index within the kick, counted from 0 in chain order.
    pub task: usize,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "core {} task {}", self.core, self.task)
    }
}

/// [`SimError::WorkBudget`]: the regcmd entries one fetch reads (one unit each).
pub const BUDGET_FETCH: &str = "the regcmd fetch";

/// [`SimError::WorkBudget`]: the search for the next list's op-enable entry behind a chain
/// address (one unit per entry looked at).
pub const BUDGET_SEARCH: &str = "the chain-amount check";

/// [`SimError::WorkBudget`]: one task's data path (one unit per multiply-accumulate, per
/// element read by DPU_RDMA and per output element).
pub const BUDGET_TASK: &str = "the task's data path";

/// A simulator error: the program does something the model does not understand, or
/// something the hardware would not do. Each names where, and which register, field and
/// value caused it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimError {
    /// A DMA touched an address outside every memory region.
    Dma {
        /// Where.
        at: At,
        /// First byte address of the access.
        addr: u64,
        /// Length of the access in bytes.
        len: u64,
        /// The block whose DMA made the access (`PC` for regcmd fetches).
        block: Block,
        /// The register that holds the address the access derives from.
        register: &'static str,
        /// A write (true) or a read.
        write: bool,
    },
    /// A register field holds a value the simulator does not model.
    Unsupported {
        /// Where.
        at: At,
        /// `BLOCK.REGISTER`.
        register: &'static str,
        /// Field name (lower case, as in the register model).
        field: &'static str,
        /// The field's value.
        value: u64,
        /// What the model supports instead.
        why: String,
    },
    /// Register fields that contradict each other (sizes, strides, precisions).
    Inconsistent {
        /// Where.
        at: At,
        /// `BLOCK.REGISTER`.
        register: &'static str,
        /// Field name.
        field: &'static str,
        /// The field's value.
        value: u64,
        /// What the other registers require.
        why: String,
    },
    /// The CBUF bank split cannot hold what the task needs (12 banks of 32 KiB per core).
    CbufOverflow {
        /// Where.
        at: At,
        /// Which budget overflowed (`data`, `weight` or `total`).
        what: &'static str,
        /// Banks the registers give it (CNA.CBUF_CON0).
        banks: u32,
        /// Bytes the task needs there.
        needed_bytes: u64,
    },
    /// An entry the PC cannot execute: an unknown register, a target that does not match
    /// the register's block, a write to a read-only register.
    BadEntry {
        /// Where.
        at: At,
        /// Device address of the entry.
        addr: u32,
        /// The entry.
        entry: u64,
        /// What is wrong with it.
        why: String,
    },
    /// The run would exceed the simulator's work budget
    /// ([`super::Simulator::set_work_budget`], docs/simulator.md "Bounds"): a program
    /// that loops or is too large to simulate ends here instead of running for hours.
    /// Nothing of the refused step was done.
    WorkBudget {
        /// Where.
        at: At,
        /// What would have exceeded it: [`BUDGET_FETCH`], [`BUDGET_SEARCH`] or
        /// [`BUDGET_TASK`].
        what: &'static str,
        /// The budget, in work units.
        budget: u64,
        /// Units used before this step.
        used: u64,
        /// Units the step needs.
        needed: u64,
    },
    /// A cube larger than the simulator holds at once (docs/simulator.md, "Bounds"): a
    /// limit of the simulation, not of the NPU. Nothing of the task was done.
    CubeLimit {
        /// Where.
        at: At,
        /// The register that sets the cube's size or address.
        register: &'static str,
        /// The cube's elements.
        elements: u64,
        /// The most the simulator holds: 2^26, and at most the memory image's bytes
        /// plus a small allowance.
        limit: u64,
    },
    /// A bad request to the simulator itself (core index, overlapping regions, a zero
    /// task count).
    Setup {
        /// What is wrong.
        why: String,
    },
}

impl SimError {
    /// Where the error happened, when it belongs to a task.
    pub fn at(&self) -> Option<At> {
        match self {
            SimError::Dma { at, .. }
            | SimError::Unsupported { at, .. }
            | SimError::Inconsistent { at, .. }
            | SimError::CbufOverflow { at, .. }
            | SimError::BadEntry { at, .. }
            | SimError::WorkBudget { at, .. }
            | SimError::CubeLimit { at, .. } => Some(*at),
            SimError::Setup { .. } => None,
        }
    }
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Dma {
                at,
                addr,
                len,
                block,
                register,
                write,
            } => write!(
                f,
                "{at}: {} DMA {} of {len} bytes at {addr:#x} is outside every memory region (address from {register})",
                block.name(),
                if *write { "write" } else { "read" }
            ),
            SimError::Unsupported {
                at,
                register,
                field,
                value,
                why,
            }
            | SimError::Inconsistent {
                at,
                register,
                field,
                value,
                why,
            } => {
                let verdict = if matches!(self, SimError::Unsupported { .. }) {
                    "not supported"
                } else {
                    "inconsistent"
                };
                write!(
                    f,
                    "{at}: {register}.{field} = {value} ({value:#x}) is {verdict}: {why}"
                )
            }
            SimError::CbufOverflow {
                at,
                what,
                banks,
                needed_bytes,
            } => write!(
                f,
                "{at}: {}: {what} needs {needed_bytes} bytes but has {banks} bank(s) of 32768 bytes",
                <crate::regs::cna::CbufCon0 as crate::regs::Register>::NAME
            ),
            SimError::BadEntry {
                at,
                addr,
                entry,
                why,
            } => write!(f, "{at}: entry {entry:#018x} at {addr:#x}: {why}"),
            SimError::WorkBudget {
                at,
                what,
                budget,
                used,
                needed,
            } => write!(
                f,
                "{at}: work budget of {budget} units exceeded: {used} used, {what} needs {needed} more"
            ),
            SimError::CubeLimit {
                at,
                register,
                elements,
                limit,
            } => write!(
                f,
                "{at}: {register}: a cube of {elements} elements; the simulator holds at most {limit} (2^26, and at most the bytes of its memory image + 2^16)"
            ),
            SimError::Setup { why } => write!(f, "simulator setup: {why}"),
        }
    }
}

impl std::error::Error for SimError {}

/// The kinds of hazard the simulator warns about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LintKind {
    /// The DPU needs data from its read DMA (flying mode or a memory operand) but the
    /// op-enable entry does not start DPU_RDMA.
    DpuWithoutRdma,
    /// The interrupt mask names a block that finishes before the job's last stage, or only
    /// one bit of a ping-pong pair.
    EarlyIntMask,
    /// A tail's fetch amount does not match the next task's body.
    ChainAmount,
    /// More tasks than the 12-bit TASK_NUMBER can count (4095).
    TaskCount,
    /// A task relies on register values written by an earlier task (ping-pong state leak;
    /// quirks 1 and 2, docs/hardware/quirks.md#quirk-1).
    StaleRegisters,
    /// int8 K tile in (3072, 4096) with more than 4 rows (quirk 4, docs/hardware/quirks.md#quirk-4).
    Int8KTile,
    /// fp16/bf16 FEATURE_GRAINS below rows + 1 (quirk 5, docs/hardware/quirks.md#quirk-5).
    FeatureGrains,
    /// Output atoms that may overlap (quirk 6, docs/hardware/quirks.md#quirk-6: a clamped DPU notch).
    OutputOverlap,
    /// A 16-bit float task wider than 4096 channels (quirk 7, docs/hardware/quirks.md#quirk-7).
    WideFp16,
    /// int4 × int4 with K > 480: the int16 sum may saturate (quirk 13, docs/hardware/quirks.md#quirk-13).
    Int4Saturation,
    /// fp16 element-wise ADD with the operand converter bypassed drops the operand (quirk 15, docs/hardware/quirks.md#quirk-15).
    Fp16EwAddDropped,
    /// A 16-bit float output scattered into a wider row (quirk 16, docs/hardware/quirks.md#quirk-16).
    Fp16NTileScatter,
    /// CNA feature strides in a geometry no board-validated program uses.
    UnverifiedGeometry,
    /// S_POINTER names another core than the one running the program.
    CoreIndex,
    /// A configuration no board-recorded or board-tested program uses, which the model
    /// runs because it is derived from ones that are (the message names the derivation,
    /// docs/simulator.md "Validated values"): results on a board are not yet confirmed.
    Unvalidated,
    /// LUT tables or a LUT decode that boards are known to get wrong (zero entries, flat
    /// runs, the signed decode near 0; docs/hardware/lut.md#quirks), which the model
    /// computes as designed.
    LutQuirk,
}

impl LintKind {
    /// A short stable name, used in the text output.
    pub const fn name(self) -> &'static str {
        match self {
            LintKind::DpuWithoutRdma => "dpu-without-rdma",
            LintKind::EarlyIntMask => "early-int-mask",
            LintKind::ChainAmount => "chain-amount",
            LintKind::TaskCount => "task-count",
            LintKind::StaleRegisters => "stale-registers",
            LintKind::Int8KTile => "int8-k-tile",
            LintKind::FeatureGrains => "feature-grains",
            LintKind::OutputOverlap => "output-overlap",
            LintKind::WideFp16 => "wide-fp16",
            LintKind::Int4Saturation => "int4-saturation",
            LintKind::Fp16EwAddDropped => "fp16-ew-add-dropped",
            LintKind::Fp16NTileScatter => "fp16-n-tile-scatter",
            LintKind::UnverifiedGeometry => "unverified-geometry",
            LintKind::CoreIndex => "core-index",
            LintKind::Unvalidated => "unvalidated",
            LintKind::LutQuirk => "lut-quirk",
        }
    }
}

/// A warning about a known hazard, with where it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lint {
    /// Where (the task index is the one the hazard belongs to).
    pub at: At,
    /// Which hazard.
    pub kind: LintKind,
    /// Details: registers and values.
    pub message: String,
}

impl fmt::Display for Lint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.at, self.kind.name(), self.message)
    }
}

/// The simulator's error for a decoder refusal `e` at `at`.
pub(super) fn err(at: At, e: DecodeError) -> SimError {
    match e.kind {
        DecodeErrorKind::Unsupported => SimError::Unsupported {
            at,
            register: e.register,
            field: e.field,
            value: e.value,
            why: e.why,
        },
        DecodeErrorKind::Inconsistent => SimError::Inconsistent {
            at,
            register: e.register,
            field: e.field,
            value: e.value,
            why: e.why,
        },
    }
}

/// A value the model does not execute, or no board-validated program uses.
pub(super) fn unsupported<R: Register>(
    at: At,
    f: Field<R>,
    value: u32,
    why: impl Into<String>,
) -> SimError {
    err(at, DecodeError::unsupported(f, value, why))
}

/// Nothing above `max` is modelled: a larger `value` of `f` is [`unsupported`] for `why`.
pub(super) fn at_most<R: Register>(
    at: At,
    (f, value): (Field<R>, u32),
    max: u32,
    why: &str,
) -> Result<(), SimError> {
    match value > max {
        true => Err(unsupported(at, f, value, why)),
        false => Ok(()),
    }
}

/// A value that contradicts another block's.
pub(super) fn inconsistent<R: Register>(
    at: At,
    f: Field<R>,
    value: u32,
    why: impl Into<String>,
) -> SimError {
    err(at, DecodeError::inconsistent(f, value, why))
}
