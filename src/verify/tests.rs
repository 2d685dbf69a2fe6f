//! The verifier's unit tests that need no generated program (those that do are in
//! `tests/verify_lowered.rs`).
use super::*;

#[test]
fn words_without_a_task_are_an_error() {
    assert_eq!(
        tasks_of_words(&[RegCmd(0), RegCmd(0)]),
        Err(VerifyError::NoTask)
    );
}
