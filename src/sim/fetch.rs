//! The PC's fetch: reads one task list and applies its register writes to a group.

use super::error::{At, SimError};
use super::{CoreState, Simulator};
use crate::regcmd::RegCmd;
use crate::regs::{self, Block, Register, pc};
use crate::task::read::{GroupControl, group_control};

/// Most entries one fetch can hold (16-bit PC_DATA_AMOUNT, 16-byte units).
const MAX_FETCH_ENTRIES: usize = (u16::MAX as usize + 1) * 2;

/// What one task list asked for.
pub(super) struct Fetched {
    pub enable: Option<u32>,
    pub next_addr: u32,
    pub next_amount: u32,
    /// The index of the op-enable entry in the list.
    pub enable_index: usize,
    /// Bytes the PC read.
    pub bytes: u64,
}

/// Reads `(amount + 1) × 2` entries at `addr` and applies them to `group`.
pub(super) fn fetch_and_apply(
    sim: &mut Simulator,
    at: At,
    addr: u32,
    amount: u32,
    group: usize,
    serial: u64,
) -> Result<Fetched, SimError> {
    let n = (amount as usize + 1) * 2;
    sim.charge(at, super::BUDGET_FETCH, n as u64)?;
    // The address came from the previous task's chain entry, or from the kick (which
    // writes the same register); `at` tells which.
    let register = pc::BaseAddress::NAME;
    let bytes = sim
        .memory
        .read(addr as u64, n * 8)
        .ok_or(SimError::Dma {
            at,
            addr: addr as u64,
            len: n as u64 * 8,
            block: Block::Pc,
            register,
            write: false,
        })?
        .to_vec();
    let mut f = Fetched {
        enable: None,
        next_addr: 0,
        next_amount: 0,
        enable_index: 0,
        bytes: bytes.len() as u64,
    };
    let core = &mut sim.cores[at.core];
    for (i, chunk) in bytes.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        let e = RegCmd(u64::from_le_bytes(b));
        let bad = |why: String| SimError::BadEntry {
            at,
            addr: addr + 8 * i as u32,
            entry: e.0,
            why,
        };
        let is_nop = e.0 == 0 || e == RegCmd::new(regs::TARGET_NOP_BIT48, 0, 0);
        if f.enable.is_some() {
            if !is_nop {
                return Err(bad(
                    "an entry after the op-enable entry in the same fetch".into()
                ));
            }
            continue;
        }
        match e.target() {
            _ if is_nop => {}
            regs::TARGET_NOP | regs::TARGET_NOP_BIT48 => {
                return Err(bad("a NOP target with a non-zero value or offset".into()));
            }
            regs::TARGET_MARKER => {
                if e.value() != 0 || e.offset() != 0 {
                    return Err(bad(
                        "the 0x0041 marker carries a value or offset; every known program writes 0"
                            .into(),
                    ));
                }
            }
            regs::TARGET_OP_ENABLE => {
                if e.offset() != pc::OperationEnable::OFFSET {
                    return Err(bad(format!(
                        "op-enable entry at offset {:#06x}, not 0x0008",
                        e.offset()
                    )));
                }
                f.enable = Some(e.value());
                f.enable_index = i;
            }
            t => apply_register(core, &mut f, e, t, group, serial, bad)?,
        }
    }
    Ok(f)
}

/// A register entry of target `t`: it must name a register of the target's block that
/// programs write; the PC's chain registers go to `f`, the LUT port to the core's LUT
/// RAM, every other register to `group`, marked as written by the task `serial`.
fn apply_register(
    core: &mut CoreState,
    f: &mut Fetched,
    e: RegCmd,
    t: u16,
    group: usize,
    serial: u64,
    bad: impl Fn(String) -> SimError,
) -> Result<(), SimError> {
    let block =
        Block::from_target(t).ok_or_else(|| bad(format!("unknown target code {t:#06x}")))?;
    let info = regs::lookup(e.offset())
        .ok_or_else(|| bad(format!("no register at offset {:#06x}", e.offset())))?;
    if info.block != block {
        return Err(bad(format!(
            "target {t:#06x} addresses {} but offset {:#06x} is {}",
            block.name(),
            e.offset(),
            info.full_name
        )));
    }
    let reserved = e.value() & !info.known_mask();
    if reserved != 0 {
        return Err(bad(format!(
            "{} with reserved bits {reserved:#x} set",
            info.full_name
        )));
    }
    if block == Block::Pc {
        match e.offset() {
            o if o == pc::BaseAddress::OFFSET => f.next_addr = e.value(),
            o if o == pc::RegisterAmounts::OFFSET => f.next_amount = e.value(),
            o => {
                return Err(bad(format!(
                    "{} written through regcmd; only the chain registers 0x0010 and 0x0014 are",
                    super::reg_name(o)
                )));
            }
        }
        return Ok(());
    }
    if matches!(
        group_control(info.offset),
        Some(GroupControl::Status | GroupControl::Enable)
    ) {
        return Err(bad(format!(
            "{} is not written by programs (status, or started by the op-enable entry)",
            info.full_name
        )));
    }
    if crate::task::is_lut_port(e.offset()) {
        core.lut.port_write(e.offset(), e.value()).map_err(bad)?;
        return Ok(());
    }
    let idx = e.offset() as usize / 4;
    core.groups[group][idx] = e.value();
    core.written[group][idx] = serial;
    Ok(())
}

/// The number of entries up to and including the first op-enable at `addr`, if one follows
/// within what one fetch can hold. The entries looked at are charged to the work budget
/// (after the search, which is bounded by [`MAX_FETCH_ENTRIES`]).
pub(super) fn list_len(sim: &mut Simulator, at: At, addr: u32) -> Result<Option<usize>, SimError> {
    let mut looked = 0u64;
    let found = (0..MAX_FETCH_ENTRIES).find_map(|i| {
        looked += 1;
        let b = sim.memory.read(addr as u64 + 8 * i as u64, 8)?;
        let e = RegCmd(u64::from_le_bytes(b.try_into().ok()?));
        (e.target() == regs::TARGET_OP_ENABLE).then_some(i + 1)
    });
    sim.charge(at, super::BUDGET_SEARCH, looked)?;
    Ok(found)
}
