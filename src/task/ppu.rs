//! PPU: the planar processing unit (pooling). Stand-alone pooling tasks decode field by
//! field, are built by `kernels::ops::pool` and are executed by the simulator
//! (docs/hardware/pooling.md#registers; docs/ops.md "Pooling").

use super::pointer;
use super::read::{DecodeError as E, Decoded, Reader};
use super::{Access, DmaRange, Precision, fixed};
use crate::error::Result;
use crate::regcmd::{DmaAddr, TaskBuilder};
use crate::regs::{Block, Register, ppu};

/// The pooling operation (`OPERATION_MODE_CFG.POOLING_METHOD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolMethod {
    /// Average (code 0), with the reciprocal kernel sizes.
    Average,
    /// Maximum (code 1).
    Max,
    /// Minimum (code 2).
    Min,
}

impl PoolMethod {
    /// The register code.
    pub const fn code(self) -> u32 {
        match self {
            PoolMethod::Average => 0,
            PoolMethod::Max => 1,
            PoolMethod::Min => 2,
        }
    }

    /// The method of a code.
    pub const fn from_code(code: u32) -> Option<PoolMethod> {
        Some(match code {
            0 => PoolMethod::Average,
            1 => PoolMethod::Max,
            2 => PoolMethod::Min,
            _ => return None,
        })
    }
}

/// The PPU's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ppu {
    /// `S_POINTER` ping-pong.
    pub ping_pong: bool,
    /// Input width, height, channels (`DATA_CUBE_IN_*`, stored plus one).
    pub cube_in: (u32, u32, u32),
    /// Output width, height, channels (`DATA_CUBE_OUT_*`, stored plus one).
    pub cube_out: (u32, u32, u32),
    /// The operation.
    pub method: PoolMethod,
    /// `FLYING_MODE`: input from memory through PPU_RDMA (true) or from the DPU.
    pub from_memory: bool,
    /// Kernel width and height (`POOLING_KERNEL_CFG`, stored plus one).
    pub kernel: (u32, u32),
    /// Strides x and y (stored plus one).
    pub stride: (u32, u32),
    /// `RECIP_KERNEL_WIDTH` / `HEIGHT`: for averages the fp16 bits of 65536 / k per
    /// axis (k = 2 gives 0x7800), 0 for max and min (docs/hardware/pooling.md#average).
    pub recip: (u32, u32),
    /// Padding left, top, right, bottom (counts, not minus one).
    pub padding: [u32; 4],
    /// `PADDING_VALUE_1_CFG` / `PADDING_VALUE_2_CFG`: the value a padded position holds
    /// (fp16 bits; for int8 a 19-bit two's complement number), bits 31:0 and 34:32.
    pub pad_values: (u32, u32),
    /// `DST_BASE_ADDR`.
    pub out: DmaAddr,
    /// `DST_SURF_STRIDE` in 16-byte units.
    pub surf_stride: u32,
    /// `DATA_FORMAT.PROC_PRECISION`.
    pub precision: Precision,
    /// `DATA_FORMAT.INDEX_ADD` (16-byte units): without pooling indices, every program
    /// repeats `surf_stride` here.
    pub index_add: u32,
    /// `MISC_CTRL.BURST_LEN`.
    pub burst_len: u32,
}

impl Ppu {
    /// The PPU registers in ascending offsets.
    pub(super) fn emit(&self, t: &mut TaskBuilder) -> Result<()> {
        use ppu::*;
        let (iw, ih, ic) = self.cube_in;
        let (ow, oh, oc) = self.cube_out;
        let m1 = |v: u32| v.wrapping_sub(1);
        t.write_fields(&[(DataCubeInWidth::CUBE_IN_WIDTH, m1(iw))])?
            .write_fields(&[(DataCubeInHeight::CUBE_IN_HEIGHT, m1(ih))])?
            .write_fields(&[(DataCubeInChannel::CUBE_IN_CHANNEL, m1(ic))])?
            .write_fields(&[(DataCubeOutWidth::CUBE_OUT_WIDTH, m1(ow))])?
            .write_fields(&[(DataCubeOutHeight::CUBE_OUT_HEIGHT, m1(oh))])?
            .write_fields(&[(DataCubeOutChannel::CUBE_OUT_CHANNEL, m1(oc))])?
            .write_fields(&[
                (OperationModeCfg::POOLING_METHOD, self.method.code()),
                (OperationModeCfg::FLYING_MODE, self.from_memory.into()),
            ])?
            .write_fields(&[
                (PoolingKernelCfg::KERNEL_WIDTH, m1(self.kernel.0)),
                (PoolingKernelCfg::KERNEL_HEIGHT, m1(self.kernel.1)),
                (PoolingKernelCfg::KERNEL_STRIDE_WIDTH, m1(self.stride.0)),
                (PoolingKernelCfg::KERNEL_STRIDE_HEIGHT, m1(self.stride.1)),
            ])?
            .write_fields(&[(RecipKernelWidth::RECIP_KERNEL_WIDTH, self.recip.0)])?
            .write_fields(&[(RecipKernelHeight::RECIP_KERNEL_HEIGHT, self.recip.1)])?
            .write_fields(&[
                (PoolingPaddingCfg::PAD_LEFT, self.padding[0]),
                (PoolingPaddingCfg::PAD_TOP, self.padding[1]),
                (PoolingPaddingCfg::PAD_RIGHT, self.padding[2]),
                (PoolingPaddingCfg::PAD_BOTTOM, self.padding[3]),
            ])?
            .write_fields(&[(PaddingValue1Cfg::PAD_VALUE_0, self.pad_values.0)])?
            .write_fields(&[(PaddingValue2Cfg::PAD_VALUE_1, self.pad_values.1)])?
            .write_addr::<DstBaseAddr>(self.out)?
            .write_fields(&[(DstSurfStride::DST_SURF_STRIDE, self.surf_stride)])?
            .write_fields(&[
                (DataFormat::PROC_PRECISION, self.precision.code()),
                (DataFormat::INDEX_ADD, self.index_add),
            ])?
            .write_fields(&[(MiscCtrl::BURST_LEN, self.burst_len)])?;
        Ok(())
    }

    /// Reads the PPU registers.
    pub(super) fn decode(r: &mut Reader<'_>) -> Decoded<Ppu> {
        use ppu::*;
        r.expect(
            DataFormat::DPU_FLYIN,
            0,
            "DPU to PPU flying input is not modelled",
        )?;
        r.expect(
            OperationModeCfg::INDEX_EN,
            0,
            "pooling indices are not modelled",
        )?;
        r.expect(MiscCtrl::NONALIGN, 0, "non-aligned output is not modelled")?;
        r.expect(
            MiscCtrl::MC_SURF_OUT,
            0,
            "serial surface output is not modelled",
        )?;
        r.expect(
            MiscCtrl::SURF_LEN,
            0,
            "the surface count of non-aligned output is not modelled",
        )?;
        r.expect(
            OperationModeCfg::NOTCH_ADDR,
            0,
            "an output line notch is not modelled (lines are the output width)",
        )?;
        r.expect(
            OperationModeCfg::USE_CNT,
            0,
            "the field has no documented meaning",
        )?;
        let ping_pong = pointer::decode::<SPointer>(r)?;
        let code = r.get(OperationModeCfg::POOLING_METHOD);
        let method = PoolMethod::from_code(code).ok_or_else(|| {
            E::unsupported(OperationModeCfg::POOLING_METHOD, code, "code 3 is reserved")
        })?;
        let pcode = r.get(DataFormat::PROC_PRECISION);
        let precision = Precision::from_code(pcode).ok_or_else(|| {
            E::unsupported(DataFormat::PROC_PRECISION, pcode, "reserved precision code")
        })?;
        let p1 = |v: u32| v + 1;
        Ok(Ppu {
            ping_pong,
            cube_in: (
                p1(r.get(DataCubeInWidth::CUBE_IN_WIDTH)),
                p1(r.get(DataCubeInHeight::CUBE_IN_HEIGHT)),
                p1(r.get(DataCubeInChannel::CUBE_IN_CHANNEL)),
            ),
            cube_out: (
                p1(r.get(DataCubeOutWidth::CUBE_OUT_WIDTH)),
                p1(r.get(DataCubeOutHeight::CUBE_OUT_HEIGHT)),
                p1(r.get(DataCubeOutChannel::CUBE_OUT_CHANNEL)),
            ),
            method,
            from_memory: r.flag(OperationModeCfg::FLYING_MODE),
            kernel: (
                p1(r.get(PoolingKernelCfg::KERNEL_WIDTH)),
                p1(r.get(PoolingKernelCfg::KERNEL_HEIGHT)),
            ),
            stride: (
                p1(r.get(PoolingKernelCfg::KERNEL_STRIDE_WIDTH)),
                p1(r.get(PoolingKernelCfg::KERNEL_STRIDE_HEIGHT)),
            ),
            recip: (
                r.get(RecipKernelWidth::RECIP_KERNEL_WIDTH),
                r.get(RecipKernelHeight::RECIP_KERNEL_HEIGHT),
            ),
            padding: [
                r.get(PoolingPaddingCfg::PAD_LEFT),
                r.get(PoolingPaddingCfg::PAD_TOP),
                r.get(PoolingPaddingCfg::PAD_RIGHT),
                r.get(PoolingPaddingCfg::PAD_BOTTOM),
            ],
            pad_values: (
                r.get(PaddingValue1Cfg::PAD_VALUE_0),
                r.get(PaddingValue2Cfg::PAD_VALUE_1),
            ),
            out: DmaAddr::Fixed(r.address::<DstBaseAddr>()),
            surf_stride: r.get(DstSurfStride::DST_SURF_STRIDE),
            precision,
            index_add: r.get(DataFormat::INDEX_ADD),
            burst_len: r.get(MiscCtrl::BURST_LEN),
        })
    }

    /// The write of the output cube: surfaces of `surf_stride` × 16 bytes, each `oh`
    /// lines of `ow` atoms.
    pub(super) fn dma(&self, out: &mut Vec<DmaRange>) {
        let Some(start) = fixed(self.out) else {
            return;
        };
        let (w, h, c) = self.cube_out;
        let line = u64::from(w) * 16;
        let surf = u64::from(self.surf_stride) * 16;
        out.push(DmaRange {
            block: Block::Ppu,
            register: ppu::DstBaseAddr::NAME,
            what: "pooled output",
            start,
            len: super::dpu::cube_extent(w, h, c, self.precision, line, surf),
            access: Access::Write,
        });
    }
}
