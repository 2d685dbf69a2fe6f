//! `rknpu gguf` and `rknpu matmul --gguf` on hostile files (docs/gguf.md, "Bounds"): a
//! name of 65,536 bytes, a listing linear in the file, a shape refused before its
//! activations are allocated, and weights an fp16 bank cannot hold refused, never `OK`.

use rknpu_driver::gguf::GgmlType;
use rknpu_driver::gguf::write::Writer;
use std::time::{Duration, Instant};

mod common;
use common::{Temp, run};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `w` to a temporary file named `name`.
fn file(name: &str, w: &Writer) -> Temp {
    let t = Temp::new(name);
    std::fs::write(&t.0, w.to_bytes()).unwrap();
    t
}

#[test]
fn a_tensor_name_of_65536_bytes_lists() {
    let mut w = Writer::new();
    let long = "y".repeat(65_536);
    w.tensor_f32(&long, &[32, 2], &[0.25; 64]).unwrap();
    w.tensor_f32("bell\u{7}", &[32], &[0.25; 32]).unwrap();
    let f = file("long-name.gguf", &w);
    let o = run(&["gguf", f.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[1], format!("{long}  F32      [32, 2]"));
    assert_eq!(
        lines[2],
        format!("bell\\u{{7}}{}  F32      [32]", " ".repeat(31))
    );
    assert_eq!(lines[3], "2 tensors");
}

#[test]
fn json_names_any_name_and_is_the_document_serde_json_writes() {
    let mut w = Writer::new();
    let long = "q".repeat(65_536);
    w.tensor_f32(&long, &[32, 2], &[0.25; 64]).unwrap();
    w.tensor_f32("tab\t\"quote\"", &[32], &[0.25; 32]).unwrap();
    let f = file("long-name.json.gguf", &w);
    let o = run(&["gguf", "--json", f.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tensors"][0]["name"], long.as_str());
    assert_eq!(v["tensors"][1]["name"], "tab\t\"quote\"");
    assert_eq!(v["tensor_count"], 2);
    // Written a tensor at a time, the document is byte for byte the one serde_json
    // writes for the whole value (keys sorted), and one line.
    let out = text(&o.stdout);
    assert_eq!(out, format!("{v}\n"));
}

#[test]
fn the_listing_is_linear_in_the_file() {
    // A 100,000-byte name among 1,000 short ones: padded to the longest name, the
    // listing would take 100 MB.
    let mut w = Writer::new();
    w.tensor_f32(&"z".repeat(100_000), &[1], &[1.0]).unwrap();
    for i in 0..1_000 {
        w.tensor_f32(&format!("t{i}"), &[1], &[1.0]).unwrap();
    }
    let f = file("linear.gguf", &w);
    let len = std::fs::metadata(&f.0).unwrap().len() as usize;
    let o = run(&["gguf", f.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        o.stdout.len() <= 5 * len + 200,
        "{} bytes listed for a {len}-byte file",
        o.stdout.len()
    );
    assert_eq!(text(&o.stdout).lines().count(), 1_003);
}

/// A file with one `n` × 32 matrix `w` of type `ty`, every value 0.5 but the one at
/// row 1, column 3, which has the bits `bits`.
fn matrix(name: &str, ty: GgmlType, n: u64, bits: u32) -> Temp {
    let size = ty.type_size() as usize;
    let fill: u32 = match ty {
        GgmlType::F32 => 0.5f32.to_bits(),
        _ => 0x3f00,
    };
    let mut data = Vec::new();
    for i in 0..n * 32 {
        let v = if i == 32 + 3 { bits } else { fill };
        data.extend_from_slice(&v.to_le_bytes()[..size]);
    }
    let mut w = Writer::new();
    w.tensor_raw("w", ty, &[32, n], data).unwrap();
    file(name, &w)
}

fn gguf_matmul(f: &Temp, m: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "matmul",
        "--gguf",
        f.path(),
        "--tensor",
        "w",
        "--m",
        m,
        "--device",
        "emu",
    ];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn a_shape_the_plan_refuses_is_refused_before_its_activations_are_allocated() {
    let f = matrix("huge-m.gguf", GgmlType::F32, 4, 0.5f32.to_bits());
    let t = Instant::now();
    // 2^32 - 1 rows of 32 f32 activations would take 512 GiB.
    let o = gguf_matmul(&f, "4294967295", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.starts_with("rknpu: "), "{err}");
    assert!(!text(&o.stdout).contains("OK"));
    assert!(t.elapsed() < Duration::from_secs(60));
    // The same file multiplies with a shape that plans.
    let o = gguf_matmul(&f, "3", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).lines().any(|l| l == "OK"));
}

#[test]
fn weights_an_fp16_bank_cannot_hold_are_an_error_not_ok() {
    for (what, ty, bits, value) in [
        ("f32 1e5", GgmlType::F32, 1e5f32.to_bits(), "1e5"),
        ("bf16 3.39e38", GgmlType::BF16, 0x7f7f, "3.3895314e38"),
        ("f32 NaN", GgmlType::F32, 0x7fc0_0000, "NaN"),
    ] {
        let f = matrix("odd.gguf", ty, 4, bits);
        let o = gguf_matmul(&f, "2", &[]);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", text(&o.stdout));
        let err = text(&o.stderr);
        assert!(
            err.contains("\"w\"") && err.contains("row 1, column 3") && err.contains(value),
            "{what}: {err}"
        );
        assert!(!text(&o.stdout).lines().any(|l| l == "OK"), "{what}");
    }
    // An int8 bank holds 1e5 (scaled): that product runs and checks.
    let f = matrix("int8.gguf", GgmlType::F32, 4, 1e5f32.to_bits());
    let o = gguf_matmul(&f, "2", &["--dtype", "int8"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}
