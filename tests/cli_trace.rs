//! `rknpu trace import | dump | replay` as child processes, on the worked example.

use std::path::PathBuf;
use std::process::{Command, Output};

const RKNPU: &str = env!("CARGO_BIN_EXE_rknpu");

fn fixture(ext: &str) -> String {
    format!(
        "{}/fixtures/regcmd/worked-int8-4x32x32{ext}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn run(args: &[&str]) -> Output {
    Command::new(RKNPU).args(args).output().unwrap()
}

/// A file in the temporary directory, removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str) -> Temp {
        Temp(std::env::temp_dir().join(format!("rknpu-cli-trace-{}-{name}", std::process::id())))
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
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
    assert!(String::from_utf8_lossy(&o.stderr).contains("byte 40"));
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
        &["trace", "replay", "x", "--mode", "hw"],
        &["trace", "import", "--regcmd", "x"],
        &["trace", "frobnicate"],
    ] {
        assert_eq!(run(args).status.code(), Some(2), "{args:?}");
    }
}
