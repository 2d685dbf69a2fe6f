//! Matmul for any shape: a plan (tiles, K waves, CBUF banks, cores), the program it
//! implies, packers between row-major host matrices and the buffers the tasks read and
//! write, and the host reduction of partial results. Pure: shapes and values in, bytes
//! and programs out. Execution on a device is [`crate::device::matmul`]'s.
//!
//! A plan cuts `C[M×N] = A[M×K] · B[K×N]` into tasks, each one
//! [`SingleMatmul`] of `rows × kw × nt`:
//!
//! * **K waves** of at most `k_tile` channels: int8 ≤ 4096 and never in (3072, 4096) with
//!   more than 4 rows (board quirk 4 (docs/matmul.md)), fp16 ≤ 4096, int4 ≤ 480 so the int16
//!   sums cannot saturate (quirk 13). Partial results are summed on the host, exactly:
//!   int32 and int16 partials in i64 ([`Plan::reduce_int`]; an int16 result saturates,
//!   [`pack::unpack_i32`] refuses a sum outside int32 instead of wrapping),
//!   fp32 partials in f64 and rounded once. An fp16 result is the DPU's own fp32 → fp16
//!   conversion (the tasks write fp16), so it needs K within one wave.
//! * **N tiles** of at most 3072 (int8) or 4096 (int4, fp16: quirk 7) columns, a multiple
//!   of 32 (int4: 64), and at least as many tiles as cores.
//! * **M tiles** of as many rows as the CBUF data banks hold next to one 32-kernel weight
//!   group (§4.2), at most 128, keeping ≥ 2 weight banks (quirk 3) and, for int8 and
//!   int4, at most the 8 data banks measured on boards.
//! * **Cores**: N tiles are dealt to cores in contiguous groups; each core's tasks form
//!   their own chain in one program, so one submission runs them all (§4.7).
//!
//! Every task reads its own A block (the rows and channels of its wave and M tile, in the
//! layout of its precision) and writes its own C block in the native layout
//! `[nt/E][rows][E]`: no task scatters into a shared row (quirks 6 and 16 cannot arise).
//! docs/matmul.md has the details and figures.

mod host;
pub mod pack;

pub use host::{
    dequantize, pack_weights_f32, pack_weights_f32_nk, pack_weights_int, pack_weights_int_nk,
};

use super::single::{Dtype, Layout, OutType, SingleMatmul};
use crate::error::{Error, Result};
use crate::regcmd::{BlockMask, BufferId, DmaAddr, Program, ProgramBuilder};
use std::fmt;

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
    /// Input type: int8, int4 or fp16.
    pub dtype: Dtype,
    /// Result type: int32 (int8, int4), int16 (int4), fp32 or fp16 (fp16; K within one
    /// wave, see [`Plan::c_type`]).
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

/// A plan: how a matmul is cut into tasks. A plain value: print it, compare it, test it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Plan {
    /// What it computes.
    pub spec: MatmulSpec,
    /// K waves.
    pub waves: Vec<Wave>,
    /// Rows per M tile (the last may be shorter).
    pub m_tile: u32,
    /// Columns per N tile (the last may be shorter), a multiple of 32 (int4: 64).
    pub n_tile: u32,
    /// N padded to the tile granule.
    pub n_pad: u32,
    /// The tasks, grouped by core in core order.
    pub tasks: Vec<TaskTile>,
    /// Tasks per core (one entry per core used).
    pub per_core: Vec<usize>,
    /// Most CBUF data banks a task uses.
    pub data_banks: u32,
    /// Byte offset of each wave's part of the weight bank.
    pub b_offsets: Vec<u64>,
    /// Bytes of the A buffer, the weight bank and the C buffer.
    pub a_bytes: u64,
    /// Bytes of the weight bank.
    pub b_bytes: u64,
    /// Bytes of the C buffer.
    pub c_bytes: u64,
}

/// The type the tasks of a plan with `waves` K waves write into C (see [`Plan::c_type`]).
fn written_type(spec: &MatmulSpec, waves: usize) -> OutType {
    match spec.dtype {
        Dtype::Fp16 if spec.out == OutType::Fp16 && waves == 1 => OutType::Fp16,
        Dtype::Int4 => OutType::Int16,
        Dtype::Fp16 | Dtype::Bf16 => OutType::Fp32,
        _ => OutType::Int32,
    }
}

/// The K split: how many waves, of how many channels each (the last may be shorter):
/// at most 4096 channels (480 for int4, so int16 sums cannot saturate), avoiding int8 K
/// tiles in (3072, 4096) for more than 4 rows (board quirk 4 (docs/matmul.md)). Arithmetic
/// only: nothing is allocated, so any `k` is cheap.
fn k_split(k: u32, m: u32, dtype: Dtype) -> (u32, u32) {
    let k_max = match dtype {
        Dtype::Int4 => 480,
        _ => 4096,
    };
    let mut count = k.div_ceil(k_max);
    loop {
        // k / count <= k_max <= 4096, so the rounding cannot overflow.
        let kw = k.div_ceil(count).next_multiple_of(32).min(k);
        let kw_pad = kw.next_multiple_of(32);
        if dtype == Dtype::Int8 && m > 4 && kw_pad > 3072 && kw_pad < 4096 {
            count += 1;
            continue;
        }
        // Waves of kw channels, the last one shorter.
        return (k.div_ceil(kw), kw);
    }
}

/// The waves of [`k_split`]; `count` is small by then (the plan refused more tasks).
fn k_waves(k: u32, kw: u32) -> Vec<Wave> {
    let mut v = Vec::new();
    let mut k0 = 0;
    while k0 < k {
        let w = kw.min(k - k0);
        v.push(Wave {
            k0,
            kw: w,
            ai: w.next_multiple_of(32),
        });
        k0 += w;
    }
    v
}

/// The tasks of a plan, dealt to cores.
struct Tiles {
    tasks: Vec<TaskTile>,
    per_core: Vec<usize>,
    a_bytes: u64,
    c_bytes: u64,
}

/// Deals column tiles to cores (contiguous ranges, the remainder to the first cores); each
/// column tile runs every wave and M tile. A blocks are laid out per wave and M tile, C
/// blocks in task order.
fn deal_tiles(
    waves: &[Wave],
    (m, m_tile): (u32, u32),
    (n_pad, n_tile): (u32, u32),
    cores: u32,
    part: OutType,
    bits: u64,
) -> Result<Tiles> {
    let n_groups = n_pad.div_ceil(n_tile);
    let mut tasks = Vec::new();
    let mut per_core = Vec::new();
    let (mut a_bytes, mut c_bytes) = (0u64, 0u64);
    let mut a_offsets = Vec::new();
    for w in waves {
        let mut row = Vec::new();
        let mut m0 = 0;
        while m0 < m {
            let rows = m_tile.min(m - m0);
            row.push(a_bytes);
            a_bytes += rows as u64 * w.ai as u64 * bits / 8;
            m0 += rows;
        }
        a_offsets.push(row);
    }
    let mut g = 0;
    for core in 0..cores {
        let groups = n_groups / cores + u32::from(core < n_groups % cores);
        let before = tasks.len();
        for _ in 0..groups {
            let n0 = g * n_tile;
            let nt = n_tile.min(n_pad - n0);
            for (wi, offsets) in a_offsets.iter().enumerate() {
                let mut m0 = 0;
                for &a_offset in offsets {
                    let rows = m_tile.min(m - m0);
                    tasks.push(TaskTile {
                        core,
                        wave: wi as u32,
                        m0,
                        rows,
                        n0,
                        nt,
                        a_offset,
                        c_offset: c_bytes,
                    });
                    c_bytes += rows as u64 * nt as u64 * part.bytes() as u64;
                    m0 += rows;
                }
            }
            g += 1;
        }
        let count = tasks.len() - before;
        if count > MAX_TASKS {
            return Err(unsupported(format!(
                "core {core} would run {count} tasks; one submission counts at most 4095"
            )));
        }
        per_core.push(count);
    }
    Ok(Tiles {
        tasks,
        per_core,
        a_bytes,
        c_bytes,
    })
}

/// Refuses, before any task list or buffer is built, a plan whose busiest core would
/// count more than [`MAX_TASKS`] tasks or whose buffers would not fit the 32-bit NPU
/// address space: both follow from the tile counts alone (saturating, so any `u32`
/// shape is refused without overflow).
fn check_size(spec: &MatmulSpec, (waves, kw): (u32, u32), tiles: (u32, u32, u32)) -> Result<()> {
    let (m_tile, n_tile, n_pad) = tiles;
    let n_groups = n_pad.div_ceil(n_tile) as u64;
    let per_core = n_groups
        .div_ceil(spec.cores as u64)
        .saturating_mul(waves as u64)
        .saturating_mul(spec.m.div_ceil(m_tile) as u64);
    if per_core > MAX_TASKS as u64 {
        return Err(unsupported(format!(
            "{}x{}x{} needs {per_core} tasks on the busiest core; one submission counts at most {MAX_TASKS}",
            spec.m, spec.k, spec.n
        )));
    }
    // Exact sizes: every wave covers all M rows and all padded N columns.
    let full = (waves as u64 - 1) * kw.next_multiple_of(32) as u64;
    let last = (spec.k as u64 - (waves as u64 - 1) * kw as u64).next_multiple_of(32);
    let (sum_ai, bits) = (full + last, spec.dtype.bits() as u64);
    let a = spec.m as u64 * sum_ai * bits / 8;
    let b = n_pad as u64 * sum_ai * bits / 8;
    let part = written_type(spec, waves as usize).bytes() as u64;
    let c = waves as u64 * spec.m as u64 * n_pad as u64 * part;
    if a + b + c > u32::MAX as u64 {
        return Err(unsupported(format!(
            "the buffers (A {a}, weights {b}, C {c} bytes) exceed the 4 GiB NPU address space"
        )));
    }
    Ok(())
}

impl Plan {
    /// Plans `spec`, or says why it cannot be run. Shapes that would need more tasks
    /// than one submission counts, or buffers beyond the 32-bit address space, are
    /// refused with [`Error::Unsupported`] from arithmetic alone, before any task list
    /// is built (so any `u32` shape is cheap to refuse).
    pub fn new(spec: MatmulSpec) -> Result<Plan> {
        let MatmulSpec {
            m,
            k,
            n,
            dtype,
            out,
            cores,
        } = spec;
        if m == 0 || k == 0 || n == 0 {
            return Err(unsupported(format!("empty shape {m}x{k}x{n}")));
        }
        if !(1..=3).contains(&cores) {
            return Err(unsupported(format!("{cores} cores: the RK3588 has 1 to 3")));
        }
        let ok_out = match dtype {
            Dtype::Int8 => out == OutType::Int32,
            Dtype::Int4 => matches!(out, OutType::Int32 | OutType::Int16),
            Dtype::Fp16 => matches!(out, OutType::Fp32 | OutType::Fp16),
            _ => false,
        };
        if !ok_out {
            return Err(unsupported(format!(
                "{dtype:?} x {dtype:?} -> {out:?} is not offered"
            )));
        }
        let bits = dtype.bits() as u64;
        let (wave_count, kw) = k_split(k, m, dtype);
        if out == OutType::Fp16 && wave_count > 1 {
            // The DPU converts one task's fp32 sums; partials of several waves would be
            // summed and rounded on the host instead, which is not the NPU's fp16.
            return Err(unsupported(format!(
                "fp16 output needs K within one wave (at most {kw} channels): K = {k} takes {wave_count} waves, whose fp32 partials are summed on the host"
            )));
        }
        let ai_max = kw.next_multiple_of(32) as u64;
        // M tiles: the data banks left next to one 32-kernel weight group (at least 2).
        let group = dtype.kernels_per_atom().max(32) as u64;
        let weight_banks = (group * ai_max * bits / 8).div_ceil(BANK).max(2);
        if weight_banks > 10 {
            return Err(unsupported(format!(
                "K tile {ai_max} needs {weight_banks} weight banks"
            )));
        }
        // int8 and int4 stay within the 8 data banks measured on boards (§4.2, §5.5).
        let data_banks = match dtype {
            Dtype::Int8 | Dtype::Int4 => (12 - weight_banks).min(8),
            _ => 12 - weight_banks,
        };
        let row_bytes = ai_max * bits / 8;
        let rows_fit = (data_banks * BANK / row_bytes).min(128) as u32;
        let m_tile = rows_fit.min(m).max(1);
        // N tiles.
        let granule = if dtype == Dtype::Int4 { 64 } else { 32 };
        let n_pad = n
            .checked_next_multiple_of(granule)
            .ok_or_else(|| unsupported(format!("N = {n} does not pad to {granule} in 32 bits")))?;
        let n_max = if dtype == Dtype::Int8 { 3072 } else { 4096 };
        // At least as many tiles as cores: whole granules per core, rounded down.
        let per_core_cols = (n_pad / granule / cores).max(1) * granule;
        let n_tile = n_max.min(n_pad).min(per_core_cols);
        let n_groups = n_pad.div_ceil(n_tile);
        if n_groups < cores {
            return Err(unsupported(format!(
                "N = {n} gives {n_groups} column tile(s) of {granule}, fewer than {cores} cores"
            )));
        }
        check_size(&spec, (wave_count, kw), (m_tile, n_tile, n_pad))?;
        let waves = k_waves(k, kw);
        let t = deal_tiles(
            &waves,
            (m, m_tile),
            (n_pad, n_tile),
            cores,
            written_type(&spec, waves.len()),
            bits,
        )?;
        let (tasks, per_core, a_bytes, c_bytes) = (t.tasks, t.per_core, t.a_bytes, t.c_bytes);
        let mut b_offsets = Vec::new();
        let mut b_bytes = 0u64;
        for w in &waves {
            b_offsets.push(b_bytes);
            b_bytes += n_pad as u64 * w.ai as u64 * bits / 8;
        }
        let data_banks_used = tasks
            .iter()
            .map(|t| {
                ((t.rows as u64 * waves[t.wave as usize].ai as u64 * bits / 8).div_ceil(BANK))
                    .max(1) as u32
            })
            .max()
            .unwrap_or(1);
        if a_bytes + b_bytes + c_bytes > u32::MAX as u64 {
            return Err(unsupported(
                "the buffers exceed the 4 GiB NPU address space".into(),
            ));
        }
        Ok(Plan {
            spec,
            waves,
            m_tile,
            n_tile,
            n_pad,
            tasks,
            per_core,
            data_banks: data_banks_used,
            b_offsets,
            a_bytes,
            b_bytes,
            c_bytes,
        })
    }

    /// The element type every task writes into the C buffer: int16 for int4, fp32 for
    /// fp16 and int32 for int8 partials, which the host sums over K waves — except an
    /// fp16 result, which the DPU converts itself (`OutType::Fp16` in each task; the plan
    /// has one wave).
    pub fn c_type(&self) -> OutType {
        written_type(&self.spec, self.waves.len())
    }

    /// The task of `t` as a one-task matmul.
    pub fn task_matmul(&self, t: &TaskTile) -> SingleMatmul {
        let w = self.waves[t.wave as usize];
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
            b(B, "weights", self.b_bytes, false),
            b(C, "C", self.c_bytes, true),
        ]
    }

    /// The program: every task, one chain per core, DMA addresses relocated to [`A`],
    /// [`B`] and [`C`]. Deterministic.
    pub fn program(&self) -> Result<Program> {
        let mut p = ProgramBuilder::new(REGCMD);
        let mut i = 0;
        for &count in &self.per_core {
            for t in &self.tasks[i..i + count] {
                let mm = self.task_matmul(t);
                let w = self.waves[t.wave as usize];
                let b_off = self.b_offsets[t.wave as usize]
                    + t.n0 as u64 * w.ai as u64 * self.spec.dtype.bits() as u64 / 8;
                let body = mm.body_at(
                    DmaAddr::reloc(A, t.a_offset as u32),
                    DmaAddr::reloc(B, b_off as u32),
                    DmaAddr::reloc(C, t.c_offset as u32),
                    DmaAddr::reloc(C, 0),
                )?;
                p.push_task(body, BlockMask::CONV);
            }
            p.end_chain();
            i += count;
        }
        p.build()
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.spec;
        write!(
            f,
            "{}x{}x{} {:?} -> {:?}: {} K wave(s) of <= {} channels, M tiles of {} rows, N tiles of {} columns; {} task(s) on {} core(s) {:?}; <= {} data + {} weight CBUF banks; A {} B, weights {} B, partials {} B",
            s.m,
            s.k,
            s.n,
            s.dtype,
            s.out,
            self.waves.len(),
            self.waves.iter().map(|w| w.kw).max().unwrap_or(0),
            self.m_tile,
            self.n_tile,
            self.tasks.len(),
            self.per_core.len(),
            self.per_core,
            self.data_banks,
            12 - self.data_banks,
            self.a_bytes,
            self.b_bytes,
            self.c_bytes
        )
    }
}

#[cfg(test)]
mod tests;
