//! From a decoded task model to the checked description the data path executes.
//!
//! The registers are read once, by [`task::Task::decode`] (which reads every field of
//! every started block). This module is where the simulator is strict about the *values*:
//! combinations the model does not execute, values no board-validated program uses
//! (docs/simulator.md, "Validated values"), and contradictions between blocks are named
//! errors, never silently ignored.

mod conv;
mod planar;
mod window;

use super::error::{At, SimError, err, inconsistent, unsupported};
use super::exec::{Checked, Cube, Main, addr, rdma_src_cube, unfetched, whole_atoms};
use crate::regs::{Register, dpu, dpu_rdma};
use crate::task::{self, DecodeError, DpuInput, Precision};

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
    super::check::modes_agree(t, dpu, at)?;
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
            conv::conv_main(dpu, cna, core, at, first, cbuf, &mut derived)?
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
    let cube = rdma_src_cube(
        addr(m.addr),
        rdma.cube,
        rdma.precision,
        rdma.mrdma_strides(m),
    );
    whole_atoms(
        cube,
        dpu_rdma::RdmaDataCubeChannel::CHANNEL,
        "channels must fill whole 16-byte atoms",
        at,
    )
}
