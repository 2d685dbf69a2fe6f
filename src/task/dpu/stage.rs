//! The BS and BN stages: ALU → multiplier → ReLU / ReLUX, with register operands.

use super::{bit, set};
use crate::error::Result;
use crate::regcmd::TaskBuilder;
use crate::regs::{Field, Register, dpu};
use crate::task::read::{DecodeError as E, Decoded, Reader};

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
    /// The register operand: a signed integer in integer pipelines, fp16 bits in float
    /// pipelines ([`Mul::fp16`]).
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

impl Mul {
    /// The multiplier of a float pipeline: the 16-bit register operand holds fp16 bits
    /// (no shifts, register operand). The public fp32 dequantisation program writes
    /// `BS_MUL_CFG` = fp16(scale) << 16 this way (happyme531/rknpu2_matmul_open,
    /// `middle_body` in `src/rk_npu_moe_regs.h`).
    pub const fn fp16(bits: u16) -> Mul {
        Mul {
            operand: bits as i16,
            shift: 0,
            shift_neg: 0,
            prelu: false,
            from_memory: false,
            shift_from_memory: false,
        }
    }

    /// The operand's 16 bits, which a float pipeline reads as fp16.
    pub const fn fp16_bits(&self) -> u16 {
        self.operand as u16
    }
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

/// Writes the stage's CFG, ALU, MUL and RELUX registers.
pub(super) fn emit(t: &mut TaskBuilder, s: &Stage, regs: StageRegs) -> Result<()> {
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

/// The registers of the BS or BN stage.
#[derive(Clone, Copy)]
pub(super) struct StageRegs {
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
    pub(super) const BS: StageRegs = StageRegs {
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
    pub(super) const BN: StageRegs = StageRegs {
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
pub(super) fn decode(r: &mut Reader<'_>, regs: StageRegs) -> Decoded<Stage> {
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
