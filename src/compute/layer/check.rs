//! The layer's own check of each step: every DMA range of a step's tasks inside the
//! tensors that step declares — reads in the tensors it reads (or its output), writes in
//! its output. The pre-submit verifier only sees buffers, and every intermediate shares
//! the scratch buffer: a step that writes more than its output would overwrite another
//! live intermediate there and still pass it.

use crate::error::{Error, Result};
use crate::regcmd::RegCmd;
use crate::submit::TaskDesc;
use crate::verify::{self, BufferAccess, JobBuffer, VerifyError};
use std::ops::Range;

/// What the check knows of a step.
pub(super) struct StepTensors<'a> {
    /// The step's name.
    pub name: &'a str,
    /// Its tasks, as indices into the program.
    pub tasks: Range<usize>,
    /// Device address and bytes of each tensor it reads.
    pub reads: Vec<(u64, u64)>,
    /// Device address and bytes of the tensor it writes.
    pub writes: (u64, u64),
}

/// Checks the tasks of `step` (lists `descs` of the bound program `words`) against the
/// tensors it declares: [`Error::LayerStep`] naming the step and the first range outside
/// them; [`Error::Verify`] for a task the verifier cannot decode.
pub(super) fn check_step(
    words: &[RegCmd],
    descs: &[TaskDesc],
    step: &StepTensors<'_>,
) -> Result<()> {
    let mut buffers: Vec<JobBuffer> = step
        .reads
        .iter()
        .map(|&(addr, len)| JobBuffer::new(addr, len, BufferAccess::Read))
        .collect();
    // A step may read back what it wrote (an in-place second pass).
    let (addr, len) = step.writes;
    buffers.push(JobBuffer::new(addr, len, BufferAccess::ReadWrite));
    for i in step.tasks.clone() {
        let Some(desc) = descs.get(i) else {
            continue;
        };
        let list = words
            .get(desc.offset as usize / 8..desc.end() as usize / 8)
            .unwrap_or(&[]);
        // One list is one task: its body writes every register the task reads (the
        // layer's program has no incremental bodies).
        let tasks = verify::tasks_of_words(list).map_err(|e| Error::Verify {
            error: e.shift_task(i),
        })?;
        verify::check(&tasks, &buffers).map_err(|e| match e {
            e @ (VerifyError::Outside { .. } | VerifyError::Access { .. }) => Error::LayerStep {
                step: step.name.to_string(),
                error: e.shift_task(i),
            },
            e => Error::Verify {
                error: e.shift_task(i),
            },
        })?;
    }
    Ok(())
}
