//! Generates the rknpu-driver register model from `regs/*.toml`.
//!
//! Run from the workspace as `cargo regs` (writes `src/regs/generated/`) or
//! `cargo regs --check` (exits 1 and names the files when the committed output differs).
//! The schema is described in `regs/README.md`.

#![forbid(unsafe_code)]

mod family;
mod model;
mod render;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = match args.as_slice() {
        [] => false,
        [a] if a == "--check" => true,
        _ => {
            eprintln!("usage: cargo regs [--check]");
            return ExitCode::from(2);
        }
    };
    let root = workspace_root();
    match run(&root, check) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cargo regs: {e}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root exists")
}

/// Generates every file; writes them, or compares them when `check` is set.
/// Returns whether the tree is (now) up to date.
fn run(root: &Path, check: bool) -> Result<bool, String> {
    let model = model::load(&root.join("regs"))?;
    let files = render::render(&model);
    let out_dir = root.join("src/regs/generated");
    let mut stale = Vec::new();
    let mut expected_names = Vec::new();
    for (name, text) in &files {
        let text = rustfmt(text).map_err(|e| format!("rustfmt on {name}: {e}"))?;
        expected_names.push(name.clone());
        let path = out_dir.join(name);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() != Some(text.as_str()) {
            if check {
                stale.push(name.clone());
            } else {
                std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
                std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
                println!("wrote src/regs/generated/{name}");
            }
        }
    }
    // Files in the output folder that the generator no longer writes.
    if let Ok(entries) = std::fs::read_dir(&out_dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !expected_names.contains(&name) {
                if check {
                    stale.push(format!("{name} (not generated)"));
                } else {
                    std::fs::remove_file(entry.path()).map_err(|e| e.to_string())?;
                    println!("removed src/regs/generated/{name}");
                }
            }
        }
    }
    if check && !stale.is_empty() {
        eprintln!("src/regs/generated/ is stale; run `cargo regs`. Differing files:");
        for s in &stale {
            eprintln!("  {s}");
        }
        return Ok(false);
    }
    if check {
        println!(
            "src/regs/generated/ is up to date ({} registers, {} fields)",
            model.register_count(),
            model.field_count()
        );
    }
    Ok(true)
}

/// Formats generated code with the toolchain's rustfmt so `cargo fmt --check` agrees.
fn rustfmt(text: &str) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run rustfmt: {e}"))?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(text.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    String::from_utf8(out.stdout).map_err(|e| e.to_string())
}
