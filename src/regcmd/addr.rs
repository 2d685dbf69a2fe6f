//! DMA addresses as programs state them: fixed, or a buffer and offset left to a
//! relocation when the program is bound.

/// Identifies a buffer before it has a device address; the meaning of the number is the
/// caller's (a kernel's buffer table, a trace's buffer ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

/// A symbolic DMA address: `offset` bytes into `buffer`, resolved when the program is bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reloc {
    /// The buffer.
    pub buffer: BufferId,
    /// Byte offset inside it.
    pub offset: u32,
}

/// A DMA address as a program states it: known now, or left to a relocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DmaAddr {
    /// A device address known when the program is built.
    Fixed(u32),
    /// An address inside a buffer that has no device address yet.
    Reloc(Reloc),
}

impl DmaAddr {
    /// Shorthand for `DmaAddr::Reloc(Reloc { buffer, offset })`.
    pub const fn reloc(buffer: BufferId, offset: u32) -> DmaAddr {
        DmaAddr::Reloc(Reloc { buffer, offset })
    }

    /// The address `by` bytes on (a fixed address, or the same buffer at a larger
    /// offset); `None` where that leaves 32-bit device addresses.
    pub fn checked_offset(self, by: u64) -> Option<DmaAddr> {
        let by = u32::try_from(by).ok()?;
        Some(match self {
            DmaAddr::Fixed(a) => DmaAddr::Fixed(a.checked_add(by)?),
            DmaAddr::Reloc(r) => DmaAddr::reloc(r.buffer, r.offset.checked_add(by)?),
        })
    }
}

/// One entry of a [`Program`](super::Program) whose value is a relocated address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Relocation {
    /// Index of the entry in [`Program::words`](super::Program::words).
    pub entry: usize,
    /// Where it points.
    pub target: Reloc,
    /// The register it writes (`BLOCK.NAME`), for error messages.
    pub register: &'static str,
    /// Alignment the bound address must have.
    pub align: u32,
}
