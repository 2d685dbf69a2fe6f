//! Incremental bodies ([`ProgramBuilder::incremental`]) on the ping-pong register groups:
//! the same results as full bodies, wrong results when a program assumes the wrong group,
//! and the stale-register lint kept for what an earlier job left.

use super::*;
use rknpu_driver::kernels::matmul::{self as mm, MatmulSpec, Plan};
use rknpu_driver::regcmd::{Program, TaskBuilder};
use rknpu_driver::seeded::Rng;

/// Buffer `b` of a plan's program lives at `(b + 1) × 256 MiB`.
fn plan_addr(b: BufferId) -> u32 {
    addr(b).unwrap() as u32
}

/// Runs `program` (built for `plan`) on a fresh simulator with operands `a` and `b`, each
/// core's chain as the vendor kernel runs it; returns the runs and C's bytes.
fn run_plan(plan: &Plan, program: &Program, a: &[u8], b: &[u8]) -> (Vec<RangeRun>, Vec<u8>) {
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    let words = program.bind(addr).unwrap();
    m.map(plan_addr(mm::REGCMD), words_to_le_bytes(&words))
        .unwrap();
    m.map(plan_addr(mm::A), a.to_vec()).unwrap();
    m.map(plan_addr(mm::B), b.to_vec()).unwrap();
    m.map_zeroed(plan_addr(mm::C), plan.c_bytes as usize)
        .unwrap();
    let mut first = 0;
    let mut runs = Vec::new();
    for (core, &count) in plan.per_core.iter().enumerate() {
        let tasks = &program.tasks()[first..first + count];
        let run = sim.run_range(core, count as u32, |i| {
            let mut t = *tasks.get(i as usize)?;
            t.offset += plan_addr(mm::REGCMD);
            Some(t)
        });
        assert_eq!(run.failure, None);
        runs.push(run);
        first += count;
    }
    let c = sim
        .memory()
        .read_vec(plan_addr(mm::C), plan.c_bytes as usize)
        .unwrap();
    (runs, c)
}

/// The plan's program with full or incremental bodies.
fn program(plan: &Plan, incremental: bool) -> Program {
    let mut p = ProgramBuilder::new(mm::REGCMD).incremental(incremental);
    for core in 0..plan.per_core.len() {
        plan.push_core(&mut p, core, [mm::A, mm::B, mm::C]).unwrap();
        p.end_chain();
    }
    p.build().unwrap()
}

/// `len` operand bytes: any bytes for integers, small normal numbers for fp16.
fn operand(len: u64, dtype: Dtype, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    match dtype {
        Dtype::Fp16 => (0..len / 2)
            .flat_map(|_| half::f16::from_f32(rng.int(-8, 8) as f32 / 4.0).to_le_bytes())
            .collect(),
        _ => (0..len).map(|_| rng.next_u64() as u8).collect(),
    }
}

#[test]
fn incremental_matmuls_match_full_bodies_bit_for_bit() {
    for (spec, cores) in [
        // A shorter last M tile, as the vendor chain's tail task.
        (MatmulSpec::new(601, 64, 256, Dtype::Int8), 1),
        (MatmulSpec::new(384, 64, 256, Dtype::Int4), 1),
        (MatmulSpec::new(801, 64, 256, Dtype::Fp16), 1),
        (MatmulSpec::new(640, 64, 768, Dtype::Int8), 3),
        (MatmulSpec::new(1152, 64, 256, Dtype::Int8), 3),
    ] {
        let plan = Plan::new(spec.on_cores(cores)).unwrap();
        assert!(
            plan.per_core.len() == cores as usize && plan.per_core.iter().all(|&n| n >= 3),
            "{spec:?}: {:?}",
            plan.per_core
        );
        let a = operand(plan.a_bytes, spec.dtype, 1);
        let b = operand(plan.layout.bytes, spec.dtype, 2);
        let full = program(&plan, false);
        let inc = program(&plan, true);
        assert!(inc.byte_len() < full.byte_len(), "{spec:?}");
        let (full_runs, full_c) = run_plan(&plan, &full, &a, &b);
        let (inc_runs, inc_c) = run_plan(&plan, &inc, &a, &b);
        assert!(full_c.iter().any(|&x| x != 0), "{spec:?}: C stayed zero");
        assert!(full_c == inc_c, "{spec:?}: the results differ");
        for (f, i) in full_runs.iter().zip(&inc_runs) {
            // Within a chain nothing is stale: the later tasks' groups were filled by
            // the same kick.
            assert!(
                !i.lints.iter().any(|l| l.kind == LintKind::StaleRegisters),
                "{spec:?}: {:?}",
                i.lints
            );
            assert!(i.dma.pc_regcmd < f.dma.pc_regcmd, "{spec:?}");
            assert_eq!(i.macs, f.macs);
        }
    }
}

/// Three int8 tasks against one B: `A0 → C0`, `A1 → C1`, `A1 → C2`, in one chain.
struct Three {
    mm: SingleMatmul,
    bodies: Vec<TaskBuilder>,
}

impl Three {
    fn new() -> Three {
        let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
        let (a, c) = (mm.a_bytes() as u32, mm.c_bytes() as u32);
        let body = |a_off, c_off| {
            mm.body_at(
                DmaAddr::reloc(single::A, a_off),
                DmaAddr::reloc(single::B, 0),
                DmaAddr::reloc(single::C, c_off),
                DmaAddr::reloc(single::E, 0),
            )
            .unwrap()
        };
        let bodies = vec![body(0, 0), body(a, c), body(a, 2 * c)];
        Three { mm, bodies }
    }

    /// Runs the chain of `bodies`; returns the run and the three C slots.
    fn run(&self, bodies: Vec<TaskBuilder>) -> Result<(CoreRun, Vec<Vec<i32>>), SimError> {
        let mut p = ProgramBuilder::new(single::REGCMD);
        for b in bodies {
            p.push_task(b, BlockMask::CONV);
        }
        let program = p.build().unwrap();
        self.run_program(&program)
    }

    fn run_program(&self, program: &Program) -> Result<(CoreRun, Vec<Vec<i32>>), SimError> {
        let mm = &self.mm;
        let mut sim = sim_with(program);
        let m = sim.memory_mut();
        let a0 = mm.pack_a_int(&vec![1; 4 * 64]).unwrap();
        let a1 = mm.pack_a_int(&vec![3; 4 * 64]).unwrap();
        m.map(at(single::A), [a0, a1].concat()).unwrap();
        m.map(at(single::B), mm.pack_b_int(&vec![1; 64 * 32]).unwrap())
            .unwrap();
        m.map_zeroed(at(single::C), 3 * mm.c_bytes()).unwrap();
        m.map_zeroed(at(single::E), mm.e_bytes()).unwrap();
        let run = sim.kick(&Kick::new(
            at(single::REGCMD),
            program.tasks()[0].regcfg_amount,
        ))?;
        let c = sim
            .memory()
            .read_vec(at(single::C), 3 * mm.c_bytes())
            .unwrap();
        let slots = c
            .chunks_exact(mm.c_bytes())
            .map(|s| {
                s.chunks_exact(4)
                    .map(|x| i32::from_le_bytes(x.try_into().unwrap()))
                    .collect()
            })
            .collect();
        Ok((run, slots))
    }
}

/// `body` without the entries that write what `before` wrote, value and relocation alike.
fn diff(body: &TaskBuilder, before: &TaskBuilder) -> TaskBuilder {
    let same = |i: usize| {
        let (e, r) = (body.entries()[i], body.relocation(i));
        (0..before.len()).any(|j| before.entries()[j] == e && before.relocation(j) == r)
    };
    body.retain(|i| !same(i))
}

#[test]
fn incremental_bodies_rely_on_the_group_of_the_task_two_before() {
    let t = Three::new();
    let b = &t.bodies;
    // Every sum: 64 products of A's value and 1.
    let (ones, threes) = (vec![64; 4 * 32], vec![3 * 64; 4 * 32]);
    let (run, c) = t.run(b.clone()).unwrap();
    assert!(run.completed && run.lints.is_empty(), "{:?}", run.lints);
    assert_eq!(c, [ones.clone(), threes.clone(), threes.clone()]);

    // The builder: the third body is shorter (the second differs from the first only in
    // addresses, so the third's group holds A0) and computes the same.
    let mut p = ProgramBuilder::new(single::REGCMD).incremental(true);
    for body in b {
        p.push_task(body.clone(), BlockMask::CONV);
    }
    let inc = p.build().unwrap();
    let amounts: Vec<u32> = inc.tasks().iter().map(|t| t.regcfg_amount).collect();
    assert_eq!(amounts[..2], [b[0].len() as u32, b[1].len() as u32]);
    assert!((amounts[2] as usize) < b[2].len() / 4, "{amounts:?}");
    let (run, c) = t.run_program(&inc).unwrap();
    assert!(run.completed && run.lints.is_empty(), "{:?}", run.lints);
    assert_eq!(c, [ones.clone(), threes.clone(), threes.clone()]);

    // Diffed against the task before instead: the third task equals the second in A's
    // address, so it leaves it out, and its group (the first task's) still points at A0.
    let wrong = vec![b[0].clone(), b[1].clone(), diff(&b[2], &b[1])];
    let (run, c) = t.run(wrong).unwrap();
    assert!(run.completed, "{run:?}");
    assert_eq!(c[2], ones, "the third task read A0, as its group held");
    assert_ne!(c[2], threes);

    // The second task incremental too: its group was never written, so it runs on reset
    // values (refused) or, if they were to pass, is linted as reading them.
    let wrong = vec![b[0].clone(), diff(&b[1], &b[0]), diff(&b[2], &b[0])];
    match t.run(wrong) {
        Err(_) => {}
        Ok((run, c)) => {
            assert!(
                run.lints
                    .iter()
                    .any(|l| l.kind == LintKind::StaleRegisters && l.at.task == 1),
                "{:?}",
                run.lints
            );
            assert_ne!(c[1], threes);
        }
    }
}

#[test]
fn a_new_job_does_not_inherit_the_groups_silently() {
    let t = Three::new();
    let mut p = ProgramBuilder::new(single::REGCMD).incremental(true);
    for body in &t.bodies {
        p.push_task(body.clone(), BlockMask::CONV);
    }
    let inc = p.build().unwrap();
    let mm = &t.mm;
    let mut sim = sim_with(&inc);
    let m = sim.memory_mut();
    m.map_zeroed(at(single::A), 2 * mm.a_bytes()).unwrap();
    m.map_zeroed(at(single::B), mm.b_bytes()).unwrap();
    m.map_zeroed(at(single::C), 3 * mm.c_bytes()).unwrap();
    m.map_zeroed(at(single::E), mm.e_bytes()).unwrap();
    let whole = kick_task(&mut sim, &inc, 0);
    assert_eq!(whole.tasks_run, 3);
    assert!(whole.lints.is_empty(), "{:?}", whole.lints);
    // The third task again, as a job of its own: the groups hold what the first job
    // left, and the task runs, but the lint names what it did not write.
    let run = kick_task(&mut sim, &inc, 2);
    assert_eq!(run.tasks_run, 1);
    let stale = stale_lints(&run);
    assert_eq!(stale.len(), 1, "{:?}", run.lints);
    assert_eq!(stale[0].at.task, 0);
}
