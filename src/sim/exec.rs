//! The checked description of one task that the data path executes: addresses resolved,
//! strides in bytes, every value the checks of [`super::config`] let through.

use super::error::{At, SimError, inconsistent, unsupported};
use crate::regcmd::BlockMask;
use crate::regs::{Block, Register, dpu_rdma};
use crate::task::{AluOp, DmaRange, PoolMethod, Precision};

/// The CNA feature (activation) read: an NC1HWC2 cube with 16-byte atoms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Feature {
    pub base: u32,
    pub w: u32,
    pub h: u32,
    /// Channels (padded; a multiple of 32).
    pub c: u32,
    pub prec: Precision,
    /// Bytes between lines (y).
    pub line: i64,
    /// Bytes between surfaces (groups of `atom_elems` channels).
    pub surf: i64,
    /// The 1-channel planar input: each line holds `w` elements of channel 0, `line`
    /// bytes apart; the other channels read as zero.
    pub planar: bool,
}

/// The CNA weight read: N kernels of KW×KH×C in 1024-byte atoms (direct), or one
/// KW×KH window per channel in groups of channels (depthwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Weights {
    pub base: u32,
    /// Output channels (depthwise: the feature's channels).
    pub n: u32,
    pub c: u32,
    pub prec: Precision,
}

/// The convolution window and the output geometry (docs/simulator.md, "Convolution").
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Window {
    pub kw: u32,
    pub kh: u32,
    pub stride: (u32, u32),
    pub dilation: (u32, u32),
    /// Columns and rows of padding before the first input column and row.
    pub pad: (u32, u32),
    /// The value of a padding element: an int8 value, or fp16 bits.
    pub pad_value: i64,
    pub depthwise: bool,
    pub out_w: u32,
    pub out_h: u32,
}

impl Window {
    /// Kernel taps.
    pub(super) fn taps(&self) -> u64 {
        u64::from(self.kw) * u64::from(self.kh)
    }
}

/// A cube the DPU or DPU_RDMA reads or writes: NC1HWC2 with 16-byte atoms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Cube {
    pub base: u32,
    pub w: u32,
    pub h: u32,
    pub c: u32,
    pub prec: Precision,
    /// Bytes between lines.
    pub line: u64,
    /// Bytes between surfaces.
    pub surf: u64,
    /// The register the base address came from (for DMA errors).
    pub register: &'static str,
    /// The block whose DMA moves it.
    pub block: Block,
}

impl Cube {
    pub(super) fn atom_elems(&self) -> u32 {
        16 / self.prec.bytes()
    }
}

/// The main data of the DPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Main {
    /// CNA → CORE convolution (a matmul is a 1×1 convolution).
    Conv {
        feature: Feature,
        weights: Weights,
        window: Window,
    },
    /// Flying mode: DPU_RDMA's MRDMA reads the main data from memory.
    Flying(Cube),
}

/// An ALU operation of the BS/BN/EW stages.
pub(super) type Alu = AluOp;

/// The BS or BN stage: ALU → multiplier → ReLU / ReLUX, register operands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Stage {
    pub alu: Option<(Alu, i64)>,
    /// Multiplier operand, shift for values ≥ 0, shift for values < 0, PReLU.
    pub mul: Option<(i64, u32, u32, bool)>,
    pub relu: bool,
    pub relux: Option<i64>,
    /// The ALU operand read per channel from memory (BRDMA/NRDMA): a 1 × 1 × C cube.
    pub alu_mem: Option<Cube>,
    /// The multiplier operand read per channel from memory: a 1 × 1 × C cube.
    pub mul_mem: Option<Cube>,
}

/// The EW operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EwOp {
    Alu(Alu),
    /// Multiply, then shift right (for values ≥ 0, < 0).
    Mul(u32, u32),
}

/// The EW operand's source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum EwSrc {
    Register(u32),
    Memory(Cube),
}

/// The EW stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Ew {
    pub src: EwSrc,
    /// Operand converter: offset, scale, shift, add-first.
    pub cvt: Option<(i64, i64, u32, bool)>,
    pub op: Option<EwOp>,
    pub relu: bool,
    pub relux: Option<i64>,
    /// fp16 ADD with the converter bypassed: the hardware drops the operand (quirk 15, docs/hardware/quirks.md#quirk-15).
    pub dropped: bool,
    /// The fp32 multiply of the dequantisation task: each 32-bit operand element carries
    /// an fp16 value in its low half (docs/simulator.md, "Dequantisation task").
    pub f16_low_half: bool,
    /// The ERDMA operand is one value per channel (a 1 × 1 × C cube), broadcast over
    /// every pixel (`ERDMA_DATA_MODE` 0).
    pub per_channel: bool,
}

/// The output converter: `round((x × scale) >> shift) + offset` or `round(((x + offset) ×
/// scale) >> shift)` (add first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OutCvt {
    pub offset: i64,
    pub scale: i64,
    pub shift: u32,
    pub add_first: bool,
    pub half_up: bool,
}

impl OutCvt {
    pub(super) fn is_identity(&self) -> bool {
        self.offset == 0 && self.scale == 1 && self.shift == 0
    }
}

/// One task, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Task {
    pub enable: crate::regcmd::BlockMask,
    pub main: Main,
    /// The DPU's processing precision (the CORE's for convolutions).
    pub proc: Precision,
    pub bs: Option<Stage>,
    /// The BS multiplier of an fp32 pipeline: fp16 bits of its register operand (the
    /// integer stage `bs` is then `None`).
    pub bs_f16_mul: Option<u16>,
    pub bn: Option<Stage>,
    pub ew: Option<Ew>,
    pub out_cvt: OutCvt,
    pub out: Cube,
    /// CBUF banks given to data and weights.
    pub data_banks: u32,
    pub weight_banks: u32,
    /// CNA DATA_REUSE and WEIGHT_REUSE: the operand stays in the CBUF from the previous
    /// task, and the CNA does not fetch it again.
    pub data_reuse: bool,
    pub weight_reuse: bool,
    /// FEATURE_GRAINS, for the lint of quirk 5 (docs/hardware/quirks.md#quirk-5).
    pub grains: u32,
    /// CNA GROUP_LINE_OFF and the raw stride field, for the geometry lint.
    pub group_line_off: bool,
    pub line_stride_field: u32,
    /// DPU `ORIG_CHANNEL` + 1: channels of `out` that hold data; the others are written
    /// as zero.
    pub real_channels: u32,
    /// What the checks let through as derived rather than board-validated: one message
    /// each, reported as `unvalidated` lints.
    pub unvalidated: Vec<String>,
    /// The LUT of the EW stage (float pipelines), its tables filled from the core's LUT
    /// RAM when the task starts.
    pub lut: Option<super::lut::Lut>,
    /// The BS and BN stages of a float pipeline (`bs`/`bn` are then `None`): fp16
    /// multiplier operand and fp32 ALU operand bits, multiplier before ALU.
    pub bs_float: Option<Stage>,
    pub bn_float: Option<Stage>,
}

/// A checked task of either kind the model executes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Checked {
    /// A convolution or DPU-only task.
    Dpu(Box<Task>),
    /// A stand-alone pooling task ([`super::ppu`]).
    Ppu(Box<Pool>),
}

/// The address a decoded task holds (decoded tasks hold fixed addresses only).
pub(super) fn addr(a: crate::regcmd::DmaAddr) -> u32 {
    match a {
        crate::regcmd::DmaAddr::Fixed(a) => a,
        // Decoded tasks only hold fixed addresses.
        crate::regcmd::DmaAddr::Reloc { .. } => 0,
    }
}

/// A cube DPU_RDMA would read but is not started to: never read, the task stalls first.
pub(super) fn unfetched(w: u32, h: u32, c: u32, prec: Precision, register: &'static str) -> Cube {
    Cube {
        base: 0,
        w,
        h,
        c,
        prec,
        line: 0,
        surf: 0,
        register,
        block: Block::DpuRdma,
    }
}

/// The cube `(w, h, c)` of `prec` DPU_RDMA reads from `base` (`RDMA_SRC_BASE_ADDR`) with
/// `(line, surf)` bytes between lines and surfaces.
pub(super) fn rdma_src_cube(
    base: u32,
    (w, h, c): (u32, u32, u32),
    prec: Precision,
    (line, surf): (u64, u64),
) -> Cube {
    Cube {
        base,
        w,
        h,
        c,
        prec,
        line,
        surf,
        register: dpu_rdma::RdmaSrcBaseAddr::NAME,
        block: Block::DpuRdma,
    }
}

/// `cube`, refused at `channel` (stored as channels − 1) for `why` when its channels do
/// not fill whole 16-byte atoms.
pub(super) fn whole_atoms<R: Register>(
    cube: Cube,
    channel: crate::regs::Field<R>,
    why: &str,
    at: At,
) -> Result<Cube, SimError> {
    if !cube.c.is_multiple_of(cube.atom_elems()) {
        return Err(unsupported(at, channel, cube.c - 1, why));
    }
    Ok(cube)
}

/// Refuses a DPU_RDMA cube `(w, h, c)` other than the DPU's cube `out`: the read engine
/// feeds the DPU element for element.
pub(crate) fn same_cube((w, h, c): (u32, u32, u32), out: &Cube, at: At) -> Result<(), SimError> {
    if (w, h, c) != (out.w, out.h, out.c) {
        return Err(inconsistent(
            at,
            dpu_rdma::RdmaDataCubeWidth::WIDTH,
            w - 1,
            format!(
                "DPU_RDMA cube {w}x{h}x{c} differs from the DPU cube {}x{}x{}",
                out.w, out.h, out.c
            ),
        ));
    }
    Ok(())
}

/// Channels the CORE delivers from the one kernel over the planar input: one fp16 kernel
/// group, channel 0 computed, channels 1..15 zero.
pub(super) const PLANAR_CORE_CHANNELS: u32 = 16;

/// One pooling task, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Pool {
    pub enable: BlockMask,
    pub method: PoolMethod,
    /// fp16 or int8.
    pub prec: Precision,
    pub input: Cube,
    pub out: Cube,
    pub kernel: (u32, u32),
    pub stride: (u32, u32),
    /// Left, top, right, bottom.
    pub padding: [u32; 4],
    /// The pad value's bits: fp16 bits, or the 19-bit signed int8 value.
    pub pad: u32,
    /// The average's reciprocals (fp16 bits), 0 for max and min.
    pub recip: (u32, u32),
    /// The task's DMA ranges ([`crate::task::Task::dma`], which the pre-submit verifier checks
    /// too).
    pub dma: Vec<DmaRange>,
    /// What is derived rather than board-validated, one message each (`unvalidated`
    /// lints).
    pub unvalidated: Vec<String>,
}

/// Channels per depthwise weight group: 32 fp16 (gregordinary/rockchip-npu-notes
/// `depthwise-conv.md`, a board sweep), 64 int8 (Mesa `rkt_coefs.c`).
pub(super) fn depthwise_group(prec: Precision) -> u32 {
    if prec == Precision::Int8 { 64 } else { 32 }
}
