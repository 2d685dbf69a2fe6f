//! GGUF tensors as grouped int8 banks, one group per 32 values: Q8_0, Q4_0 and Q5_0 as
//! the file's integers and block scales ([`WeightBank::from_i8_nk_grouped`]); Q4_1, Q4_K
//! and Q5_K as centred integers, a scale and an offset per group
//! ([`WeightBank::from_i8_nk_grouped_offset`]), also exactly; Q6_K, whose scales are per
//! 16 values, requantised to one scale per 32 (the NPU's int8 K waves are whole multiples
//! of 32 channels).

use super::dequant::{f16_at, nibbles_32, quants_k, quants_q6_k, scale_min_k4};
use super::load::matrix_shape;
use super::{GgmlType, Gguf, GgufError, Result};
use crate::compute::matmul::{MatmulOptions, WeightBank};
use crate::device::Device;
use crate::kernels::matmul::WeightLayout;
use crate::kernels::single::Dtype;

mod direct;
mod q6_k;
#[cfg(test)]
mod tests;

/// Values per group of the banks [`load_grouped`] makes.
const GROUP: usize = 32;

/// Whether [`load_grouped`] holds `ty`'s weights exactly: blocks (or sub-blocks) of 32
/// values whose weights are an integer times a scale, plus an offset for the types with
/// minimums (Q8_0, Q4_0, Q5_0; Q4_1, Q4_K, Q5_K).
pub fn groups_exactly(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::Q5_0
            | GgmlType::Q4_1
            | GgmlType::Q4_K
            | GgmlType::Q5_K
    )
}

/// The options a matmul against `ty`'s grouped bank is best made with: residual
/// activations ([`MatmulOptions::activation_passes`]) where the bank's weights are requantised
/// (Q6_K), so that the activations' rounding does not add to the weights' own error and
/// the product stays within llama.cpp's CPU error for the type at twice the rows of NPU
/// work (docs/gguf.md, "Grouped banks"); the defaults for the types held exactly.
pub fn grouped_options(ty: GgmlType) -> MatmulOptions {
    match groups(ty) && !groups_exactly(ty) {
        true => MatmulOptions::default().residual_activations(),
        false => MatmulOptions::default(),
    }
}

/// The options that keep a matmul against `ty`'s grouped bank from losing accuracy to
/// outliers in the activations (one activation in 400 eight times the rest raises the
/// error of [`grouped_options`]' one pass by up to about 3×, as it raises llama.cpp's CPU
/// backend's): residual activations in as many passes as the type's error keeps falling
/// with ([`MatmulOptions::activation_passes`]): three for the types held exactly
/// without a floor of their own (Q8_0, Q4_0, Q5_0, Q4_1: about 10⁻⁷ relative, the
/// NPU's fp32 arithmetic), two for Q4_K and Q5_K (whose fp16 sub-block scales hold the
/// error near 7·10⁻⁵ from the second pass on) and Q6_K (its requantisation). Each pass
/// is the rows' NPU work again (docs/gguf.md, "Grouped banks"; docs/matmul.md,
/// "Residual activations").
pub fn outlier_options(ty: GgmlType) -> MatmulOptions {
    let passes = match ty {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => 2,
        _ => 3,
    };
    grouped_options(ty).activation_passes(passes)
}

/// Whether [`load_grouped`] takes `ty`: the types of [`groups_exactly`] and Q6_K
/// (requantised per 32 values, [`GroupedReport::max_abs`] its largest weight error).
pub fn groups(ty: GgmlType) -> bool {
    groups_exactly(ty) || ty == GgmlType::Q6_K
}

/// What [`load_grouped_report`] measured while loading.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct GroupedReport {
    /// The largest `|bank weight − file weight|`: 0 for the types of [`groups_exactly`].
    pub max_abs: f64,
    /// The largest group offset's magnitude (0 for a bank without offsets).
    pub max_offset: f64,
}

/// Loads the `[out][in]` matrix `name` into a grouped int8 bank, one group per 32 input
/// channels ([`groups`] names the types): a matmul against it quantises activations per
/// row and group of 32, dequantises every group on the NPU and, for the types with
/// minimums, adds each group's offset times the row's sum over the group on the host
/// (docs/gguf.md, "Grouped banks").
///
/// * Q8_0, Q4_0, Q5_0: the file's integers (Q4_0 and Q5_0 ones centred: −8..=7,
///   −16..=15) and block scales; exact.
/// * Q4_1 (`w = d·q + m`), Q4_K and Q5_K (`w = d·sc·q − dmin·mn` per sub-block of 32):
///   the integers centred (`q − 8`, `q − 16`), the scale `d` (`d·sc`) and the offset
///   `m + 8d` (`8·d·sc − dmin·mn`, `16·d·sc − dmin·mn`); exact up to f32 rounding.
/// * Q6_K (`w = d·sc·q`, a scale per 16 values): each 32 values requantised to int8
///   with one scale, the one of a few candidates that keeps them nearest the file's.
///
/// Errors: no such tensor [`GgufError::NoSuchTensor`]; another type, or not a matrix,
/// [`GgufError::Unsupported`]; a non-finite scale or minimum
/// [`GgufError::NotRepresentable`] naming the tensor and the first column of its block;
/// the bank constructor's refusals [`GgufError::Bank`].
pub fn load_grouped(dev: &Device, gguf: &Gguf, name: &str) -> Result<WeightBank> {
    load_grouped_report(dev, gguf, name).map(|(bank, _)| bank)
}

/// [`load_grouped`] with what it measured: the largest weight error and offset.
pub fn load_grouped_report(
    dev: &Device,
    gguf: &Gguf,
    name: &str,
) -> Result<(WeightBank, GroupedReport)> {
    let info = gguf.tensor(name).ok_or_else(|| GgufError::NoSuchTensor {
        name: name.to_string(),
    })?;
    let ty = info.ggml_type;
    if !groups(ty) {
        return Err(GgufError::Unsupported {
            tensor: name.to_string(),
            what: format!(
                "a grouped int8 bank of {ty:?} (Q8_0, Q4_0, Q5_0, Q4_1, Q4_K, Q5_K and Q6_K are one)"
            ),
        });
    }
    let (n, k) = matrix_shape(name, info.dims)?;
    if direct::takes(ty)
        && let Some(bank) = direct::load(dev, gguf, name, ty, (n, k))?
    {
        return Ok((bank, GroupedReport::default()));
    }
    decoded(dev, gguf, name, ty, (n, k))
}

/// [`load_grouped_report`] by way of the tensor's integers, scales and offsets decoded
/// into host vectors, then packed: the path of the types with offsets or requantised
/// groups, and of any layout `direct` does not write.
fn decoded(
    dev: &Device,
    gguf: &Gguf,
    name: &str,
    ty: GgmlType,
    (n, k): (u32, u32),
) -> Result<(WeightBank, GroupedReport)> {
    let (n_us, k_us) = (n as usize, k as usize);
    let (block, type_size) = (ty.block_size() as usize, ty.type_size() as usize);
    let row_bytes = k_us / block * type_size;
    let groups = k_us / GROUP;
    let mut q = vec![0i8; n_us * k_us];
    let mut scales = vec![0f32; n_us * groups];
    let mut offsets = vec![0f32; n_us * groups];
    let mut report = GroupedReport::default();
    // Whole rows at a time, about 64 KiB of the file.
    let rows_per_piece = ((64 << 10) / row_bytes.max(1)).clamp(1, n_us.max(1));
    let mut bytes = vec![0u8; rows_per_piece * row_bytes];
    let per_block = block / GROUP;
    for first in (0..n_us).step_by(rows_per_piece) {
        let rows = rows_per_piece.min(n_us - first);
        let bytes = &mut bytes[..rows * row_bytes];
        gguf.read_tensor(name, (first * row_bytes) as u64, bytes)?;
        let (at, g_at) = (first * k_us, first * groups);
        let blocks = bytes
            .chunks_exact(type_size)
            .zip(q[at..at + rows * k_us].chunks_exact_mut(block))
            .zip(scales[g_at..g_at + rows * groups].chunks_exact_mut(per_block))
            .zip(offsets[g_at..g_at + rows * groups].chunks_exact_mut(per_block));
        for (i, (((b, qs), s), o)) in blocks.enumerate() {
            let blocks_per_row = k_us / block;
            let bad = |value: f32| GgufError::NotRepresentable {
                tensor: name.to_string(),
                row: (first + i / blocks_per_row) as u64,
                column: (i % blocks_per_row * block) as u64,
                value,
                bank: Dtype::Int8,
            };
            let err = block_groups(ty, b, qs, s, o).map_err(bad)?;
            report.max_abs = report.max_abs.max(err);
        }
    }
    report.max_offset = offsets.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let shape = (n, k, GROUP as u32);
    let bank = if matches!(ty, GgmlType::Q4_1 | GgmlType::Q4_K | GgmlType::Q5_K) {
        WeightBank::from_i8_nk_grouped_offset(dev, shape, &q, &scales, &offsets)
    } else {
        WeightBank::from_i8_nk_grouped(dev, shape, &q, &scales)
    };
    Ok((bank.map_err(GgufError::Bank)?, report))
}

/// The layout of the grouped int8 bank [`load_grouped`] makes of the Q8_0, Q4_0 or
/// Q5_0 matrix `name` by packing it in place ([`pack_grouped`]): one K wave per 32
/// input channels. Another type, or a shape whose layout is not of such waves,
/// [`GgufError::Unsupported`]; no such tensor [`GgufError::NoSuchTensor`].
pub fn grouped_layout(gguf: &Gguf, name: &str) -> Result<WeightLayout> {
    let info = gguf.tensor(name).ok_or_else(|| GgufError::NoSuchTensor {
        name: name.to_string(),
    })?;
    let (n, k) = matrix_shape(name, info.dims)?;
    match direct::takes(info.ggml_type) {
        true => direct::layout(n, k)?,
        false => None,
    }
    .ok_or_else(|| GgufError::Unsupported {
        tensor: name.to_string(),
        what: format!(
            "packing a {:?} [{n} x {k}] tensor in place (Q8_0, Q4_0 and Q5_0 pack)",
            info.ggml_type
        ),
    })
}

/// Packs the Q8_0, Q4_0 or Q5_0 matrix `name` as [`load_grouped`] packs it, without a
/// device: its integers into `out` (`layout.bytes` bytes, every one written) and its
/// block scales into `scales` (one per group and output channel, group-major: `groups
/// × n`, as [`WeightBank::group_scales`] holds them), for the layout
/// [`grouped_layout`] gives. One pass over the tensor's bytes (in place from a mapped
/// file), for a bank cache or a buffer of one's own.
///
/// Errors: as [`grouped_layout`]; buffers of other lengths or another layout
/// [`GgufError::Unsupported`]; a non-finite scale [`GgufError::NotRepresentable`] naming
/// the first such block in file order.
pub fn pack_grouped(
    gguf: &Gguf,
    name: &str,
    layout: &WeightLayout,
    out: &mut [u8],
    scales: &mut [half::f16],
) -> Result<()> {
    let ty = gguf
        .tensor(name)
        .ok_or_else(|| GgufError::NoSuchTensor {
            name: name.to_string(),
        })?
        .ggml_type;
    let want = grouped_layout(gguf, name)?;
    if want != *layout {
        return Err(GgufError::Unsupported {
            tensor: name.to_string(),
            what: "packing into a layout other than grouped_layout's".into(),
        });
    }
    let data = gguf.tensor_data(name)?;
    direct::pack(name, ty, &data, layout, out, scales)
}

/// The first of `values` that is not finite, as an error value.
fn finite(values: &[f32]) -> std::result::Result<(), f32> {
    values
        .iter()
        .find(|v| !v.is_finite())
        .map_or(Ok(()), |&v| Err(v))
}

/// One block of `ty` as groups of 32: its centred integers into `q`, each group's scale
/// and offset into `scales` and `offsets` (one per 32 values of the block); the largest
/// `|bank weight − file weight|` (0 but for Q6_K), or the block's first non-finite scale
/// or minimum.
fn block_groups(
    ty: GgmlType,
    block: &[u8],
    q: &mut [i8],
    scales: &mut [f32],
    offsets: &mut [f32],
) -> std::result::Result<f64, f32> {
    match ty {
        GgmlType::Q4_1 => {
            let (d, m) = (f16_at(block, 0), f16_at(block, 2));
            finite(&[d, m])?;
            let mut u = [0u8; GROUP];
            nibbles_32(&block[4..20], &mut u);
            centre(&u, 8, q);
            (scales[0], offsets[0]) = (d, m + 8.0 * d);
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
            finite(&[d, dmin])?;
            let mut u = [0u8; 256];
            let mid = if ty == GgmlType::Q4_K {
                quants_k(&block[16..144], None, &mut u);
                8u8
            } else {
                quants_k(&block[48..176], Some(&block[16..48]), &mut u);
                16
            };
            centre(&u, mid, q);
            for (s, (scale, offset)) in scales.iter_mut().zip(offsets.iter_mut()).enumerate() {
                let (sc, mn) = scale_min_k4(&block[4..16], s);
                let (d1, min1) = (d * sc as f32, dmin * mn as f32);
                (*scale, *offset) = (d1, f32::from(mid) * d1 - min1);
            }
        }
        GgmlType::Q6_K => {
            let d = f16_at(block, 208);
            finite(&[d])?;
            let mut file = [0i8; 256];
            quants_q6_k(block, &mut file);
            return Ok(q6_k::requantise(&file, &block[192..208], d, q, scales));
        }
        _ => {
            let d = f16_at(block, 0);
            finite(&[d])?;
            scales[0] = d;
            integers(ty, block, q.try_into().expect("a block of 32"));
        }
    }
    Ok(0.0)
}

/// `u − mid` for each unsigned integer of `u` into `q` (`mid` 8 or 16: the results fit
/// int8).
fn centre(u: &[u8], mid: u8, q: &mut [i8]) {
    for (o, &v) in q.iter_mut().zip(u) {
        *o = v as i8 - mid as i8;
    }
}

/// The 32 integers of one block of `ty` (its scale, the first two bytes, aside): Q8_0
/// stores them as they are; Q4_0 as nibbles ([`nibbles_32`]) offset by 8; Q5_0 likewise
/// with a fifth bit each in a 32-bit word, offset by 16 (ggml's block layouts,
/// docs/gguf.md "Dequantisation").
fn integers(ty: GgmlType, block: &[u8], q: &mut [i8; GROUP]) {
    match ty {
        GgmlType::Q8_0 => {
            for (o, &b) in q.iter_mut().zip(&block[2..2 + GROUP]) {
                *o = b as i8;
            }
        }
        GgmlType::Q4_0 => {
            let mut u = [0u8; GROUP];
            nibbles_32(&block[2..18], &mut u);
            centre(&u, 8, q);
        }
        _ => {
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            let mut u = [0u8; GROUP];
            nibbles_32(&block[6..22], &mut u);
            for (j, v) in u.iter_mut().enumerate() {
                *v |= (((qh >> j) & 1) << 4) as u8;
            }
            centre(&u, 16, q);
        }
    }
}
