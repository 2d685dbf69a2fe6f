//! From register values to a checked task description.
//!
//! This is where the simulator is strict: every field that changes what a task computes
//! is either understood and turned into the [`Task`] below, or rejected with an error
//! that names the register, the field and the value. Fields that only change timing
//! (burst lengths, clock gating, arbiter weights, SURFACE_ADD, BS_OW_CFG's SIZE_E) are
//! listed in docs/simulator.md and not read.

use super::error::{At, SimError};
use super::{CBUF_BANK_BYTES, CBUF_BANKS};
use crate::regcmd::BlockMask;
use crate::regs::{Register, cna, core, dpu, dpu_rdma};

/// Element types of the CNA input and the CORE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Prec {
    Int8,
    Int16,
    Fp16,
    Bf16,
    Int4,
}

impl Prec {
    fn from_code(code: u32) -> Option<Prec> {
        Some(match code {
            0 => Prec::Int8,
            1 => Prec::Int16,
            2 => Prec::Fp16,
            3 => Prec::Bf16,
            6 => Prec::Int4,
            _ => return None,
        })
    }

    /// Bits per element.
    pub(super) fn bits(self) -> u32 {
        match self {
            Prec::Int4 => 4,
            Prec::Int8 => 8,
            Prec::Int16 | Prec::Fp16 | Prec::Bf16 => 16,
        }
    }

    pub(super) fn is_float(self) -> bool {
        matches!(self, Prec::Fp16 | Prec::Bf16)
    }

    /// Elements in one 16-byte feature atom (the C2 of NC1HWC2).
    pub(super) fn atom_elems(self) -> u32 {
        128 / self.bits()
    }

    /// Kernels in one 1024-byte weight atom of 32 input channels.
    pub(super) fn kernels_per_atom(self) -> u32 {
        1024 * 8 / (32 * self.bits())
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Prec::Int8 => "int8",
            Prec::Int16 => "int16",
            Prec::Fp16 => "fp16",
            Prec::Bf16 => "bf16",
            Prec::Int4 => "int4",
        }
    }
}

/// Element types the DPU reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DPrec {
    Int8,
    Int16,
    Fp16,
    Bf16,
    Int32,
    Fp32,
    Int4,
}

impl DPrec {
    fn from_code(code: u32) -> Option<DPrec> {
        Some(match code {
            0 => DPrec::Int8,
            1 => DPrec::Int16,
            2 => DPrec::Fp16,
            3 => DPrec::Bf16,
            4 => DPrec::Int32,
            5 => DPrec::Fp32,
            6 => DPrec::Int4,
            _ => return None,
        })
    }

    pub(super) fn bytes(self) -> u32 {
        match self {
            DPrec::Int8 | DPrec::Int4 => 1,
            DPrec::Int16 | DPrec::Fp16 | DPrec::Bf16 => 2,
            DPrec::Int32 | DPrec::Fp32 => 4,
        }
    }

    pub(super) fn is_float(self) -> bool {
        matches!(self, DPrec::Fp16 | DPrec::Bf16 | DPrec::Fp32)
    }

    fn name(self) -> &'static str {
        match self {
            DPrec::Int8 => "int8",
            DPrec::Int16 => "int16",
            DPrec::Fp16 => "fp16",
            DPrec::Bf16 => "bf16",
            DPrec::Int32 => "int32",
            DPrec::Fp32 => "fp32",
            DPrec::Int4 => "int4",
        }
    }
}

/// The CNA feature (activation) read: an NC1HWC2 cube with 16-byte atoms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Feature {
    pub base: u32,
    pub w: u32,
    pub h: u32,
    /// Channels (padded; a multiple of 32).
    pub c: u32,
    pub prec: Prec,
    /// Bytes between lines (y).
    pub line: i64,
    /// Bytes between surfaces (groups of `atom_elems` channels).
    pub surf: i64,
}

/// The CNA weight read: N kernels of 1×1×C in 1024-byte atoms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Weights {
    pub base: u32,
    pub n: u32,
    pub c: u32,
    pub prec: Prec,
}

/// A cube the DPU or DPU_RDMA reads or writes: NC1HWC2 with 16-byte atoms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Cube {
    pub base: u32,
    pub w: u32,
    pub h: u32,
    pub c: u32,
    pub prec: DPrec,
    /// Bytes between lines.
    pub line: u64,
    /// Bytes between surfaces.
    pub surf: u64,
    /// The register the base address came from (for DMA errors).
    pub register: &'static str,
    /// The block whose DMA moves it.
    pub block: &'static str,
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
    Conv { feature: Feature, weights: Weights },
    /// Flying mode: DPU_RDMA's MRDMA reads the main data from memory.
    Flying(Cube),
}

/// An ALU operation of the BS/BN/EW stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Alu {
    Max,
    Min,
    Add,
    Minus,
}

/// The BS or BN stage: ALU → multiplier → ReLU / ReLUX, register operands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Stage {
    pub alu: Option<(Alu, i64)>,
    /// Multiplier operand, shift for values ≥ 0, shift for values < 0, PReLU.
    pub mul: Option<(i64, u32, u32, bool)>,
    pub relu: bool,
    pub relux: Option<i64>,
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
    /// fp16 ADD with the converter bypassed: the hardware drops the operand (quirk 15).
    pub dropped: bool,
}

/// The output converter: `((x × scale) + offset) >> shift` or `((x + offset) × scale) >> shift`.
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
    pub enable: BlockMask,
    pub main: Main,
    /// The DPU's processing precision (the CORE's for convolutions).
    pub proc: DPrec,
    pub bs: Option<Stage>,
    pub bn: Option<Stage>,
    pub ew: Option<Ew>,
    pub out_cvt: OutCvt,
    pub out: Cube,
    /// CBUF banks given to data and weights.
    pub data_banks: u32,
    pub weight_banks: u32,
    /// FEATURE_GRAINS, for the lint of quirk 5.
    pub grains: u32,
    /// CNA GROUP_LINE_OFF and the raw stride fields, for the geometry lint.
    pub group_line_off: bool,
    pub line_stride_field: u32,
}

/// Reads one register group, remembering which registers the task did not write itself.
pub(super) struct View<'a> {
    pub vals: &'a [u32],
    pub written: &'a [u64],
    pub serial: u64,
    pub at: At,
    /// Registers read whose value comes from an earlier task's list or from reset.
    pub stale: Vec<u16>,
}

fn sign_extend(v: u32, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((v as i64) << shift) >> shift
}

impl View<'_> {
    fn raw(&mut self, offset: u16) -> u32 {
        let i = offset as usize / 4;
        if self.written[i] != self.serial && !self.stale.contains(&offset) {
            self.stale.push(offset);
        }
        self.vals[i]
    }

    /// A field of a register, by the register type and the field's name.
    fn f<R: Register>(&mut self, field: &'static str) -> Result<u32, SimError> {
        let info = R::INFO.field(field).ok_or_else(|| SimError::Setup {
            why: format!("simulator model names no field {field} in {}", R::NAME),
        })?;
        Ok(info.extract(self.raw(R::OFFSET)))
    }

    fn unsupported<R: Register>(
        &self,
        field: &'static str,
        value: u32,
        why: impl Into<String>,
    ) -> SimError {
        SimError::Unsupported {
            at: self.at,
            register: R::NAME,
            field,
            value: value as u64,
            why: why.into(),
        }
    }

    fn inconsistent<R: Register>(
        &self,
        field: &'static str,
        value: u32,
        why: impl Into<String>,
    ) -> SimError {
        SimError::Inconsistent {
            at: self.at,
            register: R::NAME,
            field,
            value: value as u64,
            why: why.into(),
        }
    }

    /// The field must hold `want`, because the model does not implement anything else.
    fn require<R: Register>(
        &mut self,
        field: &'static str,
        want: u32,
        why: &str,
    ) -> Result<(), SimError> {
        let v = self.f::<R>(field)?;
        if v != want {
            return Err(self.unsupported::<R>(field, v, format!("{why} (the model needs {want})")));
        }
        Ok(())
    }

    /// A whole-register operand that must be zero.
    fn require_zero<R: Register>(&mut self, why: &str) -> Result<(), SimError> {
        let v = self.raw(R::OFFSET);
        if v != 0 {
            let field = R::INFO.fields.first().map_or("value", |f| f.name);
            return Err(self.unsupported::<R>(field, v, format!("{why} (the model needs 0)")));
        }
        Ok(())
    }
}

/// Checks the registers of one task and describes it.
pub(super) fn task(v: &mut View<'_>, enable: BlockMask) -> Result<Task, SimError> {
    let at = v.at;
    let unknown = enable.0 & !0x7D;
    if unknown != 0 {
        return Err(SimError::Unsupported {
            at,
            register: "PC.OPERATION_ENABLE (0x0081 entry)",
            field: "op_en",
            value: enable.0 as u64,
            why: format!("bits {unknown:#x} name no block"),
        });
    }
    if enable.0 & 0x60 != 0 {
        return Err(SimError::Unsupported {
            at,
            register: "PC.OPERATION_ENABLE (0x0081 entry)",
            field: "op_en",
            value: enable.0 as u64,
            why: "PPU and PPU_RDMA (pooling) are not modelled".into(),
        });
    }
    let conv = enable.0 & 0x0D == 0x0D;
    let flying_only = enable.0 & 0x0D == 0x08;
    if !conv && !flying_only {
        return Err(SimError::Unsupported {
            at,
            register: "PC.OPERATION_ENABLE (0x0081 entry)",
            field: "op_en",
            value: enable.0 as u64,
            why: "the model runs CNA+CORE+DPU (0x0D, 0x1D) or DPU+DPU_RDMA (0x18) tasks".into(),
        });
    }

    // DPU common part.
    v.require::<dpu::FeatureModeCfg>("output_mode", 2, "only output to memory is modelled")?;
    v.require::<dpu::FeatureModeCfg>("conv_mode", 0, "only direct convolution is modelled")?;
    v.require::<dpu::FeatureModeCfg>("nonalign", 0, "non-aligned output is not modelled")?;
    v.require::<dpu::FeatureModeCfg>("surf_len", 0, "non-aligned output is not modelled")?;
    v.require::<dpu::FeatureModeCfg>("rgp_type", 0, "output regroup is not modelled")?;
    v.require::<dpu::FeatureModeCfg>("tp_en", 0, "transpose is not modelled")?;
    v.require::<dpu::FeatureModeCfg>("comb_use", 0, "combined RDMA use is not modelled")?;
    let flying = v.f::<dpu::FeatureModeCfg>("flying_mode")? == 1;
    let out_code = v.f::<dpu::DataFormat>("out_precision")?;
    let in_code = v.f::<dpu::DataFormat>("in_precision")?;
    let proc_code = v.f::<dpu::DataFormat>("proc_precision")?;
    v.require::<dpu::DataFormat>("mc_surf_out", 0, "serial surface output is not modelled")?;
    let out_prec = DPrec::from_code(out_code).ok_or_else(|| {
        v.unsupported::<dpu::DataFormat>("out_precision", out_code, "reserved precision code")
    })?;
    let proc = DPrec::from_code(proc_code).ok_or_else(|| {
        v.unsupported::<dpu::DataFormat>("proc_precision", proc_code, "reserved precision code")
    })?;
    if in_code != proc_code {
        return Err(v.inconsistent::<dpu::DataFormat>(
            "in_precision",
            in_code,
            format!("differs from proc_precision {proc_code}"),
        ));
    }

    let main = if conv {
        if flying {
            return Err(v.inconsistent::<dpu::FeatureModeCfg>(
                "flying_mode",
                1,
                "the op-enable entry starts CNA and CORE, whose output the DPU would ignore",
            ));
        }
        conv_main(v, proc)?
    } else {
        if !flying {
            return Err(v.inconsistent::<dpu::FeatureModeCfg>(
                "flying_mode",
                0,
                "a DPU-only task must take its main data from DPU_RDMA (flying mode)",
            ));
        }
        Main::Flying(flying_cube(v, proc)?)
    };
    let (data_banks, weight_banks, grains, glo, line_field) = match &main {
        Main::Conv { .. } => (
            v.f::<cna::CbufCon0>("data_bank")?,
            v.f::<cna::CbufCon0>("weight_bank")?,
            v.f::<cna::ConvCon2>("feature_grains")?,
            v.f::<cna::ConvCon1>("group_line_off")? == 1,
            v.f::<cna::DmaCon1>("line_stride")?,
        ),
        Main::Flying(_) => (0, 0, 0, false, 0),
    };

    // Output cube and write DMA.
    let cw = v.f::<dpu::DataCubeWidth>("width")? + 1;
    let ch = v.f::<dpu::DataCubeHeight>("height")? + 1;
    v.require::<dpu::DataCubeHeight>("minmax_ctl", 0, "min/max statistics are not modelled")?;
    let cc = v.f::<dpu::DataCubeChannel>("channel")? + 1;
    let orig = v.f::<dpu::DataCubeChannel>("orig_channel")? + 1;
    if orig != cc {
        return Err(v.unsupported::<dpu::DataCubeChannel>(
            "orig_channel",
            orig - 1,
            format!(
                "differs from channel {} (padding channels are not modelled)",
                cc - 1
            ),
        ));
    }
    let (mw, mh, mc) = match &main {
        Main::Conv { feature, weights } => (
            v.f::<cna::DataSize2>("dataout_width")?,
            {
                let atomics = v.f::<cna::DataSize3>("dataout_atomics")?;
                let w = v.f::<cna::DataSize2>("dataout_width")?.max(1);
                atomics / w
            },
            {
                let _ = feature;
                weights.n
            },
        ),
        Main::Flying(c) => (c.w, c.h, c.c),
    };
    if cw != mw {
        return Err(v.inconsistent::<dpu::DataCubeWidth>(
            "width",
            cw - 1,
            format!("the DPU's input is {mw} wide"),
        ));
    }
    if ch != mh {
        return Err(v.inconsistent::<dpu::DataCubeHeight>(
            "height",
            ch - 1,
            format!("the DPU's input is {mh} high"),
        ));
    }
    if cc != mc {
        return Err(v.inconsistent::<dpu::DataCubeChannel>(
            "channel",
            cc - 1,
            format!("the DPU's input has {mc} channels"),
        ));
    }
    let wdma_c = v.f::<dpu::WdmaSize0>("channel_wdma")? + 1;
    if wdma_c != cc {
        return Err(v.inconsistent::<dpu::WdmaSize0>(
            "channel_wdma",
            wdma_c - 1,
            format!("the cube has {cc} channels"),
        ));
    }
    v.require::<dpu::WdmaSize0>("size_c_wdma", 0, "write-DMA size_c is not modelled")?;
    v.require::<dpu::WdmaSize0>("tp_precision", 0, "transpose is not modelled")?;
    let wdma_w = v.f::<dpu::WdmaSize1>("width_wdma")? + 1;
    let wdma_h = v.f::<dpu::WdmaSize1>("height_wdma")? + 1;
    if wdma_w != cw {
        return Err(v.inconsistent::<dpu::WdmaSize1>(
            "width_wdma",
            wdma_w - 1,
            format!("the cube is {cw} wide"),
        ));
    }
    if wdma_h != ch {
        return Err(v.inconsistent::<dpu::WdmaSize1>(
            "height_wdma",
            wdma_h - 1,
            format!("the cube is {ch} high"),
        ));
    }
    let notch0 = v.f::<dpu::DataCubeNotchAddr>("notch_addr_0")?;
    let notch1 = v.f::<dpu::DataCubeNotchAddr>("notch_addr_1")?;
    if notch0 != notch1 {
        return Err(v.unsupported::<dpu::DataCubeNotchAddr>(
            "notch_addr_1",
            notch1,
            format!("differs from notch_addr_0 {notch0} (per-line notches are not modelled)"),
        ));
    }
    let dst = v.f::<dpu::DstBaseAddr>("dst_base_addr")?;
    if dst % 16 != 0 {
        return Err(v.inconsistent::<dpu::DstBaseAddr>(
            "dst_base_addr",
            dst,
            "the write DMA needs 16-byte alignment",
        ));
    }
    let surf = v.f::<dpu::DstSurfStride>("dst_surf_stride")? as u64 * 16;
    let out = Cube {
        base: dst,
        w: cw,
        h: ch,
        c: cc,
        prec: out_prec,
        line: (cw as u64 + notch0 as u64) * 16,
        surf,
        register: dpu::DstBaseAddr::NAME,
        block: "DPU",
    };
    if cc % out.atom_elems() != 0 {
        return Err(v.unsupported::<dpu::DataCubeChannel>(
            "channel",
            cc - 1,
            format!(
                "{cc} channels do not fill whole 16-byte atoms of {}",
                out_prec.name()
            ),
        ));
    }
    if surf == 0 && cc > out.atom_elems() {
        return Err(v.inconsistent::<dpu::DstSurfStride>(
            "dst_surf_stride",
            0,
            "several surfaces need a stride",
        ));
    }

    // Which outputs each processing precision can produce.
    let ok = match proc {
        DPrec::Int8 => matches!(out_prec, DPrec::Int8 | DPrec::Int32 | DPrec::Fp32),
        DPrec::Int4 => matches!(out_prec, DPrec::Int16),
        DPrec::Int16 => matches!(out_prec, DPrec::Int32),
        DPrec::Fp16 => matches!(out_prec, DPrec::Fp16 | DPrec::Fp32),
        DPrec::Bf16 => matches!(out_prec, DPrec::Bf16 | DPrec::Fp32),
        DPrec::Int32 => matches!(out_prec, DPrec::Int32 | DPrec::Fp32),
        DPrec::Fp32 => matches!(out_prec, DPrec::Fp32),
    };
    if !ok {
        return Err(v.unsupported::<dpu::DataFormat>(
            "out_precision",
            out_code,
            format!(
                "{} output from {} processing is not modelled",
                out_prec.name(),
                proc.name()
            ),
        ));
    }
    let float = proc.is_float();

    let bs = stage(v, StageRegs::Bs, float)?;
    let bn = stage(v, StageRegs::Bn, float)?;
    let ew = ew_stage(v, &out, proc)?;

    // Output converter.
    let scale = v.f::<dpu::OutCvtScale>("out_cvt_scale")? as i64;
    let offset = sign_extend(v.f::<dpu::OutCvtOffset>("out_cvt_offset")?, 32);
    let shift = v.f::<dpu::OutCvtShift>("out_cvt_shift")?;
    v.require::<dpu::OutCvtShift>("minus_exp", 0, "exponent adjustment is not modelled")?;
    let fp32tofp16 = v.f::<dpu::OutCvtScale>("fp32tofp16_en")? == 1;
    let out_cvt = OutCvt {
        offset,
        scale,
        shift,
        add_first: v.f::<dpu::OutCvtShift>("cvt_type")? == 1,
        half_up: v.f::<dpu::OutCvtShift>("cvt_round")? == 1,
    };
    if shift > 63 {
        return Err(v.unsupported::<dpu::OutCvtShift>("out_cvt_shift", shift, "shifts above 63"));
    }
    if (float || out_prec.is_float()) && !out_cvt.is_identity() {
        return Err(v.unsupported::<dpu::OutCvtScale>(
            "out_cvt_scale",
            scale as u32,
            "float paths are modelled with the identity converter only (scale 1, offset 0, shift 0)",
        ));
    }
    if fp32tofp16 && out_prec != DPrec::Fp16 {
        return Err(v.inconsistent::<dpu::OutCvtScale>(
            "fp32tofp16_en",
            1,
            format!("the output precision is {}", out_prec.name()),
        ));
    }
    if v.f::<dpu::BsOwCfg>("od_bypass")? == 0 {
        let op = v.f::<dpu::BsOwOp>("ow_op")?;
        let src = v.f::<dpu::BsOwCfg>("ow_src")?;
        if op != 0 || src != 0 {
            return Err(v.unsupported::<dpu::BsOwOp>(
                "ow_op",
                op,
                "the CPEND (zero-point) adder is modelled only bypassed or adding 0",
            ));
        }
    }
    v.require::<dpu::BsOwCfg>("tp_org_en", 0, "transpose is not modelled")?;
    v.require::<dpu::BsOwCfg>("rgp_cnter", 0, "output regroup is not modelled")?;
    v.require_zero::<dpu::Unk40c4>("the word's meaning is unknown; every known program writes 0")?;
    if v.f::<dpu::LutAccessCfg>("lut_access_type")? == 1 {
        return Err(v.unsupported::<dpu::LutAccessCfg>(
            "lut_access_type",
            1,
            "LUT programming is not modelled",
        ));
    }

    Ok(Task {
        enable,
        main,
        proc,
        bs,
        bn,
        ew,
        out_cvt,
        out,
        data_banks,
        weight_banks,
        grains,
        group_line_off: glo,
        line_stride_field: line_field,
    })
}

/// CNA and CORE registers of a convolution task.
fn conv_main(v: &mut View<'_>, dpu_proc: DPrec) -> Result<Main, SimError> {
    let at = v.at;
    v.require::<cna::ConvCon1>("conv_mode", 0, "only direct convolution is modelled")?;
    v.require::<cna::ConvCon1>("argb_in", 0, "image input is not modelled")?;
    v.require::<cna::ConvCon1>("deconv", 0, "deconvolution is not modelled")?;
    v.require::<cna::ConvCon1>("nonalign_dma", 0, "non-aligned feature DMA is not modelled")?;
    let in_code = v.f::<cna::ConvCon1>("in_precision")?;
    let proc_code = v.f::<cna::ConvCon1>("proc_precision")?;
    let prec = Prec::from_code(in_code).ok_or_else(|| {
        v.unsupported::<cna::ConvCon1>(
            "in_precision",
            in_code,
            "int8, int16, fp16, bf16 and int4 are modelled",
        )
    })?;
    if proc_code != in_code {
        return Err(v.unsupported::<cna::ConvCon1>(
            "proc_precision",
            proc_code,
            format!("differs from in_precision {in_code} (input conversion is not modelled)"),
        ));
    }
    let core_proc = v.f::<core::MiscCfg>("proc_precision")?;
    if core_proc != proc_code {
        return Err(v.inconsistent::<core::MiscCfg>(
            "proc_precision",
            core_proc,
            format!("CNA processes precision {proc_code}"),
        ));
    }
    if DPrec::from_code(proc_code) != Some(dpu_proc) {
        let code = v.f::<dpu::DataFormat>("proc_precision")?;
        return Err(v.inconsistent::<dpu::DataFormat>(
            "proc_precision",
            code,
            format!("the CORE delivers {}", prec.name()),
        ));
    }
    v.require::<core::MiscCfg>("dw_en", 0, "depthwise convolution is not modelled")?;
    v.require::<core::ClipTruncate>("clip_truncate", 0, "accumulator truncation is not modelled")?;
    v.require_zero::<core::Unk3030>("the word's meaning is unknown; every known program writes 0")?;

    v.require::<cna::ConvCon2>("csc_do_en", 0, "the CSC debug outputs are not modelled")?;
    v.require::<cna::ConvCon2>("csc_wo_en", 0, "the CSC debug outputs are not modelled")?;
    v.require::<cna::ConvCon3>("conv_x_stride", 1, "only stride 1 is modelled")?;
    v.require::<cna::ConvCon3>("conv_y_stride", 1, "only stride 1 is modelled")?;
    v.require::<cna::ConvCon3>("atrous_x_dilation", 0, "dilation is not modelled")?;
    v.require::<cna::ConvCon3>("atrous_y_dilation", 0, "dilation is not modelled")?;
    v.require::<cna::ConvCon3>(
        "nn_mode",
        0,
        "multi-core MAC co-work modes are not modelled",
    )?;

    // Weights.
    let kernels = v.f::<cna::WeightSize2>("weight_kernels")?;
    let kw = v.f::<cna::WeightSize2>("weight_width")?;
    let kh = v.f::<cna::WeightSize2>("weight_height")?;
    if kw != 1 {
        return Err(v.unsupported::<cna::WeightSize2>(
            "weight_width",
            kw,
            "only 1x1 kernels are modelled",
        ));
    }
    if kh != 1 {
        return Err(v.unsupported::<cna::WeightSize2>(
            "weight_height",
            kh,
            "only 1x1 kernels are modelled",
        ));
    }
    let w = v.f::<cna::DataSize0>("datain_width")?;
    let h = v.f::<cna::DataSize0>("datain_height")?;
    let c = v.f::<cna::DataSize1>("datain_channel")?;
    let c_real = v.f::<cna::DataSize1>("datain_channel_real")? + 1;
    if w == 0 || h == 0 {
        return Err(v.inconsistent::<cna::DataSize0>(
            if w == 0 {
                "datain_width"
            } else {
                "datain_height"
            },
            0,
            "an empty feature cube",
        ));
    }
    if c == 0 || c % 32 != 0 {
        return Err(v.unsupported::<cna::DataSize1>(
            "datain_channel",
            c,
            "channels must be a positive multiple of 32 (one weight atom holds 32 channels)",
        ));
    }
    if c_real != c {
        return Err(v.unsupported::<cna::DataSize1>(
            "datain_channel_real",
            c_real - 1,
            format!("differs from datain_channel {c} - 1 (channel padding is not modelled)"),
        ));
    }
    let fc_w = v.f::<cna::FcDataSize0>("dma_width")?;
    let fc_h = v.f::<cna::FcDataSize0>("dma_height")?;
    let fc_c = v.f::<cna::FcDataSize1>("dma_channel")?;
    if fc_w != w {
        return Err(v.inconsistent::<cna::FcDataSize0>(
            "dma_width",
            fc_w,
            format!("DATA_SIZE0 width is {w}"),
        ));
    }
    if fc_h != h {
        return Err(v.inconsistent::<cna::FcDataSize0>(
            "dma_height",
            fc_h,
            format!("DATA_SIZE0 height is {h}"),
        ));
    }
    if fc_c != c {
        return Err(v.inconsistent::<cna::FcDataSize1>(
            "dma_channel",
            fc_c,
            format!("DATA_SIZE1 channel is {c}"),
        ));
    }
    v.require::<cna::DataSize3>("surf_mode", 0, "multi-surface modes are not modelled")?;
    let out_w = v.f::<cna::DataSize2>("dataout_width")?;
    let atomics = v.f::<cna::DataSize3>("dataout_atomics")?;
    if out_w != w {
        return Err(v.inconsistent::<cna::DataSize2>(
            "dataout_width",
            out_w,
            format!("a 1x1 stride-1 unpadded convolution of width {w} gives width {w}"),
        ));
    }
    if atomics as u64 != w as u64 * h as u64 {
        return Err(v.inconsistent::<cna::DataSize3>(
            "dataout_atomics",
            atomics,
            format!("the output has {w} x {h} = {} pixels", w as u64 * h as u64),
        ));
    }
    let core_w = v.f::<core::DataoutSize0>("dataout_width")? + 1;
    let core_h = v.f::<core::DataoutSize0>("dataout_height")? + 1;
    if core_w != w {
        return Err(v.inconsistent::<core::DataoutSize0>(
            "dataout_width",
            core_w - 1,
            format!("the output is {w} wide"),
        ));
    }
    if core_h != h {
        return Err(v.inconsistent::<core::DataoutSize0>(
            "dataout_height",
            core_h - 1,
            format!("the output is {h} high"),
        ));
    }

    // Padding registers: none for a 1x1 unpadded convolution.
    v.require::<cna::PadCon0>("pad_top", 0, "padding is not modelled")?;
    v.require::<cna::PadCon0>("pad_left", 0, "padding is not modelled")?;
    v.require::<cna::FcCon0>("fc_skip_en", 0, "zero skipping is not modelled")?;
    v.require::<cna::FcCon1>("data_offset", 0, "feature data offsets are not modelled")?;
    v.require::<cna::FcCon2>("weight_offset", 0, "weight offsets are not modelled")?;
    v.require::<cna::CvtCon0>(
        "cvt_bypass",
        1,
        "the input converter is modelled bypassed only",
    )?;
    if !prec.is_float() {
        v.require::<cna::CvtCon0>("data_sign", 1, "integer input is modelled signed only")?;
    }
    v.require_zero::<cna::CvtCon5>("per-channel input conversion is not modelled")?;
    v.require::<cna::DcompCtrl>("decomp_control", 0, "weight decompression is not modelled")?;

    let g = prec.kernels_per_atom();
    if kernels == 0 || kernels % g != 0 {
        return Err(v.unsupported::<cna::WeightSize2>(
            "weight_kernels",
            kernels,
            format!(
                "{} weights come in atoms of {g} kernels; the count must be a positive multiple",
                prec.name()
            ),
        ));
    }
    let per_kernel = c as u64 * prec.bits() as u64 / 8;
    let bpk = v.f::<cna::WeightSize1>("weight_bytes_per_kernel")?;
    if bpk as u64 != per_kernel {
        return Err(v.inconsistent::<cna::WeightSize1>(
            "weight_bytes_per_kernel",
            bpk,
            format!(
                "a 1x1 kernel of {c} {} channels holds {per_kernel} bytes",
                prec.name()
            ),
        ));
    }
    let total = v.f::<cna::WeightSize0>("weight_bytes")?;
    if total as u64 != per_kernel * kernels as u64 {
        return Err(v.inconsistent::<cna::WeightSize0>(
            "weight_bytes",
            total,
            format!(
                "{kernels} kernels of {per_kernel} bytes hold {}",
                per_kernel * kernels as u64
            ),
        ));
    }
    let core_c = v.f::<core::DataoutSize1>("dataout_channel")? + 1;
    if core_c != kernels {
        return Err(v.inconsistent::<core::DataoutSize1>(
            "dataout_channel",
            core_c - 1,
            format!("there are {kernels} kernels"),
        ));
    }

    // CBUF budget.
    v.require::<cna::CbufCon0>("fc_data_bank", 0, "FC data banks are not modelled")?;
    v.require::<cna::CbufCon0>(
        "data_reuse",
        0,
        "CBUF data reuse across tasks is not modelled",
    )?;
    v.require::<cna::CbufCon0>(
        "weight_reuse",
        0,
        "CBUF weight reuse across tasks is not modelled",
    )?;
    let db = v.f::<cna::CbufCon0>("data_bank")?;
    let wb = v.f::<cna::CbufCon0>("weight_bank")?;
    if db + wb > CBUF_BANKS {
        return Err(SimError::CbufOverflow {
            at,
            what: "data + weight",
            banks: CBUF_BANKS,
            needed_bytes: (db + wb) as u64 * CBUF_BANK_BYTES,
        });
    }
    let data_bytes = w as u64 * h as u64 * c as u64 * prec.bits() as u64 / 8;
    if data_bytes > db as u64 * CBUF_BANK_BYTES {
        return Err(SimError::CbufOverflow {
            at,
            what: "the feature cube (data banks)",
            banks: db,
            needed_bytes: data_bytes,
        });
    }
    // The weight banks hold at least one group of 32 kernels (64 for int4): the atom the
    // CORE consumes at once (matmul-recipe.md 4.2), or all weights when there are fewer.
    let group_kernels = g.max(32).min(kernels) as u64;
    let weight_need = group_kernels * per_kernel;
    if weight_need > wb as u64 * CBUF_BANK_BYTES {
        return Err(SimError::CbufOverflow {
            at,
            what: "one kernel group (weight banks)",
            banks: wb,
            needed_bytes: weight_need,
        });
    }
    let entries = v.f::<cna::CbufCon1>("data_entries")?;
    let row_entries = (w as u64 * c as u64 * prec.bits() as u64 / 8).div_ceil(64);
    if (entries as u64) < row_entries {
        return Err(v.inconsistent::<cna::CbufCon1>(
            "data_entries",
            entries,
            format!(
                "one feature row of {w} x {c} {} needs {row_entries} 64-byte entries",
                prec.name()
            ),
        ));
    }

    // Feature strides (docs/simulator.md, "Feature addressing").
    let line = v.f::<cna::DmaCon1>("line_stride")?;
    let surf = sign_extend(v.f::<cna::DmaCon2>("surf_stride")?, 28);
    let glo = v.f::<cna::ConvCon1>("group_line_off")? == 1;
    let (line_atoms, surf_atoms) = if glo {
        (line as i64, w as i64 + surf)
    } else {
        if h > 1 && line % 4 != 0 {
            return Err(v.unsupported::<cna::DmaCon1>(
                "line_stride",
                line,
                "with group line fetch on (GROUP_LINE_OFF 0) the line stride counts 4-byte units and must be a multiple of 4",
            ));
        }
        (line as i64 / 4, 4 * w as i64 + surf)
    };
    if c > prec.atom_elems() && surf_atoms <= 0 {
        let field = v.f::<cna::DmaCon2>("surf_stride")?;
        return Err(v.inconsistent::<cna::DmaCon2>(
            "surf_stride",
            field,
            format!("gives a surface stride of {surf_atoms} atoms"),
        ));
    }
    if h > 1 && line_atoms <= 0 {
        return Err(v.inconsistent::<cna::DmaCon1>(
            "line_stride",
            line,
            "gives a zero line stride for several lines",
        ));
    }
    let feature = Feature {
        base: v.f::<cna::FeatureDataAddr>("feature_base_addr")?,
        w,
        h,
        c,
        prec,
        line: line_atoms * 16,
        surf: surf_atoms * 16,
    };
    let wbase = v.f::<cna::DcompAddr0>("decompress_addr0")?;
    if wbase % 16 != 0 {
        return Err(v.inconsistent::<cna::DcompAddr0>(
            "decompress_addr0",
            wbase,
            "weights need 16-byte alignment",
        ));
    }
    Ok(Main::Conv {
        feature,
        weights: Weights {
            base: wbase,
            n: kernels,
            c,
            prec,
        },
    })
}

/// The MRDMA cube of a flying-mode task.
fn flying_cube(v: &mut View<'_>, proc: DPrec) -> Result<Cube, SimError> {
    v.require::<dpu_rdma::RdmaFeatureModeCfg>("flying_mode", 1, "the DPU runs in flying mode")?;
    v.require::<dpu_rdma::RdmaFeatureModeCfg>(
        "mrdma_disable",
        0,
        "flying mode reads the main data through MRDMA",
    )?;
    v.require::<dpu_rdma::RdmaFeatureModeCfg>("conv_mode", 0, "only direct mode is modelled")?;
    v.require::<dpu_rdma::RdmaFeatureModeCfg>(
        "mrdma_fp16tofp32_en",
        0,
        "input widening is not modelled",
    )?;
    let inp = v.f::<dpu_rdma::RdmaFeatureModeCfg>("in_precision")?;
    let prp = v.f::<dpu_rdma::RdmaFeatureModeCfg>("proc_precision")?;
    if DPrec::from_code(inp) != Some(proc) || DPrec::from_code(prp) != Some(proc) {
        return Err(v.inconsistent::<dpu_rdma::RdmaFeatureModeCfg>(
            "in_precision",
            inp,
            format!(
                "the DPU processes {} (DPU_RDMA proc_precision {prp})",
                proc.name()
            ),
        ));
    }
    if matches!(proc, DPrec::Int4) {
        return Err(v.unsupported::<dpu_rdma::RdmaFeatureModeCfg>(
            "in_precision",
            inp,
            "4-bit flying input",
        ));
    }
    v.require::<dpu_rdma::RdmaSrcDmaCfg>("unpooling_en", 0, "un-pooling is not modelled")?;
    let w = v.f::<dpu_rdma::RdmaDataCubeWidth>("width")? + 1;
    let h = v.f::<dpu_rdma::RdmaDataCubeHeight>("height")? + 1;
    let c = v.f::<dpu_rdma::RdmaDataCubeChannel>("channel")? + 1;
    let line_notch = v.f::<dpu_rdma::RdmaSrcDmaCfg>("line_notch_addr")?;
    let surf_notch = v.f::<dpu_rdma::RdmaSurfNotch>("surf_notch_addr")?;
    let base = v.f::<dpu_rdma::RdmaSrcBaseAddr>("src_base_addr")?;
    let line = (w as u64 + line_notch as u64) * 16;
    let cube = Cube {
        base,
        w,
        h,
        c,
        prec: proc,
        line,
        surf: (w as u64 + line_notch as u64) * h as u64 * 16 + surf_notch as u64 * 16,
        register: dpu_rdma::RdmaSrcBaseAddr::NAME,
        block: "DPU_RDMA",
    };
    if c % cube.atom_elems() != 0 {
        return Err(v.unsupported::<dpu_rdma::RdmaDataCubeChannel>(
            "channel",
            c - 1,
            "channels must fill whole 16-byte atoms",
        ));
    }
    Ok(cube)
}

#[derive(Clone, Copy)]
enum StageRegs {
    Bs,
    Bn,
}

/// The BS or BN stage, register operands only.
fn stage(v: &mut View<'_>, which: StageRegs, float: bool) -> Result<Option<Stage>, SimError> {
    macro_rules! pick {
        ($bs:ty, $bn:ty, $f:expr) => {
            match which {
                StageRegs::Bs => v.f::<$bs>(concat!("bs_", $f))?,
                StageRegs::Bn => v.f::<$bn>(concat!("bn_", $f))?,
            }
        };
    }
    macro_rules! fail {
        ($bs:ty, $bn:ty, $f:expr, $val:expr, $why:expr) => {
            match which {
                StageRegs::Bs => v.unsupported::<$bs>(concat!("bs_", $f), $val, $why),
                StageRegs::Bn => v.unsupported::<$bn>(concat!("bn_", $f), $val, $why),
            }
        };
    }
    use dpu::{
        BnAluCfg, BnCfg, BnMulCfg, BnReluxCmpValue, BsAluCfg, BsCfg, BsMulCfg, BsReluxCmpValue,
    };
    if pick!(BsCfg, BnCfg, "bypass") == 1 {
        return Ok(None);
    }
    if float {
        return Err(fail!(
            BsCfg,
            BnCfg,
            "bypass",
            0,
            "BS/BN stages are modelled on integer paths only"
        ));
    }
    let alu = if pick!(BsCfg, BnCfg, "alu_bypass") == 1 {
        None
    } else {
        let src = pick!(BsCfg, BnCfg, "alu_src");
        if src != 0 {
            return Err(fail!(
                BsCfg,
                BnCfg,
                "alu_src",
                src,
                "operands read from memory (BRDMA/NRDMA) are not modelled"
            ));
        }
        let algo = pick!(BsCfg, BnCfg, "alu_algo");
        let op = match algo {
            2 => Alu::Add,
            4 => Alu::Minus,
            _ => {
                return Err(fail!(
                    BsCfg,
                    BnCfg,
                    "alu_algo",
                    algo,
                    "the TRM names 2 (add) and 4 (minus) only"
                ));
            }
        };
        let operand = sign_extend(pick!(BsAluCfg, BnAluCfg, "alu_operand"), 32);
        Some((op, operand))
    };
    let mul = if pick!(BsCfg, BnCfg, "mul_bypass") == 1 {
        None
    } else {
        let src = pick!(BsMulCfg, BnMulCfg, "mul_src");
        if src != 0 {
            return Err(fail!(
                BsMulCfg,
                BnMulCfg,
                "mul_src",
                src,
                "operands read from memory are not modelled"
            ));
        }
        let tsrc = pick!(BsMulCfg, BnMulCfg, "truncate_src");
        if tsrc != 0 {
            return Err(fail!(
                BsMulCfg,
                BnMulCfg,
                "truncate_src",
                tsrc,
                "shifts read from memory are not modelled"
            ));
        }
        let operand = sign_extend(pick!(BsMulCfg, BnMulCfg, "mul_operand"), 16);
        let shift = pick!(BsMulCfg, BnMulCfg, "mul_shift_value");
        let shift_neg = match which {
            StageRegs::Bs => v.f::<dpu::DataFormat>("bs_mul_shift_value_neg")?,
            StageRegs::Bn => v.f::<dpu::DataFormat>("bn_mul_shift_value_neg")?,
        };
        let prelu = pick!(BsCfg, BnCfg, "mul_prelu") == 1;
        Some((operand, shift, shift_neg, prelu))
    };
    let relu = pick!(BsCfg, BnCfg, "relu_bypass") == 0;
    let relux = if pick!(BsCfg, BnCfg, "relux_en") == 1 {
        Some(sign_extend(
            pick!(BsReluxCmpValue, BnReluxCmpValue, "relux_cmp_dat"),
            32,
        ))
    } else {
        None
    };
    Ok(Some(Stage {
        alu,
        mul,
        relu,
        relux,
    }))
}

/// The EW stage and its ERDMA operand.
fn ew_stage(v: &mut View<'_>, out: &Cube, proc: DPrec) -> Result<Option<Ew>, SimError> {
    use dpu::EwCfg;
    let float = proc.is_float();
    if v.f::<EwCfg>("ew_bypass")? == 1 {
        return Ok(None);
    }
    v.require::<EwCfg>("ew_lut_bypass", 1, "the LUT is not modelled")?;
    v.require::<EwCfg>("ew_binary_en", 0, "min/max binary mode is not modelled")?;
    v.require::<EwCfg>("ew_equal_en", 0, "min/max equal mode is not modelled")?;
    v.require::<EwCfg>("ew_mul_prelu", 0, "EW PReLU is not modelled")?;
    let op_bypass = v.f::<EwCfg>("ew_op_bypass")? == 1;
    let op = if op_bypass {
        None
    } else if v.f::<EwCfg>("ew_op_type")? == 1 {
        let t = v.f::<dpu::EwCvtScaleValue>("ew_truncate")?;
        let tn = v.f::<dpu::DataFormat>("ew_truncate_neg")?;
        if float && (t != 0 || tn != 0) {
            return Err(v.unsupported::<dpu::EwCvtScaleValue>(
                "ew_truncate",
                t,
                "float multiply has no shift",
            ));
        }
        Some(EwOp::Mul(t, tn))
    } else {
        let algo = v.f::<EwCfg>("ew_alu_algo")?;
        Some(EwOp::Alu(match algo {
            0 => Alu::Max,
            1 => Alu::Min,
            2 => Alu::Add,
            4 => Alu::Minus,
            _ => {
                return Err(v.unsupported::<EwCfg>(
                    "ew_alu_algo",
                    algo,
                    "max, min, add and minus are modelled",
                ));
            }
        }))
    };
    let cvt = if v.f::<EwCfg>("ew_op_cvt_bypass")? == 1 {
        None
    } else {
        let offset = sign_extend(v.f::<dpu::EwCvtOffsetValue>("ew_op_cvt_offset")?, 32);
        let scale = sign_extend(v.f::<dpu::EwCvtScaleValue>("ew_op_cvt_scale")?, 16);
        let shift = v.f::<dpu::EwCvtScaleValue>("ew_op_cvt_shift")?;
        let add_first = v.f::<EwCfg>("ew_cvt_type")? == 1;
        if float && (offset != 0 || scale != 1 || shift != 0) {
            return Err(v.unsupported::<dpu::EwCvtScaleValue>(
                "ew_op_cvt_scale",
                scale as u32,
                "float operand conversion is modelled as the identity only",
            ));
        }
        Some((offset, scale, shift, add_first))
    };
    let src = if v.f::<EwCfg>("ew_op_src")? == 1 {
        EwSrc::Memory(erdma_cube(v, out, float)?)
    } else {
        if float {
            return Err(v.unsupported::<EwCfg>(
                "ew_op_src",
                0,
                "float register operands are not modelled",
            ));
        }
        EwSrc::Register(v.f::<dpu::EwOpValue0>("ew_operand_0")?)
    };
    let relu = v.f::<EwCfg>("ew_relu_bypass")? == 0;
    let relux = if v.f::<EwCfg>("ew_relux_en")? == 1 {
        if float {
            return Err(v.unsupported::<EwCfg>(
                "ew_relux_en",
                1,
                "ReLUX is modelled on integer paths only",
            ));
        }
        Some(sign_extend(
            v.f::<dpu::EwReluxCmpValue>("ew_relux_cmp_dat")?,
            32,
        ))
    } else {
        None
    };
    let dropped =
        matches!(proc, DPrec::Fp16) && matches!(op, Some(EwOp::Alu(Alu::Add))) && cvt.is_none();
    Ok(Some(Ew {
        src,
        cvt,
        op,
        relu,
        relux,
        dropped,
    }))
}

/// The ERDMA operand: one element per output element, in an NC1HWC2 cube.
fn erdma_cube(v: &mut View<'_>, out: &Cube, float: bool) -> Result<Cube, SimError> {
    use dpu_rdma::RdmaErdmaCfg;
    v.require::<RdmaErdmaCfg>("erdma_disable", 0, "the EW operand comes from ERDMA")?;
    v.require::<RdmaErdmaCfg>("erdma_data_mode", 1, "per-pixel operands are modelled")?;
    v.require::<RdmaErdmaCfg>(
        "erdma_surf_mode",
        0,
        "two-surface operands are not modelled",
    )?;
    v.require::<RdmaErdmaCfg>("erdma_nonalign", 0, "non-aligned operands are not modelled")?;
    let size = v.f::<RdmaErdmaCfg>("erdma_data_size")?;
    let edata = v.f::<dpu::EwCfg>("edata_size")?;
    if edata != size {
        return Err(v.inconsistent::<dpu::EwCfg>(
            "edata_size",
            edata,
            format!("DPU_RDMA.ERDMA_CFG says size code {size}"),
        ));
    }
    let mode = v.f::<dpu::EwCfg>("ew_data_mode")?;
    if mode != 1 {
        return Err(v.unsupported::<dpu::EwCfg>(
            "ew_data_mode",
            mode,
            "per-pixel operands (1) are modelled",
        ));
    }
    let prec = match (size, float) {
        (2, false) => DPrec::Int16,
        (3, false) => DPrec::Int32,
        (2, true) => DPrec::Fp16,
        (3, true) => DPrec::Fp32,
        _ => {
            return Err(v.unsupported::<RdmaErdmaCfg>(
                "erdma_data_size",
                size,
                "16- and 32-bit operands are modelled",
            ));
        }
    };
    // The operand cube has the DPU's shape: check DPU_RDMA's size registers agree.
    let w = v.f::<dpu_rdma::RdmaDataCubeWidth>("width")? + 1;
    let h = v.f::<dpu_rdma::RdmaDataCubeHeight>("height")? + 1;
    let c = v.f::<dpu_rdma::RdmaDataCubeChannel>("channel")? + 1;
    if (w, h, c) != (out.w, out.h, out.c) {
        return Err(v.inconsistent::<dpu_rdma::RdmaDataCubeWidth>(
            "width",
            w - 1,
            format!(
                "DPU_RDMA cube {w}x{h}x{c} differs from the DPU cube {}x{}x{}",
                out.w, out.h, out.c
            ),
        ));
    }
    let notch = v.f::<dpu_rdma::RdmaDataCubeHeight>("ew_line_notch_addr")?;
    let base = v.f::<dpu_rdma::RdmaEwBaseAddr>("ew_base_addr")?;
    let surf = v.f::<dpu_rdma::RdmaEwSurfStride>("ew_surf_stride")? as u64 * 16;
    let cube = Cube {
        base,
        w,
        h,
        c,
        prec,
        line: (w as u64 + notch as u64) * 16,
        surf,
        register: dpu_rdma::RdmaEwBaseAddr::NAME,
        block: "DPU_RDMA",
    };
    if c % cube.atom_elems() != 0 {
        return Err(v.unsupported::<RdmaErdmaCfg>(
            "erdma_data_size",
            size,
            "the operand channels must fill whole atoms",
        ));
    }
    Ok(cube)
}
