//! Weight layouts: the K waves a bank is packed in, chosen for the rows and cores a
//! caller expects.

use super::*;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

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

    /// The layout for products of every row count in `rows` on at most `cores` cores:
    /// of the layouts worth costing for any of them, the one whose predicted total
    /// time on `profile` is closest to the best layout's, row count by row count (the
    /// smallest worst ratio; then fewer waves). What a bank is packed in when its
    /// caller declares the M it will run: [`DECODE_AND_PROMPTS`] when it does not (a
    /// layer of an LLM: one token at a time and prompts up to 512 rows).
    ///
    /// Every row count must plan against the chosen layout: an empty `rows`, a zero,
    /// or a set no layout serves is [`Error::Unsupported`]. The results type is the
    /// widest (int32, fp32).
    pub fn for_rows(
        k: u32,
        n: u32,
        dtype: Dtype,
        (rows, cores): (&[u32], u32),
        profile: &cost::HardwareProfile,
    ) -> Result<WeightLayout> {
        if rows.is_empty() || rows.contains(&0) {
            return Err(unsupported(format!("a layout for row counts {rows:?}")));
        }
        let out = match dtype {
            Dtype::Int8 | Dtype::Int4 => OutType::Int32,
            _ => OutType::Fp32,
        };
        let mut layouts: Vec<WeightLayout> = Vec::new();
        for &m in rows {
            for l in WeightLayout::candidates(k, n, dtype, m, cores)? {
                if !layouts.contains(&l) {
                    layouts.push(l);
                }
            }
        }
        // times[i][j]: layout i at rows[j], where it plans.
        let times: Vec<Vec<Option<f64>>> = layouts
            .iter()
            .map(|l| {
                rows.iter()
                    .map(|&m| {
                        let (plan, _) = Plan::costed_split(l, m, out, (cores, profile)).ok()?;
                        Some(plan.rank(profile).ok()?.0)
                    })
                    .collect()
            })
            .collect();
        let best: Vec<f64> = (0..rows.len())
            .map(|j| {
                times
                    .iter()
                    .filter_map(|t| t[j])
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        let worst = |t: &[Option<f64>]| -> Option<f64> {
            t.iter()
                .zip(&best)
                .map(|(t, b)| t.map(|t| t / b))
                .try_fold(0f64, |w, r| r.map(|r| w.max(r)))
        };
        let chosen = layouts
            .iter()
            .zip(&times)
            .filter_map(|(l, t)| Some((worst(t)?, l.waves.len(), l)))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        match chosen {
            Some((_, _, l)) => Ok(l.clone()),
            None => Err(unsupported(format!(
                "no layout of {k}x{n} {dtype:?} plans every row count of {rows:?}"
            ))),
        }
    }

    /// [`WeightLayout::for_rows`] of [`DECODE_AND_PROMPTS`] on `cores` cores of the
    /// RK3588's profile: the layout of a bank whose caller declares no M (the
    /// `WeightBank` constructors without a layout, GGUF loading, the C API). Int4 banks
    /// take the waves certified for their data ([`WeightLayout::certified_i4`]), which
    /// a caller without the data cannot know: for int4 this is [`WeightLayout::new`],
    /// the layout any int4 weights take, whose waves the certified ones are at least as
    /// wide as.
    ///
    /// The choice costs up to a millisecond and is a function of its arguments alone,
    /// while a backend asks for the same shapes each time it schedules a graph: the
    /// last few thousand are remembered.
    pub fn decode_and_prompts(k: u32, n: u32, dtype: Dtype, cores: u32) -> Result<WeightLayout> {
        type Chosen = HashMap<(u32, u32, Dtype, u32), WeightLayout>;
        static CHOSEN: OnceLock<Mutex<Chosen>> = OnceLock::new();
        const REMEMBERED: usize = 4096;
        if dtype == Dtype::Int4 {
            return WeightLayout::new(k, n, dtype);
        }
        let chosen = CHOSEN.get_or_init(Mutex::default);
        let key = (k, n, dtype, cores);
        // A panic elsewhere while the lock was held leaves a map of finished entries.
        if let Some(l) = chosen.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(l.clone());
        }
        let profile = cost::HardwareProfile::rk3588();
        let layout = WeightLayout::for_rows(k, n, dtype, (&DECODE_AND_PROMPTS, cores), &profile)?;
        let mut map = chosen.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= REMEMBERED {
            map.clear();
        }
        map.insert(key, layout.clone());
        Ok(layout)
    }

    /// The layouts worth costing for `m` rows on `cores` cores: the one
    /// [`WeightLayout::for_max_rows`] gives, then K splits into more, narrower waves.
    /// Narrower waves let more rows share the CBUF next to one weight group, so the
    /// weights are read fewer times, at the price of more tasks and more partial
    /// results. Of the splits giving the same number of M tiles only the one with the
    /// fewest waves is kept (more waves would only add partials), with the next wave
    /// count the cores divide (so they can split K); the list ends at one M tile or at
    /// the row limit, so it is short. Arithmetic until a split is kept.
    pub(super) fn candidates(
        k: u32,
        n: u32,
        dtype: Dtype,
        m: u32,
        cores: u32,
    ) -> Result<Vec<WeightLayout>> {
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

    pub(super) fn check_kind(k: u32, n: u32, dtype: Dtype) -> Result<()> {
        if k == 0 || n == 0 {
            return Err(unsupported(format!("empty weights {k}x{n}")));
        }
        if !matches!(dtype, Dtype::Int8 | Dtype::Int4 | Dtype::Fp16 | Dtype::Bf16) {
            return Err(unsupported(format!("{dtype:?} weights are not offered")));
        }
        Ok(())
    }

    /// The layout of `count` waves of `kw` channels (the last one shorter).
    pub(super) fn from_split(
        k: u32,
        n: u32,
        dtype: Dtype,
        (count, kw): (u32, u32),
    ) -> Result<WeightLayout> {
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

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
