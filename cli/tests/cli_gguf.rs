//! `rknpu gguf` and `rknpu matmul --gguf` as child processes, on GGUF files written by
//! the library's writer.

use rknpu_driver::gguf::GgmlType;
use rknpu_driver::gguf::write::Writer;
use rknpu_driver::seeded::Rng;

mod common;
use common::{Temp, run, run_ok};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Weights of `n` rows of `k` (GGUF dims `[k, n]`).
const K: u64 = 96;
const N: u64 = 40;

/// A file with a Q8_0, a Q4_0, an F16 and an F32 matrix, a 3-D F32 tensor and two
/// metadata entries.
fn model(name: &str) -> (Temp, Vec<u8>) {
    let mut rng = Rng::from_seed(11);
    let w: Vec<f32> = (0..K * N).map(|_| rng.unit() * 0.8).collect();
    let h: Vec<u8> = w
        .iter()
        .flat_map(|&v| rknpu_driver::float::f32_to_f16(v).to_le_bytes())
        .collect();
    let mut out = Writer::new();
    out.metadata(
        "general.architecture",
        rknpu_driver::gguf::Value::String("test".into()),
    )
    .unwrap();
    out.metadata("test.layers", rknpu_driver::gguf::Value::U32(1))
        .unwrap();
    out.tensor_q8_0("blk.0.q8", &[K, N], &w).unwrap();
    out.tensor_q4_0("blk.0.q4", &[K, N], &w).unwrap();
    out.tensor_raw("blk.0.f16", GgmlType::F16, &[K, N], h)
        .unwrap();
    out.tensor_f32("blk.0.f32", &[K, N], &w).unwrap();
    out.tensor_f32("cube", &[32, 2, 3], &[0.5; 192]).unwrap();
    let bytes = out.to_bytes();
    let t = Temp::new(name);
    std::fs::write(&t.0, &bytes).unwrap();
    (t, bytes)
}

#[test]
fn gguf_lists_the_tensors_with_types_and_shapes() {
    let (f, _) = model("list.gguf");
    let o = run(&["gguf", f.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"GGUF version 3, 2 metadata entries, alignment 32"),
        "{out}"
    );
    let expect = [
        ("blk.0.q8", "Q8_0", "[96, 40]"),
        ("blk.0.q4", "Q4_0", "[96, 40]"),
        ("blk.0.f16", "F16", "[96, 40]"),
        ("blk.0.f32", "F32", "[96, 40]"),
        ("cube", "F32", "[32, 2, 3]"),
    ];
    assert_eq!(lines.len(), expect.len() + 2, "{out}");
    for (line, (name, ty, shape)) in lines[1..].iter().zip(expect) {
        let words: Vec<&str> = line.splitn(3, char::is_whitespace).collect();
        assert_eq!(words[0], name, "{out}");
        let rest: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(rest[1], ty, "{out}");
        assert_eq!(rest[2..].join(" "), shape, "{out}");
    }
    assert_eq!(lines.last(), Some(&"5 tensors"), "{out}");
}

#[test]
fn gguf_json_is_one_document() {
    let (f, _) = model("json.gguf");
    let o = run(&["gguf", "--json", f.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["version"], 3);
    assert_eq!(v["metadata_count"], 2);
    assert_eq!(v["tensor_count"], 5);
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 5);
    assert_eq!(tensors[0]["name"], "blk.0.q8");
    assert_eq!(tensors[0]["type"], "Q8_0");
    assert_eq!(tensors[0]["shape"], serde_json::json!([96, 40]));
    // 96 × 40 values in blocks of 32, 34 bytes each.
    assert_eq!(tensors[0]["bytes"], 96 * 40 / 32 * 34);
    assert_eq!(tensors[1]["type"], "Q4_0");
    assert_eq!(tensors[4]["shape"], serde_json::json!([32, 2, 3]));
    // Offsets are multiples of the alignment and the tensors follow each other.
    let offsets: Vec<u64> = tensors
        .iter()
        .map(|t| t["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(offsets[0], 0);
    assert!(offsets.windows(2).all(|p| p[0] < p[1]), "{offsets:?}");
    assert!(offsets.iter().all(|o| o % 32 == 0), "{offsets:?}");
}

#[test]
fn a_bad_file_exits_1_with_the_readers_error() {
    let (_f, bytes) = model("whole.gguf");
    // Cut inside the header (the reader's Truncated) and inside the tensor data
    // (OutOfBounds).
    for (len, says) in [
        (12, "truncated"),
        (bytes.len() / 3, "outside the data section"),
    ] {
        let cut = Temp::new(&format!("cut-{len}.gguf"));
        std::fs::write(&cut.0, &bytes[..len]).unwrap();
        for args in [
            vec!["gguf", cut.path()],
            vec!["gguf", "--json", cut.path()],
            vec![
                "matmul",
                "--gguf",
                cut.path(),
                "--tensor",
                "blk.0.q8",
                "--m",
                "2",
            ],
        ] {
            let o = run(&args);
            assert_eq!(o.status.code(), Some(1), "{args:?}");
            let err = text(&o.stderr);
            assert!(
                err.contains(cut.path()) && err.contains(says),
                "{args:?}: {err}"
            );
            assert!(o.stdout.is_empty(), "{args:?}: {}", text(&o.stdout));
        }
    }
    let o = run(&["gguf", "no-such-file.gguf"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("no-such-file.gguf"));
}

#[test]
fn gguf_usage_errors_exit_2() {
    let o = run(&["gguf"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o = run(&["gguf", "a.gguf", "--tensors"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// Runs `matmul --gguf` on the emulated kernel; returns standard output.
fn gguf_matmul(file: &str, tensor: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "matmul", "--gguf", file, "--tensor", tensor, "--m", "3", "--device", "emu",
    ];
    args.extend_from_slice(extra);
    text(&run_ok(&args).stdout)
}

/// The value after `key` in `line`, up to the next comma or space.
fn field(line: &str, key: &str) -> f64 {
    let rest = &line[line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len()..];
    let v: String = rest
        .trim_start()
        .chars()
        .take_while(|c| !matches!(c, ',' | ' '))
        .collect();
    v.parse().unwrap_or_else(|e| panic!("{v} in {line}: {e}"))
}

#[test]
fn matmul_gguf_checks_int8_int4_and_fp16_banks() {
    let (f, _) = model("mm.gguf");
    for (tensor, extra, bank, exact) in [
        ("blk.0.q8", &["--dtype", "int8"][..], "Int8", false),
        (
            "blk.0.q4",
            &["--dtype", "int4", "--cores", "2"][..],
            "Int4",
            false,
        ),
        ("blk.0.f16", &["--seed", "5"][..], "Fp16", true),
        ("blk.0.q4", &["--dtype", "fp16"][..], "Fp16", false),
    ] {
        let out = gguf_matmul(f.path(), tensor, extra);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.last(), Some(&"OK"), "{tensor} {extra:?}:\n{out}");
        let load = lines
            .iter()
            .find(|l| l.starts_with("load: "))
            .unwrap_or_else(|| panic!("no load line:\n{out}"));
        assert!(
            load.contains(&format!("{tensor}: "))
                && load.contains(&format!("[40 x 96] -> {bank} bank")),
            "{load}"
        );
        let max_abs = field(load, "max |err|");
        if exact {
            assert_eq!(
                max_abs, 0.0,
                "an F16 tensor is an fp16 bank exactly: {load}"
            );
        } else {
            assert!(max_abs > 0.0, "{load}");
        }
        let plan = lines.iter().find(|l| l.starts_with("plan: ")).unwrap();
        // M may be padded (int4 plans whole pairs of rows); K and N are the tensor's.
        assert!(
            plan.starts_with("plan: ") && plan.contains("x96x40 "),
            "{plan}"
        );
        let err = lines
            .iter()
            .find(|l| l.starts_with("largest error: "))
            .unwrap_or_else(|| panic!("no error line:\n{out}"));
        let ratio = field(err, "largest error / bound");
        assert!(ratio > 0.0 && ratio <= 1.0, "{err}");
        let rel = field(err, "relative rms error");
        // Well below the weights' own relative error for the requantised banks; tiny for
        // an exact fp16 bank.
        assert!(rel > 0.0 && rel < 0.2, "{err}");
        bank_line(&out);
    }
}

/// The `bank:` line before `OK`: the bytes the bank holds and their ratio to the
/// tensor's bytes in the file, which it returns.
fn bank_line(out: &str) -> f64 {
    let lines: Vec<&str> = out.lines().collect();
    let line = lines[lines.len() - 2];
    assert!(
        line.starts_with("bank: ") && line.contains("bytes in the file"),
        "{out}"
    );
    let held = field(line, "bank:");
    let ratio: f64 = line
        .split(", ")
        .nth(1)
        .unwrap()
        .split('x')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let file: f64 = line
        .split("tensor's ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((held / file - ratio).abs() < 0.01, "{line}");
    ratio
}

/// Without `--dtype`, a Q8_0 or Q4_0 tensor whose grouped int8 bank of the file's own
/// blocks keeps within its size bound (1.15x the file's bytes for Q8_0, 2x for Q4_0)
/// loads as one: its weights exact, the product within the bound, the bank's bytes
/// stated. A tensor whose padded bank would not (40 output channels padded to 64) loads
/// as before, into a per-channel int8 bank.
#[test]
fn matmul_gguf_defaults_to_grouped_banks_of_the_files_blocks() {
    let (n, k) = (64u64, 96u64);
    let mut rng = Rng::from_seed(12);
    let w: Vec<f32> = (0..k * n).map(|_| rng.unit() * 0.8).collect();
    let mut out = Writer::new();
    out.tensor_q8_0("q8", &[k, n], &w).unwrap();
    out.tensor_q4_0("q4", &[k, n], &w).unwrap();
    let f = Temp::new("grouped.gguf");
    std::fs::write(&f.0, out.to_bytes()).unwrap();
    for (tensor, bound) in [("q8", 1.15), ("q4", 2.0)] {
        let out = gguf_matmul(f.path(), tensor, &[]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.last(), Some(&"OK"), "{tensor}:\n{out}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("load: ") && l.contains("grouped int8 bank")),
            "{out}"
        );
        let err = lines
            .iter()
            .find(|l| l.starts_with("largest error: "))
            .unwrap();
        assert!(field(err, "largest error / bound") <= 1.0, "{err}");
        assert!(field(err, "relative rms error") < 0.05, "{err}");
        let r = bank_line(&out);
        // At least the file's bytes (Q8_0 exactly them: 32 integers and an fp16 scale).
        assert!(r >= 1.0 && r <= bound, "{tensor}: {r}");
    }
    // Three passes: the activations' rounding leaves the error (about 1e-7 relative).
    let out = gguf_matmul(f.path(), "q4", &["--passes", "3"]);
    assert!(
        out.contains("\nactivations: int8 per row and group of 32, 3 passes"),
        "{out}"
    );
    assert!(out.ends_with("OK\n"), "{out}");
    let err = out
        .lines()
        .find(|l| l.starts_with("largest error: "))
        .unwrap();
    assert!(field(err, "relative rms error") < 1e-5, "{err}");
    let (small, _) = model("padded.gguf");
    let out = gguf_matmul(small.path(), "blk.0.q8", &[]);
    assert!(out.contains("-> Int8 bank"), "{out}");
    // Passes are a grouped bank's: refused for a per-channel bank, and beside --dtype.
    let o = run(&[
        "matmul",
        "--gguf",
        small.path(),
        "--tensor",
        "blk.0.q8",
        "--m",
        "2",
        "--device",
        "emu",
        "--passes",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    assert!(text(&o.stderr).contains("--passes"), "{}", text(&o.stderr));
    let o = run(&[
        "matmul",
        "--gguf",
        f.path(),
        "--tensor",
        "q4",
        "--m",
        "2",
        "--passes",
        "2",
        "--dtype",
        "int8",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// Without `--dtype`, a Q6_K tensor (here of random blocks, the hardest case the docs
/// measure) loads as a grouped bank requantised per 32 and runs with its activations in
/// two passes: within 1.25x llama.cpp's CPU error, so `OK`; 64 rows, past what one
/// submission holds, in calls of the most rows one holds (63).
#[test]
fn matmul_gguf_runs_q6_k_within_the_cpu_backends_error() {
    let (n, k) = (64u64, 1024u64);
    let mut rng = Rng::from_seed(13);
    let mut bytes = Vec::new();
    for _ in 0..n * k / 256 {
        let mut block = rng.bytes(210);
        let d = half::f16::from_f32(0.001 + 0.049 * (rng.unit() + 1.0) / 2.0);
        block[208..].copy_from_slice(&d.to_le_bytes());
        bytes.extend(block);
    }
    let mut out = Writer::new();
    out.tensor_raw("q6", GgmlType::Q6_K, &[k, n], bytes)
        .unwrap();
    let f = Temp::new("q6_k.gguf");
    std::fs::write(&f.0, out.to_bytes()).unwrap();
    for m in ["1", "7", "64"] {
        let args = ["matmul", "--gguf", f.path(), "--tensor", "q6", "--m", m];
        let out = text(&run_ok(&[&args[..], &["--device", "emu"]].concat()).stdout);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.last(), Some(&"OK"), "m {m}:\n{out}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("load: ") && l.contains("grouped int8 bank")),
            "{out}"
        );
        assert!(
            out.contains("\nactivations: int8 per row and group of 32, 2 passes"),
            "{out}"
        );
        // 64 rows of both passes of 32 groups are past one submission (4128 tasks on a
        // core, the limit 4095); 63 rows are not: calls of 63.
        let calls = lines.iter().find(|l| l.starts_with("calls: "));
        match m {
            "64" => assert!(
                calls.unwrap().starts_with("calls: 64 rows in calls of 63 "),
                "{out}"
            ),
            _ => assert!(calls.is_none(), "{out}"),
        }
        let cpu = lines.iter().find(|l| l.starts_with("cpu: ")).unwrap();
        let times: f64 = cpu
            .rsplit("this run ")
            .next()
            .unwrap()
            .trim_end_matches("x it")
            .parse()
            .unwrap();
        assert!(times <= 1.25, "{cpu}");
        assert!(bank_line(&out) <= 2.0, "{out}");
    }
}

#[test]
fn matmul_gguf_names_a_missing_tensor_and_refuses_k_n_and_non_matrices() {
    let (f, _) = model("missing.gguf");
    let o = run(&[
        "matmul",
        "--gguf",
        f.path(),
        "--tensor",
        "blk.9.none",
        "--m",
        "2",
        "--device",
        "emu",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("blk.9.none"),
        "{}",
        text(&o.stderr)
    );
    assert!(!text(&o.stdout).contains("OK"));
    let o = run(&[
        "matmul",
        "--gguf",
        f.path(),
        "--tensor",
        "cube",
        "--m",
        "2",
        "--device",
        "emu",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("cube"), "{}", text(&o.stderr));
    for extra in [
        &["--k", "96"][..],
        &["--n", "40"],
        &["--plan-only"],
        &["--out", "int32"],
    ] {
        let mut args = vec![
            "matmul",
            "--gguf",
            f.path(),
            "--tensor",
            "blk.0.q8",
            "--m",
            "2",
        ];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    // --tensor needs --gguf, --gguf needs --tensor.
    for args in [
        &[
            "matmul", "--tensor", "x", "--m", "2", "--k", "4", "--n", "4", "--dtype", "int8",
        ][..],
        &["matmul", "--gguf", f.path(), "--m", "2"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
    }
}

#[test]
fn help_describes_both_forms() {
    let o = run(&["gguf", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(
        out.contains("Usage: rknpu gguf") && out.contains("--json") && out.contains("FILE"),
        "{out}"
    );
    let o = run(&["matmul", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    for option in ["--gguf", "--tensor", "--k", "--dtype"] {
        assert!(out.contains(option), "{option}:\n{out}");
    }
    let o = run(&["--help"]);
    assert!(
        text(&o.stdout)
            .lines()
            .any(|l| l.trim_start().starts_with("gguf"))
    );
}
