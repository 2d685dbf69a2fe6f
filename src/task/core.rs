//! CORE: the MAC arrays and accumulators.

use super::Precision;
use super::read::{DecodeError as E, Decoded, Reader};
use crate::error::Result;
use crate::regcmd::TaskBuilder;
use crate::regs::core;

/// The CORE's configuration for a convolution task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Core {
    /// `MISC_CFG.PROC_PRECISION` (must be the CNA's).
    pub precision: Precision,
    /// `MISC_CFG.QD_EN`: integer quantised data path (set for integer inputs).
    pub qd_en: bool,
    /// `MISC_CFG.DW_EN`: depthwise convolution (with the CNA's `CONV_MODE` 3).
    pub depthwise: bool,
    /// Output width, height and channels (`DATAOUT_SIZE_0/1`, stored plus one).
    pub out: (u32, u32, u32),
}

impl Core {
    /// The CORE registers in ascending offsets.
    pub(super) fn emit(&self, t: &mut TaskBuilder) -> Result<()> {
        use core::*;
        let (w, h, c) = self.out;
        t.write_fields(&[
            (MiscCfg::QD_EN, self.qd_en.into()),
            (MiscCfg::DW_EN, self.depthwise.into()),
            (MiscCfg::PROC_PRECISION, self.precision.code()),
        ])?
        .write_fields(&[
            (DataoutSize0::DATAOUT_WIDTH, w.wrapping_sub(1)),
            (DataoutSize0::DATAOUT_HEIGHT, h.wrapping_sub(1)),
        ])?
        .write_fields(&[(DataoutSize1::DATAOUT_CHANNEL, c.wrapping_sub(1))])?
        .write(ClipTruncate::new())
        .write(Unk3030::new());
        Ok(())
    }

    /// Reads the CORE registers.
    pub(super) fn decode(r: &mut Reader<'_>) -> Decoded<Core> {
        use core::*;
        r.expect(
            ClipTruncate::CLIP_TRUNCATE,
            0,
            "accumulator truncation is not modelled",
        )?;
        let code = r.get(MiscCfg::PROC_PRECISION);
        let precision = Precision::from_code(code)
            .filter(|p| p.is_conv_input())
            .ok_or_else(|| {
                E::unsupported(MiscCfg::PROC_PRECISION, code, "reserved precision code")
            })?;
        Ok(Core {
            precision,
            qd_en: r.flag(MiscCfg::QD_EN),
            depthwise: r.flag(MiscCfg::DW_EN),
            out: (
                r.get(DataoutSize0::DATAOUT_WIDTH) + 1,
                r.get(DataoutSize0::DATAOUT_HEIGHT) + 1,
                r.get(DataoutSize1::DATAOUT_CHANNEL) + 1,
            ),
        })
    }
}
