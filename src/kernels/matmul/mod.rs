//! Matmul for any shape: a plan (tiles, K waves, CBUF banks, cores), the program it
//! implies, packers between row-major host matrices and the buffers the tasks read and
//! write, and the host reduction of partial results. Pure: shapes and values in, bytes
//! and programs out. Execution on a device is [`crate::device::matmul`]'s.
//!
//! A plan cuts `C[M×N] = A[M×K] · B[K×N]` into tasks, each one
//! [`SingleMatmul`] of `rows × kw × nt`:
//!
//! * **K waves** of at most `k_tile` channels: int8 ≤ 4096 and never in (3072, 4096) with
//!   more than 4 rows (matmul-recipe.md quirk 4), fp16 ≤ 4096, int4 ≤ 480 so the int16
//!   sums cannot saturate (quirk 13). Partial results are summed on the host: int32 sums
//!   modulo 2³² (bit-identical to one accumulation), int16 partials widened to int32,
//!   fp32 partials in f64 and rounded once.
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

pub mod pack;

use super::single::{Dtype, Layout, OutType, SingleMatmul};
use crate::error::{Error, Result};
use crate::float::{f16_to_f32, f32_to_f16};
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
    /// Result type: int32 (int8, int4), int16 (int4), fp32 or fp16 (fp16).
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

/// The partial-result type of a wave.
fn partial_type(dtype: Dtype) -> OutType {
    match dtype {
        Dtype::Int4 => OutType::Int16,
        Dtype::Fp16 | Dtype::Bf16 => OutType::Fp32,
        _ => OutType::Int32,
    }
}

/// K waves of at most 4096 channels (480 for int4, so int16 sums cannot saturate),
/// avoiding int8 K tiles in (3072, 4096) for more than 4 rows (matmul-recipe.md quirk 4).
fn k_waves(k: u32, m: u32, dtype: Dtype) -> Vec<Wave> {
    let k_max = match dtype {
        Dtype::Int4 => 480,
        _ => 4096,
    };
    let mut count = k.div_ceil(k_max);
    loop {
        let kw = k.div_ceil(count).next_multiple_of(32).min(k);
        let kw_pad = kw.next_multiple_of(32);
        if dtype == Dtype::Int8 && m > 4 && kw_pad > 3072 && kw_pad < 4096 {
            count += 1;
            continue;
        }
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
        return v;
    }
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

impl Plan {
    /// Plans `spec`, or says why it cannot be run.
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
        let waves = k_waves(k, m, dtype);
        let ai_max = waves.iter().map(|w| w.ai).max().unwrap_or(32) as u64;
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
        let n_pad = n.next_multiple_of(granule);
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
        let t = deal_tiles(
            &waves,
            (m, m_tile),
            (n_pad, n_tile),
            cores,
            partial_type(dtype),
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
            out: partial_type(self.spec.dtype),
            ..SingleMatmul::new(t.rows, w.kw, t.nt, self.spec.dtype)
        }
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

    /// Packs A (row-major M×K integers) into the A buffer.
    pub fn pack_a_int(&self, a: &[i32]) -> Result<Vec<u8>> {
        self.pack_a(
            a.len(),
            |m, k| a[m * self.spec.k as usize + k],
            |mm, vals| mm.pack_a_int(vals),
        )
    }

    /// Packs A (row-major M×K) into the A buffer, rounding to fp16.
    pub fn pack_a_f32(&self, a: &[f32]) -> Result<Vec<u8>> {
        self.pack_a(
            a.len(),
            |m, k| a[m * self.spec.k as usize + k],
            |mm, vals| mm.pack_a_f32(vals),
        )
    }

    fn pack_a<T: Copy>(
        &self,
        len: usize,
        get: impl Fn(usize, usize) -> T,
        pack: impl Fn(&SingleMatmul, &[T]) -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let (m, k) = (self.spec.m as usize, self.spec.k as usize);
        if len != m * k {
            return Err(unsupported(format!(
                "A has {len} elements, the shape needs {}",
                m * k
            )));
        }
        let mut out = vec![0u8; self.a_bytes as usize];
        // One block per (wave, M tile): the tasks of the first column tile name them all.
        let mut seen = std::collections::HashSet::new();
        for t in &self.tasks {
            if !seen.insert(t.a_offset) {
                continue;
            }
            let w = self.waves[t.wave as usize];
            let mm = self.task_matmul(t);
            let mut vals = Vec::with_capacity(t.rows as usize * w.kw as usize);
            for r in 0..t.rows as usize {
                for c in 0..w.kw as usize {
                    vals.push(get(t.m0 as usize + r, w.k0 as usize + c));
                }
            }
            let block = pack(&mm, &vals)?;
            out[t.a_offset as usize..t.a_offset as usize + block.len()].copy_from_slice(&block);
        }
        Ok(out)
    }

    /// Sums the partial blocks of the C buffer into row-major M×N integers: int32
    /// partials modulo 2³², int16 partials widened; the result's type is the spec's
    /// (an int16 result saturates).
    pub fn reduce_int(&self, c: &[u8]) -> Result<Vec<i64>> {
        if self.spec.dtype.is_float() {
            return Err(unsupported("integer reduction of a float matmul".into()));
        }
        self.check_c(c)?;
        let n = self.spec.n as usize;
        let mut acc = vec![0i32; self.spec.m as usize * n];
        let int16 = partial_type(self.spec.dtype) == OutType::Int16;
        self.for_each_partial(c, |m, col, e| {
            let v = if int16 {
                i16::from_le_bytes([e[0], e[1]]) as i64
            } else {
                i32::from_le_bytes([e[0], e[1], e[2], e[3]]) as i64
            };
            let a = &mut acc[m * n + col];
            *a = a.wrapping_add(v as i32);
        });
        Ok(acc
            .into_iter()
            .map(|v| match self.spec.out {
                OutType::Int16 => (v as i64).clamp(i16::MIN as i64, i16::MAX as i64),
                _ => v as i64,
            })
            .collect())
    }

    /// Sums fp32 partial blocks in f64 and rounds once to the spec's output (fp32 or fp16).
    pub fn reduce_f32(&self, c: &[u8]) -> Result<Vec<f32>> {
        if !self.spec.dtype.is_float() {
            return Err(unsupported("float reduction of an integer matmul".into()));
        }
        self.check_c(c)?;
        let n = self.spec.n as usize;
        let mut acc = vec![0f64; self.spec.m as usize * n];
        self.for_each_partial(c, |m, col, e| {
            acc[m * n + col] += f32::from_le_bytes([e[0], e[1], e[2], e[3]]) as f64
        });
        Ok(acc
            .into_iter()
            .map(|v| match self.spec.out {
                OutType::Fp16 => f16_to_f32(f32_to_f16(v as f32)),
                _ => v as f32,
            })
            .collect())
    }

    fn check_c(&self, c: &[u8]) -> Result<()> {
        if (c.len() as u64) < self.c_bytes {
            return Err(unsupported(format!(
                "C has {} bytes, the plan writes {}",
                c.len(),
                self.c_bytes
            )));
        }
        Ok(())
    }

    /// Visits every integer partial `(row, column, value)` inside the real N columns.
    /// Visits every partial `(row, column, element bytes)` inside the real N columns;
    /// blocks are `[nt/E][rows][E]` of the plan's partial type.
    fn for_each_partial(&self, c: &[u8], mut f: impl FnMut(usize, usize, &[u8])) {
        let part = partial_type(self.spec.dtype);
        let (size, epa) = (part.bytes() as usize, part.atom_elems() as usize);
        for t in &self.tasks {
            let base = t.c_offset as usize;
            let cols = (self.spec.n.saturating_sub(t.n0)).min(t.nt) as usize;
            for r in 0..t.rows as usize {
                for j in 0..cols {
                    let o = base + ((j / epa) * t.rows as usize + r) * 16 + (j % epa) * size;
                    f(t.m0 as usize + r, t.n0 as usize + j, &c[o..o + size]);
                }
            }
        }
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

/// Packs B for a plan: each wave's rows `k0 .. k0 + kw` over the padded N in the weight
/// atom layout, waves back to back (the weight bank's bytes).
pub fn pack_weights_int(plan: &Plan, b: &[i32]) -> Result<Vec<u8>> {
    pack_weights(
        plan,
        b.len(),
        |mm, vals| mm.pack_b_int(vals),
        |k, n| b[k * plan.spec.n as usize + n],
        0,
    )
}

/// Packs B (row-major K×N) for a plan, rounding to fp16.
pub fn pack_weights_f32(plan: &Plan, b: &[f32]) -> Result<Vec<u8>> {
    pack_weights(
        plan,
        b.len(),
        |mm, vals| mm.pack_b_f32(vals),
        |k, n| b[k * plan.spec.n as usize + n],
        0.0,
    )
}

/// Packs integer B given as N×K (each output's K weights contiguous, the layout of an
/// `[out_features][in_features]` matrix).
pub fn pack_weights_int_nk(plan: &Plan, bt: &[i32]) -> Result<Vec<u8>> {
    let k = plan.spec.k as usize;
    pack_weights(
        plan,
        bt.len(),
        |mm, vals| mm.pack_b_int(vals),
        |kk, n| bt[n * k + kk],
        0,
    )
}

/// Packs B given as N×K, rounding to fp16.
pub fn pack_weights_f32_nk(plan: &Plan, bt: &[f32]) -> Result<Vec<u8>> {
    let k = plan.spec.k as usize;
    pack_weights(
        plan,
        bt.len(),
        |mm, vals| mm.pack_b_f32(vals),
        |kk, n| bt[n * k + kk],
        0.0,
    )
}

/// Applies per-token (row) and per-channel (column) scales on the host to an integer
/// product, as quantised LLM layers do: `C'[m][n] = C[m][n] · row[m] · col[n]` (an empty
/// slice means scale 1). The scales must cover every row and column.
pub fn dequantize(c: &[i64], m: usize, n: usize, row: &[f32], col: &[f32]) -> Result<Vec<f32>> {
    if c.len() != m * n
        || !(row.is_empty() || row.len() == m)
        || !(col.is_empty() || col.len() == n)
    {
        return Err(unsupported(format!(
            "{} results of {m}x{n} with {} row and {} column scales",
            c.len(),
            row.len(),
            col.len()
        )));
    }
    Ok(c.iter()
        .enumerate()
        .map(|(i, &v)| {
            let r = row.get(i / n).copied().unwrap_or(1.0);
            let s = col.get(i % n).copied().unwrap_or(1.0);
            (v as f64 * r as f64 * s as f64) as f32
        })
        .collect())
}

fn pack_weights<T: Copy>(
    plan: &Plan,
    len: usize,
    pack: impl Fn(&SingleMatmul, &[T]) -> Result<Vec<u8>>,
    get: impl Fn(usize, usize) -> T,
    zero: T,
) -> Result<Vec<u8>> {
    let s = &plan.spec;
    if len != (s.k * s.n) as usize {
        return Err(unsupported(format!(
            "B has {len} elements, the shape needs {}",
            s.k * s.n
        )));
    }
    let mut out = Vec::with_capacity(plan.b_bytes as usize);
    for w in &plan.waves {
        let mm = SingleMatmul::new(1, w.kw, plan.n_pad, s.dtype);
        let mut vals = Vec::with_capacity(w.kw as usize * plan.n_pad as usize);
        for k in 0..w.kw as usize {
            for n in 0..plan.n_pad as usize {
                vals.push(if n < s.n as usize {
                    get(w.k0 as usize + k, n)
                } else {
                    zero
                });
            }
        }
        out.extend_from_slice(&pack(&mm, &vals)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
