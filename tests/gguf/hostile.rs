//! Hostile files: truncated, patched, deeply nested and mutated files are errors, never
//! panics.

use super::*;

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("pattern in the file")
}

/// Parses `bytes`; an error must be one of `kinds`.
fn refused(bytes: &[u8]) -> Error {
    match Gguf::parse(bytes) {
        Ok(_) => panic!("a hostile file was accepted"),
        Err(e) => e,
    }
}

#[test]
fn truncated_at_every_byte_is_an_error() {
    let (bytes, _) = small_file(&mut Rng::from_seed(2));
    for len in 0..bytes.len() {
        match refused(&bytes[..len]) {
            Error::Truncated {
                offset, available, ..
            } => {
                assert_eq!(offset + available, len as u64, "cut at {len}")
            }
            Error::TooLarge { .. } | Error::OutOfBounds { .. } => {}
            e => panic!("cut at {len}: {e}"),
        }
    }
    assert!(Gguf::parse(&bytes).is_ok());
}

/// A file of two tensors `aa` and `ab` (the second 32 bytes after the first) and two
/// metadata keys `ka`, `kb`.
fn two_of_each() -> Vec<u8> {
    let mut w = Writer::new();
    w.metadata("ka", Value::U32(1)).unwrap();
    w.metadata("kb", Value::U32(2)).unwrap();
    w.tensor_f32("aa", &[8], &[1.0; 8]).unwrap();
    w.tensor_f32("ab", &[8], &[2.0; 8]).unwrap();
    w.to_bytes()
}

fn patch(bytes: &[u8], at: usize, with: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at..at + with.len()].copy_from_slice(with);
    b
}

#[test]
fn hostile_headers_are_typed_errors() {
    let good = two_of_each();
    assert!(Gguf::parse(&good).is_ok());
    // Layout: magic 0..4, version 4..8, tensor count 8..16, metadata count 16..24.
    assert!(matches!(
        refused(&patch(&good, 0, b"GGUG")),
        Error::BadMagic { .. }
    ));
    for v in [1u32, 4, 0x0300_0000] {
        assert_eq!(
            refused(&patch(&good, 4, &v.to_le_bytes())),
            Error::UnsupportedVersion { version: v }
        );
    }
    assert!(matches!(
        refused(&patch(&good, 8, &u64::MAX.to_le_bytes())),
        Error::TooLarge { offset: 8, .. }
    ));
    assert!(matches!(
        refused(&patch(&good, 16, &(1u64 << 40).to_le_bytes())),
        Error::TooLarge { offset: 16, .. }
    ));
    // A key's length past the end.
    let ka = find(&good, b"ka") - 8;
    assert!(matches!(
        refused(&patch(&good, ka, &u64::MAX.to_le_bytes())),
        Error::Truncated { .. }
    ));
    // Duplicates: `kb` renamed `ka`, `ab` renamed `aa`.
    let kb = find(&good, b"kb");
    assert_eq!(
        refused(&patch(&good, kb, b"ka")),
        Error::Duplicate {
            offset: kb as u64 - 8,
            what: "metadata key",
            name: "ka".into()
        }
    );
    let ab = find(&good, b"ab");
    assert!(matches!(
        refused(&patch(&good, ab, b"aa")),
        Error::Duplicate {
            what: "tensor name",
            ..
        }
    ));
    // The value type of `ka` (after its name) unknown; its value a bool of 2.
    let vt = find(&good, b"ka") + 2;
    assert!(matches!(
        refused(&patch(&good, vt, &13u32.to_le_bytes())),
        Error::Invalid { offset, .. } if offset == vt as u64
    ));
    let b = patch(&good, vt, &7u32.to_le_bytes());
    // A bool reads one byte (1 of the u32 1): valid but the rest misaligns; make it 2.
    assert!(matches!(
        refused(&patch(&b, vt + 4, &[2])),
        Error::Invalid { .. }
    ));
    // Not UTF-8.
    assert!(matches!(
        refused(&patch(&good, kb, &[0xFF])),
        Error::Invalid { .. }
    ));

    // Tensor infos of `ab`: name, n_dims (u32), dims (u64 each), type (u32), offset (u64).
    let nd = ab + 2;
    assert!(matches!(
        refused(&patch(&good, nd, &5u32.to_le_bytes())),
        Error::TooLarge { .. }
    ));
    // No dimension: the low half of the dim (8) then reads as the type, Q8_0, whose
    // single value is not a whole block.
    assert!(matches!(
        refused(&patch(&good, nd, &0u32.to_le_bytes())),
        Error::Invalid { what, .. } if what.starts_with("first dimension")
    ));
    let dim = nd + 4;
    let ty = dim + 8;
    let off = ty + 4;
    // A huge dimension: data far past the end.
    assert!(matches!(
        refused(&patch(&good, dim, &(1u64 << 40).to_le_bytes())),
        Error::OutOfBounds { ref tensor, .. } if tensor == "ab"
    ));
    // Unknown type codes (31 is a removed type, 1000 never was one).
    for code in [31u32, 1000] {
        assert!(matches!(
            refused(&patch(&good, ty, &code.to_le_bytes())),
            Error::Invalid { offset, .. } if offset == ty as u64
        ));
    }
    // Q8_0 for 8 values: not a whole block.
    assert!(matches!(
        refused(&patch(&good, ty, &8u32.to_le_bytes())),
        Error::Invalid { .. }
    ));
    // Offsets: past the end, misaligned, overflowing.
    assert!(matches!(
        refused(&patch(&good, off, &4096u64.to_le_bytes())),
        Error::OutOfBounds { .. }
    ));
    assert!(matches!(
        refused(&patch(&good, off, &33u64.to_le_bytes())),
        Error::Invalid { .. }
    ));
    assert!(matches!(
        refused(&patch(&good, off, &(u64::MAX - 31).to_le_bytes())),
        Error::OutOfBounds { .. }
    ));
}

/// A header with one metadata key whose value is `depth` nested arrays.
fn nested(depth: usize) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.push(b'k');
    b.extend(9u32.to_le_bytes());
    for _ in 0..depth - 1 {
        b.extend(9u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
    }
    b.extend(0u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b
}

#[test]
fn nesting_products_and_alignment_are_bounded() {
    let g = Gguf::parse(&nested(4)).unwrap();
    assert_eq!(
        g.data_offset(),
        (nested(4).len() as u64).next_multiple_of(32)
    );
    assert!(matches!(refused(&nested(5)), Error::TooLarge { .. }));
    assert!(matches!(refused(&nested(100_000)), Error::TooLarge { .. }));

    // Dims whose product overflows, each one small enough alone.
    let mut w = Writer::new();
    w.tensor_f32("t", &[2, 2], &[0.0; 4]).unwrap();
    let good = w.to_bytes();
    let d = find(&good, b"t") + 1 + 4;
    let big = (1u64 << 33).to_le_bytes();
    let b = patch(&patch(&good, d, &big), d + 8, &big);
    assert!(matches!(refused(&b), Error::TooLarge { .. }));

    // general.alignment: not a power of two, zero, not a u32.
    for (ty, v) in [(4u32, 48u64), (4, 0), (10, 32)] {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(17u64.to_le_bytes());
        b.extend(b"general.alignment");
        b.extend(ty.to_le_bytes());
        if ty == 4 {
            b.extend((v as u32).to_le_bytes());
        } else {
            b.extend(v.to_le_bytes());
        }
        assert!(matches!(refused(&b), Error::Invalid { .. }), "{ty} {v}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Mutated files: a few bytes overwritten, a u64 field replaced by any value, a u32
    /// field by a small one (a dimension count, a type code), then a cut. Parsing never panics; whatever parses dequantises (or refuses to)
    /// without panicking, every tensor's data inside the file.
    #[test]
    fn mutated_files_never_panic(
        seed in 0u64..4,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        wide in prop::option::of((any::<prop::sample::Index>(), any::<u64>())),
        small in prop::option::of((any::<prop::sample::Index>(), 0u32..64)),
        cut in any::<prop::sample::Index>(),
        cut_it in any::<bool>(),
    ) {
        let (mut bytes, _) = small_file(&mut Rng::from_seed(seed));
        for (i, v) in edits {
            let at = i.index(bytes.len());
            bytes[at] = v;
        }
        if let Some((i, v)) = wide {
            let at = i.index(bytes.len() - 8);
            bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        if let Some((i, v)) = small {
            let at = i.index(bytes.len() - 4);
            bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        if cut_it {
            bytes.truncate(cut.index(bytes.len()));
        }
        if let Ok(g) = Gguf::parse(&bytes) {
            for t in g.tensors() {
                let data = g.tensor_data(t.name).unwrap();
                prop_assert_eq!(data.len() as u64, t.bytes());
                if let Ok(x) = g.dequantize(t.name) {
                    prop_assert_eq!(x.len() as u64, t.elements());
                }
            }
        }
    }
}
