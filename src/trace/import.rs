//! Building traces from what other tools leave behind: raw pieces (the inputs of
//! `rknpu sim run`) and the capture layout of board recordings (a folder of regcmd
//! files, buffers named by address, and a `meta.json`).

use super::record::relocations;
use super::{Chunk, Contents, Header, Trace};
use crate::regcmd::{self, BlockMask, RegCmd, TAIL_ENTRIES};
use crate::submit::{BufferTask, TaskDesc, irq};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Why a folder could not be imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError {
    /// The file or folder at fault.
    pub path: PathBuf,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.what)
    }
}

impl std::error::Error for ImportError {}

/// A buffer being assembled: id, address, bytes.
struct Placed {
    id: u32,
    addr: u32,
    bytes: Vec<u8>,
}

/// Chunks for `bufs` (creation and contents) and the relocations of the words in
/// `regcmd_ids`.
fn buffer_chunks(bufs: &[Placed], regcmd_ids: &[u32]) -> Vec<Chunk> {
    let placed: Vec<_> = bufs
        .iter()
        .map(|b| (b.id, b.addr, b.bytes.len() as u64))
        .collect();
    let mut chunks = Vec::new();
    for b in bufs {
        chunks.push(Chunk::Buffer {
            id: b.id,
            flags: 0,
            size: b.bytes.len() as u64,
            dma_addr: b.addr,
        });
    }
    for b in bufs {
        chunks.push(Chunk::Data {
            id: b.id,
            offset: 0,
            contents: Contents::Bytes(b.bytes.clone()),
        });
        if regcmd_ids.contains(&b.id) {
            chunks.extend(relocations(b.id, &b.bytes, &placed));
        }
    }
    chunks
}

/// A trace of one submission built from the inputs `rknpu sim run` takes: the program at
/// `regcmd_addr` with its first task's body length (the PC follows its chain), buffers
/// at addresses, and the contents expected after the run (`expect`, each inside a loaded
/// buffer or a buffer of its own), which replay compares.
pub fn import_raw(
    regcmd: &[u8],
    regcmd_addr: u32,
    task_words: u32,
    loads: &[(u32, Vec<u8>)],
    expect: &[(u32, Vec<u8>)],
) -> Trace {
    let mut bufs: Vec<Placed> = std::iter::once(&(regcmd_addr, regcmd.to_vec()))
        .chain(loads)
        .enumerate()
        .map(|(i, (addr, bytes))| Placed {
            id: i as u32,
            addr: *addr,
            bytes: bytes.clone(),
        })
        .collect();
    let mut outputs = Vec::new();
    for (addr, bytes) in expect {
        let owner = bufs.iter().find(|b| {
            *addr >= b.addr
                && (*addr as u64 + bytes.len() as u64) <= b.addr as u64 + b.bytes.len() as u64
        });
        let (id, offset) = match owner {
            Some(b) => (b.id, (*addr - b.addr) as u64),
            None => {
                let id = bufs.len() as u32;
                bufs.push(Placed {
                    id,
                    addr: *addr,
                    bytes: vec![0; bytes.len()],
                });
                (id, 0)
            }
        };
        outputs.push(Chunk::Output {
            id,
            submit: 1,
            offset,
            contents: Contents::Bytes(bytes.clone()),
        });
    }
    let mut chunks = buffer_chunks(&bufs, &[0]);
    // Buffers that exist only to receive an output start zeroed: no contents chunk.
    let fresh: Vec<u32> = bufs[1 + loads.len()..].iter().map(|b| b.id).collect();
    chunks.retain(|c| !matches!(c, Chunk::Data { id, .. } if fresh.contains(id)));
    let words = regcmd::words_from_le_bytes(&regcmd[..regcmd.len() / 8 * 8]).unwrap_or_default();
    let int_mask = int_mask_for(&words, 0, task_words as usize);
    chunks.push(Chunk::Submit {
        id: 1,
        flags: 0x5,
        core_mask: 1,
        timeout_ms: 500,
        ranges: vec![(0, 1)],
        tasks: vec![BufferTask {
            buffer: 0,
            task: TaskDesc {
                offset: 0,
                regcfg_amount: task_words,
                int_mask,
                enable: 0,
            },
        }],
    });
    chunks.extend(outputs);
    Trace {
        header: Header::new("RK3588", 0, "imported", false),
        chunks,
    }
}

/// The completion mask of the task at `start` of `body` entries: the PPU pair when its
/// op-enable starts the PPU, else the DPU pair.
fn int_mask_for(words: &[RegCmd], start: usize, body: usize) -> u32 {
    let end = (start + body + TAIL_ENTRIES).min(words.len());
    let enable = words
        .get(start..end)
        .map(regcmd::decode)
        .and_then(|d| d.tasks.first().and_then(|t| t.enable));
    match enable {
        Some(m) if m.0 & BlockMask::PPU.0 != 0 => irq::PPU,
        _ => irq::DPU,
    }
}

/// The buffer id of a task list not yet given a buffer.
const LOOSE: u32 = u32::MAX;

/// One task file of a capture.
struct TaskFile {
    words: Vec<u8>,
    addr: Option<u32>,
    amount: Option<u32>,
    int_mask: Option<u32>,
    enable: Option<u32>,
}

/// Builds a trace from a capture folder: `regcmd.bin` or `task-NN.regcmd.bin` (each
/// `regcfg_amount + 4` entries), `buf-XXXXXXXX.bin` (a buffer at that address), and
/// `meta.json` (task descriptors with `regcmd_addr`, `regcfg_amount`, `int_mask`,
/// `enable_mask`; `submit.core_mask`; the runtime). Task lists that lie inside a
/// captured buffer point into it; the others are gathered into a regcmd buffer of their
/// own at their recorded addresses (chained tasks follow their chain when no address is
/// recorded). Each chain is one submission, as the PC stops at a tail that names no next
/// task. Captures do not say whether buffers were saved before or after the run,
/// so the trace records them as inputs and no outputs.
pub fn import_capture(dir: &Path) -> Result<Trace, ImportError> {
    let err = |path: &Path, what: String| ImportError {
        path: path.to_path_buf(),
        what,
    };
    let listing = std::fs::read_dir(dir).map_err(|e| err(dir, e.to_string()))?;
    let mut names: Vec<String> = listing
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let read = |name: &str| {
        let p = dir.join(name);
        std::fs::read(&p).map_err(|e| err(&p, e.to_string()))
    };
    let meta = match names.iter().any(|n| n == "meta.json") {
        true => {
            let text = String::from_utf8(read("meta.json")?)
                .map_err(|_| err(&dir.join("meta.json"), "not UTF-8".into()))?;
            Json::parse(&text).map_err(|e| err(&dir.join("meta.json"), e))?
        }
        false => Json::Null,
    };
    let descriptors = meta.get("task_descriptors").items();
    let mut files: Vec<TaskFile> = Vec::new();
    let task_names: Vec<&String> = names
        .iter()
        .filter(|n| *n == "regcmd.bin" || (n.starts_with("task-") && n.ends_with(".regcmd.bin")))
        .collect();
    if task_names.is_empty() {
        return Err(err(dir, "no regcmd.bin or task-NN.regcmd.bin".into()));
    }
    for (i, name) in task_names.iter().enumerate() {
        let words = read(name)?;
        if words.len() % 8 != 0 || words.len() < TAIL_ENTRIES * 8 {
            return Err(err(
                &dir.join(name),
                format!("{} bytes: not a task list of 8-byte entries", words.len()),
            ));
        }
        let d = descriptors.get(i).unwrap_or(&Json::Null);
        let field = |key: &str| -> Result<Option<u32>, ImportError> {
            d.get(key)
                .number()
                .map(|v| {
                    u32::try_from(v).map_err(|_| {
                        err(
                            &dir.join("meta.json"),
                            format!("task descriptor {i}: {key} {v:#x} does not fit 32 bits"),
                        )
                    })
                })
                .transpose()
        };
        files.push(TaskFile {
            words,
            addr: field("regcmd_addr")?,
            amount: field("regcfg_amount")?,
            int_mask: field("int_mask")?,
            enable: field("enable_mask")?,
        });
    }
    // Buffers named by address.
    let mut bufs: Vec<Placed> = Vec::new();
    let mut notes = Vec::new();
    for name in &names {
        let Some(stem) = name
            .strip_prefix("buf-")
            .and_then(|s| s.strip_suffix(".bin"))
        else {
            continue;
        };
        match u32::from_str_radix(stem, 16) {
            Ok(addr) if stem.len() == 8 => bufs.push(Placed {
                id: bufs.len() as u32,
                addr,
                bytes: read(name)?,
            }),
            _ => notes.push(format!("{name}: its address is not known; not placed")),
        }
    }
    // Where each task list lives: inside a captured buffer, or at its own address.
    let mut loose: Vec<(u32, &[u8])> = Vec::new();
    let mut tasks = Vec::new();
    // Whether each task's tail chains to another task.
    let mut chained = Vec::new();
    let mut next_addr: Option<u32> = None;
    let mut prev_end = 0x1000_0000u32;
    for (i, f) in files.iter().enumerate() {
        let words = regcmd::words_from_le_bytes(&f.words).unwrap_or_default();
        let amount = f.amount.unwrap_or((words.len() - TAIL_ENTRIES) as u32);
        let addr = f.addr.or(next_addr).unwrap_or(
            prev_end
                .checked_next_multiple_of(64)
                .unwrap_or(prev_end & !63),
        );
        let d = regcmd::decode(&words);
        next_addr = d
            .tasks
            .first()
            .and_then(|t| t.next_address)
            .map(|a| a & !0xf);
        chained.push(next_addr.is_some());
        prev_end = addr.saturating_add(f.words.len() as u32);
        let enable = f
            .enable
            .or(d.tasks.first().and_then(|t| t.enable.map(|m| m.0)))
            .unwrap_or(0);
        let int_mask = f
            .int_mask
            .unwrap_or_else(|| int_mask_for(&words, 0, amount as usize));
        let inside = bufs
            .iter()
            .find(|b| addr >= b.addr && (addr - b.addr) as usize + f.words.len() <= b.bytes.len());
        let (buffer, offset) = match inside {
            Some(b) => {
                let at = (addr - b.addr) as usize;
                if b.bytes[at..at + f.words.len()] != f.words[..] {
                    notes.push(format!(
                        "task {i}: its file differs from buffer {:#010x} at +{at:#x}; the buffer is what the NPU reads",
                        b.addr
                    ));
                }
                (b.id, at as u32)
            }
            None => {
                loose.push((addr, &f.words));
                (LOOSE, addr)
            }
        };
        tasks.push(BufferTask {
            buffer,
            task: TaskDesc {
                offset,
                regcfg_amount: amount,
                int_mask,
                enable,
            },
        });
    }
    let mut regcmd_ids: Vec<u32> = tasks
        .iter()
        .map(|t| t.buffer)
        .filter(|&b| b != LOOSE)
        .collect();
    // Loose lists within 64 KiB of each other share a page-aligned buffer.
    loose.sort_by_key(|l| l.0);
    let mut groups: Vec<(u32, u64)> = Vec::new();
    for (addr, w) in &loose {
        let end = *addr as u64 + w.len() as u64;
        match groups.last_mut() {
            Some(g) if (*addr as u64) <= g.1 + 0x1_0000 => g.1 = g.1.max(end),
            _ => groups.push((addr & !0xfff, end)),
        }
    }
    for (base, end) in groups {
        let mut bytes = vec![0u8; (end - base as u64).next_multiple_of(4096) as usize];
        for (addr, w) in loose.iter().filter(|l| l.0 >= base && (l.0 as u64) < end) {
            let at = (addr - base) as usize;
            bytes[at..at + w.len()].copy_from_slice(w);
        }
        let id = bufs.len() as u32;
        for t in tasks
            .iter_mut()
            .filter(|t| t.buffer == LOOSE && t.task.offset >= base && (t.task.offset as u64) < end)
        {
            t.buffer = id;
            t.task.offset -= base;
        }
        bufs.push(Placed {
            id,
            addr: base,
            bytes,
        });
        regcmd_ids.push(id);
    }
    let runtime = meta.get("runtime");
    let driver = runtime
        .get("rknpu_driver")
        .string()
        .or(runtime.get("librknnrt").string())
        .unwrap_or("unknown");
    let mut chunks = vec![Chunk::Note(format!(
        "imported from the capture {}{}",
        dir.file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        meta.get("source_repo")
            .string()
            .map_or(String::new(), |r| format!(" of {r}"))
    ))];
    chunks.extend(notes.into_iter().map(Chunk::Note));
    chunks.push(Chunk::Note(
        "captures do not say when buffers were saved: they are inputs here, and no output is recorded".into(),
    ));
    chunks.extend(buffer_chunks(&bufs, &regcmd_ids));
    let core_mask = meta
        .get("submit")
        .get("core_mask")
        .number()
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(1);
    // One submission per chain: the PC stops at a tail that names no next task.
    let mut id = 1;
    let mut start = 0;
    for end in 1..=tasks.len() {
        if end < tasks.len() && chained[end - 1] {
            continue;
        }
        let run = tasks[start..end].to_vec();
        chunks.push(Chunk::Submit {
            id,
            flags: 0x5,
            core_mask: if matches!(core_mask, 1 | 2 | 4) {
                core_mask
            } else {
                1
            },
            timeout_ms: 500,
            ranges: vec![(0, run.len() as u32)],
            tasks: run,
        });
        id += 1;
        start = end;
    }
    Ok(Trace {
        header: Header::new("RK3588", 0, driver, false),
        chunks,
    })
}

/// Just enough JSON for `meta.json`: values, with numbers also read from `"0x..."`
/// strings.
#[derive(Clone, Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

static NULL: Json = Json::Null;

impl Json {
    fn parse(text: &str) -> Result<Json, String> {
        let b = text.as_bytes();
        let mut at = 0;
        let v = Self::value(b, &mut at, 0)?;
        Self::ws(b, &mut at);
        if at != b.len() {
            return Err(format!("JSON: trailing bytes at {at}"));
        }
        Ok(v)
    }

    fn ws(b: &[u8], at: &mut usize) {
        while b.get(*at).is_some_and(u8::is_ascii_whitespace) {
            *at += 1;
        }
    }

    fn value(b: &[u8], at: &mut usize, depth: usize) -> Result<Json, String> {
        if depth > 64 {
            return Err("JSON: nested too deep".into());
        }
        Self::ws(b, at);
        let bad = |at: usize| format!("JSON: unexpected input at byte {at}");
        match b.get(*at) {
            Some(b'{') => {
                *at += 1;
                let mut m = BTreeMap::new();
                loop {
                    Self::ws(b, at);
                    if b.get(*at) == Some(&b'}') {
                        *at += 1;
                        return Ok(Json::Obj(m));
                    }
                    let Json::Str(k) = Self::value(b, at, depth + 1)? else {
                        return Err(bad(*at));
                    };
                    Self::ws(b, at);
                    if b.get(*at) != Some(&b':') {
                        return Err(bad(*at));
                    }
                    *at += 1;
                    m.insert(k, Self::value(b, at, depth + 1)?);
                    Self::ws(b, at);
                    match b.get(*at) {
                        Some(b',') => *at += 1,
                        Some(b'}') => {}
                        _ => return Err(bad(*at)),
                    }
                }
            }
            Some(b'[') => {
                *at += 1;
                let mut v = Vec::new();
                loop {
                    Self::ws(b, at);
                    if b.get(*at) == Some(&b']') {
                        *at += 1;
                        return Ok(Json::Arr(v));
                    }
                    v.push(Self::value(b, at, depth + 1)?);
                    Self::ws(b, at);
                    match b.get(*at) {
                        Some(b',') => *at += 1,
                        Some(b']') => {}
                        _ => return Err(bad(*at)),
                    }
                }
            }
            Some(b'"') => {
                *at += 1;
                let mut s = String::new();
                loop {
                    match b.get(*at) {
                        None => return Err("JSON: unterminated string".into()),
                        Some(b'"') => {
                            *at += 1;
                            return Ok(Json::Str(s));
                        }
                        Some(b'\\') => {
                            let c = *b.get(*at + 1).ok_or_else(|| bad(*at))?;
                            *at += 2;
                            match c {
                                b'n' => s.push('\n'),
                                b't' => s.push('\t'),
                                b'r' => s.push('\r'),
                                b'b' | b'f' => {}
                                b'u' => {
                                    let hex = b.get(*at..*at + 4).ok_or_else(|| bad(*at))?;
                                    let code = std::str::from_utf8(hex)
                                        .ok()
                                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                                        .ok_or_else(|| bad(*at))?;
                                    s.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                                    *at += 4;
                                }
                                c => s.push(c as char),
                            }
                        }
                        Some(_) => {
                            let start = *at;
                            while b.get(*at).is_some_and(|&c| c != b'"' && c != b'\\') {
                                *at += 1;
                            }
                            s.push_str(&String::from_utf8_lossy(&b[start..*at]));
                        }
                    }
                }
            }
            Some(b't') if b[*at..].starts_with(b"true") => {
                *at += 4;
                Ok(Json::Bool(true))
            }
            Some(b'f') if b[*at..].starts_with(b"false") => {
                *at += 5;
                Ok(Json::Bool(false))
            }
            Some(b'n') if b[*at..].starts_with(b"null") => {
                *at += 4;
                Ok(Json::Null)
            }
            Some(c) if *c == b'-' || c.is_ascii_digit() => {
                let start = *at;
                while b
                    .get(*at)
                    .is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
                {
                    *at += 1;
                }
                std::str::from_utf8(&b[start..*at])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .map(Json::Num)
                    .ok_or_else(|| bad(start))
            }
            _ => Err(bad(*at)),
        }
    }

    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(m) => m.get(key).unwrap_or(&NULL),
            _ => &NULL,
        }
    }

    fn items(&self) -> &[Json] {
        match self {
            Json::Arr(v) => v,
            _ => &[],
        }
    }

    fn string(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A number, or a string holding one in decimal or `0x` hexadecimal.
    fn number(&self) -> Option<u64> {
        match self {
            Json::Num(n) if *n >= 0.0 && n.fract() == 0.0 && *n < 1.8e19 => Some(*n as u64),
            Json::Str(s) => match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Json;

    #[test]
    fn json_reads_meta_shapes() {
        let j = Json::parse(
            r#"{"a": [1, {"b": "0x1f"}], "s": "x\"y\u0041", "t": true, "n": null, "f": -2.5e1}"#,
        )
        .unwrap();
        assert_eq!(j.get("a").items()[0].number(), Some(1));
        assert_eq!(j.get("a").items()[1].get("b").number(), Some(0x1f));
        assert_eq!(j.get("s").string(), Some("x\"yA"));
        assert_eq!(j.get("t"), &Json::Bool(true));
        assert_eq!(j.get("f"), &Json::Num(-25.0));
        assert_eq!(j.get("f").number(), None);
        assert_eq!(j.get("missing").get("deeper"), &Json::Null);
        for bad in ["{", "[1,", "{\"a\" 1}", "\"abc", "[1] x", "{\"a\":tru}"] {
            assert!(Json::parse(bad).is_err(), "{bad}");
        }
        assert!(Json::parse(&"[".repeat(100)).is_err());
    }
}
