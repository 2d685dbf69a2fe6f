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
//! The tasks checked must be the tasks the PC runs. The kernel points the PC at a chain's
//! first list only; the PC finds each later list through the tail of the one before it
//! (its last `PC.BASE_ADDRESS` and `PC.REGISTER_AMOUNTS` writes). [`check_tails`] holds
//! every tail to the next listed task's address and length and the last task's tail to
//! address 0, so a tail cannot send the PC to words nobody checked
//! ([`VerifyError::Chain`]); [`check_chain`] and [`check_words`] run it first.
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
//! let err = verify::check_words(at(REGCMD.0).unwrap(), &words, &buffers).unwrap_err();
//! use rknpu_driver::regs::{Register, dpu::DstBaseAddr};
//! assert!(err.to_string().contains(DstBaseAddr::NAME), "{err}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::regcmd::{self, EntryKind, RegCmd};
use crate::regs::{Block, Register, pc};
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
    /// A listed task's words are not one task list: its only op-enable entry must be its
    /// last entry, since the PC stops fetching there.
    List {
        /// Task index.
        task: usize,
        /// Entries the job lists for the task.
        entries: usize,
        /// Entries up to and including the first op-enable entry, or `None` when there is
        /// none.
        op_enable_at: Option<usize>,
    },
    /// A task's chain tail (the last `PC.BASE_ADDRESS` and `PC.REGISTER_AMOUNTS` writes of
    /// its list) sends the PC somewhere other than the next listed task's words, or
    /// chains on from the last task of a chain: the PC would run words nobody checked.
    Chain {
        /// Task index.
        task: usize,
        /// The address the tail gives the PC (0: the chain ends).
        address: u32,
        /// The fetch amount the tail gives the PC (the whole register value).
        amount: u32,
        /// The next listed task's list address and the fetch amount that covers exactly
        /// its entries, or `None` when the task is the last of its chain.
        expected: Option<(u64, u32)>,
    },
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
            VerifyError::List {
                task,
                entries,
                op_enable_at,
            } => VerifyError::List {
                task: task + by,
                entries,
                op_enable_at,
            },
            VerifyError::Chain {
                task,
                address,
                amount,
                expected,
            } => VerifyError::Chain {
                task: task + by,
                address,
                amount,
                expected,
            },
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
            VerifyError::List {
                task,
                entries,
                op_enable_at: Some(at),
            } => write!(
                f,
                "task {task}: its list of {entries} entries has an op-enable entry at entry {}; the PC stops there, so it must be the list's last",
                at - 1
            ),
            VerifyError::List { task, entries, .. } => write!(
                f,
                "task {task}: its list of {entries} entries has no op-enable entry"
            ),
            VerifyError::Chain {
                task,
                address,
                amount,
                expected,
            } => {
                write!(
                    f,
                    "task {task}: its tail chains to {} {address:#x} with {} {amount:#x}, ",
                    pc::BaseAddress::NAME,
                    pc::RegisterAmounts::NAME
                )?;
                match expected {
                    Some((a, n)) => write!(
                        f,
                        "but the next listed task's words are at {a:#x} and need amount {n:#x}"
                    ),
                    None => write!(
                        f,
                        "but it is the last task of its chain: its tail must hold address 0"
                    ),
                }
            }
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
    let decoded = regcmd::decode(words);
    let mut groups = [Snapshot::default(), Snapshot::default()];
    let mut tasks = Vec::new();
    for span in &decoded.tasks {
        let Some(enable) = span.enable else {
            continue;
        };
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
    Ok(tasks)
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

/// One task of a chain as a job lists it: the device address of its list and the list's
/// entries, body and tail, ending with its op-enable entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskList<'a> {
    /// Device address of the list's first entry.
    pub addr: u64,
    /// The entries.
    pub words: &'a [RegCmd],
}

/// What a list's tail tells the PC: the values of the last `PC.BASE_ADDRESS` and
/// `PC.REGISTER_AMOUNTS` writes in `words` (0 for a register none writes), which is
/// where the PC fetches next and how much.
pub fn tail_of(words: &[RegCmd]) -> (u32, u32) {
    let (mut address, mut amount) = (0, 0);
    for e in &regcmd::decode(words).entries {
        if let EntryKind::Write(info) = e.kind
            && info.block == Block::Pc
        {
            if info.offset == pc::BaseAddress::OFFSET {
                address = e.word.value();
            } else if info.offset == pc::RegisterAmounts::OFFSET {
                amount = e.word.value();
            }
        }
    }
    (address, amount)
}

/// The fetch amount (`PC_DATA_AMOUNT`) that makes the PC read exactly `entries` entries
/// (rounded up to its 16-byte unit): `ceil(entries / 2) - 1`.
pub fn fetch_amount(entries: usize) -> u32 {
    (entries.div_ceil(2) as u32).saturating_sub(1)
}

/// Entries through the first op-enable entry of `words`, if any.
fn through_op_enable(words: &[RegCmd]) -> Option<usize> {
    regcmd::decode(words)
        .entries
        .iter()
        .position(|e| e.kind == EntryKind::OpEnable)
        .map(|i| i + 1)
}

/// Checks that the PC, kicked at the first list, runs exactly the listed tasks of one
/// chain: each list ends with its only op-enable entry, each task's tail gives the next
/// list's address and the amount that fetches exactly its entries (bits 17:16 may hold
/// the vendor's multi-core value, 0 to 2), and the last task's tail gives address 0.
pub fn check_tails(lists: &[TaskList<'_>]) -> Result<(), VerifyError> {
    tails(lists, false)
}

/// [`check_tails`], where with `may_end` a task's tail may also end the chain early (the
/// kernel kicks every task on its own).
fn tails(lists: &[TaskList<'_>], may_end: bool) -> Result<(), VerifyError> {
    for (task, l) in lists.iter().enumerate() {
        let at = through_op_enable(l.words);
        if at != Some(l.words.len()) {
            return Err(VerifyError::List {
                task,
                entries: l.words.len(),
                op_enable_at: at,
            });
        }
    }
    for (task, l) in lists.iter().enumerate() {
        let (address, amount) = tail_of(l.words);
        let expected = lists
            .get(task + 1)
            .map(|n| (n.addr, fetch_amount(n.words.len())));
        let good = match expected {
            _ if may_end && address == 0 => true,
            None => address == 0,
            Some((a, n)) => {
                u64::from(address) == a
                    && address.is_multiple_of(16)
                    && amount & 0xFFFF == n
                    && amount >> 16 <= 2
            }
        };
        if !good {
            return Err(VerifyError::Chain {
                task,
                address,
                amount,
                expected,
            });
        }
    }
    Ok(())
}

/// The tasks of one chain's lists, each list's body applied to the ping-pong register
/// group it lands in.
fn tasks_of_lists(lists: &[TaskList<'_>]) -> Result<Vec<Task>, VerifyError> {
    let mut groups = [Snapshot::default(), Snapshot::default()];
    let mut tasks = Vec::with_capacity(lists.len());
    for (i, l) in lists.iter().enumerate() {
        let decoded = regcmd::decode(l.words);
        let Some(span) = decoded.tasks.first() else {
            return Err(VerifyError::NoTask);
        };
        let Some(enable) = span.enable else {
            return Err(VerifyError::NoTask);
        };
        let group = &mut groups[i % 2];
        for e in &decoded.entries[span.start..span.start + span.body_len] {
            if let EntryKind::Write(info) = e.kind {
                group.set(info.offset, e.word.value());
            }
        }
        let task =
            Task::decode(group, enable).map_err(|error| VerifyError::Decode { task: i, error })?;
        tasks.push(task);
    }
    Ok(tasks)
}

/// Verifies one chain, as one kick of one core runs it: [`check_tails`], then the tasks
/// the PC runs ([`check_cbuf`], the chain's first task starting it, and [`check`]).
pub fn check_chain(
    lists: &[TaskList<'_>],
    buffers: &[JobBuffer],
) -> Result<Vec<TaskRanges>, VerifyError> {
    if lists.is_empty() {
        return Err(VerifyError::NoTask);
    }
    check_tails(lists)?;
    let tasks = tasks_of_lists(lists)?;
    check_cbuf(&tasks, |i| i == 0)?;
    check(&tasks, buffers)
}

/// Verifies listed tasks that the kernel kicks one at a time (the rocket driver runs each
/// task as a job of its own, TASK_NUMBER 1): each tail must end the chain or name the next
/// listed task as [`check_tails`] requires, and a task after one whose tail ends the chain
/// starts a chain of its own for [`check_cbuf`]; then [`check`].
pub fn check_kicked_alone(
    lists: &[TaskList<'_>],
    buffers: &[JobBuffer],
) -> Result<Vec<TaskRanges>, VerifyError> {
    if lists.is_empty() {
        return Err(VerifyError::NoTask);
    }
    tails(lists, true)?;
    let tasks = tasks_of_lists(lists)?;
    let ends: Vec<bool> = lists.iter().map(|l| tail_of(l.words).0 == 0).collect();
    check_cbuf(&tasks, |i| i == 0 || ends[i - 1])?;
    check(&tasks, buffers)
}

/// Verifies the words of a program that sits at device address `base`: its task lists
/// (each through its op-enable entry) form chains, a task whose tail gives address 0
/// ending one; each chain is checked with [`check_chain`]. A tail that names anything
/// but the next list, or a last task that chains on, is [`VerifyError::Chain`].
pub fn check_words(
    base: u64,
    words: &[RegCmd],
    buffers: &[JobBuffer],
) -> Result<Vec<TaskRanges>, VerifyError> {
    let decoded = regcmd::decode(words);
    let lists: Vec<TaskList<'_>> = decoded
        .tasks
        .iter()
        .filter(|t| t.enable.is_some())
        .map(|t| {
            let through = through_op_enable(&words[t.start..t.end]).unwrap_or(0);
            TaskList {
                addr: base + 8 * t.start as u64,
                words: &words[t.start..t.start + through],
            }
        })
        .collect();
    if lists.is_empty() {
        return Err(VerifyError::NoTask);
    }
    let mut out = Vec::with_capacity(lists.len());
    let mut first = 0;
    for i in 0..lists.len() {
        if tail_of(lists[i].words).0 == 0 || i + 1 == lists.len() {
            let mut ranges =
                check_chain(&lists[first..=i], buffers).map_err(|e| e.shift_task(first))?;
            for r in &mut ranges {
                r.task += first;
            }
            out.extend(ranges);
            first = i + 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
