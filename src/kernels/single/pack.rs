//! Host-side packers of the single-task matmul: row-major operands to the layouts the
//! task reads and writes, and back.

use super::{Dtype, Layout, OutType, SingleMatmul, unsupported};
use crate::error::{Error, Result};
use crate::float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

/// The two inputs of a matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operand {
    A,
    B,
}

impl Operand {
    fn name(self) -> &'static str {
        match self {
            Operand::A => "A",
            Operand::B => "B",
        }
    }
}

impl SingleMatmul {
    fn check_len(&self, what: &'static str, got: usize, want: usize) -> Result<()> {
        if got != want {
            return Err(unsupported(format!(
                "{what} has {got} elements, the shape needs {want}"
            )));
        }
        Ok(())
    }

    /// Byte offset of element `(m, k)` of A (for int4: of the byte holding it).
    pub fn a_offset(&self, m: u32, k: u32) -> usize {
        let (m, k) = (m as usize, k as usize);
        let bits = self.dtype.bits() as usize;
        let elem = match self.a_layout {
            Layout::Plain => m * self.padded_k() as usize + k,
            Layout::Native => {
                let e = self.dtype.atom_elems() as usize;
                ((k / e) * self.m as usize + m) * e + k % e
            }
        };
        elem * bits / 8
    }

    /// Byte offset of element `(k, n)` of B (for int4: of the byte holding it).
    pub fn b_offset(&self, k: u32, n: u32) -> usize {
        let (k, n) = (k as usize, n as usize);
        let g = self.dtype.kernels_per_atom() as usize;
        let bytes_row = 32 * self.dtype.bits() as usize / 8;
        let kb = self.padded_k() as usize / 32;
        ((n / g) * kb + k / 32) * 1024
            + (n % g) * bytes_row
            + (k % 32) * self.dtype.bits() as usize / 8
    }

    /// Byte offset of element `(m, n)` of C (and of E).
    pub fn c_offset(&self, m: u32, n: u32) -> usize {
        let (m, n) = (m as usize, n as usize);
        let elem = match self.c_layout {
            Layout::Plain => m * self.padded_n() as usize + n,
            Layout::Native => {
                let e = self.out.atom_elems() as usize;
                ((n / e) * self.m as usize + m) * e + n % e
            }
        };
        elem * self.out.bytes() as usize
    }

    fn put(&self, buf: &mut [u8], off: usize, index: u32, v: i32) {
        match self.dtype {
            Dtype::Int4 => {
                let nib = (v as u8) & 0xF;
                buf[off] = if index.is_multiple_of(2) {
                    (buf[off] & 0x0F) | (nib << 4)
                } else {
                    (buf[off] & 0xF0) | nib
                };
            }
            Dtype::Int8 => buf[off] = v as i8 as u8,
            _ => buf[off..off + 2].copy_from_slice(&(v as i16).to_le_bytes()),
        }
    }

    fn check_int(&self, what: &'static str, values: &[i32]) -> Result<()> {
        if self.dtype.is_float() {
            return Err(unsupported(format!(
                "{what}: integer values for a {:?} matmul",
                self.dtype
            )));
        }
        let (lo, hi) = self.dtype.int_range();
        if let Some(v) = values.iter().find(|v| !(lo..=hi).contains(*v)) {
            return Err(unsupported(format!(
                "{what}: {v} is outside the {:?} range {lo}..={hi}",
                self.dtype
            )));
        }
        Ok(())
    }

    fn float_bits(&self, v: f32) -> i32 {
        match self.dtype {
            Dtype::Fp16 => f32_to_f16(v) as i16 as i32,
            _ => f32_to_bf16(v) as i16 as i32,
        }
    }

    /// Packs A (row-major M×K integers) into the task's layout.
    pub fn pack_a_int(&self, a: &[i32]) -> Result<Vec<u8>> {
        self.pack_int(Operand::A, a)
    }

    /// Packs A (row-major M×K) into the task's layout, rounding to fp16/bf16.
    pub fn pack_a_f32(&self, a: &[f32]) -> Result<Vec<u8>> {
        self.pack_f32(Operand::A, a)
    }

    /// Packs B (row-major K×N integers) into the weight-atom layout.
    pub fn pack_b_int(&self, b: &[i32]) -> Result<Vec<u8>> {
        self.pack_int(Operand::B, b)
    }

    /// Packs B (row-major K×N) into the weight-atom layout, rounding to fp16/bf16.
    pub fn pack_b_f32(&self, b: &[f32]) -> Result<Vec<u8>> {
        self.pack_f32(Operand::B, b)
    }

    /// Rows and columns of a row-major operand.
    fn dims(&self, op: Operand) -> (u32, u32) {
        match op {
            Operand::A => (self.m, self.k),
            Operand::B => (self.k, self.n),
        }
    }

    fn pack_int(&self, op: Operand, values: &[i32]) -> Result<Vec<u8>> {
        let (rows, cols) = self.dims(op);
        self.check_len(op.name(), values.len(), (rows * cols) as usize)?;
        self.check_int(op.name(), values)?;
        Ok(self.pack_with(op, |i| values[i]))
    }

    fn pack_f32(&self, op: Operand, values: &[f32]) -> Result<Vec<u8>> {
        let (rows, cols) = self.dims(op);
        self.check_len(op.name(), values.len(), (rows * cols) as usize)?;
        if !self.dtype.is_float() {
            return Err(unsupported(format!(
                "{}: float values for a {:?} matmul",
                op.name(),
                self.dtype
            )));
        }
        let what = match op {
            Operand::A => "activations",
            Operand::B => "weights",
        };
        check_float(self.dtype, what, values)?;
        Ok(self.pack_with(op, |i| self.float_bits(values[i])))
    }

    /// Lays out a row-major operand; `value(i)` is its i-th element's bits.
    fn pack_with(&self, op: Operand, value: impl Fn(usize) -> i32) -> Vec<u8> {
        let (rows, cols) = self.dims(op);
        let mut buf = vec![
            0u8;
            if op == Operand::A {
                self.a_bytes()
            } else {
                self.b_bytes()
            }
        ];
        for r in 0..rows {
            for c in 0..cols {
                // The K index decides the nibble of int4 values.
                let (offset, k) = match op {
                    Operand::A => (self.a_offset(r, c), c),
                    Operand::B => (self.b_offset(r, c), r),
                };
                self.put(&mut buf, offset, k, value((r * cols + c) as usize));
            }
        }
        buf
    }

    /// Packs E (row-major M×N, int32) into C's layout, for [`PostOps::add`](super::PostOps::add).
    pub fn pack_e_int(&self, e: &[i32]) -> Result<Vec<u8>> {
        self.check_len("E", e.len(), (self.m * self.n) as usize)?;
        Ok(self.pack_e_with(|v: usize| e[v].to_le_bytes()))
    }

    /// Packs E (row-major M×N, fp32) into C's layout, for [`PostOps::add`](super::PostOps::add).
    pub fn pack_e_f32(&self, e: &[f32]) -> Result<Vec<u8>> {
        self.check_len("E", e.len(), (self.m * self.n) as usize)?;
        Ok(self.pack_e_with(|v: usize| e[v].to_bits().to_le_bytes()))
    }

    fn pack_e_with(&self, value: impl Fn(usize) -> [u8; 4]) -> Vec<u8> {
        // E always has 32-bit elements; lay it out as if C were 32-bit.
        let e = SingleMatmul {
            out: if self.dtype.is_float() {
                OutType::Fp32
            } else {
                OutType::Int32
            },
            ..*self
        };
        let mut buf = vec![0u8; e.c_bytes()];
        for m in 0..self.m {
            for n in 0..self.n {
                let o = e.c_offset(m, n);
                buf[o..o + 4].copy_from_slice(&value((m * self.n + n) as usize));
            }
        }
        buf
    }

    /// Bytes of E.
    pub fn e_bytes(&self) -> usize {
        self.m as usize * self.padded_n() as usize * 4
    }

    /// Reads C (integer outputs) back as row-major M×N.
    pub fn unpack_c_int(&self, c: &[u8]) -> Result<Vec<i64>> {
        if self.out.is_float() {
            return Err(unsupported(format!(
                "C: integer read of a {:?} output",
                self.out
            )));
        }
        self.unpack_c(c, |e| match self.out {
            OutType::Int8 => e[0] as i8 as i64,
            OutType::Int16 => i16::from_le_bytes([e[0], e[1]]) as i64,
            _ => i32::from_le_bytes([e[0], e[1], e[2], e[3]]) as i64,
        })
    }

    /// Reads C (float outputs) back as row-major M×N.
    pub fn unpack_c_f32(&self, c: &[u8]) -> Result<Vec<f32>> {
        if !self.out.is_float() {
            return Err(unsupported(format!(
                "C: float read of a {:?} output",
                self.out
            )));
        }
        self.unpack_c(c, |e| match self.out {
            OutType::Fp16 => f16_to_f32(u16::from_le_bytes([e[0], e[1]])),
            OutType::Bf16 => bf16_to_f32(u16::from_le_bytes([e[0], e[1]])),
            _ => f32::from_bits(u32::from_le_bytes([e[0], e[1], e[2], e[3]])),
        })
    }

    /// Every element of C in row-major order, each read by `read` from its bytes.
    fn unpack_c<T>(&self, c: &[u8], read: impl Fn(&[u8]) -> T) -> Result<Vec<T>> {
        self.check_len("C bytes", c.len(), self.c_bytes())?;
        let size = self.out.bytes() as usize;
        let mut out = Vec::with_capacity((self.m * self.n) as usize);
        for m in 0..self.m {
            for n in 0..self.n {
                let o = self.c_offset(m, n);
                out.push(read(&c[o..o + size]));
            }
        }
        Ok(out)
    }
}

/// The non-finite policy of every float matmul path (docs/matmul.md, "Non-finite
/// values"): a value that is NaN or infinite, or that rounds to infinity in `dtype`
/// (fp16 or bf16), is refused with [`Error::OutOfRange`], never packed as ±inf.
pub(crate) fn check_float(dtype: Dtype, what: &'static str, values: &[f32]) -> Result<()> {
    // (convert, infinity's bits without the sign, the accepted range)
    let (bits, inf, range): (fn(f32) -> u16, u16, _) = match dtype {
        Dtype::Fp16 => (f32_to_f16, 0x7c00, "finite, |x| < 65520 (fp16)"),
        _ => (f32_to_bf16, 0x7f80, "finite, |x| < 3.3961e38 (bf16)"),
    };
    match values
        .iter()
        .position(|&v| !v.is_finite() || bits(v) & 0x7fff == inf)
    {
        Some(index) => Err(Error::OutOfRange {
            what,
            index,
            value: values[index].to_string(),
            range,
        }),
        None => Ok(()),
    }
}

/// [`check_float`] for values given as fp16 or bf16 bits (`dtype`): NaN and ±inf, whose
/// exponent is all ones, are refused.
pub(crate) fn check_float_bits(dtype: Dtype, what: &'static str, bits: &[u16]) -> Result<()> {
    let exponent = special_exponent(dtype);
    match bits.iter().position(|&b| b & exponent == exponent) {
        Some(index) => Err(not_finite(dtype, what, index, bits[index])),
        None => Ok(()),
    }
}

/// The exponent bits of an fp16 value (a bf16 one for `dtype` bf16): all ones in an
/// infinity or a NaN, and only there.
pub(crate) fn special_exponent(dtype: Dtype) -> u16 {
    match dtype {
        Dtype::Bf16 => 0x7F80,
        _ => 0x7C00,
    }
}

/// The error of value `index` of `what`, whose fp16 (bf16) bits `bits` are not finite.
pub(crate) fn not_finite(dtype: Dtype, what: &'static str, index: usize, bits: u16) -> Error {
    Error::OutOfRange {
        what,
        index,
        value: match dtype {
            Dtype::Bf16 => half::bf16::from_bits(bits).to_string(),
            _ => half::f16::from_bits(bits).to_string(),
        },
        range: "finite",
    }
}
