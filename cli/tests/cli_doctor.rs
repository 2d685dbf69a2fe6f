//! `rknpu doctor` as a child process: the whole ladder on each emulated kernel, the
//! bundle, a device that does not open, and usage errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RKNPU: &str = env!("CARGO_BIN_EXE_rknpu");

const RUNGS: [&str; 10] = [
    "probe",
    "buffers",
    "worked-example",
    "matmul-int8",
    "matmul-int4",
    "matmul-fp16",
    "chained",
    "grid-1-core",
    "grid-2-cores",
    "grid-3-cores",
];

fn doctor(args: &[&str]) -> Output {
    Command::new(RKNPU)
        .arg("doctor")
        .args(args)
        .env_remove("RKNPU_DEVICE")
        .env_remove("RKNPU_TRACE")
        .output()
        .unwrap()
}

/// `(status word, rung name)` of each rung line, checking each has a time in ms.
fn rung_lines(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let status = *w.first()?;
            if !["ok", "skip", "FAIL"].contains(&status) {
                return None;
            }
            assert!(
                w.len() >= 4 && w[2].parse::<f64>().is_ok() && w[3] == "ms",
                "no time in {l:?}"
            );
            Some((status.to_string(), w[1].to_string()))
        })
        .collect()
}

fn all_pass(device: &str, skipped: &[&str]) {
    let o = doctor(&["--device", device]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{device}:\n{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines = rung_lines(&out);
    let names: Vec<&str> = lines.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, RUNGS, "{device}:\n{out}");
    for (status, name) in &lines {
        let want = if skipped.contains(&name.as_str()) {
            "skip"
        } else {
            "ok"
        };
        assert_eq!(status, want, "{device} {name}:\n{out}");
    }
    assert!(out.contains("(emulated)"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("all 10 rungs passed")),
        "{out}"
    );
}

#[test]
fn doctor_passes_on_emulated_vendor_0_9_8() {
    all_pass("emu", &[]);
}

#[test]
fn doctor_passes_on_emulated_vendor_0_9_6() {
    all_pass("emu:vendor-0.9.6", &[]);
}

#[test]
fn doctor_passes_on_emulated_rocket_skipping_core_splits() {
    all_pass("emu:rocket", &["grid-2-cores", "grid-3-cores"]);
}

fn bundle_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("doctor-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn non_empty(path: &Path) {
    let len = std::fs::metadata(path).map(|m| m.len());
    assert!(
        len.as_ref().is_ok_and(|&l| l > 0),
        "{}: {len:?}",
        path.display()
    );
}

#[test]
fn doctor_bundle_holds_the_device_a_trace_per_rung_and_the_report() {
    let dir = bundle_dir("bundle");
    let o = doctor(&["--device", "emu", "--bundle", dir.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains(&format!("bundle: {}", dir.display())), "{out}");
    non_empty(&dir.join("device.txt"));
    non_empty(&dir.join("report.txt"));
    for (i, rung) in RUNGS.iter().enumerate().skip(1) {
        non_empty(&dir.join(format!("{i:02}-{rung}.rknputrace")));
    }
    let device = std::fs::read_to_string(dir.join("device.txt")).unwrap();
    assert!(device.contains("driver: rknpu 0.9.8"), "{device}");
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(report.contains("ok    chained"), "{report}");
    assert!(report.contains("all 10 rungs passed"), "{report}");
    // Each trace is a trace the `trace dump` command reads.
    let dump = Command::new(RKNPU)
        .args(["trace", "dump"])
        .arg(dir.join("02-worked-example.rknputrace"))
        .output()
        .unwrap();
    assert_eq!(dump.status.code(), Some(0), "{dump:?}");
}

#[test]
fn doctor_stops_at_the_probe_when_the_node_does_not_open() {
    let dir = bundle_dir("no-node");
    let o = doctor(&[
        "--device",
        "/dev/rknpu-doctor-no-such-node",
        "--bundle",
        dir.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(
        rung_lines(&out),
        [("FAIL".to_string(), "probe".to_string())],
        "{out}"
    );
    assert!(
        out.contains("cannot open /dev/rknpu-doctor-no-such-node"),
        "{out}"
    );
    assert!(out.contains("hint:"), "{out}");
    assert!(out.contains("stopped at probe"), "{out}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("doctor: probe failed"));
    non_empty(&dir.join("device.txt"));
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(report.contains("FAIL  probe"), "{report}");
}

#[test]
fn doctor_usage_errors_exit_2() {
    for args in [
        &["--bogus"][..],
        &["--timeout", "0"],
        &["--timeout", "soon"],
        &["--bundle"],
        &["--device"],
    ] {
        let o = doctor(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("doctor"),
            "{args:?}"
        );
    }
}
