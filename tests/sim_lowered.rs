//! Every simulator error, stall, lint and fault, each triggered by a program that differs
//! from a working one in the one place that matters. The working programs come from the
//! generators, which the simulator may not import, so these are integration tests.

mod common;

use rknpu_driver::kernels::single::{self, Dtype, Layout, SingleMatmul, add_task};
use rknpu_driver::regcmd::{
    BlockMask, BufferId, DmaAddr, ProgramBuilder, RegCmd, words_to_le_bytes,
};
use rknpu_driver::regs::{self, Field, Register, cna, core, dpu};
use rknpu_driver::sim::*;
use rknpu_driver::submit::{TaskDesc, irq};

const BASE: u64 = 0x1000_0000;

fn addr(b: BufferId) -> Option<u64> {
    Some(BASE * (b.0 as u64 + 1))
}

fn at(b: BufferId) -> u32 {
    addr(b).unwrap() as u32
}

/// A working one-task program and a simulator with its buffers in place.
struct Setup {
    mm: SingleMatmul,
    words: Vec<RegCmd>,
    body: u32,
}

impl Setup {
    fn new(mm: SingleMatmul) -> Setup {
        let program = mm.program().unwrap();
        Setup {
            mm,
            words: program.bind(addr).unwrap(),
            body: program.tasks()[0].regcfg_amount,
        }
    }

    fn int8(m: u32, k: u32, n: u32) -> Setup {
        Setup::new(SingleMatmul::new(m, k, n, Dtype::Int8))
    }

    /// Replaces the value of every body entry that writes `offset`.
    fn patch(mut self, offset: u16, value: u32) -> Setup {
        let mut found = false;
        for w in self
            .words
            .iter_mut()
            .filter(|w| w.offset() == offset && w.target() > 0x0081)
        {
            *w = w.with_value(value);
            found = true;
        }
        assert!(found, "no entry writes {offset:#06x}");
        self
    }

    /// Changes one field of the entries that write its register.
    fn field<R: Register>(self, f: Field<R>, value: u32) -> Setup {
        let (offset, info) = (R::OFFSET, f.info());
        let old = self
            .words
            .iter()
            .find(|w| w.offset() == offset && w.target() > 0x0081);
        let raw = info.insert(old.unwrap().value(), value).unwrap();
        self.patch(offset, raw)
    }

    fn sim(&self) -> Simulator {
        let mut sim = Simulator::new();
        let mm = &self.mm;
        let m = sim.memory_mut();
        m.map(at(single::REGCMD), words_to_le_bytes(&self.words))
            .unwrap();
        m.map_zeroed(at(single::A), 4 * mm.a_bytes()).unwrap();
        m.map_zeroed(at(single::B), mm.b_bytes()).unwrap();
        // A and C get room for the lint tests' other strides.
        m.map_zeroed(at(single::C), 4 * mm.c_bytes()).unwrap();
        m.map_zeroed(at(single::E), mm.e_bytes()).unwrap();
        sim
    }

    fn kick(&self) -> Kick {
        Kick::new(at(single::REGCMD), self.body)
    }

    fn run(&self) -> Result<CoreRun, SimError> {
        self.sim().kick(&self.kick())
    }
}

/// A simulator with `program` bound and mapped at the regcmd buffer's address.
fn sim_with(program: &rknpu_driver::regcmd::Program) -> Simulator {
    let mut sim = Simulator::new();
    sim.memory_mut()
        .map(
            at(single::REGCMD),
            words_to_le_bytes(&program.bind(addr).unwrap()),
        )
        .unwrap();
    sim
}

/// Kicks task `i` of `program` (mapped by [`sim_with`]) as the first task of a job.
fn kick_task(sim: &mut Simulator, program: &rknpu_driver::regcmd::Program, i: usize) -> CoreRun {
    let t = program.tasks()[i];
    sim.kick(&Kick::new(at(single::REGCMD) + t.offset, t.regcfg_amount))
        .unwrap()
}

/// The stale-register lints of a run.
fn stale_lints(r: &CoreRun) -> Vec<&Lint> {
    r.lints
        .iter()
        .filter(|l| l.kind == LintKind::StaleRegisters)
        .collect()
}

fn lint_kinds(r: &CoreRun) -> Vec<LintKind> {
    r.lints.iter().map(|l| l.kind).collect()
}

#[test]
fn a_working_program_runs_clean() {
    let r = Setup::int8(4, 64, 32).run().unwrap();
    assert!(r.completed && r.stall.is_none());
    assert!(r.lints.is_empty(), "{:?}", r.lints);
    assert_eq!(
        r.raw_status, 0x155,
        "CNA feature/weight/CSC, CORE and DPU, group 0"
    );
    assert_eq!(r.int_status, 0x100);
}

#[test]
fn ping_pong_groups_alternate_across_kicks_of_a_core() {
    let s = Setup::int8(4, 64, 32);
    let mut sim = s.sim();
    let first = sim.kick(&s.kick()).unwrap();
    let second = sim.kick(&s.kick()).unwrap();
    assert_eq!(first.int_status, 0x100);
    assert_eq!(second.int_status, 0x200);
    assert!(
        second.completed,
        "the vendor kernel widens either bit to the pair"
    );
    assert_eq!(
        sim.register(0, 1, 0x100C),
        Some(s.mm.body().unwrap().entries()[3].value())
    );
}

#[path = "sim_lowered/bounds.rs"]
mod bounds;
#[path = "sim_lowered/dequant.rs"]
mod dequant;
#[path = "sim_lowered/dma.rs"]
mod dma;
#[path = "sim_lowered/errors.rs"]
mod errors;
#[path = "sim_lowered/incremental.rs"]
mod incremental;
#[path = "sim_lowered/lints.rs"]
mod lints;
#[path = "sim_lowered/ppu.rs"]
mod ppu;

// ----- stalls -----

#[test]
fn stalls_are_reported_with_the_task_counter() {
    let s = Setup::int8(4, 64, 32);
    // Too small a fetch: the op-enable entry is never read.
    let r = s
        .sim()
        .kick(&Kick {
            regcfg_amount: 20,
            ..s.kick()
        })
        .unwrap();
    assert!(!r.completed);
    assert_eq!(r.tasks_run, 0);
    assert!(r.stall.unwrap().why.contains("no op-enable"));
    // TASK_NUMBER beyond the chain.
    let r = s
        .sim()
        .kick(&Kick {
            task_number: Some(2),
            ..s.kick()
        })
        .unwrap();
    assert!(!r.completed);
    assert_eq!(r.tasks_run, 1);
    assert_eq!(r.stall.unwrap().at, At { core: 0, task: 1 });
    // An injected hang.
    let mut sim = s.sim();
    sim.set_faults(Faults {
        hang: Some(At { core: 0, task: 0 }),
        ..Faults::default()
    });
    let r = sim.kick(&s.kick()).unwrap();
    assert_eq!((r.completed, r.tasks_run, r.raw_status), (false, 0, 0));
}

#[test]
fn a_dpu_task_without_its_read_dma_stalls_and_lints() {
    let mut p = ProgramBuilder::new(single::REGCMD);
    let r = |b: u32| DmaAddr::reloc(BufferId(b), 0);
    p.push_task(
        add_task(4, 32, r(1), r(2), r(3)).unwrap().body().unwrap(),
        BlockMask::DPU,
    );
    let program = p.build().unwrap();
    let mut sim = sim_with(&program);
    let m = sim.memory_mut();
    for b in 1..=3 {
        m.map_zeroed(at(BufferId(b)), 4 * 32 * 4).unwrap();
    }
    let run = sim
        .kick(&Kick::new(
            at(single::REGCMD),
            program.tasks()[0].regcfg_amount,
        ))
        .unwrap();
    assert!(!run.completed && run.stall.is_some());
    assert!(lint_kinds(&run).contains(&LintKind::DpuWithoutRdma));
    // The same with a matmul whose EW operand needs DPU_RDMA.
    let mut mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    mm.post.add = true;
    let mut s = Setup::new(mm);
    let i = s
        .words
        .iter()
        .position(|w| w.target() == regs::TARGET_OP_ENABLE)
        .unwrap();
    s.words[i] = RegCmd::op_enable(BlockMask::CONV);
    let run = s.run().unwrap();
    assert!(run.stall.is_some());
    assert!(lint_kinds(&run).contains(&LintKind::DpuWithoutRdma));
}

// ----- faults -----

#[test]
fn dma_error_faults_set_status_bits_and_drop_the_output() {
    let s = Setup::int8(4, 64, 32);
    for (faults, bit) in [
        (
            Faults {
                dma_read_error: Some(At { core: 0, task: 0 }),
                ..Faults::default()
            },
            irq::DMA_READ_ERROR,
        ),
        (
            Faults {
                dma_write_error: Some(At { core: 0, task: 0 }),
                ..Faults::default()
            },
            irq::DMA_WRITE_ERROR,
        ),
    ] {
        let mut sim = s.sim();
        // Mark the output so that a write would show.
        let marker = vec![0xAA; 4 * s.mm.c_bytes()];
        sim.memory_mut().unmap(at(single::C));
        sim.memory_mut().map(at(single::C), marker.clone()).unwrap();
        sim.set_faults(faults.clone());
        let r = sim.kick(&s.kick()).unwrap();
        assert_eq!(r.raw_status & bit, bit);
        assert!(r.completed, "the error bit is masked out by int_mask 0x300");
        assert_eq!(
            sim.memory().read_vec(at(single::C), marker.len()).unwrap(),
            marker
        );
        // Enabled in the mask, the error makes the vendor kernel reject the interrupt.
        let mut sim = s.sim();
        sim.set_faults(faults);
        let r = sim
            .kick(&Kick {
                int_mask: 0x300 | bit,
                ..s.kick()
            })
            .unwrap();
        assert!(!r.completed);
    }
}

// ----- robustness -----

mod random_programs {
    use super::*;
    use proptest::prelude::*;

    /// Entries that look like programs: block targets with offsets inside their block,
    /// chain entries, markers, op-enables with any mask, NOPs, and raw words.
    fn entry() -> impl Strategy<Value = RegCmd> {
        let blocks = [
            (0x0201u16, 0x1000u16),
            (0x0801, 0x3000),
            (0x1001, 0x4000),
            (0x2001, 0x5000),
            (0x0101, 0x0000),
        ];
        prop_oneof![
            6 => (0..blocks.len(), 0u16..0x140, any::<u32>(), 0u32..4).prop_map(move |(b, off, v, small)| {
                let (t, base) = blocks[b];
                let v = if small == 0 { v } else { v & 0xFFF };
                RegCmd::new(t, v, base + off * 4)
            }),
            1 => any::<u32>().prop_map(|m| RegCmd::op_enable(BlockMask(m & 0x7F))),
            1 => Just(RegCmd::MARKER),
            1 => Just(RegCmd::NOP),
            1 => any::<u64>().prop_map(RegCmd),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Whatever the words, a kick returns a result or a typed error: no panic, no
        /// unbounded allocation.
        #[test]
        fn random_programs_never_panic(
            words in proptest::collection::vec(entry(), 1..160),
            body in 0u32..200,
            regions in proptest::collection::vec((0u32..16, 1usize..4096), 0..4),
        ) {
            let mut sim = Simulator::new();
            sim.memory_mut().map(0x1000, words_to_le_bytes(&words)).unwrap();
            for (slot, len) in regions {
                let _ = sim.memory_mut().map_zeroed(0x10_0000 * (slot + 1), len);
            }
            let _ = sim.kick(&Kick { task_number: None, ..Kick::new(0x1000, body) });
        }

        /// A working program with one register replaced by a random value never panics.
        #[test]
        fn one_random_register_never_panics(index in 0usize..100, value in any::<u32>()) {
            let mut s = Setup::int8(4, 64, 32);
            let body = s.body as usize;
            let i = index % body;
            s.words[i] = s.words[i].with_value(value);
            let _ = s.run();
        }
    }
}
