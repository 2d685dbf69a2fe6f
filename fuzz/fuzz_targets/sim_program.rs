//! Fuzzes the simulator: a program and a memory image derived from the input run to an
//! end within the work budget, with `Ok` or a typed `SimError`, never a panic, a hang or
//! an allocation beyond the documented bounds (docs/simulator.md, "Bounds").
//!
//! Input layout: byte 0 chooses the program (even: the worked int8 4x32x32 example
//! mutated by the input; odd: the input's own words), byte 1 the kick (TASK_NUMBER, core),
//! bytes 2..8 the sizes of the three data buffers (each at most 64 KiB); the rest are
//! edits `(entry u16, value u32)` of the example or raw little-endian words.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rknpu_driver::kernels::worked_example as ex;
use rknpu_driver::regcmd::{self, RegCmd};
use rknpu_driver::sim::{Kick, SimError, Simulator};

/// The work budget of one run: small enough that a run takes milliseconds.
const BUDGET: u64 = 1 << 22;

fn addr(b: regcmd::BufferId) -> u32 {
    ex::fixture_address(b).expect("fixture buffer") as u32
}

fuzz_target!(|data: &[u8]| {
    let [mode, kick_byte, s0, s1, s2, s3, s4, s5, rest @ ..] = data else {
        return;
    };
    let Ok(program) = ex::program() else { return };
    let Ok(mut words) = program.bind(ex::fixture_address) else {
        return;
    };
    if mode % 2 == 0 {
        for e in rest.chunks_exact(6) {
            let i = u16::from_le_bytes([e[0], e[1]]) as usize % words.len();
            let v = u32::from_le_bytes([e[2], e[3], e[4], e[5]]);
            words[i] = if mode % 4 == 0 {
                words[i].with_value(v)
            } else {
                RegCmd(words[i].0 ^ ((v as u64) << (8 * (e[0] as u64 % 5))))
            };
        }
    } else {
        words = rest
            .chunks_exact(8)
            .map(|c| RegCmd(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
            .collect();
        if words.is_empty() {
            return;
        }
    }
    let mut sim = Simulator::new();
    sim.set_work_budget(BUDGET);
    let m = sim.memory_mut();
    let size = |a: u8, b: u8| 1 + u16::from_le_bytes([a, b]) as usize;
    let _ = m.map(addr(ex::REGCMD), regcmd::words_to_le_bytes(&words));
    let _ = m.map(addr(ex::INPUT), vec![1; size(*s0, *s1)]);
    let _ = m.map(addr(ex::WEIGHTS), vec![2; size(*s2, *s3)]);
    let _ = m.map_zeroed(addr(ex::OUTPUT), size(*s4, *s5));
    let amount = program.tasks().first().map_or(0, |t| t.regcfg_amount);
    let kick = Kick {
        core: (kick_byte >> 6) as usize % 3,
        task_number: match kick_byte & 0x3f {
            0 => None,
            n => Some(n as u32),
        },
        ..Kick::new(
            addr(ex::REGCMD),
            if mode % 2 == 0 {
                amount
            } else {
                words.len() as u32
            },
        )
    };
    match sim.kick(&kick) {
        Ok(run) => assert!(run.macs <= BUDGET),
        Err(SimError::WorkBudget {
            used,
            needed,
            budget,
            ..
        }) => {
            assert_eq!(budget, BUDGET);
            assert!(used + needed > budget || used.checked_add(needed).is_none());
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    assert!(sim.work_used() <= BUDGET, "the budget was overdrawn");
});
