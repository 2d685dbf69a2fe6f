//! The DPU and DPU_RDMA side of a depthwise convolution: their own `CONV_MODE` fields and
//! the values the board-run fp16 depthwise program writes with them
//! (docs/hardware/convolution.md#depthwise).

use crate::regs::{dpu, dpu_rdma};
use crate::sim::error::{At, SimError, inconsistent, unsupported};
use crate::task::{self, Precision};

/// The DPU's and DPU_RDMA's `CONV_MODE` repeat the CNA's: board-run depthwise programs
/// write 3 in all three (docs/hardware/convolution.md#depthwise), direct ones 0. The
/// DPU's may also stay 0 under a depthwise CNA (the library's own depthwise tasks), but
/// never says depthwise over a direct or absent convolution.
pub(in crate::sim) fn modes_agree(t: &task::Task, dpu: &task::Dpu, at: At) -> Result<(), SimError> {
    let cna_dw = t.cna.as_ref().is_some_and(|c| c.kernel.depthwise);
    if dpu.depthwise && !cna_dw {
        return Err(inconsistent(
            at,
            dpu::FeatureModeCfg::CONV_MODE,
            3,
            "depthwise, but the CNA runs no depthwise convolution",
        ));
    }
    if let Some(r) = &t.dpu_rdma
        && r.depthwise != dpu.depthwise
    {
        return Err(inconsistent(
            at,
            dpu_rdma::RdmaFeatureModeCfg::CONV_MODE,
            if r.depthwise { 3 } else { 0 },
            format!(
                "differs from {} {}",
                dpu::FeatureModeCfg::CONV_MODE,
                if dpu.depthwise { 3 } else { 0 }
            ),
        ));
    }
    Ok(())
}

/// SIZE_E and SURFACE_ADD of a task whose DPU runs in depthwise mode: the board-run fp16
/// depthwise program (`gregordinary/rocket-userspace` `gen_conv2d_fill`,
/// docs/hardware/convolution.md#depthwise) writes SIZE_E 3 and SURFACE_ADD 4 ×
/// DST_SURF_STRIDE, twice the direct ratio as Mesa doubles it for depthwise. No other
/// precision is shown with the DPU in depthwise mode.
pub(in crate::sim) fn layout(d: &task::Dpu, at: At) -> Result<(), SimError> {
    let (input, out) = (d.precision, d.out.precision);
    if (input, out) != (Precision::Fp16, Precision::Fp16) {
        return Err(unsupported(
            at,
            dpu::FeatureModeCfg::CONV_MODE,
            3,
            format!("no board-run program runs the DPU in depthwise mode from {input} to {out}"),
        ));
    }
    if d.ow.size_e[0] != 3 {
        return Err(unsupported(
            at,
            dpu::BsOwCfg::SIZE_E_0,
            d.ow.size_e[0],
            "the board-run fp16 depthwise program writes 3",
        ));
    }
    super::surface_add(d, 4, at, || {
        "the board-run fp16 depthwise program writes".to_string()
    })
}
