//! The hw target: a device. Buffers are allocated anew and the regcmd relocated into
//! them; each submission is one job.

use super::target::{Outcome, Run, Span, Target};
use crate::Error;
use crate::device::{Bo, BoFlags, CoreMask, Device, Job};
use std::collections::BTreeMap;
use std::time::Duration;

/// A device: buffers are allocated anew and the regcmd relocated into them.
pub(super) struct Hw<'d> {
    dev: &'d Device,
    bos: BTreeMap<u32, Bo>,
}

impl<'d> Hw<'d> {
    /// Replays on `dev`, with no buffer yet.
    pub(super) fn new(dev: &'d Device) -> Hw<'d> {
        Hw {
            dev,
            bos: BTreeMap::new(),
        }
    }

    fn bo(&mut self, id: u32) -> Result<&mut Bo, String> {
        self.bos.get_mut(&id).ok_or(format!("no buffer {id}"))
    }
}

impl Target for Hw<'_> {
    fn place(&mut self, id: u32, size: u64, _addr: u32) -> Result<u32, String> {
        let size = usize::try_from(size).map_err(|_| format!("buffer {id}: {size} bytes"))?;
        let bo = self
            .dev
            .alloc(size, BoFlags::default())
            .map_err(|e| format!("buffer {id}: {e}"))?;
        let a = bo.dma_addr();
        self.bos.insert(id, bo);
        Ok(a)
    }
    fn write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<(), String> {
        let offset = usize::try_from(offset).map_err(|_| format!("offset {offset}"))?;
        self.bo(id)?
            .write(offset, bytes)
            .map_err(|e| format!("buffer {id}: {e}"))
    }
    /// Reads through the buffer's mapping: no copy of the buffer.
    fn inspect(&mut self, at: Span, f: &mut dyn FnMut(&[u8])) -> Result<(), String> {
        let start = usize::try_from(at.offset).unwrap_or(usize::MAX);
        let fits = self
            .bo(at.id)?
            .read_with(|all| all.get(start..start.checked_add(at.len)?).map(f))
            .map_err(|e| format!("buffer {}: {e}", at.id))?;
        fits.ok_or_else(|| at.misfit())
    }
    /// Drops the buffer: the device frees it.
    fn free(&mut self, id: u32) {
        self.bos.remove(&id);
    }
    fn run(&mut self, r: &Run<'_>) -> Result<Option<Outcome>, String> {
        let Some(first) = r.tasks.first() else {
            return Err(format!("submit {}: no task", r.id));
        };
        if r.tasks.iter().any(|t| t.buffer != first.buffer) {
            return Err(format!(
                "submit {}: tasks in several regcmd buffers; a job has one",
                r.id
            ));
        }
        let regcmd = self
            .bos
            .get(&first.buffer)
            .ok_or(format!("no buffer {}", first.buffer))?;
        let tasks = r.tasks.iter().map(|t| t.task).collect();
        let mask = CoreMask::from_bits(r.core_mask).map_err(|e| e.to_string())?;
        let split: Vec<usize> = match mask {
            CoreMask::Auto => vec![r.tasks.len()],
            _ => r.ranges.iter().map(|&(_, n)| n as usize).collect(),
        };
        let mut job = Job::new(regcmd, tasks)
            .on_cores(mask, &split)
            .timeout(Duration::from_millis(r.timeout_ms.max(1) as u64));
        // A trace does not say which buffers a program reads and which it writes: every
        // buffer is given both, and the verifier still checks every range lies in one.
        for (id, bo) in &self.bos {
            if *id != first.buffer {
                job = job.reads(bo).writes(bo);
            }
        }
        Ok(Some(match self.dev.submit(&job) {
            Ok(j) => Outcome {
                ok: true,
                task_counter: j.task_counter,
                statuses: j.int_status,
                lints: Vec::new(),
                why: None,
            },
            Err(Error::Timeout {
                task_counter,
                int_status,
            }) => {
                let mut statuses = vec![0; r.tasks.len()];
                if let Some(l) = statuses.last_mut() {
                    *l = int_status;
                }
                Outcome {
                    ok: false,
                    task_counter,
                    statuses,
                    lints: Vec::new(),
                    why: Some("the job timed out".into()),
                }
            }
            Err(e) => return Err(format!("submit {}: {e}", r.id)),
        }))
    }
}
