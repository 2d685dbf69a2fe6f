//! Round trips through the writer and the reader, and what the writer refuses.

use super::*;

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
