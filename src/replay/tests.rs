//! Replays of small traces built in place: an imported one matches, a changed output is
//! named to the byte, and hostile sizes and offsets are mismatches, not overflows.

use super::*;
use crate::trace::tests::worked;
use crate::trace::{Chunk, Contents, Header, Trace, fnv1a64};

#[test]
fn an_imported_trace_replays_on_the_simulator() {
    let t = worked();
    let back = Trace::from_bytes(&t.to_bytes()).unwrap();
    assert_eq!(back, t);
    let r = replay_model(&back);
    assert!(r.is_match(), "{r:?}");
    assert_eq!((r.submits, r.compared), (1, 1));
}

#[test]
fn a_replay_names_the_first_differing_byte() {
    let mut t = worked();
    for c in &mut t.chunks {
        if let Chunk::Output {
            contents: Contents::Bytes(b),
            ..
        } = c
        {
            b[17] ^= 1;
        }
    }
    let r = replay_model(&t);
    assert_eq!(r.mismatches.len(), 1, "{r:?}");
    assert!(
        r.mismatches[0].contains("1 byte(s) differ; the first, at +0x11"),
        "{}",
        r.mismatches[0]
    );
    // Redacted contents compare by digest.
    let mut t = worked();
    for c in &mut t.chunks {
        if let Chunk::Output { contents, .. } = c {
            let Contents::Bytes(b) = contents else {
                unreachable!()
            };
            *contents = Contents::Digest {
                len: b.len() as u64,
                digest: fnv1a64(b),
                seed: 0,
            };
        }
    }
    assert!(replay_model(&t).is_match());
}

#[test]
fn hostile_sizes_and_offsets_are_mismatches_not_overflows() {
    let t = Trace {
        header: Header::new("RK3588", 0, "test", true),
        chunks: vec![
            // Past the 32-bit address space, and so large that address + size overflows.
            Chunk::Buffer {
                id: 0,
                flags: 0,
                size: u64::MAX - 0xFFFF,
                dma_addr: 0x6461_6f6c,
            },
            Chunk::Buffer {
                id: 1,
                flags: 0,
                size: 4096,
                dma_addr: 0x1000,
            },
            // Contents and an output at offsets that overflow any address.
            Chunk::Data {
                id: 1,
                offset: u64::MAX - 2,
                contents: Contents::Bytes(vec![1, 2, 3, 4]),
            },
            Chunk::Output {
                id: 1,
                submit: 1,
                offset: u64::MAX,
                contents: Contents::Digest {
                    len: u64::MAX,
                    digest: 0,
                    seed: 0,
                },
            },
            Chunk::Reloc {
                buffer: 1,
                entry: u64::MAX,
                target: 1,
                offset: u32::MAX,
            },
        ],
    };
    for r in [replay_check(&t), replay_model(&t)] {
        assert!(
            r.mismatches
                .iter()
                .any(|m| m.contains("buffer 0") && m.contains("32-bit address space")),
            "{r:#?}"
        );
        assert!(
            r.mismatches
                .iter()
                .any(|m| m.starts_with("contents of buffer 1")),
            "{r:#?}"
        );
        assert!(
            r.mismatches.iter().any(|m| m.starts_with("reloc")),
            "{r:#?}"
        );
    }
    assert!(
        replay_model(&t)
            .mismatches
            .iter()
            .any(|m| m.starts_with("output of buffer 1")),
        "the output is compared in model mode"
    );
}

#[test]
fn a_model_replay_beyond_its_work_budget_fails_naming_the_budget() {
    let t = worked();
    let opts = ReplayOptions {
        work_budget: 100,
        ..ReplayOptions::for_trace(&t)
    };
    let r = replay_model_with(&t, &opts);
    assert!(!r.is_match());
    // The worked trace records no completion: the failure is a lint, the output a
    // mismatch.
    assert!(
        r.lints
            .iter()
            .any(|m| m.contains("work budget of 100 units")),
        "{:?}",
        r.lints
    );
    assert!(replay_model(&t).is_match());
}
