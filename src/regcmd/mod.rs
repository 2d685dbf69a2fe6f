//! Regcmd programs: the 64-bit entries the NPU's PC fetches, a builder, and a decoder.
//!
//! An entry is one little-endian `u64`: target code in bits 63:48 (which block the write
//! goes to), the 32-bit value in bits 47:16, the register offset in bits 15:0
//! (docs/hardware/registers.md#regcmd). A task is a body of register writes followed by a
//! four-entry tail (next-task address, next-task fetch amount, the `0x0041` marker, the
//! op-enable entry) and zero padding to 64 bytes (docs/hardware/registers.md#task-list).
//!
//! * [`TaskBuilder`] and [`ProgramBuilder`] build programs from typed registers
//!   ([`crate::regs`]), with DMA addresses left as symbolic [`Reloc`]ations until buffers
//!   exist; [`Program::bind`] patches only those entries.
//! * [`decode`] turns any words back into named registers and fields, losslessly, and
//!   prints them as stable text or JSON.

mod addr;
mod builder;
mod decode;

pub use addr::{BufferId, DmaAddr, Reloc, Relocation};
pub use builder::{Program, ProgramBuilder, TaskBuilder};
pub use decode::{Decoded, Entry, EntryKind, FieldValue, TailRole, TaskSpan, decode, decode_bytes};

use crate::error::{Error, Result};
use crate::regs::{self, Block, CommandRegister};
use std::fmt;

/// Entries in one task's tail: next address, next amount, marker, op-enable.
pub const TAIL_ENTRIES: usize = 4;

/// Task lists start on this many bytes (docs/hardware/registers.md#task-list).
pub const TASK_ALIGN_BYTES: usize = 64;

/// One regcmd entry: `target << 48 | value << 16 | offset`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[repr(transparent)]
pub struct RegCmd(pub u64);

impl RegCmd {
    /// The all-zero entry: padding, or "no next task" in a tail.
    pub const NOP: RegCmd = RegCmd(0);
    /// The `0x0041` entry that must precede op-enable.
    pub const MARKER: RegCmd = RegCmd::new(regs::TARGET_MARKER, 0, 0);

    /// Packs an entry from its three parts.
    pub const fn new(target: u16, value: u32, offset: u16) -> RegCmd {
        RegCmd(((target as u64) << 48) | ((value as u64) << 16) | offset as u64)
    }

    /// The entry that writes the typed register `reg`.
    pub fn write<R: CommandRegister>(reg: R) -> RegCmd {
        RegCmd::new(R::TARGET, reg.raw(), R::OFFSET)
    }

    /// The op-enable entry that starts `mask`'s blocks.
    pub const fn op_enable(mask: BlockMask) -> RegCmd {
        RegCmd::new(regs::TARGET_OP_ENABLE, mask.0, 0x0008)
    }

    /// Bits 63:48.
    pub const fn target(self) -> u16 {
        (self.0 >> 48) as u16
    }

    /// Bits 47:16.
    pub const fn value(self) -> u32 {
        (self.0 >> 16) as u32
    }

    /// Bits 15:0.
    pub const fn offset(self) -> u16 {
        self.0 as u16
    }

    /// The same entry with another value.
    pub const fn with_value(self, value: u32) -> RegCmd {
        RegCmd::new(self.target(), value, self.offset())
    }
}

impl fmt::Debug for RegCmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RegCmd({:04x}:{:08x}:{:04x})",
            self.target(),
            self.value(),
            self.offset()
        )
    }
}

/// Reads little-endian entries; the length must be a non-zero multiple of 8.
pub fn words_from_le_bytes(bytes: &[u8]) -> Result<Vec<RegCmd>> {
    if !bytes.len().is_multiple_of(8) {
        return Err(Error::InputLength {
            len: bytes.len(),
            offset: bytes.len() - bytes.len() % 8,
        });
    }
    if bytes.is_empty() {
        return Err(Error::EmptyInput);
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            RegCmd(u64::from_le_bytes(b))
        })
        .collect())
}

/// Writes entries as little-endian bytes (the layout the NPU fetches).
pub fn words_to_le_bytes(words: &[RegCmd]) -> Vec<u8> {
    let mut out = Vec::with_capacity(words.len() * 8);
    for w in words {
        out.extend_from_slice(&w.0.to_le_bytes());
    }
    out
}

/// `PC_DATA_AMOUNT` for a task whose body has `body` entries (tail not counted).
///
/// The PC fetches `(amount + 1) × 16` bytes, so the amount is `ceil((body + 4) / 2) − 1`:
/// the vendor driver's `(regcfg_amount + 4 + 1) / 2 − 1` and rocket's
/// `(regcmd_count + 1) / 2 − 1` (docs/hardware/registers.md#pc-chain). Errors when the field's
/// 16 bits cannot hold it.
pub fn pc_data_amount(body: usize) -> Result<u16> {
    let amount = (body + TAIL_ENTRIES).div_ceil(2) - 1;
    u16::try_from(amount).map_err(|_| Error::ProgramTooLarge {
        what: "task body (entries)",
        value: body,
        limit: 2 * (u16::MAX as usize + 1) - TAIL_ENTRIES,
    })
}

/// The blocks an op-enable entry starts (GLOBAL `OPERATION_ENABLE` layout, docs/hardware/registers.md#op-enable).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BlockMask(pub u32);

impl BlockMask {
    /// CNA (bit 0).
    pub const CNA: BlockMask = BlockMask(1 << 0);
    /// CORE (bit 2).
    pub const CORE: BlockMask = BlockMask(1 << 2);
    /// DPU (bit 3).
    pub const DPU: BlockMask = BlockMask(1 << 3);
    /// DPU_RDMA (bit 4).
    pub const DPU_RDMA: BlockMask = BlockMask(1 << 4);
    /// PPU (bit 5).
    pub const PPU: BlockMask = BlockMask(1 << 5);
    /// PPU_RDMA (bit 6).
    pub const PPU_RDMA: BlockMask = BlockMask(1 << 6);
    /// CNA + CORE + DPU: a convolution or matmul written through the DPU (0x0D).
    pub const CONV: BlockMask = BlockMask(0x0D);
    /// CONV + DPU_RDMA: with bias or an element-wise operand (0x1D).
    pub const CONV_RDMA: BlockMask = BlockMask(0x1D);
    /// DPU + DPU_RDMA: an element-wise task on data read from memory (flying mode, 0x18).
    pub const ELEMENTWISE: BlockMask = BlockMask(0x18);

    /// The blocks that can be started, in bit order.
    pub const BLOCKS: [(Block, BlockMask); 6] = [
        (Block::Cna, BlockMask::CNA),
        (Block::Core, BlockMask::CORE),
        (Block::Dpu, BlockMask::DPU),
        (Block::DpuRdma, BlockMask::DPU_RDMA),
        (Block::Ppu, BlockMask::PPU),
        (Block::PpuRdma, BlockMask::PPU_RDMA),
    ];

    /// The mask bit of `block`, or `None` for blocks op-enable cannot start.
    pub fn of(block: Block) -> Option<BlockMask> {
        Self::BLOCKS
            .iter()
            .find(|(b, _)| *b == block)
            .map(|(_, m)| *m)
    }

    /// Whether every block of `other` is in `self`.
    pub const fn contains(self, other: BlockMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// The named blocks in the mask.
    pub fn blocks(self) -> impl Iterator<Item = Block> {
        Self::BLOCKS
            .into_iter()
            .filter(move |(_, m)| self.contains(*m))
            .map(|(b, _)| b)
    }

    /// Bits set that name no block.
    pub const fn unknown_bits(self) -> u32 {
        self.0 & !0x7D
    }

    /// The interrupt bits that signal this task's completion, as the kernels expect them:
    /// both PPU group bits (0xC00) when the PPU runs, else both DPU bits (0x300) when the
    /// DPU runs (docs/hardware/registers.md#interrupts). `None` when neither runs.
    pub const fn completion_int_mask(self) -> Option<u32> {
        if self.0 & Self::PPU.0 != 0 {
            Some(0xC00)
        } else if self.0 & Self::DPU.0 != 0 {
            Some(0x300)
        } else {
            None
        }
    }
}

impl std::ops::BitOr for BlockMask {
    type Output = BlockMask;
    fn bitor(self, rhs: BlockMask) -> BlockMask {
        BlockMask(self.0 | rhs.0)
    }
}

impl fmt::Debug for BlockMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlockMask({:#x}: {self})", self.0)
    }
}

impl fmt::Display for BlockMask {
    /// `CNA|CORE|DPU`, with unnamed bits appended in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for b in self.blocks() {
            if !first {
                f.write_str("|")?;
            }
            f.write_str(b.name())?;
            first = false;
        }
        if self.unknown_bits() != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{:#x}", self.unknown_bits())?;
            first = false;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
