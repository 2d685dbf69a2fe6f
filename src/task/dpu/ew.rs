//! The element-wise (EW) stage: an operation with a register or ERDMA operand, the
//! operand converter, ReLU / ReLUX.

use super::bit;
use super::lut::{self, Lut};
use super::stage::AluOp;
use crate::error::Result;
use crate::regcmd::TaskBuilder;
use crate::regs::dpu;
use crate::task::read::{DecodeError as E, Decoded, Reader};

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

impl OpCvt {
    /// The converter as the identity (offset 0, scale 1, shift 0): what the board-run ALU
    /// operations keep on where a bypassed converter drops the operand, and the values the
    /// registers hold while it is bypassed.
    pub const IDENTITY: OpCvt = OpCvt {
        offset: 0,
        scale: 1,
        shift: 0,
        add_first: false,
    };
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
    /// The LUT (`EW_LUT_BYPASS` clear), `None` when bypassed.
    pub lut: Option<Lut>,
}

impl Ew {
    /// The EW stage applying `op` with an operand read from memory (the ERDMA), one
    /// per element (`EW_DATA_MODE` 1) of `data_size` (2: 16-bit, 3: 32-bit), the
    /// operand converter bypassed, no ReLU, no LUT: what the element-wise operations,
    /// the split-K add and the dequantisation start from.
    pub fn from_memory(op: EwOp, data_size: u32) -> Ew {
        Ew {
            op: Some(op),
            src: EwSrc::Memory,
            cvt: None,
            relu: false,
            relux: None,
            data_size,
            data_mode: 1,
            values: [0; 8],
            lut: None,
        }
    }
}

/// Writes EW_CFG and the operand-converter and ReLUX registers.
pub(super) fn emit(t: &mut TaskBuilder, e: Option<Ew>) -> Result<()> {
    use dpu::*;
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
        (EwCfg::EW_LUT_BYPASS, bit(e.is_none_or(|e| e.lut.is_none()))),
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
    let cvt_or_identity = cvt.unwrap_or(OpCvt::IDENTITY);
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

/// Reads the EW stage.
pub(super) fn decode(r: &mut Reader<'_>) -> Decoded<Option<Ew>> {
    use dpu::*;
    if r.flag(EwCfg::EW_BYPASS) {
        // A bypassed stage's units, operands and LUT are inert (docs/simulator.md,
        // "Inert fields"): the data passes through whatever they hold.
        r.inert_register::<EwCfg>();
        r.inert_register::<EwCvtOffsetValue>();
        r.inert_register::<EwCvtScaleValue>();
        r.inert_register::<EwReluxCmpValue>();
        r.inert(&[DataFormat::EW_TRUNCATE_NEG]);
        r.inert_register::<EwOpValue0>();
        r.inert_register::<EwOpValue1>();
        r.inert_register::<EwOpValue2>();
        r.inert_register::<EwOpValue3>();
        r.inert_register::<EwOpValue4>();
        r.inert_register::<EwOpValue5>();
        r.inert_register::<EwOpValue6>();
        r.inert_register::<EwOpValue7>();
        lut::inert(r);
        return Ok(None);
    }
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
    let lut = if r.flag(EwCfg::EW_LUT_BYPASS) {
        None
    } else {
        Some(lut::decode(r)?)
    };
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
        lut,
    };
    Ok(Some(ew))
}
