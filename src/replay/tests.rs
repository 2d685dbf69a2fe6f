//! Replays of small traces built in place: an imported one matches, a changed output is
//! named to the byte, and hostile sizes and offsets are mismatches, not overflows.

use super::*;
use crate::trace::tests::worked;
use crate::trace::{Chunk, Completion, Contents, Header, Submission, Trace, fnv1a64};

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
    let t = test_trace(vec![
        // Past the 32-bit address space, and so large that address + size overflows.
        buffer(0, u64::MAX - 0xFFFF, 0x6461_6f6c),
        buffer(1, 4096, 0x1000),
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
    ]);
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

/// `t`'s chunks with buffer ids moved up by `ids` and submission ids by `submits`.
fn renumbered(t: &Trace, ids: u32, submits: u32) -> Vec<Chunk> {
    let mut out = t.chunks.clone();
    for c in &mut out {
        match c {
            Chunk::Buffer { id, .. } | Chunk::Data { id, .. } | Chunk::Free { id } => *id += ids,
            Chunk::Output { id, submit, .. } => (*id, *submit) = (*id + ids, *submit + submits),
            Chunk::Reloc { buffer, target, .. } => {
                (*buffer, *target) = (*buffer + ids, *target + ids)
            }
            Chunk::Submit(Submission { id, tasks, .. }) => {
                *id += submits;
                tasks.iter_mut().for_each(|t| t.buffer += ids);
            }
            Chunk::Done(Completion { id, .. }) => *id += submits,
            _ => {}
        }
    }
    out
}

/// The worked example twice, as two program lifetimes at the same addresses: every
/// buffer of the first is freed before the second is created (`free`: with `FREE`
/// chunks, else as a version-1 trace, which has none).
fn two_lifetimes(free: bool) -> Trace {
    let one = worked();
    let n = one
        .chunks
        .iter()
        .filter(|c| matches!(c, Chunk::Buffer { .. }))
        .count() as u32;
    let mut t = one.clone();
    if free {
        t.chunks.extend((0..n).map(|id| Chunk::Free { id }));
    } else {
        t.header.version = 1;
    }
    t.chunks.extend(renumbered(&one, n, 1));
    t
}

#[test]
fn buffers_freed_and_created_again_at_their_addresses_replay() {
    let t = two_lifetimes(true);
    let back = Trace::from_bytes(&t.to_bytes()).unwrap();
    assert_eq!(back, t);
    for r in [replay_model(&t), replay_check(&t)] {
        assert!(r.is_match(), "{:#?}", r.mismatches);
        assert_eq!(r.submits, 2);
        assert!(r.lints.iter().all(|l| !l.contains("taken to be freed")));
    }
    assert_eq!(replay_model(&t).compared, 2);
    let moved = ReplayOptions::for_trace(&t).with_shift(0x1000_0000);
    assert!(replay_model_with(&t, &moved).is_match());
    // A version-2 trace says when buffers die: a buffer created over a live one is the
    // simulator's overlap, not a guess.
    let mut unfreed = t.clone();
    unfreed.chunks.retain(|c| !matches!(c, Chunk::Free { .. }));
    let r = replay_model(&unfreed);
    assert!(
        r.mismatches.iter().any(|m| m.contains("overlaps")),
        "{r:#?}"
    );
}

#[test]
fn a_version_1_trace_takes_reused_addresses_for_frees() {
    let t = two_lifetimes(false);
    let r = replay_model(&t);
    assert!(r.is_match(), "{:#?}", r.mismatches);
    assert_eq!((r.submits, r.compared), (2, 2));
    assert!(
        r.lints
            .iter()
            .any(|l| l.contains("buffer 0 is taken to be freed")),
        "{:?}",
        r.lints
    );
}

#[test]
fn freed_buffers_are_not_used_freed_again_or_created_again() {
    let mut t = worked();
    t.chunks.push(Chunk::Free { id: 0 });
    let submit = t
        .chunks
        .iter()
        .find(|c| matches!(c, Chunk::Submit(_)))
        .cloned()
        .unwrap();
    t.chunks.push(submit);
    t.chunks.push(Chunk::Free { id: 0 });
    t.chunks.push(buffer(0, 16, 0x10_0000));
    for r in [replay_model(&t), replay_check(&t)] {
        let has = |s: &str| r.mismatches.iter().any(|m| m.contains(s));
        assert!(has("no buffer 0"), "{r:#?}");
        assert!(has("buffer 0 is freed twice"), "{r:#?}");
        assert!(has("buffer 0 is created twice"), "{r:#?}");
    }
}

#[test]
fn seeded_contents_are_checked_before_any_byte_is_generated() {
    let seeded = |len: u64, digest: u64| Contents::Digest {
        len,
        digest,
        seed: 9,
    };
    let t = test_trace(vec![
        buffer(0, 4096, 0x1000),
        // A gibibyte claimed for a 4 KiB buffer: refused by its size, at once.
        Chunk::Data {
            id: 0,
            offset: 0,
            contents: seeded(1 << 30, 0),
        },
        // Into no live buffer.
        Chunk::Data {
            id: 7,
            offset: 0,
            contents: seeded(1 << 30, 0),
        },
        Chunk::Data {
            id: 0,
            offset: 8,
            contents: seeded(
                64,
                crate::trace::fnv1a64(&crate::trace::seeded_bytes(9, 64)),
            ),
        },
        Chunk::Data {
            id: 0,
            offset: 8,
            contents: seeded(64, 1),
        },
    ]);
    let started = std::time::Instant::now();
    let r = replay_check(&t);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let m = &r.mismatches;
    assert_eq!(m.len(), 3, "{m:#?}");
    assert!(m[0].contains("do not fit buffer 0"), "{m:#?}");
    assert!(m[1].contains("no live buffer 7"), "{m:#?}");
    assert!(m[2].contains("does not give the recorded digest"), "{m:#?}");
}

#[test]
fn seeded_contents_past_the_limit_are_refused_and_written_piece_by_piece() {
    use super::contents::{SEEDED_PIECE, write_contents};
    use super::target::{Plain, Target};
    let len = 2 * SEEDED_PIECE as u64 + 5;
    let bytes = crate::trace::seeded_bytes(3, len as usize);
    let c = Contents::Digest {
        len,
        digest: fnv1a64(&bytes),
        seed: 3,
    };
    let mut target = Plain::default();
    target.place(0, len + 16, 0x1000).unwrap();
    let placed = walk::Placed {
        recorded: 0x1000,
        at: 0x1000,
        size: len + 16,
    };
    let bufs = [(0, placed)].into_iter().collect();
    let mut left = len - 1;
    let e = write_contents(&mut target, &bufs, 0, 16, &c, &mut left).unwrap_err();
    assert!(e.contains("limit"), "{e}");
    assert_eq!(left, len - 1, "a refused chunk spends nothing");
    let mut left = len;
    write_contents(&mut target, &bufs, 0, 16, &c, &mut left).unwrap();
    assert_eq!(left, 0);
    assert_eq!(target.read(0, 16, len as usize).unwrap(), bytes);
    assert_eq!(target.read(0, 0, 16).unwrap(), [0; 16]);
}

#[test]
fn a_replay_of_chunks_as_they_are_read_is_the_replay_of_the_whole_trace() {
    use crate::trace::ChunkReader;
    let t = two_lifetimes(true);
    let bytes = t.to_bytes();
    for (mode, whole) in [
        (Mode::Model, replay_model(&t)),
        (Mode::Check, replay_check(&t)),
    ] {
        let mut src = &bytes[..];
        let mut chunks = ChunkReader::new(&mut src, bytes.len() as u64).unwrap();
        let opts = ReplayOptions::for_header(chunks.header());
        assert_eq!(replay_stream(&mut chunks, mode, &opts).unwrap(), whole);
    }
    // A trace cut inside a chunk: the replay stops with the reader's error.
    let cut = &bytes[..bytes.len() - 3];
    let mut src = cut;
    let mut chunks = ChunkReader::new(&mut src, cut.len() as u64).unwrap();
    let opts = ReplayOptions::for_header(chunks.header());
    match replay_stream(&mut chunks, Mode::Model, &opts) {
        Err(StreamError::Trace(e)) => assert!(e.what.contains("truncated"), "{e}"),
        other => panic!("{other:?}"),
    }
    // A reader shorter than the length it is said to have: an error, not a wait or a
    // reservation of the length.
    let said = bytes.len() as u64 + (1 << 40);
    let e = Trace::read_from(&mut &bytes[..], said).unwrap_err();
    assert!(e.what.contains("the input ends first"), "{e}");
}

/// A trace of `chunks` under a plain RK3588 header.
fn test_trace(chunks: Vec<Chunk>) -> Trace {
    Trace {
        header: Header::new("RK3588", 0, "test", true),
        chunks,
    }
}

/// Buffer `id` of `size` bytes at `dma_addr`, without flags.
fn buffer(id: u32, size: u64, dma_addr: u32) -> Chunk {
    Chunk::Buffer {
        id,
        flags: 0,
        size,
        dma_addr,
    }
}
