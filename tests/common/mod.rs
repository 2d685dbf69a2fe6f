//! Helpers shared by the integration tests (each test binary uses a part of them).
#![allow(dead_code)]

pub mod llama_cpu;
pub mod lowered;
pub mod reference;

/// Describes where two texts first differ: the 1-based line number and both lines
/// (`None` where one text has ended). Returns `None` when they are equal.
pub fn first_difference(expected: &[u8], actual: &[u8]) -> Option<String> {
    if expected == actual {
        return None;
    }
    let (e, a) = (
        String::from_utf8_lossy(expected),
        String::from_utf8_lossy(actual),
    );
    let line = e
        .lines()
        .zip(a.lines())
        .position(|(x, y)| x != y)
        .unwrap_or(e.lines().count().min(a.lines().count()));
    Some(format!(
        "first difference at line {} (lengths {} vs {} bytes):\n  expected: {:?}\n  actual:   {:?}",
        line + 1,
        expected.len(),
        actual.len(),
        e.lines().nth(line),
        a.lines().nth(line)
    ))
}

/// A small deterministic generator (xorshift64*) for test data.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `lo..=hi`.
    pub fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + ((self.next() >> 11) % (hi - lo + 1) as u64) as i32
    }

    /// A value in [-1, 1], in steps of 1/1000.
    pub fn float(&mut self) -> f32 {
        self.int(-1000, 1000) as f32 / 1000.0
    }
}

/// The lines that differ between two texts of the same layout, line by line: each with
/// its number and the line before it (which names the case in a table of blocks), the
/// expected line marked `-` and the actual `+`; at most `most` of them, then a count.
pub fn line_differences(expected: &str, actual: &str, most: usize) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut out = Vec::new();
    for i in 0..e.len().max(a.len()) {
        let (x, y) = (e.get(i), a.get(i));
        if x != y {
            let before = i.checked_sub(1).and_then(|j| e.get(j)).unwrap_or(&"");
            out.push(format!(
                "line {} (after {before:?}):\n  - {}\n  + {}",
                i + 1,
                x.unwrap_or(&"(no line)"),
                y.unwrap_or(&"(no line)")
            ));
        }
    }
    let more = out.len().saturating_sub(most);
    out.truncate(most);
    if more > 0 {
        out.push(format!("... and {more} more differing line(s)"));
    }
    out.join("\n")
}

/// Compares the text `actual` with the reviewed fixture at `path` (every differing line,
/// up to 20, in the failure), or writes it there under `UPDATE_FIXTURES=1`.
pub fn check_text_fixture(path: &std::path::Path, actual: &str) {
    if std::env::var_os("UPDATE_FIXTURES").is_some() {
        std::fs::create_dir_all(path.parent().expect("a fixture lies in a folder"))
            .expect("create the fixture's folder");
        std::fs::write(path, actual).expect("write fixture");
        return;
    }
    let shown = path
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .display();
    let expected = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{shown}: {e} (UPDATE_FIXTURES=1 creates it)"));
    if expected != actual {
        panic!(
            "{shown} differs from the fixture:\n{}\n(UPDATE_FIXTURES=1 rewrites it on purpose; review the diff)",
            line_differences(&expected, actual, 20)
        );
    }
}

/// Bytes the emulated rocket kernel's completion sentinel adds to every job's DMA
/// counters (docs/device.md, "The completion sentinel"): one 4×64×32 int8 matmul reads
/// 4·64 feature bytes and 32·64 weight bytes and writes 4·32 int32 results.
pub const ROCKET_SENTINEL: (u64, u64, u64) = (4 * 64, 32 * 64, 4 * 32 * 4);

/// Asserts that the cost model's bytes equal what the simulator's DMA engines moved
/// (`d`, the emulated kernel's counters over one run): feature reads, weight reads, DPU
/// reads and writes, engine by engine. `sentinels` is the number of rocket jobs in the
/// run (0 on the vendor kernel): each adds [`ROCKET_SENTINEL`], which the model leaves out.
pub fn assert_dma_is_the_cost(
    what: &str,
    d: &rknpu_driver::sim::DmaCounters,
    cost: &rknpu_driver::kernels::matmul::cost::Cost,
    sentinels: u64,
) {
    let (feature, weight, write) = ROCKET_SENTINEL;
    let want = [
        cost.feature_bytes + sentinels * feature,
        cost.weight_bytes + sentinels * weight,
        cost.dpu_write_bytes + sentinels * write,
        cost.dpu_read_bytes,
    ];
    let got = [d.cna_feature, d.cna_weight, d.dpu_write, d.dpu_rdma()];
    for ((engine, want), got) in ["feature", "weights", "written", "DPU reads"]
        .iter()
        .zip(want)
        .zip(got)
    {
        assert_eq!(got, want, "{what}: {engine}");
    }
}

/// The repository's root: the crate root of the main crate, the parent of `cli/` and
/// `capi/` for theirs (which include this file by path).
pub fn repo_root() -> std::path::PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if manifest.join("regs").is_dir() {
        manifest.to_path_buf()
    } else {
        manifest.parent().unwrap_or(manifest).to_path_buf()
    }
}

/// The captured board programs, found the same way by every capture test: the directory
/// `RKNPU_CAPTURES` names, else `../shared/captures` beside the repository (a development
/// checkout and CI); `None` when absent (a fresh clone). Tests call
/// [`captures_or_skip`], which decides whether absence may skip.
pub fn captures_dir() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("RKNPU_CAPTURES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/captures"));
    dir.is_dir().then_some(dir)
}

/// Whether a missing capture must fail the test rather than skip it: `RKNPU_CAPTURES`
/// names a folder (somebody asked for these captures), or `CI` is set (CI has
/// `../shared` and must check the captures, never pass by skipping).
pub fn captures_required() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    ci || std::env::var_os("RKNPU_CAPTURES").is_some()
}

/// [`captures_dir`] for a test that reads captures: when the set is absent, a failure if
/// [`captures_required`], otherwise `None` after a `SKIPPED:` line on stderr saying
/// that `what` was not done.
pub fn captures_or_skip(what: &str) -> Option<std::path::PathBuf> {
    match captures_dir() {
        Some(dir) => Some(dir),
        None => skip_or_fail(
            "the captures folder (RKNPU_CAPTURES or ../shared/captures)",
            what,
        ),
    }
}

/// One capture (or group of captures) `name` under the set, as [`captures_or_skip`]
/// finds the set: absent, it fails the test where captures are required and skips it
/// otherwise.
pub fn capture_or_skip(name: &str, what: &str) -> Option<std::path::PathBuf> {
    let dir = captures_or_skip(what)?.join(name);
    if dir.exists() {
        Some(dir)
    } else {
        skip_or_fail(&format!("the capture {name}"), what)
    }
}

/// A capture of a set that is present is missing: a failure where captures are required,
/// a `SKIPPED:` line otherwise.
pub fn absent_capture(name: &str) {
    let _ = skip_or_fail(&format!("the capture {name}"), "not checked");
}

fn skip_or_fail(missing: &str, what: &str) -> Option<std::path::PathBuf> {
    assert!(
        !captures_required(),
        "{missing} is absent, but captures are required here (CI or RKNPU_CAPTURES is set): {what} must run"
    );
    eprintln!("SKIPPED: {missing} is absent (a fresh clone): {what}");
    None
}

/// Every `"key": "0x..."` value of a capture's meta.json, in order (the file is flat
/// enough for a search).
pub fn meta_hex(meta: &str, key: &str) -> Vec<u32> {
    let pat = format!("\"{key}\": \"0x");
    meta.match_indices(&pat)
        .filter_map(|(i, _)| {
            let rest = &meta[i + pat.len()..];
            u32::from_str_radix(&rest[..rest.find('"')?], 16).ok()
        })
        .collect()
}

/// Every `"key": N` number of a capture's meta.json, in order.
pub fn meta_numbers(meta: &str, key: &str) -> Vec<u32> {
    let pat = format!("\"{key}\": ");
    meta.match_indices(&pat)
        .filter_map(|(i, _)| {
            let rest = &meta[i + pat.len()..];
            rest[..rest.find(|c: char| !c.is_ascii_digit())?]
                .parse()
                .ok()
        })
        .collect()
}

/// A captured program with buffers: its folder under the captures directory, its task
/// files in order, its buffers at their IOVAs, and the task descriptors' list addresses
/// and body lengths from meta.json.
pub struct CaptureCase {
    /// `source/case`.
    pub name: String,
    /// The task files (`regcmd.bin` or `task-NN.regcmd.bin`), in task order.
    pub tasks: Vec<std::path::PathBuf>,
    /// `buf-<iova>.bin` files, by address.
    pub buffers: Vec<(u32, std::path::PathBuf)>,
    /// The descriptors' `regcmd_addr`, in task order.
    pub regcmd_addrs: Vec<u32>,
    /// The descriptors' `regcfg_amount`, in task order.
    pub regcfg_amounts: Vec<u32>,
}

/// Every case below `dir` that has task files and at least one buffer at a known IOVA,
/// sorted by name.
pub fn capture_cases(dir: &std::path::Path) -> Vec<CaptureCase> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let (mut buffers, mut tasks) = (Vec::new(), Vec::new());
        for p in std::fs::read_dir(&d).unwrap().flatten().map(|e| e.path()) {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                stack.push(p);
            } else if name.ends_with("regcmd.bin") {
                tasks.push(p);
            } else if let Some(hex) = name
                .strip_prefix("buf-")
                .and_then(|n| n.strip_suffix(".bin"))
                && let Ok(addr) = u32::from_str_radix(hex, 16)
            {
                buffers.push((addr, p));
            }
        }
        if tasks.is_empty() || buffers.is_empty() {
            continue;
        }
        tasks.sort();
        buffers.sort();
        let meta = std::fs::read_to_string(d.join("meta.json")).unwrap_or_default();
        out.push(CaptureCase {
            name: d.strip_prefix(dir).unwrap().display().to_string(),
            tasks,
            buffers,
            regcmd_addrs: meta_hex(&meta, "regcmd_addr"),
            regcfg_amounts: meta_numbers(&meta, "regcfg_amount"),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The first output chunk's bytes, for tampering.
pub fn first_output(t: &mut rknpu_driver::trace::Trace) -> &mut Vec<u8> {
    use rknpu_driver::trace::{Chunk, Contents};
    t.chunks
        .iter_mut()
        .find_map(|c| match c {
            Chunk::Output {
                contents: Contents::Bytes(b),
                ..
            } => Some(b),
            _ => None,
        })
        .unwrap()
}
