//! The bounded header reader: a cursor over the file's bytes that checks every read,
//! and every count against the bytes left, before anything is allocated.

use super::types::{Array, GgmlType, Value, ValueType};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, Error, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS};
use super::{Result, TensorInfo};
use std::collections::HashSet;

/// The fewest bytes a tensor info takes: name length, dimension count, type, offset.
const MIN_TENSOR_INFO: u64 = 8 + 4 + 4 + 8;
/// The fewest bytes a metadata pair takes: key length, value type, a one-byte value.
const MIN_KV: u64 = 8 + 4 + 1;

/// What the header of a file says.
pub(super) struct Header {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u32,
    pub data_offset: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn left(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        let truncated = Error::Truncated {
            offset: self.offset(),
            what,
            needed: n,
            available: self.left(),
        };
        let n = usize::try_from(n).map_err(|_| truncated.clone())?;
        let end = self.pos.checked_add(n).ok_or(truncated.clone())?;
        let bytes = self.buf.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let b = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of items of at least `min_size` bytes each: refused if the rest of the
    /// file could not hold that many.
    fn count(&mut self, what: &'static str, min_size: u64) -> Result<usize> {
        let offset = self.offset();
        let n = self.u64(what)?;
        let limit = self.left() / min_size.max(1);
        if n > limit {
            return Err(Error::TooLarge {
                offset,
                what,
                value: n,
                limit,
            });
        }
        // At most the file's length, which is a usize.
        usize::try_from(n).map_err(|_| Error::TooLarge {
            offset,
            what,
            value: n,
            limit,
        })
    }

    fn string(&mut self, what: &'static str) -> Result<String> {
        let offset = self.offset();
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| Error::Invalid {
            offset: offset + 8 + e.utf8_error().valid_up_to() as u64,
            what: "string (not UTF-8)",
            value: format!("{what} of {len} bytes"),
        })
    }

    fn value_type(&mut self) -> Result<ValueType> {
        let offset = self.offset();
        let code = self.u32("value type")?;
        ValueType::from_code(code).ok_or(Error::Invalid {
            offset,
            what: "metadata value type (0..=12)",
            value: code.to_string(),
        })
    }

    fn bool(&mut self) -> Result<bool> {
        let offset = self.offset();
        match self.array::<1>("bool")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(Error::Invalid {
                offset,
                what: "bool (0 or 1)",
                value: b.to_string(),
            }),
        }
    }

    fn value(&mut self, ty: ValueType, depth: u32) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array("u8")?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array("i8")?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("u16")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("i16")?)),
            ValueType::U32 => Value::U32(self.u32("u32")?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("i32")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("f32")?)),
            ValueType::Bool => Value::Bool(self.bool()?),
            ValueType::String => Value::String(self.string("string value")?),
            ValueType::Array => Value::Array(self.array_value(depth + 1)?),
            ValueType::U64 => Value::U64(self.u64("u64")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("i64")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("f64")?)),
        })
    }

    /// `n` elements read by `one`, allocated only after the count was bounded.
    fn elements<T>(
        &mut self,
        n: usize,
        mut one: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(one(self)?);
        }
        Ok(v)
    }

    fn array_value(&mut self, depth: u32) -> Result<Array> {
        let offset = self.offset();
        if depth > MAX_ARRAY_DEPTH {
            return Err(Error::TooLarge {
                offset,
                what: "nesting of metadata arrays",
                value: depth.into(),
                limit: MAX_ARRAY_DEPTH.into(),
            });
        }
        let ty = self.value_type()?;
        let n = self.count("array length", ty.min_size())?;
        macro_rules! plain {
            ($variant:ident, $t:ty) => {
                Array::$variant(
                    self.elements(n, |c| c.array(stringify!($t)).map(<$t>::from_le_bytes))?,
                )
            };
        }
        Ok(match ty {
            ValueType::U8 => Array::U8(self.take(n as u64, "u8 array")?.to_vec()),
            ValueType::I8 => plain!(I8, i8),
            ValueType::U16 => plain!(U16, u16),
            ValueType::I16 => plain!(I16, i16),
            ValueType::U32 => plain!(U32, u32),
            ValueType::I32 => plain!(I32, i32),
            ValueType::F32 => plain!(F32, f32),
            ValueType::U64 => plain!(U64, u64),
            ValueType::I64 => plain!(I64, i64),
            ValueType::F64 => plain!(F64, f64),
            ValueType::Bool => Array::Bool(self.elements(n, Cursor::bool)?),
            ValueType::String => Array::String(self.elements(n, |c| c.string("string element"))?),
            ValueType::Array => Array::Array(self.elements(n, |c| c.array_value(depth + 1))?),
        })
    }

    fn tensor_info(&mut self) -> Result<TensorInfo> {
        let name = self.string("tensor name")?;
        let dims_at = self.offset();
        let n_dims = self.u32("tensor dimension count")?;
        if n_dims > MAX_DIMS {
            return Err(Error::TooLarge {
                offset: dims_at,
                what: "tensor dimension count",
                value: n_dims.into(),
                limit: MAX_DIMS.into(),
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut elements: u64 = 1;
        for _ in 0..n_dims {
            let d_at = self.offset();
            let d = self.u64("tensor dimension")?;
            // ggml counts elements in i64: the product must fit one.
            elements = elements
                .checked_mul(d)
                .filter(|&e| e <= i64::MAX as u64)
                .ok_or(Error::TooLarge {
                    offset: d_at,
                    what: "tensor element count (product of the dimensions)",
                    value: d,
                    limit: i64::MAX as u64 / elements.max(1),
                })?;
            dims.push(d);
        }
        let ty_at = self.offset();
        let code = self.u32("tensor type")?;
        let ggml_type = GgmlType::from_code(code).ok_or(Error::Invalid {
            offset: ty_at,
            what: "tensor type (a ggml type code)",
            value: format!("{code} (tensor {name:?})"),
        })?;
        let block = ggml_type.block_size();
        // A tensor of no dimension is one value: a whole block only of plain types.
        let first = dims.first().copied().unwrap_or(1);
        if !first.is_multiple_of(block) {
            return Err(Error::Invalid {
                offset: dims_at + 4,
                what: "first dimension (a whole number of blocks)",
                value: format!("{first} for {ggml_type} blocks of {block} (tensor {name:?})"),
            });
        }
        let offset = self.u64("tensor data offset")?;
        Ok(TensorInfo {
            name,
            ggml_type,
            dims,
            offset,
        })
    }
}

/// Reads the header of the file `buf`: metadata, tensor infos, alignment and data offset,
/// with every tensor's data checked to lie inside the file.
pub(super) fn header(buf: &[u8]) -> Result<Header> {
    let mut c = Cursor { buf, pos: 0 };
    let magic: [u8; 4] = c.array("magic")?;
    if magic != MAGIC {
        return Err(Error::BadMagic { found: magic });
    }
    let version = c.u32("version")?;
    if !(2..=3).contains(&version) {
        return Err(Error::UnsupportedVersion { version });
    }
    let n_tensors = c.count("tensor count", MIN_TENSOR_INFO)?;
    let n_kv = c.count("metadata count", MIN_KV)?;

    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(n_kv);
    let mut keys = HashSet::with_capacity(n_kv);
    let mut alignment = DEFAULT_ALIGNMENT;
    for _ in 0..n_kv {
        let at = c.offset();
        let key = c.string("metadata key")?;
        if !keys.insert(key.clone()) {
            return Err(Error::Duplicate {
                offset: at,
                what: "metadata key",
                name: key,
            });
        }
        let ty = c.value_type()?;
        let value_at = c.offset();
        let value = c.value(ty, 0)?;
        if key == ALIGNMENT_KEY {
            alignment = match value {
                Value::U32(a) if a.is_power_of_two() => a,
                ref v => {
                    return Err(Error::Invalid {
                        offset: value_at,
                        what: "general.alignment (a u32 power of two)",
                        value: format!("{v:?}"),
                    });
                }
            };
        }
        metadata.push((key, value));
    }

    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(n_tensors);
    let mut names = HashSet::with_capacity(n_tensors);
    let mut info_offsets = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let at = c.offset();
        let info = c.tensor_info()?;
        if !names.insert(info.name.clone()) {
            return Err(Error::Duplicate {
                offset: at,
                what: "tensor name",
                name: info.name,
            });
        }
        info_offsets.push(at);
        tensors.push(info);
    }

    // The data section starts at the next multiple of the alignment (it may lie past
    // the end of a file with no tensor data).
    let data_offset = c.offset().next_multiple_of(alignment.into());
    let file_len = buf.len() as u64;
    for (info, at) in tensors.iter().zip(info_offsets) {
        if !info.offset.is_multiple_of(alignment.into()) {
            return Err(Error::Invalid {
                offset: at,
                what: "tensor data offset (a multiple of the alignment)",
                value: format!(
                    "{} with alignment {alignment} (tensor {:?})",
                    info.offset, info.name
                ),
            });
        }
        let bytes =
            (info.elements() / info.ggml_type.block_size()).checked_mul(info.ggml_type.type_size());
        let start = data_offset.checked_add(info.offset);
        let end = start.zip(bytes).and_then(|(s, b)| s.checked_add(b));
        match (start, end) {
            (Some(_), Some(e)) if e <= file_len => {}
            _ => {
                return Err(Error::OutOfBounds {
                    tensor: info.name.clone(),
                    start: start.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    file_len,
                });
            }
        }
    }
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}
