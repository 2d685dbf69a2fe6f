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
//!   fp32 partials in f64 and rounded once. An fp16 result is the DPU's own fp32 → fp16
//!   conversion (the tasks write fp16), so it needs K within one wave.
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
mod host;
pub mod pack;
pub mod quant;

pub use host::{
    dequantize, pack_weights_f32, pack_weights_f32_nk, pack_weights_int, pack_weights_int_nk,
};

use super::single::{Dtype, Layout, OutType, SingleMatmul};
use crate::error::{Error, Result};
use crate::regcmd::{BlockMask, BufferId, DmaAddr, Program, ProgramBuilder};
use crate::task::Task;
use crate::task::limits::{FLOAT_MAX_CHANNELS, INT8_GAP_MAX_ROWS, INT8_MAX_N_TILE, in_int8_k_gap};
use std::fmt;

/// `base` moved `by` bytes on, or an error past 32 bits.
fn offset(base: DmaAddr, by: u64) -> Result<DmaAddr> {
    let by = u32::try_from(by).ok();
    match base {
        DmaAddr::Fixed(a) => by.and_then(|by| a.checked_add(by)).map(DmaAddr::Fixed),
        DmaAddr::Reloc(r) => by
            .and_then(|by| r.offset.checked_add(by))
            .map(|o| DmaAddr::reloc(r.buffer, o)),
    }
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
    /// Result type: int32 (int8, int4), int16 (int4), fp32 (fp16, bf16; int8 within one
    /// wave: the DPU's cast) or fp16 (fp16; K within one wave, see [`Plan::c_type`]).
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

impl WeightLayout {
    /// The layout any M runs against: waves of at most 4096 channels (int4: 480, so int16
    /// sums cannot saturate), int8 waves never in (3072, 4096).
    pub fn new(k: u32, n: u32, dtype: Dtype) -> Result<WeightLayout> {
        WeightLayout::for_max_rows(k, n, dtype, u32::MAX)
    }

    /// The layout for plans of at most `max_rows` rows: the same as [`WeightLayout::new`]
    /// except that int8 with `max_rows <= 4` may take one wave of up to 4096 channels
    /// where `new` takes two (a single-token layout: fewer tasks, but refused for more
    /// rows).
    pub fn for_max_rows(k: u32, n: u32, dtype: Dtype, max_rows: u32) -> Result<WeightLayout> {
        WeightLayout::check_kind(k, n, dtype)?;
        WeightLayout::from_split(k, n, dtype, k_split(k, max_rows.max(1), dtype))
    }

    /// The layout with waves of `k_tile` channels (the last one shorter): a multiple of
    /// 32 (or all of K when K is smaller), at most 4096 (int4: 480). int8 waves in
    /// (3072, 4096) give the single-token layout (at most 4 rows).
    pub fn with_k_tile(k: u32, n: u32, dtype: Dtype, k_tile: u32) -> Result<WeightLayout> {
        WeightLayout::check_kind(k, n, dtype)?;
        let k_max = if dtype == Dtype::Int4 {
            I4_ANY_WEIGHTS
        } else {
            4096
        };
        let kw = k_tile.min(k);
        if kw == 0 || kw > k_max || (kw < k && !kw.is_multiple_of(32)) {
            return Err(unsupported(format!(
                "a K tile of {k_tile} channels: a multiple of 32 of at most {k_max}"
            )));
        }
        WeightLayout::from_split(k, n, dtype, (k.div_ceil(kw), kw))
    }

    /// The int4 layout with the widest waves these weights allow, up to 2048 channels
    /// (the widest int4 K tile run on boards, `happyme531/rknpu2_matmul_open`): the CORE
    /// sums int4 products in int16 and saturates (quirk 13, docs/hardware/quirks.md#quirk-13), so a wave is safe for every
    /// activation in −8..=7 when each output channel's Σ|w| over it is at most 4095
    /// (8 · 4095 ≤ 32767). `magnitudes` are the weights' [`quant::i4_magnitudes`] (`n`
    /// rows of `⌈k/32⌉` granule sums). Waves of at most 480 channels are safe for any
    /// weights, so this is never narrower than [`WeightLayout::new`]; fewer waves write
    /// fewer int16 partial blocks. Deterministic.
    pub fn certified_i4(k: u32, n: u32, magnitudes: &[u16]) -> Result<WeightLayout> {
        let plain = WeightLayout::new(k, n, Dtype::Int4)?;
        let granules = k.div_ceil(32) as usize;
        Error::check_len(
            "int4 weight magnitudes",
            n as usize * granules,
            magnitudes.len(),
        )?;
        let mut count = k.div_ceil(I4_CERTIFIED_MAX);
        while (count as usize) < plain.waves.len() {
            let kw = k.div_ceil(count).next_multiple_of(32).min(k);
            let layout = WeightLayout::from_split(k, n, Dtype::Int4, (k.div_ceil(kw), kw))?;
            if layout.i4_unsafe_wave(magnitudes).is_none() {
                return Ok(layout);
            }
            count += 1;
        }
        Ok(plain)
    }

    /// Whether this is an int4 layout with waves wider than any weights allow
    /// ([`I4_ANY_WEIGHTS`]): made by [`WeightLayout::certified_i4`] for certain weights,
    /// and valid only for weights [`WeightLayout::i4_unsafe_wave`] finds no fault with.
    pub fn is_certified_i4(&self) -> bool {
        self.dtype == Dtype::Int4 && self.k_tile() > I4_ANY_WEIGHTS
    }

    /// The first wave of this int4 layout wider than 480 channels over which some
    /// output channel's Σ|w| exceeds 4095, so that int16 sums could saturate: `(wave,
    /// channel, Σ|w|)`. `magnitudes` as for [`WeightLayout::certified_i4`].
    pub fn i4_unsafe_wave(&self, magnitudes: &[u16]) -> Option<(usize, usize, u32)> {
        let granules = self.k.div_ceil(32) as usize;
        self.waves
            .iter()
            .enumerate()
            .filter(|(_, w)| w.ai > I4_ANY_WEIGHTS)
            .find_map(|(i, w)| {
                let (g0, g1) = ((w.k0 / 32) as usize, (w.k0 + w.kw).div_ceil(32) as usize);
                magnitudes
                    .chunks_exact(granules.max(1))
                    .enumerate()
                    .map(|(c, row)| (c, row[g0..g1].iter().map(|&v| v as u32).sum::<u32>()))
                    .find(|&(_, sum)| sum > I4_MAGNITUDE_MAX)
                    .map(|(c, sum)| (i, c, sum))
            })
    }

    /// The layout of the plan [`Plan::cheapest`] chooses for `m` rows on at most `cores`
    /// cores: what a bank should be packed in when most products against it have `m`
    /// rows.
    pub fn cheapest_for(
        k: u32,
        n: u32,
        dtype: Dtype,
        (m, out, cores): (u32, OutType, u32),
        profile: &cost::HardwareProfile,
    ) -> Result<WeightLayout> {
        let spec = MatmulSpec {
            m,
            k,
            n,
            dtype,
            out,
            cores,
        };
        Ok(Plan::cheapest(spec, profile)?.layout)
    }

    /// The layouts worth costing for `m` rows on `cores` cores: the one
    /// [`WeightLayout::for_max_rows`] gives, then K splits into more, narrower waves.
    /// Narrower waves let more rows share the CBUF next to one weight group, so the
    /// weights are read fewer times, at the price of more tasks and more partial
    /// results. Of the splits giving the same number of M tiles only the one with the
    /// fewest waves is kept (more waves would only add partials), with the next wave
    /// count the cores divide (so they can split K); the list ends at one M tile or at
    /// the row limit, so it is short. Arithmetic until a split is kept.
    fn candidates(k: u32, n: u32, dtype: Dtype, m: u32, cores: u32) -> Result<Vec<WeightLayout>> {
        let first = WeightLayout::for_max_rows(k, n, dtype, m.max(1))?;
        let mut tiles = tile_rows(dtype, first.k_tile().next_multiple_of(32))
            .map_or(u32::MAX, |rows| m.div_ceil(rows));
        let mut count = first.waves.len() as u32;
        let mut out = vec![first];
        while tiles > 1 {
            count += 1;
            let kw = k.div_ceil(count).next_multiple_of(32);
            if kw >= k || count as usize > MAX_TASKS {
                break;
            }
            if dtype == Dtype::Int8 && m > INT8_GAP_MAX_ROWS && in_int8_k_gap(kw) {
                continue;
            }
            let Ok(rows) = tile_rows(dtype, kw) else {
                continue;
            };
            let t = m.div_ceil(rows);
            if t < tiles {
                tiles = t;
                let split_k = k
                    .div_ceil(count.next_multiple_of(cores.max(1)))
                    .next_multiple_of(32);
                for kw in [kw, split_k] {
                    if let Ok(layout) = WeightLayout::with_k_tile(k, n, dtype, kw)
                        && !out.contains(&layout)
                    {
                        out.push(layout);
                    }
                }
            }
            if rows == max_tile_rows(dtype) || kw == 32 {
                break;
            }
        }
        Ok(out)
    }

    fn check_kind(k: u32, n: u32, dtype: Dtype) -> Result<()> {
        if k == 0 || n == 0 {
            return Err(unsupported(format!("empty weights {k}x{n}")));
        }
        if !matches!(dtype, Dtype::Int8 | Dtype::Int4 | Dtype::Fp16 | Dtype::Bf16) {
            return Err(unsupported(format!("{dtype:?} weights are not offered")));
        }
        Ok(())
    }

    /// The layout of `count` waves of `kw` channels (the last one shorter).
    fn from_split(k: u32, n: u32, dtype: Dtype, (count, kw): (u32, u32)) -> Result<WeightLayout> {
        let granule = if dtype == Dtype::Int4 { 64 } else { 32 };
        let n_pad = n
            .checked_next_multiple_of(granule)
            .ok_or_else(|| unsupported(format!("N = {n} does not pad to {granule} in 32 bits")))?;
        // Every column tile runs every wave: more waves than one submission counts
        // cannot be planned (and would be a huge list to build).
        if count as usize > MAX_TASKS {
            return Err(unsupported(format!(
                "K = {k} takes {count} waves of {kw}; one submission counts at most {MAX_TASKS} tasks"
            )));
        }
        let bits = dtype.bits() as u64;
        let full = (count as u64 - 1) * kw.next_multiple_of(32) as u64;
        let last = (k as u64 - (count as u64 - 1) * kw as u64).next_multiple_of(32);
        let bytes = n_pad as u64 * (full + last) * bits / 8;
        if bytes > u32::MAX as u64 {
            return Err(unsupported(format!(
                "the weights ({bytes} bytes) exceed the 4 GiB NPU address space"
            )));
        }
        let waves = k_waves(k, kw);
        let mut b_offsets = Vec::with_capacity(waves.len());
        let mut at = 0u64;
        for w in &waves {
            b_offsets.push(at);
            at += n_pad as u64 * w.ai as u64 * bits / 8;
        }
        let in_gap = |w: &Wave| in_int8_k_gap(w.ai);
        let max_rows =
            (dtype == Dtype::Int8 && waves.iter().any(in_gap)).then_some(INT8_GAP_MAX_ROWS);
        Ok(WeightLayout {
            k,
            n,
            dtype,
            waves,
            n_pad,
            b_offsets,
            bytes: at,
            max_rows,
        })
    }

    /// The widest wave, in channels.
    pub fn k_tile(&self) -> u32 {
        self.waves.iter().map(|w| w.kw).max().unwrap_or(0)
    }
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

/// The type the tasks of a plan with `waves` K waves write into C (see [`Plan::c_type`]).
fn written_type(spec: &MatmulSpec, waves: usize) -> OutType {
    match spec.dtype {
        Dtype::Fp16 if spec.out == OutType::Fp16 && waves == 1 => OutType::Fp16,
        Dtype::Int8 if spec.out == OutType::Fp32 && waves == 1 => OutType::Fp32,
        Dtype::Int4 => OutType::Int16,
        Dtype::Fp16 | Dtype::Bf16 => OutType::Fp32,
        _ => OutType::Int32,
    }
}

/// The K split: how many waves, of how many channels each (the last may be shorter):
/// at most 4096 channels (480 for int4, so int16 sums cannot saturate), avoiding int8 K
/// tiles in (3072, 4096) for more than 4 rows (quirk 4, docs/hardware/quirks.md#quirk-4). Arithmetic
/// only: nothing is allocated, so any `k` is cheap.
fn k_split(k: u32, m: u32, dtype: Dtype) -> (u32, u32) {
    let k_max = match dtype {
        Dtype::Int4 => I4_ANY_WEIGHTS,
        _ => 4096,
    };
    let mut count = k.div_ceil(k_max);
    loop {
        // k / count <= k_max <= 4096, so the rounding cannot overflow.
        let kw = k.div_ceil(count).next_multiple_of(32).min(k);
        let kw_pad = kw.next_multiple_of(32);
        if dtype == Dtype::Int8 && m > INT8_GAP_MAX_ROWS && in_int8_k_gap(kw_pad) {
            count += 1;
            continue;
        }
        // Waves of kw channels, the last one shorter.
        return (k.div_ceil(kw), kw);
    }
}

/// The most rows one M tile may have, by precision: the largest row tiles run on boards.
/// int8 256 (256-row int8 tiles in `gregordinary/rocket-userspace`'s board-measured
/// 512×3840×4096 plans; `mtx512/rk3588-npu` tests single int8 tasks of up to 544 rows),
/// fp16 and bf16 365 (the vendor runtime's `rknn-gemm-fp16-424` task), int4 128 (native A,
/// `happyme531/rknpu2_matmul_open`).
fn max_tile_rows(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::Int8 => 256,
        Dtype::Fp16 | Dtype::Bf16 => 365,
        _ => 128,
    }
}

/// The rows an M tile may have at `ai` channels: the weight banks hold one group of 32
/// kernels (int4: 64) and at least 2 banks (docs/hardware/cbuf.md#weight-groups, quirk 3, docs/hardware/quirks.md#quirk-3); the data banks are the rest,
/// for int4 at most the 8 measured on boards. Arithmetic only.
fn tile_rows(dtype: Dtype, ai: u32) -> Result<u32> {
    let bits = dtype.bits() as u64;
    let group = dtype.kernels_per_atom().max(32) as u64;
    let weight_banks = (group * ai as u64 * bits / 8).div_ceil(BANK).max(2);
    if weight_banks > 10 {
        return Err(unsupported(format!(
            "K tile {ai} needs {weight_banks} weight banks"
        )));
    }
    let data_banks = match dtype {
        Dtype::Int4 => (12 - weight_banks).min(8),
        _ => 12 - weight_banks,
    };
    let row_bytes = (ai as u64 * bits / 8).max(1);
    Ok((data_banks * BANK / row_bytes).clamp(1, max_tile_rows(dtype) as u64) as u32)
}

/// The widest int4 wave for any weights: 480 × 64 ≤ 32767 (quirk 13, docs/hardware/quirks.md#quirk-13).
pub const I4_ANY_WEIGHTS: u32 = 480;
/// The widest int4 wave [`WeightLayout::certified_i4`] takes.
const I4_CERTIFIED_MAX: u32 = 2048;
/// The largest Σ|w| of one output channel over a wave for which int16 sums of products
/// with activations in −8..=7 cannot saturate: 8 · 4095 = 32760 ≤ 32767.
const I4_MAGNITUDE_MAX: u32 = 4095;

/// The waves of [`k_split`]; `count` is small by then (the layout refused more).
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

/// `total` items cut into `parts` contiguous runs as even as can be (the first runs one
/// longer): the run lengths.
fn even(total: u32, parts: u32) -> impl Iterator<Item = u32> {
    (0..parts).map(move |i| total / parts + u32::from(i < total % parts))
}

/// One core's share of a plan: contiguous ranges of column granules, M tiles and K
/// waves, the columns cut into `n_tiles` tiles.
#[derive(Clone, Copy, Debug)]
struct CoreWork {
    g0: u32,
    granules: u32,
    t0: u32,
    m_tiles: u32,
    w0: u32,
    waves: u32,
    n_tiles: u32,
}

/// How the work is spread over cores.
struct Split {
    cores: Vec<CoreWork>,
}

/// Spreads `waves` K waves of `m_tiles` M tiles over `granules` column granules (at
/// least `n_tiles` column tiles for all of N) on at most `cores` cores, so that every
/// core runs as many tasks as the others:
///
/// * **K** when `by_k` (the caller checked that the cores divide the waves): each core
///   runs its waves over every column and M tile, so A is read once in all (an N split
///   reads it once per core) and each core writes the partials of its own waves;
/// * else **N**, when there are at least as many granules as cores: even runs of
///   granules (4096 columns on 3 cores are 1376, 1376 and 1344), each cut into the same
///   number of column tiles;
/// * else **M** tiles, when that keeps more cores busy (`m_tiles` is then a multiple of
///   the cores it uses).
///
/// `cores` is a maximum, never a reason to refuse.
fn split_cores(
    granules: u32,
    (m_tiles, waves): (u32, u32),
    (cores, by_k): (u32, bool),
    n_tiles: u32,
) -> Split {
    let by_n = cores.min(granules);
    let by_m = cores.min(m_tiles);
    let all = CoreWork {
        g0: 0,
        granules,
        t0: 0,
        m_tiles,
        w0: 0,
        waves,
        n_tiles,
    };
    let cores = if by_k {
        runs(waves, cores, |w0, waves| CoreWork { w0, waves, ..all })
    } else if by_n >= by_m {
        let n_tiles = n_tiles.div_ceil(by_n);
        runs(granules, by_n, |g0, granules| CoreWork {
            g0,
            granules,
            n_tiles,
            ..all
        })
    } else {
        runs(m_tiles, by_m, |t0, m_tiles| CoreWork { t0, m_tiles, ..all })
    };
    Split { cores }
}

/// One core's work per run of [`even`]`(total, parts)`: `work(first, len)`.
fn runs(total: u32, parts: u32, work: impl Fn(u32, u32) -> CoreWork) -> Vec<CoreWork> {
    let mut first = 0;
    even(total, parts)
        .map(|len| {
            let w = work(first, len);
            first += len;
            w
        })
        .collect()
}

/// The tasks of a plan, dealt to cores.
struct Tiles {
    tasks: Vec<TaskTile>,
    per_core: Vec<usize>,
    n_tile: u32,
    c_bytes: u64,
}

/// Data banks a task of `rows` rows of `ai` channels takes (as [`SingleMatmul`] sets
/// them), plus `spare`.
fn task_data_banks(rows: u32, ai: u32, dtype: Dtype, spare: bool) -> u64 {
    u64::from(super::single::data_banks(rows, ai, dtype)) + u64::from(spare)
}

/// One core's tasks in the order that lets the CBUF keep the most bytes, with their
/// [`Reuse`]: column tile, wave, M tile (consecutive tasks share weights, kept when a
/// column tile's weights fit the weight banks) or wave, M tile, column tile
/// (consecutive tasks share an A block). Reuse needs the same bank split as the task
/// before (docs/hardware/cbuf.md#reuse); an int8 core whose tasks reuse takes a spare data bank on every task,
/// so it reuses only where that bank is free.
fn core_tasks(
    layout: &WeightLayout,
    work: &CoreWork,
    m_rows: &[(u32, u32)],
    tiles: &[(u32, u32)],
) -> Vec<TaskTile> {
    let bits = layout.dtype.bits() as u64;
    let ai = |w: u32| layout.waves[w as usize].ai;
    let waves = work.w0..work.w0 + work.waves;
    let m_tiles = work.t0..work.t0 + work.m_tiles;
    let int8 = layout.dtype == Dtype::Int8;
    let group = layout.dtype.kernels_per_atom().max(32) as u64;
    // An int8 spare bank must leave the weight banks at least 2 and one kernel group.
    let spare = int8
        && waves.clone().all(|w| {
            m_tiles.clone().all(|mt| {
                let db = task_data_banks(m_rows[mt as usize].1, ai(w), layout.dtype, true);
                db <= 10 && group * ai(w) as u64 * bits / 8 <= (12 - db) * BANK
            })
        });
    let can_reuse = !int8 || spare;
    let banks = |rows, w| task_data_banks(rows, ai(w), layout.dtype, spare);
    let same_split = |w: u32| {
        let first = banks(m_rows[work.t0 as usize].1, w);
        m_tiles
            .clone()
            .all(|mt| banks(m_rows[mt as usize].1, w) == first)
    };
    // Weights kept: a column tile's weights within the weight banks of every M tile.
    let weights_fit = |w: u32, nt: u32| {
        same_split(w)
            && nt as u64 * ai(w) as u64 * bits / 8
                <= (12 - banks(m_rows[work.t0 as usize].1, w)) * BANK
    };
    let mut weight_saving = 0u64;
    let mut data_saving = 0u64;
    if can_reuse {
        for w in waves.clone() {
            for &(_, nt) in tiles {
                if work.m_tiles > 1 && weights_fit(w, nt) {
                    weight_saving +=
                        (work.m_tiles as u64 - 1) * nt as u64 * ai(w) as u64 * bits / 8;
                }
            }
            for mt in m_tiles.clone() {
                let rows = m_rows[mt as usize].1 as u64;
                data_saving +=
                    (tiles.len() as u64).saturating_sub(1) * rows * ai(w) as u64 * bits / 8;
            }
        }
    }
    let task = |w: u32, mt: u32, (n0, nt): (u32, u32)| {
        let (m0, rows) = m_rows[mt as usize];
        TaskTile {
            core: 0,
            wave: w,
            m0,
            rows,
            n0,
            nt,
            a_offset: 0,
            c_offset: 0,
            reuse: Reuse::None,
            spare_data_bank: false,
        }
    };
    let mut v = Vec::with_capacity(tiles.len() * work.waves as usize * work.m_tiles as usize);
    if data_saving > weight_saving {
        for w in waves.clone() {
            for mt in m_tiles.clone() {
                for (i, &tile) in tiles.iter().enumerate() {
                    let reuse = if i > 0 { Reuse::Data } else { Reuse::None };
                    v.push(TaskTile {
                        reuse,
                        ..task(w, mt, tile)
                    });
                }
            }
        }
    } else {
        for &tile in tiles {
            for w in waves.clone() {
                let keep = weight_saving > 0 && work.m_tiles > 1 && weights_fit(w, tile.1);
                for (i, mt) in m_tiles.clone().enumerate() {
                    let reuse = if keep && i > 0 {
                        Reuse::Weights
                    } else {
                        Reuse::None
                    };
                    v.push(TaskTile {
                        reuse,
                        ..task(w, mt, tile)
                    });
                }
            }
        }
    }
    let reusing = v.iter().any(|t| t.reuse != Reuse::None);
    for t in &mut v {
        t.spare_data_bank = int8 && reusing;
    }
    v
}

/// Deals the work to cores: each core's column range is cut into its tiles (even runs
/// of granules) and run over the core's waves and M tiles in the order
/// [`core_tasks`] chooses. `a_offsets[wave][m tile]` locate the A blocks; C blocks are
/// laid out in task order.
fn deal_tiles(
    layout: &WeightLayout,
    m_rows: &[(u32, u32)],
    a_offsets: &[Vec<u64>],
    (split, granule): (&Split, u32),
    part: OutType,
) -> Result<Tiles> {
    let mut tasks = Vec::new();
    let mut per_core = Vec::new();
    let (mut c_bytes, mut n_tile) = (0u64, 0u32);
    for (core, work) in split.cores.iter().enumerate() {
        let mut tiles = Vec::with_capacity(work.n_tiles as usize);
        let mut g = work.g0;
        for tile in even(work.granules, work.n_tiles) {
            tiles.push((g * granule, tile * granule));
            n_tile = n_tile.max(tile * granule);
            g += tile;
        }
        let mine = core_tasks(layout, work, m_rows, &tiles);
        if mine.len() > MAX_TASKS {
            return Err(unsupported(format!(
                "core {core} would run {} tasks; one submission counts at most {MAX_TASKS}",
                mine.len()
            )));
        }
        per_core.push(mine.len());
        for t in mine {
            let mt = m_rows.partition_point(|&(m0, _)| m0 < t.m0);
            tasks.push(TaskTile {
                core: core as u32,
                a_offset: a_offsets[t.wave as usize][mt],
                c_offset: c_bytes,
                ..t
            });
            c_bytes += t.rows as u64 * t.nt as u64 * part.bytes() as u64;
        }
    }
    debug_assert!(layout.n_pad >= n_tile);
    Ok(Tiles {
        tasks,
        per_core,
        n_tile,
        c_bytes,
    })
}

/// Refuses, before any task list is built, a plan whose busiest core would count more
/// than [`MAX_TASKS`] tasks or whose buffers would not fit the 32-bit NPU address
/// space: both follow from the tile counts alone (saturating, so any `u32` shape is
/// refused without overflow).
fn check_size(spec: &MatmulSpec, layout: &WeightLayout, split: &Split) -> Result<()> {
    let waves = layout.waves.len() as u64;
    let busiest = split
        .cores
        .iter()
        .map(|w| w.n_tiles as u64 * w.waves as u64 * w.m_tiles as u64)
        .max()
        .unwrap_or(0);
    if busiest > MAX_TASKS as u64 {
        return Err(unsupported(format!(
            "{}x{}x{} needs {busiest} tasks on the busiest core; one submission counts at most {MAX_TASKS}",
            spec.m, spec.k, spec.n
        )));
    }
    let sum_ai: u64 = layout.waves.iter().map(|w| w.ai as u64).sum();
    let a = spec.m as u64 * sum_ai * spec.dtype.bits() as u64 / 8;
    let part = written_type(spec, layout.waves.len()).bytes() as u64;
    let c = waves * spec.m as u64 * layout.n_pad as u64 * part;
    if a + layout.bytes + c > u32::MAX as u64 {
        return Err(unsupported(format!(
            "the buffers (A {a}, weights {}, C {c} bytes) exceed the 4 GiB NPU address space",
            layout.bytes
        )));
    }
    Ok(())
}

impl Plan {
    /// Plans `spec`, or says why it cannot be run, against the layout
    /// [`WeightLayout::for_max_rows`] gives for its M. Shapes that would need more
    /// tasks than one submission counts, or buffers beyond the 32-bit address space,
    /// are refused with [`Error::Unsupported`] from arithmetic alone, before any task
    /// list is built (so any `u32` shape is cheap to refuse).
    pub fn new(spec: MatmulSpec) -> Result<Plan> {
        if spec.m == 0 {
            return Err(unsupported(format!(
                "empty shape {}x{}x{}",
                spec.m, spec.k, spec.n
            )));
        }
        let layout = WeightLayout::for_max_rows(spec.k, spec.n, spec.dtype, spec.m)?;
        Plan::for_layout(&layout, spec.m, spec.out, spec.cores)
    }

    /// Plans `m` rows against a weight bank of `layout`, on at most `cores` cores,
    /// writing `out`. The layout is taken as given: only M tiles, N tiles and cores are
    /// chosen, so a plan for another M costs microseconds, not a repack. The cores split
    /// the columns (or, with fewer column granules than cores, the M tiles); when they
    /// divide the K waves they may split K instead, if the cost model
    /// ([`cost::HardwareProfile::rk3588`]) predicts that faster (A is then read once, not
    /// once per core).
    pub fn for_layout(layout: &WeightLayout, m: u32, out: OutType, cores: u32) -> Result<Plan> {
        let profile = cost::HardwareProfile::rk3588();
        Ok(Plan::costed_split(layout, m, out, (cores, &profile))?.0)
    }

    /// How plans are ranked on `profile`: predicted time, then bytes moved.
    fn rank(&self, profile: &cost::HardwareProfile) -> Result<(f64, u64)> {
        let c = self.cost(profile)?;
        Ok((c.seconds, c.read_bytes + c.written_bytes))
    }

    /// [`Plan::for_layout`]'s choice on `profile`, with the winner's rank when the choice
    /// needed one. The cores could split K instead of N when they divide the waves:
    /// fewer bytes (A once), but the short last wave may leave one core the most work.
    fn costed_split(
        layout: &WeightLayout,
        m: u32,
        out: OutType,
        (cores, profile): (u32, &cost::HardwareProfile),
    ) -> Result<(Plan, Option<(f64, u64)>)> {
        let by_n = Plan::split(layout, m, out, (cores, false))?;
        let waves = layout.waves.len() as u32;
        if cores < 2 || waves < cores || !waves.is_multiple_of(cores) {
            return Ok((by_n, None));
        }
        let by_k = Plan::split(layout, m, out, (cores, true))?;
        let (k, n) = (by_k.rank(profile)?, by_n.rank(profile)?);
        Ok(if k < n {
            (by_k, Some(k))
        } else {
            (by_n, Some(n))
        })
    }

    /// [`Plan::for_layout`] with the cores splitting K (`by_k`) or else N or M.
    fn split(
        layout: &WeightLayout,
        m: u32,
        out: OutType,
        (cores, by_k): (u32, bool),
    ) -> Result<Plan> {
        let (k, n, dtype) = (layout.k, layout.n, layout.dtype);
        let spec = MatmulSpec {
            m,
            k,
            n,
            dtype,
            out,
            cores,
        };
        if m == 0 {
            return Err(unsupported(format!("empty shape {m}x{k}x{n}")));
        }
        if !(1..=3).contains(&cores) {
            return Err(unsupported(format!("{cores} cores: the RK3588 has 1 to 3")));
        }
        if let Some(max) = layout.max_rows.filter(|&max| m > max) {
            return Err(unsupported(format!(
                "{m} rows against a single-token layout (int8 waves of {} channels are computed correctly for at most {max} rows); use WeightLayout::new",
                layout.k_tile()
            )));
        }
        let ok_out = match dtype {
            Dtype::Int8 => matches!(out, OutType::Int32 | OutType::Fp32),
            Dtype::Int4 => matches!(out, OutType::Int32 | OutType::Int16),
            Dtype::Fp16 => matches!(out, OutType::Fp32 | OutType::Fp16),
            Dtype::Bf16 => out == OutType::Fp32,
            _ => false,
        };
        if !ok_out {
            return Err(Error::Precision {
                input: dtype.name(),
                weights: dtype.name(),
                output: out.name(),
            });
        }
        let waves = &layout.waves;
        if dtype == Dtype::Int8 && out == OutType::Fp32 && waves.len() > 1 {
            // The DPU casts one task's int32 sums to fp32; the host does not sum casts.
            return Err(unsupported(format!(
                "int8 with fp32 output needs K within one wave (at most {} channels): K = {k} takes {} waves",
                layout.k_tile(),
                waves.len()
            )));
        }
        if out == OutType::Fp16 && waves.len() > 1 {
            // The DPU converts one task's fp32 sums; partials of several waves would be
            // summed and rounded on the host instead, which is not the NPU's fp16.
            return Err(unsupported(format!(
                "fp16 output needs K within one wave (at most {} channels): K = {k} takes {} waves, whose fp32 partials are summed on the host",
                layout.k_tile(),
                waves.len()
            )));
        }
        let bits = dtype.bits() as u64;
        let ai_max = waves.iter().map(|w| w.ai).max().unwrap_or(32);
        let mut rows_fit = tile_rows(dtype, ai_max)?;
        if dtype == Dtype::Int8 && out == OutType::Fp32 {
            // int8 → fp32 tasks feed the DPU's dequantisation task, which its source
            // (happyme531/rknpu2_matmul_open) limits to M tiles of at most 128 rows.
            rows_fit = rows_fit.min(128);
        }
        let granule = if dtype == Dtype::Int4 { 64 } else { 32 };
        let n_max = if dtype == Dtype::Int8 {
            INT8_MAX_N_TILE
        } else {
            FLOAT_MAX_CHANNELS
        };
        let granules = layout.n_pad / granule;
        // Even M tiles: as few as fit, as equal as can be; when cores split M (too few
        // column granules to split N), a multiple of the cores so that each core runs
        // as many tiles as the others.
        let mut m_tiles = m.div_ceil(rows_fit);
        if !by_k && cores.min(m_tiles) > cores.min(granules) {
            m_tiles = m_tiles.next_multiple_of(cores).min(m);
        }
        let m_tile = m.div_ceil(m_tiles);
        let split = split_cores(
            granules,
            (m_tiles, waves.len() as u32),
            (cores, by_k),
            granules.div_ceil(n_max / granule),
        );
        check_size(&spec, layout, &split)?;
        // A blocks: one per wave and M tile.
        let mut m_rows = Vec::with_capacity(m_tiles as usize);
        let mut m0 = 0;
        for rows in even(m, m_tiles) {
            m_rows.push((m0, rows));
            m0 += rows;
        }
        let mut a_bytes = 0u64;
        let a_offsets: Vec<Vec<u64>> = waves
            .iter()
            .map(|w| {
                m_rows
                    .iter()
                    .map(|&(_, rows)| {
                        let at = a_bytes;
                        a_bytes += rows as u64 * w.ai as u64 * bits / 8;
                        at
                    })
                    .collect()
            })
            .collect();
        let t = deal_tiles(
            layout,
            &m_rows,
            &a_offsets,
            (&split, granule),
            written_type(&spec, waves.len()),
        )?;
        if a_bytes + layout.bytes + t.c_bytes > u32::MAX as u64 {
            return Err(unsupported(
                "the buffers exceed the 4 GiB NPU address space".into(),
            ));
        }
        Ok(Plan {
            spec,
            layout: layout.clone(),
            m_tile,
            n_tile: t.n_tile,
            tasks: t.tasks,
            per_core: t.per_core,
            a_bytes,
            c_bytes: t.c_bytes,
        })
    }

    /// The plan whose cost on `profile` ([`cost`]) is least, among the candidate layouts
    /// (the widest waves, then narrower ones that need fewer M tiles) each planned on 1
    /// to `spec.cores` cores: the plan a one-off product should run (a backend's bank,
    /// packed once for many M, takes its layout from the M it expects most,
    /// [`WeightLayout::cheapest_for`]). Ordered by predicted time, then by bytes moved
    /// (a plan bound by its MACs takes as long with fewer bytes, and leaves DRAM to the
    /// CPU), then by fewer waves and more cores; deterministic. The plan keeps
    /// `spec.cores` as its maximum even when fewer cores won.
    pub fn cheapest(spec: MatmulSpec, profile: &cost::HardwareProfile) -> Result<Plan> {
        if spec.m == 0 {
            return Err(unsupported(format!(
                "empty shape {}x{}x{}",
                spec.m, spec.k, spec.n
            )));
        }
        let mut best: Option<((f64, u64), Plan)> = None;
        let mut first_err = None;
        for layout in WeightLayout::candidates(spec.k, spec.n, spec.dtype, spec.m, spec.cores)? {
            for cores in (1..=spec.cores.max(1)).rev() {
                let plan = Plan::costed_split(&layout, spec.m, spec.out, (cores, profile))
                    .and_then(|(mut p, rank)| {
                        let rank = match rank {
                            Some(r) => r,
                            None => p.rank(profile)?,
                        };
                        p.spec.cores = spec.cores;
                        Ok((rank, p))
                    });
                match plan {
                    Ok((key, p)) => {
                        if best.as_ref().is_none_or(|(b, _)| key < *b) {
                            best = Some((key, p));
                        }
                    }
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        match best {
            Some((_, p)) => Ok(p),
            None => Err(first_err.unwrap_or_else(|| unsupported("no candidate layout".into()))),
        }
    }

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
    /// fp16 result, which the DPU converts itself (`OutType::Fp16` in each task; the plan
    /// has one wave), and an int8 plan with fp32 output, whose one wave the DPU casts
    /// (exact for sums within ±2²⁴, rounded to nearest even beyond).
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
        let mut task = mm.task_at(a, offset(b, self.b_offset(t))?, offset(c, t.c_offset)?, c)?;
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
            12 - self.data_banks(),
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
