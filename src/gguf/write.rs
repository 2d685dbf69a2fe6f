//! A GGUF (version 3) writer: metadata of every type and F32, F16, Q8_0, Q4_0 (or raw)
//! tensors, quantised by ggml's reference rules. Enough to write test files and small
//! models; the reader reads back what it writes.
//!
//! ```
//! use rknpu_driver::gguf::{Gguf, Value, write::Writer};
//!
//! let mut w = Writer::new();
//! w.metadata("general.alignment", Value::U32(64))?;
//! w.tensor_f32("bias", &[4], &[1.0, 2.0, 3.0, 4.0])?;
//! let file = Gguf::parse(&w.to_bytes())?;
//! assert_eq!(file.alignment(), 64);
//! assert_eq!(file.dequantize("bias")?, [1.0, 2.0, 3.0, 4.0]);
//! # Ok::<(), rknpu_driver::gguf::GgufError>(())
//! ```

use super::types::{Array, GgmlType, Value};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GgufError, MAGIC, MAX_DIMS, Result};
use crate::float::f32_to_f16;
use half::f16;
use std::collections::HashSet;
use std::path::Path;

/// Values of a Q8_0 or Q4_0 block.
const QK: usize = 32;

struct Tensor {
    name: String,
    ty: GgmlType,
    dims: Vec<u64>,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then writes them as one GGUF file.
pub struct Writer {
    alignment: u32,
    metadata: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<Tensor>,
    names: HashSet<String>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("alignment", &self.alignment)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

fn unsupported(tensor: &str, what: String) -> GgufError {
    GgufError::Unsupported {
        tensor: tensor.to_string(),
        what,
    }
}

fn finite(tensor: &str, values: &[f32]) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(unsupported(
            tensor,
            format!(
                "value {i} is {} (only finite values are quantised)",
                values[i]
            ),
        )),
        None => Ok(()),
    }
}

/// Quantises `values` (a multiple of 32) to Q8_0 blocks as ggml's reference quantiser
/// does: per block `d = max|x| / 127`, `q = round(x / d)` (halves away from zero, by the
/// f32 reciprocal of `d`), `d` stored as f16.
pub fn quantize_q8_0(values: &[f32]) -> Result<Vec<u8>> {
    blocks("Q8_0 values", values)?;
    let mut out = Vec::with_capacity(values.len() / QK * 34);
    for block in values.chunks_exact(QK) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        out.extend(block.iter().map(|&x| (x * id).round() as i8 as u8));
    }
    Ok(out)
}

/// Quantises `values` (a multiple of 32) to Q4_0 blocks as ggml's reference quantiser
/// does: per block the value of largest magnitude `max` (the first of equals) gives
/// `d = max / −8`, and `q = min(15, trunc(x / d + 8.5))` (by the f32 reciprocal of `d`),
/// value `j` in the low nibble of byte `j` and value `j + 16` in its high nibble, `d`
/// stored as f16.
pub fn quantize_q4_0(values: &[f32]) -> Result<Vec<u8>> {
    blocks("Q4_0 values", values)?;
    let mut out = Vec::with_capacity(values.len() / QK * 18);
    for block in values.chunks_exact(QK) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in block {
            if v.abs() > amax {
                (amax, max) = (v.abs(), v);
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        let q = |x: f32| ((x * id + 8.5) as i32).clamp(0, 15) as u8;
        out.extend((0..QK / 2).map(|j| q(block[j]) | (q(block[j + QK / 2]) << 4)));
    }
    Ok(out)
}

fn blocks(what: &'static str, values: &[f32]) -> Result<()> {
    if !values.len().is_multiple_of(QK) {
        return Err(unsupported(
            "",
            format!("{what}: {} is not a multiple of 32", values.len()),
        ));
    }
    finite("", values)
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&a.element_type().code().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| b as u8)),
        Array::String(v) => v.iter().for_each(|s| put_string(out, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(out, a)),
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn depth(a: &Array) -> u32 {
    match a {
        Array::Array(v) => 1 + v.iter().map(depth).max().unwrap_or(0),
        _ => 1,
    }
}

impl Default for Writer {
    fn default() -> Writer {
        Writer::new()
    }
}

impl Writer {
    /// An empty file (alignment 32).
    pub fn new() -> Writer {
        Writer {
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            keys: HashSet::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
        }
    }

    /// Adds a metadata pair. `general.alignment` (a `u32` power of two) also sets the
    /// alignment of the tensor data. A key given twice, or arrays nested deeper than
    /// the reader reads, are refused.
    pub fn metadata(&mut self, key: &str, value: Value) -> Result<&mut Writer> {
        if self.keys.contains(key) {
            return Err(GgufError::Duplicate {
                offset: 0,
                what: "metadata key",
                name: key.to_string(),
            });
        }
        if let Value::Array(a) = &value
            && depth(a) > super::MAX_ARRAY_DEPTH
        {
            return Err(unsupported(
                "",
                format!("metadata {key:?}: arrays nested deeper than the reader reads"),
            ));
        }
        if key == ALIGNMENT_KEY {
            match value {
                Value::U32(a) if a.is_power_of_two() => self.alignment = a,
                ref v => {
                    return Err(GgufError::Invalid {
                        offset: 0,
                        what: "general.alignment (a u32 power of two)",
                        value: format!("{v:?}"),
                    });
                }
            }
        }
        self.keys.insert(key.to_string());
        self.metadata.push((key.to_string(), value));
        Ok(self)
    }

    /// Adds a tensor of type `ty` whose data is `data` (exactly the bytes of its shape
    /// `dims`, GGUF order: `dims[0]` innermost, a whole number of blocks).
    pub fn tensor_raw(
        &mut self,
        name: &str,
        ty: GgmlType,
        dims: &[u64],
        data: Vec<u8>,
    ) -> Result<&mut Writer> {
        if self.names.contains(name) {
            return Err(GgufError::Duplicate {
                offset: 0,
                what: "tensor name",
                name: name.to_string(),
            });
        }
        if dims.len() > MAX_DIMS as usize {
            return Err(unsupported(name, format!("{} dimensions", dims.len())));
        }
        let elements = dims.iter().try_fold(1u64, |p, &d| p.checked_mul(d));
        let bytes = elements
            .filter(|e| e.is_multiple_of(ty.block_size()))
            .filter(|_| {
                dims.first()
                    .is_none_or(|d| d.is_multiple_of(ty.block_size()))
            })
            .and_then(|e| (e / ty.block_size()).checked_mul(ty.type_size()));
        if bytes != Some(data.len() as u64) {
            return Err(unsupported(
                name,
                format!(
                    "{} bytes of {ty} data for dims {dims:?} (blocks of {})",
                    data.len(),
                    ty.block_size()
                ),
            ));
        }
        self.names.insert(name.to_string());
        self.tensors.push(Tensor {
            name: name.to_string(),
            ty,
            dims: dims.to_vec(),
            data,
        });
        Ok(self)
    }

    /// Adds an F32 tensor.
    pub fn tensor_f32(&mut self, name: &str, dims: &[u64], values: &[f32]) -> Result<&mut Writer> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor_raw(name, GgmlType::F32, dims, data)
    }

    /// Adds an F16 tensor.
    pub fn tensor_f16(&mut self, name: &str, dims: &[u64], values: &[f16]) -> Result<&mut Writer> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor_raw(name, GgmlType::F16, dims, data)
    }

    /// Adds `values` quantised to Q8_0 ([`quantize_q8_0`]).
    pub fn tensor_q8_0(&mut self, name: &str, dims: &[u64], values: &[f32]) -> Result<&mut Writer> {
        finite(name, values)?;
        self.tensor_raw(name, GgmlType::Q8_0, dims, quantize_q8_0(values)?)
    }

    /// Adds `values` quantised to Q4_0 ([`quantize_q4_0`]).
    pub fn tensor_q4_0(&mut self, name: &str, dims: &[u64], values: &[f32]) -> Result<&mut Writer> {
        finite(name, values)?;
        self.tensor_raw(name, GgmlType::Q4_0, dims, quantize_q4_0(values)?)
    }

    /// The file: header, metadata, tensor infos, then each tensor's data at the next
    /// multiple of the alignment.
    pub fn to_bytes(&self) -> Vec<u8> {
        let align = u64::from(self.alignment);
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            out.extend_from_slice(&value.value_type().code().to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.code().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + t.data.len() as u64).next_multiple_of(align);
        }
        for t in &self.tensors {
            out.resize((out.len() as u64).next_multiple_of(align) as usize, 0);
            out.extend_from_slice(&t.data);
        }
        out
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()).map_err(|e| GgufError::Io {
            path: path.display().to_string(),
            error: e.to_string(),
        })
    }
}
