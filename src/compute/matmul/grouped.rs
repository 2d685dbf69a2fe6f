//! Grouped int8 quantisation: weights with a scale per group of K input channels and
//! output channel, activations with a scale per row and group, as the vendor runtime's
//! grouped W8A8 types quantise (`w8a8_g128` and its kin) and as GGUF's block formats
//! keep their weights. Each group is one K wave of the bank's layout, so every wave's
//! integer sums are dequantised on the NPU with that group's scales
//! (`npu_dequant`, docs/matmul.md "Grouped int8") and the host adds the waves.

use super::{Matmul, WeightBank, Weights};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernels::matmul::WeightLayout;
use crate::kernels::matmul::quant::quantize_rows_i8_into;
use crate::kernels::single::{Dtype, dequant_scale_bits};
use half::f16;

/// Quantises `x` (rows of `k` values, row-major) to int8 with one scale per row and
/// group of `group` values (the last group of a row shorter when `group` does not divide
/// `k`): `(values, scales)`, the scales row-major (`rows × ⌈k / group⌉`). Non-finite
/// values are refused, as [`quantize_rows_i8_into`] refuses them.
pub fn quantize_groups_i8(x: &[f32], k: usize, group: usize) -> Result<(Vec<i8>, Vec<f32>)> {
    if k == 0 || group == 0 || !x.len().is_multiple_of(k) {
        return Err(Error::ShapeMismatch {
            what: "grouped values (whole rows of k > 0, groups > 0)",
            expected: x.len().next_multiple_of(k.max(1)) as u64,
            actual: x.len() as u64,
        });
    }
    let groups = k.div_ceil(group);
    let mut q = vec![0i8; x.len()];
    let mut s = vec![0f32; x.len() / k * groups];
    if k.is_multiple_of(group) {
        // Whole groups: row-major, they are rows of `group` values, in order.
        quantize_rows_i8_into(x, group, &mut q, &mut s)?;
        return Ok((q, s));
    }
    for (((r, row), qrow), srow) in x
        .chunks_exact(k)
        .enumerate()
        .zip(q.chunks_exact_mut(k))
        .zip(s.chunks_exact_mut(groups))
    {
        for (((g, seg), qseg), scale) in row
            .chunks(group)
            .enumerate()
            .zip(qrow.chunks_mut(group))
            .zip(srow.iter_mut())
        {
            // A refused value is named by its index in `x`, as in the whole-group path.
            quantize_rows_i8_into(seg, seg.len(), qseg, std::slice::from_mut(scale)).map_err(
                |e| match e {
                    Error::OutOfRange {
                        what,
                        index,
                        value,
                        range,
                    } => Error::OutOfRange {
                        what,
                        index: index + r * k + g * group,
                        value,
                        range,
                    },
                    e => e,
                },
            )?;
        }
    }
    Ok((q, s))
}

impl WeightBank {
    /// `n × k` f32 weights (`[out][in]`) quantised to int8 with a scale per group of
    /// `group` input channels and output channel, in the layout whose K waves are those
    /// groups (`WeightLayout::with_k_tile(k, n, Int8, group)`: `group` a multiple of 32 of
    /// at most 4096; the last group shorter when it does not divide `k`). A matmul against
    /// it quantises its activations per row and group and dequantises every group on the
    /// NPU ([`super::Matmul::mul_mat`] and [`super::Matmul::mul_mat_quantized`] only).
    ///
    /// Errors: a group the layout cannot make a wave [`Error::Unsupported`]; weights of
    /// another length [`Error::ShapeMismatch`]; non-finite weights, and scales the NPU
    /// cannot read as fp16 (checked when a matmul is made), [`Error::OutOfRange`].
    pub fn quantize_f32_nk_grouped(
        dev: &Device,
        n: u32,
        k: u32,
        w: &[f32],
        group: u32,
    ) -> Result<WeightBank> {
        let group = WeightLayout::with_k_tile(k, n, Dtype::Int8, group)?.k_tile();
        let (q, by_channel) = quantize_groups_i8(w, k as usize, group as usize)?;
        WeightBank::from_i8_nk_grouped(dev, (n, k, group), &q, &by_channel)
    }

    /// A grouped bank from int8 values `q` (`n × k`, `[out][in]`) and their scales, one
    /// per output channel and group of `group` input channels, channel-major (`n ×
    /// ⌈k / group⌉`): `w[c][i] = q[c][i] · scales[c][i / group]`. GGUF's block formats
    /// of one scale per 32 values (Q8_0, Q4_0, Q5_0) are such banks exactly, with
    /// `group` 32 (`gguf::load_grouped`). The bank holds the scales in fp16, the
    /// precision the NPU's dequantisation reads them in (so a matmul's result is the
    /// same as from f32 scales), 2 bytes a group and channel. Errors as
    /// [`WeightBank::quantize_f32_nk_grouped`]; scales of another length
    /// [`Error::ShapeMismatch`], ones fp16 cannot carry (not finite, |s| ≥ 65520, or
    /// non-zero rounding to 0) [`Error::OutOfRange`].
    pub fn from_i8_nk_grouped(
        dev: &Device,
        (n, k, group): (u32, u32, u32),
        q: &[i8],
        scales: &[f32],
    ) -> Result<WeightBank> {
        let layout = WeightLayout::with_k_tile(k, n, Dtype::Int8, group)?;
        let group = layout.k_tile() as usize;
        let waves = layout.waves.len();
        if waves != (k as usize).div_ceil(group) {
            return Err(Error::Unsupported {
                what: "grouped int8 bank",
                why: format!(
                    "groups of {group} channels over K = {k} make {waves} waves, not one per group"
                ),
            });
        }
        let by_group = group_major("group scales", scales, n as usize, waves)?;
        let mut bank = WeightBank::from_nk_in(dev, &layout, Weights::I8(q))?;
        bank.group_scales = Some(by_group);
        Ok(bank)
    }

    /// A grouped int8 bank whose packed bytes and scales `fill` writes in place, with no
    /// `n × k` copy of the weights on the host: `fill(layout, bank, scales)` gets the
    /// layout of [`WeightBank::from_i8_nk_grouped`] for `(n, k, group)`, the bank's
    /// mapped buffer (`layout.bytes`, zeros when fresh; `fill` writes every byte, padding
    /// included) and the scales to set in fp16, group-major (`groups × n`, zeros). GGUF's
    /// Q8_0, Q4_0 and Q5_0 tensors load this way (`gguf::load_grouped`).
    ///
    /// The scales are taken as `fill` writes them: `fill` refuses a non-finite one with
    /// an error of its own (GGUF's fill names the block). Errors as
    /// [`WeightBank::from_i8_nk_grouped`], and `fill`'s own, which drop the buffer.
    pub(crate) fn from_i8_grouped_fill<E: From<Error>>(
        dev: &Device,
        (n, k, group): (u32, u32, u32),
        fill: impl FnOnce(&WeightLayout, &mut [u8], &mut [f16]) -> std::result::Result<(), E>,
    ) -> std::result::Result<WeightBank, E> {
        let layout = WeightLayout::with_k_tile(k, n, Dtype::Int8, group)?;
        let waves = layout.waves.len();
        if waves != (k as usize).div_ceil(layout.k_tile() as usize) {
            return Err(Error::Unsupported {
                what: "grouped int8 bank",
                why: format!("groups of {group} channels over K = {k} make {waves} waves"),
            }
            .into());
        }
        let mut scales = vec![f16::ZERO; waves * n as usize];
        let mut bank = WeightBank::create_with(dev, layout, |l, out| fill(l, out, &mut scales))?;
        bank.group_scales = Some(scales);
        Ok(bank)
    }

    /// A grouped bank of weights with an offset per group and output channel:
    /// `w[c][i] = q[c][i] · scales[c][g] + offsets[c][g]`, `g = i / group`, the offsets
    /// channel-major like the scales (`n × ⌈k / group⌉`). GGUF's types with minimums
    /// (Q4_1, Q4_K, Q5_K) are such banks exactly (`gguf::load_grouped`). A matmul
    /// against it computes `Σ_g s·(x_g · q_g)` on the NPU as for
    /// [`WeightBank::from_i8_nk_grouped`] and adds `Σ_g offset_g · Σ x_g` on the host
    /// (one multiply-add per row, group and output channel: `M·N·K / group`). The
    /// offsets are held in fp16 like the scales (each within 2⁻¹² of its value
    /// relatively; docs/gguf.md measures what that costs GGUF's types).
    ///
    /// Errors as [`WeightBank::from_i8_nk_grouped`]; offsets of another length
    /// [`Error::ShapeMismatch`], ones fp16 cannot carry [`Error::OutOfRange`].
    pub fn from_i8_nk_grouped_offset(
        dev: &Device,
        (n, k, group): (u32, u32, u32),
        q: &[i8],
        scales: &[f32],
        offsets: &[f32],
    ) -> Result<WeightBank> {
        let waves = (k as usize).div_ceil(group.max(1) as usize);
        let by_group = group_major("group offsets", offsets, n as usize, waves)?;
        let mut bank = WeightBank::from_i8_nk_grouped(dev, (n, k, group), q, scales)?;
        bank.group_offsets = Some(by_group);
        Ok(bank)
    }

    /// A grouped bank's offsets, one per group and output channel, group-major
    /// (`groups × n`), as it holds them (fp16); `None` for banks without
    /// ([`WeightBank::from_i8_nk_grouped_offset`]).
    pub fn group_offsets(&self) -> Option<&[f16]> {
        self.group_offsets.as_deref()
    }

    /// A grouped bank's scales, one per group and output channel, group-major
    /// (`groups × n`), as it holds them (fp16, what the NPU reads); `None` for other
    /// banks.
    pub fn group_scales(&self) -> Option<&[f16]> {
        self.group_scales.as_deref()
    }

    /// The bytes the bank holds: its device buffer (`layout().bytes`, padding
    /// included) and, on the host, its per-channel scales (4 bytes each) and a grouped
    /// bank's scales and offsets (2 bytes each). Not counted: what a [`Matmul`] against
    /// it allocates for itself (its activations, results and, for NPU dequantisation,
    /// a coefficient block of 4 bytes per channel and group, as the DPU reads them).
    pub fn held_bytes(&self) -> u64 {
        let len = |v: Option<usize>| v.unwrap_or(0) as u64;
        self.layout.bytes
            + 4 * len(self.scales.as_ref().map(Vec::len))
            + 2 * len(self.group_scales.as_ref().map(Vec::len))
            + 2 * len(self.group_offsets.as_ref().map(Vec::len))
    }

    /// A grouped bank's input channels per group (the last group may be shorter).
    pub fn group_size(&self) -> Option<u32> {
        self.group_scales.as_ref().map(|_| self.layout.k_tile())
    }
}

/// `values` given channel-major (`n × groups`), checked (length, fp16) and returned
/// group-major (`groups × n`) in fp16, as the NPU's coefficient blocks and the offset
/// term read them.
fn group_major(what: &'static str, values: &[f32], n: usize, groups: usize) -> Result<Vec<f16>> {
    super::shape(what, n * groups, values.len())?;
    let held = to_f16(what, values)?;
    let mut by_group = vec![f16::ZERO; values.len()];
    for (c, row) in held.chunks_exact(groups.max(1)).enumerate() {
        for (g, &v) in row.iter().enumerate() {
            by_group[g * n + c] = v;
        }
    }
    Ok(by_group)
}

/// `values` rounded to fp16 (to nearest even); one fp16 cannot carry (not finite, too
/// large, or non-zero rounding to 0) is [`Error::OutOfRange`] naming its index.
fn to_f16(what: &'static str, values: &[f32]) -> Result<Vec<f16>> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| dequant_scale_bits(what, i, v).map(f16::from_bits))
        .collect()
}

impl Matmul {
    /// Against a bank with group offsets: keeps each row's sum of `x` (row-major, `k`
    /// values a row) over every group, in f64 rounded once, for [`Matmul::add_group_offsets`].
    pub(super) fn keep_group_sums(&mut self, x: &[f32]) {
        self.group_sums.clear();
        if self.bank.group_offsets.is_none() {
            return;
        }
        let (k, group) = (self.k(), self.bank.layout.k_tile() as usize);
        for row in x.chunks_exact(k.max(1)) {
            self.group_sums.extend(
                row.chunks(group.max(1))
                    .map(|g| g.iter().map(|&v| f64::from(v)).sum::<f64>() as f32),
            );
        }
    }

    /// [`Matmul::keep_group_sums`] of int8 activations and their scales per row and
    /// group (what [`Matmul::mul_mat_quantized`] is given): the sums of the values the
    /// NPU multiplies.
    pub(super) fn keep_group_sums_i8(&mut self, a: &[i8], scales: &[f32]) {
        self.group_sums.clear();
        if self.bank.group_offsets.is_none() {
            return;
        }
        let (k, group) = (self.k(), self.bank.layout.k_tile() as usize);
        let groups = k.div_ceil(group.max(1));
        for (row, s) in a.chunks_exact(k.max(1)).zip(scales.chunks_exact(groups)) {
            self.group_sums.extend(
                row.chunks(group.max(1))
                    .zip(s)
                    .map(|(g, &s)| g.iter().map(|&v| i32::from(v)).sum::<i32>() as f32 * s),
            );
        }
    }

    /// Adds the offset term `Σ_g offset[g][c] · sum[r][g]` to each result `out[r][c]`
    /// (nothing for a bank without offsets).
    pub(super) fn add_group_offsets(&self, out: &mut [f32]) {
        let Some(offsets) = self.bank.group_offsets.as_deref() else {
            return;
        };
        let n = self.n();
        let groups = offsets.len() / n.max(1);
        for (row, sums) in out
            .chunks_exact_mut(n.max(1))
            .zip(self.group_sums.chunks_exact(groups.max(1)))
        {
            for (&s, off) in sums.iter().zip(offsets.chunks_exact(n)) {
                if s != 0.0 {
                    for (y, &c) in row.iter_mut().zip(off) {
                        *y += s * c.to_f32();
                    }
                }
            }
        }
    }
}
