//! Rocket completion, confirmed. A successful PREP_BO does not prove that a rocket job
//! ran: after its 500 ms job timeout the scheduler signals a hung job's fence (with
//! -ECANCELED, `rocket_job_timedout`), and PREP_BO returns success without looking at
//! the fence's error; a job the driver drops (a BO listed twice) has no fence at all.
//! So every rocket job gets one more task, last: a tiny int8 matmul of zeros whose
//! output region starts filled with a pattern no matmul of zeros writes. The tasks of a
//! rocket job run in order on one core and stop at the first that does not complete, so
//! the pattern is gone after the wait exactly when every task of the job completed. The
//! task is an ordinary regcmd program in an ordinary buffer, so the check works on a
//! board as on the emulated kernel (docs/hardware/kernel-behaviours.md#k1).

use super::{Bo, BoFlags, Device, Error, Result};
use crate::kernels::single::{self, Dtype, SingleMatmul};
use crate::regcmd::{Program, words_to_le_bytes};
use crate::sys::uapi::DrmRocketTask;
use std::sync::OnceLock;

/// What the output region holds before the sentinel task runs.
const FILL: u8 = 0xA5;

/// Bytes of the output checked: the first four int32 results.
const CHECKED: usize = 16;

/// The sentinel program and where its operands sit in its one buffer.
#[derive(Debug)]
struct Layout {
    program: Program,
    /// Offsets of A, B and C in the buffer.
    a: usize,
    b: usize,
    c: usize,
    /// Bytes of C.
    c_bytes: usize,
    /// Bytes of the buffer.
    size: usize,
}

fn layout() -> Result<&'static Layout> {
    static LAYOUT: OnceLock<Option<Layout>> = OnceLock::new();
    let page = |n: usize| n.div_ceil(4096) * 4096;
    LAYOUT
        .get_or_init(|| {
            let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
            let program = mm.program().ok()?;
            let a = page(program.byte_len());
            let b = a + page(mm.a_bytes());
            let c = b + page(mm.b_bytes());
            Some(Layout {
                program,
                a,
                b,
                c,
                c_bytes: mm.c_bytes(),
                size: c + page(mm.c_bytes()),
            })
        })
        .as_ref()
        .ok_or_else(|| Error::NotOffered {
            what: "the rocket completion sentinel program could not be built".into(),
        })
}

/// A sentinel buffer for one job: the program bound to it, zero operands, the output
/// filled with the pattern, handed to the device.
pub(super) fn make(dev: &Device) -> Result<Bo> {
    let l = layout()?;
    let mut bo = dev.alloc_with(l.size, BoFlags::default(), false)?;
    let base = u64::from(bo.dma_addr());
    let words = l
        .program
        .bind(|id| {
            Some(
                base + match id {
                    single::REGCMD => 0,
                    single::A => l.a,
                    single::B => l.b,
                    _ => l.c,
                } as u64,
            )
        })
        .map_err(|e| Error::InvalidArgument {
            what: format!("binding the completion sentinel: {e}"),
        })?;
    let mut bytes = vec![0u8; l.size];
    let list = words_to_le_bytes(&words);
    bytes[..list.len()].copy_from_slice(&list);
    bytes[l.c..l.c + l.c_bytes].fill(FILL);
    bo.write(0, &bytes)?;
    Ok(bo)
}

/// The sentinel's tasks, to append to a job.
pub(super) fn tasks(bo: &Bo) -> Result<Vec<DrmRocketTask>> {
    let l = layout()?;
    Ok(l.program
        .tasks()
        .iter()
        .map(|t| DrmRocketTask {
            regcmd: bo.dma_addr() + t.offset,
            regcmd_count: t.regcmd_count(),
        })
        .collect())
}

/// Whether the sentinel task ran: its output no longer holds the pattern.
pub(super) fn overwritten(bo: &mut Bo) -> Result<bool> {
    let l = layout()?;
    let bytes = bo.read_all()?;
    Ok(bytes[l.c..l.c + CHECKED].iter().all(|&b| b != FILL))
}
