//! Integration tests of the `rknpu` binary's command line: `rknpu decode FILE [--json]
//! [--addr ADDR] [--strict]` and `rknpu help`, run as a child process.
//!
//! Inputs are the golden fixture, hand-built regcmd words and pseudo-random bytes written
//! to uniquely named files under the system temporary directory (removed afterwards).
//! Every captured regcmd file (`common::captures_or_skip`: `RKNPU_CAPTURES` or
//! `../shared/captures`; required in CI) must decode without an unknown entry.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test.
const RKNPU: &str = env!("CARGO_BIN_EXE_rknpu");

/// `CNA.CBUF_CON0` write.
const CNA_CBUF_CON0: u64 = 0x0201_0000_00B1_1040;
/// `DPU.S_POINTER` write.
const DPU_S_POINTER: u64 = 0x1001_0000_000E_4004;
/// The `0x0041` entry before op-enable.
const MARKER: u64 = 0x0041_0000_0000_0000;
/// Op-enable of CNA, CORE and DPU.
const OP_ENABLE: u64 = 0x0081_0000_000D_0008;
/// Target `0x0401` is no block.
const UNKNOWN_TARGET: u64 = 0x0401_0000_1234_0010;
/// Target `0x0201` (CNA) with offset `0x1018`, which is no CNA register.
const UNKNOWN_CNA_REGISTER: u64 = 0x0201_0000_0055_1018;

/// The golden summary of the worked example.
const GOLDEN_SUMMARY: &str = "summary: 112 entries, 0 unknown";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/regcmd")
        .join(name)
}

fn golden_bin() -> PathBuf {
    fixture("worked-int8-4x32x32.bin")
}

/// A path under the temporary directory, unique to this process, test and label.
fn temp_path(test: &str, label: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "rknpu-cli-{}-{test}-{label}.bin",
        std::process::id()
    ))
}

/// A temporary input file, removed when dropped (also when the test panics).
struct TempFile(PathBuf);

impl TempFile {
    fn new(test: &str, label: &str, bytes: &[u8]) -> TempFile {
        let path = temp_path(test, label);
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        TempFile(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn words_to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn run<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(RKNPU)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {RKNPU}: {e}"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn last_line(s: &str) -> Option<&str> {
    s.lines().last()
}

/// `(entries, unknown)` of a line `summary: <N> entries, <U> unknown`, if it is one.
fn parse_summary(line: &str) -> Option<(usize, usize)> {
    let rest = line.strip_prefix("summary: ")?;
    let (n, rest) = rest.split_once(" entries, ")?;
    let u = rest.strip_suffix(" unknown")?;
    Some((n.parse().ok()?, u.parse().ok()?))
}

/// Asserts the exit code, showing both streams when it differs.
fn assert_code(o: &Output, want: i32, what: &str) {
    assert_eq!(
        o.status.code(),
        Some(want),
        "{what}: status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        stderr(o)
    );
}

/// Asserts a usage error: exit 2 with a message on stderr and no decoded output.
fn assert_usage_error(args: &[&str]) {
    let o = run(args);
    assert_code(&o, 2, &format!("rknpu {args:?}"));
    assert!(
        !stderr(&o).trim().is_empty(),
        "rknpu {args:?}: no message on stderr"
    );
    assert!(
        !stdout(&o).contains("summary:"),
        "rknpu {args:?}: decoded despite the usage error:\n{}",
        stdout(&o)
    );
}

/// A task with one unknown-target entry and one unknown-register entry among known ones.
fn words_with_two_unknowns() -> Vec<u64> {
    vec![
        CNA_CBUF_CON0,
        UNKNOWN_TARGET,
        UNKNOWN_CNA_REGISTER,
        DPU_S_POINTER,
        MARKER,
        OP_ENABLE,
    ]
}

/// Xorshift64: a fixed-seed pseudo-random byte source.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        assert!(len.is_multiple_of(8));
        (0..len / 8)
            .flat_map(|_| self.next().to_le_bytes())
            .collect()
    }
}

#[test]
fn decode_golden_fixture_with_addr_prints_golden_text() {
    let o = run([
        OsStr::new("decode"),
        golden_bin().as_os_str(),
        OsStr::new("--addr"),
        OsStr::new("0x100000"),
    ]);
    assert_code(&o, 0, "decode golden --addr 0x100000");
    let expected = std::fs::read(fixture("worked-int8-4x32x32.txt")).expect("read golden text");
    if let Some(diff) = common::first_difference(&expected, &o.stdout) {
        panic!("stdout differs from the golden text: {diff}");
    }
}

#[test]
fn decode_golden_fixture_text_ends_with_summary_line() {
    let o = run([OsStr::new("decode"), golden_bin().as_os_str()]);
    assert_code(&o, 0, "decode golden");
    let out = stdout(&o);
    assert!(out.ends_with('\n'), "stdout does not end with a newline");
    assert_eq!(last_line(&out), Some(GOLDEN_SUMMARY));
    let headers: Vec<&str> = out.lines().filter(|l| l.starts_with("# task ")).collect();
    assert_eq!(headers.len(), 1, "one task expected: {headers:?}");
    assert!(headers[0].starts_with("# task 0:"), "{headers:?}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("summary:")).count(),
        1,
        "exactly one summary line expected"
    );
}

/// Parses standard output as exactly one JSON document (serde_json refuses trailing
/// text) and returns it with its summary's `(entries, unknown)`.
fn json_document(out: &str, what: &str) -> (serde_json::Value, (u64, u64)) {
    let doc: serde_json::Value = serde_json::from_str(out)
        .unwrap_or_else(|e| panic!("{what}: stdout is not one JSON document: {e}\n{out}"));
    let count = |key: &str| {
        doc["summary"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("{what}: no summary.{key} in {}", doc["summary"]))
    };
    let summary = (count("entries"), count("unknown"));
    (doc, summary)
}

#[test]
fn decode_golden_fixture_json_prints_one_document_holding_the_summary() {
    let o = run([
        OsStr::new("decode"),
        golden_bin().as_os_str(),
        OsStr::new("--json"),
    ]);
    assert_code(&o, 0, "decode golden --json");
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "one line expected:\n{out}");
    assert!(out.ends_with('\n'), "stdout does not end with a newline");
    assert!(
        !out.contains("summary: "),
        "a text summary in JSON mode:\n{out}"
    );
    let (doc, summary) = json_document(&out, "decode golden --json");
    assert_eq!(summary, (112, 0));
    let entries = doc["entries"].as_array().expect("an entries array");
    assert_eq!(entries.len(), 112);
    assert_eq!(doc["tasks"].as_array().map(Vec::len), Some(1), "one task");
    // The first entry is the CNA register write at the start of the worked example's
    // list, with the keys docs/cli.md names.
    for key in ["index", "word", "target", "offset", "value", "kind", "task"] {
        assert!(
            entries[0].get(key).is_some(),
            "entry 0 lacks {key}: {}",
            entries[0]
        );
    }
}

#[test]
fn decode_strict_on_golden_fixture_exits_0() {
    let o = run([
        OsStr::new("decode"),
        golden_bin().as_os_str(),
        OsStr::new("--strict"),
    ]);
    assert_code(&o, 0, "decode golden --strict");
    assert_eq!(last_line(&stdout(&o)), Some(GOLDEN_SUMMARY));
}

#[test]
fn decode_thirteen_byte_file_exits_1_naming_offset_8() {
    let f = TempFile::new("decode_thirteen_byte_file", "input", &[0x5a; 13]);
    let o = run([OsStr::new("decode"), f.path().as_os_str()]);
    assert_code(&o, 1, "decode 13-byte file");
    let err = stderr(&o);
    assert!(
        err.contains("byte offset 8"),
        "stderr does not name byte offset 8: {err:?}"
    );
    assert!(
        !stdout(&o).contains("summary:"),
        "a bad-length file was summarised:\n{}",
        stdout(&o)
    );
}

#[test]
fn decode_empty_file_exits_1() {
    let f = TempFile::new("decode_empty_file", "input", &[]);
    let o = run([OsStr::new("decode"), f.path().as_os_str()]);
    assert_code(&o, 1, "decode empty file");
    assert!(!stderr(&o).trim().is_empty(), "no message on stderr");
    assert!(
        !stdout(&o).contains("summary:"),
        "an empty file was summarised:\n{}",
        stdout(&o)
    );
}

#[test]
fn decode_nonexistent_file_exits_1() {
    let path = temp_path("decode_nonexistent_file", "missing");
    let _ = std::fs::remove_file(&path);
    assert!(!path.exists(), "{} exists", path.display());
    let o = run([OsStr::new("decode"), path.as_os_str()]);
    assert_code(&o, 1, "decode nonexistent file");
    assert!(!stderr(&o).trim().is_empty(), "no message on stderr");
}

#[test]
fn decode_known_hand_built_words_reports_0_unknown() {
    // The control for the unknown tests below: the same task without the unknown entries.
    let words = [CNA_CBUF_CON0, DPU_S_POINTER, MARKER, OP_ENABLE];
    let f = TempFile::new(
        "decode_known_hand_built_words",
        "input",
        &words_to_bytes(&words),
    );
    let o = run([
        OsStr::new("decode"),
        f.path().as_os_str(),
        OsStr::new("--strict"),
    ]);
    assert_code(&o, 0, "decode known words --strict");
    assert_eq!(
        last_line(&stdout(&o)),
        Some("summary: 4 entries, 0 unknown")
    );
}

#[test]
fn decode_unknown_target_and_register_exits_0_with_2_unknown() {
    let words = words_with_two_unknowns();
    let f = TempFile::new(
        "decode_unknown_target_and_register",
        "input",
        &words_to_bytes(&words),
    );
    let o = run([OsStr::new("decode"), f.path().as_os_str()]);
    assert_code(&o, 0, "decode words with unknowns");
    assert_eq!(
        last_line(&stdout(&o)),
        Some("summary: 6 entries, 2 unknown")
    );
}

#[test]
fn decode_unknown_entries_json_exits_0_with_2_unknown() {
    let words = words_with_two_unknowns();
    let f = TempFile::new(
        "decode_unknown_entries_json",
        "input",
        &words_to_bytes(&words),
    );
    let o = run([
        OsStr::new("decode"),
        f.path().as_os_str(),
        OsStr::new("--json"),
    ]);
    assert_code(&o, 0, "decode words with unknowns --json");
    let (doc, summary) = json_document(&stdout(&o), "decode unknowns --json");
    assert_eq!(summary, (6, 2));
    let kinds: Vec<&str> = doc["entries"]
        .as_array()
        .expect("an entries array")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    // The words as built: the two unknowns between known writes, then the tail.
    assert_eq!(
        kinds,
        [
            "write",
            "unknown_target",
            "unknown_register",
            "write",
            "marker",
            "op_enable"
        ]
    );
}

#[test]
fn decode_strict_with_unknowns_exits_1() {
    let words = words_with_two_unknowns();
    let f = TempFile::new(
        "decode_strict_with_unknowns",
        "input",
        &words_to_bytes(&words),
    );
    for extra in [&[][..], &["--json"][..]] {
        let mut args = vec![
            OsStr::new("decode"),
            f.path().as_os_str(),
            OsStr::new("--strict"),
        ];
        args.extend(extra.iter().map(OsStr::new));
        let o = run(&args);
        assert_code(&o, 1, &format!("decode unknowns --strict {extra:?}"));
        assert!(!stderr(&o).trim().is_empty(), "no message on stderr");
    }
}

#[test]
fn decode_random_garbage_exits_0_or_1_without_crash() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for (k, len) in [8usize, 1024, 4096, 4096, 8192].into_iter().enumerate() {
        let bytes = rng.bytes(len);
        let f = TempFile::new("decode_random_garbage", &format!("{k}"), &bytes);
        let modes: [&[&str]; 3] = [&[], &["--addr", "0x100000"], &["--json"]];
        for mode in modes {
            let mut args = vec![OsStr::new("decode"), f.path().as_os_str()];
            args.extend(mode.iter().map(OsStr::new));
            let o = run(&args);
            let what = format!("garbage #{k} ({len} bytes) {mode:?}");
            match o.status.code() {
                Some(0) => {
                    let out = stdout(&o);
                    let (n, u) = if mode == ["--json"] {
                        let (_, (n, u)) = json_document(&out, &what);
                        (n as usize, u as usize)
                    } else {
                        let last = last_line(&out).unwrap_or("");
                        parse_summary(last)
                            .unwrap_or_else(|| panic!("{what}: last line is no summary: {last:?}"))
                    };
                    assert_eq!(n, len / 8, "{what}: entry count");
                    assert!(u <= n, "{what}: {u} unknown of {n}");
                }
                Some(1) => {}
                other => panic!(
                    "{what}: crashed or bad exit ({other:?}, {:?})\nstderr:\n{}",
                    o.status,
                    stderr(&o)
                ),
            }
        }
    }
}

#[test]
fn cli_no_arguments_exits_2() {
    assert_usage_error(&[]);
}

#[test]
fn cli_unknown_command_exits_2() {
    assert_usage_error(&["frobnicate"]);
}

#[test]
fn decode_missing_file_argument_exits_2() {
    assert_usage_error(&["decode"]);
}

#[test]
fn decode_unknown_option_exits_2() {
    // An existing FILE, so that only the option can make this fail.
    let file = golden_bin();
    assert_usage_error(&["decode", file.to_str().expect("UTF-8 path"), "--bogus"]);
}

#[test]
fn decode_bad_addr_exits_2() {
    let file = golden_bin();
    assert_usage_error(&["decode", file.to_str().expect("UTF-8 path"), "--addr", "zz"]);
}

#[test]
fn help_command_exits_0() {
    let o = run(["help"]);
    assert_code(&o, 0, "rknpu help");
    assert!(
        stdout(&o).contains("decode"),
        "help does not describe decode:\n{}",
        stdout(&o)
    );
}

/// Every `*.bin` file under `dir` (recursively) whose name contains `regcmd`.
fn regcmd_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            regcmd_files(&path, out);
        } else if path.extension() == Some(OsStr::new("bin"))
            && path
                .file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|n| n.contains("regcmd"))
        {
            out.push(path);
        }
    }
}

#[test]
fn decode_shared_captures_exit_0_with_0_unknown() {
    let Some(dir) = common::captures_or_skip("no capture was decoded") else {
        return;
    };
    let mut files = Vec::new();
    regcmd_files(&dir, &mut files);
    files.sort();
    assert!(
        !files.is_empty(),
        "{} exists but holds no *regcmd*.bin file",
        dir.display()
    );
    let mut failures = Vec::new();
    for file in &files {
        let o = run([OsStr::new("decode"), file.as_os_str()]);
        let out = String::from_utf8_lossy(&o.stdout);
        let last = last_line(&out).unwrap_or("");
        let ok =
            o.status.code() == Some(0) && parse_summary(last).is_some_and(|(n, u)| n > 0 && u == 0);
        if !ok {
            failures.push(format!(
                "{}: status {:?}, last line {last:?}, stderr {:?}",
                file.display(),
                o.status,
                stderr(&o).trim()
            ));
        }
    }
    eprintln!("checked {} capture files", files.len());
    assert!(
        failures.is_empty(),
        "{} of {} capture files failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
