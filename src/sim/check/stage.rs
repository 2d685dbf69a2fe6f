//! The BS and BN stages: their register operands, the per-channel operands read from
//! memory, and the float pipelines' stages.

use super::Allowed::{Is, OneOf, When};
use super::Why::Text;
use super::{Envelope, FieldRef, check};
use crate::regs::Block;
use crate::regs::{Register, dpu, dpu_rdma};
use crate::sim::error::{At, SimError};
use crate::sim::exec::addr;
use crate::sim::exec::{Cube, Stage};
use crate::task::{self, DpuInput, Precision};

/// The fields of the same meaning in the BS and the BN stage.
struct Fields {
    alu_src: FieldRef,
    alu_algo: FieldRef,
    mul_src: FieldRef,
    shift: FieldRef,
    shift_neg: FieldRef,
    prelu: FieldRef,
    relux: FieldRef,
    truncate_src: FieldRef,
    /// DPU_RDMA's `BRDMA_DATA_USE` / `NRDMA_DATA_USE`.
    data_use: FieldRef,
    /// The register of the operand read's base address.
    base: &'static str,
    /// The DPU_RDMA engine that reads the stage's operands.
    engine: &'static str,
    /// The BN stage (the BS stage otherwise).
    bn: bool,
}

/// The BS stage's fields.
const BS: Fields = {
    use dpu::{BsCfg, BsMulCfg, DataFormat};
    Fields {
        alu_src: FieldRef::of(BsCfg::BS_ALU_SRC),
        alu_algo: FieldRef::of(BsCfg::BS_ALU_ALGO),
        mul_src: FieldRef::of(BsMulCfg::BS_MUL_SRC),
        shift: FieldRef::of(BsMulCfg::BS_MUL_SHIFT_VALUE),
        shift_neg: FieldRef::of(DataFormat::BS_MUL_SHIFT_VALUE_NEG),
        prelu: FieldRef::of(BsCfg::BS_MUL_PRELU),
        relux: FieldRef::of(BsCfg::BS_RELUX_EN),
        truncate_src: FieldRef::of(BsMulCfg::BS_TRUNCATE_SRC),
        data_use: FieldRef::of(dpu_rdma::RdmaBrdmaCfg::BRDMA_DATA_USE),
        base: dpu_rdma::RdmaBsBaseAddr::NAME,
        engine: "BRDMA",
        bn: false,
    }
};

/// The BN stage's fields.
const BN: Fields = {
    use dpu::{BnCfg, BnMulCfg, DataFormat};
    Fields {
        alu_src: FieldRef::of(BnCfg::BN_ALU_SRC),
        alu_algo: FieldRef::of(BnCfg::BN_ALU_ALGO),
        mul_src: FieldRef::of(BnMulCfg::BN_MUL_SRC),
        shift: FieldRef::of(BnMulCfg::BN_MUL_SHIFT_VALUE),
        shift_neg: FieldRef::of(DataFormat::BN_MUL_SHIFT_VALUE_NEG),
        prelu: FieldRef::of(BnCfg::BN_MUL_PRELU),
        relux: FieldRef::of(BnCfg::BN_RELUX_EN),
        truncate_src: FieldRef::of(BnMulCfg::BN_TRUNCATE_SRC),
        data_use: FieldRef::of(dpu_rdma::RdmaNrdmaCfg::NRDMA_DATA_USE),
        base: dpu_rdma::RdmaBnBaseAddr::NAME,
        engine: "NRDMA",
        bn: true,
    }
};

/// A stage's ALU operation (`alu_algo`): add or minus, the ones the TRM names.
const fn alu_ops(alu_algo: FieldRef) -> Envelope<task::Stage> {
    Envelope::on(
        alu_algo,
        |s| s.alu.map(|a| a.op.code()),
        OneOf(&[2, 4]),
        Text("the TRM names 2 (add) and 4 (minus) only"),
    )
}

/// An integer stage's envelope: add or minus, no shifts read from memory (no program
/// reads them: their layout is unknown).
const fn integer(f: Fields) -> [Envelope<task::Stage>; 2] {
    [
        alu_ops(f.alu_algo),
        Envelope::on(
            f.truncate_src,
            |s| s.mul.map(|m| m.shift_from_memory.into()),
            Is(0),
            Text("shifts read from memory have no known memory layout"),
        ),
    ]
}

/// A float stage's envelope: register operands only, add or minus, no shifts, PReLU or
/// ReLUX.
const fn float(f: Fields) -> [Envelope<task::Stage>; 7] {
    const MEMORY: &str =
        "operands read from memory (BRDMA/NRDMA) are not modelled in float pipelines";
    const NO_SHIFT: &str = "float multiply has no shift";
    [
        Envelope::on(
            f.alu_src,
            |s| s.alu.map(|a| a.from_memory.into()),
            Is(0),
            Text(MEMORY),
        ),
        alu_ops(f.alu_algo),
        Envelope::on(
            f.mul_src,
            |s| s.mul.map(|m| m.from_memory.into()),
            Is(0),
            Text(MEMORY),
        ),
        Envelope::on(
            f.shift,
            |s| s.mul.map(|m| m.shift),
            When(|s| s.mul.is_some_and(|m| !m.shift_from_memory && m.shift == 0)),
            Text(NO_SHIFT),
        ),
        Envelope::on(
            f.shift_neg,
            |s| s.mul.map(|m| m.shift_neg),
            Is(0),
            Text(NO_SHIFT),
        ),
        Envelope::on(
            f.prelu,
            |s| s.mul.map(|m| m.prelu.into()),
            Is(0),
            Text("PReLU is not modelled in float pipelines"),
        ),
        Envelope::on(
            f.relux,
            |s| Some(s.relux.is_some().into()),
            Is(0),
            Text("the ReLUX operand's format in float pipelines is not known"),
        ),
    ]
}

const INTEGER_BS: [Envelope<task::Stage>; 2] = integer(BS);
const INTEGER_BN: [Envelope<task::Stage>; 2] = integer(BN);
const FLOAT_BS: [Envelope<task::Stage>; 7] = float(BS);
const FLOAT_BN: [Envelope<task::Stage>; 7] = float(BN);

/// The BS or BN stage, register operands only; in a float pipeline the multiplier's
/// operand is fp16 and the ALU's fp32 bits, the multiplier before the ALU (the order the
/// LUT's index scale and bias were measured in, docs/hardware/lut.md#index).
pub(super) fn stage(
    s: &task::Stage,
    float: bool,
    at: At,
    bn: bool,
) -> Result<Option<Stage>, SimError> {
    if s.bypass {
        return Ok(None);
    }
    let table: &[Envelope<task::Stage>] = match (float, bn) {
        (false, false) => &INTEGER_BS,
        (false, true) => &INTEGER_BN,
        (true, false) => &FLOAT_BS,
        (true, true) => &FLOAT_BN,
    };
    check(at, s, table)?;
    // A per-channel operand from memory is attached by `stage_operands`.
    Ok(Some(if float {
        Stage {
            alu: s.alu.map(|a| (a.op, i64::from(a.operand as u32))),
            mul: s.mul.map(|m| (i64::from(m.fp16_bits()), 0, 0, false)),
            relu: s.relu,
            relux: None,
            alu_mem: None,
            mul_mem: None,
        }
    } else {
        Stage {
            alu: s.alu.map(|a| (a.op, i64::from(a.operand))),
            mul: s
                .mul
                .map(|m| (i64::from(m.operand), m.shift, m.shift_neg, m.prelu)),
            relu: s.relu,
            relux: s.relux.map(i64::from),
            alu_mem: None,
            mul_mem: None,
        }
    }))
}

/// The per-channel operands of the integer BS and BN stages read from memory (BRDMA,
/// NRDMA): checks that `BRDMA_DATA_USE` / `NRDMA_DATA_USE` name exactly the operands the
/// stages take from memory and attaches their 1 × 1 × C cubes. The board-validated case is
/// Mesa's int8 convolution bias (BS_CFG 0x20150, BRDMA_CFG 0x2: one int32 per output
/// channel, bminor/mesa-mesa `src/gallium/drivers/rocket/rkt_regcmd.c`, `rkt_coefs.c`);
/// the same bias on a flying task, the BN read and the 16-bit multiplier per channel are
/// derived (docs/hardware/dpu-ops.md#per-channel-operands) and raise `unvalidated`.
pub(super) fn stage_operands(
    t: &task::Task,
    d: &task::Dpu,
    bs: &mut Option<Stage>,
    bn: &mut Option<Stage>,
    at: At,
    unvalidated: &mut Vec<String>,
) -> Result<(), SimError> {
    let rdma = t.dpu_rdma.as_ref();
    operand_read(
        d,
        rdma,
        &d.bs,
        &BS,
        bs.as_mut(),
        rdma.and_then(|r| r.brdma),
        at,
        unvalidated,
    )?;
    operand_read(
        d,
        rdma,
        &d.bn,
        &BN,
        bn.as_mut(),
        rdma.and_then(|r| r.nrdma),
        at,
        unvalidated,
    )
}

/// [`stage_operands`] for one stage: `src` as decoded, `f` its fields, `st` the checked
/// stage, `read` its DPU_RDMA operand read.
#[allow(clippy::too_many_arguments)]
fn operand_read(
    d: &task::Dpu,
    rdma: Option<&task::DpuRdma>,
    src: &task::Stage,
    f: &Fields,
    st: Option<&mut Stage>,
    read: Option<task::OperandRead>,
    at: At,
    unvalidated: &mut Vec<String>,
) -> Result<(), SimError> {
    use task::OperandRead as O;
    let alu_mem = !src.bypass && src.alu.is_some_and(|a| a.from_memory);
    let mul_mem = !src.bypass && src.mul.is_some_and(|m| m.from_memory);
    let want = if alu_mem { O::ALU } else { 0 } | if mul_mem { O::MUL } else { 0 };
    let have = read.map_or(0, |r| r.data_use);
    if want == 0 && have == 0 {
        return Ok(());
    }
    if rdma.is_none() {
        return Err(f.alu_src.unsupported(
            at,
            1,
            format!(
                "the operand comes through {}, which the task does not start",
                f.engine
            ),
        ));
    }
    if have != want {
        return Err(f.data_use.unsupported(
            at,
            have,
            format!(
                "the stage takes {want:#x} from memory (1 ALU, 4 multiplier); other uses and mixtures have no known memory layout"
            ),
        ));
    }
    if d.precision.is_float() {
        return Err(f.data_use.unsupported(
            at,
            have,
            "per-channel operands from memory are modelled on integer paths only",
        ));
    }
    let (Some(st), Some(read)) = (st, read) else {
        // A bypassed stage with a memory read configured.
        return Err(f.data_use.unsupported(at, have, "the stage is bypassed"));
    };
    let base = addr(read.addr);
    if !base.is_multiple_of(16) {
        return Err(f.data_use.unsupported(
            at,
            have,
            format!("the operand address {base:#x} is not 16-byte aligned"),
        ));
    }
    let prec = if alu_mem {
        Precision::Int32
    } else {
        Precision::Int16
    };
    let per_atom = 16 / prec.bytes();
    let cube = Cube {
        base,
        w: 1,
        h: 1,
        c: d.cube.2.div_ceil(per_atom) * per_atom,
        prec,
        line: 16,
        surf: 16,
        register: f.base,
        block: Block::DpuRdma,
    };
    let validated = !f.bn && alu_mem && d.input == DpuInput::Core && d.precision == Precision::Int8;
    if !validated {
        let (field, what) = if alu_mem {
            (f.alu_src, "a 32-bit ALU operand")
        } else {
            (f.mul_src, "a 16-bit multiplier")
        };
        unvalidated.push(format!(
            "{field}: {what} per channel from memory on a {} {} task is derived from Mesa's int8 convolution bias (docs/hardware/dpu-ops.md#per-channel-operands)",
            d.precision,
            if d.input == DpuInput::Flying { "flying" } else { "convolution" },
        ));
    }
    if alu_mem {
        st.alu_mem = Some(cube);
    } else {
        st.mul_mem = Some(cube);
    }
    Ok(())
}

/// What a float BS or BN stage does that no board-run program does, as `unvalidated`
/// messages: the runs are the vendor's fp16 scalar add (BS ALU add, BS_CFG 0x20050) and
/// multiply (BS MUL, BS_CFG 0x42) and the LUT programs' BN multiply-then-add (BN_CFG
/// 0x20040).
pub(super) fn float_stage_notes(s: &task::Stage, proc: Precision, bn: bool, out: &mut Vec<String>) {
    use dpu::{BnCfg, BsCfg};
    if s.bypass {
        return;
    }
    let name = if bn { BnCfg::NAME } else { BsCfg::NAME };
    let shape = (s.alu.map(|a| a.op), s.mul.is_some(), bn);
    let run = matches!(
        shape,
        (Some(task::AluOp::Add), false, false)
            | (None, true, false)
            | (Some(task::AluOp::Add), true, true)
    );
    // The fp32 LUT program of rknpu2_matmul_open runs the same BN multiply-then-add.
    let fp32_bn = proc == Precision::Fp32 && bn && s.alu.is_some() && s.mul.is_some();
    if !run || s.relu || !(proc == Precision::Fp16 || fp32_bn) {
        out.push(format!(
            "{proc} {name}: ALU {:?}, multiplier {}, ReLU {}: the float stages that ran are the fp16 BS add, the fp16 BS multiply and the fp16 BN multiply-then-add; the model multiplies first, then adds, then clamps",
            s.alu.map(|a| a.op),
            if s.mul.is_some() { "on" } else { "off" },
            if s.relu { "on" } else { "off" },
        ));
    }
}
