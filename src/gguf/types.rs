//! The type codes of GGUF: metadata value types and ggml tensor types with their block
//! sizes (from `ggml.h`/`ggml-common.h` of github.com/ggml-org/ggml and the
//! `GGML_QUANT_SIZES` table of llama.cpp's `gguf-py`).

/// The type of a metadata value (`gguf_metadata_value_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ValueType {
    /// `u8` (code 0).
    U8,
    /// `i8` (1).
    I8,
    /// `u16` (2).
    U16,
    /// `i16` (3).
    I16,
    /// `u32` (4).
    U32,
    /// `i32` (5).
    I32,
    /// `f32` (6).
    F32,
    /// A byte that is 0 or 1 (7).
    Bool,
    /// A `u64` length and that many bytes of UTF-8 (8).
    String,
    /// An element type, a `u64` count and the elements (9).
    Array,
    /// `u64` (10).
    U64,
    /// `i64` (11).
    I64,
    /// `f64` (12).
    F64,
}

impl ValueType {
    /// The type of code `code`, if there is one.
    pub fn from_code(code: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match code {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The type's code in the file.
    pub fn code(self) -> u32 {
        use ValueType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }

    /// The fewest bytes a value of this type takes in a file (a string its length, an
    /// array its element type and count): what bounds a count before it is allocated.
    pub fn min_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// A UTF-8 string.
    String(String),
    /// An array of one element type.
    Array(Array),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The string, if the value is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an unsigned integer, if it is an integer of any width that is not
    /// negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is `f32` or `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The array, if the value is one.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// A metadata array: elements of one type, held as a vector of that type (so that an
/// array takes in memory about what it takes in the file).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Array {
    /// `u8` elements.
    U8(Vec<u8>),
    /// `i8` elements.
    I8(Vec<i8>),
    /// `u16` elements.
    U16(Vec<u16>),
    /// `i16` elements.
    I16(Vec<i16>),
    /// `u32` elements.
    U32(Vec<u32>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `f32` elements.
    F32(Vec<f32>),
    /// `bool` elements.
    Bool(Vec<bool>),
    /// Strings.
    String(Vec<String>),
    /// Arrays (each of its own element type).
    Array(Vec<Array>),
    /// `u64` elements.
    U64(Vec<u64>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f64` elements.
    F64(Vec<f64>),
}

impl Array {
    /// The element type.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// Whether the array has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A ggml tensor type. Names are ggml's (`Q4_0`, `Q6_K`, ...).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GgmlType {
    /// 32-bit float (code 0).
    F32,
    /// IEEE half (1).
    F16,
    /// 32 values: an f16 scale and 4-bit quants offset by 8 (2).
    Q4_0,
    /// 32 values: f16 scale and minimum, 4-bit quants (3).
    Q4_1,
    /// 32 values, 5-bit (6).
    Q5_0,
    /// 32 values, 5-bit with a minimum (7).
    Q5_1,
    /// 32 values: an f16 scale and 32 `i8` quants (8).
    Q8_0,
    /// 32 values, 8-bit with a sum (9).
    Q8_1,
    /// 256-value super-block, 2-bit (10).
    Q2_K,
    /// 256-value super-block, 3-bit (11).
    Q3_K,
    /// 256 values: f16 scale and minimum, eight 6-bit sub-block scales and minimums,
    /// 4-bit quants (12).
    Q4_K,
    /// 256-value super-block, 5-bit (13).
    Q5_K,
    /// 256 values: 6-bit quants (low 4 and high 2 bits apart), sixteen `i8` sub-block
    /// scales and an f16 scale (14).
    Q6_K,
    /// 256-value super-block, 8-bit (15).
    Q8_K,
    /// Importance-matrix 2-bit (16).
    IQ2_XXS,
    /// Importance-matrix 2-bit (17).
    IQ2_XS,
    /// Importance-matrix 3-bit (18).
    IQ3_XXS,
    /// Importance-matrix 1-bit (19).
    IQ1_S,
    /// Non-linear 4-bit (20).
    IQ4_NL,
    /// Importance-matrix 3-bit (21).
    IQ3_S,
    /// Importance-matrix 2-bit (22).
    IQ2_S,
    /// Non-linear 4-bit super-block (23).
    IQ4_XS,
    /// `i8` (24).
    I8,
    /// `i16` (25).
    I16,
    /// `i32` (26).
    I32,
    /// `i64` (27).
    I64,
    /// `f64` (28).
    F64,
    /// Importance-matrix 1-bit (29).
    IQ1_M,
    /// bfloat16 (30).
    BF16,
    /// Ternary (34).
    TQ1_0,
    /// Ternary (35).
    TQ2_0,
    /// Microscaling fp4 (39).
    MXFP4,
    /// NVIDIA fp4 (40).
    NVFP4,
    /// 1-bit, 128-value blocks (41).
    Q1_0,
}

/// Every type with its code, name, block size (elements) and type size (bytes a block).
const TYPES: [(GgmlType, u32, &str, u64, u64); 34] = {
    use GgmlType::*;
    [
        (F32, 0, "F32", 1, 4),
        (F16, 1, "F16", 1, 2),
        (Q4_0, 2, "Q4_0", 32, 18),
        (Q4_1, 3, "Q4_1", 32, 20),
        (Q5_0, 6, "Q5_0", 32, 22),
        (Q5_1, 7, "Q5_1", 32, 24),
        (Q8_0, 8, "Q8_0", 32, 34),
        (Q8_1, 9, "Q8_1", 32, 40),
        (Q2_K, 10, "Q2_K", 256, 84),
        (Q3_K, 11, "Q3_K", 256, 110),
        (Q4_K, 12, "Q4_K", 256, 144),
        (Q5_K, 13, "Q5_K", 256, 176),
        (Q6_K, 14, "Q6_K", 256, 210),
        (Q8_K, 15, "Q8_K", 256, 292),
        (IQ2_XXS, 16, "IQ2_XXS", 256, 66),
        (IQ2_XS, 17, "IQ2_XS", 256, 74),
        (IQ3_XXS, 18, "IQ3_XXS", 256, 98),
        (IQ1_S, 19, "IQ1_S", 256, 50),
        (IQ4_NL, 20, "IQ4_NL", 32, 18),
        (IQ3_S, 21, "IQ3_S", 256, 110),
        (IQ2_S, 22, "IQ2_S", 256, 82),
        (IQ4_XS, 23, "IQ4_XS", 256, 136),
        (I8, 24, "I8", 1, 1),
        (I16, 25, "I16", 1, 2),
        (I32, 26, "I32", 1, 4),
        (I64, 27, "I64", 1, 8),
        (F64, 28, "F64", 1, 8),
        (IQ1_M, 29, "IQ1_M", 256, 56),
        (BF16, 30, "BF16", 1, 2),
        (TQ1_0, 34, "TQ1_0", 256, 54),
        (TQ2_0, 35, "TQ2_0", 256, 66),
        (MXFP4, 39, "MXFP4", 32, 17),
        (NVFP4, 40, "NVFP4", 64, 36),
        (Q1_0, 41, "Q1_0", 128, 18),
    ]
};

impl GgmlType {
    fn entry(self) -> (GgmlType, u32, &'static str, u64, u64) {
        // Every variant has its row: the table lists them all, in declaration order.
        TYPES[self as usize]
    }

    /// The type of code `code`, if this library knows it (codes of removed types, such
    /// as 31–33, are unknown).
    pub fn from_code(code: u32) -> Option<GgmlType> {
        TYPES.iter().find(|t| t.1 == code).map(|t| t.0)
    }

    /// The type's code in the file.
    pub fn code(self) -> u32 {
        self.entry().1
    }

    /// ggml's name for it.
    pub fn name(self) -> &'static str {
        self.entry().2
    }

    /// Elements a block holds (1 for plain types).
    pub fn block_size(self) -> u64 {
        self.entry().3
    }

    /// Bytes a block takes.
    pub fn type_size(self) -> u64 {
        self.entry().4
    }

    /// Every type this library knows, in code order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TYPES.iter().map(|t| t.0)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_type_table_is_in_declaration_order_and_codes_round_trip() {
        for (i, t) in GgmlType::all().enumerate() {
            assert_eq!(t as usize, i, "{t}");
            assert_eq!(GgmlType::from_code(t.code()), Some(t));
        }
        assert_eq!(GgmlType::from_code(31), None);
        assert_eq!(GgmlType::from_code(42), None);
        // Sizes of ggml-common.h: Q4_K = 2 + 2 + 12 + 128, Q6_K = 128 + 64 + 16 + 2.
        assert_eq!(GgmlType::Q4_K.type_size(), 144);
        assert_eq!(GgmlType::Q6_K.type_size(), 210);
        for c in 0..13 {
            assert_eq!(ValueType::from_code(c).map(ValueType::code), Some(c));
        }
        assert_eq!(ValueType::from_code(13), None);
    }
}
