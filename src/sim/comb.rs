//! `COMB_USE` 5: a CORE-fed element-wise task whose operand MRDMA and ERDMA read between
//! them (docs/hardware/dpu-ops.md#conv-fed-ew). Only the geometry of the board-run programs
//! runs: the operand is one NC1HWC2 cube of the DPU's size at `RDMA_SRC_BASE_ADDR`, MRDMA
//! reads its even surfaces and ERDMA, starting one surface later, its odd ones, each
//! stepping over the other's surface (`SURF_NOTCH` = `EW_SURF_NOTCH` = `EW_SURF_STRIDE` =
//! one surface of `W·H` atoms). The two reads together are the whole cube, which is what
//! the EW stage gets.

use super::error::{At, SimError, inconsistent, unsupported};
use super::exec::{Cube, addr, rdma_src_cube, same_cube, whole_atoms};
use crate::regs::{Register, dpu, dpu_rdma};
use crate::task::{self, DpuInput, Precision};

/// The EW operand of a task with `COMB_USE` 5, after checking that its registers are the
/// board-run programs' geometry.
pub(super) fn shared_operand(
    t: &task::Task,
    e: &task::Ew,
    rdma: &task::DpuRdma,
    er: &task::Erdma,
    float: bool,
    out: &Cube,
    at: At,
) -> Result<Cube, SimError> {
    use dpu_rdma::RdmaFeatureModeCfg as Mode;
    let comb = task::COMB_SHARED_OPERAND;
    let prec = precision(e, er, float, at)?;
    if t.dpu.as_ref().is_some_and(|d| d.input == DpuInput::Flying) {
        return Err(unsupported(
            at,
            Mode::COMB_USE,
            comb,
            "MRDMA sharing the EW operand leaves no engine for a flying task's main data (board-run programs feed the DPU from the CORE)",
        ));
    }
    let Some(m) = &rdma.mrdma else {
        return Err(inconsistent(
            at,
            Mode::MRDMA_DISABLE,
            1,
            format!(
                "{} {comb} reads half the EW operand through MRDMA",
                Mode::COMB_USE
            ),
        ));
    };
    if rdma.fp16_to_fp32 {
        return Err(unsupported(
            at,
            Mode::MRDMA_FP16TOFP32_EN,
            1,
            "the board-run programs read the shared operand without MRDMA's widening (0)",
        ));
    }
    if er.data_mode != task::EW_PER_PIXEL {
        return Err(unsupported(
            at,
            dpu_rdma::RdmaErdmaCfg::ERDMA_DATA_MODE,
            er.data_mode,
            "the board-run programs share a per-pixel operand (1)",
        ));
    }
    same_cube(rdma.cube, out, at)?;
    let (w, h, c) = rdma.cube;
    if m.line_notch != 0 || er.line_notch != 0 {
        return Err(unsupported(
            at,
            dpu_rdma::RdmaSrcDmaCfg::LINE_NOTCH_ADDR,
            m.line_notch,
            "the board-run programs read whole lines (line notches 0)",
        ));
    }
    notches(m, er, w * h, at)?;
    let line = u64::from(w) * 16;
    let surf = line * u64::from(h);
    let base = addr(m.addr);
    if u64::from(addr(er.addr)) != u64::from(base) + surf {
        return Err(inconsistent(
            at,
            dpu_rdma::RdmaEwBaseAddr::EW_BASE_ADDR,
            addr(er.addr),
            format!(
                "ERDMA reads the odd surfaces: one surface ({surf} bytes) after {} {base:#x}",
                dpu_rdma::RdmaSrcBaseAddr::NAME
            ),
        ));
    }
    whole_atoms(
        rdma_src_cube(base, (w, h, c), prec, (line, surf)),
        dpu::DataCubeChannel::CHANNEL,
        "the operand channels must fill whole atoms",
        at,
    )
}

/// The shared operand's element precision: `EW_CFG` repeats ERDMA's size and mode, and
/// the size is one the model runs.
fn precision(e: &task::Ew, er: &task::Erdma, float: bool, at: At) -> Result<Precision, SimError> {
    use dpu_rdma::RdmaErdmaCfg;
    if e.data_size != er.data_size || e.data_mode != er.data_mode {
        return Err(inconsistent(
            at,
            dpu::EwCfg::EDATA_SIZE,
            e.data_size,
            format!(
                "{} and {} must repeat {} and {}",
                dpu::EwCfg::EDATA_SIZE,
                dpu::EwCfg::EW_DATA_MODE,
                RdmaErdmaCfg::ERDMA_DATA_SIZE,
                RdmaErdmaCfg::ERDMA_DATA_MODE
            ),
        ));
    }
    er.precision(float).ok_or_else(|| {
        unsupported(
            at,
            RdmaErdmaCfg::ERDMA_DATA_SIZE,
            er.data_size,
            "16- and 32-bit shared operands are modelled",
        )
    })
}

/// The notches and the ERDMA surface stride of a shared operand of `surface`-atom
/// surfaces: each engine steps over the other's surface.
fn notches(m: &task::Mrdma, er: &task::Erdma, surface: u32, at: At) -> Result<(), SimError> {
    use dpu_rdma::{RdmaFeatureModeCfg as Mode, RdmaSurfNotch};
    let comb = task::COMB_SHARED_OPERAND;
    // rocket-userspace writes max(W·H, 12) in the three fields; below 12 atoms the
    // floor's effect on the step is not explained, so only W·H ≥ 12 runs.
    if surface < 12 {
        return Err(unsupported(
            at,
            RdmaSurfNotch::SURF_NOTCH_ADDR,
            m.surf_notch,
            format!(
                "a shared operand of {surface}-atom surfaces: the board-run programs floor the notches at 12 atoms, whose effect below 12 is not known"
            ),
        ));
    }
    let why = || {
        format!(
            "with {} {comb} the board-run programs step each engine over the other's surface: {}, {} and {} all {surface} (one surface of W x H atoms)",
            Mode::COMB_USE,
            RdmaSurfNotch::SURF_NOTCH_ADDR,
            dpu_rdma::RdmaEwSurfNotch::EW_SURF_NOTCH,
            dpu_rdma::RdmaEwSurfStride::EW_SURF_STRIDE,
        )
    };
    if m.surf_notch != surface {
        return Err(unsupported(
            at,
            RdmaSurfNotch::SURF_NOTCH_ADDR,
            m.surf_notch,
            why(),
        ));
    }
    if er.surf_notch != surface {
        let f = dpu_rdma::RdmaEwSurfNotch::EW_SURF_NOTCH;
        return Err(unsupported(at, f, er.surf_notch, why()));
    }
    if er.surf_stride != surface {
        let f = dpu_rdma::RdmaEwSurfStride::EW_SURF_STRIDE;
        return Err(unsupported(at, f, er.surf_stride, why()));
    }
    Ok(())
}
