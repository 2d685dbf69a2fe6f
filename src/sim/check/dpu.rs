//! The DPU: output cube, output converter, layout values every board-validated program
//! agrees on, and the assembly of the executed task from the checked stages.

use super::Allowed::{Is, Range, When};
use super::Why::{Text, With};
use super::dequant::fp32_dequant;
use super::ew::ew_stage;
use super::stage::{float_stage_notes, stage, stage_operands};
use super::{Envelope, check};
use crate::regs::Block;
use crate::regs::{Register, dpu, dpu_rdma};
use crate::sim::error::{At, SimError};
use crate::sim::error::{inconsistent, unsupported};
use crate::sim::exec::{Cube, Ew, EwSrc, Main, OutCvt, Task};
use crate::sim::exec::{PLANAR_CORE_CHANNELS, addr};
use crate::sim::lut::Lut;
use crate::task::{self, DpuInput, Precision};

/// The output precisions the model runs from each processing precision.
const OUTPUTS: [(Precision, &[Precision]); 7] = {
    use Precision::*;
    [
        (Int8, &[Int8, Int32, Fp32]),
        (Int4, &[Int16]),
        (Int16, &[Int16, Int32]),
        (Fp16, &[Fp16, Fp32]),
        (Bf16, &[Bf16, Fp32]),
        (Int32, &[Int32, Fp32, Int8]),
        (Fp32, &[Fp32, Fp16]),
    ]
};

/// A task whose EW stage holds a LUT.
fn lut_task(d: &task::Dpu) -> bool {
    d.ew.as_ref().is_some_and(|e| e.lut.is_some())
}

/// The output converter as the data path runs it.
fn out_cvt(d: &task::Dpu) -> OutCvt {
    let c = &d.out_cvt;
    OutCvt {
        offset: i64::from(c.offset),
        scale: i64::from(c.scale),
        shift: c.shift,
        add_first: c.add_first,
        half_up: c.round_half_up,
    }
}

/// The board-run fp16 depthwise program enables the CPEND adder with Mesa's int8
/// operand 0x80 and its outputs equal the plain depthwise sums; what the adder does
/// with it on a float path is not published, so that exact value runs as no change.
fn dw_cpend(d: &task::Dpu) -> bool {
    d.depthwise && d.precision == Precision::Fp16 && d.ow.ow_op == 0x80 && d.ow.ow_src == 0
}

/// The output converter and the CPEND adder, as the model runs them.
const CONVERTER: &[Envelope<task::Dpu>] = {
    use dpu::{BsOwOp, OutCvtScale, OutCvtShift};
    &[
        Envelope::new(
            OutCvtShift::MINUS_EXP,
            |d| (!lut_task(d)).then_some(d.out_cvt.minus_exp),
            Is(0),
            Text("the exponent adjustment is modelled in the LUT's float decode only"),
        ),
        Envelope::new(
            OutCvtShift::OUT_CVT_SHIFT,
            |d| Some(d.out_cvt.shift),
            Range(0, 63),
            Text("shifts above 63"),
        ),
        Envelope::new(
            OutCvtScale::OUT_CVT_SCALE,
            |d| Some(d.out_cvt.scale),
            When(|d| {
                !(d.precision.is_float() || d.out.precision.is_float())
                    || out_cvt(d).is_identity()
                    || lut_task(d)
            }),
            Text(
                "float paths are modelled with the identity converter only (scale 1, offset 0, shift 0)",
            ),
        ),
        Envelope::new(
            OutCvtScale::FP32TOFP16_EN,
            |d| (d.out.precision != Precision::Fp16).then_some(d.out_cvt.fp32_to_fp16.into()),
            Is(0),
            With(|d: &task::Dpu| format!("the output precision is {}", d.out.precision)),
        )
        .inconsistent(),
        Envelope::new(
            BsOwOp::OW_OP,
            |d| Some(d.ow.ow_op),
            When(|d| d.ow.od_bypass || dw_cpend(d) || (d.ow.ow_op == 0 && d.ow.ow_src == 0)),
            Text("the CPEND (zero-point) adder is modelled only bypassed or adding 0"),
        ),
    ]
};

/// Checks the DPU's registers against the main data and builds the executed task.
pub(in crate::sim) fn dpu(
    t: &task::Task,
    d: &task::Dpu,
    main: Main,
    at: At,
) -> Result<Task, SimError> {
    let out = out_cube(d, &main, at)?;
    let (proc, out_prec) = (d.precision, out.prec);
    let runs = OUTPUTS
        .iter()
        .any(|(p, outs)| *p == proc && outs.contains(&out_prec));
    if !runs {
        return Err(unsupported(
            at,
            dpu::DataFormat::OUT_PRECISION,
            out_prec.code(),
            format!("{out_prec} output from {proc} processing is not modelled"),
        ));
    }
    validated_layout(d, at)?;
    // The widening is MRDMA's: with MRDMA disabled the flag is inert.
    if let Some(r) = &t.dpu_rdma
        && r.mrdma.is_some()
        && r.fp16_to_fp32
        && r.precision != Precision::Fp16
    {
        return Err(unsupported(
            at,
            dpu_rdma::RdmaFeatureModeCfg::MRDMA_FP16TOFP32_EN,
            1,
            format!("widens fp16 main data, but DPU_RDMA reads {}", r.precision),
        ));
    }
    let mut unvalidated = derived(d, &out);
    let float = proc.is_float();
    // fp32 processing: the dequantisation task, its published values only, or a LUT task.
    let (mut bs, bs_f16_mul) = if proc == Precision::Fp32 && !lut_task(d) {
        (None, Some(fp32_dequant(t, d, at, &mut unvalidated)?))
    } else {
        (stage(&d.bs, float, at, false)?, None)
    };
    let mut bn = stage(&d.bn, float, at, true)?;
    stage_operands(t, d, &mut bs, &mut bn, at, &mut unvalidated)?;
    if float {
        // The fp32 pipeline's BS is the dequantisation task's, checked by `fp32_dequant`.
        if proc != Precision::Fp32 || lut_task(d) {
            float_stage_notes(&d.bs, proc, false, &mut unvalidated);
        }
        float_stage_notes(&d.bn, proc, true, &mut unvalidated);
    }
    let (ew, lut) = ew_and_lut(t, d, &out, at, &mut unvalidated)?;
    check(at, d, CONVERTER)?;
    let cna = t.cna.as_ref();
    // Float pipelines: the BS/BN stages run with fp16/fp32 register operands.
    let (bs, bs_float) = if float { (None, bs) } else { (bs, None) };
    let (bn, bn_float) = if float { (None, bn) } else { (bn, None) };
    Ok(Task {
        enable: t.enable(),
        main,
        proc,
        bs,
        bs_f16_mul,
        bn,
        ew,
        out_cvt: out_cvt(d),
        real_channels: d.orig_channels.min(out.c),
        out,
        data_banks: cna.map_or(0, |c| c.cbuf.data_banks),
        weight_banks: cna.map_or(0, |c| c.cbuf.weight_banks),
        data_reuse: cna.is_some_and(|c| c.cbuf.data_reuse),
        weight_reuse: cna.is_some_and(|c| c.cbuf.weight_reuse),
        grains: cna.map_or(0, |c| c.feature.grains),
        group_line_off: cna.is_some_and(|c| c.feature.group_line_off),
        line_stride_field: cna.map_or(0, |c| c.feature.line_stride),
        unvalidated,
        lut,
        bs_float,
        bn_float,
    })
}

/// What the DPU's configuration derives from board-run programs without being one of
/// them, as `unvalidated` messages.
fn derived(d: &task::Dpu, out: &Cube) -> Vec<String> {
    let (proc, out_prec) = (d.precision, out.prec);
    let mut unvalidated = Vec::new();
    if d.orig_channels < out.c {
        unvalidated.push(format!(
            "{} = {} of {} channels: the channels beyond the real one are written as zero (the vendor's captured outputs hold zeros there, over buffers that may have been zero before)",
            dpu::DataCubeChannel::ORIG_CHANNEL,
            d.orig_channels - 1,
            out.c
        ));
    }
    if proc == Precision::Int32
        && out_prec == Precision::Fp32
        && d.input == DpuInput::Flying
        && d.ew.is_none()
    {
        unvalidated.push(format!(
            "{} {}: a flying int32 to fp32 conversion without the EW add is derived from the split-K add's fp32 output (docs/hardware/dpu-ops.md#dequantisation-over-a-cube)",
            dpu::DataFormat::OUT_PRECISION,
            out_prec.code()
        ));
    }
    if proc == Precision::Int32 && out_prec == Precision::Int8 {
        unvalidated.push(format!(
            "{} {}: int32 to int8 requantisation on a flying task is derived from Mesa's int8 convolution (docs/hardware/dpu-ops.md#requantisation)",
            dpu::DataFormat::OUT_PRECISION,
            out_prec.code()
        ));
    }
    unvalidated
}

/// The EW stage: a LUT (checked by `lut::check`), an operation, or bypassed.
fn ew_and_lut(
    t: &task::Task,
    d: &task::Dpu,
    out: &Cube,
    at: At,
    unvalidated: &mut Vec<String>,
) -> Result<(Option<Ew>, Option<Lut>), SimError> {
    let Some(e) = &d.ew else {
        return Ok((None, None));
    };
    let Some(l) = &e.lut else {
        return Ok((
            Some(ew_stage(t, e, out, d.precision, at, unvalidated)?),
            None,
        ));
    };
    let lut = crate::sim::lut::check(d, e, l, at, unvalidated)?;
    // The EW stage holds nothing but the LUT.
    let ew = Ew {
        src: EwSrc::Register(0),
        cvt: None,
        op: None,
        relu: false,
        relux: None,
        dropped: false,
        f16_low_half: false,
        per_channel: false,
    };
    Ok((Some(ew), Some(lut)))
}

/// The written cube: its size must be the main data's.
fn out_cube(d: &task::Dpu, main: &Main, at: At) -> Result<Cube, SimError> {
    let (cw, ch, cc) = d.cube;
    // The vendor's programs over the 1-channel planar input write cubes of one real
    // channel (ORIG_CHANNEL 0): the CORE's 16 channels after the planar convolution, 8
    // channels in the flying tasks after it. The channels beyond come out zero
    // (docs/hardware/convolution.md#planar-input).
    let one_real = d.orig_channels == 1
        && match main {
            Main::Conv { feature, .. } => feature.planar && cc == PLANAR_CORE_CHANNELS,
            Main::Flying(c) => c.c == cc && cc == 8,
        };
    if d.orig_channels != cc && !one_real {
        return Err(unsupported(
            at,
            dpu::DataCubeChannel::ORIG_CHANNEL,
            d.orig_channels - 1,
            format!(
                "differs from channel {} (padding channels are not modelled)",
                cc - 1
            ),
        ));
    }
    let (mw, mh, mc) = match main {
        // A convolution delivers its output geometry, not the feature's.
        Main::Conv {
            weights, window, ..
        } => (window.out_w, window.out_h, weights.n),
        Main::Flying(c) => (c.w, c.h, c.c),
    };
    if cw != mw {
        return Err(inconsistent(
            at,
            dpu::DataCubeWidth::WIDTH,
            cw - 1,
            format!("the DPU's input is {mw} wide"),
        ));
    }
    if ch != mh {
        return Err(inconsistent(
            at,
            dpu::DataCubeHeight::HEIGHT,
            ch - 1,
            format!("the DPU's input is {mh} high"),
        ));
    }
    if cc != mc {
        return Err(inconsistent(
            at,
            dpu::DataCubeChannel::CHANNEL,
            cc - 1,
            format!("the DPU's input has {mc} channels"),
        ));
    }
    let dst = addr(d.out.addr);
    if !dst.is_multiple_of(16) {
        return Err(inconsistent(
            at,
            dpu::DstBaseAddr::DST_BASE_ADDR,
            dst,
            "the write DMA needs 16-byte alignment",
        ));
    }
    let out_prec = d.out.precision;
    let (line, surf) = d.out_strides();
    let out = Cube {
        base: dst,
        w: cw,
        h: ch,
        c: cc,
        prec: out_prec,
        line,
        surf,
        register: dpu::DstBaseAddr::NAME,
        block: Block::Dpu,
    };
    if cc % out.atom_elems() != 0 {
        return Err(unsupported(
            at,
            dpu::DataCubeChannel::CHANNEL,
            cc - 1,
            format!("{cc} channels do not fill whole 16-byte atoms of {out_prec}"),
        ));
    }
    if surf == 0 && cc > out.atom_elems() {
        return Err(inconsistent(
            at,
            dpu::DstSurfStride::DST_SURF_STRIDE,
            0,
            "several surfaces need a stride",
        ));
    }
    Ok(out)
}

/// SIZE_E and SURFACE_ADD: the values of docs/hardware/matmul-programs.md#validated-values for convolution tasks, 0
/// and free for DPU-only (flying) tasks.
fn validated_layout(d: &task::Dpu, at: At) -> Result<(), SimError> {
    let size_e = d.ow.size_e;
    if size_e[1] != size_e[0] || size_e[2] != size_e[0] {
        return Err(unsupported(
            at,
            dpu::BsOwCfg::SIZE_E_1,
            size_e[1],
            format!(
                "differs from {} {} (every validated program writes three equal values)",
                dpu::BsOwCfg::SIZE_E_0,
                size_e[0]
            ),
        ));
    }
    let (input, out) = (d.precision, d.out.precision);
    if d.depthwise {
        return super::depthwise::layout(d, at);
    }
    let want = match d.input {
        DpuInput::Flying => Some(0),
        DpuInput::Core => task::Dpu::validated_size_e(input, out),
    };
    if want != Some(size_e[0]) {
        return Err(unsupported(
            at,
            dpu::BsOwCfg::SIZE_E_0,
            size_e[0],
            match want {
                Some(w) => format!("{input} to {out} programs validated on boards write {w}"),
                None => format!("no validated program writes {input} to {out}"),
            },
        ));
    }
    if d.input == DpuInput::Core
        && let Some(ratio) = task::Dpu::validated_surface_ratio(input, out)
    {
        return surface_add(d, ratio, at, || {
            format!("{input} to {out} programs validated on boards write")
        });
    }
    Ok(())
}

/// Refuses a `SURF_ADD` other than `ratio` × `DST_SURF_STRIDE`, the value the programs
/// `source` names write.
pub(in crate::sim) fn surface_add(
    d: &task::Dpu,
    ratio: u32,
    at: At,
    source: impl FnOnce() -> String,
) -> Result<(), SimError> {
    if d.out.surface_add == ratio * d.out.surf_stride {
        return Ok(());
    }
    Err(unsupported(
        at,
        dpu::SurfaceAdd::SURF_ADD,
        d.out.surface_add,
        format!(
            "{} {ratio} x {} ({})",
            source(),
            dpu::DstSurfStride::DST_SURF_STRIDE,
            ratio * d.out.surf_stride
        ),
    ))
}
