//! The PPU of a stand-alone pooling task (op-enable 0x60: PPU + PPU_RDMA, the input read
//! from memory): the checks of what the model executes and of the validated values, the
//! checked description, and the pooling arithmetic (docs/ops.md "Pooling",
//! docs/hardware/pooling.md).
//!
//! What runs clean: fp16 max and average with the register values of the board-tested
//! `gregordinary/rocket-userspace` `gen_pool_fp16` (docs/hardware/pooling.md#registers).
//! What runs with the `unvalidated` lint: fp16 min, pad values other than −inf (max) and 0
//! (average), line and surface strides of a window into a larger cube, and int8 max/min
//! (docs/hardware/pooling.md#int8). Everything else is an error naming the field.

use super::error::{At, SimError, at_most, err, inconsistent, unsupported};
use super::exec::{Cube, Pool};
use super::memory::Memory;
use super::memory::run;
use crate::float::{f16_to_f32, f32_to_f16};
use crate::regs::Block;
use crate::regs::{Register, ppu, ppu_rdma};
use crate::task::{self, Access, DecodeError, PoolMethod, Precision};

use crate::task::limits::{
    FP16_NEG_INF, POOL_INT8_MAX_PAD as INT8_MAX_PAD, POOL_MIN_INTERMEDIATE as MIN_INTERMEDIATE,
    pool_max_rows as max_rows,
};

mod run;

pub(super) use run::{check_input, execute, small_output, work};

/// The average reciprocal of a kernel side `k`: the fp16 bits of 65536 / k, `None` for
/// k = 1 (65536 does not fit fp16) or k = 0 (docs/hardware/pooling.md#average).
pub(crate) fn fp16_recip(k: u32) -> Option<u32> {
    (k >= 2).then(|| u32::from(f32_to_f16(65536.0 / k as f32)))
}

fn enable_error(enable: u32, why: &str) -> DecodeError {
    DecodeError::enable_error(enable, why)
}

/// Checks a decoded task that starts the PPU or PPU_RDMA.
pub(super) fn check(t: &task::Task, at: At) -> Result<Pool, SimError> {
    let enable = t.enable();
    let (Some(p), Some(r), None, None, None, None) =
        (&t.ppu, &t.ppu_rdma, &t.cna, &t.core, &t.dpu, &t.dpu_rdma)
    else {
        return Err(err(
            at,
            enable_error(
                enable.0,
                "the model runs stand-alone pooling tasks (0x60: PPU + PPU_RDMA, the input from memory); DPU to PPU flying input and the PPU with other blocks are not modelled",
            ),
        ));
    };
    let mut unvalidated = Vec::new();
    if !p.from_memory {
        return Err(unsupported(
            at,
            ppu::OperationModeCfg::FLYING_MODE,
            0,
            "input from the DPU (no public program runs DPU to PPU flying pooling; the model needs 1, input from PPU_RDMA)",
        ));
    }
    shapes(at, p, r)?;
    let (iw, ih, c) = p.cube_in;
    let (ow, oh, _) = p.cube_out;
    let prec = p.precision;
    let (kw, kh) = p.kernel;
    let (sx, sy) = p.stride;
    let [pl, pt, pr, pb] = p.padding;
    let pads = [
        (pl, kw, ppu::PoolingPaddingCfg::PAD_LEFT),
        (pt, kh, ppu::PoolingPaddingCfg::PAD_TOP),
        (pr, kw, ppu::PoolingPaddingCfg::PAD_RIGHT),
        (pb, kh, ppu::PoolingPaddingCfg::PAD_BOTTOM),
    ];
    for (pad, k, field) in pads {
        if pad >= k {
            return Err(unsupported(
                at,
                field,
                pad,
                format!(
                    "padding of at least the kernel side {k} gives windows of padding only; no program pads so much"
                ),
            ));
        }
    }
    geometry(
        at,
        iw,
        pl + pr,
        kw,
        sx,
        ow,
        ppu::DataCubeOutWidth::CUBE_OUT_WIDTH,
    )?;
    geometry(
        at,
        ih,
        pt + pb,
        kh,
        sy,
        oh,
        ppu::DataCubeOutHeight::CUBE_OUT_HEIGHT,
    )?;
    method(at, p, &mut unvalidated)?;
    if p.pad_values.1 != 0 {
        return Err(unsupported(
            at,
            ppu::PaddingValue2Cfg::PAD_VALUE_1,
            p.pad_values.1,
            "bits 34:32 of the pad value; every program writes 0",
        ));
    }
    pad_value(at, p, &mut unvalidated)?;
    if p.burst_len != 3 {
        return Err(unsupported(
            at,
            ppu::MiscCtrl::BURST_LEN,
            p.burst_len,
            "every pooling program writes 3 (burst 4)",
        ));
    }
    if oh > max_rows(iw) {
        return Err(unsupported(
            at,
            ppu::DataCubeOutHeight::CUBE_OUT_HEIGHT,
            oh - 1,
            format!(
                "{oh} output rows of an input {iw} wide; programs keep at most 8191 / width = {} rows per task",
                max_rows(iw)
            ),
        ));
    }
    let atom = 16 / prec.bytes();
    if !c.is_multiple_of(atom) {
        return Err(unsupported(
            at,
            ppu::DataCubeInChannel::CUBE_IN_CHANNEL,
            c - 1,
            format!("{c} channels: every program pools whole {atom}-channel atoms of {prec}"),
        ));
    }
    strides(at, p, r, c / atom, &mut unvalidated)?;
    Ok(pool(t, p, r, unvalidated))
}

/// The PPU's and PPU_RDMA's cubes agree, and the PPU pools a precision the model runs
/// with the element size the read DMA codes for it.
fn shapes(at: At, p: &task::Ppu, r: &task::PpuRdma) -> Result<(), SimError> {
    use ppu_rdma::{RdmaCubeInChannel, RdmaCubeInHeight, RdmaCubeInWidth};
    let (iw, ih, c) = p.cube_in;
    let (rw, rh, rc) = r.cube_in;
    let repeats =
        |want: u32| move || format!("the PPU pools a cube of {want} (stored {})", want - 1);
    dim(at, RdmaCubeInWidth::CUBE_IN_WIDTH, rw, iw, repeats(iw))?;
    dim(at, RdmaCubeInHeight::CUBE_IN_HEIGHT, rh, ih, repeats(ih))?;
    let pools = || format!("the PPU pools {c} channels");
    dim(at, RdmaCubeInChannel::CUBE_IN_CHANNEL, rc, c, pools)?;
    let keeps = || format!("pooling keeps the {c} input channels");
    let oc = p.cube_out.2;
    dim(at, ppu::DataCubeOutChannel::CUBE_OUT_CHANNEL, oc, c, keeps)?;
    let prec = p.precision;
    let size_code = match prec {
        Precision::Fp16 => 2,
        Precision::Int8 => 1,
        _ => {
            return Err(unsupported(
                at,
                ppu::DataFormat::PROC_PRECISION,
                prec.code(),
                "the model pools fp16 (board-validated) and int8 max/min; no public program pools another type",
            ));
        }
    };
    if r.size_code != size_code {
        return Err(inconsistent(
            at,
            ppu_rdma::RdmaDataFormat::IN_PRECISION,
            r.size_code,
            format!(
                "the PPU processes {prec}, whose elements the read DMA codes as {size_code} (0 4-bit, 1 8-bit, 2 16-bit, 3 32-bit)"
            ),
        ));
    }
    Ok(())
}

/// The read and write strides (16-byte units) of a task pooling `surfaces` surfaces.
fn strides(
    at: At,
    p: &task::Ppu,
    r: &task::PpuRdma,
    surfaces: u32,
    unvalidated: &mut Vec<String>,
) -> Result<(), SimError> {
    let (iw, ih, _) = p.cube_in;
    let (ow, oh, _) = p.cube_out;
    // The read: line and surface strides in 16-byte units.
    if ih > 1 && r.line_stride < iw {
        return Err(inconsistent(
            at,
            ppu_rdma::RdmaSrcLineStride::SRC_LINE_STRIDE,
            r.line_stride,
            format!("lines of {iw} atoms overlap"),
        ));
    }
    if surfaces > 1
        && u64::from(r.surf_stride) < u64::from(r.line_stride) * u64::from(ih - 1) + u64::from(iw)
    {
        return Err(inconsistent(
            at,
            ppu_rdma::RdmaSrcSurfStride::SRC_SURF_STRIDE,
            r.surf_stride,
            format!(
                "surfaces of {ih} lines of stride {} atoms overlap",
                r.line_stride
            ),
        ));
    }
    let line_ok = ih == 1 || r.line_stride == iw;
    let surf_ok = surfaces == 1 || u64::from(r.surf_stride) == u64::from(iw) * u64::from(ih);
    if !(line_ok && surf_ok) {
        unvalidated.push(format!(
            "{} = {} and {} = {} atoms read a {iw}x{ih} window of a larger cube; board programs read whole cubes ({iw} and {} atoms) [derived from the vendor's convolution slices]",
            ppu_rdma::RdmaSrcLineStride::SRC_LINE_STRIDE,
            r.line_stride,
            ppu_rdma::RdmaSrcSurfStride::SRC_SURF_STRIDE,
            r.surf_stride,
            iw * ih
        ));
    }
    // The write: lines of `ow` atoms, surfaces `surf_stride` atoms apart.
    if surfaces > 1 && u64::from(p.surf_stride) < u64::from(ow) * u64::from(oh) {
        return Err(inconsistent(
            at,
            ppu::DstSurfStride::DST_SURF_STRIDE,
            p.surf_stride,
            format!("output surfaces of {ow}x{oh} atoms overlap"),
        ));
    }
    if p.index_add != p.surf_stride {
        return Err(inconsistent(
            at,
            ppu::DataFormat::INDEX_ADD,
            p.index_add,
            format!(
                "without pooling indices it repeats {} ({}), as in every program",
                ppu::DstSurfStride::DST_SURF_STRIDE,
                p.surf_stride
            ),
        ));
    }
    if surfaces > 1 && u64::from(p.surf_stride) != u64::from(ow) * u64::from(oh) {
        unvalidated.push(format!(
            "{} = {} atoms writes a {ow}x{oh} window of a larger cube; board programs write whole cubes ({} atoms) [derived from the vendor's convolution slices]",
            ppu::DstSurfStride::DST_SURF_STRIDE,
            p.surf_stride,
            ow * oh
        ));
    }
    Ok(())
}

/// The checked pooling task.
fn pool(t: &task::Task, p: &task::Ppu, r: &task::PpuRdma, unvalidated: Vec<String>) -> Pool {
    let (iw, ih, c) = p.cube_in;
    let (ow, oh, _) = p.cube_out;
    let prec = p.precision;
    let input = Cube {
        base: super::exec::addr(r.src),
        w: iw,
        h: ih,
        c,
        prec,
        line: u64::from(r.line_stride) * 16,
        surf: u64::from(r.surf_stride) * 16,
        register: ppu_rdma::RdmaSrcBaseAddr::NAME,
        block: Block::PpuRdma,
    };
    let out = Cube {
        base: super::exec::addr(p.out),
        w: ow,
        h: oh,
        c,
        prec,
        line: u64::from(ow) * 16,
        surf: u64::from(p.surf_stride) * 16,
        register: ppu::DstBaseAddr::NAME,
        block: Block::Ppu,
    };
    Pool {
        enable: t.enable(),
        method: p.method,
        prec,
        input,
        out,
        kernel: p.kernel,
        stride: p.stride,
        padding: p.padding,
        pad: p.pad_values.0,
        recip: p.recip,
        dma: t.dma(),
        unvalidated,
    }
}

/// The output size along one axis: `(n + pads − k) / s + 1`, every window starting in
/// the padded input.
fn geometry<R: Register>(
    at: At,
    n: u32,
    pads: u32,
    k: u32,
    s: u32,
    out: u32,
    field: crate::regs::Field<R>,
) -> Result<(), SimError> {
    let span = n + pads;
    if span < k {
        return Err(inconsistent(
            at,
            field,
            out - 1,
            format!("a kernel of {k} does not fit {n} + {pads} padded pixels"),
        ));
    }
    let want = (span - k) / s + 1;
    dim(at, field, out, want, || {
        format!(
            "a kernel of {k} with stride {s} over {n} pixels and {pads} of padding gives {want} (stored {})",
            want - 1
        )
    })
}

/// Refuses a cube dimension `got` (stored as `got` − 1 in `field`) other than `want`,
/// for the reason `why` gives.
fn dim<R: Register>(
    at: At,
    field: crate::regs::Field<R>,
    got: u32,
    want: u32,
    why: impl FnOnce() -> String,
) -> Result<(), SimError> {
    if got == want {
        return Ok(());
    }
    Err(inconsistent(at, field, got - 1, why()))
}

/// A reciprocal register: the fp16 bits of 65536 / k for an average over a kernel side
/// of `k`, 0 for max and min (`k` = 0).
fn recip<R: Register>(
    at: At,
    k: u32,
    value: u32,
    field: crate::regs::Field<R>,
) -> Result<(), SimError> {
    if k == 0 {
        if value != 0 {
            return Err(unsupported(
                at,
                field,
                value,
                "max and min programs write 0 (the reciprocal is the average's)",
            ));
        }
        return Ok(());
    }
    match fp16_recip(k) {
        Some(want) if want == value => Ok(()),
        Some(want) => Err(unsupported(
            at,
            field,
            value,
            format!(
                "the model executes the board-validated reciprocal, the fp16 bits of 65536 / {k} = {want:#x}"
            ),
        )),
        None => Err(unsupported(
            at,
            field,
            value,
            "an average over a kernel side of 1 needs 65536, which fp16 cannot hold",
        )),
    }
}

/// Whether the task pads its input on any side.
fn padded(p: &task::Ppu) -> bool {
    p.padding.iter().any(|&v| v != 0)
}

/// The method and its reciprocals.
fn method(at: At, p: &task::Ppu, unvalidated: &mut Vec<String>) -> Result<(), SimError> {
    let prec = p.precision;
    // The kernel sides whose reciprocals the registers hold: 0 (none) for max and min.
    let (kw, kh) = match p.method {
        PoolMethod::Average => {
            if prec == Precision::Int8 {
                return Err(unsupported(
                    at,
                    ppu::OperationModeCfg::POOLING_METHOD,
                    0,
                    "int8 average: its reciprocal encoding and rounding have no board confirmation the model can follow (docs/hardware/pooling.md#int8)",
                ));
            }
            p.kernel
        }
        PoolMethod::Max | PoolMethod::Min => (0, 0),
    };
    recip(at, kw, p.recip.0, ppu::RecipKernelWidth::RECIP_KERNEL_WIDTH)?;
    recip(
        at,
        kh,
        p.recip.1,
        ppu::RecipKernelHeight::RECIP_KERNEL_HEIGHT,
    )?;
    if prec == Precision::Int8 {
        let copy = p.kernel == (1, 1) && p.stride == (1, 1) && !padded(p);
        unvalidated.push(if copy {
            "int8 1x1 max/min: the vendor's dummy PPU task, whose output no board run observed (docs/hardware/pooling.md#int8)".into()
        } else {
            "native int8 max/min pooling: one board report found it wrong, a later one bit-exact with these precision codes (docs/hardware/pooling.md#int8)".into()
        });
    } else if p.method == PoolMethod::Min {
        unvalidated.push(format!(
            "{} = 2 (min): the code is the TRM's; no board-run fp16 program pools min [derived from max]",
            ppu::OperationModeCfg::POOLING_METHOD
        ));
    }
    Ok(())
}

/// The pad value: unused (0) without padding; validated values with it.
fn pad_value(at: At, p: &task::Ppu, unvalidated: &mut Vec<String>) -> Result<(), SimError> {
    let (prec, padded) = (p.precision, padded(p));
    let v = p.pad_values.0;
    let field = ppu::PaddingValue1Cfg::PAD_VALUE_0;
    if !padded {
        if v != 0 {
            return Err(unsupported(
                at,
                field,
                v,
                "a pad value without padding; every unpadded program writes 0",
            ));
        }
        return Ok(());
    }
    match prec {
        Precision::Int8 => {
            if p.method != PoolMethod::Max || v != INT8_MAX_PAD {
                return Err(unsupported(
                    at,
                    field,
                    v,
                    format!(
                        "padded int8 pooling is modelled for max with {INT8_MAX_PAD:#x} (-128) only"
                    ),
                ));
            }
        }
        _ => {
            let why = "an fp16 pad value keeps bits 15:0; no program sets higher bits";
            at_most(at, (field, v), 0xFFFF, why)?;
            let validated = match p.method {
                PoolMethod::Max => v == FP16_NEG_INF,
                PoolMethod::Average => v == 0,
                PoolMethod::Min => false,
            };
            if !validated {
                unvalidated.push(format!(
                    "{field} = {v:#06x} ({}) for {:?}: board programs pad max with -inf (0xfc00) and averages with 0 [derived]",
                    f16_to_f32(v as u16),
                    p.method
                ));
            }
        }
    }
    Ok(())
}
