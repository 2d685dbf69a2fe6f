//! The crate's error type.

use std::fmt;

/// Everything that can go wrong in this library. Each variant names what was wrong and
/// where; nothing in the library panics on bad input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A regcmd byte stream whose length is not a multiple of 8.
    InputLength {
        /// Length of the input in bytes.
        len: usize,
        /// Byte offset where the incomplete trailing entry starts.
        offset: usize,
    },
    /// An input that holds no regcmd entry at all.
    EmptyInput,
    /// A value does not fit the register field it is meant for.
    FieldOverflow {
        /// `BLOCK.REGISTER`.
        register: &'static str,
        /// Field name.
        field: &'static str,
        /// The value that was offered.
        value: u64,
        /// The largest value the field holds.
        max: u32,
    },
    /// A register has no field of that name.
    UnknownField {
        /// `BLOCK.REGISTER`.
        register: &'static str,
        /// The name asked for.
        field: &'static str,
    },
    /// A kernel shape or option the generator cannot express.
    Unsupported {
        /// What was asked for.
        what: &'static str,
        /// Why it cannot be built, with the limit.
        why: String,
    },
    /// A DMA address that breaks the alignment its register requires.
    Misaligned {
        /// `BLOCK.REGISTER` (or `PC.BASE_ADDRESS` for task lists).
        register: &'static str,
        /// The address.
        addr: u64,
        /// Required alignment in bytes.
        align: u32,
    },
    /// A buffer base plus offset that does not fit the NPU's 32-bit device addresses.
    AddressOverflow {
        /// The buffer the relocation refers to.
        buffer: u32,
        /// Offset inside the buffer.
        offset: u32,
        /// The base address the buffer was bound to.
        base: u64,
    },
    /// A relocation refers to a buffer that was not bound.
    UnboundBuffer {
        /// The buffer id.
        buffer: u32,
    },
    /// A program or task is larger than the hardware can fetch or count.
    ProgramTooLarge {
        /// What exceeded its limit.
        what: &'static str,
        /// The offending amount.
        value: usize,
        /// The limit.
        limit: usize,
    },
    /// A program with no task.
    EmptyProgram,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InputLength { len, offset } => write!(
                f,
                "input length {len} is not a multiple of 8: incomplete entry at byte offset {offset}"
            ),
            Error::EmptyInput => write!(f, "input holds no regcmd entry"),
            Error::FieldOverflow {
                register,
                field,
                value,
                max,
            } => write!(
                f,
                "{register}.{field}: value {value} exceeds the field maximum {max}"
            ),
            Error::UnknownField { register, field } => {
                write!(f, "{register} has no field {field}")
            }
            Error::Unsupported { what, why } => write!(f, "{what}: {why}"),
            Error::Misaligned {
                register,
                addr,
                align,
            } => write!(
                f,
                "{register}: address {addr:#x} is not aligned to {align} bytes"
            ),
            Error::AddressOverflow {
                buffer,
                offset,
                base,
            } => write!(
                f,
                "buffer {buffer} bound at {base:#x} plus offset {offset:#x} exceeds 32-bit device addresses"
            ),
            Error::UnboundBuffer { buffer } => {
                write!(f, "buffer {buffer} is not bound to an address")
            }
            Error::ProgramTooLarge { what, value, limit } => {
                write!(f, "{what} is {value}, above the limit of {limit}")
            }
            Error::EmptyProgram => write!(f, "program has no task"),
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
