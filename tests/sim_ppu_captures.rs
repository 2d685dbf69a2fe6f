//! The PPU tasks of the captured vendor programs (`../shared/captures/` beside a
//! development checkout, or the directory `RKNPU_CAPTURES` names; absent from a fresh
//! clone) on the simulator, each alone with the capture's buffers.
//!
//! Every PPU task in the captures with buffers is the vendor's dummy: a 1×1 int8 max over
//! a 1×1×32 cube of the weight buffer's constant area, written next to it. What can be
//! checked: the task decodes into the model and runs with the PPU's completion pair
//! (0xC00) and no lint but `unvalidated` (its output is not observed on boards); the
//! simulator's output is the input (a 1×1 max is a copy); and the captured bytes at the
//! destination equal it. Whether the buffers were dumped before or after a run is not
//! known for every capture, so the last check confirms the data, not the timing.

mod common;
use common::{capture_cases as cases, captures_or_skip};
use rknpu_driver::regcmd::{BlockMask, RegCmd};
use rknpu_driver::sim::{Kick, LintKind, Simulator};
use rknpu_driver::task::{Snapshot, Task};

fn words(bytes: &[u8]) -> Vec<RegCmd> {
    bytes
        .chunks_exact(8)
        .map(|c| RegCmd(u64::from_le_bytes(c.try_into().unwrap())))
        .collect()
}

#[test]
fn vendor_ppu_tasks_run_alone_and_copy_their_cube() {
    let Some(dir) = captures_or_skip("nothing to run") else {
        return;
    };
    let mut ran = 0;
    for case in cases(&dir) {
        for (i, file) in case.tasks.iter().enumerate() {
            let list = words(&std::fs::read(file).unwrap());
            let Some(pos) = list.iter().position(|w| w.target() == 0x0081) else {
                continue;
            };
            if list[pos].value() != 0x60 {
                continue;
            }
            let (Some(&addr), Some(&amount)) =
                (case.regcmd_addrs.get(i), case.regcfg_amounts.get(i))
            else {
                panic!("{}: task {i} has no descriptor", case.name);
            };
            // The task as the model reads it.
            let mut regs = Snapshot::from_writes(
                list[..pos]
                    .iter()
                    .filter(|w| w.target() > 0x0081)
                    .map(|w| (w.offset(), w.value())),
            );
            let task = Task::decode(&mut regs, BlockMask(0x60))
                .unwrap_or_else(|e| panic!("{} task {i}: {e}", case.name));
            let ranges = task.dma();
            let (src, dst) = (ranges[0], ranges[1]);
            let mut sim = Simulator::new();
            let mut captured = Vec::new();
            for (a, f) in &case.buffers {
                let bytes = std::fs::read(f).unwrap();
                captured.push((*a, bytes.clone()));
                sim.memory_mut().map(*a, bytes).unwrap();
            }
            let at = |a: u64, len: u64| {
                captured.iter().find_map(|(s, b)| {
                    let off = a.checked_sub(u64::from(*s))? as usize;
                    b.get(off..off + len as usize).map(<[u8]>::to_vec)
                })
            };
            if sim.memory().read(u64::from(addr), list.len() * 8).is_none() {
                let bytes = std::fs::read(file).unwrap();
                sim.memory_mut().map(addr, bytes).unwrap();
            }
            let (Some(input), Some(before)) = (at(src.start, src.len), at(dst.start, dst.len))
            else {
                eprintln!(
                    "{} task {i:02}: its cubes lie outside the captured buffers; not run",
                    case.name
                );
                continue;
            };
            // Clear the destination so the copy is the simulator's.
            sim.memory_mut()
                .write(dst.start, dst.len as usize)
                .unwrap()
                .fill(0x5A);
            let kick = Kick {
                task_number: Some(1),
                int_mask: 0xC00,
                ..Kick::new(addr, amount)
            };
            let run = sim
                .kick(&kick)
                .unwrap_or_else(|e| panic!("{} task {i}: {e}", case.name));
            assert!(run.completed, "{} task {i}: {run:?}", case.name);
            assert_eq!(run.int_status & 0xC00, run.raw_status & 0xC00);
            assert!(
                run.lints.iter().all(|l| l.kind == LintKind::Unvalidated),
                "{} task {i}: {:?}",
                case.name,
                run.lints
            );
            let out = sim
                .memory()
                .read_vec(dst.start as u32, dst.len as usize)
                .unwrap();
            assert_eq!(out, input, "{} task {i}: a 1x1 max copies", case.name);
            assert_eq!(
                before, out,
                "{} task {i}: the captured destination",
                case.name
            );
            eprintln!(
                "{} task {i:02}: {}x{}x{} copy, raw status {:#x}, output = input = captured bytes",
                case.name,
                task.ppu.unwrap().cube_in.0,
                task.ppu.unwrap().cube_in.1,
                task.ppu.unwrap().cube_in.2,
                run.raw_status
            );
            ran += 1;
        }
    }
    eprintln!("{ran} vendor PPU task(s) checked");
    assert!(ran > 0, "captures present, but no PPU task with buffers");
}
