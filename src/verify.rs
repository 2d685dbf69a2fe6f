//! The pre-submit verifier: every DMA range a program's tasks read or write lies inside a
//! buffer the job lists, with the access the job gives it.
//!
//! The kernel drivers do not check this: a task that writes past its output buffer
//! silently corrupts whatever the IOMMU maps there (or faults the core). The verifier
//! decodes each task into the [task model](crate::task), asks it for its DMA ranges
//! ([`Task::dma`]) and checks them against the job's buffers. It also checks the CBUF
//! rules ([`check_cbuf`]): a reuse bit the previous task of the chain does not make true
//! gives no fault on the NPU, only a wrong result.
//!
//! ```
//! use rknpu_driver::kernels::single::{Dtype, SingleMatmul, A, B, C, REGCMD};
//! use rknpu_driver::verify::{self, BufferAccess, JobBuffer};
//!
//! let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
//! let at = |b| Some(0x1000_0000 + 0x10_0000 * u64::from(b));
//! let words = mm.program()?.bind(|b| at(b.0))?;
//! let buffers = [
//!     JobBuffer::new(at(REGCMD.0).unwrap(), 4096, BufferAccess::Read),
//!     JobBuffer::new(at(A.0).unwrap(), mm.a_bytes() as u64, BufferAccess::Read),
//!     JobBuffer::new(at(B.0).unwrap(), mm.b_bytes() as u64, BufferAccess::Read),
//!     JobBuffer::new(at(C.0).unwrap(), mm.c_bytes() as u64 - 16, BufferAccess::Write),
//! ];
//! // C is one atom too small: the output write is named.
//! let err = verify::check_words(&words, &buffers).unwrap_err();
//! use rknpu_driver::regs::{Register, dpu::DstBaseAddr};
//! assert!(err.to_string().contains(DstBaseAddr::NAME), "{err}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::regcmd::{self, EntryKind, RegCmd};
use crate::task::{Access, CbufHeld, DecodeError, DmaRange, Snapshot, Task};
use std::fmt;

/// How a job lets the NPU use a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferAccess {
    /// The NPU only reads it.
    Read,
    /// The NPU only writes it.
    Write,
    /// Both.
    ReadWrite,
}

impl BufferAccess {
    /// Whether the access allows `a`.
    pub fn allows(self, a: Access) -> bool {
        matches!(
            (self, a),
            (BufferAccess::ReadWrite, _)
                | (BufferAccess::Read, Access::Read)
                | (BufferAccess::Write, Access::Write)
        )
    }

    /// `r`, `w` or `rw`.
    pub fn name(self) -> &'static str {
        match self {
            BufferAccess::Read => "r",
            BufferAccess::Write => "w",
            BufferAccess::ReadWrite => "rw",
        }
    }
}

/// A buffer of a job: device address, length in bytes, access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JobBuffer {
    /// Device address of the first byte.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// What the NPU may do with it.
    pub access: BufferAccess,
}

impl JobBuffer {
    /// A buffer.
    pub const fn new(addr: u64, len: u64, access: BufferAccess) -> JobBuffer {
        JobBuffer { addr, len, access }
    }

    fn contains(&self, r: &DmaRange) -> bool {
        r.start >= self.addr && r.end() <= self.addr.saturating_add(self.len)
    }
}

/// The DMA ranges of one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRanges {
    /// Task index in the program.
    pub task: usize,
    /// Its ranges, in block order.
    pub ranges: Vec<DmaRange>,
}

/// Why a program does not pass.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyError {
    /// A task's registers are not a task the model describes.
    Decode {
        /// Task index.
        task: usize,
        /// The field.
        error: DecodeError,
    },
    /// A range lies in no listed buffer.
    Outside {
        /// Task index.
        task: usize,
        /// The range.
        range: DmaRange,
    },
    /// A range lies in a buffer that does not allow its access.
    Access {
        /// Task index.
        task: usize,
        /// The range.
        range: DmaRange,
        /// The buffer holding it.
        buffer: JobBuffer,
    },
    /// The words hold no task (no op-enable entry).
    NoTask,
}

impl VerifyError {
    /// The same error with its task index moved by `by` (for a chain that starts at
    /// task `by` of a job).
    pub fn shift_task(self, by: usize) -> VerifyError {
        match self {
            VerifyError::Decode { task, error } => VerifyError::Decode {
                task: task + by,
                error,
            },
            VerifyError::Outside { task, range } => VerifyError::Outside {
                task: task + by,
                range,
            },
            VerifyError::Access {
                task,
                range,
                buffer,
            } => VerifyError::Access {
                task: task + by,
                range,
                buffer,
            },
            VerifyError::NoTask => VerifyError::NoTask,
        }
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::Decode { task, error } => write!(f, "task {task}: {error}"),
            VerifyError::Outside { task, range } => write!(
                f,
                "task {task}: {} {} {} bytes at {:#x}..{:#x} ({}), outside every buffer of the job",
                range.register,
                access_name(range.access),
                range.len,
                range.start,
                range.end(),
                range.what
            ),
            VerifyError::Access {
                task,
                range,
                buffer,
            } => write!(
                f,
                "task {task}: {} {} {:#x}..{:#x} ({}) in a buffer the job gives as '{}' ({:#x}, {} bytes)",
                range.register,
                access_name(range.access),
                range.start,
                range.end(),
                range.what,
                buffer.access.name(),
                buffer.addr,
                buffer.len
            ),
            VerifyError::NoTask => write!(f, "the words hold no task (no op-enable entry)"),
        }
    }
}

impl std::error::Error for VerifyError {}

fn access_name(a: Access) -> &'static str {
    match a {
        Access::Read => "reads",
        Access::Write => "writes",
    }
}

/// The tasks of a program's words, as a core would run them in order: each task's writes
/// land in one of two ping-pong register groups, alternating, so an incremental task sees
/// what the task two before it left.
pub fn tasks_of_words(words: &[RegCmd]) -> Result<Vec<Task>, VerifyError> {
    Ok(chains_of_words(words)?.0)
}

/// [`tasks_of_words`], with whether each task starts a chain (the first task, and each
/// task after one whose tail names no next task).
fn chains_of_words(words: &[RegCmd]) -> Result<(Vec<Task>, Vec<bool>), VerifyError> {
    let decoded = regcmd::decode(words);
    let mut groups = [Snapshot::default(), Snapshot::default()];
    let mut tasks = Vec::new();
    let mut firsts = Vec::new();
    let mut chain_ended = true;
    for span in &decoded.tasks {
        let Some(enable) = span.enable else {
            continue;
        };
        firsts.push(chain_ended);
        chain_ended = span.next_address.is_none();
        let group = &mut groups[tasks.len() % 2];
        for e in &decoded.entries[span.start..span.start + span.body_len] {
            if let EntryKind::Write(info) = e.kind {
                group.set(info.offset, e.word.value());
            }
        }
        let task = Task::decode(group, enable).map_err(|error| VerifyError::Decode {
            task: tasks.len(),
            error,
        })?;
        tasks.push(task);
    }
    if tasks.is_empty() {
        return Err(VerifyError::NoTask);
    }
    Ok((tasks, firsts))
}

/// Checks the CBUF rules of the task model ([`Cna::check_cbuf`](crate::task::Cna::check_cbuf):
/// FC_DATA_BANK 0, at least 2 weight banks, and every reuse bit against what the task
/// before it in its chain left in the CBUF) over `tasks`, where `first(i)` says whether
/// task `i` starts a chain. A reuse bit the hardware cannot honour gives no fault, only
/// a silently wrong result, so it is refused here, before submission.
pub fn check_cbuf(tasks: &[Task], first: impl Fn(usize) -> bool) -> Result<(), VerifyError> {
    let mut held = CbufHeld::default();
    for (i, t) in tasks.iter().enumerate() {
        if first(i) {
            held = CbufHeld::default();
        }
        if let Some(cna) = &t.cna {
            held = cna
                .check_cbuf(first(i), &held)
                .map_err(|error| VerifyError::Decode { task: i, error })?;
        }
    }
    Ok(())
}

/// Checks every DMA range of `tasks` against `buffers`; returns the ranges of each task.
pub fn check(tasks: &[Task], buffers: &[JobBuffer]) -> Result<Vec<TaskRanges>, VerifyError> {
    let mut out = Vec::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        let ranges = t.dma();
        for r in &ranges {
            let holder = buffers.iter().find(|b| b.contains(r));
            match holder {
                None => {
                    return Err(VerifyError::Outside { task: i, range: *r });
                }
                Some(b) if !b.access.allows(r.access) => {
                    // Another buffer may overlap it with the right access.
                    if !buffers
                        .iter()
                        .any(|o| o.contains(r) && o.access.allows(r.access))
                    {
                        return Err(VerifyError::Access {
                            task: i,
                            range: *r,
                            buffer: *b,
                        });
                    }
                }
                Some(_) => {}
            }
        }
        out.push(TaskRanges { task: i, ranges });
    }
    Ok(out)
}

/// [`tasks_of_words`], then [`check_cbuf`] over its chains, then [`check`].
pub fn check_words(
    words: &[RegCmd],
    buffers: &[JobBuffer],
) -> Result<Vec<TaskRanges>, VerifyError> {
    let (tasks, firsts) = chains_of_words(words)?;
    check_cbuf(&tasks, |i| firsts[i])?;
    check(&tasks, buffers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::single::{self, Dtype, Layout, SingleMatmul};
    use crate::regs::{Register, cna, dpu, dpu_rdma};

    fn bound(mm: &SingleMatmul) -> (Vec<RegCmd>, [JobBuffer; 5]) {
        let at = |b: u32| 0x1000_0000 + 0x100_0000 * u64::from(b);
        let words = mm.program().unwrap().bind(|b| Some(at(b.0))).unwrap();
        let bufs = [
            JobBuffer::new(
                at(single::REGCMD.0),
                8 * words.len() as u64,
                BufferAccess::Read,
            ),
            JobBuffer::new(at(single::A.0), mm.a_bytes() as u64, BufferAccess::Read),
            JobBuffer::new(at(single::B.0), mm.b_bytes() as u64, BufferAccess::Read),
            JobBuffer::new(at(single::C.0), mm.c_bytes() as u64, BufferAccess::Write),
            JobBuffer::new(at(single::E.0), mm.e_bytes() as u64, BufferAccess::Read),
        ];
        (words, bufs)
    }

    #[test]
    fn exact_buffers_pass_and_one_byte_less_fails_naming_the_register() {
        for (dtype, native, add) in [
            (Dtype::Int8, false, false),
            (Dtype::Int4, true, false),
            (Dtype::Fp16, true, true),
            (Dtype::Int8, false, true),
        ] {
            let mut mm = SingleMatmul::new(7, 96, 64, dtype);
            if native {
                mm.a_layout = Layout::Native;
                mm.c_layout = Layout::Native;
            }
            mm.post.add = add;
            let (words, bufs) = bound(&mm);
            let r = check_words(&words, &bufs).unwrap();
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].ranges.len(), 3 + usize::from(add));
            for (i, reg) in [
                (1, cna::FeatureDataAddr::NAME),
                (2, cna::DcompAddr0::NAME),
                (3, dpu::DstBaseAddr::NAME),
                (4, dpu_rdma::RdmaEwBaseAddr::NAME),
            ] {
                if i == 4 && !add {
                    continue;
                }
                let mut short = bufs;
                short[i].len -= 1;
                let e = check_words(&words, &short).unwrap_err();
                assert!(
                    matches!(&e, VerifyError::Outside { range, .. } if range.register == reg),
                    "{dtype:?} {reg}: {e}"
                );
            }
        }
    }

    #[test]
    fn a_write_into_a_read_only_buffer_is_refused() {
        let mm = SingleMatmul::new(4, 32, 32, Dtype::Int8);
        let (words, mut bufs) = bound(&mm);
        bufs[3].access = BufferAccess::Read;
        let e = check_words(&words, &bufs).unwrap_err();
        assert!(matches!(e, VerifyError::Access { .. }), "{e}");
        bufs[3].access = BufferAccess::ReadWrite;
        check_words(&words, &bufs).unwrap();
    }

    /// [`single::reusing_pair`] of 4×64×32 int8 tasks, bound.
    fn reusing(two_chains: bool, reuse: impl Fn(&mut crate::task::Cbuf)) -> Vec<RegCmd> {
        let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
        let at = |b: u32| 0x1000_0000 + 0x100_0000 * u64::from(b);
        single::reusing_pair(&mm, two_chains, reuse)
            .bind(|b| Some(at(b.0)))
            .unwrap()
    }

    #[test]
    fn reuse_bits_are_checked_against_the_chain() {
        let all = [JobBuffer::new(0, 1 << 32, BufferAccess::ReadWrite)];
        let refused = |words: &[RegCmd], field: &str| match check_words(words, &all) {
            Err(VerifyError::Decode { task: 1, error }) => {
                assert_eq!(error.field, field, "{error}");
            }
            other => panic!("{other:?}"),
        };
        let data = |c: &mut crate::task::Cbuf| c.data_reuse = true;
        // In one chain, the second task finds what the first loaded: accepted.
        assert!(check_words(&reusing(false, data), &all).is_ok());
        // The same task starting a chain of its own cannot count on the CBUF.
        refused(&reusing(true, data), cna::CbufCon0::DATA_REUSE.name());
        // Another bank split is not what the first task left.
        let moved = |c: &mut crate::task::Cbuf| {
            (c.data_banks, c.weight_banks) = (3, 9);
            c.weight_reuse = true;
        };
        refused(&reusing(false, moved), cna::CbufCon0::WEIGHT_REUSE.name());
        // int8 data filling its one bank: no spare bank.
        let full = |c: &mut crate::task::Cbuf| {
            (c.data_banks, c.weight_banks) = (1, 11);
            c.data_reuse = true;
        };
        refused(&reusing(false, full), cna::CbufCon0::DATA_REUSE.name());
        // FC_DATA_BANK other than 0, reuse or not.
        refused(
            &reusing(false, |c| c.fc_data_banks = 1),
            cna::CbufCon0::FC_DATA_BANK.name(),
        );
    }

    #[test]
    fn words_without_a_task_are_an_error() {
        assert_eq!(
            tasks_of_words(&[RegCmd(0), RegCmd(0)]),
            Err(VerifyError::NoTask)
        );
    }
}
