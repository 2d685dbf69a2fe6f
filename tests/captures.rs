//! The register programs captured on RK3588 boards (`../shared/captures/`, present beside
//! a development checkout, absent from a fresh clone): every one must decode with no
//! unknown entry, each task file must be one task with a recognised tail, and chained
//! tails must agree with the task that follows.

mod common;
use common::captures_or_skip;
use rknpu_driver::regcmd::{self, pc_data_amount};
use std::path::{Path, PathBuf};

/// Capture cases: folders holding `regcmd.bin` or `task-NN.regcmd.bin`, files sorted.
fn cases(dir: &Path) -> Vec<(PathBuf, Vec<PathBuf>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .ends_with("regcmd.bin")
            {
                files.push(p);
            }
        }
        if !files.is_empty() {
            files.sort();
            out.push((d, files));
        }
    }
    out.sort();
    out
}

#[test]
fn captures_decode_with_no_unknown_entry_and_consistent_chains() {
    let Some(dir) = captures_or_skip("nothing to check") else {
        return;
    };
    let cases = cases(&dir);
    assert!(
        !cases.is_empty(),
        "no capture found under {}",
        dir.display()
    );
    let mut problems = Vec::new();
    let (mut entries, mut chained) = (0, 0);
    for (case, files) in &cases {
        let name = case.strip_prefix(&dir).unwrap().display().to_string();
        let decoded: Vec<_> = files
            .iter()
            .map(|f| regcmd::decode_bytes(&std::fs::read(f).unwrap()).unwrap())
            .collect();
        for (f, d) in files.iter().zip(&decoded) {
            let file = format!("{name}/{}", f.file_name().unwrap().to_string_lossy());
            entries += d.entries.len();
            if d.unknown() != 0 {
                problems.push(format!("{file}: {} unknown entries", d.unknown()));
            }
            if d.tasks.len() != 1 || d.tasks[0].enable.is_none() {
                problems.push(format!(
                    "{file}: {} tasks, first terminated: {:?}",
                    d.tasks.len(),
                    d.tasks[0].enable
                ));
            }
        }
        for (i, pair) in decoded.windows(2).enumerate() {
            let (this, next) = (&pair[0].tasks[0], &pair[1].tasks[0]);
            if this.next_address.is_some() {
                chained += 1;
                let want = u32::from(pc_data_amount(next.body_len).unwrap());
                if this.next_amount != Some(want) {
                    problems.push(format!(
                        "{name} task {i}: chain amount {:?}, next body {} needs {want}",
                        this.next_amount, next.body_len
                    ));
                }
            }
        }
    }
    eprintln!(
        "{} captures, {entries} entries, {chained} chain links checked",
        cases.len()
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
