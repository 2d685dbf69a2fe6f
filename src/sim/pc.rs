//! The PC: fetches task lists, applies register writes, starts blocks, follows chains.

use super::config::{self, View};
use super::error::{At, Lint, LintKind, SimError};
use super::exec::Checked;
use super::fetch::{Fetched, fetch_and_apply, list_len};
use super::ppu as pooling;
use super::{CoreRun, Kick, MAX_TASKS, Simulator, Stall, block_name, bounds, datapath, irq, lint};
use crate::regcmd::{BlockMask, TAIL_ENTRIES};
use crate::regs::{Register, cna, core, dpu, pc, ppu};

/// A chain followed without TASK_NUMBER stops here: a longer one is a cycle.
const CHAIN_LIMIT: usize = 1 << 16;

fn setup(why: impl Into<String>) -> SimError {
    SimError::Setup { why: why.into() }
}

pub(super) fn run(sim: &mut Simulator, kick: &Kick) -> Result<CoreRun, SimError> {
    let first_amount = check_kick(sim, kick)?;
    let core = kick.core;
    // The kernel's kick: CNA and CORE S_POINTER with both ping-pongs on and the pointer
    // toggling by itself (0xE), the core index in bits 29:28 (no field of the model).
    let kick_pointer = [
        cna::SPointer::POINTER_PP_EN,
        cna::SPointer::EXECUTER_PP_EN,
        cna::SPointer::POINTER_PP_MODE,
    ]
    .iter()
    .fold(0, |raw, f| raw | f.info().mask());
    for g in 0..2 {
        for off in [cna::SPointer::OFFSET, core::SPointer::OFFSET] {
            sim.cores[core].groups[g][off as usize / 4] = kick_pointer | ((core as u32) << 28);
        }
    }
    let mut out = CoreRun {
        core,
        tasks_run: 0,
        raw_status: 0,
        int_status: 0,
        completed: false,
        macs: 0,
        dma: Default::default(),
        lints: Vec::new(),
        stall: None,
    };
    sim.cores[core].kick_start = sim.serial;
    let mut addr = kick.regcmd_addr;
    let mut amount = first_amount;
    let mut last_enable = 0;
    let mut task = 0usize;
    let mut cbuf = config::CbufState::default();
    // Byte ranges of PPU outputs smaller than 4×4 written by this kick's tasks.
    let mut small_pools = Vec::new();
    loop {
        let at = At { core, task };
        sim.serial += 1;
        let serial = sim.serial;
        let group = sim.cores[core].parity;
        let f = fetch_and_apply(sim, at, addr, amount, group, serial)?;
        out.dma.pc_regcmd += f.bytes;
        let Some(enable) = f.enable else {
            out.stall = Some(Stall {
                at,
                why: format!(
                    "no op-enable entry in the {} entries fetched at {addr:#x}",
                    (amount + 1) * 2
                ),
            });
            break;
        };
        last_enable = enable;
        if sim.faults.hang == Some(at) {
            out.stall = Some(Stall {
                at,
                why: "injected fault: the task never completes".into(),
            });
            break;
        }
        let ran = run_task(
            sim,
            at,
            group,
            enable,
            &mut cbuf,
            &mut small_pools,
            &mut out,
        )?;
        if !ran {
            break;
        }
        sim.cores[core].parity ^= 1;
        task += 1;
        out.tasks_run = task as u32;
        match next_link(sim, kick, at, task, &f, &mut out)? {
            Some((a, n)) => (addr, amount) = (a, n),
            None => break,
        }
    }
    finish(&mut out, kick, last_enable);
    Ok(out)
}

/// Checks a kick's own values; returns the first fetch amount.
fn check_kick(sim: &Simulator, kick: &Kick) -> Result<u32, SimError> {
    let core = kick.core;
    if core >= sim.cores.len() {
        return Err(setup(format!(
            "core index {core} (the RK3588 has cores 0..=2)"
        )));
    }
    if !kick.regcmd_addr.is_multiple_of(16) {
        return Err(setup(format!(
            "regcmd address {:#x} is not 16-byte aligned (PC_DATA_ADDR keeps bits 31:4)",
            kick.regcmd_addr
        )));
    }
    match kick.task_number {
        Some(0) => {
            return Err(setup(format!(
                "{} 0: the kernels refuse empty jobs",
                pc::TaskCon::TASK_NUMBER
            )));
        }
        Some(n) if n > MAX_TASKS => {
            return Err(setup(format!(
                "{} {n} does not fit 12 bits (at most {MAX_TASKS})",
                pc::TaskCon::TASK_NUMBER
            )));
        }
        _ => {}
    }
    let first_amount = (kick.regcfg_amount as usize + TAIL_ENTRIES).div_ceil(2) - 1;
    u16::try_from(first_amount).map(u32::from).map_err(|_| {
        setup(format!(
            "regcfg_amount {} gives a fetch amount above 16 bits",
            kick.regcfg_amount
        ))
    })
}

/// Decodes, checks, lints and executes the task whose op-enable entry just arrived, and
/// sets its interrupt bits. Returns `false` when the task stalls.
fn run_task(
    sim: &mut Simulator,
    at: At,
    group: usize,
    enable: u32,
    cbuf: &mut config::CbufState,
    small_pools: &mut Vec<(u64, u64)>,
    out: &mut CoreRun,
) -> Result<bool, SimError> {
    let core = at.core;
    let c = &sim.cores[core];
    let mut view = View::new(&c.groups[group], &c.written[group], c.kick_start, at);
    let mut checked = config::task(&mut view, BlockMask(enable), at.task == 0, cbuf)?;
    if let Checked::Dpu(t) = &mut checked
        && let Some(l) = t.lut.as_mut()
    {
        l.tables = c.lut.tables(at)?;
        for message in super::lut::quirks(l) {
            out.lints.push(Lint {
                at,
                kind: LintKind::LutQuirk,
                message,
            });
        }
    }
    let stale = std::mem::take(&mut view.stale);
    let never: Vec<u16> = stale
        .iter()
        .copied()
        .filter(|&o| c.written[group][o as usize / 4] == 0)
        .collect();
    for reg in [cna::SPointer::OFFSET, core::SPointer::OFFSET] {
        let idx = (c.groups[group][reg as usize / 4] >> 28) & 3;
        if enable & (BlockMask::CNA.0 | BlockMask::CORE.0) != 0 && idx as usize != core {
            out.lints.push(Lint {
                at,
                kind: LintKind::CoreIndex,
                message: format!(
                    "{} names core {idx} in bits 29:28 but the program runs on core {core}",
                    super::reg_name(reg)
                ),
            });
        }
    }
    lint::stale(&stale, &never, at, &mut out.lints);
    let t = match checked {
        Checked::Dpu(t) => *t,
        Checked::Ppu(p) => return run_pool(sim, at, group, &p, small_pools, out),
    };
    lint::task(&t, at, &mut out.lints);
    if lint::needs_rdma(&t) && enable & BlockMask::DPU_RDMA.0 == 0 {
        out.stall = Some(Stall {
            at,
            why: "the DPU waits for data from DPU_RDMA, which the op-enable entry does not start"
                .into(),
        });
        return Ok(false);
    }
    let read_err = sim.faults.dma_read_error == Some(at);
    let write_err = sim.faults.dma_write_error == Some(at);
    sim.charge(at, super::BUDGET_TASK, bounds::work(&t))?;
    out.macs += datapath::execute(
        &mut sim.memory,
        &t,
        at,
        !(read_err || write_err),
        &mut out.dma,
    )?;

    // Interrupt status: every started block reports done for this task's group.
    let g = group as u32;
    if enable & BlockMask::CNA.0 != 0 {
        out.raw_status |= irq::of_group(irq::CNA_FEATURE | irq::CNA_WEIGHT | irq::CNA_CSC, g);
    }
    if enable & BlockMask::CORE.0 != 0 {
        out.raw_status |= irq::of_group(irq::CORE, g);
    }
    if enable & BlockMask::DPU.0 != 0 {
        out.raw_status |= irq::of_group(irq::DPU, g);
    }
    if read_err {
        out.raw_status |= irq::DMA_READ_ERROR;
    }
    if write_err {
        out.raw_status |= irq::DMA_WRITE_ERROR;
    }
    Ok(true)
}

/// Lints, checks against the kick's earlier pooling outputs, executes a pooling task and
/// sets the PPU's interrupt bit for its group.
fn run_pool(
    sim: &mut Simulator,
    at: At,
    group: usize,
    p: &super::exec::Pool,
    small_pools: &mut Vec<(u64, u64)>,
    out: &mut CoreRun,
) -> Result<bool, SimError> {
    lint::pool(p, at, &mut out.lints);
    pooling::check_input(p, small_pools, at)?;
    let read_err = sim.faults.dma_read_error == Some(at);
    let write_err = sim.faults.dma_write_error == Some(at);
    sim.charge(at, super::BUDGET_TASK, pooling::work(p))?;
    pooling::execute(&mut sim.memory, p, at, !(read_err || write_err))?;
    small_pools.extend(pooling::small_output(p));
    out.raw_status |= irq::of_group(irq::PPU, group as u32);
    if read_err {
        out.raw_status |= irq::DMA_READ_ERROR;
    }
    if write_err {
        out.raw_status |= irq::DMA_WRITE_ERROR;
    }
    Ok(true)
}

/// After `task` tasks: the next list's address and amount, or `None` when the run ends
/// (done, or a stall recorded in `out`).
fn next_link(
    sim: &mut Simulator,
    kick: &Kick,
    at: At,
    task: usize,
    f: &Fetched,
    out: &mut CoreRun,
) -> Result<Option<(u32, u32)>, SimError> {
    let done = match kick.task_number {
        Some(n) => task == n as usize,
        None => f.next_addr == 0,
    };
    if done {
        return Ok(None);
    }
    let next_at = At {
        core: at.core,
        task,
    };
    if f.next_addr == 0 {
        out.stall = Some(Stall {
            at: next_at,
            why: format!(
                "{} is {} but task {} has no chain address",
                pc::TaskCon::TASK_NUMBER,
                kick.task_number.unwrap_or(0),
                task - 1
            ),
        });
        return Ok(None);
    }
    if !f.next_addr.is_multiple_of(16) {
        return Err(SimError::Inconsistent {
            at,
            register: pc::BaseAddress::NAME,
            field: pc::BaseAddress::PC_SOURCE_ADDR.name(),
            value: f.next_addr as u64,
            why: "the chain address must be 16-byte aligned (the PC keeps bits 31:4)".into(),
        });
    }
    leaves_list(sim, at, task, f)?;
    // Bits 17:16: the vendor's multi-core chains write the number of cores − 1 there
    // (docs/hardware/registers.md#reserved-bits); run as no change to the fetch.
    let amount = pc::RegisterAmounts::PC_DATA_AMOUNT.extract(f.next_amount);
    let cores_less_one = f.next_amount >> pc::RegisterAmounts::UNK_17_16.info().lo;
    match cores_less_one {
        0 => {}
        1 | 2 => out.lints.push(Lint {
            at,
            kind: LintKind::Unvalidated,
            message: format!(
                "{} = {cores_less_one} in a chain tail, the vendor's multi-core value (cores - 1), runs as no change to the fetch: its meaning is not published",
                pc::RegisterAmounts::UNK_17_16
            ),
        }),
        other => {
            return Err(SimError::Unsupported {
                at,
                register: pc::RegisterAmounts::NAME,
                field: pc::RegisterAmounts::UNK_17_16.name(),
                value: other as u64,
                why: "only the vendor's multi-core values 1 and 2 are known above the 16-bit amount".into(),
            });
        }
    }
    let message = match list_len(sim, at, f.next_addr)? {
        Some(len) => {
            let want = len.div_ceil(2) as u32 - 1;
            (want != amount).then(|| format!(
                "chain amount {} but the next list at {:#x} ends its op-enable at entry {}, which needs {want}",
                amount,
                f.next_addr,
                len - 1
            ))
        }
        None => Some(format!(
            "no op-enable entry follows the chain address {:#x}",
            f.next_addr
        )),
    };
    if let Some(message) = message {
        out.lints.push(Lint {
            at,
            kind: LintKind::ChainAmount,
            message,
        });
    }
    if kick.task_number.is_none() && task == MAX_TASKS as usize {
        out.lints.push(Lint {
            at: next_at,
            kind: LintKind::TaskCount,
            message: format!(
                "the chain runs past {MAX_TASKS} tasks, more than {} can count",
                pc::TaskCon::TASK_NUMBER
            ),
        });
    }
    if task >= CHAIN_LIMIT {
        out.stall = Some(Stall {
            at: next_at,
            why: format!("the chain runs past {CHAIN_LIMIT} tasks (a cycle?)"),
        });
        return Ok(None);
    }
    Ok(Some((f.next_addr, amount)))
}

/// The fetch length the tail just fetched gives the next task (`PC_DATA_AMOUNT`).
fn next_amount(f: &Fetched) -> u32 {
    pc::RegisterAmounts::PC_DATA_AMOUNT.extract(f.next_amount)
}

/// When the kick runs listed tasks ([`Simulator::run_range`]): an error unless the tail
/// just fetched names the next listed task's list and the amount that fetches exactly its
/// body and tail.
fn leaves_list(sim: &Simulator, at: At, task: usize, f: &Fetched) -> Result<(), SimError> {
    let Some(listed) = &sim.listed else {
        return Ok(());
    };
    let want = listed
        .get(task)
        .map(|&(addr, body)| (addr, (body as usize + TAIL_ENTRIES).div_ceil(2) - 1));
    match want {
        Some((addr, amount)) if addr == f.next_addr && amount == next_amount(f) as usize => Ok(()),
        _ => Err(SimError::Inconsistent {
            at,
            register: pc::BaseAddress::NAME,
            field: pc::BaseAddress::PC_SOURCE_ADDR.name(),
            value: f.next_addr as u64,
            why: match want {
                Some((addr, amount)) => format!(
                    "the chain leaves the listed tasks: task {task} is listed at {addr:#x}, fetched with amount {amount}; the tail gives amount {}",
                    next_amount(f)
                ),
                None => format!("the chain runs past the {} listed task(s)", listed.len()),
            },
        }),
    }
}

/// Interrupt status and completion as the vendor kernel judges them, and the lint of an
/// interrupt mask that names an early block.
fn finish(out: &mut CoreRun, kick: &Kick, last_enable: u32) {
    out.int_status = out.raw_status & kick.int_mask;
    out.completed = out.stall.is_none() && irq::vendor_accepts(out.int_status, kick.int_mask);
    let last_pair = if last_enable & BlockMask::PPU.0 != 0 {
        irq::PPU
    } else if last_enable & BlockMask::DPU.0 != 0 {
        irq::DPU
    } else {
        irq::CORE
    };
    let early = kick.int_mask & irq::ALL_DONE & !last_pair;
    let half = kick.int_mask & last_pair;
    if early != 0 || (half != 0 && half != last_pair) {
        let at = At {
            core: out.core,
            task: out.tasks_run.saturating_sub(1) as usize,
        };
        let last_block = if last_pair == irq::DPU {
            dpu::SStatus::OFFSET
        } else {
            ppu::SStatus::OFFSET
        };
        out.lints.push(Lint {
            at,
            kind: LintKind::EarlyIntMask,
            message: if early != 0 {
                format!(
                    "int_mask {:#x} names bits {early:#x} of blocks that finish before the last stage ({}, {last_pair:#x}): the job can complete early",
                    kick.int_mask,
                    block_name(last_block)
                )
            } else {
                format!(
                    "int_mask {:#x} names one bit of the pair {last_pair:#x}; which bit fires depends on the ping-pong group",
                    kick.int_mask
                )
            },
        });
    }
}
