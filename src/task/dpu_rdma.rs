//! DPU_RDMA: the DPU's read DMA — MRDMA (the main data in flying mode), BRDMA and NRDMA
//! (the per-channel operands of the BS and BN stages) and ERDMA (the EW operand).

use super::dpu::cube_extent;
use super::pointer;
use super::read::{DecodeError as E, Decoded, Reader};
use super::{Access, DmaRange, Dpu, Precision, fixed};
use crate::error::Result;
use crate::regcmd::{DmaAddr, TaskBuilder};
use crate::regs::{Block, Register, dpu_rdma};

/// MRDMA: the main input cube read from memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mrdma {
    /// `RDMA_SRC_BASE_ADDR`.
    pub addr: DmaAddr,
    /// `SRC_DMA_CFG.LINE_NOTCH_ADDR`: atoms between one line's end and the next.
    pub line_notch: u32,
    /// `RDMA_SURF_NOTCH`: atoms between one surface's end and the next.
    pub surf_notch: u32,
}

/// ERDMA: the EW operand, laid out like the DPU's cube.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Erdma {
    /// `RDMA_EW_BASE_ADDR`.
    pub addr: DmaAddr,
    /// `ERDMA_DATA_SIZE`: element size code (2: 16-bit, 3: 32-bit).
    pub data_size: u32,
    /// `ERDMA_DATA_MODE`: 1 = one operand per element.
    pub data_mode: u32,
    /// `RDMA_EW_SURF_STRIDE` in 16-byte units.
    pub surf_stride: u32,
    /// `DATA_CUBE_HEIGHT.EW_LINE_NOTCH_ADDR`.
    pub line_notch: u32,
    /// `RDMA_EW_SURF_NOTCH`: atoms between one surface's end and the next (the vendor
    /// writes it beside `EW_SURF_STRIDE` for a task over part of a taller cube; the two
    /// must then agree).
    pub surf_notch: u32,
}

/// `COMB_USE` 5: MRDMA and ERDMA read one EW operand between them, MRDMA its even
/// surfaces at `RDMA_SRC_BASE_ADDR`, ERDMA its odd ones one surface later, each stepping
/// over the other's (docs/hardware/dpu-ops.md#conv-fed-ew).
pub const COMB_SHARED_OPERAND: u32 = 5;

/// `ERDMA_DATA_MODE` / `EW_DATA_MODE` 0: one operand per channel, the same for every
/// pixel (the operand is one atom per surface, `EW_SURF_STRIDE` 16 bytes).
pub const EW_PER_CHANNEL: u32 = 0;
/// `ERDMA_DATA_MODE` / `EW_DATA_MODE` 1: one operand per element, laid out like the cube.
pub const EW_PER_PIXEL: u32 = 1;

/// BRDMA or NRDMA: the per-channel operands of the BS or BN stage read from memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OperandRead {
    /// `RDMA_BS_BASE_ADDR` or `RDMA_BN_BASE_ADDR`.
    pub addr: DmaAddr,
    /// `BRDMA_DATA_USE` / `NRDMA_DATA_USE` (non-zero): which operands come from memory,
    /// one bit each ([`OperandRead::ALU`], [`OperandRead::CPEND`], [`OperandRead::MUL`],
    /// [`OperandRead::TRUNCATE`]).
    pub data_use: u32,
}

impl OperandRead {
    /// `DATA_USE` bit: the ALU operand.
    pub const ALU: u32 = 1;
    /// `DATA_USE` bit: the CPEND (zero-point) operand.
    pub const CPEND: u32 = 2;
    /// `DATA_USE` bit: the multiplier operand.
    pub const MUL: u32 = 4;
    /// `DATA_USE` bit: the shift (truncate) value.
    pub const TRUNCATE: u32 = 8;

    /// Bytes of one channel's operand in memory, for the layouts this project knows: a
    /// 32-bit ALU operand alone (Mesa's int8 bias, bminor/mesa-mesa
    /// `src/gallium/drivers/rocket/rkt_coefs.c`) or a 16-bit multiplier alone
    /// (docs/hardware/dpu-ops.md#per-channel-operands); `None` for other combinations.
    pub const fn bytes_per_channel(&self) -> Option<u32> {
        match self.data_use {
            OperandRead::ALU => Some(4),
            OperandRead::MUL => Some(2),
            _ => None,
        }
    }
}

impl Erdma {
    /// The operand's element type for a DPU processing integers or floats.
    pub fn precision(&self, float: bool) -> Option<Precision> {
        Some(match (self.data_size, float) {
            (1, false) => Precision::Int8,
            (2, false) => Precision::Int16,
            (3, false) => Precision::Int32,
            (2, true) => Precision::Fp16,
            (3, true) => Precision::Fp32,
            _ => return None,
        })
    }
}

/// The DPU_RDMA configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DpuRdma {
    /// `FEATURE_MODE_CFG.CONV_MODE` 3: depthwise (0: direct), as the DPU's.
    pub depthwise: bool,
    /// `FEATURE_MODE_CFG.COMB_USE`: 0, or [`COMB_SHARED_OPERAND`] (MRDMA and ERDMA share
    /// the EW operand's surfaces in a CORE-fed element-wise task).
    pub comb_use: u32,
    /// `S_POINTER` ping-pong.
    pub ping_pong: bool,
    /// Cube width, height and channels (`RDMA_DATA_CUBE_*`, stored plus one).
    pub cube: (u32, u32, u32),
    /// `FEATURE_MODE_CFG` input and processing precision (they must agree).
    pub precision: Precision,
    /// `FEATURE_MODE_CFG.FLYING_MODE`.
    pub flying: bool,
    /// `FEATURE_MODE_CFG.BURST_LEN`.
    pub burst_len: u32,
    /// The main-data read, `None` when `MRDMA_DISABLE` is set.
    pub mrdma: Option<Mrdma>,
    /// The EW operand read, `None` when `ERDMA_DISABLE` is set.
    pub erdma: Option<Erdma>,
    /// `RDMA_WEIGHT`: arbiter weights of the M, B, N and E reads.
    pub arbiter: [u32; 4],
    /// `FEATURE_MODE_CFG.MRDMA_FP16TOFP32_EN`: MRDMA widens fp16 main data to fp32 (every
    /// vendor flying fp16 task sets it).
    pub fp16_to_fp32: bool,
    /// The BS operand read (BRDMA), `None` when `BRDMA_DATA_USE` is 0.
    pub brdma: Option<OperandRead>,
    /// The BN operand read (NRDMA), `None` when `NRDMA_DATA_USE` is 0.
    pub nrdma: Option<OperandRead>,
}

impl DpuRdma {
    /// The DPU_RDMA registers in ascending offsets.
    pub(super) fn emit(&self, t: &mut TaskBuilder) -> Result<()> {
        use dpu_rdma::*;
        let (w, h, c) = self.cube;
        let e = self.erdma;
        let m = self.mrdma;
        t.write_fields(&[(RdmaDataCubeWidth::WIDTH, w.wrapping_sub(1))])?
            .write_fields(&[
                (RdmaDataCubeHeight::HEIGHT, h.wrapping_sub(1)),
                (
                    RdmaDataCubeHeight::EW_LINE_NOTCH_ADDR,
                    e.map_or(0, |e| e.line_notch),
                ),
            ])?
            .write_fields(&[(RdmaDataCubeChannel::CHANNEL, c.wrapping_sub(1))])?;
        match m {
            Some(m) => t.write_addr::<RdmaSrcBaseAddr>(m.addr)?,
            None => t.write(RdmaSrcBaseAddr::new()),
        };
        t.write_fields(&[(
            RdmaBrdmaCfg::BRDMA_DATA_USE,
            self.brdma.map_or(0, |b| b.data_use),
        )])?;
        match self.brdma {
            Some(b) => t.write_addr::<RdmaBsBaseAddr>(b.addr)?,
            None => t.write(RdmaBsBaseAddr::new()),
        };
        t.write_fields(&[(
            RdmaNrdmaCfg::NRDMA_DATA_USE,
            self.nrdma.map_or(0, |b| b.data_use),
        )])?;
        match self.nrdma {
            Some(b) => t.write_addr::<RdmaBnBaseAddr>(b.addr)?,
            None => t.write(RdmaBnBaseAddr::new()),
        };
        t.write_fields(&[
            (RdmaErdmaCfg::ERDMA_DISABLE, u32::from(e.is_none())),
            (RdmaErdmaCfg::ERDMA_DATA_SIZE, e.map_or(0, |e| e.data_size)),
            (RdmaErdmaCfg::ERDMA_DATA_MODE, e.map_or(0, |e| e.data_mode)),
        ])?;
        match e {
            Some(e) => t.write_addr::<RdmaEwBaseAddr>(e.addr)?,
            None => t.write(RdmaEwBaseAddr::new()),
        };
        t.write_fields(&[(
            RdmaEwSurfStride::EW_SURF_STRIDE,
            e.map_or(0, |e| e.surf_stride),
        )])?
        .write_fields(&[
            (RdmaFeatureModeCfg::FLYING_MODE, u32::from(self.flying)),
            (
                RdmaFeatureModeCfg::CONV_MODE,
                if self.depthwise { 3 } else { 0 },
            ),
            (RdmaFeatureModeCfg::COMB_USE, self.comb_use),
            (RdmaFeatureModeCfg::MRDMA_DISABLE, u32::from(m.is_none())),
            (
                RdmaFeatureModeCfg::MRDMA_FP16TOFP32_EN,
                u32::from(self.fp16_to_fp32),
            ),
            (RdmaFeatureModeCfg::PROC_PRECISION, self.precision.code()),
            (RdmaFeatureModeCfg::IN_PRECISION, self.precision.code()),
            (RdmaFeatureModeCfg::BURST_LEN, self.burst_len),
        ])?
        .write_fields(&[(
            RdmaSrcDmaCfg::LINE_NOTCH_ADDR,
            m.map_or(0, |m| m.line_notch),
        )])?
        .write_fields(&[(
            RdmaSurfNotch::SURF_NOTCH_ADDR,
            m.map_or(0, |m| m.surf_notch),
        )])?
        .write(RdmaPadCfg::new())
        .write_fields(&[
            (RdmaWeight::M_WEIGHT, self.arbiter[0]),
            (RdmaWeight::B_WEIGHT, self.arbiter[1]),
            (RdmaWeight::N_WEIGHT, self.arbiter[2]),
            (RdmaWeight::E_WEIGHT, self.arbiter[3]),
        ])?
        .write_fields(&[(
            RdmaEwSurfNotch::EW_SURF_NOTCH,
            e.map_or(0, |e| e.surf_notch),
        )])?;
        Ok(())
    }

    /// Reads the DPU_RDMA registers.
    pub(super) fn decode(r: &mut Reader<'_>) -> Decoded<DpuRdma> {
        use dpu_rdma::*;
        let depthwise = match r.get(RdmaFeatureModeCfg::CONV_MODE) {
            0 => false,
            3 => true,
            mode => {
                return Err(E::unsupported(
                    RdmaFeatureModeCfg::CONV_MODE,
                    mode,
                    "direct (0) and depthwise (3) modes are modelled",
                ));
            }
        };
        let comb_use = r.get(RdmaFeatureModeCfg::COMB_USE);
        if comb_use != 0 && comb_use != COMB_SHARED_OPERAND {
            return Err(E::unsupported(
                RdmaFeatureModeCfg::COMB_USE,
                comb_use,
                "0 and 5 (MRDMA and ERDMA sharing the EW operand) are modelled",
            ));
        }
        r.expect(RdmaSrcDmaCfg::UNPOOLING_EN, 0, "un-pooling is not modelled")?;
        let ping_pong = pointer::decode::<SPointer>(r)?;
        let code = r.get(RdmaFeatureModeCfg::PROC_PRECISION);
        let precision = Precision::from_code(code).ok_or_else(|| {
            E::unsupported(
                RdmaFeatureModeCfg::PROC_PRECISION,
                code,
                "reserved precision code",
            )
        })?;
        r.agree(RdmaFeatureModeCfg::IN_PRECISION, code, || {
            format!("differs from {} {code}", RdmaFeatureModeCfg::PROC_PRECISION)
        })?;
        // A disabled engine's fields are inert (docs/simulator.md, "Inert fields"):
        // recorded, not held to anything.
        let mrdma = if r.flag(RdmaFeatureModeCfg::MRDMA_DISABLE) {
            r.inert_register::<RdmaSrcBaseAddr>();
            r.inert(&[RdmaSrcDmaCfg::LINE_NOTCH_ADDR]);
            r.inert_register::<RdmaSurfNotch>();
            None
        } else {
            Some(Mrdma {
                addr: DmaAddr::Fixed(r.address::<RdmaSrcBaseAddr>()),
                line_notch: r.get(RdmaSrcDmaCfg::LINE_NOTCH_ADDR),
                surf_notch: r.get(RdmaSurfNotch::SURF_NOTCH_ADDR),
            })
        };
        let erdma = if r.flag(RdmaErdmaCfg::ERDMA_DISABLE) {
            r.inert_register::<RdmaErdmaCfg>();
            r.inert_register::<RdmaEwBaseAddr>();
            r.inert_register::<RdmaEwSurfStride>();
            r.inert(&[RdmaDataCubeHeight::EW_LINE_NOTCH_ADDR]);
            r.inert_register::<RdmaEwSurfNotch>();
            None
        } else {
            r.expect(
                RdmaErdmaCfg::ERDMA_SURF_MODE,
                0,
                "two-surface operands are not modelled",
            )?;
            r.expect(
                RdmaErdmaCfg::ERDMA_NONALIGN,
                0,
                "non-aligned operands are not modelled",
            )?;
            Some(Erdma {
                addr: DmaAddr::Fixed(r.address::<RdmaEwBaseAddr>()),
                data_size: r.get(RdmaErdmaCfg::ERDMA_DATA_SIZE),
                data_mode: r.get(RdmaErdmaCfg::ERDMA_DATA_MODE),
                surf_stride: r.get(RdmaEwSurfStride::EW_SURF_STRIDE),
                line_notch: r.get(RdmaDataCubeHeight::EW_LINE_NOTCH_ADDR),
                surf_notch: r.get(RdmaEwSurfNotch::EW_SURF_NOTCH),
            })
        };
        let brdma = match r.get(RdmaBrdmaCfg::BRDMA_DATA_USE) {
            0 => {
                r.inert_register::<RdmaBsBaseAddr>();
                None
            }
            data_use => Some(OperandRead {
                addr: DmaAddr::Fixed(r.address::<RdmaBsBaseAddr>()),
                data_use,
            }),
        };
        let nrdma = match r.get(RdmaNrdmaCfg::NRDMA_DATA_USE) {
            0 => {
                r.inert_register::<RdmaBnBaseAddr>();
                None
            }
            data_use => Some(OperandRead {
                addr: DmaAddr::Fixed(r.address::<RdmaBnBaseAddr>()),
                data_use,
            }),
        };
        Ok(DpuRdma {
            depthwise,
            comb_use,
            fp16_to_fp32: r.flag(RdmaFeatureModeCfg::MRDMA_FP16TOFP32_EN),
            brdma,
            nrdma,
            ping_pong,
            cube: (
                r.get(RdmaDataCubeWidth::WIDTH) + 1,
                r.get(RdmaDataCubeHeight::HEIGHT) + 1,
                r.get(RdmaDataCubeChannel::CHANNEL) + 1,
            ),
            precision,
            flying: r.flag(RdmaFeatureModeCfg::FLYING_MODE),
            burst_len: r.get(RdmaFeatureModeCfg::BURST_LEN),
            mrdma,
            erdma,
            arbiter: [
                r.get(RdmaWeight::M_WEIGHT),
                r.get(RdmaWeight::B_WEIGHT),
                r.get(RdmaWeight::N_WEIGHT),
                r.get(RdmaWeight::E_WEIGHT),
            ],
        })
    }

    /// Bytes between lines and between surfaces of the MRDMA cube.
    pub fn mrdma_strides(&self, m: &Mrdma) -> (u64, u64) {
        let (w, h, _) = self.cube;
        let line = (u64::from(w) + u64::from(m.line_notch)) * 16;
        (line, line * u64::from(h) + u64::from(m.surf_notch) * 16)
    }

    /// Bytes between lines and between surfaces of the ERDMA operand.
    pub fn erdma_strides(&self, e: &Erdma) -> (u64, u64) {
        let line = (u64::from(self.cube.0) + u64::from(e.line_notch)) * 16;
        (line, u64::from(e.surf_stride) * 16)
    }

    /// The MRDMA and ERDMA reads.
    pub(super) fn dma(&self, dpu: Option<&Dpu>, out: &mut Vec<DmaRange>) {
        let (w, h, c) = self.cube;
        if let Some(range) = self.shared_operand_range(dpu) {
            out.push(range);
        } else if let Some(m) = &self.mrdma
            && let Some(start) = fixed(m.addr)
        {
            let (line, surf) = self.mrdma_strides(m);
            out.push(DmaRange {
                block: Block::DpuRdma,
                register: dpu_rdma::RdmaSrcBaseAddr::NAME,
                what: "main input",
                start,
                len: cube_extent(w, h, c, self.precision, line, surf),
                access: Access::Read,
            });
        }
        for (read, register, what) in [
            (self.brdma, dpu_rdma::RdmaBsBaseAddr::NAME, "BS operands"),
            (self.nrdma, dpu_rdma::RdmaBnBaseAddr::NAME, "BN operands"),
        ] {
            if let Some(b) = read
                && let Some(start) = fixed(b.addr)
            {
                // Unknown layouts are refused by the simulator; the range assumes 4
                // bytes per channel so that the verifier still sees the read.
                let per = u64::from(b.bytes_per_channel().unwrap_or(4));
                out.push(DmaRange {
                    block: Block::DpuRdma,
                    register,
                    what,
                    start,
                    len: (u64::from(c) * per).div_ceil(16) * 16,
                    access: Access::Read,
                });
            }
        }
        if let Some(e) = &self.erdma
            && self.comb_use != COMB_SHARED_OPERAND
            && let Some(start) = fixed(e.addr)
        {
            let float = dpu.map_or(self.precision.is_float(), |d| d.precision.is_float());
            let p = e.precision(float).unwrap_or(Precision::Int32);
            let (line, surf) = self.erdma_strides(e);
            let len = if e.data_mode == EW_PER_CHANNEL {
                cube_extent(1, 1, c, p, 16, surf)
            } else {
                cube_extent(w, h, c, p, line, surf)
            };
            out.push(DmaRange {
                block: Block::DpuRdma,
                register: dpu_rdma::RdmaEwBaseAddr::NAME,
                what: "EW operand",
                start,
                len,
                access: Access::Read,
            });
        }
    }

    /// With [`COMB_SHARED_OPERAND`], the one operand MRDMA and ERDMA read between them:
    /// a whole cube from `RDMA_SRC_BASE_ADDR` with surfaces of `W·H` atoms (each engine
    /// reads every other surface of it).
    fn shared_operand_range(&self, dpu: Option<&Dpu>) -> Option<DmaRange> {
        if self.comb_use != COMB_SHARED_OPERAND {
            return None;
        }
        let (w, h, c) = self.cube;
        let m = self.mrdma.as_ref()?;
        let e = self.erdma.as_ref()?;
        let float = dpu.map_or(self.precision.is_float(), |d| d.precision.is_float());
        let p = e.precision(float).unwrap_or(Precision::Int32);
        let line = u64::from(w) * 16;
        Some(DmaRange {
            block: Block::DpuRdma,
            register: dpu_rdma::RdmaSrcBaseAddr::NAME,
            what: "EW operand (MRDMA and ERDMA)",
            start: fixed(m.addr)?,
            len: cube_extent(w, h, c, p, line, line * u64::from(h)),
            access: Access::Read,
        })
    }
}
