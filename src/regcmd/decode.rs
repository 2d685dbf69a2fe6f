//! Words back to named registers and fields, as structured entries, stable text and JSON.

use super::{BlockMask, RegCmd, Reloc, TASK_ALIGN_BYTES, pc_data_amount, words_from_le_bytes};
use crate::error::Result;
use crate::regs::{self, Block, FieldInfo, RegisterInfo};
use std::fmt::Write;

/// What an entry is, by its target and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// All zero, or target bit 48 alone with value and offset 0.
    Nop,
    /// A write to a register of the model.
    Write(&'static RegisterInfo),
    /// The `0x0041` entry that precedes op-enable.
    Marker,
    /// The op-enable entry (target `0x0081`, offset `0x0008`).
    OpEnable,
    /// A target code the model does not know.
    UnknownTarget,
    /// A known block target with an offset that is no register of that block.
    UnknownRegister(Block),
}

/// The part an entry plays in a task's tail (docs/hardware/registers.md#task-list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TailRole {
    /// `PC.BASE_ADDRESS` of the next task, or a NOP when there is none.
    NextAddress,
    /// `PC.REGISTER_AMOUNTS` of the next task (0 when there is none).
    NextAmount,
    /// The `0x0041` marker.
    Marker,
    /// The op-enable entry that ends the task.
    OpEnable,
    /// Zero padding after the op-enable entry.
    Padding,
}

impl TailRole {
    fn label(self) -> &'static str {
        match self {
            TailRole::NextAddress => "next address",
            TailRole::NextAmount => "next amount",
            TailRole::Marker => "marker",
            TailRole::OpEnable => "op-enable",
            TailRole::Padding => "padding",
        }
    }
}

/// One decoded entry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// Position in the input.
    pub index: usize,
    /// The word itself.
    pub word: RegCmd,
    /// What it is.
    pub kind: EntryKind,
    /// The task it belongs to.
    pub task: usize,
    /// Its part in the task's tail, if any.
    pub role: Option<TailRole>,
    /// Written through the builder's raw escape hatch (known only when decoding a [`super::Program`]).
    pub raw: bool,
    /// The relocation that supplies its value (known only when decoding a [`super::Program`]).
    pub reloc: Option<Reloc>,
}

/// One field of a decoded register write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FieldValue {
    /// The field.
    pub info: &'static FieldInfo,
    /// Its value.
    pub value: u32,
}

impl FieldValue {
    /// The value's name in the field's value set, if it has one.
    pub fn name(&self) -> Option<&'static str> {
        self.info.values.and_then(|s| s.name_of(self.value))
    }
}

impl Entry {
    /// Whether the target or register is not in the model.
    pub fn is_unknown(&self) -> bool {
        matches!(
            self.kind,
            EntryKind::UnknownTarget | EntryKind::UnknownRegister(_)
        )
    }

    /// The register's fields, highest bits first (empty for anything but a known write).
    pub fn fields(&self) -> Vec<FieldValue> {
        match self.kind {
            EntryKind::Write(info) => info
                .fields
                .iter()
                .rev()
                .map(|f| FieldValue {
                    info: f,
                    value: f.extract(self.word.value()),
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Set bits of a known write that no field covers (reserved bits); 0 otherwise.
    pub fn reserved_bits(&self) -> u32 {
        match self.kind {
            EntryKind::Write(info) => self.word.value() & !info.known_mask(),
            EntryKind::OpEnable => BlockMask(self.word.value()).unknown_bits(),
            _ => 0,
        }
    }
}

/// A task found in the words: a body and, normally, a tail ending in op-enable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskSpan {
    /// Task index in the input.
    pub index: usize,
    /// First entry.
    pub start: usize,
    /// Body entries (before the tail).
    pub body_len: usize,
    /// One past the last entry, padding included.
    pub end: usize,
    /// The op-enable mask, or `None` for words that end without an op-enable entry.
    pub enable: Option<BlockMask>,
    /// The chain address, when the tail names a next task.
    pub next_address: Option<u32>,
    /// The chain amount written in the tail.
    pub next_amount: Option<u32>,
}

/// Decoded words: entries, tasks, and the unknown count.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decoded {
    /// Every entry, in input order.
    pub entries: Vec<Entry>,
    /// The tasks, in input order.
    pub tasks: Vec<TaskSpan>,
}

fn classify(w: RegCmd) -> EntryKind {
    let (target, offset) = (w.target(), w.offset());
    if w.0 == 0 || w.0 == u64::from(regs::TARGET_NOP_BIT48) << 48 {
        return EntryKind::Nop;
    }
    if target == regs::TARGET_MARKER {
        return EntryKind::Marker;
    }
    if target == regs::TARGET_OP_ENABLE && offset == 0x0008 {
        return EntryKind::OpEnable;
    }
    match Block::from_target(target) {
        None => EntryKind::UnknownTarget,
        Some(block) => match regs::lookup(offset) {
            Some(info) if info.block == block => EntryKind::Write(info),
            _ => EntryKind::UnknownRegister(block),
        },
    }
}

fn is_write_of(kind: EntryKind, offset: u16) -> bool {
    matches!(kind, EntryKind::Write(r) if r.block == Block::Pc && r.offset == offset)
}

/// Decodes words into entries and tasks. Never fails: what the model does not know is
/// kept and marked unknown, and no bit is dropped.
pub fn decode(words: &[RegCmd]) -> Decoded {
    let mut entries: Vec<Entry> = words
        .iter()
        .enumerate()
        .map(|(index, &word)| Entry {
            index,
            word,
            kind: classify(word),
            task: 0,
            role: None,
            raw: false,
            reloc: None,
        })
        .collect();
    let mut tasks = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < entries.len() {
        if entries[i].kind != EntryKind::OpEnable {
            i += 1;
            continue;
        }
        // Tail roles, walking back from the op-enable entry.
        let op = i;
        entries[op].role = Some(TailRole::OpEnable);
        let mut tail_start = op;
        let mut next_address = None;
        let mut next_amount = None;
        if tail_start > start && entries[tail_start - 1].kind == EntryKind::Marker {
            tail_start -= 1;
            entries[tail_start].role = Some(TailRole::Marker);
        }
        if tail_start > start && is_write_of(entries[tail_start - 1].kind, 0x0014) {
            tail_start -= 1;
            entries[tail_start].role = Some(TailRole::NextAmount);
            next_amount = Some(entries[tail_start].word.value() & 0xFFFF);
            let prev = tail_start.checked_sub(1).filter(|&p| p >= start);
            if let Some(p) = prev {
                if is_write_of(entries[p].kind, 0x0010) {
                    tail_start = p;
                    entries[p].role = Some(TailRole::NextAddress);
                    next_address = Some(entries[p].word.value());
                } else if entries[p].kind == EntryKind::Nop {
                    tail_start = p;
                    entries[p].role = Some(TailRole::NextAddress);
                }
            }
        }
        // Padding: zeros up to the next 64-byte boundary (where the next task list
        // starts; a last task's first tail entry is a zero too), or all trailing zeros.
        let boundary = (op + 1)
            .next_multiple_of(TASK_ALIGN_BYTES / 8)
            .min(entries.len());
        let mut end = op + 1;
        while end < boundary && entries[end].word.0 == 0 {
            end += 1;
        }
        if end == boundary && entries[end..].iter().all(|e| e.word.0 == 0) {
            end = entries.len();
        }
        for e in &mut entries[op + 1..end] {
            e.role = Some(TailRole::Padding);
        }
        let index = tasks.len();
        for e in &mut entries[start..end] {
            e.task = index;
        }
        tasks.push(TaskSpan {
            index,
            start,
            body_len: tail_start - start,
            end,
            enable: Some(BlockMask(entries[op].word.value())),
            next_address,
            next_amount,
        });
        start = end;
        i = end;
    }
    if start < entries.len() {
        let index = tasks.len();
        for e in &mut entries[start..] {
            e.task = index;
        }
        tasks.push(TaskSpan {
            index,
            start,
            body_len: entries.len() - start,
            end: entries.len(),
            enable: None,
            next_address: None,
            next_amount: None,
        });
    }
    Decoded { entries, tasks }
}

/// Decodes a little-endian byte stream; errors on an empty input or a length that is
/// not a multiple of 8 (naming the byte offset of the incomplete entry).
pub fn decode_bytes(bytes: &[u8]) -> Result<Decoded> {
    Ok(decode(&words_from_le_bytes(bytes)?))
}

fn format_field(out: &mut String, f: &FieldValue) {
    match f.name() {
        Some(n) => out.push_str(n),
        None if f.info.hex => {
            let _ = write!(out, "{:#x}", f.value);
        }
        None => {
            let _ = write!(out, "{}", f.value);
        }
    }
}

impl Decoded {
    /// Entries whose target or register is not in the model.
    pub fn unknown(&self) -> usize {
        self.entries.iter().filter(|e| e.is_unknown()).count()
    }

    /// The task whose list starts at device address `addr`, when the words were placed at
    /// `base`: a binary search (tasks are in order), so `to_text` stays linear.
    fn task_at(&self, base: u32, addr: u32) -> Option<usize> {
        let off = addr.checked_sub(base)? as usize;
        if !off.is_multiple_of(8) {
            return None;
        }
        self.tasks
            .binary_search_by_key(&(off / 8), |t| t.start)
            .ok()
    }

    /// Stable text: a header line per task, one line per entry, and a last line
    /// `summary: <N> entries, <U> unknown`.
    ///
    /// `base` is the device address of the first word, if known: chain addresses are then
    /// resolved to task numbers and chain amounts are checked against the next body.
    pub fn to_text(&self, base: Option<u32>) -> String {
        let width = self
            .entries
            .len()
            .saturating_sub(1)
            .to_string()
            .len()
            .max(4);
        let mut out = String::new();
        for t in &self.tasks {
            let _ = write!(
                out,
                "# task {}: entries {:0w$}..{:0w$}, body {} entries",
                t.index,
                t.start,
                t.end.saturating_sub(1),
                t.body_len,
                w = width
            );
            match t.enable {
                Some(m) => {
                    let _ = write!(out, ", op-enable {m}");
                }
                None => out.push_str(", no op-enable (unterminated)"),
            }
            if let Some(amount) = pc_data_amount(t.body_len)
                .ok()
                .filter(|_| t.enable.is_some())
            {
                let _ = write!(out, ", pc_data_amount {amount}");
            }
            out.push('\n');
            for e in &self.entries[t.start..t.end] {
                self.entry_line(&mut out, e, width, base);
            }
        }
        let _ = writeln!(
            out,
            "summary: {} entries, {} unknown",
            self.entries.len(),
            self.unknown()
        );
        out
    }

    fn entry_line(&self, out: &mut String, e: &Entry, width: usize, base: Option<u32>) {
        let _ = write!(out, "{:0w$}  ", e.index, w = width);
        entry_body(out, e);
        self.entry_notes(out, e, base);
        out.push('\n');
    }

    /// The `  # ...` notes of an entry: tail role, chain target, raw, relocation.
    fn entry_notes(&self, out: &mut String, e: &Entry, base: Option<u32>) {
        let w = e.word;
        let mut notes: Vec<String> = Vec::new();
        if let Some(role) = e.role {
            let mut note = match role {
                TailRole::Padding => role.label().to_string(),
                _ => format!("tail: {}", role.label()),
            };
            let t = &self.tasks[e.task];
            match role {
                TailRole::NextAddress if e.kind == EntryKind::Nop => {
                    note.push_str(" (none: last task)")
                }
                TailRole::NextAddress => {
                    if let Some(b) = base {
                        match self.task_at(b, w.value()) {
                            Some(k) => {
                                let _ = write!(note, " -> task {k}");
                            }
                            None => note.push_str(" -> outside these words"),
                        }
                    }
                }
                TailRole::NextAmount => {
                    let next = self
                        .tasks
                        .get(t.index + 1)
                        .filter(|_| t.next_address.is_some());
                    if let (Some(n), Some(amount)) = (next, t.next_amount) {
                        match pc_data_amount(n.body_len) {
                            Ok(want) if u32::from(want) == amount => {}
                            Ok(want) => {
                                let _ = write!(
                                    note,
                                    " (! task {} has a {}-entry body: amount {want})",
                                    n.index, n.body_len
                                );
                            }
                            Err(_) => {}
                        }
                    }
                }
                _ => {}
            }
            notes.push(note);
        }
        if e.raw {
            notes.push("raw".into());
        }
        if let Some(r) = e.reloc {
            notes.push(format!("reloc buffer {} + {:#x}", r.buffer.0, r.offset));
        }
        if !notes.is_empty() {
            let _ = write!(out, "  # {}", notes.join("; "));
        }
    }

    /// The same content as JSON: `{"entries": [...], "tasks": [...], "summary": {...}}`.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\"entries\":[");
        for (k, e) in self.entries.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            let w = e.word;
            let kind = match e.kind {
                EntryKind::Nop => "nop",
                EntryKind::Write(_) => "write",
                EntryKind::Marker => "marker",
                EntryKind::OpEnable => "op_enable",
                EntryKind::UnknownTarget => "unknown_target",
                EntryKind::UnknownRegister(_) => "unknown_register",
            };
            let _ = write!(
                out,
                "{{\"index\":{},\"word\":\"{:#018x}\",\"target\":{},\"offset\":{},\"value\":{},\"kind\":\"{kind}\",\"task\":{}",
                e.index,
                w.0,
                w.target(),
                w.offset(),
                w.value(),
                e.task
            );
            match e.kind {
                EntryKind::Write(info) => {
                    let _ = write!(
                        out,
                        ",\"block\":\"{}\",\"register\":\"{}\",\"fields\":{{",
                        info.block.name(),
                        info.full_name
                    );
                    let fields = e.fields();
                    for (i, f) in fields.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "\"{}\":{}", f.info.name, f.value);
                    }
                    out.push_str("},\"names\":{");
                    let mut first = true;
                    for f in &fields {
                        if let Some(n) = f.name() {
                            if !first {
                                out.push(',');
                            }
                            let _ = write!(out, "\"{}\":\"{n}\"", f.info.name);
                            first = false;
                        }
                    }
                    let _ = write!(out, "}},\"reserved_bits\":{}", e.reserved_bits());
                }
                EntryKind::UnknownRegister(b) => {
                    let _ = write!(out, ",\"block\":\"{}\"", b.name());
                }
                EntryKind::OpEnable => {
                    let _ = write!(out, ",\"blocks\":\"{}\"", BlockMask(w.value()));
                }
                _ => {}
            }
            if let Some(r) = e.role {
                let _ = write!(out, ",\"role\":\"{}\"", r.label());
            }
            if e.raw {
                out.push_str(",\"raw\":true");
            }
            if let Some(r) = e.reloc {
                let _ = write!(
                    out,
                    ",\"reloc\":{{\"buffer\":{},\"offset\":{}}}",
                    r.buffer.0, r.offset
                );
            }
            out.push('}');
        }
        out.push_str("],\"tasks\":[");
        for (k, t) in self.tasks.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            let opt = |v: Option<u32>| v.map_or("null".to_string(), |v| v.to_string());
            let _ = write!(
                out,
                "{{\"index\":{},\"start\":{},\"body_len\":{},\"end\":{},\"enable\":{},\"next_address\":{},\"next_amount\":{}}}",
                t.index,
                t.start,
                t.body_len,
                t.end,
                opt(t.enable.map(|m| m.0)),
                opt(t.next_address),
                opt(t.next_amount)
            );
        }
        let _ = write!(
            out,
            "],\"summary\":{{\"entries\":{},\"unknown\":{}}}}}",
            self.entries.len(),
            self.unknown()
        );
        out
    }
}

/// An entry's text before its notes: what it is and, for a write, every field.
fn entry_body(out: &mut String, e: &Entry) {
    let w = e.word;
    match e.kind {
        EntryKind::Nop => {
            out.push_str("NOP");
            if w.0 != 0 {
                let _ = write!(out, " ({:#018x})", w.0);
            }
        }
        EntryKind::Marker => {
            out.push_str("MARKER");
            if w.0 != RegCmd::MARKER.0 {
                let _ = write!(out, " value={:#010x} offset={:#06x}", w.value(), w.offset());
            }
        }
        EntryKind::OpEnable => {
            let _ = write!(
                out,
                "OP_ENABLE = {:#010x} {{ {} }}",
                w.value(),
                BlockMask(w.value())
            );
        }
        EntryKind::UnknownTarget => {
            let _ = write!(
                out,
                "UNKNOWN target={:#06x} offset={:#06x} value={:#010x}",
                w.target(),
                w.offset(),
                w.value()
            );
        }
        EntryKind::UnknownRegister(b) => {
            let _ = write!(
                out,
                "{}.UNKNOWN offset={:#06x} value={:#010x}",
                b.name(),
                w.offset(),
                w.value()
            );
        }
        EntryKind::Write(info) => {
            let _ = write!(out, "{} = {:#010x} {{ ", info.full_name, w.value());
            for (k, f) in e.fields().iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                out.push_str(f.info.name);
                out.push_str(": ");
                format_field(out, f);
            }
            let reserved = e.reserved_bits();
            if reserved != 0 {
                let _ = write!(out, ", !reserved: {reserved:#010x}");
            }
            out.push_str(" }");
        }
    }
}
