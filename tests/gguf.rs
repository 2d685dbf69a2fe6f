//! GGUF files: round trips through the writer and the reader, dequantisation against
//! blocks written by hand, hostile files (every one an error, never a panic), weight
//! banks loaded from a file and run on the emulated kernel against a CPU reference, and
//! (in tests/gguf_py.rs) a file written by llama.cpp's gguf-py.

use half::f16;
use proptest::prelude::*;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::gguf::write::{Writer, quantize_q4_0, quantize_q8_0};
use rknpu_driver::gguf::{Array, Error, GgmlType, Gguf, Value, bank_values, load_weights};
use rknpu_driver::kernels::matmul::quant;
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::seeded::Rng;
use std::sync::Arc;

/// `len` values in [-scale, scale).
fn values(rng: &mut Rng, len: usize, scale: f32) -> Vec<f32> {
    (0..len).map(|_| rng.unit() * scale).collect()
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("pattern in the file")
}

fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(1.5)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::String("héllo".into())),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(-0.25)),
        ("t.empty", Value::Array(Array::U32(vec![]))),
        ("t.bytes", Value::Array(Array::U8(vec![1, 2, 3]))),
        ("t.bools", Value::Array(Array::Bool(vec![true, false]))),
        (
            "t.strings",
            Value::Array(Array::String(vec!["a".into(), "".into(), "ccc".into()])),
        ),
        (
            "t.nested",
            Value::Array(Array::Array(vec![
                Array::I16(vec![-1, 2]),
                Array::F64(vec![0.5]),
                Array::Array(vec![Array::I64(vec![7])]),
            ])),
        ),
    ]
}

/// A small file: every metadata type and an F32, F16, Q8_0 and Q4_0 tensor.
fn small_file(rng: &mut Rng) -> (Vec<u8>, Vec<f32>) {
    let w = values(rng, 2 * 64, 2.0);
    let mut out = Writer::new();
    for (k, v) in every_value() {
        out.metadata(k, v).unwrap();
    }
    out.tensor_f32("a.f32", &[64, 2], &w).unwrap();
    let h: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
    out.tensor_f16("b.f16", &[64, 2], &h).unwrap();
    out.tensor_q8_0("c.q8_0", &[64, 2], &w).unwrap();
    out.tensor_q4_0("d.q4_0", &[64, 2], &w).unwrap();
    (out.to_bytes(), w)
}

#[test]
fn writer_and_reader_round_trip() {
    let mut rng = Rng::from_seed(1);
    let (bytes, w) = small_file(&mut rng);
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 32);
    assert_eq!(g.data_offset() % 32, 0);
    let want = every_value();
    assert_eq!(g.metadata_entries().len(), want.len());
    for ((k, v), (gk, gv)) in want.iter().zip(g.metadata_entries()) {
        assert_eq!((k, v), (&gk, &gv));
        assert_eq!(g.metadata(k).as_ref(), Some(v));
    }
    assert_eq!(
        g.metadata("t.u32").as_ref().and_then(Value::as_u64),
        Some(4_000_000_000)
    );
    assert_eq!(g.metadata("t.i8").as_ref().and_then(Value::as_u64), None);
    let names: Vec<&str> = g.tensors().map(|t| t.name).collect();
    assert_eq!(names, ["a.f32", "b.f16", "c.q8_0", "d.q4_0"]);
    for t in g.tensors() {
        assert_eq!(t.dims, [64, 2]);
        assert_eq!(t.offset % 32, 0);
    }
    assert_eq!(g.tensor("c.q8_0").unwrap().ggml_type, GgmlType::Q8_0);
    assert_eq!(g.tensor("c.q8_0").unwrap().bytes(), 4 * 34);
    assert_eq!(g.tensor("d.q4_0").unwrap().bytes(), 4 * 18);
    assert!(g.tensor("nope").is_none());
    assert!(matches!(
        g.dequantize("nope"),
        Err(Error::NoSuchTensor { .. })
    ));

    assert_eq!(g.dequantize("a.f32").unwrap(), w);
    let h: Vec<f32> = w.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    assert_eq!(g.dequantize("b.f16").unwrap(), h);
    // Q8_0: within half a step of each block (plus the step's own f16 rounding: |q| ≤ 127
    // times 2^-11 of it); Q4_0: within one step (the clamp at 15 costs up to a step).
    for (name, steps, levels) in [
        ("c.q8_0", 0.5 + 127.0 / 2048.0, 127.0),
        ("d.q4_0", 1.0 + 8.0 / 2048.0, 8.0),
    ] {
        let got = g.dequantize(name).unwrap();
        for (b, (gb, wb)) in got.chunks(32).zip(w.chunks(32)).enumerate() {
            let amax = wb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let step = amax / levels;
            for (x, y) in gb.iter().zip(wb) {
                assert!(
                    (x - y).abs() <= step * steps + 1e-6,
                    "{name} block {b}: {x} vs {y}"
                );
            }
        }
    }

    // The same through a file on disk.
    let path = std::env::temp_dir().join(format!("rknpu-gguf-{}.gguf", std::process::id()));
    let mut out = Writer::new();
    out.metadata("general.alignment", Value::U32(128)).unwrap();
    out.tensor_f32("x", &[3], &[1.0, -2.0, 3.0]).unwrap();
    out.tensor_f32("y", &[1], &[4.0]).unwrap();
    out.write(&path).unwrap();
    let g = Gguf::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(g.alignment(), 128);
    assert_eq!(g.data_offset() % 128, 0);
    assert_eq!(
        g.tensor("y").unwrap().offset,
        128,
        "after x's 12 bytes, aligned"
    );
    assert_eq!(g.dequantize("y").unwrap(), [4.0]);
    assert!(matches!(Gguf::open(&path), Err(Error::Io { .. })));
}

#[test]
fn the_writer_refuses_what_the_format_cannot_hold() {
    let empty = Gguf::parse(&Writer::default().to_bytes()).unwrap();
    assert_eq!((empty.alignment(), empty.tensors().len()), (32, 0));
    let mut w = Writer::new();
    w.metadata("k", Value::U8(1)).unwrap();
    assert!(matches!(
        w.metadata("k", Value::U8(2)),
        Err(Error::Duplicate { .. })
    ));
    for bad in [Value::U32(48), Value::U32(0), Value::U64(32)] {
        assert!(matches!(
            w.metadata("general.alignment", bad),
            Err(Error::Invalid { .. })
        ));
    }
    w.tensor_f32("t", &[2], &[1.0, 2.0]).unwrap();
    assert!(matches!(
        w.tensor_f32("t", &[2], &[1.0, 2.0]),
        Err(Error::Duplicate { .. })
    ));
    assert!(matches!(
        w.tensor_f32("u", &[3], &[1.0, 2.0]),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        w.tensor_q8_0("v", &[16, 2], &[0.5; 32]),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        w.tensor_q4_0("v", &[32], &[f32::NAN; 32]),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        quantize_q8_0(&[1.0; 31]),
        Err(Error::Unsupported { .. })
    ));
    let deep = (0..5).fold(Array::U8(vec![1]), |a, _| Array::Array(vec![a]));
    assert!(matches!(
        w.metadata("deep", Value::Array(deep)),
        Err(Error::Unsupported { .. })
    ));
}

/// A file whose one tensor `t` has type `ty`, dims `dims` and the given bytes.
fn raw_file(ty: GgmlType, dims: &[u64], data: Vec<u8>) -> Gguf {
    let mut w = Writer::new();
    w.tensor_raw("t", ty, dims, data).unwrap();
    Gguf::parse(&w.to_bytes()).unwrap()
}

#[test]
fn dequantisation_of_blocks_written_by_hand() {
    // Q8_0: d = 0.5 (f16 0x3800), quants 1, −2, 127, −128, then zeros.
    let mut b = vec![0x00, 0x38, 1, (-2i8) as u8, 127, 0x80];
    b.resize(34, 0);
    let y = raw_file(GgmlType::Q8_0, &[32], b).dequantize("t").unwrap();
    assert_eq!(y[..5], [0.5, -1.0, 63.5, -64.0, 0.0]);

    // Q4_0: d = 0.25 (0x3400); byte 0 = 0x9F: value 0 = (15 − 8)·0.25, value 16 =
    // (9 − 8)·0.25; byte 1 = 0x08: value 1 = 0, value 17 = (0 − 8)·0.25; the other
    // bytes 0x88: values 0.
    let mut b = vec![0x00, 0x34, 0x9F, 0x08];
    b.resize(18, 0x88);
    let y = raw_file(GgmlType::Q4_0, &[32], b).dequantize("t").unwrap();
    assert_eq!((y[0], y[16], y[1], y[17]), (1.75, 0.25, 0.0, -2.0));
    assert!(
        y.iter()
            .enumerate()
            .all(|(i, &v)| [0, 1, 16, 17].contains(&i) || v == 0.0)
    );

    // F16 and BF16: 1.0, −2.0 / 1.0, −3.0.
    let y = raw_file(GgmlType::F16, &[2], vec![0x00, 0x3C, 0x00, 0xC0]).dequantize("t");
    assert_eq!(y.unwrap(), [1.0, -2.0]);
    let y = raw_file(GgmlType::BF16, &[2], vec![0x80, 0x3F, 0x40, 0xC0]).dequantize("t");
    assert_eq!(y.unwrap(), [1.0, -3.0]);

    // A type the library reads but does not dequantise.
    let g = raw_file(GgmlType::Q8_1, &[32], vec![0; 40]);
    assert_eq!(g.tensor("t").unwrap().ggml_type, GgmlType::Q8_1);
    assert!(matches!(
        g.dequantize("t"),
        Err(Error::Unsupported { ref tensor, .. }) if tensor == "t"
    ));
}

#[test]
fn quantisation_follows_ggml_reference_rules_by_hand() {
    // Q8_0: amax 127 → d = 1 (0x3C00), q = round half away from zero.
    let mut x = [0f32; 32];
    x[..5].copy_from_slice(&[127.0, 0.5, -0.5, 2.5, -1.49]);
    let q = quantize_q8_0(&x).unwrap();
    assert_eq!(q[..2], [0x00, 0x3C]);
    assert_eq!(q[2..7], [127, 1, (-1i8) as u8, 3, (-1i8) as u8]);
    assert!(q[7..].iter().all(|&b| b == 0));

    // Q4_0: the value of largest magnitude is −4 (first of −4 and 4): d = −4 / −8 = 0.5
    // (0x3800), q = min(15, trunc(x / d + 8.5)): −4 → 0, 4 → 16 → 15, 0.3 → 9,
    // −0.3 → 7, 0.25 → 9 (a half rounds up), 0 → 8.
    let mut x = [0f32; 32];
    x[..5].copy_from_slice(&[-4.0, 4.0, 0.3, -0.3, 0.25]);
    let q = quantize_q4_0(&x).unwrap();
    assert_eq!(q[..2], [0x00, 0x38]);
    // Byte j: value j low, value j + 16 (here 0 → 8) high.
    assert_eq!(q[2..7], [0x80, 0x8F, 0x89, 0x87, 0x89]);
    assert!(q[7..].iter().all(|&b| b == 0x88));
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

fn open() -> Device {
    Device::open_spec("emu").expect("the emulated kernel")
}

/// `y = x · Wᵀ` in f64 for x (M×K) and W (N×K).
fn cpu(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut y = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k)
                .map(|c| f64::from(x[i * k + c]) * f64::from(w[j * k + c]))
                .sum();
        }
    }
    y
}

#[test]
fn bank_values_are_the_quantised_weights_times_their_scales() {
    // Shapes with padded channels and several K waves (int8: waves of at most 4096).
    let dev = open();
    let mut rng = Rng::from_seed(3);
    for (dtype, n, k) in [
        (Dtype::Int8, 40, 4130),
        (Dtype::Int4, 70, 999),
        (Dtype::Int4, 33, 64),
    ] {
        let w = values(&mut rng, n * k, 1.5);
        let bank = WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &w, dtype).unwrap();
        let (q, s) = match dtype {
            Dtype::Int8 => quant::quantize_weights_i8(&w, n, k).unwrap(),
            _ => quant::quantize_weights_i4(&w, n, k).unwrap(),
        };
        let want: Vec<f32> = q
            .iter()
            .enumerate()
            .map(|(i, &v)| v as f32 * s[i / k])
            .collect();
        assert_eq!(bank_values(&bank).unwrap(), want, "{dtype:?} {n}x{k}");
    }
    let w = values(&mut rng, 20 * 77, 3.0);
    let bank = WeightBank::from_f32_nk(&dev, 20, 77, &w).unwrap();
    let want: Vec<f32> = w.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    assert_eq!(bank_values(&bank).unwrap(), want);
}

#[test]
fn banks_from_a_gguf_file_multiply_within_the_reported_error() {
    let (n, k, m) = (48usize, 160usize, 3usize);
    let mut rng = Rng::from_seed(4);
    let src = values(&mut rng, n * k, 0.8);
    let mut out = Writer::new();
    out.tensor_q8_0("w.q8_0", &[k as u64, n as u64], &src)
        .unwrap();
    out.tensor_q4_0("w.q4_0", &[k as u64, n as u64], &src)
        .unwrap();
    let h: Vec<f16> = src.iter().map(|&v| f16::from_f32(v)).collect();
    out.tensor_f16("w.f16", &[k as u64, n as u64], &h).unwrap();
    let g = Gguf::parse(&out.to_bytes()).unwrap();
    let dev = open();
    let x = values(&mut rng, m * k, 1.0);
    let cases = [
        ("w.q8_0", Dtype::Int8),
        ("w.q4_0", Dtype::Int4),
        ("w.f16", Dtype::Fp16),
        ("w.q8_0", Dtype::Fp16),
        ("w.q4_0", Dtype::Int8),
    ];
    for (name, dtype) in cases {
        let w = g.dequantize(name).unwrap();
        let (bank, report) = load_weights(&dev, &g, name, dtype).unwrap();
        assert_eq!(
            (report.n, report.k, report.bank),
            (n as u32, k as u32, dtype)
        );
        // The report against its own definition, from the per-channel steps: int8 and
        // int4 banks are within half a step (max|row| / 127 or / 7) of every value, fp16
        // banks within 2^-11 relative.
        let bound = w
            .chunks(k)
            .map(|row| {
                let amax = row.iter().fold(0f64, |a, &v| a.max(f64::from(v).abs()));
                match dtype {
                    Dtype::Int8 => amax / 127.0 * 0.5,
                    Dtype::Int4 => amax / 7.0 * 0.5,
                    _ => amax / 2048.0,
                }
            })
            .fold(0f64, f64::max);
        assert!(report.max_abs <= bound * 1.001, "{report}: bound {bound}");
        assert!((report.rms <= report.max_abs && report.rel_rms > 0.0) || report.max_abs == 0.0);
        if name == "w.f16" {
            assert_eq!(report.max_abs, 0.0, "an F16 tensor is an fp16 bank exactly");
        }

        let mut mm = Matmul::new(&Arc::new(bank), m as u32).unwrap();
        let mut y = vec![0f32; m * n];
        mm.mul_mat(&x, &mut y).unwrap();
        let want = cpu(&x, &w, m, k, n);
        // Error: the bank's (at most max_abs a weight, Σ|x| a result), the activations'
        // (int banks: int8 per row, half a step; fp16: 2^-11 relative) against the
        // bank's weights (|w| + max_abs), and f32 sums.
        for i in 0..m {
            let row = &x[i * k..(i + 1) * k];
            let sx: f64 = row.iter().map(|&v| f64::from(v).abs()).sum();
            let xstep = match dtype {
                Dtype::Int8 | Dtype::Int4 => {
                    row.iter().fold(0f64, |a, &v| a.max(f64::from(v).abs())) / 127.0 * 0.5
                }
                _ => 0.0,
            };
            for j in 0..n {
                let wrow = &w[j * k..(j + 1) * k];
                let sw: f64 = wrow
                    .iter()
                    .map(|&v| f64::from(v).abs() + report.max_abs)
                    .sum();
                let sxw: f64 = row
                    .iter()
                    .zip(wrow)
                    .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
                    .sum();
                let tol = sx * report.max_abs + sw * xstep + sxw * (1.0 / 1024.0) + 1e-5;
                let got = f64::from(y[i * n + j]);
                assert!(
                    (got - want[i * n + j]).abs() <= tol,
                    "{name} as {dtype:?} [{i}][{j}]: {got} vs {} (tolerance {tol})",
                    want[i * n + j]
                );
            }
        }
    }
    // Not a matrix; not a bank type; no such tensor.
    let mut out = Writer::new();
    out.tensor_f32("cube", &[32, 2, 2], &[0.0; 128]).unwrap();
    let g2 = Gguf::parse(&out.to_bytes()).unwrap();
    assert!(matches!(
        load_weights(&dev, &g2, "cube", Dtype::Fp16),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        load_weights(&dev, &g, "w.f16", Dtype::Int16),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        load_weights(&dev, &g, "none", Dtype::Int8),
        Err(Error::NoSuchTensor { .. })
    ));
}
