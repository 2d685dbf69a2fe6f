//! The pre-submit verifier against the simulator: any program `verify` accepts never makes
//! the simulated NPU read or write outside the job's buffers, or write a buffer the job
//! lists read-only (issue 26, item 1).
//!
//! Programs are a valid two-task int8 matmul chain with a few entries mutated: values
//! drawn at random or from the addresses that matter (the buffers, the tasks' lists, an
//! unlisted copy of the program whose output is bound onto a read-only buffer, 0), and
//! chain-address writes forged into bodies. Each program `verify::check_chain` accepts is
//! run as the vendor kernel runs the job (kicked at the first listed task, TASK_NUMBER 2)
//! with only the listed buffers mapped. The job and the check are
//! `tests/common/chain_probe.rs`, which the fuzz target `verify_sim` shares.

#[path = "common/chain_probe.rs"]
mod chain_probe;

use chain_probe::*;
use proptest::prelude::*;
use rknpu_driver::verify;

fn mutation(interesting: Vec<u32>) -> impl Strategy<Value = Mutation> {
    let value = prop_oneof![
        1 => any::<u32>(),
        3 => proptest::sample::select(interesting),
        1 => (proptest::sample::select(vec![A_AT, B_AT, C_AT, REGCMD_AT]), 0u32..0x2000)
            .prop_map(|(a, off)| a as u32 + (off & !0xF)),
    ];
    (any::<usize>(), value, proptest::bool::weighted(0.2)).prop_map(|(index, value, forge)| {
        Mutation {
            index,
            value,
            forge,
        }
    })
}

#[test]
fn the_unmutated_program_passes_and_runs_cleanly() {
    let b = base();
    verify::check_chain(&lists(&b, &b.words), &b.buffers).unwrap();
    let (dma, written) = run(&b, &b.words);
    assert!(dma.is_none() && !written, "{dma:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn verified_programs_stay_inside_their_buffers(
        muts in proptest::collection::vec(mutation(interesting(&base())), 1..4)
    ) {
        let b = base();
        let mut words = b.words.clone();
        for m in &muts {
            mutate(&b, &mut words, m);
        }
        let outcome = check(&b, &words);
        prop_assert!(outcome.is_ok(), "{muts:?}: {outcome:?}");
    }
}
