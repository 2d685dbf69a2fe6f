//! The verifier against generated programs: DMA ranges against the job's buffers, CBUF
//! reuse against the chain, and chain tails. (The verifier may not import the kernels, so
//! these tests, which build their programs with one, are integration tests.)

mod common;

use common::lowered::reusing_pair;
use rknpu_driver::kernels::single::{self, Dtype, Layout, SingleMatmul};
use rknpu_driver::regcmd::{self, RegCmd};
use rknpu_driver::regs::{Register, cna, dpu, dpu_rdma, pc};
use rknpu_driver::verify::{
    BufferAccess, JobBuffer, TaskList, VerifyError, check_chain, check_kicked_alone, check_words,
};

/// Where the tests' programs sit.
const BASE: u64 = 0x1000_0000 + 0x100_0000 * single::REGCMD.0 as u64;

fn bound(mm: &SingleMatmul) -> (Vec<RegCmd>, [JobBuffer; 5]) {
    let at = |b: u32| 0x1000_0000 + 0x100_0000 * u64::from(b);
    let words = mm.program().unwrap().bind(|b| Some(at(b.0))).unwrap();
    let bufs = [
        JobBuffer::new(
            at(single::REGCMD.0),
            8 * words.len() as u64,
            BufferAccess::Read,
        ),
        JobBuffer::new(at(single::A.0), mm.a_bytes() as u64, BufferAccess::Read),
        JobBuffer::new(at(single::B.0), mm.b_bytes() as u64, BufferAccess::Read),
        JobBuffer::new(at(single::C.0), mm.c_bytes() as u64, BufferAccess::Write),
        JobBuffer::new(at(single::E.0), mm.e_bytes() as u64, BufferAccess::Read),
    ];
    (words, bufs)
}

#[test]
fn exact_buffers_pass_and_one_byte_less_fails_naming_the_register() {
    for (dtype, native, add) in [
        (Dtype::Int8, false, false),
        (Dtype::Int4, true, false),
        (Dtype::Fp16, true, true),
        (Dtype::Int8, false, true),
    ] {
        let mut mm = SingleMatmul::new(7, 96, 64, dtype);
        if native {
            mm.a_layout = Layout::Native;
            mm.c_layout = Layout::Native;
        }
        mm.post.add = add;
        let (words, bufs) = bound(&mm);
        let r = check_words(BASE, &words, &bufs).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].ranges.len(), 3 + usize::from(add));
        for (i, reg) in [
            (1, cna::FeatureDataAddr::NAME),
            (2, cna::DcompAddr0::NAME),
            (3, dpu::DstBaseAddr::NAME),
            (4, dpu_rdma::RdmaEwBaseAddr::NAME),
        ] {
            if i == 4 && !add {
                continue;
            }
            let mut short = bufs;
            short[i].len -= 1;
            let e = check_words(BASE, &words, &short).unwrap_err();
            assert!(
                matches!(&e, VerifyError::Outside { range, .. } if range.register == reg),
                "{dtype:?} {reg}: {e}"
            );
        }
    }
}

#[test]
fn a_write_into_a_read_only_buffer_is_refused() {
    let mm = SingleMatmul::new(4, 32, 32, Dtype::Int8);
    let (words, mut bufs) = bound(&mm);
    bufs[3].access = BufferAccess::Read;
    let e = check_words(BASE, &words, &bufs).unwrap_err();
    assert!(matches!(e, VerifyError::Access { .. }), "{e}");
    bufs[3].access = BufferAccess::ReadWrite;
    check_words(BASE, &words, &bufs).unwrap();
}

/// [`reusing_pair`] of 4×64×32 int8 tasks, bound.
fn reusing(two_chains: bool, reuse: impl Fn(&mut rknpu_driver::task::Cbuf)) -> Vec<RegCmd> {
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let at = |b: u32| 0x1000_0000 + 0x100_0000 * u64::from(b);
    reusing_pair(&mm, two_chains, reuse)
        .bind(|b| Some(at(b.0)))
        .unwrap()
}

#[test]
fn reuse_bits_are_checked_against_the_chain() {
    let all = [JobBuffer::new(0, 1 << 32, BufferAccess::ReadWrite)];
    let refused = |words: &[RegCmd], field: &str| match check_words(BASE, words, &all) {
        Err(VerifyError::Decode { task: 1, error }) => {
            assert_eq!(error.field, field, "{error}");
        }
        other => panic!("{other:?}"),
    };
    let data = |c: &mut rknpu_driver::task::Cbuf| c.data_reuse = true;
    // In one chain, the second task finds what the first loaded: accepted.
    assert!(check_words(BASE, &reusing(false, data), &all).is_ok());
    // The same task starting a chain of its own cannot count on the CBUF.
    refused(&reusing(true, data), cna::CbufCon0::DATA_REUSE.name());
    // Another bank split is not what the first task left.
    let moved = |c: &mut rknpu_driver::task::Cbuf| {
        (c.data_banks, c.weight_banks) = (3, 9);
        c.weight_reuse = true;
    };
    refused(&reusing(false, moved), cna::CbufCon0::WEIGHT_REUSE.name());
    // int8 data filling its one bank: no spare bank.
    let full = |c: &mut rknpu_driver::task::Cbuf| {
        (c.data_banks, c.weight_banks) = (1, 11);
        c.data_reuse = true;
    };
    refused(&reusing(false, full), cna::CbufCon0::DATA_REUSE.name());
    // FC_DATA_BANK other than 0, reuse or not.
    refused(
        &reusing(false, |c| c.fc_data_banks = 1),
        cna::CbufCon0::FC_DATA_BANK.name(),
    );
}

/// `n` 4×64×32 int8 matmul tasks chained in one program (sharing A, B and C), bound
/// as [`bound`] binds, with the program's task list and the job's buffers.
fn chain(
    n: usize,
) -> (
    Vec<RegCmd>,
    Vec<rknpu_driver::submit::TaskDesc>,
    [JobBuffer; 5],
) {
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let mut p = regcmd::ProgramBuilder::new(single::REGCMD);
    for _ in 0..n {
        p.push_task(mm.task().unwrap().body().unwrap(), mm.enable());
    }
    let program = p.build().unwrap();
    let (_, mut bufs) = bound(&mm);
    let at = |b: u32| 0x1000_0000 + 0x100_0000 * u64::from(b);
    let words = program.bind(|b| Some(at(b.0))).unwrap();
    bufs[0].len = 8 * words.len() as u64;
    (words, program.tasks().to_vec(), bufs)
}

/// The index of the entry of task `task`'s tail in `role`.
fn tail_entry(words: &[RegCmd], task: usize, role: regcmd::TailRole) -> usize {
    regcmd::decode(words)
        .entries
        .iter()
        .position(|e| e.task == task && e.role == Some(role))
        .unwrap()
}

/// What the tail of a task followed by `next` must hold: the device address of its
/// list and the kernel's fetch amount for its body.
fn expected(next: &rknpu_driver::submit::TaskDesc) -> Option<(u64, u32)> {
    let amount = regcmd::pc_data_amount(next.regcfg_amount as usize).unwrap();
    Some((BASE + u64::from(next.offset), u32::from(amount)))
}

#[test]
fn a_well_formed_chain_passes() {
    let (words, _, bufs) = chain(3);
    assert_eq!(check_words(BASE, &words, &bufs).unwrap().len(), 3);
}

#[test]
fn a_tail_into_another_buffer_is_refused() {
    use regcmd::TailRole::NextAddress;
    let (mut words, tasks, bufs) = chain(2);
    let i = tail_entry(&words, 0, NextAddress);
    // Into C (a buffer of the job), and into no buffer at all.
    for to in [bufs[3].addr as u32, 0x4000_0000] {
        words[i] = words[i].with_value(to);
        match check_words(BASE, &words, &bufs) {
            Err(VerifyError::Chain {
                task: 0,
                address,
                expected: e,
                ..
            }) => {
                assert_eq!(address, to);
                assert_eq!(e, expected(&tasks[1]));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_tail_that_skips_a_task_is_refused() {
    use regcmd::TailRole::{NextAddress, NextAmount};
    let (mut words, tasks, bufs) = chain(3);
    // Task 0 chains straight to task 2, with task 2's own address and amount: the PC
    // would run two tasks of three, and task 1's tail is then nobody's.
    let (a, n) = (
        tail_entry(&words, 0, NextAddress),
        tail_entry(&words, 0, NextAmount),
    );
    words[a] = words[tail_entry(&words, 1, NextAddress)];
    words[n] = words[tail_entry(&words, 1, NextAmount)];
    let e = check_words(BASE, &words, &bufs).unwrap_err();
    assert!(
        matches!(e, VerifyError::Chain { task: 0, address, expected: x, .. }
            if u64::from(address) == BASE + u64::from(tasks[2].offset) && x == expected(&tasks[1])),
        "{e}"
    );
}

#[test]
fn a_wrong_amount_is_refused() {
    use regcmd::TailRole::NextAmount;
    let (mut words, tasks, bufs) = chain(2);
    let i = tail_entry(&words, 0, NextAmount);
    let right = words[i].value();
    assert_eq!(
        Some((BASE + u64::from(tasks[1].offset), right)),
        expected(&tasks[1])
    );
    for wrong in [right - 1, right + 1, right | 3 << 16] {
        words[i] = words[i].with_value(wrong);
        let e = check_words(BASE, &words, &bufs).unwrap_err();
        assert!(
            matches!(e, VerifyError::Chain { task: 0, amount, .. } if amount == wrong),
            "{wrong:#x}: {e}"
        );
    }
    // The vendor's multi-core value in bits 17:16 does not change the fetch.
    words[i] = words[i].with_value(right | 1 << 16);
    check_words(BASE, &words, &bufs).unwrap();
}

#[test]
fn a_last_task_that_chains_on_is_refused() {
    use regcmd::TailRole::NextAddress;
    let (mut words, _, bufs) = chain(2);
    // The last task's tail names task 0 again: the PC would loop over checked words,
    // or, with a written-over list, run unchecked ones.
    let i = tail_entry(&words, 1, NextAddress);
    assert_eq!(words[i], RegCmd::NOP);
    words[i] = RegCmd::write(pc::BaseAddress::new()).with_value(BASE as u32);
    let e = check_words(BASE, &words, &bufs).unwrap_err();
    assert!(
        matches!(e, VerifyError::Chain { task: 1, expected: None, address, .. } if u64::from(address) == BASE),
        "{e}"
    );
    // A chain address written earlier in the body counts too: the PC keeps the last.
    let (mut words, tasks, bufs) = chain(1);
    let body = tasks[0].regcfg_amount as usize;
    words[body - 1] = RegCmd::write(pc::BaseAddress::new()).with_value(BASE as u32);
    assert!(matches!(
        check_words(BASE, &words, &bufs),
        Err(VerifyError::Chain { task: 0, .. })
    ));
}

#[test]
fn a_listed_task_must_end_with_its_only_op_enable() {
    let (words, tasks, bufs) = chain(2);
    let list = &words[..tasks[0].list_bytes() as usize / 8];
    let ok = [TaskList {
        addr: BASE,
        words: list,
    }];
    // Task 0 chains on, so alone it is refused for its tail, not its list.
    assert!(matches!(
        check_chain(&ok, &bufs),
        Err(VerifyError::Chain { task: 0, .. })
    ));
    let short = [TaskList {
        addr: BASE,
        words: &list[..list.len() - 1],
    }];
    assert!(matches!(
        check_chain(&short, &bufs),
        Err(VerifyError::List {
            task: 0,
            op_enable_at: None,
            ..
        })
    ));
    let long = [TaskList {
        addr: BASE,
        words: &words[..list.len() + 2],
    }];
    assert!(matches!(
        check_chain(&long, &bufs),
        Err(VerifyError::List { task: 0, .. })
    ));
}

#[test]
fn tasks_kicked_alone_may_end_their_chain_but_not_leave_the_list() {
    use regcmd::TailRole::NextAddress;
    let (mut words, tasks, bufs) = chain(2);
    let lists = |words: &[RegCmd]| -> Vec<(u64, Vec<RegCmd>)> {
        tasks
            .iter()
            .map(|t| {
                let s = t.offset as usize / 8;
                let list = words[s..s + t.list_bytes() as usize / 8].to_vec();
                (BASE + u64::from(t.offset), list)
            })
            .collect()
    };
    let run = |words: &[RegCmd]| {
        let owned = lists(words);
        let l: Vec<TaskList<'_>> = owned
            .iter()
            .map(|(addr, w)| TaskList {
                addr: *addr,
                words: w,
            })
            .collect();
        (check_kicked_alone(&l, &bufs), check_chain(&l, &bufs))
    };
    let i = tail_entry(&words, 0, NextAddress);
    words[i] = RegCmd::NOP;
    // Task 0 ends its chain: fine when each task is kicked alone, not in one chain.
    let (alone, chained) = run(&words);
    assert_eq!(alone.unwrap().len(), 2);
    assert!(matches!(
        chained,
        Err(VerifyError::Chain {
            task: 0,
            address: 0,
            ..
        })
    ));
    words[i] = RegCmd::write(pc::BaseAddress::new()).with_value(0x4000_0000);
    assert!(matches!(
        run(&words).0,
        Err(VerifyError::Chain { task: 0, .. })
    ));
}
