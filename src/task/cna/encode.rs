//! The CNA's registers written from the model.

use super::{Cna, PLANAR_ARGB_IN};
use crate::error::Result;
use crate::regcmd::TaskBuilder;
use crate::regs::cna;

impl Cna {
    fn cbuf0(&self) -> Result<cna::CbufCon0> {
        let c = &self.cbuf;
        let r = cna::CbufCon0::new();
        let r = cna::CbufCon0::DATA_BANK.set(r, c.data_banks)?;
        let r = cna::CbufCon0::WEIGHT_BANK.set(r, c.weight_banks)?;
        let r = cna::CbufCon0::FC_DATA_BANK.set(r, c.fc_data_banks)?;
        let r = cna::CbufCon0::DATA_REUSE.set(r, c.data_reuse.into())?;
        cna::CbufCon0::WEIGHT_REUSE.set(r, c.weight_reuse.into())
    }

    fn con1(&self) -> Result<cna::ConvCon1> {
        let p = self.precision.code();
        let mode = if self.kernel.depthwise { 3 } else { 0 };
        let r = cna::ConvCon1::CONV_MODE.set(cna::ConvCon1::new(), mode)?;
        let r = cna::ConvCon1::IN_PRECISION.set(r, p)?;
        let r = cna::ConvCon1::PROC_PRECISION.set(r, p)?;
        let r = cna::ConvCon1::GROUP_LINE_OFF.set(r, self.feature.group_line_off.into())?;
        let planar = self.feature.planar_width.is_some();
        let r = cna::ConvCon1::ARGB_IN.set(r, if planar { PLANAR_ARGB_IN } else { 0 })?;
        cna::ConvCon1::NONALIGN_DMA.set(r, planar.into())
    }

    /// The vendor bodies' preamble: CBUF split, decompression off, precisions.
    pub(in crate::task) fn emit_preamble(&self, t: &mut TaskBuilder) -> Result<()> {
        t.write(self.cbuf0()?)
            .write(cna::DcompRegnum::new())
            .write(cna::DcompCtrl::new())
            .write(self.con1()?);
        Ok(())
    }

    /// The CNA registers in ascending offsets (every one written, zeros included).
    pub(in crate::task) fn emit(&self, t: &mut TaskBuilder) -> Result<()> {
        use cna::*;
        let f = &self.feature;
        let k = &self.kernel;
        // Saturated: a size beyond 32 bits then fails its field's range check.
        let kernel_bytes = u32::try_from(self.kernel_bytes()).unwrap_or(u32::MAX);
        let weight_bytes = u32::try_from(self.kernel_bytes() * u64::from(self.weights.kernels))
            .unwrap_or(u32::MAX);
        t.write(self.con1()?)
            .write_fields(&[
                (ConvCon2::FEATURE_GRAINS, f.grains),
                (ConvCon2::UNK_31_24, self.core_split),
            ])?
            .write_fields(&[
                (ConvCon3::CONV_X_STRIDE, self.conv.stride.0),
                (ConvCon3::CONV_Y_STRIDE, self.conv.stride.1),
                (ConvCon3::ATROUS_X_DILATION, k.dilation.0.wrapping_sub(1)),
                (ConvCon3::ATROUS_Y_DILATION, k.dilation.1.wrapping_sub(1)),
            ])?
            .write_fields(&[
                (DataSize0::DATAIN_WIDTH, f.planar_width.unwrap_or(f.width)),
                (DataSize0::DATAIN_HEIGHT, f.height),
            ])?
            .write_fields(&[
                (DataSize1::DATAIN_CHANNEL, f.channels),
                (
                    DataSize1::DATAIN_CHANNEL_REAL,
                    f.channels_real.wrapping_sub(1),
                ),
            ])?
            .write_fields(&[(DataSize2::DATAOUT_WIDTH, self.conv.out_width)])?
            .write_fields(&[(DataSize3::DATAOUT_ATOMICS, self.conv.out_atomics)])?
            .write_fields(&[(WeightSize0::WEIGHT_BYTES, weight_bytes)])?
            .write_fields(&[(WeightSize1::WEIGHT_BYTES_PER_KERNEL, kernel_bytes)])?
            .write_fields(&[
                (WeightSize2::WEIGHT_KERNELS, self.weights.kernels),
                (WeightSize2::WEIGHT_HEIGHT, k.height),
                (WeightSize2::WEIGHT_WIDTH, k.width),
            ])?
            .write(self.cbuf0()?)
            .write_fields(&[(CbufCon1::DATA_ENTRIES, self.cbuf.data_entries)])?
            .write_fields(&[
                (CvtCon0::CVT_BYPASS, self.cvt.bypass.into()),
                (CvtCon0::CVT_TYPE, self.cvt.cvt_type.into()),
                (CvtCon0::DATA_SIGN, self.cvt.signed.into()),
            ])?
            .write_fields(&[(CvtCon1::CVT_SCALE0, self.cvt.scales[0])])?
            .write_fields(&[(CvtCon2::CVT_SCALE1, self.cvt.scales[1])])?
            .write_fields(&[(CvtCon3::CVT_SCALE2, self.cvt.scales[2])])?
            .write_fields(&[(CvtCon4::CVT_SCALE3, self.cvt.scales[3])])?
            .write(FcCon0::new())
            .write(FcCon1::new())
            .write_fields(&[
                (PadCon0::PAD_TOP, k.pad_top),
                (PadCon0::PAD_LEFT, k.pad_left),
            ])?
            .write_addr::<FeatureDataAddr>(f.addr)?
            .write(FcCon2::new())
            .write_fields(&[
                (DmaCon0::DATA_BURST_LEN, self.burst.0),
                (DmaCon0::WEIGHT_BURST_LEN, self.burst.1),
            ])?
            .write_fields(&[(DmaCon1::LINE_STRIDE, f.line_stride)])?
            .write_fields(&[(DmaCon2::SURF_STRIDE, (f.surf_stride as u32) & 0x0FFF_FFFF)])?
            .write_fields(&[
                (FcDataSize0::DMA_WIDTH, f.width),
                (FcDataSize0::DMA_HEIGHT, f.height),
            ])?
            .write_fields(&[(FcDataSize1::DMA_CHANNEL, f.channels)])?
            .write(DcompCtrl::new())
            .write(DcompRegnum::new())
            .write_addr::<DcompAddr0>(self.weights.addr)?;
        for i in 0..DCOMP_AMOUNT.len() {
            t.write_at(&DCOMP_AMOUNT, i, DcompAmount::new())?;
        }
        t.write_fields(&[(CvtCon5::PER_CHANNEL_CVT_EN, self.cvt.per_channel)])?
            .write_fields(&[(PadCon1::PAD_VALUE, k.pad_value)])?;
        Ok(())
    }
}
