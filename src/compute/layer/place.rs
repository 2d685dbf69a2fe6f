//! Where a layer's tensors live: inputs, outputs, constants and banks in buffers of their
//! own, every other intermediate in one scratch buffer whose bytes are reused once a
//! tensor is dead (docs/ops.md, "Layer programs").

use super::{Kind, StepDef, TensorDef};
use crate::regcmd::BufferId;

/// The program's own buffer.
pub(super) const REGCMD: BufferId = BufferId(0);
/// The scratch buffer of the intermediates.
pub(super) const SCRATCH: BufferId = BufferId(1);

/// Tensors in the scratch buffer start at multiples of this (the DMA engines' 16-byte
/// alignment, rounded up to a cache line).
pub(super) const ALIGN: u64 = 64;

/// Where each tensor lives.
#[derive(Debug)]
pub(super) struct Placement {
    /// Per tensor (by index): its buffer and its offset in it.
    pub at: Vec<(BufferId, u64)>,
    /// The tensors with a buffer of their own, in the order of their buffer ids
    /// (`BufferId(2 + j)` for the `j`-th).
    pub own: Vec<usize>,
    /// Bytes of the scratch buffer.
    pub scratch_end: u64,
    /// What the intermediates would take without reuse.
    pub scratch_sum: u64,
}

/// Places `tensors` for `steps` (in execution order; every tensor a step reads exists
/// when the step is added, so it was written by an earlier step or is not an
/// intermediate). A tensor is live from the step that writes it to the last step that
/// reads it, both included: a first fit over the bytes of dead tensors never hands out
/// bytes a live tensor holds.
pub(super) fn place(tensors: &[TensorDef], steps: &[StepDef]) -> Placement {
    // An intermediate nobody reads after its step and that is not an output is still
    // placed (its step writes it); the step index of each tensor's last use:
    let mut last_use = vec![0usize; tensors.len()];
    for (i, s) in steps.iter().enumerate() {
        for r in &s.reads {
            last_use[r.index] = i;
        }
        last_use[s.writes.index] = last_use[s.writes.index].max(i);
    }
    let mut at = vec![(SCRATCH, 0u64); tensors.len()];
    let mut own = Vec::new();
    let mut free: Vec<(u64, u64)> = Vec::new(); // (offset, bytes), sorted by offset
    let mut live: Vec<(usize, u64, u64)> = Vec::new(); // (dies after step, offset, bytes)
    let mut scratch_end = 0u64;
    let mut scratch_sum = 0u64;
    for (i, s) in steps.iter().enumerate() {
        // Tensors whose last reader ran before this step are dead now.
        live.retain(|&(dies, off, len)| {
            if dies < i {
                free.push((off, len));
                false
            } else {
                true
            }
        });
        free.sort_unstable();
        free = merge(free);
        let t = s.writes.index;
        let def = &tensors[t];
        if def.output {
            own.push(t);
            continue;
        }
        let len = def.bytes.next_multiple_of(ALIGN);
        scratch_sum += len;
        let off = match free.iter().position(|&(_, l)| l >= len) {
            Some(j) => {
                let (o, l) = free[j];
                if l == len {
                    free.remove(j);
                } else {
                    free[j] = (o + len, l - len);
                }
                o
            }
            None => {
                let o = scratch_end;
                scratch_end += len;
                o
            }
        };
        at[t] = (SCRATCH, off);
        live.push((last_use[t], off, len));
    }
    for (t, def) in tensors.iter().enumerate() {
        if !matches!(def.kind, Kind::Intermediate) {
            own.push(t);
        }
    }
    own.sort_unstable();
    own.dedup();
    for (j, &t) in own.iter().enumerate() {
        at[t] = (BufferId(2 + j as u32), 0);
    }
    Placement {
        at,
        own,
        scratch_end,
        scratch_sum,
    }
}

/// Merges adjacent free ranges (sorted by offset).
fn merge(free: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(free.len());
    for (o, l) in free {
        match out.last_mut() {
            Some((po, pl)) if *po + *pl == o => *pl += l,
            _ => out.push((o, l)),
        }
    }
    out
}
