//! Q8_0, Q4_0 and Q5_0 tensors straight into a grouped int8 bank: one pass over the
//! tensor's bytes (borrowed from the file's mapping) that writes each block's 32
//! integers into their place in the bank's buffer and its scale into the bank's
//! group-major scales, with nothing of the tensor's size in between (docs/gguf.md,
//! "Loading speed").
//!
//! The bank's layout has one K wave per group of 32 input channels; a wave holds
//! `n_pad / 32` atoms of 1024 bytes, an atom 32 output channels of that group's 32
//! integers each. So block `b` of row `r` (32 bytes once decoded) goes to byte
//! `b_offsets[b] + (r / 32) · 1024 + (r % 32) · 32`.

use super::super::dequant::{f16_at, nibbles_32};
use super::super::{GgmlType, Gguf, GgufError, Result};
use super::GROUP;
use crate::compute::matmul::WeightBank;
use crate::device::Device;
use crate::kernels::matmul::WeightLayout;
use crate::kernels::single::Dtype;
use crate::sys::simd::{prefetch, stream_copy, stream_fence};
use half::f16;

/// Bytes of an atom: 32 output channels of 32 int8 values.
const ATOM: usize = 1024;

/// Groups of 32 rows [`Fill::run`] takes at a time: 128 rows, 544 KiB of a 4096-wide
/// Q8_0 tensor, which stay in a core's L2 cache while every wave's 4 atoms of them (4
/// KiB, adjacent in the bank) are written.
const BAND: usize = 4;

/// Whether [`load`] takes `ty`: the types whose blocks are 32 integers and one scale.
pub(super) fn takes(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0)
}

/// Whether `layout` is the one [`fill`] writes: every wave 32 channels wide, the waves
/// one after another, each `n_pad / 32` atoms.
fn plain(layout: &WeightLayout) -> bool {
    let wave_bytes = layout.n_pad as usize * GROUP;
    let n_pad = layout.n_pad as usize;
    n_pad >= layout.n as usize
        && n_pad.is_multiple_of(GROUP)
        && layout.bytes as usize == wave_bytes * layout.waves.len()
        && layout.b_offsets.len() == layout.waves.len()
        && (layout.waves.iter().zip(&layout.b_offsets).enumerate()).all(|(i, (w, &at))| {
            w.k0 as usize == i * GROUP
                && w.kw as usize == GROUP
                && w.ai as usize == GROUP
                && at as usize == i * wave_bytes
        })
}

/// The layout of the grouped bank of an `n × k` tensor of a type [`takes`] names, when
/// it is the plain one [`Fill::run`] writes (otherwise `None`: the caller then decodes
/// the blocks first).
pub(super) fn layout(n: u32, k: u32) -> Result<Option<WeightLayout>> {
    let layout = WeightLayout::with_k_tile(k, n, Dtype::Int8, GROUP as u32)?;
    Ok((k.is_multiple_of(GROUP as u32) && plain(&layout)).then_some(layout))
}

/// The grouped bank of tensor `name` (`n` rows of `k`, of a type [`takes`] names), or
/// `None` when its layout is not the plain one. Errors as `load_grouped`'s.
pub(super) fn load(
    dev: &Device,
    gguf: &Gguf,
    name: &str,
    ty: GgmlType,
    (n, k): (u32, u32),
) -> Result<Option<WeightBank>> {
    if layout(n, k)?.is_none() {
        return Ok(None);
    }
    let data = gguf.tensor_data(name)?;
    let shape = (n, k, GROUP as u32);
    let bank = WeightBank::from_i8_grouped_fill(dev, shape, |l, out, scales| {
        pack(name, ty, &data, l, out, scales)
    })?;
    Ok(Some(bank))
}

/// Packs `data`, the blocks of tensor `name` of type `ty` (one [`takes`] names), into
/// `out` (`layout.bytes`) and `scales` (group-major, `groups × n`), for a plain
/// `layout` of the tensor's shape.
pub(super) fn pack(
    name: &str,
    ty: GgmlType,
    data: &[u8],
    layout: &WeightLayout,
    out: &mut [u8],
    scales: &mut [f16],
) -> Result<()> {
    let unsupported = |what: String| GgufError::Unsupported {
        tensor: name.to_string(),
        what,
    };
    if !takes(ty) || !plain(layout) || layout.dtype != Dtype::Int8 {
        return Err(unsupported(format!(
            "packing {ty:?} into a {:?} layout of {} waves (Q8_0, Q4_0 and Q5_0 into int8 waves of 32 channels)",
            layout.dtype,
            layout.waves.len()
        )));
    }
    let (n, groups) = (layout.n as usize, layout.waves.len());
    let row_bytes = groups * ty.type_size() as usize;
    let sizes = [
        (data.len(), n * row_bytes, "bytes of data"),
        (out.len(), layout.bytes as usize, "bank bytes"),
        (scales.len(), n * groups, "scales"),
    ];
    if let Some((got, want, what)) = sizes.into_iter().find(|(got, want, _)| got != want) {
        return Err(unsupported(format!(
            "{got} {what} where the layout takes {want}"
        )));
    }
    let fill = Fill {
        name,
        data,
        row_bytes,
    };
    match ty {
        GgmlType::Q8_0 => fill.run::<34>(layout, out, scales, q8_0),
        GgmlType::Q4_0 => fill.run::<18>(layout, out, scales, q4_0),
        _ => fill.run::<22>(layout, out, scales, q5_0),
    }
}

/// The tensor a bank is filled from.
struct Fill<'a> {
    name: &'a str,
    /// Its data: `n` rows of `row_bytes`.
    data: &'a [u8],
    row_bytes: usize,
}

impl Fill<'_> {
    /// Writes every atom of `out` (the bank, laid out as [`plain`] says) and every scale
    /// (group-major) from blocks of `TS` bytes, each decoded by `decode`. A non-finite
    /// scale stops it with [`GgufError::NotRepresentable`] naming the first such block
    /// in file order.
    ///
    /// The order: [`BAND`] groups of 32 rows at a time, read in place; for each wave,
    /// their atoms (adjacent in the bank), each row of 32 integers decoded and streamed
    /// out as it is made ([`stream_copy`]: the bank's lines are written without first
    /// being read into the cache; with plain stores the pass took 1.7 times as long). The band's
    /// rows stay in the cache for every wave, and the next band's are prefetched a
    /// slice before each atom (the hardware prefetchers do not follow reads 32 rows
    /// apart: without the hints the pass took 2.5 times as long).
    fn run<const TS: usize>(
        &self,
        layout: &WeightLayout,
        out: &mut [u8],
        scales: &mut [f16],
        decode: impl Fn(&[u8; TS], &mut [u8; GROUP]),
    ) -> Result<()> {
        let (n, wave_bytes) = (layout.n as usize, layout.n_pad as usize * GROUP);
        let band_bytes = BAND * GROUP * self.row_bytes;
        // Cache lines of the next band prefetched per atom.
        let ahead = band_bytes
            .div_ceil(64)
            .div_ceil(BAND * layout.waves.len().max(1));
        let mut bad = 0u32;
        for (b, band) in self.data.chunks(band_bytes).enumerate() {
            let next = (b + 1) * band_bytes;
            for (wave, (dst, s)) in out
                .chunks_exact_mut(wave_bytes)
                .zip(scales.chunks_exact_mut(n))
                .enumerate()
            {
                let atoms = dst[b * BAND * ATOM..].as_chunks_mut::<ATOM>().0;
                let groups = band.chunks(GROUP * self.row_bytes);
                let s = s[b * BAND * GROUP..].chunks_mut(GROUP);
                for (i, ((group, atom), s)) in groups.zip(atoms).zip(s).enumerate() {
                    let first = (wave * BAND + i) * ahead;
                    for line in first..first + ahead {
                        prefetch(self.data, next + line * 64);
                    }
                    bad |= self.atom(group, wave * TS, atom, s, &decode);
                }
            }
        }
        stream_fence();
        match bad & 0x8000 == 0 {
            true => Ok(()),
            false => Err(self.first_non_finite::<TS>(0, self.data)),
        }
    }

    /// One atom: block `column / TS` of each row of `group` (up to 32 rows) decoded
    /// and streamed into its row of `atom` ([`stream_copy`]), the rows it lacks zero;
    /// the blocks' scales into `s`. Returns the OR of each scale's magnitude bits plus
    /// 0x400: bit 15 is set exactly when one magnitude is 0x7C00 or more (an infinity
    /// or a NaN).
    #[inline(always)]
    fn atom<const TS: usize>(
        &self,
        group: &[u8],
        column: usize,
        atom: &mut [u8; ATOM],
        s: &mut [f16],
        decode: &impl Fn(&[u8; TS], &mut [u8; GROUP]),
    ) -> u32 {
        let (qs, _) = atom.as_chunks_mut::<GROUP>();
        // Each scale converted where its block is read (a block's bits stored and read
        // back as wider words would wait on the stores).
        let mut bad = 0u32;
        let rows = group.chunks_exact(self.row_bytes);
        let kernels = rows.len();
        for ((row, q), d) in rows.zip(qs.iter_mut()).zip(s) {
            let block: &[u8; TS] = row[column..][..TS].try_into().expect("TS bytes");
            let h = u16::from_le_bytes([block[0], block[1]]);
            bad |= u32::from(h & 0x7FFF) + 0x400;
            *d = f16::from_bits(h);
            let mut v = [0u8; GROUP];
            decode(block, &mut v);
            stream_copy(q, &v);
        }
        for q in &mut qs[kernels..] {
            stream_copy(q, &[0u8; GROUP]);
        }
        bad
    }

    /// The error of the first block of `rows` (from row `first`) in file order whose
    /// scale is not finite.
    fn first_non_finite<const TS: usize>(&self, first: usize, rows: &[u8]) -> GgufError {
        let (i, value) = rows
            .chunks_exact(TS)
            .map(|b| f16_at(b, 0))
            .enumerate()
            .find(|(_, d)| !d.is_finite())
            .unwrap_or((0, f32::NAN));
        let per_row = self.row_bytes / TS;
        GgufError::NotRepresentable {
            tensor: self.name.to_string(),
            row: (first + i / per_row) as u64,
            column: (i % per_row * GROUP) as u64,
            value,
            bank: Dtype::Int8,
        }
    }
}

/// Q8_0: the 32 integers as they are.
fn q8_0(block: &[u8; 34], q: &mut [u8; GROUP]) {
    q.copy_from_slice(&block[2..]);
}

/// Q4_0: nibbles (value `j` in byte `j`'s low nibble, `j + 16` in its high one) less 8.
fn q4_0(block: &[u8; 18], q: &mut [u8; GROUP]) {
    // Whole 16-byte arrays, so the two halves are one vector operation each.
    let mut nibbles = [0u8; 16];
    nibbles.copy_from_slice(&block[2..]);
    let lo = nibbles.map(|b| (b & 0xF).wrapping_sub(8));
    let hi = nibbles.map(|b| (b >> 4).wrapping_sub(8));
    q[..16].copy_from_slice(&lo);
    q[16..].copy_from_slice(&hi);
}

/// Q5_0: nibbles as Q4_0's, each with a fifth bit from the little-endian word before
/// them (bit `i` for value `i`), less 16.
fn q5_0(block: &[u8; 22], q: &mut [u8; GROUP]) {
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let mut u = [0u8; GROUP];
    nibbles_32(&block[6..], &mut u);
    for (j, (o, &v)) in q.iter_mut().zip(&u).enumerate() {
        *o = (v | (((qh >> j) & 1) << 4) as u8).wrapping_sub(16);
    }
}

#[cfg(test)]
mod tests {
    //! [`pack`] on shapes of several bands (a last band and group of fewer rows), into
    //! buffers at offsets that take the streaming stores and that do not, against the
    //! bank written here from the format's rules.

    use super::*;
    use crate::seeded::Rng;

    /// `blocks` raw blocks of `ty` (seeded bytes, each with a finite fp16 scale).
    fn blocks(ty: GgmlType, blocks: usize, seed: u64) -> Vec<u8> {
        let mut rng = Rng::new(seed);
        let size = ty.type_size() as usize;
        let mut out = Vec::with_capacity(blocks * size);
        for _ in 0..blocks {
            let d = half::f16::from_f32(rng.unit() * 0.5 - 0.25).to_bits();
            out.extend_from_slice(&d.to_le_bytes());
            out.extend(rng.bytes(size - 2));
        }
        out
    }

    /// The 32 integers of one block, from the format's description.
    fn reference(ty: GgmlType, b: &[u8]) -> [u8; GROUP] {
        std::array::from_fn(|j| {
            let nibble = |q: &[u8]| (q[j % 16] >> (4 * (j / 16))) & 0xF;
            let v = match ty {
                GgmlType::Q8_0 => i32::from(b[2 + j] as i8),
                GgmlType::Q4_0 => i32::from(nibble(&b[2..])) - 8,
                _ => {
                    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                    i32::from(nibble(&b[6..])) + 16 * ((qh >> j) & 1) as i32 - 16
                }
            };
            v as i8 as u8
        })
    }

    #[test]
    fn several_bands_pack_as_the_format_says_at_every_buffer_offset() {
        let types = [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0];
        for (i, (n, k)) in [(300usize, 96usize), (161, 64), (129, 32), (256, 160)]
            .into_iter()
            .enumerate()
        {
            for (t, ty) in types.into_iter().enumerate() {
                let size = ty.type_size() as usize;
                let groups = k / GROUP;
                let data = blocks(ty, n * groups, (10 * i + t) as u64);
                let layout = layout(n as u32, k as u32).unwrap().unwrap();
                let n_pad = layout.n_pad as usize;
                let mut want = vec![0u8; layout.bytes as usize];
                let mut want_scales = vec![f16::ZERO; n * groups];
                for r in 0..n {
                    for w in 0..groups {
                        let b = &data[(r * groups + w) * size..][..size];
                        let at = w * n_pad * GROUP + r / 32 * ATOM + r % 32 * GROUP;
                        want[at..at + GROUP].copy_from_slice(&reference(ty, b));
                        want_scales[w * n + r] = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
                    }
                }
                for offset in [0, 1, 16, 33] {
                    let mut buf = vec![0xEEu8; want.len() + 64];
                    let mut scales = vec![f16::NAN; n * groups];
                    let out = &mut buf[offset..offset + want.len()];
                    pack("w", ty, &data, &layout, out, &mut scales).unwrap();
                    let what = format!("{ty:?} {n}x{k} at offset {offset}");
                    assert!(out == &want[..], "{what}");
                    assert!(buf[..offset].iter().all(|&v| v == 0xEE), "{what}");
                    assert!(
                        buf[offset + want.len()..].iter().all(|&v| v == 0xEE),
                        "{what}"
                    );
                    let bits = |s: &[f16]| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&scales), bits(&want_scales), "{what}");
                }
            }
        }
    }
}
