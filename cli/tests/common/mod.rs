//! What several CLI test files share (each file uses some of it).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `rknpu` binary under test.
pub const RKNPU: &str = env!("CARGO_BIN_EXE_rknpu");

/// Runs `rknpu ARGS` with no `RKNPU_DEVICE` set (so "auto" finds no board here and uses
/// the emulated kernel).
pub fn run(args: &[&str]) -> Output {
    Command::new(RKNPU)
        .args(args)
        .env_remove("RKNPU_DEVICE")
        .output()
        .unwrap_or_else(|e| panic!("run {RKNPU}: {e}"))
}

/// Runs `rknpu ARGS` as [`run`], asserting exit 0 (the message shows both streams).
pub fn run_ok(args: &[&str]) -> Output {
    let o = run(args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Asserts that `o` exited with `code`, showing both streams when it did not, and
/// returns its standard output.
pub fn expect(o: &Output, code: i32) -> String {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    stdout_text(o)
}

/// The standard output of `o` as text (invalid UTF-8 replaced).
pub fn stdout_text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `rknpu CMD ARGS` as [`run_ok`] and returns its standard output.
pub fn stdout_ok(cmd: &str, args: &[&str]) -> String {
    let mut all = vec![cmd];
    all.extend_from_slice(args);
    stdout_text(&run_ok(&all))
}

/// A file in the temporary directory, named after this test process and `name`,
/// removed when dropped.
pub struct Temp(pub PathBuf);

impl Temp {
    /// The path `rknpu-cli-<pid>-<name>` in the temporary directory (nothing is created).
    pub fn new(name: &str) -> Temp {
        Temp(std::env::temp_dir().join(format!("rknpu-cli-{}-{name}", std::process::id())))
    }

    /// The path as the command line takes it.
    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
