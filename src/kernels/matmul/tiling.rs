//! Tiling arithmetic: row tiles, K waves, the split of work over cores and the tasks
//! of each core.

use super::*;
use crate::task::limits::MAX_DATA_BANKS;

/// Every CBUF bank of a core.
const BANKS: u64 = crate::task::cbuf::BANKS as u64;

/// The type the tasks of a plan with `waves` K waves write into C (see [`Plan::c_type`]).
pub(super) fn written_type(spec: &MatmulSpec, waves: usize) -> OutType {
    match spec.dtype {
        Dtype::Fp16 if spec.out == OutType::Fp16 && waves == 1 => OutType::Fp16,
        Dtype::Int8 if spec.out == OutType::Fp32 => OutType::Fp32,
        Dtype::Int4 => OutType::Int16,
        Dtype::Fp16 | Dtype::Bf16 => OutType::Fp32,
        _ => OutType::Int32,
    }
}

/// The K split: how many waves, of how many channels each (the last may be shorter):
/// at most 4096 channels (480 for int4, so int16 sums cannot saturate), avoiding int8 K
/// tiles in (3072, 4096) for more than 4 rows (quirk 4, docs/hardware/quirks.md#quirk-4). Arithmetic
/// only: nothing is allocated, so any `k` is cheap.
pub(super) fn k_split(k: u32, m: u32, dtype: Dtype) -> (u32, u32) {
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
pub(super) fn max_tile_rows(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::Int8 => 256,
        Dtype::Fp16 | Dtype::Bf16 => 365,
        _ => 128,
    }
}

/// The rows an M tile may have at `ai` channels: the weight banks hold one group of 32
/// kernels (int4: 64) and at least 2 banks (docs/hardware/cbuf.md#weight-groups, quirk 3, docs/hardware/quirks.md#quirk-3); the data banks are the rest,
/// for int4 at most the 8 measured on boards. Arithmetic only.
pub(super) fn tile_rows(dtype: Dtype, ai: u32) -> Result<u32> {
    let bits = dtype.bits() as u64;
    let group = dtype.kernels_per_atom().max(32) as u64;
    let weight_banks = (group * ai as u64 * bits / 8).div_ceil(BANK).max(2);
    if weight_banks > u64::from(MAX_DATA_BANKS) {
        return Err(unsupported(format!(
            "K tile {ai} needs {weight_banks} weight banks"
        )));
    }
    let data_banks = match dtype {
        Dtype::Int4 => (BANKS - weight_banks).min(8),
        _ => BANKS - weight_banks,
    };
    let row_bytes = (ai as u64 * bits / 8).max(1);
    Ok((data_banks * BANK / row_bytes).clamp(1, max_tile_rows(dtype) as u64) as u32)
}

/// The widest int4 wave for any weights: 480 × 64 ≤ 32767 (quirk 13, docs/hardware/quirks.md#quirk-13).
pub const I4_ANY_WEIGHTS: u32 = 480;
/// The widest int4 wave [`WeightLayout::certified_i4`] takes.
pub(super) const I4_CERTIFIED_MAX: u32 = 2048;
/// The largest Σ|w| of one output channel over a wave for which int16 sums of products
/// with activations in −8..=7 cannot saturate: 8 · 4095 = 32760 ≤ 32767.
pub(super) const I4_MAGNITUDE_MAX: u32 = 4095;

/// The waves of [`k_split`]; `count` is small by then (the layout refused more).
pub(super) fn k_waves(k: u32, kw: u32) -> Vec<Wave> {
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
pub(super) fn even(total: u32, parts: u32) -> impl Iterator<Item = u32> {
    (0..parts).map(move |i| total / parts + u32::from(i < total % parts))
}

/// One core's share of a plan: contiguous ranges of column granules, M tiles and K
/// waves, the columns cut into `n_tiles` tiles.
#[derive(Clone, Copy, Debug)]
pub(super) struct CoreWork {
    pub(super) g0: u32,
    pub(super) granules: u32,
    pub(super) t0: u32,
    pub(super) m_tiles: u32,
    pub(super) w0: u32,
    pub(super) waves: u32,
    pub(super) n_tiles: u32,
}

/// How the work is spread over cores.
pub(super) struct Split {
    pub(super) cores: Vec<CoreWork>,
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
/// `granules` is `(all, splittable)`: the cores split N only over `splittable` (1 when
/// the caller asks for an M split).
pub(super) fn split_cores(
    (granules, splittable): (u32, u32),
    (m_tiles, waves): (u32, u32),
    (cores, by_k): (u32, bool),
    n_tiles: u32,
) -> Split {
    let by_n = cores.min(splittable);
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
pub(super) fn runs(total: u32, parts: u32, work: impl Fn(u32, u32) -> CoreWork) -> Vec<CoreWork> {
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
pub(super) struct Tiles {
    pub(super) tasks: Vec<TaskTile>,
    pub(super) per_core: Vec<usize>,
    pub(super) n_tile: u32,
    pub(super) c_bytes: u64,
}

/// Data banks a task of `rows` rows of `ai` channels takes (as [`SingleMatmul`] sets
/// them), plus `spare`.
pub(super) fn task_data_banks(rows: u32, ai: u32, dtype: Dtype, spare: bool) -> u64 {
    u64::from(crate::kernels::single::data_banks(rows, ai, dtype)) + u64::from(spare)
}

/// One core's tasks in the order that lets the CBUF keep the most bytes, with their
/// [`Reuse`]: column tile, wave, M tile (consecutive tasks share weights, kept when a
/// column tile's weights fit the weight banks) or wave, M tile, column tile
/// (consecutive tasks share an A block). Reuse needs the same bank split as the task
/// before (docs/hardware/cbuf.md#reuse); an int8 core whose tasks reuse takes a spare data bank on every task,
/// so it reuses only where that bank is free.
pub(super) fn core_tasks(
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
                db <= u64::from(MAX_DATA_BANKS)
                    && group * ai(w) as u64 * bits / 8 <= (BANKS - db) * BANK
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
                <= (BANKS - banks(m_rows[work.t0 as usize].1, w)) * BANK
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
pub(super) fn deal_tiles(
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
pub(super) fn check_size(spec: &MatmulSpec, layout: &WeightLayout, split: &Split) -> Result<()> {
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
