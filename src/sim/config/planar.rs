//! A convolution over the 1-channel planar input: the vendor programs' registers exactly.

use super::conv::cvt_bypassed;
use super::window::check_window;
use super::{inconsistent, unsupported};
use crate::regs::{cna, core};
use crate::sim::error::{At, SimError};
use crate::sim::exec::PLANAR_CORE_CHANNELS;
use crate::sim::exec::Window;
use crate::task::{self, Precision};

/// A convolution over the 1-channel planar input (docs/hardware/convolution.md#planar-input):
/// the vendor programs' registers exactly (fp16, one real channel padded to 8, lines of
/// `DATAIN_WIDTH` = the real width rounded up to 8 elements, `LINE_STRIDE` equal to it,
/// `SURF_STRIDE` a whole number of lines, `DATA_ENTRIES` = `DATAIN_WIDTH` × rows), and
/// only the one 1×1 kernel whose weight layout needs no guess. Channels 1..7 are taken as
/// zero, which is derived (every captured weight for them is zero, so no capture tells).
/// Gives the window and the kernels the CORE delivers; the caller checks the CBUF split
/// and the weights as for any convolution.
pub(super) fn planar_window(
    cna: &task::Cna,
    core: &task::Core,
    at: At,
    derived: &mut Vec<String>,
) -> Result<(Window, u32), SimError> {
    feature(cna, at)?;
    let window = check_window(cna, core, at, derived)?;
    let unit =
        window.taps() == 1 && window.stride == (1, 1) && window.pad == (0, 0) && !window.depthwise;
    if !unit || cna.weights.kernels != 1 {
        let (field, v) = if unit {
            (cna::WeightSize2::WEIGHT_KERNELS, cna.weights.kernels)
        } else {
            (cna::WeightSize2::WEIGHT_WIDTH, cna.kernel.width)
        };
        return Err(unsupported(
            at,
            field,
            v,
            format!(
                "over the planar input only one 1x1 stride-1 kernel is modelled ({}x{}, {} kernels here): no board output confirms the order in which the 8-channel weights of several kernels or taps are read: the inline cases of allbilly/rk3588 hold an all-zero input and output, which every order reproduces (their vendor packing is [16-kernel group][tap][kernel])",
                cna.kernel.width, cna.kernel.height, cna.weights.kernels
            ),
        ));
    }
    // The CORE delivers one fp16 kernel group of 16 channels, of which the one kernel
    // fills channel 0 (every planar program: DATAOUT_CHANNEL 15 with one kernel).
    let cc = core.out.2;
    if cc != PLANAR_CORE_CHANNELS {
        return Err(unsupported(
            at,
            core::DataoutSize1::DATAOUT_CHANNEL,
            cc.wrapping_sub(1),
            format!(
                "every planar program with one kernel has the CORE deliver {PLANAR_CORE_CHANNELS} channels"
            ),
        ));
    }
    cvt_bypassed(cna, at)?;
    // The vendor's planar programs enable 16 channels' converters (0xFFFF) with the
    // converter bypassed: no conversion either way.
    if !matches!(cna.cvt.per_channel, 0 | 0xFFFF) {
        return Err(unsupported(
            at,
            cna::CvtCon5::PER_CHANNEL_CVT_EN,
            cna.cvt.per_channel,
            "the planar programs write 0xFFFF with the converter bypassed; other masks are not modelled",
        ));
    }
    derived.push(format!(
        "{} = {}: the 1-channel planar input's padded channels 1..7 are taken as zero (every captured weight for them is zero, so no capture tells), and the CORE's channels 1..15 beyond the one kernel as zero",
        cna::ConvCon1::ARGB_IN,
        PLANAR_ARGB_IN_VALUE
    ));
    Ok((window, cc))
}

/// The planar feature's registers: fp16, one real channel padded to 8, lines of
/// `DATAIN_WIDTH` elements `LINE_STRIDE` apart, `SURF_STRIDE` a whole number of lines and
/// `DATA_ENTRIES` = `DATAIN_WIDTH` × rows, as in every program.
fn feature(cna: &task::Cna, at: At) -> Result<(), SimError> {
    let f = &cna.feature;
    let prec = cna.precision;
    let pw = f.planar_width.unwrap_or(f.width);
    if prec != Precision::Fp16 {
        return Err(unsupported(
            at,
            cna::ConvCon1::IN_PRECISION,
            prec.code(),
            "the 1-channel planar input is modelled for fp16, the only precision a capture shows",
        ));
    }
    if f.channels != 8 {
        return Err(unsupported(
            at,
            cna::DataSize1::DATAIN_CHANNEL,
            f.channels,
            "every program with the 1-channel planar input pads its channel to 8",
        ));
    }
    if f.channels_real != 1 {
        return Err(unsupported(
            at,
            cna::DataSize1::DATAIN_CHANNEL_REAL,
            f.channels_real.wrapping_sub(1),
            "the planar input is modelled with one real channel (field 0), as every program has it",
        ));
    }
    if pw != f.width.next_multiple_of(8) {
        return Err(unsupported(
            at,
            cna::DataSize0::DATAIN_WIDTH,
            pw,
            format!(
                "every program pads a planar line of {} {} elements to a multiple of 8",
                cna::FcDataSize0::DMA_WIDTH,
                f.width
            ),
        ));
    }
    if f.line_stride != pw {
        return Err(unsupported(
            at,
            cna::DmaCon1::LINE_STRIDE,
            f.line_stride,
            format!(
                "every program sets it to {} {pw}; the unit of another value is unknown",
                cna::DataSize0::DATAIN_WIDTH
            ),
        ));
    }
    let surf = f.surf_stride;
    if surf < 0 || surf % pw as i32 != 0 || (surf as u32 / pw).saturating_add(1) < f.height {
        return Err(unsupported(
            at,
            cna::DmaCon2::SURF_STRIDE,
            (surf as u32) & 0x0FFF_FFFF,
            format!(
                "every program sets it to {} x (plane lines - 1), at least the {} lines read",
                cna::DmaCon1::LINE_STRIDE,
                f.height
            ),
        ));
    }
    let entries = u64::from(pw) * u64::from(f.height);
    if u64::from(cna.cbuf.data_entries) != entries {
        return Err(inconsistent(
            at,
            cna::CbufCon1::DATA_ENTRIES,
            cna.cbuf.data_entries,
            format!(
                "every planar program sets {} {pw} x {} rows = {entries}",
                cna::DataSize0::DATAIN_WIDTH,
                f.height
            ),
        ));
    }
    Ok(())
}

/// `CONV_CON1.ARGB_IN` of the planar input (the task model accepts no other non-zero value).
const PLANAR_ARGB_IN_VALUE: u32 = 8;
