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

/// The arguments of `rknpu verify`.
#[derive(clap::Args)]
pub(crate) struct VerifyArgs {
    /// The program: little-endian u64 regcmd words (what `rknpu matmul --emit` writes).
    #[arg(long = "regcmd", value_name = "PROG.bin")]
    prog: String,
    /// The device address the program sits at (default 0x10000000, where `rknpu matmul
    /// --emit` binds it); its own buffer is listed as readable unless a --buffer covers it.
    #[arg(long = "regcmd-addr", value_name = "ADDR", value_parser = parse_u64)]
    addr: Option<u64>,
    /// Only the first N words of the file are the program (not a task body length).
    #[arg(long, value_name = "N", value_parser = parse_u64)]
    task_words: Option<u64>,
    /// A buffer of the job and the access it gives the NPU: r, w or rw (repeatable, at
    /// least one).
    #[arg(long = "buffer", value_name = "ADDR:LEN:r|w|rw", required = true, value_parser = parse_buffer)]
    buffers: Vec<JobBuffer>,
}

/// `ADDR:LEN:r|w|rw`, inside the 32-bit device address space and not empty (a `clap`
/// value parser).
fn parse_buffer(s: &str) -> Result<JobBuffer, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [addr, len, access] = parts[..] else {
        return Err("expected ADDR:LEN:r|w|rw".into());
    };
    let addr = parse_u64(addr).map_err(|e| format!("ADDR: {e}"))?;
    let len = parse_u64(len).map_err(|e| format!("LEN: {e}"))?;
    let access = match access {
        "r" => BufferAccess::Read,
        "w" => BufferAccess::Write,
        "rw" => BufferAccess::ReadWrite,
        _ => return Err("the access is r, w or rw".into()),
    };
    if len == 0 {
        return Err("the buffer is empty".into());
    }
    match addr.checked_add(len) {
        Some(end) if end <= ADDRESS_SPACE => Ok(JobBuffer::new(addr, len, access)),
        _ => Err("ADDR + LEN passes the 32-bit device address space".into()),
    }
}

/// A buffer listed twice is a usage error: it is most likely a typo for another one.
fn check_duplicates(buffers: &[JobBuffer]) -> Result<(), Failure> {
    for (i, b) in buffers.iter().enumerate() {
        if buffers[..i].contains(b) {
            return Err(usage(format!(
                "verify: --buffer {:#x}:{}:{} given twice",
                b.addr,
                b.len,
                b.access.name()
            )));
        }
    }
    Ok(())
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
pub(crate) fn run(mut a: VerifyArgs) -> Result<(), Failure> {
    check_duplicates(&a.buffers)?;
    let (words, file_len) = read_program(&a)?;
    let addr = a.addr.unwrap_or(DEFAULT_REGCMD_ADDR);
    let end = addr.checked_add(file_len).filter(|&e| e <= ADDRESS_SPACE);
    let Some(end) = end else {
        return Err(usage(format!(
            "verify: the program's {file_len} bytes at --regcmd-addr {:#x} pass the 32-bit device address space",
            addr
        )));
    };
    let covered = a
        .buffers
        .iter()
        .any(|b| b.addr <= addr && end <= b.addr + b.len);
    if !covered {
        a.buffers
            .insert(0, JobBuffer::new(addr, file_len, BufferAccess::Read));
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
    match verify::check_words(addr, &words, &a.buffers) {
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
