//! The vocabulary of submission: what a kernel driver is told about one task, which cores
//! run which tasks, and the interrupt bits that say a task is done.
//!
//! Every layer that describes a submission speaks it: the program builder reports its
//! tasks as [`TaskDesc`]s ([`crate::regcmd::Program::tasks`]), a device job is made of
//! them, the simulator runs a core's range of them, and a trace records them with the
//! buffer that holds each list ([`BufferTask`]). The module is a leaf: it imports nothing
//! from the crate, so any layer may import it.
//!
//! ```
//! use rknpu_driver::submit::{TaskDesc, irq, started_cores};
//!
//! let t = TaskDesc { offset: 0x40, regcfg_amount: 104, int_mask: irq::DPU, enable: 0xD };
//! assert_eq!((t.regcmd_count(), t.end()), (108, 0x40 + 108 * 8));
//! // Mask 7 starts cores 0, 1 and 2, which read subcore_task slots 2, 3 and 4.
//! assert_eq!(started_cores(7), Some(&[(0, 2), (1, 3), (2, 4)][..]));
//! assert_eq!(started_cores(5), None);
//! ```

/// Entries in the tail that ends every task list: next address, next amount, marker,
/// op-enable (docs/hardware/registers.md#task-list). `regcmd::TAIL_ENTRIES` is the public name;
/// this module imports nothing, and the builder checks at compile time that they agree.
const TAIL_ENTRIES: u32 = 4;

/// One task as a kernel driver is told about it: where its list is, how long its body
/// is, which interrupt bits end it and which blocks it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskDesc {
    /// Where the task's list starts: a byte offset in the buffer that holds it (16-byte
    /// aligned). Where no buffer is named — the simulator's one address space, a kernel's
    /// task array — the buffer is the whole 32-bit address space and this is the list's
    /// device address.
    pub offset: u32,
    /// Body entries, tail excluded (the vendor driver's `regcfg_amount`).
    pub regcfg_amount: u32,
    /// Interrupt bits that signal the task's completion ([`irq::DPU`] for a DPU-last
    /// task, [`irq::PPU`] for a PPU-last one; 0 when it runs neither).
    pub int_mask: u32,
    /// The blocks its op-enable entry starts (the GLOBAL `OPERATION_ENABLE` layout; 0
    /// when not known).
    pub enable: u32,
}

impl TaskDesc {
    /// The rocket driver's `regcmd_count`: body plus tail.
    pub const fn regcmd_count(&self) -> u32 {
        self.regcfg_amount.saturating_add(TAIL_ENTRIES)
    }

    /// Bytes of the whole list, body and tail.
    pub const fn list_bytes(&self) -> u64 {
        (self.regcfg_amount as u64 + TAIL_ENTRIES as u64) * 8
    }

    /// The offset just past the list.
    pub const fn end(&self) -> u64 {
        self.offset as u64 + self.list_bytes()
    }
}

/// A task together with the buffer that holds its list, where a record names buffers: a
/// trace's buffer id in a trace (`trace::Chunk::Submit`), a GEM handle in what a device
/// tells its recorder (`trace::SubmitRecord`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferTask {
    /// The buffer holding the list.
    pub buffer: u32,
    /// The task, its `offset` inside that buffer.
    pub task: TaskDesc,
}

/// The cores the vendor kernel starts for `core_mask` and the `subcore_task` slot each
/// reads, as `(core, slot)` in core order (docs/hardware/matmul-programs.md#multi-core, quirk 8, docs/hardware/quirks.md#quirk-8). For mask 0
/// the kernel picks one core, which reads the slot of its index; the emulated kernel and
/// trace replay take core 0. `None` for the masks that start no core: 5 and 6, which the
/// kernel accepts and never starts, and those above 7, which name no core.
pub const fn started_cores(core_mask: u32) -> Option<&'static [(usize, usize)]> {
    match core_mask {
        0 | 1 => Some(&[(0, 0)]),
        2 => Some(&[(1, 1)]),
        4 => Some(&[(2, 2)]),
        3 => Some(&[(0, 0), (1, 1)]),
        7 => Some(&[(0, 2), (1, 3), (2, 4)]),
        _ => None,
    }
}

/// Per-core task counts as the consecutive `(start, count)` ranges they make, in core
/// order: the ranges a trace records and the vendor `subcore_task` values.
pub fn ranges(per_core: &[usize]) -> Vec<(u32, u32)> {
    per_core
        .iter()
        .scan(0u32, |start, &n| {
            let range = (*start, n as u32);
            *start += n as u32;
            Some(range)
        })
        .collect()
}

/// Interrupt bits (PC INTERRUPT_* registers, docs/hardware/registers.md#interrupts).
pub mod irq {
    use crate::regs::Field;
    use crate::regs::pc::InterruptMask as I;

    /// The bits of a pair of interrupt fields (register groups 0 and 1).
    const fn pair(g0: Field<I>, g1: Field<I>) -> u32 {
        g0.info().mask() | g1.info().mask()
    }

    /// CNA feature group 0 / 1 done.
    pub const CNA_FEATURE: u32 = pair(I::CNA_FEATURE_0, I::CNA_FEATURE_1);
    /// CNA weight group 0 / 1 done.
    pub const CNA_WEIGHT: u32 = pair(I::CNA_WEIGHT_0, I::CNA_WEIGHT_1);
    /// CNA CSC group 0 / 1 done.
    pub const CNA_CSC: u32 = pair(I::CNA_CSC_0, I::CNA_CSC_1);
    /// CORE group 0 / 1 done.
    pub const CORE: u32 = pair(I::CORE_0, I::CORE_1);
    /// DPU group 0 / 1 done: the completion pair of conv, matmul and element-wise jobs.
    pub const DPU: u32 = pair(I::DPU_0, I::DPU_1);
    /// PPU group 0 / 1 done.
    pub const PPU: u32 = pair(I::PPU_0, I::PPU_1);
    /// DMA read error.
    pub const DMA_READ_ERROR: u32 = I::DMA_READ_ERROR.info().mask();
    /// DMA write error.
    pub const DMA_WRITE_ERROR: u32 = I::DMA_WRITE_ERROR.info().mask();
    /// The value the kernels write to clear every bit: every field of the register, its
    /// reset value.
    pub const CLEAR_ALL: u32 = <I as crate::regs::Register>::INFO.reset;
    /// The six done pairs, in bit order.
    pub const PAIRS: [u32; 6] = [CNA_FEATURE, CNA_WEIGHT, CNA_CSC, CORE, DPU, PPU];
    /// Every done bit of both register groups (the pairs together).
    pub const ALL_DONE: u32 = CNA_FEATURE | CNA_WEIGHT | CNA_CSC | CORE | DPU | PPU;
    /// The register group 0 bit of every pair; group 1's is the next bit up.
    const GROUP_0: u32 = I::CNA_FEATURE_0.info().mask()
        | I::CNA_WEIGHT_0.info().mask()
        | I::CNA_CSC_0.info().mask()
        | I::CORE_0.info().mask()
        | I::DPU_0.info().mask()
        | I::PPU_0.info().mask();

    /// The bits of `bits` that belong to register group `group` (0 or 1).
    pub const fn of_group(bits: u32, group: u32) -> u32 {
        bits & (GROUP_0 << group)
    }

    /// The vendor kernel's "fuzzed" status: every pair with any bit set widened to both.
    pub fn fuzz(status: u32) -> u32 {
        PAIRS
            .iter()
            .filter(|&&pair| status & pair != 0)
            .fold(0, |acc, pair| acc | pair)
    }

    /// Whether the vendor kernel accepts `status` (INT_STATUS, already masked) as the
    /// completion of a job whose last task has `int_mask` (docs/hardware/registers.md#interrupts).
    pub fn vendor_accepts(status: u32, int_mask: u32) -> bool {
        fuzz(status) == int_mask
    }

    /// Whether the vendor kernel can complete a job whose last task has `int_mask`:
    /// exactly one whole pair. One bit of a pair (0x100) widens to the pair and never
    /// equals it; two pairs (0xF00) would need both to be pending in one interrupt,
    /// and the handler clears every bit of an interrupt it rejects; bits outside the
    /// pairs (the DMA errors, 0x1000 and 0x2000) never appear in the widened status.
    pub fn vendor_completable(int_mask: u32) -> bool {
        PAIRS.contains(&int_mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interrupt constants, derived from the generated PC interrupt fields, are the
    /// values the kernel drivers use (docs/hardware/registers.md#interrupts: the DPU pair
    /// 0x300 completes conv, matmul and element-wise jobs, the PPU pair 0xC00 pooling).
    #[test]
    fn irq_bits_are_the_drivers_values() {
        let pairs = [0x3, 0xC, 0x30, 0xC0, 0x300, 0xC00];
        assert_eq!(irq::PAIRS, pairs);
        assert_eq!(
            (irq::DMA_READ_ERROR, irq::DMA_WRITE_ERROR, irq::ALL_DONE),
            (0x1000, 0x2000, 0xFFF)
        );
        assert_eq!(irq::PAIRS.iter().fold(0, |a, p| a | p), irq::ALL_DONE);
        assert_eq!(
            irq::of_group(irq::ALL_DONE, 0) | irq::of_group(irq::ALL_DONE, 1),
            irq::ALL_DONE
        );
        assert_eq!(irq::of_group(irq::DPU, 0), 0x100);
        assert_eq!(irq::of_group(irq::DPU, 1), 0x200);
        // Every field of the 17-bit register, the undocumented 16:14 included.
        assert_eq!(irq::CLEAR_ALL, 0x1_FFFF);
    }

    #[test]
    fn ranges_follow_each_other() {
        assert_eq!(ranges(&[3]), vec![(0, 3)]);
        assert_eq!(ranges(&[2, 1, 4]), vec![(0, 2), (2, 1), (3, 4)]);
        assert!(ranges(&[]).is_empty());
    }

    #[test]
    fn every_mask_that_starts_a_core_reads_distinct_slots() {
        for mask in 0..16 {
            match started_cores(mask) {
                Some(s) => {
                    assert!(matches!(mask, 0..=4 | 7), "{mask}");
                    let slots: std::collections::BTreeSet<_> = s.iter().map(|c| c.1).collect();
                    assert_eq!(slots.len(), s.len());
                }
                None => assert!(matches!(mask, 5 | 6 | 8..), "{mask}"),
            }
        }
    }

    #[test]
    fn list_lengths_count_the_tail() {
        let t = TaskDesc {
            offset: 16,
            regcfg_amount: u32::MAX,
            int_mask: 0,
            enable: 0,
        };
        assert_eq!(t.regcmd_count(), u32::MAX);
        assert_eq!(t.list_bytes(), (u32::MAX as u64 + 4) * 8);
        assert_eq!(t.end(), 16 + t.list_bytes());
    }
}
