//! The convolution window, the output geometry and the pad value.

use super::{inconsistent, unsupported};
use crate::regs::{cna, core};
use crate::sim::error::at_most;
use crate::sim::error::{At, SimError};
use crate::sim::exec::Window;
use crate::task::{self, Precision};

/// The convolution window and the output geometry (docs/hardware/convolution.md#geometry):
/// kernel, stride, dilation, padding and pad value as the validated programs use them;
/// the output size the CNA's `DATA_SIZE2/3` and the CORE's `DATAOUT_SIZE` give must be
/// the one the window gives over the task's input rows, with the right and bottom
/// padding implied by it (between −(stride − 1), the rows a floor division drops, and
/// the 15 the left and top fields hold).
pub(super) fn check_window(
    cna: &task::Cna,
    core: &task::Core,
    at: At,
    derived: &mut Vec<String>,
) -> Result<Window, SimError> {
    let k = &cna.kernel;
    let (sx, sy) = cna.conv.stride;
    kernel(cna, at, derived)?;
    let pad_value = pad_value(cna, at, derived)?;
    let (ow, oh) = output(cna, core, at)?;
    Ok(Window {
        kw: k.width,
        kh: k.height,
        stride: (sx, sy),
        dilation: k.dilation,
        pad: (k.pad_left, k.pad_top),
        pad_value,
        depthwise: k.depthwise,
        out_w: ow,
        out_h: oh,
    })
}

/// The kernel, stride, dilation and left and top padding of [`check_window`].
fn kernel(cna: &task::Cna, at: At, derived: &mut Vec<String>) -> Result<(), SimError> {
    use Precision::*;
    let k = &cna.kernel;
    let prec = cna.precision;
    let (sx, sy) = cna.conv.stride;
    let unit = k.width == 1
        && k.height == 1
        && (sx, sy) == (1, 1)
        && k.dilation == (1, 1)
        && (k.pad_left, k.pad_top) == (0, 0)
        && !k.depthwise;
    // Beyond the 1×1 window of the matmul programs: int8 and fp16 only, the precisions
    // of the vendor, Mesa and gregordinary convolution programs.
    if !unit && !matches!(prec, Int8 | Fp16) {
        return Err(unsupported(
            at,
            cna::ConvCon1::IN_PRECISION,
            prec.code(),
            format!(
                "{prec} convolutions beyond 1x1 stride 1: no board program, weight layout unknown"
            ),
        ));
    }
    for (field, v) in [
        (cna::WeightSize2::WEIGHT_WIDTH, k.width),
        (cna::WeightSize2::WEIGHT_HEIGHT, k.height),
    ] {
        if v == 0 {
            return Err(inconsistent(at, field, 0, "an empty kernel"));
        }
    }
    if sx == 0 {
        return Err(inconsistent(
            at,
            cna::ConvCon3::CONV_X_STRIDE,
            0,
            "stride 0",
        ));
    }
    if sy == 0 {
        return Err(inconsistent(
            at,
            cna::ConvCon3::CONV_Y_STRIDE,
            0,
            "stride 0",
        ));
    }
    if k.dilation != (1, 1) && prec == Int8 {
        derived.push(format!(
            "int8 dilation {:?}: the ATROUS fields are board-checked on fp16 convolutions only",
            k.dilation
        ));
    }
    if k.depthwise && k.dilation != (1, 1) {
        derived.push(format!(
            "depthwise convolution with dilation {:?}: no board program combines them",
            k.dilation
        ));
    }
    let (ex, ey) = k.extent();
    if k.pad_left >= ex {
        return Err(unsupported(
            at,
            cna::PadCon0::PAD_LEFT,
            k.pad_left,
            format!(
                "padding as wide as the {ex}-column window: outputs of padding only are not validated"
            ),
        ));
    }
    if k.pad_top >= ey {
        return Err(unsupported(
            at,
            cna::PadCon0::PAD_TOP,
            k.pad_top,
            format!(
                "padding as high as the {ey}-row window: outputs of padding only are not validated"
            ),
        ));
    }
    Ok(())
}

/// The output size of [`check_window`]: the CNA's and the CORE's, and the right and
/// bottom padding it implies. Returns the output's width and height.
fn output(cna: &task::Cna, core: &task::Core, at: At) -> Result<(u32, u32), SimError> {
    let f = &cna.feature;
    let k = &cna.kernel;
    let (w, h) = (f.width, f.height);
    let (sx, sy) = cna.conv.stride;
    let (ex, ey) = k.extent();
    let ow = cna.conv.out_width;
    if ow == 0 || cna.conv.out_atomics == 0 || !cna.conv.out_atomics.is_multiple_of(ow) {
        return Err(inconsistent(
            at,
            cna::DataSize3::DATAOUT_ATOMICS,
            cna.conv.out_atomics,
            format!(
                "the output is {} x {ow}: the pixels must be whole lines",
                cna::DataSize2::DATAOUT_WIDTH
            ),
        ));
    }
    let oh = cna.conv.out_atomics / ow;
    // Right / bottom padding the sizes imply.
    let implied = |o: u32, s: u32, e: u32, n: u32, p: u32| {
        i64::from(o - 1) * i64::from(s) + i64::from(e) - i64::from(n) - i64::from(p)
    };
    let right = implied(ow, sx, ex, w, k.pad_left);
    let bottom = implied(oh, sy, ey, h, k.pad_top);
    if right < -(i64::from(sx) - 1) || right > 15 || right >= i64::from(ex) {
        return Err(inconsistent(
            at,
            cna::DataSize2::DATAOUT_WIDTH,
            ow,
            format!(
                "{ow} output columns of a {ex}-column window at stride {sx} over {w} columns padded {} on the left need {right} columns of padding on the right",
                k.pad_left
            ),
        ));
    }
    if bottom < -(i64::from(sy) - 1) || bottom > 15 || bottom >= i64::from(ey) {
        return Err(inconsistent(
            at,
            cna::DataSize3::DATAOUT_ATOMICS,
            cna.conv.out_atomics,
            format!(
                "{oh} output rows of a {ey}-row window at stride {sy} over {h} rows padded {} on top need {bottom} rows of padding below",
                k.pad_top
            ),
        ));
    }
    if k.depthwise != core.depthwise {
        return Err(inconsistent(
            at,
            core::MiscCfg::DW_EN,
            core.depthwise.into(),
            format!(
                "{} is {}",
                cna::ConvCon1::CONV_MODE,
                if k.depthwise { 3 } else { 0 }
            ),
        ));
    }
    let (cw, ch, _) = core.out;
    if cw != ow {
        return Err(inconsistent(
            at,
            core::DataoutSize0::DATAOUT_WIDTH,
            cw - 1,
            format!("the output is {ow} wide"),
        ));
    }
    if ch != oh {
        return Err(inconsistent(
            at,
            core::DataoutSize0::DATAOUT_HEIGHT,
            ch - 1,
            format!("the output is {oh} high"),
        ));
    }
    Ok((ow, oh))
}

/// `PAD_CON1`: the int8 value as Mesa writes it (sign-extended, or its low byte twice,
/// optionally with the upper half set: Mesa `rkt_regcmd.c`), fp16 bits in the low half
/// (0 in every program; another value is derived).
pub(super) fn pad_value(
    cna: &task::Cna,
    at: At,
    derived: &mut Vec<String>,
) -> Result<i64, SimError> {
    let v = cna.kernel.pad_value;
    let field = cna::PadCon1::PAD_VALUE;
    match cna.precision {
        Precision::Int8 => {
            let b = v & 0xFF;
            let twice = b | (b << 8);
            if v == (b as u8 as i8 as i32 as u32) || v == twice || v == (0xFFFF_0000 | twice) {
                Ok(i64::from(b as u8 as i8))
            } else {
                Err(unsupported(
                    at,
                    field,
                    v,
                    "int8 padding values are modelled as Mesa writes them: sign-extended, or the byte twice",
                ))
            }
        }
        Precision::Fp16 => {
            let why = "an fp16 padding value holds the half's bits in the low 16 bits";
            at_most(at, (field, v), 0xFFFF, why)?;
            if v != 0 {
                derived.push(format!(
                    "fp16 padding value {:#06x}: every board program pads with 0",
                    v
                ));
            }
            Ok(i64::from(v))
        }
        _ if v == 0 => Ok(0),
        p => Err(unsupported(
            at,
            field,
            v,
            format!("{p} convolutions pad with 0 only"),
        )),
    }
}
