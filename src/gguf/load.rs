//! Weight matrices of a GGUF file into weight banks, with the error the bank's type adds
//! measured on the bank's own contents.

use super::{GgmlType, Gguf, GgufError, Result};
use crate::compute::matmul::WeightBank;
use crate::compute::matmul::Weights;
use crate::device::Device;
use crate::float::{bf16_to_f32, f16_to_f32};
use crate::kernels::matmul::quant;
use crate::kernels::single::Dtype;
use half::bf16;
use std::fmt;

/// How far a bank's values are from the dequantised tensor it was loaded from.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct LoadReport {
    /// The tensor.
    pub tensor: String,
    /// Its type in the file.
    pub source: GgmlType,
    /// The bank's type.
    pub bank: Dtype,
    /// Output channels (rows of the tensor, its `dims[1]`).
    pub n: u32,
    /// Inputs (values a row, its `dims[0]`).
    pub k: u32,
    /// The largest `|bank − tensor|` over all values (NaN if any is NaN).
    pub max_abs: f64,
    /// The root mean square of `bank − tensor`.
    pub rms: f64,
    /// [`LoadReport::rms`] over the root mean square of the tensor (0 when both are 0,
    /// infinite when only the tensor's is).
    pub rel_rms: f64,
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} [{} x {}] -> {:?} bank: max |err| {:.3e}, rms {:.3e}, relative rms {:.3e}",
            self.tensor,
            self.source,
            self.n,
            self.k,
            self.bank,
            self.max_abs,
            self.rms,
            self.rel_rms
        )
    }
}

/// The weight matrix `name` as `(n, k)`: GGUF dims `[k, n]` (trailing dims of 1 allowed).
pub(super) fn matrix_shape(name: &str, dims: &[u64]) -> Result<(u32, u32)> {
    let shape_error = || GgufError::Unsupported {
        tensor: name.to_string(),
        what: format!("dims {dims:?} are not a matrix [k, n] of at most 2^32 - 1 each"),
    };
    if dims.is_empty() || dims.iter().skip(2).any(|&d| d != 1) {
        return Err(shape_error());
    }
    let k = u32::try_from(dims[0]).map_err(|_| shape_error())?;
    let n = u32::try_from(dims.get(1).copied().unwrap_or(1)).map_err(|_| shape_error())?;
    Ok((n, k))
}

/// The largest of `a` and `b`, or NaN when either is: unlike [`f64::max`], a NaN is
/// never skipped, so a maximum over values that hold one is NaN.
pub(crate) fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Checks that a bank of type `dtype` holds every value of `w` (`n` rows of `k`) as what
/// it is, before anything is converted: every value finite, and for fp16 (bf16) banks
/// every value rounding to a finite fp16 (bf16), that is `|x| < 65520` (`|x|` below
/// about `3.39e38`). Int8 and int4 banks take any finite value (their per-channel
/// scales, `max |row| / 127` or `/ 7`, are then finite). The first value that fails is
/// [`GgufError::NotRepresentable`], naming the tensor, its row and column, and the value;
/// `w` is rows of the tensor from row `first_row`.
pub(crate) fn check_bank_range(
    name: &str,
    w: &[f32],
    (first_row, k): (u64, u32),
    dtype: Dtype,
) -> Result<()> {
    let fits = |v: f32| match dtype {
        Dtype::Fp16 => half::f16::from_f32(v).is_finite(),
        Dtype::Bf16 => bf16::from_f32(v).is_finite(),
        _ => v.is_finite(),
    };
    match w.iter().position(|&v| !fits(v)) {
        None => Ok(()),
        Some(i) => {
            let k = u64::from(k.max(1));
            Err(GgufError::NotRepresentable {
                tensor: name.to_string(),
                row: first_row + i as u64 / k,
                column: i as u64 % k,
                value: w[i],
                bank: dtype,
            })
        }
    }
}

impl LoadReport {
    /// The report on a bank of `bank` type whose values (`got`, as [`bank_values`]
    /// gives them) were loaded from the values `want` of tensor `tensor` (`n` rows of
    /// `k`, of type `source` in the file). Every statistic is NaN-aware: a NaN in either
    /// makes [`LoadReport::max_abs`], [`LoadReport::rms`] and [`LoadReport::rel_rms`] NaN
    /// (an infinity, infinite), never a smaller number.
    pub fn measure(
        tensor: &str,
        source: GgmlType,
        bank: Dtype,
        (n, k): (u32, u32),
        got: &[f32],
        want: &[f32],
    ) -> LoadReport {
        let (mut max_abs, mut err2, mut ref2) = (0f64, 0f64, 0f64);
        for (&b, &t) in got.iter().zip(want) {
            let e = (f64::from(b) - f64::from(t)).abs();
            max_abs = nan_max(max_abs, e);
            err2 += e * e;
            ref2 += f64::from(t) * f64::from(t);
        }
        // Values one side has and the other has not count as not a number.
        if got.len() != want.len() {
            (max_abs, err2) = (f64::NAN, f64::NAN);
        }
        let count = want.len().max(1) as f64;
        let rms = (err2 / count).sqrt();
        let rel_rms = match (err2 == 0.0, ref2 == 0.0) {
            (true, _) => 0.0,
            (false, true) if !err2.is_nan() => f64::INFINITY,
            _ => (err2 / ref2).sqrt(),
        };
        LoadReport {
            tensor: tensor.to_string(),
            source,
            bank,
            n,
            k,
            max_abs,
            rms,
            rel_rms,
        }
    }
}

/// Loads the weight matrix `name` (GGUF dims `[k, n]`: `n` output channels of `k`
/// inputs, ggml's `src0` of `mul_mat`) into a bank of type `dtype` on `dev`:
///
/// * [`Dtype::Fp16`] / [`Dtype::Bf16`]: the dequantised values rounded to that type
///   (exact for F16, resp. BF16, tensors);
/// * [`Dtype::Int8`] / [`Dtype::Int4`]: the dequantised values requantised per output
///   channel ([`WeightBank::quantize_f32_nk`]: ±127, resp. ±7, symmetric), with their
///   scales.
///
/// Any type [`super::dequantize`] converts loads. The tensor is read and converted a
/// piece of rows at a time ([`Gguf::read_tensor`]), so the host holds the tensor once in
/// the bank's type while it packs, never its f32 values. A value the bank cannot hold — a
/// NaN, an infinity, or a finite value that rounds to infinity in an fp16 or bf16 bank —
/// is [`GgufError::NotRepresentable`] before anything is allocated on the device (docs/gguf.md,
/// "Bounds"): never a bank holding an infinity. Nothing is read back:
/// [`load_weights`] adds the report.
pub fn load_bank(dev: &Device, gguf: &Gguf, name: &str, dtype: Dtype) -> Result<WeightBank> {
    let info = gguf.tensor(name).ok_or_else(|| GgufError::NoSuchTensor {
        name: name.to_string(),
    })?;
    let (n, k) = matrix_shape(name, info.dims)?;
    let mut host = match dtype {
        Dtype::Fp16 | Dtype::Bf16 => Host::Half(Vec::with_capacity(info.elements() as usize)),
        Dtype::Int8 | Dtype::Int4 => {
            Host::Quant(Vec::with_capacity(info.elements() as usize), Vec::new())
        }
        _ => {
            return Err(GgufError::Unsupported {
                tensor: name.to_string(),
                what: format!("a {dtype:?} weight bank (fp16, bf16, int8 and int4 load)"),
            });
        }
    };
    let ty = info.ggml_type;
    let row_bytes = super::raw_row_bytes(ty, n, k).map_err(|e| in_tensor(name, e))?;
    let rows_per_piece = (PIECE_BYTES / row_bytes).clamp(1, n as usize);
    let mut bytes = vec![0u8; rows_per_piece * row_bytes];
    let mut values = vec![0f32; rows_per_piece * k as usize];
    for first in (0..n as usize).step_by(rows_per_piece) {
        let rows = rows_per_piece.min(n as usize - first);
        let (bytes, values) = (
            &mut bytes[..rows * row_bytes],
            &mut values[..rows * k as usize],
        );
        gguf.read_tensor(name, (first * row_bytes) as u64, bytes)?;
        super::dequantize_into(ty, bytes, values).map_err(|e| in_tensor(name, e))?;
        check_bank_range(name, values, (first as u64, k), dtype)?;
        host.push(values, k, dtype)?;
    }
    let bank = match (host, dtype) {
        (Host::Half(h), Dtype::Bf16) => {
            let b: Vec<bf16> = h.iter().map(|&v| bf16::from_bits(v)).collect();
            WeightBank::new(dev, (n, k), Weights::Bf16(&b))?
        }
        (Host::Half(h), _) => {
            let h: Vec<half::f16> = h.iter().map(|&v| half::f16::from_bits(v)).collect();
            WeightBank::new(dev, (n, k), Weights::F16(&h))?
        }
        (Host::Quant(q, s), Dtype::Int8) => {
            WeightBank::new(dev, (n, k), Weights::I8(&q))?.with_scales(&s)?
        }
        (Host::Quant(q, s), _) => WeightBank::new(dev, (n, k), Weights::I4(&q))?.with_scales(&s)?,
    };
    Ok(bank)
}

/// Bytes of the file [`load_bank`] reads and converts at a time (whole rows, at least
/// one): a piece and its f32 values stay in a core's cache.
const PIECE_BYTES: usize = 64 << 10;

/// A tensor on its way into a bank: 16-bit values, or quantised values with one scale
/// a row.
enum Host {
    Half(Vec<u16>),
    Quant(Vec<i8>, Vec<f32>),
}

impl Host {
    /// Appends rows of `k` values, converted to the bank's type.
    fn push(&mut self, values: &[f32], k: u32, dtype: Dtype) -> Result<()> {
        let rows = values.len() / k as usize;
        match self {
            Host::Half(h) if dtype == Dtype::Bf16 => {
                h.extend(values.iter().map(|&v| bf16::from_f32(v).to_bits()));
            }
            Host::Half(h) => h.extend(values.iter().map(|&v| half::f16::from_f32(v).to_bits())),
            Host::Quant(q, s) if dtype == Dtype::Int8 => {
                // Straight into the bank's values: the same arithmetic as
                // `quantize_weights_i8` (one scale a row, ±127).
                let (q0, s0) = (q.len(), s.len());
                q.resize(q0 + values.len(), 0);
                s.resize(s0 + rows, 0.0);
                quant::quantize_rows_i8_into(values, k as usize, &mut q[q0..], &mut s[s0..])?;
            }
            Host::Quant(q, s) => {
                let (qs, ss) = quant::quantize_weights_i4(values, rows, k as usize)?;
                q.extend_from_slice(&qs);
                s.extend_from_slice(&ss);
            }
        }
        Ok(())
    }
}

/// An error about tensor data, naming the tensor.
fn in_tensor(name: &str, e: GgufError) -> GgufError {
    match e {
        GgufError::Unsupported { what, .. } => GgufError::Unsupported {
            tensor: name.to_string(),
            what,
        },
        e => e,
    }
}

/// [`load_bank`], and the report: the values the bank holds — its packed bytes read
/// back from the device and unpacked, times its scales ([`bank_values`]) — compared
/// with the dequantised tensor ([`LoadReport::measure`]). The read back and the f32
/// copies of both cost host memory and time that [`load_bank`] does not spend.
pub fn load_weights(
    dev: &Device,
    gguf: &Gguf,
    name: &str,
    dtype: Dtype,
) -> Result<(WeightBank, LoadReport)> {
    let bank = load_bank(dev, gguf, name, dtype)?;
    let info = gguf.tensor(name).ok_or_else(|| GgufError::NoSuchTensor {
        name: name.to_string(),
    })?;
    let (n, k) = matrix_shape(name, info.dims)?;
    let w = gguf.dequantize(name)?;
    let got = bank_values(&bank)?;
    let report = LoadReport::measure(name, info.ggml_type, dtype, (n, k), &got, &w);
    Ok((bank, report))
}

/// The values a bank holds, `n` rows of `k` (`[out][in]`) as f32: its packed bytes read
/// back from the device, unpacked by the layout's atoms, each channel times its scale
/// when the bank has scales.
///
/// A layout's K waves each hold their channels (padded to 32) in 1024-byte atoms; an
/// atom holds 32 channels of 1024 / run kernels (output channels), one run each: 32
/// bytes for int8, 64 bytes (32 fp16/bf16 values) for 16-bit types, 16 bytes for int4
/// (the even channel in the high nibble). The atoms of a group of kernels follow each
/// other over the wave's channels ([`crate::kernels::matmul::WeightLayout`]).
pub fn bank_values(bank: &WeightBank) -> Result<Vec<f32>> {
    let layout = bank.layout();
    let bytes = bank.packed()?;
    let run = match layout.dtype {
        Dtype::Int8 => 32,
        Dtype::Int4 => 16,
        Dtype::Fp16 | Dtype::Bf16 => 64,
        d => {
            return Err(GgufError::Unsupported {
                tensor: String::new(),
                what: format!("reading back a {d:?} bank"),
            });
        }
    };
    let per_atom = 1024 / run;
    let (n, k) = (layout.n as usize, layout.k as usize);
    let mut out = vec![0f32; n * k];
    let short = |at: usize| GgufError::Unsupported {
        tensor: String::new(),
        what: format!(
            "a bank of {} bytes read back where its layout puts a run at {at}",
            bytes.len()
        ),
    };
    for (wave, &base) in layout.waves.iter().zip(&layout.b_offsets) {
        let kb_count = wave.ai as usize / 32;
        for (j, row) in out.chunks_exact_mut(k.max(1)).enumerate() {
            let (g, nn) = (j / per_atom, j % per_atom);
            for kb in 0..kb_count {
                let k0 = wave.k0 as usize + kb * 32;
                let len = (wave.kw as usize).saturating_sub(kb * 32).min(32);
                let at = base as usize + (g * kb_count + kb) * 1024 + nn * run;
                let src = bytes.get(at..at + run).ok_or_else(|| short(at))?;
                let dst = row.get_mut(k0..k0 + len).ok_or_else(|| short(at))?;
                for (c, y) in dst.iter_mut().enumerate() {
                    *y = match layout.dtype {
                        Dtype::Int8 => src[c] as i8 as f32,
                        Dtype::Int4 if c % 2 == 0 => ((src[c / 2] as i8) >> 4) as f32,
                        Dtype::Int4 => (((src[c / 2] << 4) as i8) >> 4) as f32,
                        Dtype::Fp16 => f16_to_f32(u16::from_le_bytes([src[2 * c], src[2 * c + 1]])),
                        _ => bf16_to_f32(u16::from_le_bytes([src[2 * c], src[2 * c + 1]])),
                    };
                }
            }
        }
    }
    if let Some(scales) = bank.scales() {
        for (row, &s) in out.chunks_exact_mut(k.max(1)).zip(scales) {
            row.iter_mut().for_each(|v| *v *= s);
        }
    }
    Ok(out)
}
