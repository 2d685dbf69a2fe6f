//! `rknpu trace import | dump | replay` and `rknpu matmul --trace` as child processes.

use std::process::{Command, Output};

mod common;
/// The repository's test helpers (the captures, found as every capture test finds them).
#[path = "../../tests/common/mod.rs"]
mod repo;
use common::{RKNPU, Temp, expect, run};

fn fixture(ext: &str) -> String {
    format!(
        "{}/../fixtures/regcmd/worked-int8-4x32x32{ext}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn import(out: &Temp, expect: &str) -> Output {
    run(&[
        "trace",
        "import",
        "--regcmd",
        &fixture(".bin"),
        "--regcmd-addr",
        "0x100000",
        "--load",
        &format!("0x200000={}", fixture(".a.bin")),
        "--load",
        &format!("0x300000={}", fixture(".b.bin")),
        "--expect",
        &format!("0x400000={expect}"),
        "--out",
        out.path(),
    ])
}

#[test]
fn an_imported_trace_dumps_and_replays() {
    let t = Temp::new("ok.trace");
    assert_eq!(import(&t, &fixture(".c.bin")).status.code(), Some(0));
    let o = run(&["trace", "replay", t.path()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).ends_with("match\n"));
    let o = run(&["trace", "dump", t.path()]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("submit 1:") && text.contains("CNA.CONV_CON1"),
        "{text}"
    );
}

#[test]
fn a_wrong_expectation_is_a_mismatch_naming_the_byte() {
    let mut c = std::fs::read(fixture(".c.bin")).unwrap();
    c[40] ^= 0x80;
    let wrong = Temp::new("wrong-c.bin");
    std::fs::write(&wrong.0, &c).unwrap();
    let t = Temp::new("wrong.trace");
    assert_eq!(import(&t, wrong.path()).status.code(), Some(0));
    let o = run(&["trace", "replay", t.path(), "--mode", "model"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the first, at +0x28"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn bad_files_and_usage() {
    let junk = Temp::new("junk.trace");
    std::fs::write(&junk.0, b"not a trace at all").unwrap();
    assert_eq!(run(&["trace", "dump", junk.path()]).status.code(), Some(1));
    assert_eq!(
        run(&["trace", "replay", junk.path()]).status.code(),
        Some(1)
    );
    for args in [
        &["trace"][..],
        &["trace", "dump"],
        &["trace", "replay", "x", "--mode", "fast"],
        &["trace", "replay", "x", "--ulps", "many"],
        &["trace", "replay", "x", "--mode"],
        &["trace", "import", "--capture", "x"],
        &["trace", "import", "--regcmd", "x"],
        &["trace", "frobnicate"],
    ] {
        assert_eq!(run(args).status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn a_matmul_recorded_with_trace_replays_in_every_mode() {
    let t = Temp::new("matmul.trace");
    let out = expect(
        &run(&[
            "matmul",
            "--m",
            "40",
            "--k",
            "96",
            "--n",
            "64",
            "--dtype",
            "int8",
            "--cores",
            "1",
            "--device",
            "emu",
            "--trace",
            t.path(),
        ]),
        0,
    );
    assert!(out.contains(&format!("trace: {}", t.path())), "{out}");
    let model = expect(&run(&["trace", "replay", t.path()]), 0);
    assert!(
        model.ends_with("match\n") && model.contains("1 task(s)"),
        "{model}"
    );
    expect(&run(&["trace", "replay", t.path(), "--mode", "check"]), 0);
    let hw = Command::new(RKNPU)
        .args(["trace", "replay", t.path(), "--mode", "hw"])
        .env("RKNPU_DEVICE", "emu:vendor-0.9.6")
        .output()
        .unwrap();
    assert!(expect(&hw, 0).ends_with("match\n"));
    let text = expect(&run(&["trace", "dump", t.path()]), 0);
    assert!(text.contains("output of buffer"), "{text}");
}

#[test]
fn rknpu_trace_records_any_program() {
    let t = Temp::new("env.trace");
    let o = Command::new(RKNPU)
        .args([
            "matmul", "--m", "8", "--k", "64", "--n", "32", "--dtype", "fp16",
        ])
        .env("RKNPU_DEVICE", "emu:rocket")
        .env("RKNPU_TRACE", t.path())
        .output()
        .unwrap();
    expect(&o, 0);
    let text = expect(&run(&["trace", "dump", t.path()]), 0);
    assert!(text.contains("interface rocket"), "{text}");
    assert!(expect(&run(&["trace", "replay", t.path()]), 0).ends_with("match\n"));
}

#[test]
fn a_trace_that_cannot_be_written_is_an_error() {
    let o = run(&[
        "matmul",
        "--m",
        "8",
        "--k",
        "64",
        "--n",
        "32",
        "--dtype",
        "int8",
        "--device",
        "emu",
        "--trace",
        "/nonexistent-dir/x.trace",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("recording a trace"));
}

#[test]
fn captures_import_when_present() {
    let Some(case) =
        repo::capture_or_skip("wtwver-npu/rknn-matmul-int8-4x32x32", "nothing imported")
    else {
        return;
    };
    let case = case.to_str().unwrap();
    let t = Temp::new("capture.trace");
    expect(
        &run(&["trace", "import", "--capture", case, "--out", t.path()]),
        0,
    );
    let text = expect(&run(&["trace", "dump", t.path()]), 0);
    assert!(
        text.contains("buffer 0: 4096 bytes at 0xfffeb000"),
        "{text}"
    );
    assert!(text.contains("CNA.CONV_CON1"), "{text}");
    expect(&run(&["trace", "replay", t.path(), "--mode", "check"]), 0);
}

#[test]
fn ulps_sets_the_floating_point_tolerance() {
    use rknpu_driver::trace::Trace;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/traces/fp16-32x128x64.rknputrace"
    );
    let mut t = Trace::from_bytes(&std::fs::read(path).unwrap()).unwrap();
    // One fp32 output one unit in the last place away (a small positive value's low bit).
    repo::first_output(&mut t)[0] ^= 1;
    let f = Temp::new("ulp.trace");
    std::fs::write(&f.0, t.to_bytes()).unwrap();
    let strict = run(&["trace", "replay", f.path()]);
    assert_eq!(strict.status.code(), Some(1));
    // A trace from the emulated kernel compares exactly, byte by byte.
    assert!(
        String::from_utf8_lossy(&strict.stderr).contains("1 byte(s) differ"),
        "{}",
        String::from_utf8_lossy(&strict.stderr)
    );
    // The output is known to be fp32 (from the DPU task that writes it): 1 ULP passes,
    // which bytes alone could not.
    expect(&run(&["trace", "replay", f.path(), "--ulps", "1"]), 0);
    let o = run(&["trace", "replay", f.path(), "--ulps", "0"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn a_recorded_doctor_run_replays_in_model_mode() {
    // The doctor frees buffers and allocates again: the emulated kernel gives the freed
    // addresses to the new buffers, and the trace says when each buffer died.
    let t = Temp::new("doctor.rknputrace");
    let o = Command::new(RKNPU)
        .args(["doctor", "--device", "emu"])
        .env("RKNPU_TRACE", t.path())
        .env_remove("RKNPU_DEVICE")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&["trace", "replay", t.path(), "--mode", "model"]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.ends_with("match\n") && !out.contains("taken to be freed"),
        "{out}"
    );
    let dump = run(&["trace", "dump", t.path()]);
    assert!(String::from_utf8_lossy(&dump.stdout).contains("\nfree buffer "));
}

/// A chunk of the format: type, length, payload.
fn chunk(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
    [&kind[..], &(payload.len() as u64).to_le_bytes(), payload].concat()
}

#[test]
fn a_small_trace_claiming_huge_seeded_contents_fails_at_once() {
    let s = |x: &str| [&(x.len() as u32).to_le_bytes()[..], x.as_bytes()].concat();
    let mut bytes = b"RKNPUTRC".to_vec();
    let head = [
        &2u16.to_le_bytes()[..],
        &s("RK3588"),
        &[0],
        &s("rknpu 0.9.8"),
        &[1],
    ]
    .concat();
    bytes.extend(chunk(b"HEAD", &head));
    let bufc = [
        &0u32.to_le_bytes()[..],
        &[0; 4],
        &4096u64.to_le_bytes(),
        &[0, 16, 0, 0],
    ];
    bytes.extend(chunk(b"BUFC", &bufc.concat()));
    // Fifteen gibibytes of seeded contents in 816 bytes, for a 4 KiB buffer.
    for seed in 1..=15u64 {
        let c = [
            &[0; 12][..],
            &[1],
            &(1u64 << 30).to_le_bytes(),
            &[7; 8],
            &seed.to_le_bytes(),
        ];
        bytes.extend(chunk(b"BUFD", &c.concat()));
    }
    assert_eq!(bytes.len(), 816);
    let t = Temp::new("seeded.rknputrace");
    std::fs::write(&t.0, &bytes).unwrap();
    let started = std::time::Instant::now();
    let o = run(&["trace", "replay", t.path(), "--mode", "check"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("do not fit buffer 0").count(), 15, "{err}");
}
