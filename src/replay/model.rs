//! The model target: the simulator, each core's range run as the vendor kernel kicks it.

use super::target::{Outcome, Run, Span, Target};
use crate::sim::Simulator;
use crate::submit::{TaskDesc, started_cores};
use std::collections::BTreeMap;

/// The cores a vendor core mask starts, in order ([`started_cores`]; a mask that starts
/// none is refused by the walk's plan before anything runs).
pub(super) fn cores_of(mask: u32) -> impl Iterator<Item = usize> {
    started_cores(mask)
        .unwrap_or(&[])
        .iter()
        .map(|&(core, _)| core)
}

/// The simulator, with buffers at their recorded addresses moved by `shift`.
pub(super) struct Model {
    sim: Simulator,
    at: BTreeMap<u32, u32>,
    shift: u32,
}

impl Model {
    /// A fresh simulator whose buffers go `shift` bytes (wrapping) from where they were
    /// recorded, with a work budget of `budget` units for the whole replay.
    pub(super) fn new(shift: u32, budget: u64) -> Model {
        let mut sim = Simulator::new();
        sim.set_work_budget(budget);
        Model {
            sim,
            at: BTreeMap::new(),
            shift,
        }
    }

    /// The simulator address of `at`'s first byte: an error for an unknown buffer,
    /// `None` where the offset overflows the address space.
    fn address(&self, at: Span) -> Result<Option<u64>, String> {
        let a = *self.at.get(&at.id).ok_or(format!("no buffer {}", at.id))? as u64;
        Ok(a.checked_add(at.offset))
    }
}

impl Target for Model {
    fn place(&mut self, id: u32, size: u64, addr: u32) -> Result<u32, String> {
        let a = addr.wrapping_add(self.shift);
        self.sim
            .memory_mut()
            .map_zeroed(a, size as usize)
            .map_err(|e| format!("buffer {id}: {e}"))?;
        self.at.insert(id, a);
        Ok(a)
    }
    fn write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<(), String> {
        let at = Span {
            id,
            offset,
            len: bytes.len(),
        };
        let a = self.address(at)?;
        let dst = a.and_then(|a| self.sim.memory_mut().write(a, at.len));
        dst.ok_or_else(|| at.misfit())?.copy_from_slice(bytes);
        Ok(())
    }
    fn inspect(&mut self, at: Span, f: &mut dyn FnMut(&[u8])) -> Result<(), String> {
        let a = self.address(at)?;
        let src = a.and_then(|a| self.sim.memory().read(a, at.len));
        f(src.ok_or_else(|| at.misfit())?);
        Ok(())
    }
    /// Unmaps the buffer: the simulator holds only live buffers, so a later buffer at
    /// the same addresses can be placed.
    fn free(&mut self, id: u32) {
        if let Some(a) = self.at.remove(&id) {
            self.sim.memory_mut().unmap(a);
        }
    }
    /// Runs each core's range as the vendor kernel does ([`Simulator::run_range`]), the
    /// last task of each range receiving the interrupt status.
    fn run(&mut self, r: &Run<'_>) -> Result<Option<Outcome>, String> {
        let mut out = Outcome {
            ok: true,
            task_counter: 0,
            statuses: vec![0; r.tasks.len()],
            lints: Vec::new(),
            why: None,
        };
        for (k, (core, &(start, count))) in cores_of(r.core_mask).zip(r.ranges).enumerate() {
            let base = start as usize;
            let run = self.sim.run_range(core, count, |i| {
                let at = base + i as usize;
                let t = r.tasks.get(at)?;
                Some(TaskDesc {
                    offset: r.addrs[at],
                    ..t.task
                })
            });
            out.lints.extend(run.lints.iter().map(|l| l.to_string()));
            if k == 0 {
                out.task_counter = run.done;
            }
            match run.failure {
                Some(why) => {
                    out.ok = false;
                    out.why = Some(format!("core {core}: {why}"));
                    break;
                }
                None => out.statuses[base + count as usize - 1] = run.int_status,
            }
        }
        if out.ok {
            out.task_counter = r.tasks.len() as u32;
        } else {
            self.sim.reset();
        }
        Ok(Some(out))
    }
}
