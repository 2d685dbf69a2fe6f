//! A tensor added to a convolution's output inside the convolution's own DPU: the EW stage
//! adds an operand that MRDMA and ERDMA read between them (`COMB_USE` 5), as the board-run
//! fp16 add of `gregordinary/rocket-userspace` does
//! (docs/hardware/dpu-ops.md#conv-fed-ew). It saves the separate element-wise task and the
//! write and read of the convolution's output in between.
//!
//! Only the board-run geometry is emitted: fp16 in and out, each task writing whole
//! output planes (no band of rows) of at least 12 atoms, the operand laid out as the
//! output cube ([`Conv2d::output_cube`]).

use super::contract::{Bindings, Op, Role};
use super::conv::Conv2d;
use super::eltwise::offset;
use crate::error::{Error, Result};
use crate::kernels::single::preset::reads_off;
use crate::regcmd::DmaAddr;
use crate::task::{
    AluOp, COMB_SHARED_OPERAND, DpuInput, DpuRdma, EW_PER_PIXEL, Erdma, Ew, EwOp, Mrdma, OpCvt,
    Precision, Task,
};

/// `EDATA_SIZE` / `ERDMA_DATA_SIZE` of a 16-bit operand.
const SIZE_16: u32 = 2;

fn unsupported(why: String) -> Error {
    Error::Unsupported {
        what: "convolution with a fused tensor add",
        why,
    }
}

/// Bytes from `base` to `at`, both in the same buffer (or both fixed).
fn distance(base: DmaAddr, at: DmaAddr) -> Option<u32> {
    match (base, at) {
        (DmaAddr::Fixed(b), DmaAddr::Fixed(a)) => a.checked_sub(b),
        (DmaAddr::Reloc(b), DmaAddr::Reloc(a)) if a.buffer == b.buffer => {
            a.offset.checked_sub(b.offset)
        }
        _ => None,
    }
}

/// Adds the tensor at `operand` (laid out as the output cube whose base is `output`) to
/// what the convolution task writes. The task must be a CORE-fed fp16 → fp16 task over
/// whole output planes of at least 12 atoms, with no EW stage of its own.
pub fn add_operand(task: &mut Task, output: DmaAddr, operand: DmaAddr) -> Result<()> {
    let Some(dpu) = task.dpu.as_mut() else {
        return Err(unsupported("the task has no DPU".into()));
    };
    if dpu.input != DpuInput::Core
        || dpu.precision != Precision::Fp16
        || dpu.out.precision != Precision::Fp16
    {
        return Err(unsupported(
            "only a CORE-fed fp16 -> fp16 convolution is fused (the board-run add)".into(),
        ));
    }
    if dpu.ew.is_some() {
        return Err(unsupported("the task's EW stage is already in use".into()));
    }
    let (w, h, c) = dpu.cube;
    let plane = w * h;
    if dpu.out.notch != 0 || dpu.out.surf_stride != plane {
        return Err(unsupported(format!(
            "the task writes a band of a taller output ({w}x{h} of planes of {} atoms): the board-run add covers whole planes",
            dpu.out.surf_stride
        )));
    }
    if plane < 12 {
        return Err(unsupported(format!(
            "an output plane of {plane} atoms: the board-run add needs at least 12"
        )));
    }
    let shift = distance(output, dpu.out.addr).ok_or_else(|| {
        unsupported("the task's output does not lie in the output buffer given".into())
    })?;
    let base = offset(operand, shift)?;
    let erdma_base = offset(base, plane * 16)?;
    let depthwise = task.dpu_rdma.is_some_and(|r| r.depthwise);
    if task
        .dpu_rdma
        .is_some_and(|r| r.mrdma.is_some() || r.erdma.is_some())
    {
        return Err(unsupported("DPU_RDMA already reads for the task".into()));
    }
    dpu.ew = Some(Ew {
        // The board-run add keeps the operand converter on as the identity.
        cvt: Some(OpCvt::IDENTITY),
        ..Ew::from_memory(EwOp::Alu(AluOp::Add), SIZE_16)
    });
    task.dpu_rdma = Some(DpuRdma {
        depthwise,
        comb_use: COMB_SHARED_OPERAND,
        mrdma: Some(Mrdma {
            addr: base,
            line_notch: 0,
            surf_notch: plane,
        }),
        erdma: Some(Erdma {
            addr: erdma_base,
            data_size: SIZE_16,
            data_mode: EW_PER_PIXEL,
            surf_stride: plane,
            line_notch: 0,
            surf_notch: plane,
        }),
        ..reads_off((w, h, c), Precision::Fp16, 15)
    });
    Ok(())
}

impl Conv2d {
    /// The tasks of [`Op::tasks`] with the tensor bound to [`Role::Operand`] (laid out as
    /// [`Conv2d::output_cube`]) added to the output in each task's DPU ([`add_operand`]):
    /// `output = conv(input) + operand`, fp16 only, in one pass. The input, weights,
    /// operand and output are bound by role.
    pub fn tasks_with_add(&self, b: &Bindings) -> Result<Vec<Task>> {
        let (output, operand) = (b.get(Role::Output)?, b.get(Role::Operand)?);
        let mut tasks = self.tasks(b)?;
        for t in &mut tasks {
            add_operand(t, output, operand)?;
        }
        Ok(tasks)
    }
}
