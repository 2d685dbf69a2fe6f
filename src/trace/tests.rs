//! The trace format round-trips, skips what it does not know, and turns every malformed
//! input into a typed error: truncated, bit-flipped and random bytes never panic and
//! never allocate more than the input holds.

use super::*;
use crate::submit::TaskDesc;
use proptest::prelude::*;

fn sample() -> Trace {
    Trace {
        header: Header::new("RK3588", 0, "rknpu 0.9.8", true),
        chunks: vec![
            Chunk::Buffer {
                id: 0,
                flags: 0x13,
                size: 4096,
                dma_addr: 0xFFFF_F000,
            },
            Chunk::Data {
                id: 0,
                offset: 0,
                contents: Contents::Bytes(vec![1, 2, 3, 4, 5, 6, 7, 8]),
            },
            Chunk::Output {
                id: 1,
                submit: 1,
                offset: 64,
                contents: Contents::Digest {
                    len: 512,
                    digest: fnv1a64(&[0; 512]),
                    seed: 7,
                },
            },
            Chunk::Reloc {
                buffer: 0,
                entry: 25,
                target: 1,
                offset: 0x40,
            },
            Chunk::Submit(Submission {
                id: 1,
                flags: 5,
                core_mask: 7,
                timeout_ms: 500,
                ranges: vec![(0, 1), (1, 1), (2, 1)],
                tasks: vec![
                    BufferTask {
                        buffer: 0,
                        task: TaskDesc {
                            offset: 0,
                            regcfg_amount: 108,
                            int_mask: 0x300,
                            enable: 0xD,
                        },
                    };
                    3
                ],
            }),
            Chunk::Done(Completion {
                id: 1,
                ok: true,
                errno: 0,
                task_counter: 3,
                elapsed_ns: 12_345,
                statuses: vec![0, 0, 0x100],
            }),
            Chunk::Free { id: 1 },
            Chunk::Note("recorded by the tests".into()),
        ],
    }
}

#[test]
fn a_trace_round_trips() {
    let t = sample();
    let bytes = t.to_bytes();
    assert_eq!(&bytes[..8], MAGIC);
    assert_eq!(&bytes[8..12], b"HEAD");
    assert_eq!(Trace::from_bytes(&bytes).unwrap(), t);
}

#[test]
fn unknown_chunks_are_skipped() {
    let mut bytes = sample().to_bytes();
    let head_end = 12 + 8 + u64::from_le_bytes(bytes[12..20].try_into().unwrap()) as usize;
    let mut extra = b"ZZZZ".to_vec();
    extra.extend_from_slice(&3u64.to_le_bytes());
    extra.extend_from_slice(&[9, 9, 9]);
    bytes.splice(head_end..head_end, extra);
    let t = Trace::from_bytes(&bytes).unwrap();
    assert_eq!(
        t.chunks[0],
        Chunk::Unknown {
            kind: *b"ZZZZ",
            len: 3
        }
    );
    assert_eq!(t.chunks[1..], sample().chunks[..]);
}

#[test]
fn malformed_inputs_are_named_errors() {
    let bytes = sample().to_bytes();
    assert!(
        Trace::from_bytes(b"RKNPUTRX")
            .unwrap_err()
            .what
            .contains("magic")
    );
    assert!(Trace::from_bytes(MAGIC).unwrap_err().what.contains("HEAD"));
    // A chunk that claims more than the file holds.
    let mut long = bytes.clone();
    long[12..20].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(
        Trace::from_bytes(&long)
            .unwrap_err()
            .what
            .contains("truncated")
    );
    // A version this reader does not know.
    let mut v3 = bytes.clone();
    v3[20] = 3;
    assert!(
        Trace::from_bytes(&v3)
            .unwrap_err()
            .what
            .contains("version 3")
    );
    let mut v0 = bytes.clone();
    v0[20] = 0;
    assert!(Trace::from_bytes(&v0).is_err());
    // A count far beyond the payload: refused before anything is reserved.
    let mut t = Trace {
        header: Header::new("RK3588", 1, "rocket 0.0.0", false),
        chunks: vec![Chunk::Done(Completion {
            id: 0,
            ok: false,
            errno: 110,
            task_counter: 0,
            elapsed_ns: 0,
            statuses: vec![],
        })],
    }
    .to_bytes();
    let n = t.len();
    t[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = Trace::from_bytes(&t).unwrap_err();
    assert!(
        e.what.contains("statuses") && e.what.contains("remain"),
        "{e}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every prefix of a valid trace is either the trace up to a chunk boundary or an error.
    #[test]
    fn truncated_traces_never_panic(cut in 0usize..400) {
        let bytes = sample().to_bytes();
        let cut = cut.min(bytes.len());
        let _ = Trace::from_bytes(&bytes[..cut]);
    }

    /// Flipped bits give a trace or an error, never a panic.
    #[test]
    fn bit_flipped_traces_never_panic(flips in proptest::collection::vec((0usize..400, 0u8..8), 1..8)) {
        let mut bytes = sample().to_bytes();
        for (at, bit) in flips {
            let i = at % bytes.len();
            bytes[i] ^= 1 << bit;
        }
        let _ = Trace::from_bytes(&bytes);
    }

    /// Random bytes after the magic give a trace or an error, never a panic.
    #[test]
    fn random_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&tail);
        let _ = Trace::from_bytes(&bytes);
        let _ = Trace::from_bytes(&tail);
    }
}

/// The worked example (mtx512's int8 matmul; docs/provenance.md) with its bundled operands and product,
/// imported as a trace (the replay's tests use it too).
pub(crate) fn worked() -> Trace {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/regcmd/");
    let read = |f: &str| std::fs::read(format!("{dir}{f}")).unwrap();
    import_raw(
        &read("worked-int8-4x32x32.bin"),
        0x10_0000,
        104,
        &[
            (0x20_0000, read("worked-int8-4x32x32.a.bin")),
            (0x30_0000, read("worked-int8-4x32x32.b.bin")),
        ],
        &[(0x40_0000, read("worked-int8-4x32x32.c.bin"))],
    )
}

#[test]
fn a_dump_shows_buffers_submits_and_decoded_tasks() {
    let text = dump(&worked());
    assert!(
        text.starts_with("trace v2 soc RK3588 interface vendor"),
        "{text}"
    );
    assert!(text.contains("buffer 0: 896 bytes at 0x00100000"), "{text}");
    assert!(
        text.contains("submit 1: flags 0x5, core mask 0x1"),
        "{text}"
    );
    assert!(text.contains("CNA.CONV_CON2 = 0x00000050"), "{text}");
    assert!(
        text.contains("output of buffer 3 at +0x0 after submit 1"),
        "{text}"
    );
}
