//! `rknpu verify --regcmd PROG.bin [--regcmd-addr ADDR] [--task-words N] --buffer
//! ADDR:LEN:r|w|rw ...`: every DMA range of a program's tasks inside the buffers a job
//! would list, with the access it gives them ([`rknpu_driver::verify`]).

use crate::{Failure, parse_u64, usage};
use rknpu_driver::regcmd::{self, RegCmd};
use rknpu_driver::task::{Access, DmaRange, Task};
use rknpu_driver::verify::{self, BufferAccess, JobBuffer, VerifyError};

/// Where the program sits unless `--regcmd-addr` says otherwise (where `rknpu matmul
/// --emit` binds it).
pub(crate) const DEFAULT_REGCMD_ADDR: u64 = 0x1000_0000;

/// One past the NPU's highest device address (32-bit).
const ADDRESS_SPACE: u64 = 1 << 32;

/// What `verify` was asked.
struct VerifyArgs {
    prog: String,
    addr: u64,
    task_words: Option<u64>,
    buffers: Vec<JobBuffer>,
}

/// Sets an option that may be given once.
fn once<T>(slot: &mut Option<T>, name: &str, value: T) -> Result<(), Failure> {
    if slot.is_some() {
        return Err(usage(format!("verify: {name} given twice")));
    }
    *slot = Some(value);
    Ok(())
}

/// `ADDR:LEN:r|w|rw`, inside the 32-bit device address space and not empty.
fn parse_buffer(s: &str) -> Result<JobBuffer, Failure> {
    let bad = |why: &str| usage(format!("verify: --buffer {s}: {why}"));
    let parts: Vec<&str> = s.split(':').collect();
    let [addr, len, access] = parts[..] else {
        return Err(bad("expected ADDR:LEN:r|w|rw"));
    };
    let addr = parse_u64(addr).ok_or_else(|| bad("ADDR is not a number"))?;
    let len = parse_u64(len).ok_or_else(|| bad("LEN is not a number"))?;
    let access = match access {
        "r" => BufferAccess::Read,
        "w" => BufferAccess::Write,
        "rw" => BufferAccess::ReadWrite,
        _ => return Err(bad("the access is r, w or rw")),
    };
    if len == 0 {
        return Err(bad("the buffer is empty"));
    }
    match addr.checked_add(len) {
        Some(end) if end <= ADDRESS_SPACE => Ok(JobBuffer::new(addr, len, access)),
        _ => Err(bad("ADDR + LEN passes the 32-bit device address space")),
    }
}

fn parse(args: &[String]) -> Result<VerifyArgs, Failure> {
    let (mut prog, mut addr, mut task_words) = (None, None, None);
    let mut buffers: Vec<JobBuffer> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let name = a.as_str();
        if !matches!(
            name,
            "--regcmd" | "--regcmd-addr" | "--task-words" | "--buffer"
        ) {
            return Err(usage(format!("verify: unexpected argument {a}")));
        }
        let v = it
            .next()
            .ok_or_else(|| usage(format!("verify: {a} needs a value")))?;
        let number =
            || parse_u64(v).ok_or_else(|| usage(format!("verify: {a}: not a number: {v}")));
        match name {
            "--regcmd" => once(&mut prog, name, v.clone())?,
            "--regcmd-addr" => once(&mut addr, name, number()?)?,
            "--task-words" => once(&mut task_words, name, number()?)?,
            _ => {
                let b = parse_buffer(v)?;
                if buffers.contains(&b) {
                    return Err(usage(format!("verify: --buffer {v} given twice")));
                }
                buffers.push(b);
            }
        }
    }
    let prog = prog.ok_or_else(|| usage("verify: missing --regcmd PROG.bin"))?;
    if buffers.is_empty() {
        return Err(usage(
            "verify: no --buffer ADDR:LEN:r|w|rw: a job lists at least its data",
        ));
    }
    Ok(VerifyArgs {
        prog,
        addr: addr.unwrap_or(DEFAULT_REGCMD_ADDR),
        task_words,
        buffers,
    })
}

/// The program's words (the first `--task-words`, or all) and the length of its file.
fn read_program(a: &VerifyArgs) -> Result<(Vec<RegCmd>, u64), Failure> {
    let p = &a.prog;
    let bytes = std::fs::read(p).map_err(|e| usage(format!("verify: {p}: {e}")))?;
    if bytes.is_empty() || !bytes.len().is_multiple_of(8) {
        return Err(usage(format!(
            "verify: {p}: {} bytes, not a whole number of 8-byte regcmd words",
            bytes.len()
        )));
    }
    let mut words =
        regcmd::words_from_le_bytes(&bytes).map_err(|e| usage(format!("verify: {p}: {e}")))?;
    if let Some(n) = a.task_words {
        if n == 0 || n > words.len() as u64 {
            return Err(usage(format!(
                "verify: --task-words {n}: 1 to {}, the words {p} holds",
                words.len()
            )));
        }
        words.truncate(n as usize);
    }
    Ok((words, bytes.len() as u64))
}

fn access_letter(a: Access) -> &'static str {
    match a {
        Access::Read => "r",
        Access::Write => "w",
    }
}

fn print_ranges(task: usize, ranges: &[DmaRange]) {
    for r in ranges {
        outln!(
            "task {task:<4} {:<9} {:<27} {:<11} {:#010x}..{:#010x} {:>10} {}",
            r.block.name(),
            r.register,
            r.what,
            r.start,
            r.end(),
            r.len,
            access_letter(r.access)
        );
    }
}

/// Checks the program against the buffers; prints the buffers, then each task's ranges
/// (up to the failing task when one fails).
pub(crate) fn run(args: &[String]) -> Result<(), Failure> {
    let mut a = parse(args)?;
    let (words, file_len) = read_program(&a)?;
    let end = a.addr.checked_add(file_len).filter(|&e| e <= ADDRESS_SPACE);
    let Some(end) = end else {
        return Err(usage(format!(
            "verify: the program's {file_len} bytes at --regcmd-addr {:#x} pass the 32-bit device address space",
            a.addr
        )));
    };
    let covered = a
        .buffers
        .iter()
        .any(|b| b.addr <= a.addr && end <= b.addr + b.len);
    if !covered {
        a.buffers
            .insert(0, JobBuffer::new(a.addr, file_len, BufferAccess::Read));
    }
    for (i, b) in a.buffers.iter().enumerate() {
        let note = if !covered && i == 0 {
            "  (the program)"
        } else {
            ""
        };
        outln!(
            "buffer {:#010x}..{:#010x} {:>10} bytes {}{note}",
            b.addr,
            b.addr + b.len,
            b.len,
            b.access.name()
        );
    }
    let tasks = verify::tasks_of_words(&words).map_err(|e| Failure(1, e.to_string()))?;
    match verify::check(&tasks, &a.buffers) {
        Ok(all) => {
            for t in &all {
                print_ranges(t.task, &t.ranges);
            }
            let ranges: usize = all.iter().map(|t| t.ranges.len()).sum();
            outln!(
                "ok: {} task(s), {ranges} DMA range(s), each inside a listed buffer with its access",
                tasks.len()
            );
            Ok(())
        }
        Err(e) => {
            print_up_to(&tasks, &e);
            Err(Failure(1, e.to_string()))
        }
    }
}

/// The ranges of the tasks before the failing one and of the failing one itself.
fn print_up_to(tasks: &[Task], e: &VerifyError) {
    let last = match e {
        VerifyError::Outside { task, .. } | VerifyError::Access { task, .. } => *task,
        _ => return,
    };
    for (i, t) in tasks.iter().enumerate().take(last + 1) {
        print_ranges(i, &t.dma());
    }
}
