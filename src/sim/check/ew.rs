//! The EW stage and its ERDMA operand.

use crate::regs::Block;
use crate::regs::{Register, dpu, dpu_rdma};
use crate::sim::error::{At, SimError};
use crate::sim::error::{at_most, inconsistent, unsupported};
use crate::sim::exec::{Cube, Ew, EwOp, EwSrc};
use crate::sim::exec::{addr, same_cube, unfetched};
use crate::task::{self, DpuInput, EwSrc as TEwSrc, Precision};

/// The EW stage and its ERDMA operand.
pub(super) fn ew_stage(
    t: &task::Task,
    e: &task::Ew,
    out: &Cube,
    proc: Precision,
    at: At,
    unvalidated: &mut Vec<String>,
) -> Result<Ew, SimError> {
    use dpu::{EwCfg, EwCvtScaleValue};
    let float = proc.is_float();
    // Flying only: the conv-fed EW add of a matmul's int32 operand is the fused matmul's
    // (docs/hardware/matmul-programs.md), not this derivation.
    let flying = t.dpu.as_ref().is_some_and(|d| d.input == DpuInput::Flying);
    if flying && matches!(proc, Precision::Int8 | Precision::Int16) && e.op.is_some() {
        unvalidated.push(format!(
            "{}: {proc} EW arithmetic has no board-recorded program; it is derived from the integer EW path (docs/hardware/dpu-ops.md#integer-ew)",
            EwCfg::EW_OP_TYPE
        ));
    }
    let op = match e.op {
        None => None,
        Some(task::EwOp::Mul(t, tn)) => {
            if float && (t != 0 || tn != 0) {
                return Err(unsupported(
                    at,
                    EwCvtScaleValue::EW_TRUNCATE,
                    t,
                    "float multiply has no shift",
                ));
            }
            Some(EwOp::Mul(t, tn))
        }
        Some(task::EwOp::Alu(a)) => Some(EwOp::Alu(a)),
    };
    let cvt = match e.cvt {
        None => None,
        Some(c) => {
            if float && (c.offset != 0 || c.scale != 1 || c.shift != 0) {
                return Err(unsupported(
                    at,
                    EwCvtScaleValue::EW_OP_CVT_SCALE,
                    c.scale as u16 as u32,
                    "float operand conversion is modelled as the identity only",
                ));
            }
            Some((
                i64::from(c.offset),
                i64::from(c.scale),
                c.shift,
                c.add_first,
            ))
        }
    };
    if let Some(r) = &t.dpu_rdma
        && r.flying
        && proc != Precision::Fp32
        && (r.mrdma.is_some_and(|m| m.line_notch != 0)
            || r.erdma.is_some_and(|e| e.line_notch != 0))
    {
        unvalidated.push(format!(
            "{}: a flying EW task over part of a wider cube (non-zero line notches) is derived; the board-recorded tasks write 0 (docs/hardware/dpu-ops.md#limits)",
            dpu_rdma::RdmaSrcDmaCfg::LINE_NOTCH_ADDR
        ));
    }
    let mut per_channel = false;
    let src = match e.src {
        TEwSrc::Memory => {
            let cube = erdma_cube(t, e, out, float, at)?;
            per_channel = e.data_mode == task::EW_PER_CHANNEL;
            if per_channel && out.w * out.h > 1 {
                unvalidated.push(format!(
                    "{} 0: a per-channel operand broadcast over {} pixels is derived from the vendor's one-pixel tasks (docs/hardware/dpu-ops.md#per-channel-operand)",
                    dpu_rdma::RdmaErdmaCfg::ERDMA_DATA_MODE,
                    out.w * out.h
                ));
            }
            EwSrc::Memory(cube)
        }
        TEwSrc::Register => {
            if float {
                return Err(unsupported(
                    at,
                    EwCfg::EW_OP_SRC,
                    0,
                    "float register operands are not modelled",
                ));
            }
            EwSrc::Register(e.values[0])
        }
    };
    if e.relux.is_some() && float {
        return Err(unsupported(
            at,
            EwCfg::EW_RELUX_EN,
            1,
            "ReLUX is modelled on integer paths only",
        ));
    }
    let dropped =
        proc == Precision::Fp16 && matches!(op, Some(EwOp::Alu(task::AluOp::Add))) && cvt.is_none();
    Ok(Ew {
        src,
        cvt,
        op,
        relu: e.relu,
        relux: e.relux.map(i64::from),
        dropped,
        // Checked by `fp32_dequant`: the multiply with a 32-bit ERDMA operand.
        f16_low_half: proc == Precision::Fp32,
        per_channel,
    })
}

/// The ERDMA operand: one element per output element, in an NC1HWC2 cube.
fn erdma_cube(
    t: &task::Task,
    e: &task::Ew,
    out: &Cube,
    float: bool,
    at: At,
) -> Result<Cube, SimError> {
    use dpu_rdma::RdmaErdmaCfg;
    let Some(rdma) = &t.dpu_rdma else {
        // The DPU waits for an operand nobody fetches: the task stalls (pc.rs) before
        // this cube is read.
        let prec = if float {
            Precision::Fp32
        } else {
            Precision::Int32
        };
        return Ok(unfetched(
            out.w,
            out.h,
            out.c,
            prec,
            dpu_rdma::RdmaEwBaseAddr::NAME,
        ));
    };
    let Some(er) = &rdma.erdma else {
        return Err(unsupported(
            at,
            RdmaErdmaCfg::ERDMA_DISABLE,
            1,
            "the EW operand comes from ERDMA (the model needs 0)",
        ));
    };
    if rdma.comb_use == task::COMB_SHARED_OPERAND {
        return crate::sim::comb::shared_operand(t, e, rdma, er, float, out, at);
    }
    erdma_own(e, rdma, er, out, float, at)
}

/// The ERDMA operand of a task that reads it by itself (not shared through COMB).
fn erdma_own(
    e: &task::Ew,
    rdma: &task::DpuRdma,
    er: &task::Erdma,
    out: &Cube,
    float: bool,
    at: At,
) -> Result<Cube, SimError> {
    use dpu_rdma::RdmaErdmaCfg;
    let mode = (RdmaErdmaCfg::ERDMA_DATA_MODE, er.data_mode);
    at_most(
        at,
        mode,
        1,
        "per-channel (0) and per-pixel (1) operands are modelled",
    )?;
    if e.data_size != er.data_size {
        return Err(inconsistent(
            at,
            dpu::EwCfg::EDATA_SIZE,
            e.data_size,
            format!(
                "{:?} says size code {}",
                RdmaErdmaCfg::ERDMA_DATA_SIZE,
                er.data_size
            ),
        ));
    }
    if e.data_mode != er.data_mode {
        return Err(inconsistent(
            at,
            dpu::EwCfg::EW_DATA_MODE,
            e.data_mode,
            format!("{} says {}", RdmaErdmaCfg::ERDMA_DATA_MODE, er.data_mode),
        ));
    }
    let per_channel = er.data_mode == task::EW_PER_CHANNEL;
    if per_channel && er.surf_stride != 1 {
        return Err(unsupported(
            at,
            dpu_rdma::RdmaEwSurfStride::EW_SURF_STRIDE,
            er.surf_stride,
            "a per-channel operand is one atom per surface (the TRM and the vendor write 1, 16 bytes)",
        ));
    }
    let prec = er.precision(float).ok_or_else(|| {
        unsupported(
            at,
            RdmaErdmaCfg::ERDMA_DATA_SIZE,
            er.data_size,
            if float {
                "16- and 32-bit operands are modelled"
            } else {
                "8-, 16- and 32-bit operands are modelled"
            },
        )
    })?;
    same_cube(rdma.cube, out, at)?;
    let (w, h, c) = rdma.cube;
    let (line, surf) = rdma.erdma_strides(er);
    if er.surf_notch != 0 {
        let by_notch = line * u64::from(h) + u64::from(er.surf_notch) * 16;
        if per_channel || by_notch != surf {
            return Err(inconsistent(
                at,
                dpu_rdma::RdmaEwSurfNotch::EW_SURF_NOTCH,
                er.surf_notch,
                format!(
                    "gives {by_notch}-byte surfaces, {} gives {surf}",
                    dpu_rdma::RdmaEwSurfStride::EW_SURF_STRIDE
                ),
            ));
        }
    }
    let (w, h, line) = if per_channel {
        (1, 1, 16)
    } else {
        (w, h, line)
    };
    let cube = Cube {
        base: addr(er.addr),
        w,
        h,
        c,
        prec,
        line,
        surf,
        register: dpu_rdma::RdmaEwBaseAddr::NAME,
        block: Block::DpuRdma,
    };
    if c % cube.atom_elems() != 0 {
        return Err(unsupported(
            at,
            RdmaErdmaCfg::ERDMA_DATA_SIZE,
            er.data_size,
            "the operand channels must fill whole atoms",
        ));
    }
    Ok(cube)
}
