//! `rknpu`: the command-line tool of rknpu-driver (see docs/cli.md). One module per
//! command; this file holds the usage text, what the commands share, and the dispatch.

use rknpu_driver::regcmd;
use std::process::ExitCode;

/// Writes to standard output; a reader that went away (a closed pipe) ends the program
/// quietly instead of panicking.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write;
        if write!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// `out!` with a newline.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write;
        if writeln!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(0);
        }
    }};
}

mod bench;
mod decode;
mod doctor;
mod emit;
mod info;
mod matmul;
mod sim;
mod trace;
mod verify;

const USAGE: &str = "\
usage: rknpu <command> [options]

commands:
  decode FILE [--json] [--addr ADDR] [--strict]
        Decode a raw file of little-endian u64 regcmd entries. --addr gives the device
        address of the first word (resolves chain addresses to tasks). --strict exits 1
        when an entry is unknown. The last line is `summary: <N> entries, <U> unknown`.
  sim run --regcmd PROG.bin [--regcmd-addr ADDR] [--task-words N] [--core C]
          [--load ADDR=FILE]... [--dump ADDR:LEN=FILE]... [--int-mask MASK]
        Run a regcmd program on the simulator. PROG.bin (little-endian u64 entries) is
        placed at ADDR (default 0). --task-words is the first task's body length
        (regcfg_amount); by default the body runs up to the first task tail. --load
        places a file at a device address; --dump writes LEN bytes from a device address
        to a file after the run (a region that is not loaded is created zeroed).
        --int-mask is the completion mask (default 0x300). Prints the tasks run, the
        interrupt status and every lint; exit 0 when the program completed.
  matmul --m M --k K --n N --dtype int8|int4|fp16 [--out int32|int16|fp32|fp16]
         [--cores 1|2|3] [--device auto|emu|PATH] [--seed S] [--trace FILE] [--incremental]
        Multiply seeded random matrices on the NPU (or, with no NPU, the emulated kernel),
        check against a CPU reference, print the plan, a time breakdown, the largest
        error and OK. --out is the result type: int32 (int8, int4), int16 (int4), fp32 or
        fp16 (fp16; written by the NPU, K within one wave). --trace records the run to
        FILE (docs/trace-format.md); so does RKNPU_TRACE=FILE for any program using the
        library. --incremental writes tasks after the first two of each core's chain as
        incremental bodies (vendor driver only; refused on rocket).
  matmul --m M --k K --n N --dtype ... [--out ...] [--cores C] --emit FILE
        Write the plan's program without running it (no device is opened): little-endian
        u64 words bound at 0x10000000, A, weights and C at 0x20000000, 0x30000000 and
        0x40000000; print each buffer's id, address, length and access, and the
        `rknpu verify` command that checks them.
  verify --regcmd PROG.bin [--regcmd-addr ADDR] [--task-words N] --buffer ADDR:LEN:r|w|rw ...
        Check that every DMA range of every task of the program lies inside a listed
        buffer that allows its access (r, w or rw); print each task's ranges. The program
        sits at ADDR (default 0x10000000) and its own buffer is listed as readable unless
        a --buffer covers it. --task-words N: only the first N words are the program.
        Exit 0 when every range passes, 1 when one does not (named) or a task does not
        decode, 2 on usage errors (options, an unreadable or ragged file).
  bench pack
        Packing throughput against memcpy of the same bytes, measured in the same run:
        int8 weight packing from K x N and from N x K, int4 weight packing (4096x4096),
        int8 activation packing (128x4096), int32 output unpacking (128x4096).
  trace import --regcmd PROG.bin [--regcmd-addr ADDR] [--task-words N] [--load ADDR=FILE]...
               [--expect ADDR=FILE]... --out FILE
  trace import --capture DIR --out FILE
        Build a trace (docs/trace-format.md) from the inputs of `sim run` and the contents
        expected after the run, or from a capture folder (task-NN.regcmd.bin or
        regcmd.bin, buf-ADDR.bin, meta.json).
  trace dump FILE
        Print a trace as stable text, each task's list decoded.
  trace replay FILE [--mode check|model|hw] [--ulps N]
        check: decode and check every task and relocation; model (the default): run on
        the simulator and compare completions and outputs; hw: run on the device that
        RKNPU_DEVICE or probing finds, buffers relocated. --ulps sets how far fp16, bf16
        and fp32 outputs may differ (default 0 for traces from the emulated kernel, 2
        otherwise). Exit 0 on a match, 1 on a mismatch (with where), 2 on usage errors.
  doctor [--device auto|emu|emu:rocket|emu:vendor-0.9.6|PATH] [--bundle DIR] [--timeout MS]
        The bring-up ladder for a new board or kernel: probe the node and driver, check
        buffers, then run programs from the worked example up to the matmul grid on 1, 2
        and 3 cores, each job with a deadline (--timeout, default 2000 ms). One line per
        rung (ok, skip or FAIL, with its time); it stops at the first failure with a
        diagnosis. --bundle writes device.txt, a trace per rung and report.txt to DIR for
        a bug report. Without --device (or with auto): RKNPU_DEVICE, else probing.
        Exit 0 when every rung passes, 1 at the first failure, 2 on usage errors.
  info  Print the NPU this machine has (or the emulated one that RKNPU_DEVICE selects):
        interface, node, driver name and version, cores, IOMMU state.
  help  Show this text.

exit codes: 0 success, 1 bad input, 2 usage error";

/// A failure with its exit code: 1 for bad input, 2 for usage.
struct Failure(u8, String);

fn usage(msg: impl Into<String>) -> Failure {
    Failure(2, msg.into())
}

fn parse_u32(s: &str) -> Option<u32> {
    parse_u64(s).and_then(|v| u32::try_from(v).ok())
}

/// A decimal or `0x` hexadecimal number.
fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `ADDR=FILE`.
fn parse_load(s: &str) -> Option<(u32, String)> {
    let (a, f) = s.split_once('=')?;
    Some((parse_u32(a)?, f.to_string()))
}

/// The first task's body: entries before the first tail (the four entries that end with
/// an op-enable), or the whole program when there is no op-enable entry.
fn first_body(words: &[regcmd::RegCmd]) -> usize {
    words
        .iter()
        .position(|w| w.target() == rknpu_driver::regs::TARGET_OP_ENABLE)
        .map_or(words.len(), |i| {
            (i + 1).saturating_sub(regcmd::TAIL_ENTRIES)
        })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("decode") => decode::run(&args[1..]),
        Some("sim") => sim::run(&args[1..]),
        Some("info") => info::run(&args[1..]),
        Some("doctor") => doctor::run(&args[1..]),
        Some("matmul") => matmul::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("trace") => trace::run(&args[1..]),
        Some("verify") => verify::run(&args[1..]),
        Some("help") | Some("--help") | Some("-h") => {
            outln!("{USAGE}");
            Ok(())
        }
        Some("--version") | Some("-V") => {
            outln!("rknpu {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Some(other) => Err(usage(format!("unknown command {other}"))),
        None => Err(usage("missing command")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, msg)) => {
            eprintln!("rknpu: {msg}");
            if code == 2 {
                eprintln!("{USAGE}");
            }
            ExitCode::from(code)
        }
    }
}
