//! DPU: the data-path processor after the MAC arrays — the BS and BN stages (ALU,
//! multiplier, ReLU), the element-wise (EW) stage, the output converter and the write DMA.
//!
//! Sub-units the program bypasses are `None`. A bypassed BS or BN unit's parameter
//! registers must hold zeros (the identity scale where the vendor bodies write 1), which
//! decoding checks; a bypassed EW stage's registers, LUT configuration included, are
//! inert: the data never passes through them (docs/simulator.md, "Inert fields").

mod ew;
mod lut;
mod preset;
mod stage;

pub use ew::{Ew, EwOp, EwSrc, OpCvt};
pub(crate) use lut::is_port as is_lut_port;
pub use lut::{LUT_ENTRIES, LUT_SEGMENTS, Lut, LutRange, LutSlope, LutTables};
pub use preset::{FLYING_BURST_LEN, RDMA_ARBITER};
use stage::StageRegs;
pub use stage::{Alu, AluOp, Mul, Stage};

use super::pointer;
use super::read::{DecodeError as E, Decoded, Reader};
use super::{Access, DmaRange, Precision, fixed};
use crate::error::Result;
use crate::regcmd::{DmaAddr, TaskBuilder};
use crate::regs::{Block, Field, Register, dpu};

/// Why the DPU transpose's enable stays refused (docs/hardware/dpu-ops.md#transpose): the
/// register description names the bit only, and the one program that sets it whose buffers
/// were published (the phhusson toy graphs) was dumped before its transposing task wrote.
const TRANSPOSE_UNEXPLAINED: &str = "transpose is not modelled: no public source explains the field (its description reads only \"Enable transpose\"), and no capture with its buffers holds what a transposing task wrote";

/// Why the transpose's other fields stay refused: no capture holds a transposed write to
/// check a layout against.
const TRANSPOSE_UNCHECKED: &str = "transpose is not modelled: no capture with its buffers holds what a transposing task wrote, so no layout could be checked";

/// Where the DPU's main data comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DpuInput {
    /// The CORE's accumulators (a convolution task).
    Core,
    /// DPU_RDMA's MRDMA reads it from memory (flying mode).
    Flying,
}

/// The output converter: `round((x × scale) >> shift) + offset` (`CVT_TYPE` 0; the
/// offset after the rounding shift, as measured on RK3588) or `round(((x + offset) ×
/// scale) >> shift)` (`CVT_TYPE` 1, `add_first`); float paths scale by `2^−minus_exp`
/// instead of shifting.
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
    /// `MINUS_EXP`: the exponent subtracted in float paths (the LUT's fixed-point
    /// decode, docs/hardware/lut.md#output).
    pub minus_exp: u32,
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
        minus_exp: 0,
    };

    /// Whether it leaves values unchanged (apart from the fp16 narrowing).
    pub const fn is_identity(&self) -> bool {
        self.offset == 0 && self.scale == 1 && self.shift == 0 && self.minus_exp == 0
    }
}

/// The output-data path options of `BS_OW_CFG` / `BS_OW_OP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwCfg {
    /// `OD_BYPASS`.
    pub od_bypass: bool,
    /// `SIZE_E_0..2`: output-line channel groups, per output type (docs/hardware/matmul-programs.md#validated-values).
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
    /// `FEATURE_MODE_CFG.CONV_MODE` 3: the CORE delivers a depthwise convolution (0:
    /// direct). Board-run depthwise programs write it beside the CNA's and DPU_RDMA's
    /// (docs/hardware/convolution.md#depthwise).
    pub depthwise: bool,
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

pub(super) fn bit(b: bool) -> u32 {
    b.into()
}

pub(super) fn set<R: Register>(r: R, fields: &[(Field<R>, u32)]) -> Result<R> {
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
            (
                FeatureModeCfg::CONV_MODE,
                if self.depthwise { 3 } else { 0 },
            ),
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
        stage::emit(t, &self.bs, StageRegs::BS)?;
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
        stage::emit(t, &self.bn, StageRegs::BN)?;
        ew::emit(t, self.ew)?;
        let cvt = &self.out_cvt;
        t.write_fields(&[(OutCvtOffset::OUT_CVT_OFFSET, cvt.offset as u32)])?
            .write_fields(&[
                (OutCvtScale::OUT_CVT_SCALE, cvt.scale),
                (OutCvtScale::FP32TOFP16_EN, bit(cvt.fp32_to_fp16)),
            ])?
            .write_fields(&[
                (OutCvtShift::OUT_CVT_SHIFT, cvt.shift),
                (OutCvtShift::MINUS_EXP, cvt.minus_exp),
                (OutCvtShift::CVT_TYPE, bit(cvt.add_first)),
                (OutCvtShift::CVT_ROUND, bit(cvt.round_half_up)),
            ])?;
        let values = self.ew.map_or([0; 8], |e| e.values);
        for (i, v) in values.iter().enumerate() {
            t.write_at(&EW_OP_VALUE, i, EwOpValue::from_raw(*v))?;
        }
        t.write_fields(&[(SurfaceAdd::SURF_ADD, o.surface_add)])?
            .write(Unk40c4::new());
        lut::emit(t, self.ew.as_ref().and_then(|e| e.lut.as_ref()))?;
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
        let depthwise = match r.get(FeatureModeCfg::CONV_MODE) {
            0 => false,
            3 => true,
            mode => {
                return Err(E::unsupported(
                    FeatureModeCfg::CONV_MODE,
                    mode,
                    "direct (0) and depthwise (3) convolutions are modelled",
                ));
            }
        };
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
        r.expect(FeatureModeCfg::TP_EN, 0, TRANSPOSE_UNEXPLAINED)?;
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
        let ping_pong = pointer::decode::<SPointer>(r)?;
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
            format!("differs from {} {proc_code}", DataFormat::PROC_PRECISION)
        })?;
        let ((w, h, c), notch) = decode_cube(r)?;
        r.expect(BsOwCfg::TP_ORG_EN, 0, TRANSPOSE_UNCHECKED)?;
        r.expect(BsOwCfg::RGP_CNTER, 0, "output regroup is not modelled")?;
        let bs = stage::decode(r, StageRegs::BS)?;
        let bn = stage::decode(r, StageRegs::BN)?;
        let ew = ew::decode(r)?;
        Ok(Dpu {
            depthwise,
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
                minus_exp: r.get(OutCvtShift::MINUS_EXP),
            },
            out: Output {
                addr: DmaAddr::Fixed(r.address::<DstBaseAddr>()),
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

/// The cube's size, which the write DMA's size registers repeat, and its line notch.
fn decode_cube(r: &mut Reader<'_>) -> Decoded<((u32, u32, u32), u32)> {
    use dpu::*;
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
    r.expect(WdmaSize0::TP_PRECISION, 0, TRANSPOSE_UNCHECKED)?;
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
            format!(
                "differs from {} {notch} (per-line notches are not modelled)",
                DataCubeNotchAddr::NOTCH_ADDR_0
            ),
        ));
    }
    Ok(((w, h, c), notch))
}

/// Bytes from a cube's base to one past its last byte: `surfaces` of `h` lines of `w`
/// 16-byte atoms.
pub(crate) fn cube_extent(w: u32, h: u32, c: u32, p: Precision, line: u64, surf: u64) -> u64 {
    let surfaces = u64::from(c.div_ceil(16 / p.bytes()));
    surfaces.saturating_sub(1) * surf + u64::from(h.saturating_sub(1)) * line + u64::from(w) * 16
}
