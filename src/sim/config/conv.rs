//! The CNA and CORE of a convolution task: precisions, kernel and weight groups, feature
//! strides and the CBUF split.

use super::planar::planar_window;
use super::window::check_window;
use super::{CbufState, addr, err, inconsistent, unsupported};
use crate::regs::{cna, core, dpu};
use crate::sim::error::{At, SimError};
use crate::sim::exec::{Feature, Main, Weights, Window, depthwise_group};
use crate::task::{self, Precision, cbuf};

/// The CNA and CORE of a convolution task. Configurations derived from validated ones
/// (docs/hardware/convolution.md) are added to `derived`, one message each.
pub(super) fn conv_main(
    dpu: &task::Dpu,
    cna: &task::Cna,
    core: &task::Core,
    at: At,
    first: bool,
    cbuf_state: &mut CbufState,
    derived: &mut Vec<String>,
) -> Result<Main, SimError> {
    let prec = cna.precision;
    if core.precision != prec {
        return Err(inconsistent(
            at,
            core::MiscCfg::PROC_PRECISION,
            core.precision.code(),
            format!("CNA processes precision {}", prec.code()),
        ));
    }
    if dpu.precision != prec {
        return Err(inconsistent(
            at,
            dpu::DataFormat::PROC_PRECISION,
            dpu.precision.code(),
            format!("the CORE delivers {prec}"),
        ));
    }
    let f = &cna.feature;
    let (w, h, c) = (f.width, f.height, f.channels);
    if w == 0 || h == 0 {
        let field = if w == 0 {
            cna::DataSize0::DATAIN_WIDTH
        } else {
            cna::DataSize0::DATAIN_HEIGHT
        };
        return Err(inconsistent(at, field, 0, "an empty feature cube"));
    }
    if f.planar_width.is_some() {
        let (window, kernels) = planar_window(cna, core, at, derived)?;
        check_cbuf(cna, at, first, cbuf_state)?;
        return conv_of(cna, f.strides(), kernels, window, at);
    }
    if c == 0 || c % 32 != 0 {
        return Err(unsupported(
            at,
            cna::DataSize1::DATAIN_CHANNEL,
            c,
            "channels must be a positive multiple of 32 (one weight atom holds 32 channels)",
        ));
    }
    // Every channel holds data: the real count is the padded one, written either as
    // channels − 1 (the matmul programs, Mesa) or as (channels − 1) mod 64 (every vendor
    // convolution program, docs/hardware/convolution.md#registers).
    let real_field = f.channels_real.wrapping_sub(1);
    if f.channels_real != c && real_field != (c - 1) % 64 {
        return Err(unsupported(
            at,
            cna::DataSize1::DATAIN_CHANNEL_REAL,
            real_field,
            format!(
                "differs from {} {c} - 1 and from its value mod 64 (channel padding is not modelled)",
                cna::DataSize1::DATAIN_CHANNEL
            ),
        ));
    }
    let window = check_window(cna, core, at, derived)?;
    if cna.core_split != 0 {
        derived.push(format!(
            "{} = {:#x}, the vendor's multi-core split value, runs as no change to this core's task: its meaning is not published (docs/hardware/convolution.md#core-split)",
            cna::ConvCon2::UNK_31_24,
            cna.core_split
        ));
    }
    cvt_bypassed(cna, at)?;
    if cna.cvt.per_channel != 0 {
        return Err(unsupported(
            at,
            cna::CvtCon5::PER_CHANNEL_CVT_EN,
            cna.cvt.per_channel,
            "only the programs over the 1-channel planar input set it (the model needs 0 here)",
        ));
    }
    if !prec.is_float() && !cna.cvt.signed {
        return Err(unsupported(
            at,
            cna::CvtCon0::DATA_SIGN,
            0,
            "integer input is modelled signed only (the model needs 1)",
        ));
    }
    kernel_count(cna, core, window.depthwise, at)?;
    let kernels = cna.weights.kernels;
    check_cbuf(cna, at, first, cbuf_state)?;

    let strides = feature_strides(f, prec, at)?;
    let n = if window.depthwise { c } else { kernels };
    conv_of(cna, strides, n, window, at)
}

/// The convolution of `cna`'s feature, `strides` bytes between its lines and surfaces,
/// with `n` kernels over `window`, once the weight base is checked.
fn conv_of(
    cna: &task::Cna,
    (line, surf): (i64, i64),
    n: u32,
    window: Window,
    at: At,
) -> Result<Main, SimError> {
    let f = &cna.feature;
    let prec = cna.precision;
    let wbase = weight_base(cna, at)?;
    Ok(Main::Conv {
        feature: Feature {
            base: addr(f.addr),
            w: f.width,
            h: f.height,
            c: f.channels,
            prec,
            line,
            surf,
            planar: f.planar_width.is_some(),
        },
        weights: Weights {
            base: wbase,
            n,
            c: f.channels,
            prec,
        },
        window,
    })
}

/// The kernels of a convolution and the output channels they give: one kernel holding
/// every channel's window (depthwise, `depthwise`), else whole weight atoms of kernels.
fn kernel_count(
    cna: &task::Cna,
    core: &task::Core,
    depthwise: bool,
    at: At,
) -> Result<(), SimError> {
    let prec = cna.precision;
    let c = cna.feature.channels;
    let kernels = cna.weights.kernels;
    let g = prec.kernels_per_atom();
    if depthwise {
        if kernels != 1 {
            return Err(unsupported(
                at,
                cna::WeightSize2::WEIGHT_KERNELS,
                kernels,
                "a depthwise task has one kernel holding every channel's window (the model needs 1)",
            ));
        }
        let group = depthwise_group(prec);
        if !c.is_multiple_of(group) {
            return Err(unsupported(
                at,
                cna::DataSize1::DATAIN_CHANNEL,
                c,
                format!(
                    "depthwise {prec} weights come in groups of {group} channels; the channels must fill whole groups"
                ),
            ));
        }
        if core.out.2 != c {
            return Err(inconsistent(
                at,
                core::DataoutSize1::DATAOUT_CHANNEL,
                core.out.2 - 1,
                format!("a depthwise convolution of {c} channels has {c} output channels"),
            ));
        }
    } else if kernels == 0 || !kernels.is_multiple_of(g) {
        return Err(unsupported(
            at,
            cna::WeightSize2::WEIGHT_KERNELS,
            kernels,
            format!(
                "{prec} weights come in atoms of {g} kernels; the count must be a positive multiple"
            ),
        ));
    }
    let cc = core.out.2;
    if !depthwise && cc != kernels {
        return Err(inconsistent(
            at,
            core::DataoutSize1::DATAOUT_CHANNEL,
            cc - 1,
            format!("there are {kernels} kernels"),
        ));
    }
    Ok(())
}

/// The CNA's input converter must be bypassed: the only way the model runs it.
pub(super) fn cvt_bypassed(cna: &task::Cna, at: At) -> Result<(), SimError> {
    if !cna.cvt.bypass {
        return Err(unsupported(
            at,
            cna::CvtCon0::CVT_BYPASS,
            0,
            "the input converter is modelled bypassed only (the model needs 1)",
        ));
    }
    Ok(())
}

/// The weights' address, which the CNA needs 16-byte aligned.
fn weight_base(cna: &task::Cna, at: At) -> Result<u32, SimError> {
    let wbase = addr(cna.weights.addr);
    if !wbase.is_multiple_of(16) {
        return Err(inconsistent(
            at,
            cna::DcompAddr0::DECOMPRESS_ADDR0,
            wbase,
            "weights need 16-byte alignment",
        ));
    }
    Ok(wbase)
}

/// Line and surface strides in bytes (docs/simulator.md, "Feature addressing"), positive
/// where the cube has several lines or surfaces.
pub(super) fn feature_strides(
    f: &task::Feature,
    prec: Precision,
    at: At,
) -> Result<(i64, i64), SimError> {
    let (h, c) = (f.height, f.channels);
    if !f.group_line_off && h > 1 && !f.line_stride.is_multiple_of(4) {
        return Err(unsupported(
            at,
            cna::DmaCon1::LINE_STRIDE,
            f.line_stride,
            format!(
                "with group line fetch on ({} 0) the line stride counts 4-byte units and must be a multiple of 4",
                cna::ConvCon1::GROUP_LINE_OFF
            ),
        ));
    }
    let (line, surf) = f.strides();
    if c > prec.atom_elems() && surf <= 0 {
        return Err(inconsistent(
            at,
            cna::DmaCon2::SURF_STRIDE,
            (f.surf_stride as u32) & 0x0FFF_FFFF,
            format!("gives a surface stride of {} atoms", surf / 16),
        ));
    }
    if h > 1 && line <= 0 {
        return Err(inconsistent(
            at,
            cna::DmaCon1::LINE_STRIDE,
            f.line_stride,
            "gives a zero line stride for several lines",
        ));
    }
    Ok((line, surf))
}

/// The CBUF split, reuse bits and entries (docs/hardware/cbuf.md#split, docs/hardware/cbuf.md#reuse).
fn check_cbuf(cna: &task::Cna, at: At, first: bool, state: &mut CbufState) -> Result<(), SimError> {
    let b = &cna.cbuf;
    let f = &cna.feature;
    let prec = cna.precision;
    // FC_DATA_BANK, the weight-bank floor and the reuse rules: the task model's, which
    // the pre-submit verifier applies too.
    let held = cna.check_cbuf(first, state).map_err(|e| err(at, e))?;
    if b.data_banks + b.weight_banks > cbuf::BANKS {
        return Err(SimError::CbufOverflow {
            at,
            what: "data + weight",
            banks: cbuf::BANKS,
            needed_bytes: u64::from(b.data_banks + b.weight_banks) * cbuf::BANK_BYTES,
        });
    }
    let data_bytes = f.cube_bytes(prec);
    if data_bytes > b.data_bytes() {
        return Err(SimError::CbufOverflow {
            at,
            what: "the feature cube (data banks)",
            banks: b.data_banks,
            needed_bytes: data_bytes,
        });
    }
    // The weight banks hold at least one group of 32 kernels (64 for int4): the atom the
    // CORE consumes at once (docs/hardware/cbuf.md#weight-groups), or all weights when there are fewer.
    let kernels = cna.weights.kernels;
    let group = u64::from(prec.kernels_per_atom().max(32).min(kernels));
    let weight_need = group * cna.kernel_bytes();
    if weight_need > b.weight_bytes() {
        return Err(SimError::CbufOverflow {
            at,
            what: "one kernel group (weight banks)",
            banks: b.weight_banks,
            needed_bytes: weight_need,
        });
    }
    // One feature line in 64-byte entries; int4 rounds per pixel (W × ⌈C/128⌉), as every
    // validated int4 program does (docs/hardware/matmul-programs.md#validated-values).
    let need = if prec == Precision::Int4 {
        u64::from(f.width) * u64::from(f.channels).div_ceil(128)
    } else {
        f.row_bytes(prec).div_ceil(cbuf::ENTRY_BYTES)
    };
    if u64::from(b.data_entries) < need {
        return Err(inconsistent(
            at,
            cna::CbufCon1::DATA_ENTRIES,
            b.data_entries,
            format!(
                "one feature row of {} x {} {prec} needs {need} 64-byte entries",
                f.width, f.channels
            ),
        ));
    }
    *state = held;
    Ok(())
}
