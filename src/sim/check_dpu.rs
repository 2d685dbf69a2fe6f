//! The DPU half of the simulator's checks: output cube, stages, EW operand, output
//! converter, and the values every board-validated program agrees on.

use super::config::{addr, inconsistent, unsupported};
use super::error::{At, SimError};
use super::exec::{Cube, Ew, EwOp, EwSrc, Main, OutCvt, Stage, Task};
use crate::regs::{Register, dpu, dpu_rdma};
use crate::task::{self, DpuInput, EwSrc as TEwSrc, Precision};

/// Checks the DPU's registers against the main data and builds the executed task.
pub(super) fn dpu(t: &task::Task, d: &task::Dpu, main: Main, at: At) -> Result<Task, SimError> {
    let out = out_cube(d, &main, at)?;
    let real_channels = d.orig_channels.min(out.c);
    let out_prec = out.prec;
    let proc = d.precision;
    use Precision::*;
    let ok = match proc {
        Int8 => matches!(out_prec, Int8 | Int32 | Fp32),
        Int4 => matches!(out_prec, Int16),
        Int16 => matches!(out_prec, Int16 | Int32),
        Fp16 => matches!(out_prec, Fp16 | Fp32),
        Bf16 => matches!(out_prec, Bf16 | Fp32),
        Int32 => matches!(out_prec, Int32 | Fp32 | Int8),
        Fp32 => matches!(out_prec, Fp32 | Fp16),
    };
    if !ok {
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
        && r.precision != Fp16
    {
        return Err(unsupported(
            at,
            dpu_rdma::RdmaFeatureModeCfg::MRDMA_FP16TOFP32_EN,
            1,
            format!("widens fp16 main data, but DPU_RDMA reads {}", r.precision),
        ));
    }
    let float = proc.is_float();
    let mut unvalidated = Vec::new();
    if d.orig_channels < out.c {
        unvalidated.push(format!(
            "{} = {} of {} channels: the channels beyond the real one are written as zero (the vendor's captured outputs hold zeros there, over buffers that may have been zero before)",
            dpu::DataCubeChannel::ORIG_CHANNEL,
            d.orig_channels - 1,
            out.c
        ));
    }
    if proc == Int32 && out_prec == Fp32 && d.input == DpuInput::Flying && d.ew.is_none() {
        unvalidated.push(format!(
            "{} {}: a flying int32 to fp32 conversion without the EW add is derived from the split-K add's fp32 output (docs/hardware/dpu-ops.md#dequantisation-over-a-cube)",
            dpu::DataFormat::OUT_PRECISION,
            out_prec.code()
        ));
    }
    if proc == Int32 && out_prec == Int8 {
        unvalidated.push(format!(
            "{} {}: int32 to int8 requantisation on a flying task is derived from Mesa's int8 convolution (docs/hardware/dpu-ops.md#requantisation)",
            dpu::DataFormat::OUT_PRECISION,
            out_prec.code()
        ));
    }
    // fp32 processing: the dequantisation task, its published values only, or a LUT task.
    let lut_task = d.ew.as_ref().is_some_and(|e| e.lut.is_some());
    let (mut bs, bs_f16_mul) = if proc == Fp32 && !lut_task {
        (None, Some(fp32_dequant(t, d, at, &mut unvalidated)?))
    } else {
        (stage(&d.bs, float, at, false)?, None)
    };
    let mut bn = stage(&d.bn, float, at, true)?;
    stage_operands(t, d, &mut bs, &mut bn, at, &mut unvalidated)?;
    // Float pipelines: the BS/BN stages run with fp16/fp32 register operands.
    let (bs, bs_float) = if float { (None, bs) } else { (bs, None) };
    let (bn, bn_float) = if float { (None, bn) } else { (bn, None) };
    if float {
        // The fp32 pipeline's BS is the dequantisation task's, checked by `fp32_dequant`.
        if proc != Fp32 || lut_task {
            float_stage_notes(&d.bs, proc, false, &mut unvalidated);
        }
        float_stage_notes(&d.bn, proc, true, &mut unvalidated);
    }
    let mut lut = None;
    let ew = match &d.ew {
        Some(e) if e.lut.is_some() => {
            let l = e
                .lut
                .as_ref()
                .map(|l| super::lut::check(d, e, l, at, &mut unvalidated));
            lut = l.transpose()?;
            // The EW stage holds nothing but the LUT (checked by `lut::check`).
            Some(Ew {
                src: EwSrc::Register(0),
                cvt: None,
                op: None,
                relu: false,
                relux: None,
                dropped: false,
                f16_low_half: false,
                per_channel: false,
            })
        }
        Some(e) => Some(ew_stage(t, e, &out, proc, at, &mut unvalidated)?),
        None => None,
    };
    let c = &d.out_cvt;
    if c.minus_exp != 0 && lut.is_none() {
        return Err(unsupported(
            at,
            dpu::OutCvtShift::MINUS_EXP,
            c.minus_exp,
            "the exponent adjustment is modelled in the LUT's float decode only",
        ));
    }
    if c.shift > 63 {
        return Err(unsupported(
            at,
            dpu::OutCvtShift::OUT_CVT_SHIFT,
            c.shift,
            "shifts above 63",
        ));
    }
    let out_cvt = OutCvt {
        offset: i64::from(c.offset),
        scale: i64::from(c.scale),
        shift: c.shift,
        add_first: c.add_first,
        half_up: c.round_half_up,
    };
    if (float || out_prec.is_float()) && !out_cvt.is_identity() && lut.is_none() {
        return Err(unsupported(
            at,
            dpu::OutCvtScale::OUT_CVT_SCALE,
            c.scale,
            "float paths are modelled with the identity converter only (scale 1, offset 0, shift 0)",
        ));
    }
    if c.fp32_to_fp16 && out_prec != Fp16 {
        return Err(inconsistent(
            at,
            dpu::OutCvtScale::FP32TOFP16_EN,
            1,
            format!("the output precision is {out_prec}"),
        ));
    }
    // The board-run fp16 depthwise program enables the CPEND adder with Mesa's int8
    // operand 0x80 and its outputs equal the plain depthwise sums; what the adder does
    // with it on a float path is not published, so that exact value runs as no change.
    let dw_cpend = d.depthwise && proc == Fp16 && d.ow.ow_op == 0x80 && d.ow.ow_src == 0;
    if !d.ow.od_bypass && !dw_cpend && (d.ow.ow_op != 0 || d.ow.ow_src != 0) {
        return Err(unsupported(
            at,
            dpu::BsOwOp::OW_OP,
            d.ow.ow_op,
            "the CPEND (zero-point) adder is modelled only bypassed or adding 0",
        ));
    }
    let (data_banks, weight_banks, grains, glo, line_field) = match &t.cna {
        Some(cna) => (
            cna.cbuf.data_banks,
            cna.cbuf.weight_banks,
            cna.feature.grains,
            cna.feature.group_line_off,
            cna.feature.line_stride,
        ),
        None => (0, 0, 0, false, 0),
    };
    let (data_reuse, weight_reuse) = t
        .cna
        .as_ref()
        .map_or((false, false), |c| (c.cbuf.data_reuse, c.cbuf.weight_reuse));
    Ok(Task {
        enable: t.enable(),
        main,
        proc,
        bs,
        bs_f16_mul,
        bn,
        ew,
        out_cvt,
        out,
        data_banks,
        weight_banks,
        data_reuse,
        weight_reuse,
        grains,
        group_line_off: glo,
        line_stride_field: line_field,
        real_channels,
        unvalidated,
        lut,
        bs_float,
        bn_float,
    })
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
            Main::Conv { feature, .. } => {
                feature.planar && cc == super::config::PLANAR_CORE_CHANNELS
            }
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
        block: "DPU",
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
        && d.out.surface_add != ratio * d.out.surf_stride
    {
        return Err(unsupported(
            at,
            dpu::SurfaceAdd::SURF_ADD,
            d.out.surface_add,
            format!(
                "{input} to {out} programs validated on boards write {ratio} x {} ({})",
                dpu::DstSurfStride::DST_SURF_STRIDE,
                ratio * d.out.surf_stride
            ),
        ));
    }
    Ok(())
}

/// The BS or BN stage, register operands only.
fn stage(s: &task::Stage, float: bool, at: At, bn: bool) -> Result<Option<Stage>, SimError> {
    use dpu::{BnCfg, BnMulCfg, BsCfg, BsMulCfg};
    if s.bypass {
        return Ok(None);
    }
    if float {
        return float_stage(s, at, bn);
    }
    let alu = match s.alu {
        None => None,
        Some(a) => {
            // A per-channel operand from memory is attached by `stage_operands`.
            if !matches!(a.op, task::AluOp::Add | task::AluOp::Minus) {
                let why = "the TRM names 2 (add) and 4 (minus) only";
                let code = a.op.code();
                return Err(if bn {
                    unsupported(at, BnCfg::BN_ALU_ALGO, code, why)
                } else {
                    unsupported(at, BsCfg::BS_ALU_ALGO, code, why)
                });
            }
            Some((a.op, i64::from(a.operand)))
        }
    };
    let mul = match s.mul {
        None => None,
        Some(m) => {
            if m.shift_from_memory {
                // No program reads shifts from memory: their layout is unknown.
                let why = "shifts read from memory have no known memory layout";
                return Err(if bn {
                    unsupported(at, BnMulCfg::BN_TRUNCATE_SRC, 1, why)
                } else {
                    unsupported(at, BsMulCfg::BS_TRUNCATE_SRC, 1, why)
                });
            }
            // A per-channel multiplier from memory is attached by `stage_operands`.
            Some((i64::from(m.operand), m.shift, m.shift_neg, m.prelu))
        }
    };
    Ok(Some(Stage {
        alu,
        mul,
        relu: s.relu,
        relux: s.relux.map(i64::from),
        alu_mem: None,
        mul_mem: None,
    }))
}

/// The per-channel operands of the integer BS and BN stages read from memory (BRDMA,
/// NRDMA): checks that `BRDMA_DATA_USE` / `NRDMA_DATA_USE` name exactly the operands the
/// stages take from memory and attaches their 1 × 1 × C cubes. The board-validated case is
/// Mesa's int8 convolution bias (BS_CFG 0x20150, BRDMA_CFG 0x2: one int32 per output
/// channel, bminor/mesa-mesa `src/gallium/drivers/rocket/rkt_regcmd.c`, `rkt_coefs.c`);
/// the same bias on a flying task, the BN read and the 16-bit multiplier per channel are
/// derived (docs/hardware/dpu-ops.md#per-channel-operands) and raise `unvalidated`.
fn stage_operands(
    t: &task::Task,
    d: &task::Dpu,
    bs: &mut Option<Stage>,
    bn: &mut Option<Stage>,
    at: At,
    unvalidated: &mut Vec<String>,
) -> Result<(), SimError> {
    use dpu::{BnCfg, BnMulCfg, BsCfg, BsMulCfg};
    use dpu_rdma::{RdmaBrdmaCfg, RdmaNrdmaCfg};
    use task::OperandRead as O;
    let c = d.cube.2;
    for bn_stage in [false, true] {
        let (st, read) = if bn_stage {
            (bn.as_mut(), t.dpu_rdma.as_ref().and_then(|r| r.nrdma))
        } else {
            (bs.as_mut(), t.dpu_rdma.as_ref().and_then(|r| r.brdma))
        };
        let src = if bn_stage { &d.bn } else { &d.bs };
        let alu_mem = !src.bypass && src.alu.is_some_and(|a| a.from_memory);
        let mul_mem = !src.bypass && src.mul.is_some_and(|m| m.from_memory);
        let want = if alu_mem { O::ALU } else { 0 } | if mul_mem { O::MUL } else { 0 };
        let have = read.map_or(0, |r| r.data_use);
        let use_field = |v: u32, why: String| {
            if bn_stage {
                unsupported(at, RdmaNrdmaCfg::NRDMA_DATA_USE, v, why)
            } else {
                unsupported(at, RdmaBrdmaCfg::BRDMA_DATA_USE, v, why)
            }
        };
        if want == 0 && have == 0 {
            continue;
        }
        if t.dpu_rdma.is_none() {
            return Err(if bn_stage {
                unsupported(
                    at,
                    BnCfg::BN_ALU_SRC,
                    1,
                    "the operand comes through NRDMA, which the task does not start",
                )
            } else {
                unsupported(
                    at,
                    BsCfg::BS_ALU_SRC,
                    1,
                    "the operand comes through BRDMA, which the task does not start",
                )
            });
        }
        if have != want {
            return Err(use_field(
                have,
                format!(
                    "the stage takes {want:#x} from memory (1 ALU, 4 multiplier); other uses and mixtures have no known memory layout"
                ),
            ));
        }
        if d.precision.is_float() {
            return Err(use_field(
                have,
                "per-channel operands from memory are modelled on integer paths only".into(),
            ));
        }
        let (Some(st), Some(read)) = (st, read) else {
            // A bypassed stage with a memory read configured.
            return Err(use_field(have, "the stage is bypassed".into()));
        };
        let base = addr(read.addr);
        if !base.is_multiple_of(16) {
            return Err(use_field(
                have,
                format!("the operand address {base:#x} is not 16-byte aligned"),
            ));
        }
        let (prec, register) = if bn_stage {
            (
                if alu_mem {
                    Precision::Int32
                } else {
                    Precision::Int16
                },
                dpu_rdma::RdmaBnBaseAddr::NAME,
            )
        } else {
            (
                if alu_mem {
                    Precision::Int32
                } else {
                    Precision::Int16
                },
                dpu_rdma::RdmaBsBaseAddr::NAME,
            )
        };
        let cube = Cube {
            base,
            w: 1,
            h: 1,
            c: c.div_ceil(16 / prec.bytes()) * (16 / prec.bytes()),
            prec,
            line: 16,
            surf: 16,
            register,
            block: "DPU_RDMA",
        };
        let validated =
            !bn_stage && alu_mem && d.input == DpuInput::Core && d.precision == Precision::Int8;
        if !validated {
            let (stage_name, what) = match (bn_stage, alu_mem) {
                (true, true) => (BnCfg::BN_ALU_SRC.to_string(), "a 32-bit ALU operand"),
                (false, true) => (BsCfg::BS_ALU_SRC.to_string(), "a 32-bit ALU operand"),
                (true, false) => (BnMulCfg::BN_MUL_SRC.to_string(), "a 16-bit multiplier"),
                (false, false) => (BsMulCfg::BS_MUL_SRC.to_string(), "a 16-bit multiplier"),
            };
            unvalidated.push(format!(
                "{stage_name}: {what} per channel from memory on a {} {} task is derived from Mesa's int8 convolution bias (docs/hardware/dpu-ops.md#per-channel-operands)",
                d.precision,
                if d.input == DpuInput::Flying { "flying" } else { "convolution" },
            ));
        }
        if alu_mem {
            st.alu_mem = Some(cube);
        } else {
            st.mul_mem = Some(cube);
        }
    }
    Ok(())
}

/// A BS or BN stage of a float pipeline: register operands only — the multiplier's
/// fp16, the ALU's fp32 bits — the multiplier before the ALU (the order the LUT's index
/// scale and bias were measured in, docs/hardware/lut.md#index), add or minus, ReLU;
/// no shifts, PReLU, ReLUX or memory operands.
fn float_stage(s: &task::Stage, at: At, bn: bool) -> Result<Option<Stage>, SimError> {
    use dpu::{BnCfg, BnMulCfg, BsCfg, BsMulCfg, DataFormat};
    let alu = match s.alu {
        None => None,
        Some(a) => {
            if a.from_memory {
                let why =
                    "operands read from memory (BRDMA/NRDMA) are not modelled in float pipelines";
                return Err(if bn {
                    unsupported(at, BnCfg::BN_ALU_SRC, 1, why)
                } else {
                    unsupported(at, BsCfg::BS_ALU_SRC, 1, why)
                });
            }
            if !matches!(a.op, task::AluOp::Add | task::AluOp::Minus) {
                let why = "the TRM names 2 (add) and 4 (minus) only";
                let code = a.op.code();
                return Err(if bn {
                    unsupported(at, BnCfg::BN_ALU_ALGO, code, why)
                } else {
                    unsupported(at, BsCfg::BS_ALU_ALGO, code, why)
                });
            }
            Some((a.op, i64::from(a.operand as u32)))
        }
    };
    let mul = match s.mul {
        None => None,
        Some(m) => {
            if m.from_memory {
                let why =
                    "operands read from memory (BRDMA/NRDMA) are not modelled in float pipelines";
                return Err(if bn {
                    unsupported(at, BnMulCfg::BN_MUL_SRC, 1, why)
                } else {
                    unsupported(at, BsMulCfg::BS_MUL_SRC, 1, why)
                });
            }
            if m.shift_from_memory || m.shift != 0 {
                let why = "float multiply has no shift";
                return Err(if bn {
                    unsupported(at, BnMulCfg::BN_MUL_SHIFT_VALUE, m.shift, why)
                } else {
                    unsupported(at, BsMulCfg::BS_MUL_SHIFT_VALUE, m.shift, why)
                });
            }
            if m.shift_neg != 0 {
                let why = "float multiply has no shift";
                return Err(if bn {
                    unsupported(at, DataFormat::BN_MUL_SHIFT_VALUE_NEG, m.shift_neg, why)
                } else {
                    unsupported(at, DataFormat::BS_MUL_SHIFT_VALUE_NEG, m.shift_neg, why)
                });
            }
            if m.prelu {
                let why = "PReLU is not modelled in float pipelines";
                return Err(if bn {
                    unsupported(at, BnCfg::BN_MUL_PRELU, 1, why)
                } else {
                    unsupported(at, BsCfg::BS_MUL_PRELU, 1, why)
                });
            }
            Some((i64::from(m.fp16_bits()), 0, 0, false))
        }
    };
    if s.relux.is_some() {
        let why = "the ReLUX operand's format in float pipelines is not known";
        return Err(if bn {
            unsupported(at, BnCfg::BN_RELUX_EN, 1, why)
        } else {
            unsupported(at, BsCfg::BS_RELUX_EN, 1, why)
        });
    }
    Ok(Some(Stage {
        alu,
        mul,
        relu: s.relu,
        relux: None,
        alu_mem: None,
        mul_mem: None,
    }))
}

/// What a float BS or BN stage does that no board-run program does, as `unvalidated`
/// messages: the runs are the vendor's fp16 scalar add (BS ALU add, BS_CFG 0x20050) and
/// multiply (BS MUL, BS_CFG 0x42) and the LUT programs' BN multiply-then-add (BN_CFG
/// 0x20040).
fn float_stage_notes(s: &task::Stage, proc: Precision, bn: bool, out: &mut Vec<String>) {
    use dpu::{BnCfg, BsCfg};
    if s.bypass {
        return;
    }
    let name = if bn { BnCfg::NAME } else { BsCfg::NAME };
    let shape = (s.alu.map(|a| a.op), s.mul.is_some(), bn);
    let run = matches!(
        shape,
        (Some(task::AluOp::Add), false, false)
            | (None, true, false)
            | (Some(task::AluOp::Add), true, true)
    );
    // The fp32 LUT program of rknpu2_matmul_open runs the same BN multiply-then-add.
    let fp32_bn = proc == Precision::Fp32 && bn && s.alu.is_some() && s.mul.is_some();
    if !run || s.relu || !(proc == Precision::Fp16 || fp32_bn) {
        out.push(format!(
            "{proc} {name}: ALU {:?}, multiplier {}, ReLU {}: the float stages that ran are the fp16 BS add, the fp16 BS multiply and the fp16 BN multiply-then-add; the model multiplies first, then adds, then clamps",
            s.alu.map(|a| a.op),
            if s.mul.is_some() { "on" } else { "off" },
            if s.relu { "on" } else { "off" },
        ));
    }
}

/// The EW stage and its ERDMA operand.
fn ew_stage(
    t: &task::Task,
    e: &task::Ew,
    out: &Cube,
    proc: Precision,
    at: At,
    unvalidated: &mut Vec<String>,
) -> Result<Ew, SimError> {
    use dpu::{EwCfg, EwCvtScaleValue};
    let float = proc.is_float();
    // Flying only: the conv-fed EW add of a matmul's int32 operand is the fused matmul's
    // (docs/hardware/matmul-programs.md), not this derivation.
    let flying = t.dpu.as_ref().is_some_and(|d| d.input == DpuInput::Flying);
    if flying && matches!(proc, Precision::Int8 | Precision::Int16) && e.op.is_some() {
        unvalidated.push(format!(
            "{}: {proc} EW arithmetic has no board-recorded program; it is derived from the integer EW path (docs/hardware/dpu-ops.md#integer-ew)",
            EwCfg::EW_OP_TYPE
        ));
    }
    let op = match e.op {
        None => None,
        Some(task::EwOp::Mul(t, tn)) => {
            if float && (t != 0 || tn != 0) {
                return Err(unsupported(
                    at,
                    EwCvtScaleValue::EW_TRUNCATE,
                    t,
                    "float multiply has no shift",
                ));
            }
            Some(EwOp::Mul(t, tn))
        }
        Some(task::EwOp::Alu(a)) => Some(EwOp::Alu(a)),
    };
    let cvt = match e.cvt {
        None => None,
        Some(c) => {
            if float && (c.offset != 0 || c.scale != 1 || c.shift != 0) {
                return Err(unsupported(
                    at,
                    EwCvtScaleValue::EW_OP_CVT_SCALE,
                    c.scale as u16 as u32,
                    "float operand conversion is modelled as the identity only",
                ));
            }
            Some((
                i64::from(c.offset),
                i64::from(c.scale),
                c.shift,
                c.add_first,
            ))
        }
    };
    if let Some(r) = &t.dpu_rdma
        && r.flying
        && proc != Precision::Fp32
        && (r.mrdma.is_some_and(|m| m.line_notch != 0)
            || r.erdma.is_some_and(|e| e.line_notch != 0))
    {
        unvalidated.push(format!(
            "{}: a flying EW task over part of a wider cube (non-zero line notches) is derived; the board-recorded tasks write 0 (docs/hardware/dpu-ops.md#limits)",
            dpu_rdma::RdmaSrcDmaCfg::LINE_NOTCH_ADDR
        ));
    }
    let mut per_channel = false;
    let src = match e.src {
        TEwSrc::Memory => {
            let cube = erdma_cube(t, e, out, float, at)?;
            per_channel = e.data_mode == task::EW_PER_CHANNEL;
            if per_channel && out.w * out.h > 1 {
                unvalidated.push(format!(
                    "{} 0: a per-channel operand broadcast over {} pixels is derived from the vendor's one-pixel tasks (docs/hardware/dpu-ops.md#per-channel-operand)",
                    dpu_rdma::RdmaErdmaCfg::ERDMA_DATA_MODE,
                    out.w * out.h
                ));
            }
            EwSrc::Memory(cube)
        }
        TEwSrc::Register => {
            if float {
                return Err(unsupported(
                    at,
                    EwCfg::EW_OP_SRC,
                    0,
                    "float register operands are not modelled",
                ));
            }
            EwSrc::Register(e.values[0])
        }
    };
    if e.relux.is_some() && float {
        return Err(unsupported(
            at,
            EwCfg::EW_RELUX_EN,
            1,
            "ReLUX is modelled on integer paths only",
        ));
    }
    let dropped =
        proc == Precision::Fp16 && matches!(op, Some(EwOp::Alu(task::AluOp::Add))) && cvt.is_none();
    Ok(Ew {
        src,
        cvt,
        op,
        relu: e.relu,
        relux: e.relux.map(i64::from),
        dropped,
        // Checked by `fp32_dequant`: the multiply with a 32-bit ERDMA operand.
        f16_low_half: proc == Precision::Fp32,
        per_channel,
    })
}

/// The ERDMA operand: one element per output element, in an NC1HWC2 cube.
fn erdma_cube(
    t: &task::Task,
    e: &task::Ew,
    out: &Cube,
    float: bool,
    at: At,
) -> Result<Cube, SimError> {
    use dpu_rdma::RdmaErdmaCfg;
    let Some(rdma) = &t.dpu_rdma else {
        // The DPU waits for an operand nobody fetches: the task stalls (pc.rs) before
        // this cube is read.
        let prec = if float {
            Precision::Fp32
        } else {
            Precision::Int32
        };
        return Ok(super::config::unfetched(
            out.w,
            out.h,
            out.c,
            prec,
            dpu_rdma::RdmaEwBaseAddr::NAME,
        ));
    };
    let Some(er) = &rdma.erdma else {
        return Err(unsupported(
            at,
            RdmaErdmaCfg::ERDMA_DISABLE,
            1,
            "the EW operand comes from ERDMA (the model needs 0)",
        ));
    };
    if rdma.comb_use == task::COMB_SHARED_OPERAND {
        return super::comb::shared_operand(t, e, rdma, er, float, out, at);
    }
    if er.data_mode > 1 {
        return Err(unsupported(
            at,
            RdmaErdmaCfg::ERDMA_DATA_MODE,
            er.data_mode,
            "per-channel (0) and per-pixel (1) operands are modelled",
        ));
    }
    if e.data_size != er.data_size {
        return Err(inconsistent(
            at,
            dpu::EwCfg::EDATA_SIZE,
            e.data_size,
            format!(
                "{:?} says size code {}",
                RdmaErdmaCfg::ERDMA_DATA_SIZE,
                er.data_size
            ),
        ));
    }
    if e.data_mode != er.data_mode {
        return Err(inconsistent(
            at,
            dpu::EwCfg::EW_DATA_MODE,
            e.data_mode,
            format!("{} says {}", RdmaErdmaCfg::ERDMA_DATA_MODE, er.data_mode),
        ));
    }
    let per_channel = er.data_mode == task::EW_PER_CHANNEL;
    if per_channel && er.surf_stride != 1 {
        return Err(unsupported(
            at,
            dpu_rdma::RdmaEwSurfStride::EW_SURF_STRIDE,
            er.surf_stride,
            "a per-channel operand is one atom per surface (the TRM and the vendor write 1, 16 bytes)",
        ));
    }
    let prec = er.precision(float).ok_or_else(|| {
        unsupported(
            at,
            RdmaErdmaCfg::ERDMA_DATA_SIZE,
            er.data_size,
            if float {
                "16- and 32-bit operands are modelled"
            } else {
                "8-, 16- and 32-bit operands are modelled"
            },
        )
    })?;
    let (w, h, c) = rdma.cube;
    if (w, h, c) != (out.w, out.h, out.c) {
        return Err(inconsistent(
            at,
            dpu_rdma::RdmaDataCubeWidth::WIDTH,
            w - 1,
            format!(
                "DPU_RDMA cube {w}x{h}x{c} differs from the DPU cube {}x{}x{}",
                out.w, out.h, out.c
            ),
        ));
    }
    let (line, surf) = rdma.erdma_strides(er);
    if er.surf_notch != 0 {
        let by_notch = line * u64::from(h) + u64::from(er.surf_notch) * 16;
        if per_channel || by_notch != surf {
            return Err(inconsistent(
                at,
                dpu_rdma::RdmaEwSurfNotch::EW_SURF_NOTCH,
                er.surf_notch,
                format!(
                    "gives {by_notch}-byte surfaces, {} gives {surf}",
                    dpu_rdma::RdmaEwSurfStride::EW_SURF_STRIDE
                ),
            ));
        }
    }
    let (w, h, line) = if per_channel {
        (1, 1, 16)
    } else {
        (w, h, line)
    };
    let cube = Cube {
        base: addr(er.addr),
        w,
        h,
        c,
        prec,
        line,
        surf,
        register: dpu_rdma::RdmaEwBaseAddr::NAME,
        block: "DPU_RDMA",
    };
    if c % cube.atom_elems() != 0 {
        return Err(unsupported(
            at,
            RdmaErdmaCfg::ERDMA_DATA_SIZE,
            er.data_size,
            "the operand channels must fill whole atoms",
        ));
    }
    Ok(cube)
}

/// What the published dequantisation task writes into register `R`, for an error
/// message: `the published task <what> (<BLOCK.REGISTER> <word>)`.
fn published<R: Register>(what: &str, word: u32) -> String {
    format!("the published task {what} ({} {word:#x})", R::NAME)
}

/// The fp32 pipeline as the dequantisation task of the public program
/// happyme531/rknpu2_matmul_open writes it (commit 601269cfb7f5aa2c0d7fa96314e87ffdef996744,
/// `middle_body(gate = false)` in `src/rk_npu_moe_regs.h`, run per row by
/// `src/rk_npu_i8_dpu_chain.cpp` and checked on boards by `tests/test_i8_dpu_chain.cpp`):
/// a DPU-only task over one pixel of at most 1024 channels (multiples of 32), BS
/// multiplying by an fp16 register operand (BS_CFG 0x42), BN bypassed (0x53), EW
/// multiplying by a 32-bit ERDMA operand per channel (EW_CFG 0x10C0_03C4, ERDMA_CFG
/// 0x4000_000C, EW_SURF_STRIDE 16 bytes), output fp32 with DST_SURF_STRIDE = SURFACE_ADD =
/// 16 bytes, BS_OW_CFG 2, burst 15, MRDMA SURF_NOTCH up to 127 atoms (128 rows). Any
/// other value of these fields is refused by name. Returns the BS operand's fp16 bits.
///
/// Generalised, with the same stage values (derived, raising `unvalidated`;
/// docs/hardware/dpu-ops.md#dequantisation-over-a-cube): a whole `W × H × C` cube (C a
/// multiple of 4) with the EW operand one value per channel (`ERDMA_DATA_MODE` 0), and an
/// fp16 output through `FP32TOFP16_EN`.
fn fp32_dequant(
    t: &task::Task,
    d: &task::Dpu,
    at: At,
    unvalidated: &mut Vec<String>,
) -> Result<u16, SimError> {
    use dpu::{
        BnCfg, BsCfg, BsMulCfg, BsOwCfg, BsOwOp, DataCubeChannel, DataCubeHeight,
        DataCubeNotchAddr, DataCubeWidth, DataFormat, DstSurfStride, EwCfg, FeatureModeCfg,
        SurfaceAdd,
    };
    use dpu_rdma::{
        RdmaDataCubeHeight, RdmaEwSurfStride, RdmaFeatureModeCfg, RdmaSrcDmaCfg, RdmaSurfNotch,
        RdmaWeight,
    };
    const WHY: &str = "fp32 processing is modelled for the published dequantisation task only";
    if d.input != DpuInput::Flying {
        return Err(unsupported(at, FeatureModeCfg::FLYING_MODE, 0, WHY));
    }
    let (w, h, c) = d.cube;
    // The published envelope: one pixel of 32..=1024 channels in steps of 32, fp32 out.
    let published_shape = w == 1 && h == 1 && c <= 1024 && c.is_multiple_of(32);
    if !published_shape {
        unvalidated.push(format!(
            "{} {}, {} {}, {} {}: fp32 dequantisation over a {w}x{h}x{c} cube; the published task reads one pixel of 32..=1024 channels in steps of 32 (docs/hardware/dpu-ops.md#dequantisation-over-a-cube)",
            DataCubeWidth::WIDTH,
            w - 1,
            DataCubeHeight::HEIGHT,
            h - 1,
            DataCubeChannel::CHANNEL,
            c - 1
        ));
    }
    match d.out.precision {
        Precision::Fp32 => {}
        Precision::Fp16 if d.out_cvt.fp32_to_fp16 => unvalidated.push(format!(
            "{} 1: fp16 output of the fp32 dequantisation is derived from the fp16 pipelines' use of the same converter (docs/hardware/dpu-ops.md#dequantisation-over-a-cube)",
            dpu::OutCvtScale::FP32TOFP16_EN
        )),
        p => {
            return Err(unsupported(
                at,
                DataFormat::OUT_PRECISION,
                p.code(),
                format!(
                    "fp32 processing writes fp32, or fp16 with {} 1",
                    dpu::OutCvtScale::FP32TOFP16_EN
                ),
            ));
        }
    }
    if d.burst_len != 15 {
        return Err(unsupported(
            at,
            FeatureModeCfg::BURST_LEN,
            d.burst_len,
            "the published task writes 15",
        ));
    }
    // BS: multiplier only, register operand, no shifts.
    let bs = &d.bs;
    if bs.bypass {
        return Err(unsupported(
            at,
            BsCfg::BS_BYPASS,
            1,
            published::<BsCfg>("multiplies in BS", 0x42),
        ));
    }
    if let Some(a) = bs.alu {
        return Err(unsupported(
            at,
            BsCfg::BS_ALU_BYPASS,
            0,
            format!("the published task bypasses the BS ALU ({:?} given)", a.op),
        ));
    }
    if bs.relu {
        return Err(unsupported(
            at,
            BsCfg::BS_RELU_BYPASS,
            0,
            "the published task bypasses the BS ReLU",
        ));
    }
    if bs.relux.is_some() {
        return Err(unsupported(
            at,
            BsCfg::BS_RELUX_EN,
            1,
            "the published task bypasses the BS ReLUX",
        ));
    }
    let Some(m) = bs.mul else {
        return Err(unsupported(
            at,
            BsCfg::BS_MUL_BYPASS,
            1,
            published::<BsCfg>("multiplies in BS", 0x42),
        ));
    };
    if m.prelu {
        return Err(unsupported(at, BsCfg::BS_MUL_PRELU, 1, WHY));
    }
    if m.from_memory {
        return Err(unsupported(
            at,
            BsMulCfg::BS_MUL_SRC,
            1,
            "the published task's BS operand is a register",
        ));
    }
    if m.shift_from_memory {
        return Err(unsupported(at, BsMulCfg::BS_TRUNCATE_SRC, 1, WHY));
    }
    if m.shift != 0 {
        return Err(unsupported(
            at,
            BsMulCfg::BS_MUL_SHIFT_VALUE,
            m.shift,
            "float multiply has no shift",
        ));
    }
    if m.shift_neg != 0 {
        return Err(unsupported(
            at,
            DataFormat::BS_MUL_SHIFT_VALUE_NEG,
            m.shift_neg,
            "float multiply has no shift",
        ));
    }
    let bits = m.fp16_bits();
    if !crate::float::f16_to_f32(bits).is_finite() {
        return Err(unsupported(
            at,
            BsMulCfg::BS_MUL_OPERAND,
            u32::from(bits),
            "the published task writes a finite fp16 operand",
        ));
    }
    // BN bypassed (0x53).
    let bn = &d.bn;
    if !bn.bypass {
        return Err(unsupported(
            at,
            BnCfg::BN_BYPASS,
            0,
            published::<BnCfg>("bypasses BN", 0x53),
        ));
    }
    if bn.alu.is_some() {
        return Err(unsupported(
            at,
            BnCfg::BN_ALU_BYPASS,
            0,
            published::<BnCfg>("bypasses BN", 0x53),
        ));
    }
    if bn.mul.is_some() {
        return Err(unsupported(
            at,
            BnCfg::BN_MUL_BYPASS,
            0,
            published::<BnCfg>("bypasses BN", 0x53),
        ));
    }
    if bn.relu {
        return Err(unsupported(
            at,
            BnCfg::BN_RELU_BYPASS,
            0,
            published::<BnCfg>("bypasses BN", 0x53),
        ));
    }
    if bn.relux.is_some() {
        return Err(unsupported(
            at,
            BnCfg::BN_RELUX_EN,
            1,
            published::<BnCfg>("bypasses BN", 0x53),
        ));
    }
    // EW: multiply by a 32-bit per-channel operand from ERDMA, converter and ReLU bypassed.
    let Some(e) = &d.ew else {
        return Err(unsupported(
            at,
            EwCfg::EW_BYPASS,
            1,
            published::<EwCfg>("multiplies in EW", 0x10C0_03C4),
        ));
    };
    match e.op {
        // Shifts other than 0 are refused by `ew_stage`.
        Some(task::EwOp::Mul(..)) => {}
        Some(task::EwOp::Alu(_)) => {
            return Err(unsupported(
                at,
                EwCfg::EW_OP_TYPE,
                0,
                "the published task multiplies in EW (1)",
            ));
        }
        None => {
            return Err(unsupported(
                at,
                EwCfg::EW_OP_BYPASS,
                1,
                "the published task multiplies in EW (0)",
            ));
        }
    }
    if e.src != TEwSrc::Memory {
        return Err(unsupported(
            at,
            EwCfg::EW_OP_SRC,
            0,
            "the published task reads the EW operand through ERDMA (1)",
        ));
    }
    if e.cvt.is_some() {
        return Err(unsupported(
            at,
            EwCfg::EW_OP_CVT_BYPASS,
            0,
            "the published task bypasses the EW operand converter (1)",
        ));
    }
    if e.relu {
        return Err(unsupported(
            at,
            EwCfg::EW_RELU_BYPASS,
            0,
            "the published task bypasses the EW ReLU (1)",
        ));
    }
    if e.data_size != 3 {
        return Err(unsupported(
            at,
            EwCfg::EDATA_SIZE,
            e.data_size,
            "the published task reads 32-bit operand elements (3)",
        ));
    }
    if let Some(i) = e.values.iter().position(|&v| v != 0) {
        return Err(unsupported(
            at,
            dpu::EwOpValue0::EW_OPERAND_0,
            e.values[i],
            format!(
                "the published task writes 0 to every EW operand register (operand {i} is not)"
            ),
        ));
    }
    // Output: one compact row of fp32, CPEND bypassed.
    let o = &d.out;
    if published_shape && o.surf_stride != 1 {
        return Err(unsupported(
            at,
            DstSurfStride::DST_SURF_STRIDE,
            o.surf_stride,
            "the published task writes 1 (16 bytes)",
        ));
    }
    if published_shape && o.notch != 0 {
        return Err(unsupported(
            at,
            DataCubeNotchAddr::NOTCH_ADDR_0,
            o.notch,
            "the published task writes 0",
        ));
    }
    if o.surface_add != o.surf_stride {
        return Err(unsupported(
            at,
            SurfaceAdd::SURF_ADD,
            o.surface_add,
            published::<DstSurfStride>("writes a surface stride of 16 bytes", 1),
        ));
    }
    if !d.ow.od_bypass {
        return Err(unsupported(
            at,
            BsOwCfg::OD_BYPASS,
            0,
            published::<BsOwCfg>(&format!("writes {} 1", BsOwCfg::OD_BYPASS.name()), 2),
        ));
    }
    if d.ow.ow_op != 0 || d.ow.ow_src != 0 {
        return Err(unsupported(
            at,
            BsOwOp::OW_OP,
            d.ow.ow_op,
            "the published task writes 0",
        ));
    }
    // DPU_RDMA (absent: the task stalls before anything is read).
    let Some(r) = &t.dpu_rdma else {
        return Ok(bits);
    };
    if r.burst_len != 15 {
        return Err(unsupported(
            at,
            RdmaFeatureModeCfg::BURST_LEN,
            r.burst_len,
            "the published task writes 15",
        ));
    }
    if let Some(m) = &r.mrdma
        && published_shape
    {
        if m.line_notch != 0 {
            return Err(unsupported(
                at,
                RdmaSrcDmaCfg::LINE_NOTCH_ADDR,
                m.line_notch,
                "the published task writes 0",
            ));
        }
        if m.surf_notch > 127 {
            return Err(unsupported(
                at,
                RdmaSurfNotch::SURF_NOTCH_ADDR,
                m.surf_notch,
                "the published task reads one pixel of a cube of at most 128 rows (0..=127)",
            ));
        }
    }
    if let Some(er) = &r.erdma
        && published_shape
    {
        if er.surf_stride != 1 {
            return Err(unsupported(
                at,
                RdmaEwSurfStride::EW_SURF_STRIDE,
                er.surf_stride,
                "the published task writes 1 (16 bytes)",
            ));
        }
        if er.line_notch != 0 {
            return Err(unsupported(
                at,
                RdmaDataCubeHeight::EW_LINE_NOTCH_ADDR,
                er.line_notch,
                "the published task writes 0",
            ));
        }
    }
    let weights = [
        (RdmaWeight::M_WEIGHT, r.arbiter[0]),
        (RdmaWeight::B_WEIGHT, r.arbiter[1]),
        (RdmaWeight::N_WEIGHT, r.arbiter[2]),
        (RdmaWeight::E_WEIGHT, r.arbiter[3]),
    ];
    if let Some(&(f, v)) = weights.iter().find(|(_, v)| *v != 1) {
        return Err(unsupported(
            at,
            f,
            v,
            "the published task writes 1 to each arbiter weight",
        ));
    }
    Ok(bits)
}
