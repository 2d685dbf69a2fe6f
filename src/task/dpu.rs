//! DPU: the data-path processor after the MAC arrays — the BS and BN stages (ALU,
//! multiplier, ReLU), the element-wise (EW) stage, the output converter and the write DMA.
//!
//! Sub-units the program bypasses are `None`; their parameter registers must then hold
//! zeros (the identity scale where the vendor bodies write 1), which decoding checks.

use super::read::{DecodeError as E, Decoded, Reader};
use super::{Access, DmaRange, Precision, fixed};
use crate::error::Result;
use crate::regcmd::{DmaAddr, TaskBuilder};
use crate::regs::{Block, Field, Register, dpu};

/// Where the DPU's main data comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DpuInput {
    /// The CORE's accumulators (a convolution task).
    Core,
    /// DPU_RDMA's MRDMA reads it from memory (flying mode).
    Flying,
}

/// An ALU operation of the BS, BN and EW stages (TRM codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AluOp {
    /// Maximum (code 0).
    Max,
    /// Minimum (code 1).
    Min,
    /// Addition (code 2).
    Add,
    /// Subtraction (code 4).
    Minus,
}

impl AluOp {
    /// The register code.
    pub const fn code(self) -> u32 {
        match self {
            AluOp::Max => 0,
            AluOp::Min => 1,
            AluOp::Add => 2,
            AluOp::Minus => 4,
        }
    }

    /// The operation of a code.
    pub const fn from_code(code: u32) -> Option<AluOp> {
        Some(match code {
            0 => AluOp::Max,
            1 => AluOp::Min,
            2 => AluOp::Add,
            4 => AluOp::Minus,
            _ => return None,
        })
    }
}

/// The ALU of a BS or BN stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Alu {
    /// The operation (the BS/BN ALUs take add and minus).
    pub op: AluOp,
    /// The register operand.
    pub operand: i32,
    /// `ALU_SRC`: the operand comes per channel from memory (BRDMA/NRDMA).
    pub from_memory: bool,
}

/// The multiplier of a BS or BN stage: `(x × operand) >> shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mul {
    /// The register operand.
    pub operand: i16,
    /// Right shift for values ≥ 0.
    pub shift: u32,
    /// Right shift for values < 0 (`DATA_FORMAT`).
    pub shift_neg: u32,
    /// PReLU: multiply negative values only.
    pub prelu: bool,
    /// `MUL_SRC`: the operand comes from memory.
    pub from_memory: bool,
    /// `TRUNCATE_SRC`: the shift comes from memory.
    pub shift_from_memory: bool,
}

/// A BS or BN stage: ALU → multiplier → ReLU / ReLUX.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stage {
    /// The whole stage is bypassed.
    pub bypass: bool,
    /// The ALU, `None` when bypassed.
    pub alu: Option<Alu>,
    /// The multiplier, `None` when bypassed.
    pub mul: Option<Mul>,
    /// ReLU (clamp below at 0).
    pub relu: bool,
    /// ReLUX: clamp above at this value.
    pub relux: Option<i32>,
}

impl Stage {
    /// A bypassed stage with every unit bypassed.
    pub const BYPASSED: Stage = Stage {
        bypass: true,
        alu: None,
        mul: None,
        relu: false,
        relux: None,
    };
}

/// The EW operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EwOp {
    /// An ALU operation.
    Alu(AluOp),
    /// Multiply, then shift right by the first value (≥ 0) or the second (< 0).
    Mul(u32, u32),
}

/// The EW operand's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EwSrc {
    /// `EW_OP_VALUE0` (the registers `EW_OP_VALUE1..7` are carried in [`Ew::values`]).
    Register,
    /// ERDMA, one element per output element.
    Memory,
}

/// The EW operand converter: `((x × scale) + offset) >> shift` (or `((x + offset) × scale)
/// >> shift` with `add_first`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpCvt {
    /// Offset.
    pub offset: i32,
    /// Scale.
    pub scale: i16,
    /// Right shift.
    pub shift: u32,
    /// Add before multiplying.
    pub add_first: bool,
}

/// The EW stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ew {
    /// The operation, `None` when `EW_OP_BYPASS` is set.
    pub op: Option<EwOp>,
    /// The operand's source.
    pub src: EwSrc,
    /// The operand converter, `None` when bypassed.
    pub cvt: Option<OpCvt>,
    /// ReLU.
    pub relu: bool,
    /// ReLUX: clamp above at this value.
    pub relux: Option<i32>,
    /// `EDATA_SIZE`: the operand's element size code (2: 16-bit, 3: 32-bit).
    pub data_size: u32,
    /// `EW_DATA_MODE`: 1 = one operand per element.
    pub data_mode: u32,
    /// `EW_OP_VALUE0..7`.
    pub values: [u32; 8],
}

/// The output converter `((x × scale) + offset) >> shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OutCvt {
    /// Offset (`OUT_CVT_OFFSET`).
    pub offset: i32,
    /// Scale (`OUT_CVT_SCALE`, 16 bits).
    pub scale: u32,
    /// Right shift (`OUT_CVT_SHIFT`).
    pub shift: u32,
    /// `CVT_TYPE`: add the offset before scaling.
    pub add_first: bool,
    /// `CVT_ROUND`: round half up.
    pub round_half_up: bool,
    /// `FP32TOFP16_EN`: the fp32 result is narrowed to fp16.
    pub fp32_to_fp16: bool,
}

impl OutCvt {
    /// Scale 1, offset 0, shift 0.
    pub const IDENTITY: OutCvt = OutCvt {
        offset: 0,
        scale: 1,
        shift: 0,
        add_first: false,
        round_half_up: false,
        fp32_to_fp16: false,
    };

    /// Whether it leaves values unchanged (apart from the fp16 narrowing).
    pub const fn is_identity(&self) -> bool {
        self.offset == 0 && self.scale == 1 && self.shift == 0
    }
}

/// The output-data path options of `BS_OW_CFG` / `BS_OW_OP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwCfg {
    /// `OD_BYPASS`.
    pub od_bypass: bool,
    /// `SIZE_E_0..2`: output-line channel groups, per output type (matmul-recipe.md §10).
    pub size_e: [u32; 3],
    /// `OW_SRC`.
    pub ow_src: u32,
    /// `OW_OP` (the CPEND zero-point operand).
    pub ow_op: u32,
}

/// The cube the write DMA stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Output {
    /// `DST_BASE_ADDR`.
    pub addr: DmaAddr,
    /// `DATA_FORMAT.OUT_PRECISION`.
    pub precision: Precision,
    /// `DST_SURF_STRIDE` in 16-byte units.
    pub surf_stride: u32,
    /// `DATA_CUBE_NOTCH_ADDR`: atoms between one line's end and the next line.
    pub notch: u32,
    /// `SURFACE_ADD.SURF_ADD` in 16-byte units.
    pub surface_add: u32,
}

/// The DPU's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dpu {
    /// `S_POINTER`: register-group ping-pong (pointer and executer, pointer toggles itself).
    pub ping_pong: bool,
    /// Where the main data comes from.
    pub input: DpuInput,
    /// `FEATURE_MODE_CFG.BURST_LEN`.
    pub burst_len: u32,
    /// Input and processing precision (`DATA_FORMAT`; they must agree).
    pub precision: Precision,
    /// Cube width, height and channels (`DATA_CUBE_*`, repeated in `WDMA_SIZE_*`).
    pub cube: (u32, u32, u32),
    /// `DATA_CUBE_CHANNEL.ORIG_CHANNEL` + 1.
    pub orig_channels: u32,
    /// The BS stage.
    pub bs: Stage,
    /// The BN stage.
    pub bn: Stage,
    /// The EW stage, `None` when bypassed.
    pub ew: Option<Ew>,
    /// `BS_OW_CFG` / `BS_OW_OP`.
    pub ow: OwCfg,
    /// The output converter.
    pub out_cvt: OutCvt,
    /// The written cube.
    pub out: Output,
}

fn bit(b: bool) -> u32 {
    b.into()
}

fn set<R: Register>(r: R, fields: &[(Field<R>, u32)]) -> Result<R> {
    fields.iter().try_fold(r, |r, &(f, v)| f.set(r, v))
}

impl Dpu {
    /// `BS_OW_CFG.SIZE_E_0..2` of a convolution task as the board-validated programs set
    /// it (docs/simulator.md, "Validated values"); int8 → fp32, int16 → int32 and the
    /// bf16 pairs have no validated program and follow their nearest neighbours.
    pub fn validated_size_e(input: Precision, out: Precision) -> Option<u32> {
        use Precision::*;
        Some(match (input, out) {
            (Int8, Int32) | (Int8, Fp32) | (Int4, Int16) | (Int16, Int32) => 7,
            (Fp16 | Bf16, Fp32) => 3,
            (Fp16, Fp16) | (Bf16, Bf16) | (Int8, Int8) => 1,
            _ => return None,
        })
    }

    /// `SURFACE_ADD / DST_SURF_STRIDE` of a convolution task as the board-validated programs
    /// set it (docs/simulator.md, "Validated values"); int16 and bf16 follow int8 and fp16.
    pub fn validated_surface_ratio(input: Precision, out: Precision) -> Option<u32> {
        use Precision::*;
        Some(match (input, out) {
            (Int8 | Int4 | Int16, _) => 8,
            (Fp16 | Bf16, Fp32) => 4,
            (Fp16 | Bf16, Fp16 | Bf16) => 2,
            _ => return None,
        })
    }

    /// `S_POINTER` with ping-pong on (or nothing when off).
    pub(super) fn emit_pointer(&self, t: &mut TaskBuilder) -> Result<()> {
        if self.ping_pong {
            use dpu::SPointer as P;
            t.write(set(
                P::new(),
                &[
                    (P::POINTER_PP_EN, 1),
                    (P::EXECUTER_PP_EN, 1),
                    (P::POINTER_PP_MODE, 1),
                ],
            )?);
        }
        Ok(())
    }

    fn emit_stage(t: &mut TaskBuilder, s: &Stage, regs: StageRegs) -> Result<()> {
        let alu = s.alu.unwrap_or(Alu {
            op: AluOp::Max,
            operand: 0,
            from_memory: false,
        });
        let cfg = set(
            regs.cfg_new(),
            &[
                (regs.bypass, bit(s.bypass)),
                (regs.alu_bypass, bit(s.alu.is_none())),
                (regs.mul_bypass, bit(s.mul.is_none())),
                (regs.mul_prelu, bit(s.mul.is_some_and(|m| m.prelu))),
                (regs.relu_bypass, bit(!s.relu)),
                (regs.relux_en, bit(s.relux.is_some())),
                (regs.alu_src, bit(alu.from_memory)),
                (regs.alu_algo, alu.op.code()),
            ],
        )?;
        regs.write(
            t,
            cfg,
            alu.operand as u32,
            s.mul,
            s.relux.unwrap_or(0) as u32,
        )
    }

    /// The DPU registers in ascending offsets (every one written, zeros included).
    pub(super) fn emit(&self, t: &mut TaskBuilder) -> Result<()> {
        use dpu::*;
        let (w, h, c) = self.cube;
        let o = &self.out;
        let shift_neg = |s: &Stage| s.mul.map_or(0, |m| m.shift_neg);
        let ew_trunc_neg = match self.ew.and_then(|e| e.op) {
            Some(EwOp::Mul(_, neg)) => neg,
            _ => 0,
        };
        t.write_fields(&[
            (
                FeatureModeCfg::FLYING_MODE,
                bit(self.input == DpuInput::Flying),
            ),
            (FeatureModeCfg::OUTPUT_MODE, 2),
            (FeatureModeCfg::BURST_LEN, self.burst_len),
        ])?
        .write_fields(&[
            (DataFormat::OUT_PRECISION, o.precision.code()),
            (DataFormat::IN_PRECISION, self.precision.code()),
            (DataFormat::PROC_PRECISION, self.precision.code()),
            (DataFormat::BS_MUL_SHIFT_VALUE_NEG, shift_neg(&self.bs)),
            (DataFormat::BN_MUL_SHIFT_VALUE_NEG, shift_neg(&self.bn)),
            (DataFormat::EW_TRUNCATE_NEG, ew_trunc_neg),
        ])?
        .write(OffsetPend::new())
        .write_addr::<DstBaseAddr>(o.addr)?
        .write_fields(&[(DstSurfStride::DST_SURF_STRIDE, o.surf_stride)])?
        .write_fields(&[(DataCubeWidth::WIDTH, w.wrapping_sub(1))])?
        .write_fields(&[(DataCubeHeight::HEIGHT, h.wrapping_sub(1))])?
        .write_fields(&[
            (DataCubeNotchAddr::NOTCH_ADDR_0, o.notch),
            (DataCubeNotchAddr::NOTCH_ADDR_1, o.notch),
        ])?
        .write_fields(&[
            (DataCubeChannel::CHANNEL, c.wrapping_sub(1)),
            (
                DataCubeChannel::ORIG_CHANNEL,
                self.orig_channels.wrapping_sub(1),
            ),
        ])?;
        Self::emit_stage(t, &self.bs, StageRegs::BS)?;
        let ow = &self.ow;
        t.write_fields(&[
            (BsOwCfg::OD_BYPASS, bit(ow.od_bypass)),
            (BsOwCfg::SIZE_E_0, ow.size_e[0]),
            (BsOwCfg::SIZE_E_1, ow.size_e[1]),
            (BsOwCfg::SIZE_E_2, ow.size_e[2]),
            (BsOwCfg::OW_SRC, ow.ow_src),
        ])?
        .write_fields(&[(BsOwOp::OW_OP, ow.ow_op)])?
        .write_fields(&[(WdmaSize0::CHANNEL_WDMA, c.wrapping_sub(1))])?
        .write_fields(&[
            (WdmaSize1::WIDTH_WDMA, w.wrapping_sub(1)),
            (WdmaSize1::HEIGHT_WDMA, h.wrapping_sub(1)),
        ])?;
        Self::emit_stage(t, &self.bn, StageRegs::BN)?;
        self.emit_ew(t)?;
        let cvt = &self.out_cvt;
        t.write_fields(&[(OutCvtOffset::OUT_CVT_OFFSET, cvt.offset as u32)])?
            .write_fields(&[
                (OutCvtScale::OUT_CVT_SCALE, cvt.scale),
                (OutCvtScale::FP32TOFP16_EN, bit(cvt.fp32_to_fp16)),
            ])?
            .write_fields(&[
                (OutCvtShift::OUT_CVT_SHIFT, cvt.shift),
                (OutCvtShift::CVT_TYPE, bit(cvt.add_first)),
                (OutCvtShift::CVT_ROUND, bit(cvt.round_half_up)),
            ])?;
        let values = self.ew.map_or([0; 8], |e| e.values);
        for (i, v) in values.iter().enumerate() {
            t.write_at(&EW_OP_VALUE, i, EwOpValue::from_raw(*v))?;
        }
        t.write_fields(&[(SurfaceAdd::SURF_ADD, o.surface_add)])?
            .write(Unk40c4::new())
            .write(LutAccessCfg::new())
            .write(LutAccessData::new())
            .write(LutCfg::new())
            .write(LutInfo::new())
            .write(LutLeStart::new())
            .write(LutLeEnd::new())
            .write(LutLoStart::new())
            .write(LutLoEnd::new())
            .write(LutLeSlopeScale::new())
            .write(LutLeSlopeShift::new())
            .write(LutLoSlopeScale::new())
            .write(LutLoSlopeShift::new());
        Ok(())
    }

    fn emit_ew(&self, t: &mut TaskBuilder) -> Result<()> {
        use dpu::*;
        let e = self.ew;
        let op = e.and_then(|e| e.op);
        let cvt = e.and_then(|e| e.cvt);
        let (algo, op_type) = match op {
            Some(EwOp::Alu(a)) => (a.code(), 0),
            Some(EwOp::Mul(..)) => (0, 1),
            None => (0, 0),
        };
        t.write_fields(&[
            (EwCfg::EW_BYPASS, bit(e.is_none())),
            (EwCfg::EW_OP_BYPASS, bit(op.is_none())),
            (EwCfg::EW_OP_TYPE, op_type),
            (
                EwCfg::EW_OP_SRC,
                bit(e.is_some_and(|e| e.src == EwSrc::Memory)),
            ),
            (EwCfg::EW_LUT_BYPASS, 1),
            (EwCfg::EW_OP_CVT_BYPASS, bit(cvt.is_none())),
            (EwCfg::EW_RELU_BYPASS, bit(e.is_none_or(|e| !e.relu))),
            (
                EwCfg::EW_RELUX_EN,
                bit(e.is_some_and(|e| e.relux.is_some())),
            ),
            (EwCfg::EW_ALU_ALGO, algo),
            (EwCfg::EDATA_SIZE, e.map_or(0, |e| e.data_size)),
            (EwCfg::EW_DATA_MODE, e.map_or(0, |e| e.data_mode)),
            (EwCfg::EW_CVT_TYPE, bit(cvt.is_some_and(|c| c.add_first))),
        ])?;
        let cvt_or_identity = cvt.unwrap_or(OpCvt {
            offset: 0,
            scale: 1,
            shift: 0,
            add_first: false,
        });
        let trunc = match op {
            Some(EwOp::Mul(t, _)) => t,
            _ => 0,
        };
        t.write_fields(&[(
            EwCvtOffsetValue::EW_OP_CVT_OFFSET,
            cvt_or_identity.offset as u32,
        )])?
        .write_fields(&[
            (
                EwCvtScaleValue::EW_OP_CVT_SCALE,
                cvt_or_identity.scale as u16 as u32,
            ),
            (EwCvtScaleValue::EW_OP_CVT_SHIFT, cvt_or_identity.shift),
            (EwCvtScaleValue::EW_TRUNCATE, trunc),
        ])?
        .write_fields(&[(
            EwReluxCmpValue::EW_RELUX_CMP_DAT,
            e.and_then(|e| e.relux).unwrap_or(0) as u32,
        )])?;
        Ok(())
    }

    /// Reads the DPU registers.
    pub(super) fn decode(r: &mut Reader<'_>) -> Decoded<Dpu> {
        use dpu::*;
        r.expect(
            FeatureModeCfg::OUTPUT_MODE,
            2,
            "only output to memory is modelled",
        )?;
        r.expect(
            FeatureModeCfg::CONV_MODE,
            0,
            "only direct convolution is modelled",
        )?;
        r.expect(
            FeatureModeCfg::NONALIGN,
            0,
            "non-aligned output is not modelled",
        )?;
        r.expect(
            FeatureModeCfg::SURF_LEN,
            0,
            "non-aligned output is not modelled",
        )?;
        r.expect(
            FeatureModeCfg::RGP_TYPE,
            0,
            "output regroup is not modelled",
        )?;
        r.expect(FeatureModeCfg::TP_EN, 0, "transpose is not modelled")?;
        r.expect(
            FeatureModeCfg::COMB_USE,
            0,
            "combined RDMA use is not modelled",
        )?;
        r.expect(
            DataFormat::MC_SURF_OUT,
            0,
            "serial surface output is not modelled",
        )?;
        let ping_pong = decode_pointer(
            r,
            [
                SPointer::POINTER_PP_EN,
                SPointer::EXECUTER_PP_EN,
                SPointer::POINTER_PP_MODE,
            ],
        )?;
        let out_code = r.get(DataFormat::OUT_PRECISION);
        let out_precision = Precision::from_code(out_code).ok_or_else(|| {
            E::unsupported(
                DataFormat::OUT_PRECISION,
                out_code,
                "reserved precision code",
            )
        })?;
        let proc_code = r.get(DataFormat::PROC_PRECISION);
        let precision = Precision::from_code(proc_code).ok_or_else(|| {
            E::unsupported(
                DataFormat::PROC_PRECISION,
                proc_code,
                "reserved precision code",
            )
        })?;
        r.agree(DataFormat::IN_PRECISION, proc_code, || {
            format!("differs from proc_precision {proc_code}")
        })?;
        let w = r.get(DataCubeWidth::WIDTH) + 1;
        let h = r.get(DataCubeHeight::HEIGHT) + 1;
        r.expect(
            DataCubeHeight::MINMAX_CTL,
            0,
            "min/max statistics are not modelled",
        )?;
        let c = r.get(DataCubeChannel::CHANNEL) + 1;
        r.agree(WdmaSize0::CHANNEL_WDMA, c - 1, || {
            format!("the cube has {c} channels")
        })?;
        r.expect(
            WdmaSize0::SIZE_C_WDMA,
            0,
            "write-DMA size_c is not modelled",
        )?;
        r.expect(WdmaSize0::TP_PRECISION, 0, "transpose is not modelled")?;
        r.agree(WdmaSize1::WIDTH_WDMA, w - 1, || {
            format!("the cube is {w} wide")
        })?;
        r.agree(WdmaSize1::HEIGHT_WDMA, h - 1, || {
            format!("the cube is {h} high")
        })?;
        let notch = r.get(DataCubeNotchAddr::NOTCH_ADDR_0);
        let notch1 = r.get(DataCubeNotchAddr::NOTCH_ADDR_1);
        if notch1 != notch {
            return Err(E::unsupported(
                DataCubeNotchAddr::NOTCH_ADDR_1,
                notch1,
                format!("differs from notch_addr_0 {notch} (per-line notches are not modelled)"),
            ));
        }
        r.expect(BsOwCfg::TP_ORG_EN, 0, "transpose is not modelled")?;
        r.expect(BsOwCfg::RGP_CNTER, 0, "output regroup is not modelled")?;
        r.expect(
            OutCvtShift::MINUS_EXP,
            0,
            "exponent adjustment is not modelled",
        )?;
        let bs = decode_stage(r, StageRegs::BS)?;
        let bn = decode_stage(r, StageRegs::BN)?;
        let ew = decode_ew(r)?;
        Ok(Dpu {
            ping_pong,
            input: if r.flag(FeatureModeCfg::FLYING_MODE) {
                DpuInput::Flying
            } else {
                DpuInput::Core
            },
            burst_len: r.get(FeatureModeCfg::BURST_LEN),
            precision,
            cube: (w, h, c),
            orig_channels: r.get(DataCubeChannel::ORIG_CHANNEL) + 1,
            bs,
            bn,
            ew,
            ow: OwCfg {
                od_bypass: r.flag(BsOwCfg::OD_BYPASS),
                size_e: [
                    r.get(BsOwCfg::SIZE_E_0),
                    r.get(BsOwCfg::SIZE_E_1),
                    r.get(BsOwCfg::SIZE_E_2),
                ],
                ow_src: r.get(BsOwCfg::OW_SRC),
                ow_op: r.get(BsOwOp::OW_OP),
            },
            out_cvt: OutCvt {
                offset: r.get(OutCvtOffset::OUT_CVT_OFFSET) as i32,
                scale: r.get(OutCvtScale::OUT_CVT_SCALE),
                shift: r.get(OutCvtShift::OUT_CVT_SHIFT),
                add_first: r.flag(OutCvtShift::CVT_TYPE),
                round_half_up: r.flag(OutCvtShift::CVT_ROUND),
                fp32_to_fp16: r.flag(OutCvtScale::FP32TOFP16_EN),
            },
            out: Output {
                addr: DmaAddr::Fixed(r.get(DstBaseAddr::DST_BASE_ADDR)),
                precision: out_precision,
                surf_stride: r.get(DstSurfStride::DST_SURF_STRIDE),
                notch,
                surface_add: r.get(SurfaceAdd::SURF_ADD),
            },
        })
    }

    /// Bytes between lines and between surfaces of the output cube.
    pub fn out_strides(&self) -> (u64, u64) {
        let line = (u64::from(self.cube.0) + u64::from(self.out.notch)) * 16;
        (line, u64::from(self.out.surf_stride) * 16)
    }

    /// The write of the output cube.
    pub(super) fn dma(&self, out: &mut Vec<DmaRange>) {
        let Some(start) = fixed(self.out.addr) else {
            return;
        };
        let (w, h, c) = self.cube;
        let (line, surf) = self.out_strides();
        out.push(DmaRange {
            block: Block::Dpu,
            register: dpu::DstBaseAddr::NAME,
            what: "output",
            start,
            len: cube_extent(w, h, c, self.out.precision, line, surf),
            access: Access::Write,
        });
    }
}

/// Bytes from a cube's base to one past its last byte: `surfaces` of `h` lines of `w`
/// 16-byte atoms.
pub(crate) fn cube_extent(w: u32, h: u32, c: u32, p: Precision, line: u64, surf: u64) -> u64 {
    let surfaces = u64::from(c.div_ceil(16 / p.bytes()));
    surfaces.saturating_sub(1) * surf + u64::from(h.saturating_sub(1)) * line + u64::from(w) * 16
}

/// A block's `S_POINTER` ping-pong bits: all set (true) or all clear (false).
pub(super) fn decode_pointer<R: Register>(
    r: &mut Reader<'_>,
    bits: [Field<R>; 3],
) -> Decoded<bool> {
    let v = bits.map(|f| r.get(f));
    match v {
        [1, 1, 1] => Ok(true),
        [0, 0, 0] => Ok(false),
        _ => Err(E::unsupported(
            bits[0],
            v[0],
            "ping-pong pointer, executer and pointer mode are set together or not at all",
        )),
    }
}

/// The registers of the BS or BN stage.
#[derive(Clone, Copy)]
struct StageRegs {
    bypass: Field<dpu::BsCfg>,
    alu_bypass: Field<dpu::BsCfg>,
    mul_bypass: Field<dpu::BsCfg>,
    mul_prelu: Field<dpu::BsCfg>,
    relu_bypass: Field<dpu::BsCfg>,
    relux_en: Field<dpu::BsCfg>,
    alu_src: Field<dpu::BsCfg>,
    alu_algo: Field<dpu::BsCfg>,
    bn: bool,
}

impl StageRegs {
    const BS: StageRegs = StageRegs {
        bypass: dpu::BsCfg::BS_BYPASS,
        alu_bypass: dpu::BsCfg::BS_ALU_BYPASS,
        mul_bypass: dpu::BsCfg::BS_MUL_BYPASS,
        mul_prelu: dpu::BsCfg::BS_MUL_PRELU,
        relu_bypass: dpu::BsCfg::BS_RELU_BYPASS,
        relux_en: dpu::BsCfg::BS_RELUX_EN,
        alu_src: dpu::BsCfg::BS_ALU_SRC,
        alu_algo: dpu::BsCfg::BS_ALU_ALGO,
        bn: false,
    };
    /// BN_CFG has BS_CFG's layout: the BS field constants address it, re-based below.
    const BN: StageRegs = StageRegs {
        bn: true,
        ..StageRegs::BS
    };

    fn cfg_new(self) -> dpu::BsCfg {
        dpu::BsCfg::new()
    }

    /// Writes CFG (as BS_CFG or BN_CFG), ALU, MUL and RELUX registers.
    fn write(
        self,
        t: &mut TaskBuilder,
        cfg: dpu::BsCfg,
        alu_operand: u32,
        mul: Option<Mul>,
        relux: u32,
    ) -> Result<()> {
        let m = mul.unwrap_or(Mul {
            operand: 0,
            shift: 0,
            shift_neg: 0,
            prelu: false,
            from_memory: false,
            shift_from_memory: false,
        });
        if self.bn {
            use dpu::{BnAluCfg, BnCfg, BnMulCfg, BnReluxCmpValue};
            t.write(BnCfg::from_raw(cfg.raw()))
                .write_fields(&[(BnAluCfg::BN_ALU_OPERAND, alu_operand)])?
                .write_fields(&[
                    (BnMulCfg::BN_MUL_SRC, bit(m.from_memory)),
                    (BnMulCfg::BN_TRUNCATE_SRC, bit(m.shift_from_memory)),
                    (BnMulCfg::BN_MUL_SHIFT_VALUE, m.shift),
                    (BnMulCfg::BN_MUL_OPERAND, m.operand as u16 as u32),
                ])?
                .write_fields(&[(BnReluxCmpValue::BN_RELUX_CMP_DAT, relux)])?;
        } else {
            use dpu::{BsAluCfg, BsMulCfg, BsReluxCmpValue};
            t.write(cfg)
                .write_fields(&[(BsAluCfg::BS_ALU_OPERAND, alu_operand)])?
                .write_fields(&[
                    (BsMulCfg::BS_MUL_SRC, bit(m.from_memory)),
                    (BsMulCfg::BS_TRUNCATE_SRC, bit(m.shift_from_memory)),
                    (BsMulCfg::BS_MUL_SHIFT_VALUE, m.shift),
                    (BsMulCfg::BS_MUL_OPERAND, m.operand as u16 as u32),
                ])?
                .write_fields(&[(BsReluxCmpValue::BS_RELUX_CMP_DAT, relux)])?;
        }
        Ok(())
    }
}

/// Reads the BS or BN stage.
fn decode_stage(r: &mut Reader<'_>, regs: StageRegs) -> Decoded<Stage> {
    use dpu::*;
    // The BN registers share the BS layout; read each through its own constants.
    macro_rules! pick {
        ($bs:expr, $bn:expr) => {
            if regs.bn { r.get($bn) } else { r.get($bs) }
        };
    }
    let bypass = pick!(BsCfg::BS_BYPASS, BnCfg::BN_BYPASS) == 1;
    let alu_bypass = pick!(BsCfg::BS_ALU_BYPASS, BnCfg::BN_ALU_BYPASS) == 1;
    let mul_bypass = pick!(BsCfg::BS_MUL_BYPASS, BnCfg::BN_MUL_BYPASS) == 1;
    let relu = pick!(BsCfg::BS_RELU_BYPASS, BnCfg::BN_RELU_BYPASS) == 0;
    let relux_en = pick!(BsCfg::BS_RELUX_EN, BnCfg::BN_RELUX_EN) == 1;
    let alu = if alu_bypass {
        None
    } else {
        let code = pick!(BsCfg::BS_ALU_ALGO, BnCfg::BN_ALU_ALGO);
        let op = AluOp::from_code(code).ok_or_else(|| {
            if regs.bn {
                E::unsupported(BnCfg::BN_ALU_ALGO, code, "reserved ALU code")
            } else {
                E::unsupported(BsCfg::BS_ALU_ALGO, code, "reserved ALU code")
            }
        })?;
        Some(Alu {
            op,
            operand: pick!(BsAluCfg::BS_ALU_OPERAND, BnAluCfg::BN_ALU_OPERAND) as i32,
            from_memory: pick!(BsCfg::BS_ALU_SRC, BnCfg::BN_ALU_SRC) == 1,
        })
    };
    let mul = if mul_bypass {
        None
    } else {
        Some(Mul {
            operand: pick!(BsMulCfg::BS_MUL_OPERAND, BnMulCfg::BN_MUL_OPERAND) as u16 as i16,
            shift: pick!(BsMulCfg::BS_MUL_SHIFT_VALUE, BnMulCfg::BN_MUL_SHIFT_VALUE),
            shift_neg: pick!(
                DataFormat::BS_MUL_SHIFT_VALUE_NEG,
                DataFormat::BN_MUL_SHIFT_VALUE_NEG
            ),
            prelu: pick!(BsCfg::BS_MUL_PRELU, BnCfg::BN_MUL_PRELU) == 1,
            from_memory: pick!(BsMulCfg::BS_MUL_SRC, BnMulCfg::BN_MUL_SRC) == 1,
            shift_from_memory: pick!(BsMulCfg::BS_TRUNCATE_SRC, BnMulCfg::BN_TRUNCATE_SRC) == 1,
        })
    };
    let relux = relux_en.then(|| {
        pick!(
            BsReluxCmpValue::BS_RELUX_CMP_DAT,
            BnReluxCmpValue::BN_RELUX_CMP_DAT
        ) as i32
    });
    Ok(Stage {
        bypass,
        alu,
        mul,
        relu,
        relux,
    })
}

/// Reads the EW stage.
fn decode_ew(r: &mut Reader<'_>) -> Decoded<Option<Ew>> {
    use dpu::*;
    let bypass = r.flag(EwCfg::EW_BYPASS);
    r.expect(
        EwCfg::EW_BINARY_EN,
        0,
        "min/max binary mode is not modelled",
    )?;
    r.expect(EwCfg::EW_EQUAL_EN, 0, "min/max equal mode is not modelled")?;
    r.expect(EwCfg::EW_MUL_PRELU, 0, "EW PReLU is not modelled")?;
    let op_bypass = r.flag(EwCfg::EW_OP_BYPASS);
    let op = if op_bypass {
        None
    } else if r.flag(EwCfg::EW_OP_TYPE) {
        Some(EwOp::Mul(
            r.get(EwCvtScaleValue::EW_TRUNCATE),
            r.get(DataFormat::EW_TRUNCATE_NEG),
        ))
    } else {
        let code = r.get(EwCfg::EW_ALU_ALGO);
        Some(EwOp::Alu(AluOp::from_code(code).ok_or_else(|| {
            E::unsupported(
                EwCfg::EW_ALU_ALGO,
                code,
                "max, min, add and minus are modelled",
            )
        })?))
    };
    let offset = r.get(EwCvtOffsetValue::EW_OP_CVT_OFFSET) as i32;
    let scale = r.get(EwCvtScaleValue::EW_OP_CVT_SCALE) as u16 as i16;
    let shift = r.get(EwCvtScaleValue::EW_OP_CVT_SHIFT);
    let cvt = if r.flag(EwCfg::EW_OP_CVT_BYPASS) {
        if offset != 0 || !(0..=1).contains(&scale) || shift != 0 {
            return Err(E::unsupported(
                EwCvtScaleValue::EW_OP_CVT_SCALE,
                scale as u16 as u32,
                "the operand converter is bypassed but its offset, scale or shift is set",
            ));
        }
        None
    } else {
        Some(OpCvt {
            offset,
            scale,
            shift,
            add_first: r.flag(EwCfg::EW_CVT_TYPE),
        })
    };
    r.expect(EwCfg::EW_LUT_BYPASS, 1, "the LUT is not modelled")?;
    let values = [
        r.get(EwOpValue0::EW_OPERAND_0),
        r.get(EwOpValue1::EW_OPERAND_1),
        r.get(EwOpValue2::EW_OPERAND_2),
        r.get(EwOpValue3::EW_OPERAND_3),
        r.get(EwOpValue4::EW_OPERAND_4),
        r.get(EwOpValue5::EW_OPERAND_5),
        r.get(EwOpValue6::EW_OPERAND_6),
        r.get(EwOpValue7::EW_OPERAND_7),
    ];
    let relu = !r.flag(EwCfg::EW_RELU_BYPASS);
    let relux = r
        .flag(EwCfg::EW_RELUX_EN)
        .then(|| r.get(EwReluxCmpValue::EW_RELUX_CMP_DAT) as i32);
    let ew = Ew {
        op,
        src: if r.flag(EwCfg::EW_OP_SRC) {
            EwSrc::Memory
        } else {
            EwSrc::Register
        },
        cvt,
        relu,
        relux,
        data_size: r.get(EwCfg::EDATA_SIZE),
        data_mode: r.get(EwCfg::EW_DATA_MODE),
        values,
    };
    if bypass {
        let canonical = Ew {
            op: None,
            src: EwSrc::Register,
            cvt: None,
            relu: false,
            relux: None,
            data_size: 0,
            data_mode: 0,
            values: [0; 8],
        };
        if ew != canonical {
            return Err(E::unsupported(
                EwCfg::EW_BYPASS,
                1,
                "the EW stage is bypassed but its units are configured",
            ));
        }
        return Ok(None);
    }
    Ok(Some(ew))
}
