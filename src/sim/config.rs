//! From a decoded task model to the checked description the data path executes.
//!
//! The registers are read once, by [`task::Task::decode`] (which reads every field of
//! every started block). This file is where the simulator is strict about the *values*:
//! combinations the model does not execute, values no board-validated program uses
//! (docs/simulator.md, "Validated values"), and contradictions between blocks are named
//! errors, never silently ignored.

use super::error::{At, SimError};
use super::exec::{Checked, Cube, Feature, Main, Weights};
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
            conv_main(dpu, cna, core, at, first, cbuf)?
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
    super::check_dpu::dpu(t, dpu, main, at).map(|t| Checked::Dpu(Box::new(t)))
}

/// The CNA and CORE of a convolution task.
fn conv_main(
    dpu: &task::Dpu,
    cna: &task::Cna,
    core: &task::Core,
    at: At,
    first: bool,
    cbuf_state: &mut CbufState,
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
    if c == 0 || c % 32 != 0 {
        return Err(unsupported(
            at,
            cna::DataSize1::DATAIN_CHANNEL,
            c,
            "channels must be a positive multiple of 32 (one weight atom holds 32 channels)",
        ));
    }
    if f.channels_real != c {
        return Err(unsupported(
            at,
            cna::DataSize1::DATAIN_CHANNEL_REAL,
            f.channels_real.wrapping_sub(1),
            format!(
                "differs from {} {c} - 1 (channel padding is not modelled)",
                cna::DataSize1::DATAIN_CHANNEL
            ),
        ));
    }
    check_output_geometry(cna, core, at)?;
    if !cna.cvt.bypass {
        return Err(unsupported(
            at,
            cna::CvtCon0::CVT_BYPASS,
            0,
            "the input converter is modelled bypassed only (the model needs 1)",
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
    if kernels == 0 || !kernels.is_multiple_of(g) {
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
    if cc != kernels {
        return Err(inconsistent(
            at,
            core::DataoutSize1::DATAOUT_CHANNEL,
            cc - 1,
            format!("there are {kernels} kernels"),
        ));
    }
    check_cbuf(cna, at, first, cbuf_state)?;

    let (line, surf) = feature_strides(f, prec, at)?;
    let wbase = addr(cna.weights.addr);
    if !wbase.is_multiple_of(16) {
        return Err(inconsistent(
            at,
            cna::DcompAddr0::DECOMPRESS_ADDR0,
            wbase,
            "weights need 16-byte alignment",
        ));
    }
    Ok(Main::Conv {
        feature: Feature {
            base: addr(f.addr),
            w,
            h,
            c,
            prec,
            line,
            surf,
        },
        weights: Weights {
            base: wbase,
            n: kernels,
            c,
            prec,
        },
    })
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
            "with group line fetch on (GROUP_LINE_OFF 0) the line stride counts 4-byte units and must be a multiple of 4",
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

/// A 1×1, stride-1, unpadded convolution: the output is the feature cube's size, and the
/// CORE agrees.
fn check_output_geometry(cna: &task::Cna, core: &task::Core, at: At) -> Result<(), SimError> {
    let f = &cna.feature;
    let (w, h) = (f.width, f.height);
    let (sx, sy) = cna.conv.stride;
    if sx != 1 {
        return Err(unsupported(
            at,
            cna::ConvCon3::CONV_X_STRIDE,
            sx,
            "only stride 1 is modelled",
        ));
    }
    if sy != 1 {
        return Err(unsupported(
            at,
            cna::ConvCon3::CONV_Y_STRIDE,
            sy,
            "only stride 1 is modelled",
        ));
    }
    if cna.conv.out_width != w {
        return Err(inconsistent(
            at,
            cna::DataSize2::DATAOUT_WIDTH,
            cna.conv.out_width,
            format!("a 1x1 stride-1 unpadded convolution of width {w} gives width {w}"),
        ));
    }
    let pixels = u64::from(w) * u64::from(h);
    if u64::from(cna.conv.out_atomics) != pixels {
        return Err(inconsistent(
            at,
            cna::DataSize3::DATAOUT_ATOMICS,
            cna.conv.out_atomics,
            format!("the output has {w} x {h} = {pixels} pixels"),
        ));
    }
    let (cw, ch, _) = core.out;
    if cw != w {
        return Err(inconsistent(
            at,
            core::DataoutSize0::DATAOUT_WIDTH,
            cw - 1,
            format!("the output is {w} wide"),
        ));
    }
    if ch != h {
        return Err(inconsistent(
            at,
            core::DataoutSize0::DATAOUT_HEIGHT,
            ch - 1,
            format!("the output is {h} high"),
        ));
    }
    Ok(())
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
