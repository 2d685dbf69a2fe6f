//! The bounded header reader: a cursor over the file's bytes that checks every read,
//! and every count against the bytes left, before anything is allocated; and the
//! compact index it builds: fixed-size entries that point into the file's bytes
//! (names and metadata values are read from there when asked for), sorted for lookup.

use super::types::{Array, GgmlType, Value, ValueType};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GgufError, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS};
use super::{MAX_HEADER_BYTES, Result};

/// The fewest bytes a tensor info takes: name length, dimension count, type, offset.
const MIN_TENSOR_INFO: u64 = 8 + 4 + 4 + 8;
/// The fewest bytes a metadata pair takes: key length, value type, a one-byte value.
const MIN_KV: u64 = 8 + 4 + 1;

/// A metadata entry: where its key and value are in the file (16 bytes).
#[derive(Clone, Copy, Debug)]
pub(super) struct Kv {
    /// Offset of the key's bytes.
    pub key: u32,
    /// Length of the key.
    pub key_len: u32,
    /// Offset of the value's bytes.
    pub value: u32,
    /// The value's type.
    pub ty: ValueType,
}

/// A tensor entry (24 bytes): where its name is in the file, its dims in the index's
/// pool, its type and data offset.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    /// Offset of the name's bytes in the file.
    pub name: u32,
    /// Length of the name.
    pub name_len: u32,
    /// Index of the first dim in [`Index::dims`].
    pub dims: u32,
    /// Dims (at most [`MAX_DIMS`]).
    pub n_dims: u8,
    /// The element type.
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

/// What the header of a file says, as fixed-size entries into the file's bytes.
#[derive(Clone, Debug, Default)]
pub(super) struct Index {
    pub version: u32,
    pub alignment: u32,
    pub data_offset: u64,
    /// The metadata in file order.
    pub kvs: Vec<Kv>,
    /// Indices into `kvs`, sorted by key bytes.
    pub kv_order: Vec<u32>,
    /// The tensors in file order.
    pub tensors: Vec<Entry>,
    /// Indices into `tensors`, sorted by name bytes.
    pub tensor_order: Vec<u32>,
    /// The dims of every tensor, one after the other.
    pub dims: Vec<u64>,
}

impl Index {
    /// Heap bytes the index holds (by capacity).
    pub fn heap_bytes(&self) -> usize {
        self.kvs.capacity() * size_of::<Kv>()
            + self.kv_order.capacity() * 4
            + self.tensors.capacity() * size_of::<Entry>()
            + self.tensor_order.capacity() * 4
            + self.dims.capacity() * 8
    }
}

/// The bytes `len` bytes from `at` in `buf`, as text: what the header reader checked to
/// be UTF-8 (empty if they are not, which a parsed file's entries never are).
pub(super) fn text(buf: &[u8], at: u32, len: u32) -> &str {
    let (at, len) = (at as usize, len as usize);
    buf.get(at..at.saturating_add(len))
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("")
}

/// The value of type `ty` at `at` in `buf` (checked when the file was read, so `None`
/// only for an entry of another file).
pub(super) fn value_at(buf: &[u8], at: u32, ty: ValueType) -> Option<Value> {
    Cursor {
        buf,
        pos: at as usize,
        len: buf.len() as u64,
    }
    .value(ty, 0)
    .ok()
}

/// The bytes `len` bytes from `at` in `buf` (empty outside it).
pub(super) fn raw(buf: &[u8], at: u32, len: u32) -> &[u8] {
    let (at, len) = (at as usize, len as usize);
    buf.get(at..at.saturating_add(len)).unwrap_or(&[])
}

/// A cursor over the first bytes of a file of `len` bytes: `buf` is all of it when the
/// file is in memory, or a prefix of it when the header is read from disk a piece at a
/// time. Counts are checked against the whole file; a read past `buf` but within the
/// file is [`GgufError::Truncated`] with `needed <= available` (see [`needs_more`]).
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    len: u64,
}

impl<'a> Cursor<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn left(&self) -> u64 {
        self.len.saturating_sub(self.pos as u64)
    }

    /// The offset as the index keeps it: the header must end within
    /// [`MAX_HEADER_BYTES`].
    fn offset32(&self, what: &'static str) -> Result<u32> {
        u32::try_from(self.pos).map_err(|_| GgufError::TooLarge {
            offset: self.offset(),
            what,
            value: self.offset(),
            limit: MAX_HEADER_BYTES,
        })
    }

    /// A string as the index keeps it: the offset and length of its bytes, both within
    /// [`MAX_HEADER_BYTES`], and the text.
    fn str32(&mut self, what: &'static str) -> Result<(u32, u32, &'a str)> {
        let s = self.str(what)?;
        let start = self.pos - s.len();
        let too_large = GgufError::TooLarge {
            offset: start as u64,
            what: "header size (the end of a name or key)",
            value: self.offset(),
            limit: MAX_HEADER_BYTES,
        };
        // The end within the limit puts the start and the length there too.
        u32::try_from(self.pos).map_err(|_| too_large)?;
        Ok((start as u32, s.len() as u32, s))
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        let truncated = GgufError::Truncated {
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
    /// file (or of the most a header may take), less `reserved` bytes other items need,
    /// could not hold that many.
    fn count(&mut self, what: &'static str, min_size: u64, reserved: u64) -> Result<usize> {
        let offset = self.offset();
        let n = self.u64(what)?;
        // Every item is in the header, which ends within MAX_HEADER_BYTES.
        let room = self
            .left()
            .min(MAX_HEADER_BYTES.saturating_sub(self.offset()));
        let limit = room.saturating_sub(reserved) / min_size.max(1);
        if n > limit {
            return Err(GgufError::TooLarge {
                offset,
                what,
                value: n,
                limit,
            });
        }
        // At most the file's length, which is a usize.
        usize::try_from(n).map_err(|_| GgufError::TooLarge {
            offset,
            what,
            value: n,
            limit,
        })
    }

    /// A string: its bytes, checked to be UTF-8, with the offset of its length field.
    fn str(&mut self, what: &'static str) -> Result<&'a str> {
        let offset = self.offset();
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|e| GgufError::Invalid {
            offset: offset + 8 + e.valid_up_to() as u64,
            what: "string (not UTF-8)",
            value: format!("{what} of {len} bytes"),
        })
    }

    fn value_type(&mut self) -> Result<ValueType> {
        let offset = self.offset();
        let code = self.u32("value type")?;
        ValueType::from_code(code).ok_or(GgufError::Invalid {
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
            b => Err(GgufError::Invalid {
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
            ValueType::String => Value::String(self.str("string value")?.to_string()),
            ValueType::Array => Value::Array(self.array_value(depth + 1)?),
            ValueType::U64 => Value::U64(self.u64("u64")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("i64")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("f64")?)),
        })
    }

    /// Checks a value of type `ty` and steps over it, allocating nothing: what the
    /// header reader does, so that a file's metadata costs the index 16 bytes an entry
    /// however large its values are.
    fn skip_value(&mut self, ty: ValueType, depth: u32) -> Result<()> {
        match ty {
            ValueType::Bool => self.bool().map(drop),
            ValueType::String => self.str("string value").map(drop),
            ValueType::Array => self.skip_array(depth + 1),
            plain => self.take(plain.min_size(), "value").map(drop),
        }
    }

    fn array_header(&mut self, depth: u32) -> Result<(ValueType, usize)> {
        let offset = self.offset();
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::TooLarge {
                offset,
                what: "nesting of metadata arrays",
                value: depth.into(),
                limit: MAX_ARRAY_DEPTH.into(),
            });
        }
        let ty = self.value_type()?;
        let n = self.count("array length", ty.min_size(), 0)?;
        Ok((ty, n))
    }

    fn skip_array(&mut self, depth: u32) -> Result<()> {
        let (ty, n) = self.array_header(depth)?;
        match ty {
            ValueType::Bool => (0..n).try_for_each(|_| self.bool().map(drop)),
            ValueType::String => (0..n).try_for_each(|_| self.str("string element").map(drop)),
            ValueType::Array => (0..n).try_for_each(|_| self.skip_array(depth + 1)),
            // The count was bounded by the bytes left: the product fits.
            plain => self.take(n as u64 * plain.min_size(), "array").map(drop),
        }
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
        let (ty, n) = self.array_header(depth)?;
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
            ValueType::String => {
                Array::String(self.elements(n, |c| c.str("string element").map(str::to_string))?)
            }
            ValueType::Array => Array::Array(self.elements(n, |c| c.array_value(depth + 1))?),
        })
    }

    /// A tensor info, its dims appended to `dims`.
    fn tensor_info(&mut self, dims: &mut Vec<u64>) -> Result<Entry> {
        let (name, name_len, name_str) = self.str32("tensor name")?;
        let dims_at = self.offset();
        let n_dims = self.u32("tensor dimension count")?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::TooLarge {
                offset: dims_at,
                what: "tensor dimension count",
                value: n_dims.into(),
                limit: MAX_DIMS.into(),
            });
        }
        let first_dim = u32::try_from(dims.len()).map_err(|_| GgufError::TooLarge {
            offset: dims_at,
            what: "dims of all tensors",
            value: dims.len() as u64,
            limit: u32::MAX.into(),
        })?;
        let mut elements: u64 = 1;
        for _ in 0..n_dims {
            let d_at = self.offset();
            let d = self.u64("tensor dimension")?;
            // ggml counts elements in i64: the product must fit one.
            elements = elements
                .checked_mul(d)
                .filter(|&e| e <= i64::MAX as u64)
                .ok_or(GgufError::TooLarge {
                    offset: d_at,
                    what: "tensor element count (product of the dimensions)",
                    value: d,
                    limit: i64::MAX as u64 / elements.max(1),
                })?;
            dims.push(d);
        }
        let ty_at = self.offset();
        let code = self.u32("tensor type")?;
        let ty = GgmlType::from_code(code).ok_or_else(|| GgufError::Invalid {
            offset: ty_at,
            what: "tensor type (a ggml type code)",
            value: format!("{code} (tensor {name_str:?})"),
        })?;
        let block = ty.block_size();
        // A tensor of no dimension is one value: a whole block only of plain types.
        let first = if n_dims == 0 {
            1
        } else {
            dims[first_dim as usize]
        };
        if !first.is_multiple_of(block) {
            return Err(GgufError::Invalid {
                offset: dims_at + 4,
                what: "first dimension (a whole number of blocks)",
                value: format!("{first} for {ty} blocks of {block} (tensor {name_str:?})"),
            });
        }
        let offset = self.u64("tensor data offset")?;
        Ok(Entry {
            name,
            name_len,
            dims: first_dim,
            n_dims: n_dims as u8,
            ty,
            offset,
        })
    }
}

/// Indices `0..n` sorted by `key`, and the first (in file order) entry whose key equals
/// an earlier one's, as its index.
fn sorted<'b>(n: usize, key: impl Fn(usize) -> &'b [u8]) -> (Vec<u32>, Option<usize>) {
    // n fits u32: the header is at most 4 GiB and an entry takes at least 13 bytes.
    let mut order: Vec<u32> = (0..n as u32).collect();
    // Stable: equal keys stay in file order.
    order.sort_by(|&a, &b| key(a as usize).cmp(key(b as usize)));
    let duplicate = order
        .windows(2)
        .filter(|w| key(w[0] as usize) == key(w[1] as usize))
        .map(|w| w[1] as usize)
        .min();
    (order, duplicate)
}

/// Whether `e`, from [`header`] over a prefix of a file, asks for more of the file's bytes
/// (the header goes on past the prefix) rather than reporting a fault: a read the file
/// itself could satisfy.
pub(super) fn needs_more(e: &GgufError) -> bool {
    matches!(e, GgufError::Truncated { needed, available, .. } if needed <= available)
}

/// Reads the header of a file of `file_len` bytes from `buf`, its first bytes (all of
/// them, or a prefix: then a header that goes on past it is an error [`needs_more`]
/// recognises): metadata, tensor infos, alignment and data offset, with every tensor's
/// data checked to lie inside the file.
pub(super) fn header(buf: &[u8], file_len: u64) -> Result<Index> {
    let mut c = Cursor {
        buf,
        pos: 0,
        len: file_len,
    };
    let magic: [u8; 4] = c.array("magic")?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32("version")?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let n_tensors = c.count("tensor count", MIN_TENSOR_INFO, 0)?;
    // The metadata shares the bytes left with the tensor infos.
    let n_kv = c.count("metadata count", MIN_KV, n_tensors as u64 * MIN_TENSOR_INFO)?;

    let mut kvs: Vec<Kv> = Vec::with_capacity(n_kv);
    let mut alignment = DEFAULT_ALIGNMENT;
    for _ in 0..n_kv {
        let (key_at, key_len, key) = c.str32("metadata key")?;
        let ty = c.value_type()?;
        let value_at = c.offset();
        let value = c.offset32("header size (metadata value offset)")?;
        if key == ALIGNMENT_KEY {
            alignment = match c.value(ty, 0)? {
                Value::U32(a) if a.is_power_of_two() => a,
                ref v => {
                    return Err(GgufError::Invalid {
                        offset: value_at,
                        what: "general.alignment (a u32 power of two)",
                        value: format!("{v:?}"),
                    });
                }
            };
        } else {
            c.skip_value(ty, 0)?;
        }
        kvs.push(Kv {
            key: key_at,
            key_len,
            value,
            ty,
        });
    }
    let (kv_order, duplicate) = sorted(kvs.len(), |i| raw(buf, kvs[i].key, kvs[i].key_len));
    if let Some(i) = duplicate {
        let kv = kvs[i];
        return Err(GgufError::Duplicate {
            offset: u64::from(kv.key) - 8,
            what: "metadata key",
            name: text(buf, kv.key, kv.key_len).to_string(),
        });
    }

    let mut tensors: Vec<Entry> = Vec::with_capacity(n_tensors);
    let mut dims = Vec::new();
    for _ in 0..n_tensors {
        tensors.push(c.tensor_info(&mut dims)?);
    }
    dims.shrink_to_fit();
    let (tensor_order, duplicate) = sorted(tensors.len(), |i| {
        raw(buf, tensors[i].name, tensors[i].name_len)
    });
    if let Some(i) = duplicate {
        let t = tensors[i];
        return Err(GgufError::Duplicate {
            offset: u64::from(t.name) - 8,
            what: "tensor name",
            name: text(buf, t.name, t.name_len).to_string(),
        });
    }

    // The data section starts at the next multiple of the alignment (it may lie past
    // the end of a file with no tensor data).
    let data_offset = c.offset().next_multiple_of(alignment.into());
    let index = Index {
        version,
        alignment,
        data_offset,
        kvs,
        kv_order,
        tensors,
        tensor_order,
        dims,
    };
    for t in &index.tensors {
        let info = super::TensorInfo::of(buf, &index, t);
        if !info.offset.is_multiple_of(alignment.into()) {
            return Err(GgufError::Invalid {
                offset: u64::from(t.name) - 8,
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
                return Err(GgufError::OutOfBounds {
                    tensor: info.name.to_string(),
                    start: start.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    file_len,
                });
            }
        }
    }
    Ok(index)
}
