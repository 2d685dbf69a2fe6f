//! The typed task model: one hardware task as configuration values, one file per block.
//!
//! A task of the NPU is a list of register writes followed by an op-enable entry that
//! starts some blocks (CNA → CORE → DPU, with DPU_RDMA for memory operands; PPU and
//! PPU_RDMA for pooling). This module is the one place that knows what those registers
//! mean:
//!
//! * kernels build a [`Task`] from shapes and [`Task::emit`] it into a
//!   [`TaskBuilder`];
//! * the simulator [`Task::decode`]s the registers a core holds when the op-enable entry
//!   arrives and executes the values;
//! * the verifier asks a task for the DMA ranges it reads and writes ([`Task::dma`]).
//!
//! Every field is named through the generated field constants
//! ([`Field`](crate::regs::Field)), so a misspelt field does not compile. Decoding reads
//! every field of every register of the started blocks: a field the model does not
//! represent must hold 0 (or its reset value), otherwise decoding fails with a
//! [`DecodeError`] naming the register and field. So a field that a generator writes is
//! always read by the simulator, and `decode(emit(x)) == x` is a property test per block.
//!
//! Adding a field: add it to the block's struct, write it in the block's `emit`, read it
//! in the block's `decode`; the property test of that block covers the round trip.
//!
//! One thing a body writes is not register-file state: the DPU LUT's tables, uploaded
//! through the access port (`LUT_ACCESS_CFG`, `LUT_ACCESS_DATA`) into a RAM of the core.
//! [`Lut::upload`] is emitted but never decoded; a register file ([`Snapshot`], the
//! simulator's groups) does not hold the two port registers.
//!
//! ```
//! use rknpu_driver::kernels::single::{Dtype, SingleMatmul};
//! use rknpu_driver::task::Task;
//!
//! let task = SingleMatmul::new(4, 64, 32, Dtype::Int8).task()?;
//! let cna = task.cna.as_ref().unwrap();
//! assert_eq!(cna.feature.channels, 64);
//! assert_eq!(task.dpu.as_ref().unwrap().out.precision.name(), "int32");
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

mod cna;
mod core;
mod dpu;
mod dpu_rdma;
pub mod limits;
mod pointer;
mod ppu;
mod ppu_rdma;
pub(crate) mod read;
#[cfg(test)]
mod tests;

pub use self::core::Core;
pub use cna::{CORE_SPLIT_VALUES, Cbuf, CbufHeld, Cna, Conv, Feature, InputCvt, Kernel, Weights};
pub(crate) use dpu::is_lut_port;
pub use dpu::{
    Alu, AluOp, Dpu, DpuInput, Ew, EwOp, EwSrc, FLYING_BURST_LEN, LUT_ENTRIES, LUT_SEGMENTS, Lut,
    LutRange, LutSlope, LutTables, Mul, OpCvt, OutCvt, Output, OwCfg, RDMA_ARBITER, Stage,
};
pub use dpu_rdma::{
    COMB_SHARED_OPERAND, DpuRdma, EW_PER_CHANNEL, EW_PER_PIXEL, Erdma, Mrdma, OperandRead,
};
pub use ppu::{PoolMethod, Ppu};
pub use ppu_rdma::PpuRdma;
pub use read::{DecodeError, DecodeErrorKind, RegisterFile, Snapshot};

use crate::error::Result;
use crate::regcmd::{BlockMask, DmaAddr, TaskBuilder};
use crate::regs::Block;
use read::Reader;

/// CBUF geometry of one core: 12 banks of 32 KiB (docs/hardware/cbuf.md#geometry).
pub mod cbuf {
    /// Banks in one core's convolution buffer.
    pub const BANKS: u32 = 12;
    /// Bytes per bank.
    pub const BANK_BYTES: u64 = 32 * 1024;
    /// Bytes in one CBUF entry (a row of the data banks is counted in entries).
    pub const ENTRY_BYTES: u64 = 64;
}

/// Element types, as the CNA, CORE, DPU and DPU_RDMA precision fields code them.
///
/// One vocabulary for kernels, simulator and traces; [`Precision::code`] is the value of
/// the generated [`values::Precision`](crate::regs::values::Precision) set (extended by
/// the DPU's int32 and fp32 codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Precision {
    /// 8-bit two's complement (code 0).
    Int8,
    /// 16-bit two's complement (code 1).
    Int16,
    /// IEEE half precision (code 2).
    Fp16,
    /// bfloat16 (code 3).
    Bf16,
    /// 32-bit two's complement, a DPU type only (code 4).
    Int32,
    /// IEEE single precision, a DPU type only (code 5).
    Fp32,
    /// 4-bit two's complement, two per byte (code 6).
    Int4,
}

impl Precision {
    /// Every precision, in code order.
    pub const ALL: [Precision; 7] = [
        Precision::Int8,
        Precision::Int16,
        Precision::Fp16,
        Precision::Bf16,
        Precision::Int32,
        Precision::Fp32,
        Precision::Int4,
    ];

    /// The register code.
    pub const fn code(self) -> u32 {
        match self {
            Precision::Int8 => 0,
            Precision::Int16 => 1,
            Precision::Fp16 => 2,
            Precision::Bf16 => 3,
            Precision::Int32 => 4,
            Precision::Fp32 => 5,
            Precision::Int4 => 6,
        }
    }

    /// The precision of a register code, `None` for reserved codes.
    pub const fn from_code(code: u32) -> Option<Precision> {
        Some(match code {
            0 => Precision::Int8,
            1 => Precision::Int16,
            2 => Precision::Fp16,
            3 => Precision::Bf16,
            4 => Precision::Int32,
            5 => Precision::Fp32,
            6 => Precision::Int4,
            _ => return None,
        })
    }

    /// Bits per element.
    pub const fn bits(self) -> u32 {
        match self {
            Precision::Int4 => 4,
            Precision::Int8 => 8,
            Precision::Int16 | Precision::Fp16 | Precision::Bf16 => 16,
            Precision::Int32 | Precision::Fp32 => 32,
        }
    }

    /// Bytes one element takes in a DPU cube (int4 outputs take a byte).
    pub const fn bytes(self) -> u32 {
        match self {
            Precision::Int4 => 1,
            _ => self.bits() / 8,
        }
    }

    /// Whether the type is floating point.
    pub const fn is_float(self) -> bool {
        matches!(self, Precision::Fp16 | Precision::Bf16 | Precision::Fp32)
    }

    /// Elements in one 16-byte feature atom (the C2 of NC1HWC2) read by the CNA.
    pub const fn atom_elems(self) -> u32 {
        128 / self.bits()
    }

    /// Kernels in one 1024-byte weight atom of 32 input channels.
    pub const fn kernels_per_atom(self) -> u32 {
        1024 * 8 / (32 * self.bits())
    }

    /// Whether the CNA and CORE take it as input (int32 and fp32 are DPU types only).
    pub const fn is_conv_input(self) -> bool {
        !matches!(self, Precision::Int32 | Precision::Fp32)
    }

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Precision::Int8 => "int8",
            Precision::Int16 => "int16",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Int32 => "int32",
            Precision::Fp32 => "fp32",
            Precision::Int4 => "int4",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which read or write a [`DmaRange`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// The task reads the range.
    Read,
    /// The task writes the range.
    Write,
}

/// A byte range of device memory one task moves, with the register its address is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DmaRange {
    /// The block whose DMA engine moves it.
    pub block: Block,
    /// `BLOCK.REGISTER` holding the base address.
    pub register: &'static str,
    /// What the data is ("feature", "weights", "output", "EW operand", ...).
    pub what: &'static str,
    /// First byte (the base address; ranges of unbound relocations are not produced).
    pub start: u64,
    /// Bytes, from `start`.
    pub len: u64,
    /// Read or write.
    pub access: Access,
}

impl DmaRange {
    /// One past the last byte.
    pub const fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// The fixed address of a decoded task's DMA register, or `None` for a relocation that
/// has not been bound.
pub(crate) fn fixed(addr: DmaAddr) -> Option<u64> {
    match addr {
        DmaAddr::Fixed(a) => Some(u64::from(a)),
        DmaAddr::Reloc { .. } => None,
    }
}

/// One hardware task: the configuration of each block it starts.
///
/// A block that is `Some` is started by the task's op-enable entry ([`Task::enable`]);
/// the CNA and CORE go together (a convolution) and feed the DPU; a pooling task starts
/// the PPU and PPU_RDMA only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// Feature and weight loading, CBUF, convolution geometry.
    pub cna: Option<Cna>,
    /// The MAC arrays.
    pub core: Option<Core>,
    /// The data-path processor: BS/BN/EW stages, output conversion and write DMA.
    pub dpu: Option<Dpu>,
    /// The DPU's read DMA: the main data in flying mode and the EW operand.
    pub dpu_rdma: Option<DpuRdma>,
    /// The pooling unit.
    pub ppu: Option<Ppu>,
    /// The pooling unit's read DMA.
    pub ppu_rdma: Option<PpuRdma>,
}

impl Task {
    /// A pooling task: the PPU reading through its own DMA, no other block started.
    pub fn pooling(ppu: Ppu, rdma: PpuRdma) -> Task {
        Task {
            cna: None,
            core: None,
            dpu: None,
            dpu_rdma: None,
            ppu: Some(ppu),
            ppu_rdma: Some(rdma),
        }
    }

    /// The blocks the op-enable entry starts.
    pub fn enable(&self) -> BlockMask {
        let mut m = 0;
        if self.cna.is_some() {
            m |= BlockMask::CNA.0;
        }
        if self.core.is_some() {
            m |= BlockMask::CORE.0;
        }
        if self.dpu.is_some() {
            m |= BlockMask::DPU.0;
        }
        if self.dpu_rdma.is_some() {
            m |= BlockMask::DPU_RDMA.0;
        }
        if self.ppu.is_some() {
            m |= BlockMask::PPU.0;
        }
        if self.ppu_rdma.is_some() {
            m |= BlockMask::PPU_RDMA.0;
        }
        BlockMask(m)
    }

    /// A DPU-only task: the DPU with its read DMA (a flying element-wise, LUT or
    /// conversion task, op-enable 0x18).
    pub fn dpu_only(dpu: Dpu, dpu_rdma: DpuRdma) -> Task {
        Task {
            cna: None,
            core: None,
            dpu: Some(dpu),
            dpu_rdma: Some(dpu_rdma),
            ppu: None,
            ppu_rdma: None,
        }
    }

    /// The task's registers as a new body ([`Task::emit`] into an empty builder).
    pub fn body(&self) -> Result<TaskBuilder> {
        let mut t = TaskBuilder::with_capacity(130);
        self.emit(&mut t)?;
        Ok(t)
    }

    /// Writes the task's registers into `t`, in the order of the vendor runtime's bodies:
    /// the preamble (CBUF split, decompression, precisions, ping-pong pointers), then
    /// each block in ascending register offsets.
    pub fn emit(&self, t: &mut TaskBuilder) -> Result<()> {
        if let Some(cna) = &self.cna {
            cna.emit_preamble(t)?;
        }
        use crate::regs::{dpu, dpu_rdma, ppu, ppu_rdma};
        pointer::emit::<dpu::SPointer>(t, self.dpu.is_some_and(|b| b.ping_pong))?;
        pointer::emit::<dpu_rdma::SPointer>(t, self.dpu_rdma.is_some_and(|b| b.ping_pong))?;
        pointer::emit::<ppu::SPointer>(t, self.ppu.is_some_and(|b| b.ping_pong))?;
        pointer::emit::<ppu_rdma::SPointer>(t, self.ppu_rdma.is_some_and(|b| b.ping_pong))?;
        if let Some(cna) = &self.cna {
            cna.emit(t)?;
        }
        if let Some(core) = &self.core {
            core.emit(t)?;
        }
        if let Some(dpu) = &self.dpu {
            dpu.emit(t)?;
        }
        if let Some(rdma) = &self.dpu_rdma {
            rdma.emit(t)?;
        }
        if let Some(ppu) = &self.ppu {
            ppu.emit(t)?;
        }
        if let Some(rdma) = &self.ppu_rdma {
            rdma.emit(t)?;
        }
        Ok(())
    }

    /// Reads the task a core would run from its register file, with the blocks `enable`
    /// starts. Every field of every register of those blocks is read; see the module
    /// documentation.
    pub fn decode(
        regs: &mut dyn RegisterFile,
        enable: BlockMask,
    ) -> std::result::Result<Task, DecodeError> {
        let mut r = Reader::new(regs);
        let bit = |b: BlockMask| enable.0 & b.0 != 0;
        let known = BlockMask::CNA.0
            | BlockMask::CORE.0
            | BlockMask::DPU.0
            | BlockMask::DPU_RDMA.0
            | BlockMask::PPU.0
            | BlockMask::PPU_RDMA.0;
        if enable.0 & !known != 0 {
            return Err(DecodeError::enable_error(
                enable.0,
                format!("bits {:#x} name no block", enable.0 & !known),
            ));
        }
        // Each block's own checks come before the DPU's: what a block cannot do is the
        // better report than the DPU's disagreement with it.
        let cna = bit(BlockMask::CNA)
            .then(|| Cna::decode(&mut r))
            .transpose()?;
        let core = bit(BlockMask::CORE)
            .then(|| Core::decode(&mut r))
            .transpose()?;
        let dpu_rdma = bit(BlockMask::DPU_RDMA)
            .then(|| DpuRdma::decode(&mut r))
            .transpose()?;
        let dpu = bit(BlockMask::DPU)
            .then(|| Dpu::decode(&mut r))
            .transpose()?;
        let ppu_rdma = bit(BlockMask::PPU_RDMA)
            .then(|| PpuRdma::decode(&mut r))
            .transpose()?;
        let ppu = bit(BlockMask::PPU)
            .then(|| Ppu::decode(&mut r))
            .transpose()?;
        let task = Task {
            cna,
            core,
            dpu,
            dpu_rdma,
            ppu,
            ppu_rdma,
        };
        let mut blocks = Vec::new();
        for (block, mask) in BlockMask::BLOCKS {
            if bit(mask) {
                blocks.push(block);
            }
        }
        r.finish(&blocks)?;
        Ok(task)
    }

    /// Every DMA range the task reads or writes, for addresses that are fixed (a decoded
    /// or bound task). Sizes follow the layouts of docs/hardware/matmul-programs.md#layouts and the strides the
    /// registers give; the verifier checks each against the buffers of a job.
    pub fn dma(&self) -> Vec<DmaRange> {
        let mut out = Vec::new();
        if let Some(cna) = &self.cna {
            cna.dma(&mut out);
        }
        if let Some(dpu) = &self.dpu {
            dpu.dma(&mut out);
        }
        if let Some(rdma) = &self.dpu_rdma {
            rdma.dma(self.dpu.as_ref(), &mut out);
        }
        if let Some(rdma) = &self.ppu_rdma {
            rdma.dma(&mut out);
        }
        if let Some(ppu) = &self.ppu {
            ppu.dma(&mut out);
        }
        out
    }
}
