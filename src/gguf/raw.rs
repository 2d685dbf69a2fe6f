//! Weight banks from ggml's raw tensor data, as a ggml backend receives it: `n` rows of
//! `k` values in one of ggml's block formats, rows back to back. The conversion is the
//! library's, so a backend written in C or C++ hands over the bytes it was given and
//! keeps no copy of its own.
//!
//! Every type [`super::dequantize`] converts is taken. BF16 data becomes a bf16 bank
//! (exact); every other type an fp16 bank: F16 exactly, F32 and the quantised types
//! dequantised in ggml's arithmetic and rounded once to fp16. A value fp16 cannot hold
//! (one that rounds to infinity, |x| >= 65520, a NaN or an infinity) is refused with the
//! row and column where it is, never stored as an infinity; values up to 65520 round to
//! the largest fp16, ±65504, as any rounding does. [`bank_from_raw_as`] offers an int8
//! bank instead, requantised per output channel: half the bytes, for an error.

use super::dequant::{DEQUANTIZED, dequantize};
use super::{GgmlType, GgufError, Result};
use crate::compute::matmul::WeightBank;
use crate::compute::matmul::Weights;
use crate::device::Device;
use crate::error::Error;
use crate::kernels::matmul::quant::quantize_rows_i8_into;
use crate::kernels::matmul::{Plan, WeightLayout};
use crate::kernels::single::{Dtype, OutType};
use half::{bf16, f16};
use std::borrow::Cow;
use zerocopy::{FromBytes, Immutable, KnownLayout};

/// The bank type [`bank_from_raw`] packs data of type `ty` into: [`Dtype::Bf16`] for
/// BF16, [`Dtype::Fp16`] for every other type [`super::dequantize`] converts, and
/// [`GgufError::Unsupported`] for the rest.
pub fn raw_bank_dtype(ty: GgmlType) -> Result<Dtype> {
    match ty {
        GgmlType::BF16 => Ok(Dtype::Bf16),
        t if DEQUANTIZED.contains(&t) => Ok(Dtype::Fp16),
        t => Err(GgufError::Unsupported {
            tensor: String::new(),
            what: format!("weights of type {t} (no conversion to a bank)"),
        }),
    }
}

/// The bytes of one row of `k` values of type `ty`, checking that `k` is a whole number
/// of blocks and that neither size is zero.
pub fn raw_row_bytes(ty: GgmlType, n: u32, k: u32) -> Result<usize> {
    if n == 0 || k == 0 {
        return Err(GgufError::Invalid {
            offset: 0,
            what: "weight shape (n and k at least 1)",
            value: format!("{n} x {k}"),
        });
    }
    let block = ty.block_size();
    if !u64::from(k).is_multiple_of(block) {
        return Err(GgufError::Unsupported {
            tensor: String::new(),
            what: format!("{k} values a row of {ty}, not a whole number of {block}-value blocks"),
        });
    }
    usize::try_from(u64::from(k) / block * ty.type_size()).map_err(|_| GgufError::Invalid {
        offset: 0,
        what: "row size",
        value: format!("{k} values of {ty}"),
    })
}

/// Checks, without allocating device memory, that [`bank_from_raw`] takes an `n` × `k`
/// tensor of type `ty` on `dev` and that a product of `m` rows can be planned against
/// the bank it makes (the plan [`crate::compute::matmul::Matmul::new`] makes). A caller
/// deciding what it offloads (a ggml backend's `supports_op`) asks this and claims
/// exactly what it answers `Ok` for.
pub fn check_raw(dev: &Device, ty: GgmlType, n: u32, k: u32, m: u32) -> Result<()> {
    check_raw_as(dev, (ty, raw_bank_dtype(ty)?), n, k, m)
}

/// [`check_raw`] for [`bank_from_raw_as`] into a bank of `dtype`.
pub fn check_raw_as(
    dev: &Device,
    (ty, dtype): (GgmlType, Dtype),
    n: u32,
    k: u32,
    m: u32,
) -> Result<()> {
    raw_dtype(ty, dtype)?;
    raw_row_bytes(ty, n, k)?;
    if m == 0 {
        return Err(GgufError::Invalid {
            offset: 0,
            what: "rows of the product (at least 1)",
            value: "0".into(),
        });
    }
    // The layout bank_from_raw packs in.
    let layout = WeightLayout::decode_and_prompts(k, n, dtype, dev.cores())?;
    // Int8 banks are scaled on the host from the int32 sums; the float banks sum in fp32.
    let out = match dtype {
        Dtype::Int8 => OutType::Int32,
        _ => OutType::Fp32,
    };
    Plan::for_layout(&layout, m, out, dev.cores())?;
    Ok(())
}

/// A weight bank on `dev` from `n` rows of `k` values of type `ty` in ggml's layout
/// (`data` is exactly their bytes, row after row): the bank type of
/// [`raw_bank_dtype`], in the layout for decoding and prompts
/// ([`WeightLayout::decode_and_prompts`]; any number of rows runs against it). F16 and BF16 data is packed
/// from `data` itself when it is 2-byte aligned; other types are converted a row at a
/// time, so the host holds at most one fp16 copy of the tensor while it packs.
pub fn bank_from_raw(
    dev: &Device,
    ty: GgmlType,
    n: u32,
    k: u32,
    data: &[u8],
) -> Result<WeightBank> {
    bank_from_raw_as(dev, (ty, raw_bank_dtype(ty)?), n, k, data)
}

/// Whether [`bank_from_raw_as`] packs data of type `ty` into a bank of `dtype`: the
/// type of [`raw_bank_dtype`], or int8 for any type it converts.
fn raw_dtype(ty: GgmlType, dtype: Dtype) -> Result<()> {
    let exact = raw_bank_dtype(ty)?;
    if dtype != exact && dtype != Dtype::Int8 {
        return Err(GgufError::Unsupported {
            tensor: String::new(),
            what: format!("weights of type {ty} in a {dtype:?} bank ({exact:?} or Int8)"),
        });
    }
    Ok(())
}

/// [`bank_from_raw`] into a bank of `dtype`: the type [`raw_bank_dtype`] gives, or
/// [`Dtype::Int8`], the values dequantised in ggml's arithmetic a row at a time and
/// requantised per output channel (±127, one f32 scale a row, as
/// [`WeightBank::quantize_f32_nk`] does), so the host holds the tensor once, as int8,
/// while it packs: half an fp16 bank's bytes, at the price of the requantisation's error
/// (docs/gguf.md, "Layouts compared": 0.6–1.0 % relative RMS). A non-finite value is
/// refused with its row and column. Other types are [`GgufError::Unsupported`].
pub fn bank_from_raw_as(
    dev: &Device,
    (ty, dtype): (GgmlType, Dtype),
    n: u32,
    k: u32,
    data: &[u8],
) -> Result<WeightBank> {
    raw_dtype(ty, dtype)?;
    let row = raw_row_bytes(ty, n, k)?;
    let want = row.checked_mul(n as usize);
    if want != Some(data.len()) {
        return Err(GgufError::Invalid {
            offset: 0,
            what: "weight data length (n rows of k values)",
            value: format!(
                "{} bytes for {n} x {k} {ty}, which take {}",
                data.len(),
                want.map_or("more than memory holds".to_string(), |w| w.to_string())
            ),
        });
    }
    let (n_us, k_us) = (n as usize, k as usize);
    match (ty, dtype) {
        (_, Dtype::Int8) => {
            let (mut q, mut s) = (vec![0i8; n_us * k_us], vec![0f32; n_us]);
            for (r, ((bytes, q), s)) in data
                .chunks_exact(row)
                .zip(q.chunks_exact_mut(k_us))
                .zip(s.iter_mut())
                .enumerate()
            {
                let values = dequantize(ty, bytes, u64::from(k))?;
                quantize_rows_i8_into(&values, k_us, q, std::slice::from_mut(s)).map_err(|e| {
                    match e {
                        Error::OutOfRange { index, .. } => not_finite(r, index, f64::NAN),
                        e => GgufError::from(e),
                    }
                })?;
            }
            Ok(WeightBank::new(dev, (n, k), Weights::I8(&q))?.with_scales(&s)?)
        }
        (GgmlType::F16, _) => {
            let w = halves(data, f16::from_bits);
            check_finite(w.iter().map(|v| v.is_finite()), k_us)?;
            Ok(WeightBank::new(dev, (n, k), Weights::F16(&w))?)
        }
        (GgmlType::BF16, _) => {
            let w = halves(data, bf16::from_bits);
            check_finite(w.iter().map(|v| v.is_finite()), k_us)?;
            Ok(WeightBank::new(dev, (n, k), Weights::Bf16(&w))?)
        }
        _ => {
            let mut h = Vec::with_capacity(n_us * k_us);
            for (r, bytes) in data.chunks_exact(row).enumerate() {
                let values = dequantize(ty, bytes, u64::from(k))?;
                for (c, &x) in values.iter().enumerate() {
                    let v = f16::from_f32(x);
                    if !v.is_finite() {
                        return Err(not_finite(r, c, f64::from(x)));
                    }
                    h.push(v);
                }
            }
            Ok(WeightBank::new(dev, (n, k), Weights::F16(&h))?)
        }
    }
}

/// The 16-bit float values of `data` (an even length): `data` itself when it is 2-byte
/// aligned, else a copy read as little-endian pairs.
fn halves<T>(data: &[u8], make: fn(u16) -> T) -> Cow<'_, [T]>
where
    [T]: FromBytes + KnownLayout + Immutable + ToOwned<Owned = Vec<T>>,
{
    match <[T]>::ref_from_bytes(data) {
        Ok(w) => Cow::Borrowed(w),
        Err(_) => Cow::Owned(
            data.chunks_exact(2)
                .map(|p| make(u16::from_le_bytes([p[0], p[1]])))
                .collect(),
        ),
    }
}

/// The first value that is not finite, in rows of `k`, as an error.
fn check_finite(finite: impl Iterator<Item = bool>, k: usize) -> Result<()> {
    match finite.enumerate().find(|&(_, ok)| !ok) {
        Some((i, _)) => Err(not_finite(i / k.max(1), i % k.max(1), f64::NAN)),
        None => Ok(()),
    }
}

fn not_finite(row: usize, col: usize, value: f64) -> GgufError {
    let value = if value.is_nan() {
        "a NaN or an infinity".to_string()
    } else {
        format!("{value:e}, which rounds to infinity in fp16,")
    };
    GgufError::Unsupported {
        tensor: String::new(),
        what: format!("weight row {row}, column {col} is {value} which the bank cannot hold"),
    }
}
