//! Matmul for any shape: a plan (tiles, K waves, CBUF banks, cores), the program it
//! implies, packers between row-major host matrices and the buffers the tasks read and
//! write, and the host reduction of partial results. Pure: shapes and values in, bytes
//! and programs out. Execution on a device is [`crate::compute::matmul`]'s.
//!
//! A plan cuts `C[M×N] = A[M×K] · B[K×N]` into tasks, each one
//! [`SingleMatmul`] of `rows × kw × nt`:
//!
//! * **K waves** of at most `k_tile` channels: int8 ≤ 4096 and never in (3072, 4096) with
//!   more than 4 rows (quirk 4, docs/hardware/quirks.md#quirk-4), fp16 ≤ 4096, int4 ≤ 480 so the int16
//!   sums cannot saturate (quirk 13, docs/hardware/quirks.md#quirk-13), or up to 2048 where a bank's weights certify it
//!   ([`WeightLayout::certified_i4`]). Partial results are summed on the host, exactly:
//!   int32 and int16 partials in i64 ([`Plan::reduce_int`]; an int16 result saturates,
//!   [`pack::unpack_i32`] refuses a sum outside int32 instead of wrapping),
//!   fp32 partials in f64 and rounded once. An fp16 result of one wave is the DPU's own
//!   fp32 → fp16 conversion (the tasks write fp16); of several, the host's rounding of
//!   the summed fp32 partials.
//! * **N tiles** of at most 3072 (int8) or 4096 (int4, fp16: quirk 7, docs/hardware/quirks.md#quirk-7) columns, a multiple
//!   of 32 (int4: 64).
//! * **M tiles** of as many rows as the CBUF data banks hold next to one 32-kernel weight
//!   group (docs/hardware/cbuf.md#weight-groups), keeping ≥ 2 weight banks (quirk 3, docs/hardware/quirks.md#quirk-3; int4 at most 8 data banks), at most
//!   the rows of the largest tiles run on boards (int8 256, fp16 and bf16 365, int4 128).
//! * **Cores** split K (when they divide the waves and the cost model finds it faster), N
//!   or M, each running as many tasks; each core's tasks form their own chain in one
//!   program, so one submission runs them all (docs/hardware/matmul-programs.md#multi-core), in the order that keeps the most
//!   bytes in the CBUF ([`Reuse`]).
//!
//! [`Plan::cheapest`] costs a handful of such plans ([`cost`]) and keeps the fastest.
//! Every task reads its own A block (the rows and channels of its wave and M tile, in the
//! layout of its precision) and writes its own C block in the native layout
//! `[nt/E][rows][E]`: no task scatters into a shared row (quirks 6 and 16 of docs/hardware/quirks.md cannot arise).
//! docs/matmul.md has the details and figures.

pub mod cost;
mod cube;
pub mod finish;
mod host;
pub mod host_cost;
mod layout;
pub mod pack;
mod planner;
pub mod quant;
mod tiling;

pub use cube::CubeForm;
pub use host::{
    dequantize, pack_weights_f32, pack_weights_f32_nk, pack_weights_int, pack_weights_int_nk,
};
pub use tiling::I4_ANY_WEIGHTS;
use tiling::*;

use super::single::{Dtype, Layout, OutType, SingleMatmul};
use crate::error::{Error, Result};
use crate::regcmd::{BlockMask, BufferId, DmaAddr, Program, ProgramBuilder};
use crate::task::Task;
use crate::task::limits::{FLOAT_MAX_CHANNELS, INT8_GAP_MAX_ROWS, INT8_MAX_N_TILE, in_int8_k_gap};
use std::fmt;

/// `base` moved `by` bytes on, or an error past 32 bits.
fn offset(base: DmaAddr, by: u64) -> Result<DmaAddr> {
    base.checked_offset(by)
        .ok_or_else(|| unsupported(format!("an offset beyond 32 bits from {base:?}")))
}

/// The buffer holding the program.
pub const REGCMD: BufferId = BufferId(0);
/// Packed A blocks.
pub const A: BufferId = BufferId(1);
/// The weight bank (packed B).
pub const B: BufferId = BufferId(2);
/// Partial result blocks.
pub const C: BufferId = BufferId(3);

const BANK: u64 = crate::task::cbuf::BANK_BYTES;

/// Tasks one submission counts per core (12-bit TASK_NUMBER).
pub const MAX_TASKS: usize = 4095;

fn unsupported(why: String) -> Error {
    Error::Unsupported {
        what: "matmul plan",
        why,
    }
}

/// What to multiply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulSpec {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Input type: int8, int4, fp16 or bf16.
    pub dtype: Dtype,
    /// Result type: int32 (int8, int4), int16 (int4), fp32 (fp16, bf16; int8: the DPU's
    /// cast of each wave's sums) or fp16 (fp16: the DPU's conversion within one wave, the
    /// host's rounding of the summed partials beyond, see [`Plan::c_type`]).
    pub out: OutType,
    /// Cores, 1..=3.
    pub cores: u32,
}

impl MatmulSpec {
    /// A single-core matmul with the widest result type of its precision.
    pub fn new(m: u32, k: u32, n: u32, dtype: Dtype) -> MatmulSpec {
        let out = match dtype {
            Dtype::Fp16 | Dtype::Bf16 => OutType::Fp32,
            _ => OutType::Int32,
        };
        MatmulSpec {
            m,
            k,
            n,
            dtype,
            out,
            cores: 1,
        }
    }

    /// The same on `cores` cores.
    pub fn on_cores(self, cores: u32) -> MatmulSpec {
        MatmulSpec { cores, ..self }
    }
}

/// The row counts a bank is laid out for when its caller declares none
/// ([`WeightLayout::for_rows`]): decoding one token, and prompts of 32, 128 and 512
/// rows.
pub const DECODE_AND_PROMPTS: [u32; 4] = [1, 32, 128, 512];

/// Upper bounds on a plan's tiles ([`Plan::with_limits`]): rows per M tile and columns
/// per column tile. [`TileLimits::NONE`] leaves the planner's own tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileLimits {
    /// Rows per M tile, at most.
    pub rows: u32,
    /// Columns per column tile, at most (rounded down to the granule).
    pub cols: u32,
    /// Whether the cores split the M tiles rather than the columns.
    pub split_rows: bool,
}

impl TileLimits {
    /// No limit beyond the planner's own.
    pub const NONE: TileLimits = TileLimits {
        rows: u32::MAX,
        cols: u32::MAX,
        split_rows: false,
    };
}

/// A K wave: channels `k0 .. k0 + kw`, padded to `ai`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Wave {
    /// First channel.
    pub k0: u32,
    /// Channels.
    pub kw: u32,
    /// Channels padded to 32.
    pub ai: u32,
}

/// One task of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskTile {
    /// The core that runs it.
    pub core: u32,
    /// Its K wave.
    pub wave: u32,
    /// First row.
    pub m0: u32,
    /// Rows.
    pub rows: u32,
    /// First column.
    pub n0: u32,
    /// Columns (padded; the last tile may cover padding columns beyond N).
    pub nt: u32,
    /// Byte offset of its A block.
    pub a_offset: u64,
    /// Byte offset of its C block.
    pub c_offset: u64,
    /// The operand it finds in the CBUF, loaded by the task before it on its core.
    pub reuse: Reuse,
    /// One CBUF data bank more than its A block needs (int8 tasks of a core whose
    /// tasks reuse the CBUF: near-full int8 feature banks corrupted the last rows on
    /// boards, docs/matmul.md).
    pub spare_data_bank: bool,
}

/// Which operand a task finds in the CBUF (`CBUF_CON0` DATA_REUSE / WEIGHT_REUSE),
/// loaded there by the task before it on the same core with the same bank split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reuse {
    /// It loads both operands.
    #[default]
    None,
    /// Its A block (the same rows and wave as the task before, another column tile).
    Data,
    /// Its weights (the same column tile and wave as the task before, other rows).
    Weights,
}

/// A buffer a plan's program names: which, what it holds, how long it is, and whether the
/// tasks write it (the NPU only reads the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanBuffer {
    /// The relocation target ([`REGCMD`], [`A`], [`B`] or [`C`]).
    pub id: BufferId,
    /// `regcmd`, `A`, `weights` or `C`.
    pub name: &'static str,
    /// Bytes.
    pub len: u64,
    /// Whether the tasks write it.
    pub written: bool,
}

/// How a weight bank is laid out: K cut into waves (each wave's channels padded to 32),
/// N padded to the tile granule, waves back to back. Any plan against the bank follows
/// it; the plan chooses M tiles, N tiles and cores per call. A plain value.
///
/// Within a wave, weights are stored in 1024-byte atoms: for int8 and fp16 32 kernels
/// (columns) × 32 channels (int8: 16 for fp16), for int4 64 kernels × 32 channels, the
/// atoms of a column group contiguous over the wave's channels; so every column tile of
/// the wave is one contiguous run of bytes whatever its width.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WeightLayout {
    /// Rows of B (input features).
    pub k: u32,
    /// Columns of B (output features).
    pub n: u32,
    /// Weight type.
    pub dtype: Dtype,
    /// K waves.
    pub waves: Vec<Wave>,
    /// N padded to the tile granule (32; int4: 64).
    pub n_pad: u32,
    /// Byte offset of each wave in the bank.
    pub b_offsets: Vec<u64>,
    /// Bytes of the bank.
    pub bytes: u64,
    /// The most rows a plan may have against this layout: `None` for any M; `Some(4)`
    /// for the int8 layout whose waves lie in (3072, 4096) channels, which boards
    /// compute correctly for at most 4 rows only (quirk 4, docs/hardware/quirks.md#quirk-4).
    pub max_rows: Option<u32>,
}

/// A plan: how a matmul is cut into tasks. A plain value: print it, compare it, test it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Plan {
    /// What it computes.
    pub spec: MatmulSpec,
    /// The weight bank's layout it follows.
    pub layout: WeightLayout,
    /// Rows per M tile (the last may be shorter).
    pub m_tile: u32,
    /// Columns of the widest N tile, a multiple of 32 (int4: 64).
    pub n_tile: u32,
    /// The tasks, grouped by core in core order.
    pub tasks: Vec<TaskTile>,
    /// Tasks per core (one entry per core used).
    pub per_core: Vec<usize>,
    /// Bytes of the A buffer.
    pub a_bytes: u64,
    /// Bytes of the C buffer.
    pub c_bytes: u64,
}

impl Plan {
    /// The most CBUF data banks a task uses (its A block's, and a spare one where the
    /// plan reuses the CBUF on int8).
    pub fn data_banks(&self) -> u32 {
        let ai = |t: &TaskTile| self.layout.waves[t.wave as usize].ai;
        self.tasks
            .iter()
            .map(|t| task_data_banks(t.rows, ai(t), self.spec.dtype, t.spare_data_bank) as u32)
            .max()
            .unwrap_or(1)
    }

    /// Cores the plan runs on.
    pub fn cores_used(&self) -> u32 {
        self.per_core.len() as u32
    }

    /// The element type every task writes into the C buffer: int16 for int4, fp32 for
    /// fp16 and int32 for int8 partials, which the host sums over K waves — except an
    /// fp16 result of one wave, which the DPU converts itself (`OutType::Fp16` in each
    /// task; of several waves the tasks write fp32 partials and the host rounds their sum
    /// to fp16), and an int8 plan with fp32 output, whose tasks the DPU casts (each
    /// wave's sums: exact within ±2²⁴, rounded to nearest even beyond; the host sums
    /// the casts of several waves).
    pub fn c_type(&self) -> OutType {
        written_type(&self.spec, self.layout.waves.len())
    }

    /// The task of `t` as a one-task matmul.
    pub fn task_matmul(&self, t: &TaskTile) -> SingleMatmul {
        let w = self.layout.waves[t.wave as usize];
        let native_a = self.spec.dtype == Dtype::Int4;
        SingleMatmul {
            a_layout: if native_a {
                Layout::Native
            } else {
                Layout::Plain
            },
            c_layout: Layout::Native,
            out: self.c_type(),
            ..SingleMatmul::new(t.rows, w.kw, t.nt, self.spec.dtype)
        }
    }

    /// The same plan with every task loading its operands (no [`Reuse`], no spare data
    /// bank): for a kernel interface that starts each task on its own, where the CBUF
    /// holds nothing a task may count on (the mainline `rocket` driver kicks the cores
    /// once per task; docs/matmul.md, "CBUF reuse").
    pub fn without_reuse(&self) -> Plan {
        let mut p = self.clone();
        for t in &mut p.tasks {
            t.reuse = Reuse::None;
            t.spare_data_bank = false;
        }
        p
    }

    /// Byte offset of `t`'s weights in the bank: its wave's, then its first column's.
    pub fn b_offset(&self, t: &TaskTile) -> u64 {
        let w = self.layout.waves[t.wave as usize];
        self.layout.b_offsets[t.wave as usize]
            + t.n0 as u64 * w.ai as u64 * self.spec.dtype.bits() as u64 / 8
    }

    /// The task model of `t`, with A, the weight bank and C starting at `a`, `b` and
    /// `c`: its [`Plan::task_matmul`] at its offsets, with the plan's CBUF decisions
    /// (a spare data bank, the [`Reuse`] bit). What [`Plan::push_core`] emits and
    /// [`Plan::cost`] counts.
    pub fn task(&self, t: &TaskTile, [a, b, c]: [DmaAddr; 3]) -> Result<Task> {
        self.task_of(self.task_matmul(t), t, offset(a, t.a_offset)?, [b, c])
    }

    /// [`Plan::task`] reading A in the native layout `[K/E][M][E]` at `a` — the NC1HWC2
    /// cube of M pixels of K channels (E per 16 bytes) that an earlier operation of a
    /// chain wrote (`kernels::ops::Cube::new(m, 1, k, ..)`), instead of the plan's own A
    /// blocks. For plans of one M tile and one K wave, whose every task reads all of A;
    /// K must be a multiple of 32 (a weight atom's depth), so that the cube has no
    /// padding channels the task would read past.
    pub fn task_native_a(&self, t: &TaskTile, [a, b, c]: [DmaAddr; 3]) -> Result<Task> {
        if self.layout.waves.len() != 1 || t.m0 != 0 || t.rows != self.spec.m {
            return Err(unsupported(format!(
                "a native A is read whole: the plan has {} K wave(s) and M tiles of {} rows for M = {}",
                self.layout.waves.len(),
                self.m_tile,
                self.spec.m
            )));
        }
        if !self.spec.k.is_multiple_of(32) {
            return Err(unsupported(format!(
                "a native A of K = {} channels; K must be a multiple of 32",
                self.spec.k
            )));
        }
        let mm = SingleMatmul {
            a_layout: Layout::Native,
            ..self.task_matmul(t)
        };
        self.task_of(mm, t, a, [b, c])
    }

    /// The task of `mm` (tile `t`) reading A at `a`, with the plan's weights and C
    /// offsets and its CBUF decisions.
    fn task_of(
        &self,
        mm: SingleMatmul,
        t: &TaskTile,
        a: DmaAddr,
        [b, c]: [DmaAddr; 2],
    ) -> Result<Task> {
        self.task_writing(mm, t, a, [b, offset(c, t.c_offset)?, c])
    }

    /// The task of `mm` (tile `t`) reading A at `a`, the plan's weights in the bank at
    /// `b`, writing C at exactly `c_at` (E, for [`PostOps::add`](crate::kernels::single::PostOps), at `e`), with the plan's
    /// CBUF decisions.
    fn task_writing(
        &self,
        mm: SingleMatmul,
        t: &TaskTile,
        a: DmaAddr,
        [b, c_at, e]: [DmaAddr; 3],
    ) -> Result<Task> {
        let mut task = mm.task_at(a, offset(b, self.b_offset(t))?, c_at, e)?;
        if let Some(cna) = task.cna.as_mut() {
            let cbuf = &mut cna.cbuf;
            if t.spare_data_bank {
                if cbuf.weight_banks <= 2 {
                    return Err(unsupported(format!(
                        "a spare data bank leaves {} weight banks",
                        cbuf.weight_banks - 1
                    )));
                }
                cbuf.data_banks += 1;
                cbuf.weight_banks -= 1;
            }
            cbuf.data_reuse = t.reuse == Reuse::Data;
            cbuf.weight_reuse = t.reuse == Reuse::Weights;
        }
        Ok(task)
    }

    /// The buffers `program` (this plan's [`Plan::program`]) names, in id order: the
    /// program itself, packed A, the weight bank and C. A job lists them all; the
    /// verifier checks the tasks' DMA ranges against them.
    pub fn buffers(&self, program: &Program) -> [PlanBuffer; 4] {
        let b = |id, name, len, written| PlanBuffer {
            id,
            name,
            len,
            written,
        };
        [
            b(REGCMD, "regcmd", program.byte_len() as u64, false),
            b(A, "A", self.a_bytes, false),
            b(B, "weights", self.layout.bytes, false),
            b(C, "C", self.c_bytes, true),
        ]
    }

    /// The program: every task, one chain per core, DMA addresses relocated to [`A`],
    /// [`B`] and [`C`]. Deterministic.
    pub fn program(&self) -> Result<Program> {
        self.program_in(ProgramBuilder::new(REGCMD))
    }

    /// [`Plan::program`] built by `p`, a builder for [`REGCMD`] with its options set
    /// (incremental bodies, [`ProgramBuilder::incremental`]).
    pub fn program_in(&self, mut p: ProgramBuilder) -> Result<Program> {
        for core in 0..self.per_core.len() {
            self.push_core(&mut p, core, [A, B, C])?;
            p.end_chain();
        }
        p.build()
    }

    /// Appends the tasks of `core` (an index into [`Plan::per_core`]) to `p`, their DMA
    /// addresses relocated to the buffers `ids` name (A, weights, C): how several plans
    /// share one program, each core's chain running one plan's tasks after another's.
    /// The caller ends the chain.
    pub fn push_core(
        &self,
        p: &mut ProgramBuilder,
        core: usize,
        [a, b, c]: [BufferId; 3],
    ) -> Result<()> {
        let first: usize = self.per_core.iter().take(core).sum();
        let count = self.per_core.get(core).copied().unwrap_or(0);
        let bases = [a, b, c].map(|id| DmaAddr::reloc(id, 0));
        for t in &self.tasks[first..first + count] {
            p.push_task(self.task(t, bases)?.body()?, BlockMask::CONV);
        }
        Ok(())
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.spec;
        write!(
            f,
            "{}x{}x{} {:?} -> {:?}: {} K wave(s) of <= {} channels, M tiles of {} rows, N tiles of <= {} columns; {} task(s) on {} core(s) {:?}; <= {} data + {} weight CBUF banks{}; A {} B, weights {} B, partials {} B",
            s.m,
            s.k,
            s.n,
            s.dtype,
            s.out,
            self.layout.waves.len(),
            self.layout.waves.iter().map(|w| w.kw).max().unwrap_or(0),
            self.m_tile,
            self.n_tile,
            self.tasks.len(),
            self.per_core.len(),
            self.per_core,
            self.data_banks(),
            crate::task::cbuf::BANKS - self.data_banks(),
            match self.tasks.iter().filter(|t| t.reuse != Reuse::None).count() {
                0 => String::new(),
                n => format!(", {n} task(s) reusing them"),
            },
            self.a_bytes,
            self.layout.bytes,
            self.c_bytes
        )
    }
}

#[cfg(test)]
mod tests;
