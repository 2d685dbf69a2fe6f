//! GGUF model files (the format of llama.cpp and ggml): a bounded reader of versions 2
//! and 3, dequantisation of the common tensor types to f32, loading of weight matrices
//! into [`WeightBank`](crate::compute::matmul::WeightBank)s with a report of the error the
//! bank's type adds, and a writer for tests and tools (docs/gguf.md).
//!
//! The reader never trusts the file: every count and length is checked against the bytes
//! that are left before anything is allocated for it, every tensor's data against the
//! data section, and every failure is a [`GgufError`] that names the byte offset and what
//! was wrong there. Layout facts follow the GGUF specification (`docs/gguf.md` of
//! github.com/ggml-org/ggml) and the block definitions of `ggml-common.h`.
//!
//! ```
//! use rknpu_driver::gguf::{GgmlType, Gguf, Value, write::Writer};
//!
//! // A file with one Q8_0 tensor of 2 rows (ne1) of 32 values (ne0).
//! let w: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 8.0).collect();
//! let mut out = Writer::new();
//! out.metadata("general.name", Value::String("example".into()))?;
//! out.tensor_q8_0("blk.0.ffn_up.weight", &[32, 2], &w)?;
//! let file = Gguf::parse(&out.to_bytes())?;
//!
//! let info = file.tensor("blk.0.ffn_up.weight").expect("written above");
//! assert_eq!((info.ggml_type, info.dims), (GgmlType::Q8_0, &[32u64, 2][..]));
//! assert_eq!(file.metadata("general.name").as_ref().and_then(Value::as_str), Some("example"));
//! let x = file.dequantize("blk.0.ffn_up.weight")?;
//! // Q8_0 keeps each value within half a step (amax / 127 / 2) of its block.
//! assert!(x.iter().zip(&w).all(|(a, b)| (a - b).abs() <= 4.0 / 127.0 / 2.0 + 1e-3));
//! # Ok::<(), rknpu_driver::gguf::GgufError>(())
//! ```

mod dequant;
mod file;
mod grouped;
mod list;
mod load;
mod raw;
mod read;
mod types;
pub mod write;

pub use dequant::{DEQUANTIZED, dequantize, dequantize_into};
pub use grouped::{
    GroupedReport, grouped_layout, grouped_options, groups, groups_exactly, load_grouped,
    load_grouped_report, outlier_options, pack_grouped,
};
pub use list::{LIST_NAME_COLUMN, escape_name, write_listing};
pub use load::{LoadReport, bank_values, load_bank, load_weights};
pub use raw::{
    bank_from_raw, bank_from_raw_as, check_raw, check_raw_as, raw_bank_dtype, raw_row_bytes,
};
pub use types::{Array, GgmlType, Value, ValueType};

use std::borrow::Cow;
use std::fmt;
use std::path::Path;

/// `GGUF` as a little-endian `u32`: the first four bytes of every file.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The alignment of tensor data when the file does not set `general.alignment`.
pub const DEFAULT_ALIGNMENT: u32 = 32;
/// The metadata key that sets the alignment (a `u32`, a power of two).
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// The most dimensions a tensor has (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// How deeply metadata arrays may nest (arrays of arrays): deeper files are refused
/// rather than read by unbounded recursion.
pub const MAX_ARRAY_DEPTH: u32 = 4;
/// The most bytes the header (everything before the data section: metadata and tensor
/// infos) may take: the index keeps its offsets in 32 bits (docs/gguf.md, "Bounds").
pub const MAX_HEADER_BYTES: u64 = u32::MAX as u64;

/// What can be wrong with a GGUF file, or with loading one of its tensors.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum GgufError {
    /// The file ends inside a field.
    Truncated {
        /// Byte offset where the field starts.
        offset: u64,
        /// The field.
        what: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes that are left.
        available: u64,
    },
    /// The first four bytes are not `GGUF`.
    BadMagic {
        /// What they are.
        found: [u8; 4],
    },
    /// A version this reader does not read (it reads 2 and 3; a big-endian file shows
    /// its version byte-swapped).
    UnsupportedVersion {
        /// The version field.
        version: u32,
    },
    /// A count or length larger than the rest of the file could hold (or than a limit of
    /// the format).
    TooLarge {
        /// Byte offset of the field.
        offset: u64,
        /// The field.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The most it could be here.
        limit: u64,
    },
    /// A field whose value the format does not allow: an unknown type code, a boolean
    /// that is neither 0 nor 1, a string that is not UTF-8, a bad alignment, a tensor
    /// shape or offset that breaks the rules of its type.
    Invalid {
        /// Byte offset of the field.
        offset: u64,
        /// The field and the rule.
        what: &'static str,
        /// The value found.
        value: String,
    },
    /// A metadata key or tensor name that appears twice.
    Duplicate {
        /// Byte offset of the second occurrence.
        offset: u64,
        /// `metadata key` or `tensor name`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A tensor whose data lies (partly) outside the data section.
    OutOfBounds {
        /// The tensor.
        tensor: String,
        /// First byte of its data in the file.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// Bytes in the file.
        file_len: u64,
    },
    /// No tensor of that name.
    NoSuchTensor {
        /// The name asked for.
        name: String,
    },
    /// A valid file asked for something this library does not do (dequantise a type
    /// it does not know, load a tensor that is not a matrix, a bank of another type).
    Unsupported {
        /// The tensor (empty when none is concerned).
        tensor: String,
        /// What, and why not.
        what: String,
    },
    /// A weight a bank of type `bank` cannot hold: a NaN, an infinity, or a finite
    /// value that rounds to infinity in an fp16 or bf16 bank (docs/gguf.md, "Bounds").
    NotRepresentable {
        /// The tensor.
        tensor: String,
        /// The row (output channel) of the value.
        row: u64,
        /// Its column (input).
        column: u64,
        /// The value, dequantised.
        value: f32,
        /// The bank's type.
        bank: crate::kernels::single::Dtype,
    },
    /// The file could not be read or written.
    Io {
        /// The path.
        path: String,
        /// The operating system's error, as text.
        error: String,
    },
    /// The weights were refused by the bank constructors, or the device failed.
    Bank(crate::Error),
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufError::Truncated {
                offset,
                what,
                needed,
                available,
            } => write!(
                f,
                "GGUF truncated at byte {offset}: {what} needs {needed} bytes, {available} are left"
            ),
            GgufError::BadMagic { found } => {
                write!(f, "not a GGUF file: magic {found:02x?}, expected \"GGUF\"")
            }
            GgufError::UnsupportedVersion { version } => {
                write!(f, "GGUF version {version} is not supported (2 and 3 are)")
            }
            GgufError::TooLarge {
                offset,
                what,
                value,
                limit,
            } => write!(
                f,
                "GGUF byte {offset}: {what} is {value}, more than the {limit} possible there"
            ),
            GgufError::Invalid {
                offset,
                what,
                value,
            } => write!(f, "GGUF byte {offset}: invalid {what}: {value}"),
            GgufError::Duplicate { offset, what, name } => {
                write!(f, "GGUF byte {offset}: duplicate {what} {name:?}")
            }
            GgufError::OutOfBounds {
                tensor,
                start,
                end,
                file_len,
            } => write!(
                f,
                "GGUF tensor {tensor:?}: data {start}..{end} is outside the data section of a {file_len}-byte file"
            ),
            GgufError::NoSuchTensor { name } => write!(f, "GGUF has no tensor {name:?}"),
            GgufError::Unsupported { tensor, what } if tensor.is_empty() => {
                write!(f, "GGUF: {what}")
            }
            GgufError::Unsupported { tensor, what } => write!(f, "GGUF tensor {tensor:?}: {what}"),
            GgufError::NotRepresentable {
                tensor,
                row,
                column,
                value,
                bank,
            } => write!(
                f,
                "GGUF tensor {tensor:?}: weight [row {row}, column {column}] is {value:e}, which a {} bank cannot hold (NaN, infinite or out of its range)",
                bank.name()
            ),
            GgufError::Io { path, error } => write!(f, "{path}: {error}"),
            GgufError::Bank(e) => write!(f, "loading GGUF weights: {e}"),
        }
    }
}

impl std::error::Error for GgufError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GgufError::Bank(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::Error> for GgufError {
    fn from(e: crate::Error) -> GgufError {
        GgufError::Bank(e)
    }
}

/// The result of this module's functions.
pub type Result<T> = std::result::Result<T, GgufError>;

/// One tensor's header entry: its name, type, shape and where its data is. It borrows
/// from the [`Gguf`] it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TensorInfo<'a> {
    /// The name (`blk.0.attn_q.weight`, ...).
    pub name: &'a str,
    /// The element type.
    pub ggml_type: GgmlType,
    /// The shape in GGUF order: `dims[0]` (ggml's `ne0`) is the innermost, contiguous
    /// dimension. A weight matrix of `n` output channels of `k` inputs is `[k, n]`.
    pub dims: &'a [u64],
    /// Byte offset of the data from the start of the data section (a multiple of the
    /// file's alignment).
    pub offset: u64,
}

impl<'a> TensorInfo<'a> {
    /// The info of index entry `e` of the file `buf`.
    fn of(buf: &'a [u8], index: &'a read::Index, e: &read::Entry) -> TensorInfo<'a> {
        let first = e.dims as usize;
        TensorInfo {
            name: read::text(buf, e.name, e.name_len),
            ggml_type: e.ty,
            dims: index
                .dims
                .get(first..first + usize::from(e.n_dims))
                .unwrap_or(&[]),
            offset: e.offset,
        }
    }

    /// Elements: the product of the dims (checked against overflow when the file was
    /// read; saturating for an info built by hand).
    pub fn elements(&self) -> u64 {
        self.dims.iter().fold(1u64, |p, &d| p.saturating_mul(d))
    }

    /// Bytes of data: whole blocks of the type (saturating, as [`TensorInfo::elements`]).
    pub fn bytes(&self) -> u64 {
        (self.elements() / self.ggml_type.block_size()).saturating_mul(self.ggml_type.type_size())
    }
}

/// A parsed GGUF file: the bytes of the whole file (or of its header, the rest mapped
/// or read when asked for: [`Gguf::open`]) and a compact index of its metadata and
/// tensor infos. The index holds fixed-size entries that point into the bytes, sorted
/// for lookup; names and metadata values are read from the bytes when asked for, so the
/// index takes at most about 1.6 bytes a byte of the file, whatever the file holds (docs/gguf.md, "Bounds"; [`Gguf::index_bytes`]).
#[derive(Clone, Debug)]
pub struct Gguf {
    index: read::Index,
    /// The whole file, or (when `source` is set) its header: the bytes before the data
    /// section, which hold every name and metadata value.
    bytes: Vec<u8>,
    /// The file tensor data is read from when `bytes` is only the header.
    source: Option<file::Source>,
    file_len: u64,
}

impl Gguf {
    fn whole(index: read::Index, bytes: Vec<u8>) -> Gguf {
        let file_len = bytes.len() as u64;
        Gguf {
            index,
            bytes,
            source: None,
            file_len,
        }
    }

    fn header_only(index: read::Index, bytes: Vec<u8>, source: file::Source, len: u64) -> Gguf {
        Gguf {
            index,
            bytes,
            source: Some(source),
            file_len: len,
        }
    }

    /// Parses a file held in memory (copied; [`Gguf::from_vec`] takes ownership instead).
    pub fn parse(bytes: &[u8]) -> Result<Gguf> {
        Gguf::from_vec(bytes.to_vec())
    }

    /// Parses a file held in memory, keeping `bytes` for the names, the metadata values
    /// and the tensors' data.
    pub fn from_vec(bytes: Vec<u8>) -> Result<Gguf> {
        let index = read::header(&bytes, bytes.len() as u64)?;
        Ok(Gguf::whole(index, bytes))
    }

    /// Opens the file at `path` and parses its header, reading the file's first bytes
    /// only as far as the header goes, and maps the file read-only: a tensor's data is
    /// read in place from the page cache when it is asked for ([`Gguf::tensor_data`]
    /// borrows it, [`Gguf::read_tensor`] copies it), or read from the file where it
    /// cannot be mapped. A file of at most 1 MiB is read whole. The file must not
    /// change while the value lives: data read later is checked against the header's
    /// bounds, not against what the file held at open (a file truncated under its
    /// mapping stops the process with `SIGBUS`).
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        file::open(path.as_ref())
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.index.version
    }

    /// Bytes of the file.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Bytes of the file this value holds in memory: all of them for a parsed file or
    /// a small one, the header for a file [`Gguf::open`] reads tensor data from.
    pub fn held_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Heap bytes of the index, besides the file's bytes: 16 a metadata entry, 24 a
    /// tensor and 8 a dimension, plus 4 an entry for the sorted order.
    pub fn index_bytes(&self) -> usize {
        self.index.heap_bytes()
    }

    /// Metadata entries.
    pub fn metadata_count(&self) -> usize {
        self.index.kvs.len()
    }

    /// The metadata keys in file order.
    pub fn metadata_keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.index
            .kvs
            .iter()
            .map(|kv| read::text(&self.bytes, kv.key, kv.key_len))
    }

    /// The metadata key/value pairs in file order, each value read from the file as it
    /// is reached (a value takes in memory about what it takes in the file, at most 3
    /// times it for arrays of empty strings).
    pub fn metadata_entries(&self) -> impl ExactSizeIterator<Item = (&str, Value)> + '_ {
        self.index.kvs.iter().map(|kv| {
            let key = read::text(&self.bytes, kv.key, kv.key_len);
            // The reader checked every value: each reads again.
            let value = read::value_at(&self.bytes, kv.value, kv.ty).unwrap_or(Value::Bool(false));
            (key, value)
        })
    }

    /// The value of a metadata key, read from the file.
    pub fn metadata(&self, key: &str) -> Option<Value> {
        let kvs = &self.index.kvs;
        let i = self
            .index
            .kv_order
            .binary_search_by(|&i| {
                let kv = &kvs[i as usize];
                read::raw(&self.bytes, kv.key, kv.key_len).cmp(key.as_bytes())
            })
            .ok()?;
        let kv = kvs[self.index.kv_order[i] as usize];
        read::value_at(&self.bytes, kv.value, kv.ty)
    }

    /// Tensors in the file.
    pub fn tensor_count(&self) -> usize {
        self.index.tensors.len()
    }

    /// The tensor infos in file order.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TensorInfo<'_>> + '_ {
        self.index
            .tensors
            .iter()
            .map(|e| TensorInfo::of(&self.bytes, &self.index, e))
    }

    /// The tensor info of `name`.
    pub fn tensor(&self, name: &str) -> Option<TensorInfo<'_>> {
        let ts = &self.index.tensors;
        let i = self
            .index
            .tensor_order
            .binary_search_by(|&i| {
                let t = &ts[i as usize];
                read::raw(&self.bytes, t.name, t.name_len).cmp(name.as_bytes())
            })
            .ok()?;
        let e = &ts[self.index.tensor_order[i] as usize];
        Some(TensorInfo::of(&self.bytes, &self.index, e))
    }

    /// The alignment of tensor data (`general.alignment`, or 32).
    pub fn alignment(&self) -> u32 {
        self.index.alignment
    }

    /// Byte offset of the data section in the file.
    pub fn data_offset(&self) -> u64 {
        self.index.data_offset
    }

    /// The raw data of tensor `name` (bounds checked when the file was parsed): borrowed
    /// from a file held in memory or from the mapping of a file [`Gguf::open`] did not
    /// read whole, read from disk only when such a file could not be mapped.
    pub fn tensor_data(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        let len = self.tensor_info(name)?.bytes();
        let (start, end) = self.span(name, 0, len)?;
        match &self.source {
            None => Ok(Cow::Borrowed(self.held(name, start, end)?)),
            Some(source) => {
                let len = self.size(name, start, end)?;
                if let Some(bytes) = source.mapped(start, len) {
                    return Ok(Cow::Borrowed(bytes));
                }
                let mut out = vec![0; len];
                source.read_at(start, &mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// Fills `out` with the bytes of tensor `name`'s data from byte `at` of it: a part of
    /// it, so that a large tensor can be converted a piece at a time. A range past the
    /// tensor's end is [`GgufError::OutOfBounds`].
    pub fn read_tensor(&self, name: &str, at: u64, out: &mut [u8]) -> Result<()> {
        let (start, end) = self.span(name, at, out.len() as u64)?;
        match &self.source {
            None => out.copy_from_slice(self.held(name, start, end)?),
            Some(source) => source.read_at(start, out)?,
        }
        Ok(())
    }

    fn tensor_info(&self, name: &str) -> Result<TensorInfo<'_>> {
        self.tensor(name).ok_or_else(|| GgufError::NoSuchTensor {
            name: name.to_string(),
        })
    }

    /// The file offsets `[start, end)` of `len` bytes of tensor `name` from byte `at` of
    /// its data, checked to lie within the tensor and the file.
    fn span(&self, name: &str, at: u64, len: u64) -> Result<(u64, u64)> {
        let info = self.tensor_info(name)?;
        let start = self
            .index
            .data_offset
            .saturating_add(info.offset)
            .saturating_add(at);
        let end = start.saturating_add(len);
        if at.saturating_add(len) > info.bytes() || end > self.file_len {
            return Err(self.out_of_bounds(name, start, end));
        }
        Ok((start, end))
    }

    fn out_of_bounds(&self, name: &str, start: u64, end: u64) -> GgufError {
        GgufError::OutOfBounds {
            tensor: name.to_string(),
            start,
            end,
            file_len: self.file_len,
        }
    }

    /// The bytes `[start, end)` of a file held in memory.
    fn held(&self, name: &str, start: u64, end: u64) -> Result<&[u8]> {
        let range = usize::try_from(start).ok().zip(usize::try_from(end).ok());
        range
            .and_then(|(s, e)| self.bytes.get(s..e))
            .ok_or_else(|| self.out_of_bounds(name, start, end))
    }

    /// `end - start` as a buffer size.
    fn size(&self, name: &str, start: u64, end: u64) -> Result<usize> {
        usize::try_from(end - start).map_err(|_| self.out_of_bounds(name, start, end))
    }

    /// Tensor `name` dequantised to f32, in GGUF order (`dims[0]` innermost): for a
    /// weight matrix `[k, n]`, `n` rows of `k` values.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>> {
        let data = self.tensor_data(name)?;
        let info = self.tensor_info(name)?;
        dequantize(info.ggml_type, &data, info.elements()).map_err(|e| match e {
            GgufError::Unsupported { what, .. } => GgufError::Unsupported {
                tensor: name.to_string(),
                what,
            },
            e => e,
        })
    }
}
