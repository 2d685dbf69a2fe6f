//! Presets: the DPU and DPU_RDMA values every flying task starts from (main data read
//! from memory by MRDMA, written back by the write DMA, every stage bypassed), so a
//! generator states only what its task changes (`Dpu { bn, ew, ..Dpu::flying(..) }`).

use super::{Dpu, DpuInput, OutCvt, Output, OwCfg, Stage};
use crate::regcmd::DmaAddr;
use crate::task::{DpuRdma, Mrdma, Precision};

/// `RDMA_WEIGHT` of every board-run program: equal arbiter weights for the M, B, N and E
/// reads.
pub const RDMA_ARBITER: [u32; 4] = [1, 1, 1, 1];

/// `FEATURE_MODE_CFG.BURST_LEN` of every board-run flying task.
pub const FLYING_BURST_LEN: u32 = 15;

impl OwCfg {
    /// `OD_BYPASS` set, no output-line groups: every flying task's value.
    pub const BYPASSED: OwCfg = OwCfg {
        od_bypass: true,
        size_e: [0; 3],
        ow_src: 0,
        ow_op: 0,
    };
}

impl Output {
    /// The write DMA storing at `addr` in `precision`, surfaces `surf_stride` atoms apart
    /// (`SURFACE_ADD` the same), `notch` atoms between one line's end and the next.
    pub const fn at(addr: DmaAddr, precision: Precision, surf_stride: u32, notch: u32) -> Output {
        Output {
            addr,
            precision,
            surf_stride,
            notch,
            surface_add: surf_stride,
        }
    }
}

impl Dpu {
    /// A flying DPU task over `cube` (width, height, channels; `ORIG_CHANNEL` the same)
    /// in `precision`, writing `out`: ping-pong, burst 15, BS, BN and EW bypassed,
    /// `OD_BYPASS`, the identity output converter.
    pub const fn flying(cube: (u32, u32, u32), precision: Precision, out: Output) -> Dpu {
        Dpu {
            depthwise: false,
            ping_pong: true,
            input: DpuInput::Flying,
            burst_len: FLYING_BURST_LEN,
            precision,
            cube,
            orig_channels: cube.2,
            bs: Stage::BYPASSED,
            bn: Stage::BYPASSED,
            ew: None,
            ow: OwCfg::BYPASSED,
            out_cvt: OutCvt::IDENTITY,
            out,
        }
    }
}

impl Dpu {
    /// A DPU task fed by the CORE (a convolution's or matmul's sums) over `cube` in
    /// `precision`, writing `out`: ping-pong, burst 15, BS, BN and EW bypassed, the
    /// identity output converter, and `BS_OW_CFG` as the board-validated programs of that
    /// precision set it: `OD_BYPASS` clear for int8 (the CPEND adder adds 0) and set
    /// otherwise, `SIZE_E` `size_e` on all three lanes.
    pub fn core_fed(cube: (u32, u32, u32), precision: Precision, out: Output, size_e: u32) -> Dpu {
        Dpu {
            input: DpuInput::Core,
            ow: OwCfg {
                od_bypass: precision != Precision::Int8,
                size_e: [size_e; 3],
                ow_src: 0,
                ow_op: 0,
            },
            ..Dpu::flying(cube, precision, out)
        }
    }
}

impl DpuRdma {
    /// The read side of [`Dpu::flying`]: MRDMA reads the main data as `mrdma` says, no
    /// operand reads, equal arbiter weights, no fp16 widening.
    pub const fn flying(cube: (u32, u32, u32), precision: Precision, mrdma: Mrdma) -> DpuRdma {
        DpuRdma {
            depthwise: false,
            comb_use: 0,
            ping_pong: true,
            cube,
            precision,
            flying: true,
            burst_len: FLYING_BURST_LEN,
            mrdma: Some(mrdma),
            erdma: None,
            arbiter: RDMA_ARBITER,
            fp16_to_fp32: false,
            brdma: None,
            nrdma: None,
        }
    }
}

impl Mrdma {
    /// MRDMA reading at `addr`, lines `line_notch` atoms apart past their end, surfaces
    /// `surf_notch`.
    pub const fn at(addr: DmaAddr, line_notch: u32, surf_notch: u32) -> Mrdma {
        Mrdma {
            addr,
            line_notch,
            surf_notch,
        }
    }
}
