//! The limits a convolution is checked against before any task is built.

use super::{Conv2d, ConvOut, invalid, requant_scale_shift, unsupported};
use crate::error::Result;
use crate::kernels::ops::MAX_CUBE_DIM;
use crate::regs::cna as cna_regs;
use crate::task::Precision;

impl Conv2d {
    /// Every limit of the registers and of the modelled hardware, as typed errors.
    pub fn check(&self) -> Result<()> {
        let p = self.prec();
        if !matches!(p, Precision::Int8 | Precision::Fp16) {
            return Err(unsupported(format!(
                "{p} input: int8 and fp16 convolutions are supported"
            )));
        }
        let out_ok = matches!(
            (p, self.out),
            (Precision::Int8, ConvOut::Int32 | ConvOut::Int8 { .. })
                | (Precision::Fp16, ConvOut::Fp16)
        );
        if !out_ok {
            return Err(unsupported(format!("{p} input with {:?} output", self.out)));
        }
        self.check_registers()?;
        let (ey, ex) = self.extent();
        let pad = self.pad;
        for (name, v, e) in [
            ("top", pad.top, ey),
            ("bottom", pad.bottom, ey),
            ("left", pad.left, ex),
            ("right", pad.right, ex),
        ] {
            if v >= e || v > cna_regs::PadCon0::PAD_TOP.max() {
                return Err(unsupported(format!(
                    "{name} padding {v}: at most the window's extent {e} − 1 and 15"
                )));
            }
        }
        let (h, w) = (self.input.height, self.input.width);
        if h + pad.top + pad.bottom < ey || w + pad.left + pad.right < ex {
            return Err(invalid(format!(
                "a {ey}x{ex} window does not fit a padded {h}x{w} input"
            )));
        }
        if self.out_channels == 0 {
            return Err(invalid("0 output channels".into()));
        }
        if self.out_channels > MAX_CUBE_DIM {
            return Err(unsupported(format!(
                "{} output channels; the output cube holds at most {}",
                self.out_channels, MAX_CUBE_DIM
            )));
        }
        if self.groups == 0 {
            return Err(invalid("0 groups".into()));
        }
        if self.depthwise {
            if self.groups != 1 {
                return Err(invalid(
                    "depthwise with groups: depthwise is the one-channel-per-group case".into(),
                ));
            }
            if self.out_channels != self.input.channels {
                return Err(unsupported(format!(
                    "depthwise with {} output channels of {} input channels (channel multipliers are not supported)",
                    self.out_channels, self.input.channels
                )));
            }
        }
        if self.groups > 1 {
            let (ci, co) = (self.input.channels, self.out_channels);
            if !ci.is_multiple_of(self.groups) || !co.is_multiple_of(self.groups) {
                return Err(invalid(format!(
                    "{ci} input and {co} output channels in {} groups",
                    self.groups
                )));
            }
            if !self.group_in().is_multiple_of(32) {
                return Err(unsupported(format!(
                    "{} input channels per group: a group's channel window must fill whole 32-channel blocks",
                    self.group_in()
                )));
            }
            let kpa = p.kernels_per_atom();
            if !self.group_out().is_multiple_of(kpa) {
                return Err(unsupported(format!(
                    "{} output channels per group: a group's output window must fill whole {kpa}-kernel atoms",
                    self.group_out()
                )));
            }
        }
        if let ConvOut::Int8 { multiplier } = self.out {
            requant_scale_shift(multiplier)?;
        }
        let c = self.task_in_channels();
        if c > cna_regs::DataSize1::DATAIN_CHANNEL.max() {
            return Err(unsupported(format!("{c} channels per task")));
        }
        if w > cna_regs::DataSize0::DATAIN_WIDTH.max() || h > MAX_CUBE_DIM {
            return Err(unsupported(format!("a {w}-wide, {h}-high input")));
        }
        Ok(())
    }

    /// The kernel size, stride and dilation against the ranges of their registers.
    fn check_registers(&self) -> Result<()> {
        let (kh, kw) = self.kernel;
        let kmax = cna_regs::WeightSize2::WEIGHT_WIDTH.max();
        for (name, v, max) in [
            ("kernel height", kh, kmax),
            ("kernel width", kw, kmax),
            (
                "stride y",
                self.stride.0,
                cna_regs::ConvCon3::CONV_Y_STRIDE.max(),
            ),
            (
                "stride x",
                self.stride.1,
                cna_regs::ConvCon3::CONV_X_STRIDE.max(),
            ),
            (
                "dilation y",
                self.dilation.0,
                cna_regs::ConvCon3::ATROUS_Y_DILATION.max() + 1,
            ),
            (
                "dilation x",
                self.dilation.1,
                cna_regs::ConvCon3::ATROUS_X_DILATION.max() + 1,
            ),
        ] {
            if v == 0 || v > max {
                return Err(unsupported(format!(
                    "{name} {v}; the registers hold 1..={max}"
                )));
            }
        }
        Ok(())
    }
}
