//! The DPU-only split-K add task.

use crate::error::{Error, Result};
use crate::regcmd::DmaAddr;
use crate::task::{AluOp, Dpu, DpuRdma, Erdma, Ew, EwOp, Mrdma, Output, Precision, Task};

/// The DPU-only task that adds two int32 partial results in the native layout
/// `[channels/4][rows][4]` — the split-K accumulate of docs/hardware/matmul-programs.md#npu-k-reduction: MRDMA reads
/// `acc`, ERDMA reads `partial`, the EW ALU adds, the write DMA stores to `out`. Limits are
/// the board-validated ones (rows ≤ 128, channels ≤ 1024, channels a multiple of 4).
/// [`Task::body`] gives its register list (op-enable `BlockMask::ELEMENTWISE`).
pub fn add_task(
    rows: u32,
    channels: u32,
    acc: DmaAddr,
    partial: DmaAddr,
    out: DmaAddr,
) -> Result<Task> {
    let mut task = add_task_strided(rows, channels, (acc, rows), (partial, rows))?;
    if let Some(dpu) = task.dpu.as_mut() {
        dpu.out.addr = out;
    }
    Ok(task)
}

/// The split-K add in place over part of a larger cube: `acc` (surfaces `acc.1` atoms
/// apart, at least `rows`) += `partial` (surfaces `partial.1` atoms apart), written back
/// at `acc`. MRDMA steps over the rest of each of `acc`'s surfaces with its surface
/// notch; the ERDMA operand and the write DMA take their own surface strides. What a
/// matmul writing one cube adds its later K waves with (`Plan::cube_tasks`). Limits as
/// [`add_task`].
pub fn add_task_strided(
    rows: u32,
    channels: u32,
    (acc, acc_stride): (DmaAddr, u32),
    (partial, partial_stride): (DmaAddr, u32),
) -> Result<Task> {
    if rows == 0 || rows > 128 || channels == 0 || channels > 1024 || !channels.is_multiple_of(4) {
        return Err(Error::Unsupported {
            what: "split-K add task",
            why: format!(
                "{rows} rows x {channels} channels; the recipe covers 1..=128 rows and 4..=1024 channels in steps of 4"
            ),
        });
    }
    if acc_stride < rows || partial_stride < rows {
        return Err(Error::Unsupported {
            what: "split-K add task",
            why: format!(
                "surfaces of {acc_stride} and {partial_stride} atoms hold fewer than the {rows} rows"
            ),
        });
    }
    let cube = (rows, 1, channels);
    let out = Output::at(acc, Precision::Int32, acc_stride, 0);
    let dpu = Dpu {
        ew: Some(Ew::from_memory(EwOp::Alu(AluOp::Add), 3)),
        ..Dpu::flying(cube, Precision::Int32, out)
    };
    let read = Mrdma::at(acc, 0, acc_stride - rows);
    let dpu_rdma = DpuRdma {
        erdma: Some(Erdma {
            addr: partial,
            data_size: 3,
            data_mode: 1,
            surf_stride: partial_stride,
            line_notch: 0,
            surf_notch: 0,
        }),
        ..DpuRdma::flying(cube, Precision::Int32, read)
    };
    Ok(Task::dpu_only(dpu, dpu_rdma))
}
