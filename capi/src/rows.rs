//! Activation rows in caller memory, as `rknpu_mul_mat_ex` and the batch calls take
//! them: their element type and where each row lies; read in place where they are back
//! to back, gathered otherwise.

use crate::{Code, Failure, Result, elements, ggml_type};
use rknpu_driver::gguf::GgmlType;
use std::borrow::Cow;
use zerocopy::{FromBytes, Immutable, KnownLayout};

/// The element type of activation rows given to `rknpu_mul_mat_ex`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XType {
    /// f32 (ggml type code 0).
    F32,
    /// IEEE binary16 (code 1).
    F16,
    /// bfloat16 (code 30).
    Bf16,
}

impl XType {
    /// The type of ggml type code `code`: F32, F16 or BF16.
    pub fn from_code(code: u32) -> Result<XType> {
        match ggml_type(code)? {
            GgmlType::F32 => Ok(XType::F32),
            GgmlType::F16 => Ok(XType::F16),
            GgmlType::BF16 => Ok(XType::Bf16),
            t => Err(Failure {
                code: Code::Unsupported,
                message: format!("activations of type {t} (F32, F16 and BF16 are taken)"),
            }),
        }
    }

    /// Bytes a value takes.
    pub fn size(self) -> usize {
        match self {
            XType::F32 => 4,
            XType::F16 | XType::Bf16 => 2,
        }
    }
}

/// Rows of activations in caller memory: `bytes` holds row `i` at `i · stride`.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    /// The element type.
    pub ty: XType,
    /// The bytes from the first row's start to the last row's end.
    pub bytes: &'a [u8],
    /// Bytes from one row's start to the next's.
    pub stride: usize,
}

impl Rows<'_> {
    /// The bytes `m` rows of `k` values span at `stride`, refusing a stride shorter than
    /// a row and overflow.
    pub fn span(ty: XType, m: u32, k: u32, stride: usize) -> Result<usize> {
        elements("x", m, k)?;
        let row = k as usize * ty.size();
        if stride < row {
            return Err(Failure::arg(format!(
                "x_stride {stride} is shorter than a row of {k} values ({row} bytes)"
            )));
        }
        (m as usize - 1)
            .checked_mul(stride)
            .and_then(|b| b.checked_add(row))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| Failure::arg(format!("{m} rows {stride} bytes apart overflow")))
    }

    /// The rows as one slice of `T` where they lie back to back and aligned for `T` on a
    /// little-endian host: the caller's memory itself, no copy. Else `None`.
    fn contiguous<T: FromBytes + Immutable + KnownLayout>(
        &self,
        m: usize,
        k: usize,
    ) -> Option<&[T]> {
        let row = k * self.ty.size();
        if cfg!(target_endian = "big") || (m > 1 && self.stride != row) {
            return None;
        }
        <[T]>::ref_from_bytes(self.bytes.get(..m * row)?).ok()
    }

    /// The 16-bit values of `m` rows of `k`, contiguous: where they are
    /// ([`Rows::contiguous`]), or gathered through `make`.
    pub(crate) fn values<T>(&self, m: usize, k: usize, make: fn(u16) -> T) -> Result<Cow<'_, [T]>>
    where
        T: FromBytes + Immutable + KnownLayout + Clone,
    {
        if let Some(values) = self.contiguous(m, k) {
            return Ok(Cow::Borrowed(values));
        }
        let mut out = Vec::with_capacity(m * k);
        for r in 0..m {
            let row = self.row(r, k)?;
            out.extend(
                row.chunks_exact(2)
                    .map(|p| make(u16::from_le_bytes([p[0], p[1]]))),
            );
        }
        Ok(Cow::Owned(out))
    }

    /// The values of `m` rows of `k` as f32, contiguous: f32 rows where they are
    /// ([`Rows::contiguous`]), other rows converted into a copy.
    pub(crate) fn f32_values(&self, m: usize, k: usize) -> Result<Cow<'_, [f32]>> {
        if self.ty == XType::F32
            && let Some(values) = self.contiguous(m, k)
        {
            return Ok(Cow::Borrowed(values));
        }
        let mut out = Vec::with_capacity(m * k);
        for r in 0..m {
            let row = self.row(r, k)?;
            match self.ty {
                XType::F32 => out.extend(
                    row.chunks_exact(4)
                        .map(|p| f32::from_le_bytes([p[0], p[1], p[2], p[3]])),
                ),
                XType::F16 => out.extend(
                    row.chunks_exact(2)
                        .map(|p| half::f16::from_le_bytes([p[0], p[1]]).to_f32()),
                ),
                XType::Bf16 => out.extend(
                    row.chunks_exact(2)
                        .map(|p| half::bf16::from_le_bytes([p[0], p[1]]).to_f32()),
                ),
            }
        }
        Ok(Cow::Owned(out))
    }

    fn row(&self, r: usize, k: usize) -> Result<&[u8]> {
        let at = r * self.stride;
        self.bytes
            .get(at..at + k * self.ty.size())
            .ok_or_else(|| Failure::arg("x is shorter than m rows"))
    }
}
