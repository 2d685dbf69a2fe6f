//! The chain the PC walks is the chain the verifier checked: a job whose tails lead
//! anywhere but its listed tasks is refused before it reaches the kernel (issue 26,
//! item 1).

use super::*;

/// A forged chain tail: the job lists two well-formed tasks, but task 0's tail sends the
/// PC to an unlisted copy of task 1 whose output is bound onto A, a buffer the job only
/// reads. The vendor kernel runs TASK_NUMBER tasks by following the tails, so the copy
/// would run instead of the listed task 1.
#[test]
fn a_forged_chain_tail_is_refused_before_submission() {
    use crate::kernels::single::{Dtype, REGCMD, SingleMatmul};
    use crate::regcmd::{ProgramBuilder, TailRole, decode, words_to_le_bytes};
    use crate::verify::VerifyError;
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let mut builder = ProgramBuilder::new(REGCMD);
    for _ in 0..2 {
        builder.push_task(mm.task().unwrap().body().unwrap(), mm.enable());
    }
    let program = builder.build().unwrap();
    let d = Device::open_spec("emu").unwrap();
    let mut a = d.alloc(mm.a_bytes(), BoFlags::default()).unwrap();
    a.write(0, &vec![1; mm.a_bytes()]).unwrap();
    let before = a.read_all().unwrap();
    let b = d.alloc(mm.b_bytes(), BoFlags::default()).unwrap();
    let c = d.alloc(2 * mm.c_bytes(), BoFlags::default()).unwrap();
    let len = program.byte_len();
    let mut regcmd = d.alloc(2 * len, BoFlags::default()).unwrap();
    let bind = |base: u32, c_addr: u32| super::tests::bind_single(&program, base, &a, &b, c_addr);
    let base = regcmd.dma_addr();
    let mut words = bind(base, c.dma_addr());
    // The copy sits after the program, in the same (read-only) regcmd buffer.
    let copy_base = base + len as u32;
    let copy = bind(copy_base, a.dma_addr());
    let tail = decode(&words)
        .entries
        .iter()
        .position(|e| e.task == 0 && e.role == Some(TailRole::NextAddress))
        .unwrap();
    words[tail] = words[tail].with_value(copy_base + program.tasks()[1].offset);
    let mut bytes = words_to_le_bytes(&words);
    bytes.extend(words_to_le_bytes(&copy));
    regcmd.write(0, &bytes).unwrap();
    let job = Job::from_program(&regcmd, &program)
        .reads(&a)
        .reads(&b)
        .writes(&c);
    match d.submit(&job) {
        Err(Error::Verify {
            error: VerifyError::Chain {
                task: 0, address, ..
            },
        }) => assert_eq!(address, copy_base + program.tasks()[1].offset),
        other => panic!("{other:?}"),
    }
    drop(job);
    assert!(a.read_all().unwrap() == before, "A was written");
    // Unverified, the driver would run the copy; the emulated kernel's simulator refuses
    // to follow a tail out of the listed tasks, so the job does not complete, and A
    // still holds what it held.
    let job = Job::from_program(&regcmd, &program)
        .reads(&a)
        .reads(&b)
        .writes(&c);
    assert!(matches!(
        d.submit(&job.unverified()),
        Err(Error::Timeout { .. })
    ));
    assert!(a.read_all().unwrap() == before, "A was written");
    let mut sim = crate::sim::Simulator::new();
    sim.memory_mut().map(base, bytes.clone()).unwrap();
    sim.memory_mut().map(a.dma_addr(), before.clone()).unwrap();
    sim.memory_mut()
        .map(b.dma_addr(), vec![0; b.size()])
        .unwrap();
    sim.memory_mut().map_zeroed(c.dma_addr(), c.size()).unwrap();
    // Kicked directly, without a task list, the simulator follows the tail as the PC
    // does: the copy runs and writes A.
    let t0 = program.tasks()[0];
    let kick = crate::sim::Kick {
        task_number: Some(2),
        ..crate::sim::Kick::new(base + t0.offset, t0.regcfg_amount)
    };
    sim.kick(&kick).unwrap();
    assert!(
        sim.memory()
            .read(u64::from(a.dma_addr()), before.len())
            .unwrap()
            != &before[..],
        "the copy did not run"
    );
}

/// A job naming a buffer of another device open is refused before submission: its
/// handle and address are the other open's, so in this job they would name some other
/// buffer of this device, or none (issue 26, item 3).
#[test]
fn a_buffer_of_another_open_is_refused() {
    use crate::kernels::single::{Dtype, SingleMatmul};
    use crate::regcmd::words_to_le_bytes;
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let program = mm.program().unwrap();
    let d = Device::open_spec("emu").unwrap();
    let other = d.open_again().unwrap();
    assert!(!d.same_device(&other));
    let a = d.alloc(mm.a_bytes(), BoFlags::default()).unwrap();
    let b = d.alloc(mm.b_bytes(), BoFlags::default()).unwrap();
    let foreign_c = other.alloc(mm.c_bytes(), BoFlags::default()).unwrap();
    let mut regcmd = d.alloc(program.byte_len(), BoFlags::default()).unwrap();
    // Binds the program with its output at `c`.
    let bind = |regcmd: &mut Bo, c: &Bo| {
        let addrs = [regcmd.dma_addr(), a.dma_addr(), b.dma_addr(), c.dma_addr()];
        let words = program
            .bind(|id| Some(u64::from(addrs[id.0 as usize])))
            .unwrap();
        regcmd.write(0, &words_to_le_bytes(&words)).unwrap();
    };
    bind(&mut regcmd, &foreign_c);
    let job = Job::from_program(&regcmd, &program)
        .reads(&a)
        .reads(&b)
        .writes(&foreign_c);
    match d.submit(&job) {
        Err(Error::InvalidArgument { what }) => {
            assert!(what.contains("another device open"), "{what}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The same job with this device's own output runs.
    let c = d.alloc(mm.c_bytes(), BoFlags::default()).unwrap();
    bind(&mut regcmd, &c);
    let job = Job::from_program(&regcmd, &program)
        .reads(&a)
        .reads(&b)
        .writes(&c);
    d.submit(&job).unwrap();
}
