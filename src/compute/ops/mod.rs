//! Running one operation's program (`kernels::ops`) on a device: the buffers it
//! relocates are allocated, filled, bound, submitted as one job and read back.
//!
//! [`run_op`] and [`check_op`] run any operation of the `kernels::ops::contract::Op`
//! contract this way, its buffers found by role.
//!
//! This is the plain path for a single operation (and what the operations' tests on the
//! emulated kernel use); a layer program keeps its buffers resident instead.
//!
//! ```
//! use half::f16;
//! use rknpu_driver::device::Device;
//! use rknpu_driver::compute::ops::{ProgramBuffers, run_program};
//! use rknpu_driver::kernels::ops::{self, Cube};
//! use rknpu_driver::kernels::single::add_task;
//! use rknpu_driver::task::Precision;
//!
//! let dev = Device::open_or_emulated()?;
//! // The int32 add of two 4 × 8 cubes (native layout: 2 surfaces of 4 atoms).
//! let cube = Cube::new(4, 1, 8, Precision::Int32)?;
//! let task = add_task(4, 8, ops::at(ops::INPUT, 0), ops::at(ops::OPERAND, 0),
//!     ops::at(ops::OUTPUT, 0))?;
//! let program = ops::chain(&[task])?;
//! let a: Vec<i32> = (0..32).collect();
//! let b: Vec<i32> = (0..32).map(|i| 1000 * i).collect();
//! let out = run_program(&dev, &program, ProgramBuffers::new()
//!     .input(ops::INPUT, cube.pack(&a)?)
//!     .input(ops::OPERAND, cube.pack(&b)?)
//!     .output(ops::OUTPUT, cube.bytes() as usize))?;
//! let sum: Vec<i32> = cube.unpack(&out[0])?;
//! assert_eq!(sum[5], 5 + 5000);
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

mod run;

pub use run::{OpCheck, check_op, run_op};

use crate::device::{Bo, BoFlags, Device, Job};
use crate::error::{Error, Result};
use crate::regcmd::{BufferId, Program, words_to_le_bytes};
use std::collections::BTreeSet;
use std::time::Duration;

/// The buffers of one program run: inputs with their contents, outputs with their sizes.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ProgramBuffers {
    /// Buffers the job reads, with their bytes.
    pub inputs: Vec<(BufferId, Vec<u8>)>,
    /// Buffers the job writes, with their sizes in bytes; they come back in this order.
    pub outputs: Vec<(BufferId, usize)>,
    /// The job's timeout (the kernel's, or the wait's deadline).
    pub timeout: Duration,
}

impl ProgramBuffers {
    /// No buffer yet, a 2 s timeout.
    pub fn new() -> ProgramBuffers {
        ProgramBuffers {
            inputs: Vec::new(),
            outputs: Vec::new(),
            timeout: Duration::from_secs(2),
        }
    }

    /// A buffer the job reads, holding `bytes`.
    pub fn input(mut self, id: BufferId, bytes: Vec<u8>) -> ProgramBuffers {
        self.inputs.push((id, bytes));
        self
    }

    /// A buffer of `len` bytes the job writes.
    pub fn output(mut self, id: BufferId, len: usize) -> ProgramBuffers {
        self.outputs.push((id, len));
        self
    }

    /// The job's timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> ProgramBuffers {
        self.timeout = timeout;
        self
    }
}

/// Runs `program` on `dev` with `buffers`: allocates one buffer object per id (and one
/// for the program), writes the inputs, binds and submits the program as one job on one
/// core, waits for it and returns the outputs' bytes in the order they were given. Every
/// buffer the program relocates must be given once, as an input or an output (which its
/// tasks may read as well as write); the pre-submit verifier checks every DMA range
/// against them. Everything allocated is freed
/// when this returns, on every path.
pub fn run_program(
    dev: &Device,
    program: &Program,
    buffers: ProgramBuffers,
) -> Result<Vec<Vec<u8>>> {
    let regcmd_id = program.regcmd_buffer();
    let mut given = BTreeSet::new();
    for id in buffers
        .inputs
        .iter()
        .map(|(id, _)| *id)
        .chain(buffers.outputs.iter().map(|(id, _)| *id))
    {
        if id == regcmd_id || !given.insert(id) {
            return Err(Error::InvalidArgument {
                what: format!("buffer {} given twice (or as the program's own)", id.0),
            });
        }
    }
    for r in program.relocations() {
        let id = r.target.buffer;
        if id != regcmd_id && !given.contains(&id) {
            return Err(Error::InvalidArgument {
                what: format!(
                    "the program's {} points into buffer {}, which was not given",
                    r.register, id.0
                ),
            });
        }
    }
    let mut inputs = Vec::with_capacity(buffers.inputs.len());
    for (id, bytes) in &buffers.inputs {
        let mut bo = dev.alloc(bytes.len().max(1), BoFlags::default())?;
        bo.write(0, bytes)?;
        inputs.push((*id, bo));
    }
    let mut outputs = Vec::with_capacity(buffers.outputs.len());
    for &(id, len) in &buffers.outputs {
        outputs.push((id, dev.alloc(len.max(1), BoFlags::default())?));
    }
    let mut regcmd = dev.alloc(program.byte_len(), BoFlags::default())?;
    let find = |id: BufferId| -> Option<&Bo> {
        inputs
            .iter()
            .chain(outputs.iter())
            .find(|(i, _)| *i == id)
            .map(|(_, bo)| bo)
    };
    let regcmd_addr = regcmd.dma_addr();
    let words = program.bind(|id| {
        if id == regcmd_id {
            Some(u64::from(regcmd_addr))
        } else {
            find(id).map(|bo| u64::from(bo.dma_addr()))
        }
    })?;
    regcmd.write(0, &words_to_le_bytes(&words))?;
    let mut job = Job::from_program(&regcmd, program).timeout(buffers.timeout);
    for (_, bo) in &inputs {
        job = job.reads(bo);
    }
    // An output may also be read by a later task of the chain (an operation's own
    // intermediate, or an in-place second pass).
    for (_, bo) in &outputs {
        job = job.reads(bo).writes(bo);
    }
    dev.submit(&job)?;
    drop(job);
    let mut out = Vec::with_capacity(outputs.len());
    for ((_, bo), &(_, len)) in outputs.iter_mut().zip(&buffers.outputs) {
        let mut bytes = bo.read_all()?;
        bytes.truncate(len);
        out.push(bytes);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::ops::{self, Cube};
    use crate::kernels::single::add_task;
    use crate::task::Precision;

    fn add_program() -> Program {
        let task = add_task(
            4,
            8,
            ops::at(ops::INPUT, 0),
            ops::at(ops::OPERAND, 0),
            ops::at(ops::OUTPUT, 0),
        )
        .unwrap();
        ops::chain(&[task]).unwrap()
    }

    #[test]
    fn missing_and_duplicate_buffers_are_refused_and_nothing_leaks() {
        let dev = Device::open_spec("emu").unwrap();
        let cube = Cube::new(4, 1, 8, Precision::Int32).unwrap();
        let bytes = cube.bytes() as usize;
        let p = add_program();
        let missing = ProgramBuffers::new()
            .input(ops::INPUT, vec![0; bytes])
            .output(ops::OUTPUT, bytes);
        let e = run_program(&dev, &p, missing).unwrap_err().to_string();
        assert!(e.contains("buffer 2"), "{e}");
        let twice = ProgramBuffers::new()
            .input(ops::INPUT, vec![0; bytes])
            .input(ops::OPERAND, vec![0; bytes])
            .output(ops::INPUT, bytes);
        assert!(run_program(&dev, &p, twice).is_err());
        assert_eq!(dev.live_buffers(), 0);
    }
}
