//! PPU_RDMA: the pooling unit's read DMA (the input cube, from memory).

use super::pointer;
use super::read::{Decoded, Reader};
use super::{Access, DmaRange, fixed};
use crate::error::Result;
use crate::regcmd::{DmaAddr, TaskBuilder};
use crate::regs::{Block, Register, ppu_rdma};

/// The PPU_RDMA configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PpuRdma {
    /// `S_POINTER` ping-pong.
    pub ping_pong: bool,
    /// Input width, height, channels (`RDMA_CUBE_IN_*`, stored plus one).
    pub cube_in: (u32, u32, u32),
    /// `RDMA_DATA_FORMAT.IN_PRECISION`: element size code (0: 4-bit, 1: 8-bit, 2: 16-bit,
    /// 3: 32-bit — not the code of the other precision fields).
    pub size_code: u32,
    /// `RDMA_SRC_BASE_ADDR`.
    pub src: DmaAddr,
    /// `RDMA_SRC_LINE_STRIDE` in 16-byte units.
    pub line_stride: u32,
    /// `RDMA_SRC_SURF_STRIDE` in 16-byte units.
    pub surf_stride: u32,
}

impl PpuRdma {
    /// The PPU_RDMA registers in ascending offsets.
    pub(super) fn emit(&self, t: &mut TaskBuilder) -> Result<()> {
        use ppu_rdma::*;
        let (w, h, c) = self.cube_in;
        t.write_fields(&[(RdmaCubeInWidth::CUBE_IN_WIDTH, w.wrapping_sub(1))])?
            .write_fields(&[(RdmaCubeInHeight::CUBE_IN_HEIGHT, h.wrapping_sub(1))])?
            .write_fields(&[(RdmaCubeInChannel::CUBE_IN_CHANNEL, c.wrapping_sub(1))])?
            .write_addr::<RdmaSrcBaseAddr>(self.src)?
            .write_fields(&[(RdmaSrcLineStride::SRC_LINE_STRIDE, self.line_stride)])?
            .write_fields(&[(RdmaSrcSurfStride::SRC_SURF_STRIDE, self.surf_stride)])?
            .write_fields(&[(RdmaDataFormat::IN_PRECISION, self.size_code)])?;
        Ok(())
    }

    /// Reads the PPU_RDMA registers.
    pub(super) fn decode(r: &mut Reader<'_>) -> Decoded<PpuRdma> {
        use ppu_rdma::*;
        let ping_pong = pointer::decode::<SPointer>(r)?;
        Ok(PpuRdma {
            ping_pong,
            cube_in: (
                r.get(RdmaCubeInWidth::CUBE_IN_WIDTH) + 1,
                r.get(RdmaCubeInHeight::CUBE_IN_HEIGHT) + 1,
                r.get(RdmaCubeInChannel::CUBE_IN_CHANNEL) + 1,
            ),
            size_code: r.get(RdmaDataFormat::IN_PRECISION),
            src: DmaAddr::Fixed(r.address::<RdmaSrcBaseAddr>()),
            line_stride: r.get(RdmaSrcLineStride::SRC_LINE_STRIDE),
            surf_stride: r.get(RdmaSrcSurfStride::SRC_SURF_STRIDE),
        })
    }

    /// Bytes per element of the input (`size_code`).
    pub fn element_bytes(&self) -> u64 {
        match self.size_code {
            0 | 1 => 1,
            2 => 2,
            _ => 4,
        }
    }

    /// The read of the input cube.
    pub(super) fn dma(&self, out: &mut Vec<DmaRange>) {
        let Some(start) = fixed(self.src) else {
            return;
        };
        let (w, h, c) = self.cube_in;
        let per_atom = (16 / self.element_bytes()).max(1);
        let surfaces = u64::from(c).div_ceil(per_atom);
        let (line, surf) = (
            u64::from(self.line_stride) * 16,
            u64::from(self.surf_stride) * 16,
        );
        let len = surfaces.saturating_sub(1) * surf
            + u64::from(h.saturating_sub(1)) * line
            + u64::from(w) * 16;
        out.push(DmaRange {
            block: Block::PpuRdma,
            register: ppu_rdma::RdmaSrcBaseAddr::NAME,
            what: "pooling input",
            start,
            len,
            access: Access::Read,
        });
    }
}
