//! The work budget and the size checks that come before any allocation.

use super::*;
use rknpu_driver::regs::pc;

#[test]
fn a_task_beyond_the_work_budget_is_refused_before_it_runs() {
    let s = Setup::int8(4, 64, 32);
    let mut sim = s.sim();
    assert_eq!(sim.work_budget(), DEFAULT_WORK_BUDGET);
    // The fetch fits, the task's 4 x 32 x 64 MACs do not.
    sim.set_work_budget(1000);
    match sim.kick(&s.kick()) {
        Err(SimError::WorkBudget {
            what,
            budget,
            used,
            needed,
            ..
        }) => {
            assert_eq!((what, budget), (BUDGET_TASK, 1000));
            assert!(used < 1000 && needed >= 4 * 32 * 64, "{used} {needed}");
            assert_eq!(sim.work_used(), used, "the refused step drew nothing");
        }
        other => panic!("{other:?}"),
    }
    let c = sim.memory().read_vec(at(single::C), 16).unwrap();
    assert_eq!(c, vec![0; 16], "the refused task wrote nothing");
    // The same program with room runs, and its work is counted.
    sim.set_work_budget(1 << 20);
    let run = sim.kick(&s.kick()).unwrap();
    assert!(run.completed);
    assert!(sim.work_used() >= run.macs && run.macs == 4 * 32 * 64);
}

#[test]
fn a_chain_that_loops_ends_with_the_work_budget() {
    let mut s = Setup::int8(4, 64, 32);
    let amount = (s.body + 4).div_ceil(2) - 1;
    // The tail chains back to the list itself: without TASK_NUMBER the PC would follow it
    // 65536 times.
    let b = s.body as usize;
    s.words[b] = RegCmd::new(0x0101, at(single::REGCMD), pc::BaseAddress::OFFSET);
    s.words[b + 1] = RegCmd::new(0x0101, amount, pc::RegisterAmounts::OFFSET);
    let mut sim = s.sim();
    sim.set_work_budget(200_000);
    match sim.kick(&s.kick()) {
        Err(e @ SimError::WorkBudget { .. }) => {
            let at = e.at().unwrap();
            assert!(at.task > 5 && at.task < 100, "{at}");
            assert!(e.to_string().contains("work budget of 200000 units"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(sim.work_used() <= 200_000);
}

#[test]
fn an_output_cube_larger_than_memory_is_refused_before_allocation() {
    // 256 x 1024 int32 results whose 256 surfaces all land on one 16 x 256-byte line
    // (DST_SURF_STRIDE 0): memory holds far fewer bytes than the cube has elements.
    let s = Setup::int8(256, 32, 1024).patch(dpu::DstSurfStride::OFFSET, 16);
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    m.map(at(single::REGCMD), words_to_le_bytes(&s.words))
        .unwrap();
    m.map_zeroed(at(single::A), s.mm.a_bytes()).unwrap();
    m.map_zeroed(at(single::B), s.mm.b_bytes()).unwrap();
    m.map_zeroed(at(single::C), 256 * 16).unwrap();
    let mapped = sim.memory().mapped_bytes();
    match sim.kick(&s.kick()) {
        Err(SimError::CubeLimit {
            elements, limit, ..
        }) => {
            assert_eq!(elements, 256 * 1024);
            // The limit follows the memory image (its bytes plus a small allowance), far
            // below the simulator's 2^26 ceiling.
            assert!(mapped < limit && limit < elements, "{mapped} {limit}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn memory_lookups_do_not_overflow_at_the_top_of_the_address_space() {
    let mut m = Memory::new();
    m.map(0xFFFF_F000, vec![1; 0x1000]).unwrap();
    assert!(m.read(0xFFFF_F000, usize::MAX).is_none());
    assert!(m.read(u64::MAX, 2).is_none());
    assert_eq!(m.mapped_bytes(), 0x1000);
    m.unmap(0xFFFF_F000).unwrap();
    assert_eq!(m.mapped_bytes(), 0);
}
