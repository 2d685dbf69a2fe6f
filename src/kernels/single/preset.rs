//! Values the task generators of `kernels::single` and `kernels::ops` share beyond the
//! task model's flying presets: a DPU_RDMA that is started but reads nothing yet.

use crate::regcmd::DmaAddr;
use crate::task::{DpuRdma, Mrdma, Precision};

/// DPU_RDMA over `cube` in `precision`, not flying, `burst_len`, with no read enabled:
/// otherwise [`DpuRdma::flying`] (ping-pong, equal arbiter weights, no fp16 widening). A
/// generator turns on the reads its task needs
/// (`DpuRdma { erdma: Some(..), ..reads_off(..) }`).
pub(crate) const fn reads_off(
    cube: (u32, u32, u32),
    precision: Precision,
    burst_len: u32,
) -> DpuRdma {
    let unused = Mrdma::at(DmaAddr::Fixed(0), 0, 0);
    DpuRdma {
        flying: false,
        burst_len,
        mrdma: None,
        ..DpuRdma::flying(cube, precision, unused)
    }
}
