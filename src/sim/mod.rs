//! A functional simulator of the RK3588 NPU that executes regcmd programs.
//!
//! The model covers what matmul programs use: the PC walking chained task lists exactly
//! as docs/hardware/registers.md describes, per-core ping-pong register groups, CNA feature
//! and weight fetch in the NC1HWC2 / weight-atom layouts, CORE multiply-accumulate for
//! int8, int4, int16, fp16 and bf16, the DPU's BS/BN/EW stages, output converter and write
//! DMA, DPU_RDMA operand reads (element-wise add, flying mode), stand-alone PPU pooling
//! tasks, and interrupt status as the kernels read it. It is strict: a register value it
//! does not model is an error naming the task, register, field and value; nothing is
//! guessed. docs/simulator.md lists what is modelled, with what fidelity, and what is not.
//!
//! The simulator is pure: it imports only [`crate::regs`], [`crate::regcmd`],
//! [`crate::submit`] and [`crate::float`].
//!
//! ```
//! use rknpu_driver::kernels::worked_example;
//! use rknpu_driver::sim::{Kick, Simulator};
//!
//! // The int8 4x32x32 worked example (mtx512's int8 matmul; docs/provenance.md): A is 4x32, B is 32x32.
//! let program = worked_example::program()?;
//! let words = program.bind(worked_example::fixture_address)?;
//! let mut sim = Simulator::new();
//! let addr = |b| worked_example::fixture_address(b).unwrap() as u32;
//! sim.memory_mut().map(addr(worked_example::REGCMD), rknpu_driver::regcmd::words_to_le_bytes(&words))?;
//! // A in the native layout [K/16][M][16]: A[m][k] = 1, B in [N/32][K/32][32][32]: B[k][n] = n.
//! sim.memory_mut().map(addr(worked_example::INPUT), vec![1; 4 * 32])?;
//! let weights: Vec<u8> = (0..32u8).flat_map(|n| [n; 32]).collect();
//! sim.memory_mut().map(addr(worked_example::WEIGHTS), weights)?;
//! sim.memory_mut().map_zeroed(addr(worked_example::OUTPUT), 4 * 32 * 4)?;
//! let run = sim.kick(&Kick::new(addr(worked_example::REGCMD), program.tasks()[0].regcfg_amount))?;
//! assert!(run.completed);
//! // C[m][n] = sum_k 1 * n = 32 n, written as int32 [N/4][M][4].
//! let out = sim.memory().read_vec(addr(worked_example::OUTPUT), 512).unwrap();
//! let c = |m: usize, n: usize| {
//!     let o = ((n / 4) * 4 + m) * 16 + (n % 4) * 4;
//!     i32::from_le_bytes(out[o..o + 4].try_into().unwrap())
//! };
//! assert_eq!(c(3, 31), 32 * 31);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bounds;
mod check;
mod comb;
mod config;
mod datapath;
mod dma;
mod error;
mod exec;
mod fetch;
mod lint;
mod lut;
mod memory;
mod pc;
mod ppu;

pub use dma::DmaCounters;
pub use error::{At, BUDGET_FETCH, BUDGET_SEARCH, BUDGET_TASK, Lint, LintKind, SimError};
pub use memory::{Memory, Region};

use crate::regs::{self, Block};
// The interrupt bits are the submission vocabulary's; `pc` and the tests use them as
// `super::irq`.
use crate::submit::{TaskDesc, irq};

/// Number of NPU cores on the RK3588.
pub const CORES: usize = 3;

/// Tasks one kick can count (12-bit PC TASK_NUMBER).
pub const MAX_TASKS: u32 = 4095;

/// CBUF banks per core (the one definition is [`crate::task::cbuf`]).
pub const CBUF_BANKS: u32 = crate::task::cbuf::BANKS;

/// Bytes per CBUF bank.
pub const CBUF_BANK_BYTES: u64 = crate::task::cbuf::BANK_BYTES;

/// The work a [`Simulator`] does before it stops with [`SimError::WorkBudget`], unless
/// [`Simulator::set_work_budget`] says otherwise: 2^36 units (about 6.9 × 10^10). A unit
/// is one regcmd entry fetched or searched, one multiply-accumulate, or one element the
/// DPU reads from memory or writes. A 1024 × 1024 × 1024 matmul takes about 2^30.
pub const DEFAULT_WORK_BUDGET: u64 = 1 << 36;

/// One kick of one core: what the kernel programs before OPERATION_ENABLE
/// (docs/hardware/registers.md#pc-chain).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kick {
    /// Core index, 0..=2.
    pub core: usize,
    /// Device address of the first task's list (PC_DATA_ADDR); 16-byte aligned.
    pub regcmd_addr: u32,
    /// The first task's body length in entries (the vendor `regcfg_amount`).
    pub regcfg_amount: u32,
    /// TASK_NUMBER: run exactly this many tasks. `None` follows the chain to its end
    /// (a tail with a zero next address), which no kernel does but a test bench wants.
    pub task_number: Option<u32>,
    /// INTERRUPT_MASK: the last task's `int_mask`.
    pub int_mask: u32,
}

impl Kick {
    /// A kick of core 0 at `regcmd_addr` that follows the chain and waits for the DPU pair.
    pub fn new(regcmd_addr: u32, regcfg_amount: u32) -> Kick {
        Kick {
            core: 0,
            regcmd_addr,
            regcfg_amount,
            task_number: None,
            int_mask: irq::DPU,
        }
    }
}

/// Faults to inject, for tests of the layers above.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// This task (index within a kick of this core) never completes.
    pub hang: Option<At>,
    /// This task raises DMA_READ_ERROR and does not write its output.
    pub dma_read_error: Option<At>,
    /// This task raises DMA_WRITE_ERROR and does not write its output.
    pub dma_write_error: Option<At>,
}

/// The outcome of one kick.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CoreRun {
    /// The core.
    pub core: usize,
    /// Tasks that completed (the PC's task counter).
    pub tasks_run: u32,
    /// INTERRUPT_RAW_STATUS after the run.
    pub raw_status: u32,
    /// INTERRUPT_STATUS (raw & mask).
    pub int_status: u32,
    /// Whether the vendor kernel would accept the interrupt as the job's completion.
    pub completed: bool,
    /// Multiply-accumulates the run performed.
    pub macs: u64,
    /// Bytes the run's DMA engines moved, summed over its tasks ([`DmaCounters`]).
    pub dma: DmaCounters,
    /// Hazards found.
    pub lints: Vec<Lint>,
    /// Where the run stopped without completing, if it did (a real board would time out).
    pub stall: Option<Stall>,
}

/// A task that never completes: the PC stops there and the kernel would time out.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stall {
    /// The task that does not complete (its index is the PC's task counter).
    pub at: At,
    /// Why.
    pub why: String,
}

/// Per-core state: two ping-pong register groups and the PC's status.
#[derive(Clone)]
struct CoreState {
    /// Register values by `offset / 4`, one array per ping-pong group.
    groups: [Vec<u32>; 2],
    /// The serial number of the task whose list last wrote each register (0 = reset).
    written: [Vec<u64>; 2],
    /// The group the next task uses.
    parity: usize,
    /// The serial number of the last task before the current kick: a register written
    /// after it was written by this kick's chain.
    kick_start: u64,
    /// The LUT RAM, which the access-port registers write and tasks read (state of the
    /// core, not of a register group).
    lut: lut::LutRam,
}

const WINDOW_WORDS: usize = crate::task::read::WINDOW;

impl CoreState {
    fn new() -> CoreState {
        let reset = crate::task::read::reset_window();
        CoreState {
            groups: [reset.clone(), reset],
            written: [vec![0; WINDOW_WORDS], vec![0; WINDOW_WORDS]],
            parity: 0,
            kick_start: 0,
            lut: lut::LutRam::new(),
        }
    }
}

/// The simulated NPU: a memory image and three cores.
#[derive(Clone)]
pub struct Simulator {
    memory: Memory,
    cores: Vec<CoreState>,
    faults: Faults,
    serial: u64,
    /// The work budget, in units ([`DEFAULT_WORK_BUDGET`]).
    budget: u64,
    /// Units used since the simulator was made or the budget last set.
    work: u64,
    /// While [`Simulator::run_range`] kicks: the list address and body length of each task
    /// of the kick, in order. A chain tail the PC follows must name the next of them.
    listed: Option<Vec<(u32, u32)>>,
}

impl Default for Simulator {
    fn default() -> Self {
        Simulator::new()
    }
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("memory", &self.memory)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl Simulator {
    /// A simulator with an empty memory image and every register at its reset value.
    pub fn new() -> Simulator {
        Simulator {
            memory: Memory::new(),
            cores: (0..CORES).map(|_| CoreState::new()).collect(),
            faults: Faults::default(),
            serial: 0,
            budget: DEFAULT_WORK_BUDGET,
            work: 0,
            listed: None,
        }
    }

    /// The memory image.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// The memory image, to place buffers.
    pub fn memory_mut(&mut self) -> &mut Memory {
        &mut self.memory
    }

    /// Replaces the faults to inject.
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// Sets the work budget to `units` and starts counting afresh. Every kick from then on
    /// draws on it (it is not reset per kick). A fetch or a task that would exceed it is
    /// refused with [`SimError::WorkBudget`] before any of its work is done; the search
    /// for a chained list's op-enable (at most 2^17 entries) is charged when it ends.
    /// Units are regcmd entries fetched or searched, multiply-accumulates, and elements
    /// the DPU reads or writes.
    pub fn set_work_budget(&mut self, units: u64) {
        self.budget = units;
        self.work = 0;
    }

    /// The work budget in units ([`DEFAULT_WORK_BUDGET`] unless set).
    pub fn work_budget(&self) -> u64 {
        self.budget
    }

    /// Units of work used since the simulator was made or the budget last set.
    pub fn work_used(&self) -> u64 {
        self.work
    }

    /// Draws `needed` units for `what` at `at`, or refuses without drawing any.
    fn charge(&mut self, at: At, what: &'static str, needed: u64) -> Result<(), SimError> {
        match self.work.checked_add(needed).filter(|&w| w <= self.budget) {
            Some(w) => {
                self.work = w;
                Ok(())
            }
            None => Err(SimError::WorkBudget {
                at,
                what,
                budget: self.budget,
                used: self.work,
                needed,
            }),
        }
    }

    /// Resets every core's registers and LUT RAM (the kernel's soft reset); memory is kept.
    pub fn reset(&mut self) {
        self.cores = (0..CORES).map(|_| CoreState::new()).collect();
    }

    /// The value of `offset` in `core`'s register group `group` (0 or 1).
    pub fn register(&self, core: usize, group: usize, offset: u16) -> Option<u32> {
        let c = self.cores.get(core)?;
        let g = c.groups.get(group)?;
        g.get(offset as usize / 4).copied()
    }

    /// Runs one kick to its end: every task of the chain (or `task_number` tasks).
    ///
    /// A program error stops the run with a [`SimError`]; memory keeps what earlier
    /// tasks wrote. A kick whose job the vendor kernel would not accept as complete (an
    /// interrupt mask that never matches, an injected fault) returns normally with
    /// `completed == false`.
    pub fn kick(&mut self, kick: &Kick) -> Result<CoreRun, SimError> {
        pc::run(self, kick)
    }

    /// Runs several kicks, one per core, as a multi-core job does; results are in the
    /// order given. Cores run one after another, which is equivalent for programs whose
    /// cores write disjoint outputs (the kernel's requirement).
    pub fn kick_all(&mut self, kicks: &[Kick]) -> Result<Vec<CoreRun>, SimError> {
        let mut seen = [false; CORES];
        for k in kicks {
            match seen.get_mut(k.core) {
                Some(s) if !*s => *s = true,
                Some(_) => {
                    return Err(SimError::Setup {
                        why: format!("core {} is kicked twice in one job", k.core),
                    });
                }
                None => {
                    return Err(SimError::Setup {
                        why: format!("core index {} (the RK3588 has cores 0..=2)", k.core),
                    });
                }
            }
        }
        kicks.iter().map(|k| self.kick(k)).collect()
    }
}

/// How one core ran its range of a job ([`Simulator::run_range`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RangeRun {
    /// Tasks completed (the core's task counter).
    pub done: u32,
    /// INTERRUPT_STATUS after the last kick.
    pub int_status: u32,
    /// Multiply-accumulates performed.
    pub macs: u64,
    /// Bytes the DMA engines moved, summed over every kick ([`DmaCounters`]).
    pub dma: DmaCounters,
    /// Hazards found by every kick.
    pub lints: Vec<Lint>,
    /// Why the range stopped before its last task, or `None` when every task completed.
    pub failure: Option<String>,
    /// The simulator's own error when that is what stopped the range (a DMA fault, a
    /// refused value, an exhausted work budget), beside its text in `failure`.
    pub error: Option<SimError>,
}

impl Simulator {
    /// Runs `count` tasks on `core` as the vendor kernel does (docs/hardware/matmul-programs.md#multi-core):
    /// kicks of at most [`MAX_TASKS`] tasks, each at its first task's list and with its
    /// last task's interrupt mask, until every task ran or one did not complete.
    /// `task(i)` describes the range's `i`-th task, its `offset` being the list's device
    /// address (`None`: the range has no such task); its enable mask is not used. A chain
    /// tail the PC follows that names anything but the next listed task's list and length
    /// is an error ([`SimError::Inconsistent`] on `PC.BASE_ADDRESS`): the PC would leave
    /// the words the job lists.
    pub fn run_range(
        &mut self,
        core: usize,
        count: u32,
        task: impl Fn(u32) -> Option<TaskDesc>,
    ) -> RangeRun {
        let mut out = RangeRun::default();
        while out.done < count {
            let n = (count - out.done).min(MAX_TASKS);
            let (Some(first), Some(last)) = (task(out.done), task(out.done + n - 1)) else {
                out.failure = Some(format!(
                    "tasks {}..{} of the range are missing",
                    out.done,
                    out.done + n
                ));
                return out;
            };
            let kick = Kick {
                core,
                regcmd_addr: first.offset,
                regcfg_amount: first.regcfg_amount,
                task_number: Some(n),
                int_mask: last.int_mask,
            };
            // The PC may only walk the listed tasks; a missing one stops at its tail.
            self.listed = Some(
                (out.done..out.done + n)
                    .map_while(&task)
                    .map(|t| (t.offset, t.regcfg_amount))
                    .collect(),
            );
            let ran = self.kick(&kick);
            self.listed = None;
            match ran {
                Ok(run) => {
                    out.macs += run.macs;
                    out.dma += run.dma;
                    out.int_status = run.int_status;
                    out.done += run.tasks_run;
                    out.lints.extend(run.lints);
                    if !run.completed {
                        out.failure = Some(match run.stall {
                            Some(st) => format!("{}: {}", st.at, st.why),
                            None => format!(
                                "invalid irq status {:#x} for int_mask {:#x}",
                                run.int_status, kick.int_mask
                            ),
                        });
                        return out;
                    }
                }
                Err(e) => {
                    out.failure = Some(format!("the NPU does not complete: {e}"));
                    out.error = Some(e);
                    return out;
                }
            }
        }
        out
    }
}

/// `BLOCK.REGISTER` of the register at `offset`, or a placeholder.
fn reg_name(offset: u16) -> &'static str {
    regs::lookup(offset).map_or("unknown register", |r| r.full_name)
}

/// The block whose window holds `offset`, by name.
fn block_name(offset: u16) -> &'static str {
    Block::from_offset(offset).map_or("?", Block::name)
}
