//! Making plans: for a shape, for a layout, and the cheapest by the cost model.

use super::*;

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

    /// How plans are ranked on `profile`: predicted total time (NPU job and host work),
    /// then bytes moved.
    pub(super) fn rank(&self, profile: &cost::HardwareProfile) -> Result<(f64, u64)> {
        let c = self.cost(profile)?;
        Ok((c.total_s(), c.read_bytes + c.written_bytes))
    }

    /// [`Plan::for_layout`]'s choice on `profile`, with the winner's rank when the choice
    /// needed one. The cores could split K instead of N when they divide the waves:
    /// fewer bytes (A once), but the short last wave may leave one core the most work.
    pub(super) fn costed_split(
        layout: &WeightLayout,
        m: u32,
        out: OutType,
        (cores, profile): (u32, &cost::HardwareProfile),
    ) -> Result<(Plan, Option<(f64, u64)>)> {
        let by_n = Plan::split(layout, m, out, (cores, false), TileLimits::NONE)?;
        let waves = layout.waves.len() as u32;
        if cores < 2 || waves < cores || !waves.is_multiple_of(cores) {
            return Ok((by_n, None));
        }
        let by_k = Plan::split(layout, m, out, (cores, true), TileLimits::NONE)?;
        let (k, n) = (by_k.rank(profile)?, by_n.rank(profile)?);
        Ok(if k < n {
            (by_k, Some(k))
        } else {
            (by_n, Some(n))
        })
    }

    /// [`Plan::for_layout`] with M tiles of at most `limits.rows` rows and column tiles
    /// of at most `limits.cols` columns, the cores splitting N (or M, with fewer column
    /// granules than cores or when `limits.split_rows`): the plan closest to one another program ran, so that a
    /// published timing of that program can be held against the cost model plan for
    /// plan (tests/calibration.rs). The limits only shrink tiles; a limit below the
    /// granule (32 columns, int4 64; one row) is [`Error::Unsupported`].
    pub fn with_limits(
        layout: &WeightLayout,
        m: u32,
        out: OutType,
        cores: u32,
        limits: TileLimits,
    ) -> Result<Plan> {
        let granule = if layout.dtype == Dtype::Int4 { 64 } else { 32 };
        if limits.rows == 0 || limits.cols < granule {
            return Err(unsupported(format!(
                "tiles of at most {} rows and {} columns (at least 1 row and {granule} columns)",
                limits.rows, limits.cols
            )));
        }
        Plan::split(layout, m, out, (cores, false), limits)
    }

    /// [`Plan::for_layout`] with the cores splitting K (`by_k`) or else N or M, within
    /// `limits`.
    pub(super) fn split(
        layout: &WeightLayout,
        m: u32,
        out: OutType,
        (cores, by_k): (u32, bool),
        limits: TileLimits,
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
        let bits = dtype.bits() as u64;
        let ai_max = waves.iter().map(|w| w.ai).max().unwrap_or(32);
        let mut rows_fit = tile_rows(dtype, ai_max)?.min(limits.rows);
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
        }
        .min(limits.cols / granule * granule);
        let granules = layout.n_pad / granule;
        // Even M tiles: as few as fit, as equal as can be; when cores split M (too few
        // column granules to split N), a multiple of the cores so that each core runs
        // as many tiles as the others.
        let mut m_tiles = m.div_ceil(rows_fit);
        // The granules the cores may split: none when the limits ask for an M split.
        let split_granules = if limits.split_rows { 1 } else { granules };
        if !by_k && cores.min(m_tiles) > cores.min(split_granules) {
            m_tiles = m_tiles.next_multiple_of(cores).min(m);
        }
        let m_tile = m.div_ceil(m_tiles);
        let split = split_cores(
            (granules, split_granules),
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
    /// [`WeightLayout::cheapest_for`]). Ordered by predicted total time (the NPU job and
    /// the host's work around it, [`cost::Cost::total_s`]), then by bytes moved
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
}
