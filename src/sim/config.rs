//! From a decoded task model to the checked description the data path executes.
//!
//! The registers are read once, by [`task::Task::decode`] (which reads every field of
//! every started block). This file is where the simulator is strict about the *values*:
//! combinations the model does not execute, values no board-validated program uses
//! (docs/simulator.md, "Validated values"), and contradictions between blocks are named
//! errors, never silently ignored.

use super::error::{At, SimError};
use super::exec::{Checked, Cube, Feature, Main, Weights, Window};
use crate::regs::{Register, cna, core, dpu, dpu_rdma};
use crate::task::{self, DecodeError, DecodeErrorKind, DpuInput, Precision, cbuf};

/// Reads one register group, remembering which registers no task of the current kick
/// wrote.
pub(super) struct View<'a> {
    pub vals: &'a [u32],
    pub written: &'a [u64],
    /// The serial number of the last task before the kick: a register whose writer's
    /// serial is above it was written by this kick's chain (this task, or an earlier task
    /// in the same group, whose values an incremental body relies on).
    pub kick_start: u64,
    pub at: At,
    /// Registers read whose value comes from an earlier kick's list or from reset, in
    /// the order first read.
    pub stale: Vec<u16>,
    /// One bit per register word: already in `stale` (a constant-time membership test,
    /// so a task reading every register costs linear time).
    pub stale_seen: Vec<u64>,
}

impl<'a> View<'a> {
    /// A view of one register group for a task of the kick that started after the task
    /// with serial number `kick_start`.
    pub fn new(vals: &'a [u32], written: &'a [u64], kick_start: u64, at: At) -> View<'a> {
        View {
            vals,
            written,
            kick_start,
            at,
            stale: Vec::new(),
            stale_seen: vec![0; vals.len().div_ceil(64)],
        }
    }
}

impl task::RegisterFile for View<'_> {
    fn value(&mut self, offset: u16) -> u32 {
        let i = offset as usize / 4;
        if self.written.get(i).is_some_and(|&w| w <= self.kick_start)
            && let Some(bits) = self.stale_seen.get_mut(i / 64)
            && *bits & (1 << (i % 64)) == 0
        {
            *bits |= 1 << (i % 64);
            self.stale.push(offset);
        }
        self.vals.get(i).copied().unwrap_or(0)
    }

    fn peek(&mut self, offset: u16) -> u32 {
        self.vals.get(offset as usize / 4).copied().unwrap_or(0)
    }
}

/// What the previous convolution task on the same core left in the CBUF, for the reuse
/// bits (the task model's [`task::CbufHeld`]).
pub(super) type CbufState = task::CbufHeld;

pub(super) fn err(at: At, e: DecodeError) -> SimError {
    match e.kind {
        DecodeErrorKind::Unsupported => SimError::Unsupported {
            at,
            register: e.register,
            field: e.field,
            value: e.value,
            why: e.why,
        },
        DecodeErrorKind::Inconsistent => SimError::Inconsistent {
            at,
            register: e.register,
            field: e.field,
            value: e.value,
            why: e.why,
        },
    }
}

pub(super) fn unsupported<R: Register>(
    at: At,
    f: crate::regs::Field<R>,
    value: u32,
    why: impl Into<String>,
) -> SimError {
    err(at, DecodeError::unsupported(f, value, why))
}

pub(super) fn inconsistent<R: Register>(
    at: At,
    f: crate::regs::Field<R>,
    value: u32,
    why: impl Into<String>,
) -> SimError {
    err(at, DecodeError::inconsistent(f, value, why))
}

pub(super) fn addr(a: crate::regcmd::DmaAddr) -> u32 {
    match a {
        crate::regcmd::DmaAddr::Fixed(a) => a,
        // Decoded tasks only hold fixed addresses.
        crate::regcmd::DmaAddr::Reloc { .. } => 0,
    }
}

/// Decodes the registers of one task and checks them. `cbuf` is what the previous task
/// of the chain left in the CBUF (`None` for the first task of a chain).
pub(super) fn task(
    v: &mut View<'_>,
    enable: crate::regcmd::BlockMask,
    first: bool,
    cbuf: &mut CbufState,
) -> Result<Checked, SimError> {
    let at = v.at;
    let t = task::Task::decode(v, enable).map_err(|e| err(at, e))?;
    check(&t, at, first, cbuf)
}

/// Checks a decoded task against what the model executes and the validated values.
pub(super) fn check(
    t: &task::Task,
    at: At,
    first: bool,
    cbuf: &mut CbufState,
) -> Result<Checked, SimError> {
    let enable = t.enable();
    if t.ppu.is_some() || t.ppu_rdma.is_some() {
        // Pooling (the PPU does not touch the CBUF): its own checks, super::ppu.
        return super::ppu::check(t, at).map(|p| Checked::Ppu(Box::new(p)));
    }
    let Some(dpu) = &t.dpu else {
        return Err(err(
            at,
            DecodeError::enable_error(
                enable.0,
                "the model runs CNA+CORE+DPU (0x0D, 0x1D) or DPU+DPU_RDMA (0x18) tasks",
            ),
        ));
    };
    super::depthwise::modes_agree(t, dpu, at)?;
    let mut derived = Vec::new();
    let main = match (&t.cna, &t.core) {
        (Some(cna), Some(core)) => {
            if dpu.input == DpuInput::Flying {
                return Err(inconsistent(
                    at,
                    dpu::FeatureModeCfg::FLYING_MODE,
                    1,
                    "the op-enable entry starts CNA and CORE, whose output the DPU would ignore",
                ));
            }
            conv_main(dpu, cna, core, at, first, cbuf, &mut derived)?
        }
        (None, None) => {
            if dpu.input == DpuInput::Core {
                return Err(inconsistent(
                    at,
                    dpu::FeatureModeCfg::FLYING_MODE,
                    0,
                    "a DPU-only task must take its main data from DPU_RDMA (flying mode)",
                ));
            }
            Main::Flying(flying_cube(t, dpu, at)?)
        }
        _ => {
            return Err(err(
                at,
                DecodeError::enable_error(
                    enable.0,
                    "the model runs CNA+CORE+DPU (0x0D, 0x1D) or DPU+DPU_RDMA (0x18) tasks",
                ),
            ));
        }
    };
    let mut task = super::check::dpu(t, dpu, main, at)?;
    task.unvalidated.extend(derived);
    Ok(Checked::Dpu(Box::new(task)))
}

/// The CNA and CORE of a convolution task. Configurations derived from validated ones
/// (docs/hardware/convolution.md) are added to `derived`, one message each.
fn conv_main(
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
        return planar_main(cna, core, at, first, cbuf_state, derived);
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
    let kernels = cna.weights.kernels;
    let g = prec.kernels_per_atom();
    if window.depthwise {
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
    if !window.depthwise && cc != kernels {
        return Err(inconsistent(
            at,
            core::DataoutSize1::DATAOUT_CHANNEL,
            cc - 1,
            format!("there are {kernels} kernels"),
        ));
    }
    check_cbuf(cna, at, first, cbuf_state)?;

    let (line, surf) = feature_strides(f, prec, at)?;
    let wbase = weight_base(cna, at)?;
    Ok(Main::Conv {
        feature: Feature {
            base: addr(f.addr),
            w,
            h,
            c,
            prec,
            line,
            surf,
            planar: false,
        },
        weights: Weights {
            base: wbase,
            n: if window.depthwise { c } else { kernels },
            c,
            prec,
        },
        window,
    })
}

/// A convolution over the 1-channel planar input (docs/hardware/convolution.md#planar-input):
/// the vendor programs' registers exactly (fp16, one real channel padded to 8, lines of
/// `DATAIN_WIDTH` = the real width rounded up to 8 elements, `LINE_STRIDE` equal to it,
/// `SURF_STRIDE` a whole number of lines, `DATA_ENTRIES` = `DATAIN_WIDTH` × rows), and
/// only the one 1×1 kernel whose weight layout needs no guess. Channels 1..7 are taken as
/// zero, which is derived (every captured weight for them is zero, so no capture tells).
fn planar_main(
    cna: &task::Cna,
    core: &task::Core,
    at: At,
    first: bool,
    cbuf_state: &mut CbufState,
    derived: &mut Vec<String>,
) -> Result<Main, SimError> {
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
                "over the planar input only one 1x1 stride-1 kernel is modelled ({}x{}, {} kernels here): the order of 8-channel weights of several kernels or taps is unknown",
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
    check_cbuf(cna, at, first, cbuf_state)?;
    let (line, plane) = f.strides();
    let wbase = weight_base(cna, at)?;
    derived.push(format!(
        "{} = {}: the 1-channel planar input's padded channels 1..7 are taken as zero (every captured weight for them is zero, so no capture tells), and the CORE's channels 1..15 beyond the one kernel as zero",
        cna::ConvCon1::ARGB_IN,
        PLANAR_ARGB_IN_VALUE
    ));
    Ok(Main::Conv {
        feature: Feature {
            base: addr(f.addr),
            w: f.width,
            h: f.height,
            c: f.channels,
            prec,
            line,
            surf: plane,
            planar: true,
        },
        weights: Weights {
            base: wbase,
            n: cc,
            c: f.channels,
            prec,
        },
        window,
    })
}

/// The CNA's input converter must be bypassed: the only way the model runs it.
fn cvt_bypassed(cna: &task::Cna, at: At) -> Result<(), SimError> {
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

/// `CONV_CON1.ARGB_IN` of the planar input (the task model accepts no other non-zero value).
const PLANAR_ARGB_IN_VALUE: u32 = 8;

/// Channels the CORE delivers from the one kernel over the planar input: one fp16 kernel
/// group, channel 0 computed, channels 1..15 zero.
pub(super) const PLANAR_CORE_CHANNELS: u32 = 16;

/// Channels per depthwise weight group: 32 fp16 (gregordinary/rockchip-npu-notes
/// `depthwise-conv.md`, a board sweep), 64 int8 (Mesa `rkt_coefs.c`).
pub(super) fn depthwise_group(prec: Precision) -> u32 {
    if prec == Precision::Int8 { 64 } else { 32 }
}

/// Line and surface strides in bytes (docs/simulator.md, "Feature addressing"), positive
/// where the cube has several lines or surfaces.
fn feature_strides(f: &task::Feature, prec: Precision, at: At) -> Result<(i64, i64), SimError> {
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

/// The convolution window and the output geometry (docs/hardware/convolution.md#geometry):
/// kernel, stride, dilation, padding and pad value as the validated programs use them;
/// the output size the CNA's `DATA_SIZE2/3` and the CORE's `DATAOUT_SIZE` give must be
/// the one the window gives over the task's input rows, with the right and bottom
/// padding implied by it (between −(stride − 1), the rows a floor division drops, and
/// the 15 the left and top fields hold).
fn check_window(
    cna: &task::Cna,
    core: &task::Core,
    at: At,
    derived: &mut Vec<String>,
) -> Result<Window, SimError> {
    use Precision::*;
    let f = &cna.feature;
    let k = &cna.kernel;
    let prec = cna.precision;
    let (w, h) = (f.width, f.height);
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
    let pad_value = pad_value(cna, at, derived)?;
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

/// `PAD_CON1`: the int8 value as Mesa writes it (sign-extended, or its low byte twice,
/// optionally with the upper half set: Mesa `rkt_regcmd.c`), fp16 bits in the low half
/// (0 in every program; another value is derived).
fn pad_value(cna: &task::Cna, at: At, derived: &mut Vec<String>) -> Result<i64, SimError> {
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
            if v > 0xFFFF {
                return Err(unsupported(
                    at,
                    field,
                    v,
                    "an fp16 padding value holds the half's bits in the low 16 bits",
                ));
            }
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

/// A cube DPU_RDMA would read but is not started to: never read, the task stalls first.
pub(super) fn unfetched(w: u32, h: u32, c: u32, prec: Precision, register: &'static str) -> Cube {
    Cube {
        base: 0,
        w,
        h,
        c,
        prec,
        line: 0,
        surf: 0,
        register,
        block: "DPU_RDMA",
    }
}

/// The MRDMA cube of a flying-mode task.
fn flying_cube(t: &task::Task, dpu: &task::Dpu, at: At) -> Result<Cube, SimError> {
    let Some(rdma) = &t.dpu_rdma else {
        // The DPU waits for data nobody fetches: the task stalls (pc.rs) before this cube
        // is read.
        let (w, h, c) = dpu.cube;
        return Ok(unfetched(
            w,
            h,
            c,
            dpu.precision,
            dpu_rdma::RdmaSrcBaseAddr::NAME,
        ));
    };
    if !rdma.flying {
        return Err(unsupported(
            at,
            dpu_rdma::RdmaFeatureModeCfg::FLYING_MODE,
            0,
            "the DPU runs in flying mode (the model needs 1)",
        ));
    }
    let Some(m) = &rdma.mrdma else {
        return Err(unsupported(
            at,
            dpu_rdma::RdmaFeatureModeCfg::MRDMA_DISABLE,
            1,
            "flying mode reads the main data through MRDMA (the model needs 0)",
        ));
    };
    if rdma.precision != dpu.precision {
        return Err(inconsistent(
            at,
            dpu_rdma::RdmaFeatureModeCfg::IN_PRECISION,
            rdma.precision.code(),
            format!(
                "the DPU processes {} ({} {})",
                dpu.precision,
                dpu_rdma::RdmaFeatureModeCfg::PROC_PRECISION,
                rdma.precision.code()
            ),
        ));
    }
    if rdma.precision == Precision::Int4 {
        return Err(unsupported(
            at,
            dpu_rdma::RdmaFeatureModeCfg::IN_PRECISION,
            rdma.precision.code(),
            "4-bit flying input",
        ));
    }
    let (w, h, c) = rdma.cube;
    let (line, surf) = rdma.mrdma_strides(m);
    let cube = Cube {
        base: addr(m.addr),
        w,
        h,
        c,
        prec: rdma.precision,
        line,
        surf,
        register: dpu_rdma::RdmaSrcBaseAddr::NAME,
        block: "DPU_RDMA",
    };
    if c % cube.atom_elems() != 0 {
        return Err(unsupported(
            at,
            dpu_rdma::RdmaDataCubeChannel::CHANNEL,
            c - 1,
            "channels must fill whole 16-byte atoms",
        ));
    }
    Ok(cube)
}
