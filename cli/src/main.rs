//! `rknpu`: the command-line tool of rknpu-driver (see docs/cli.md). One module per
//! command, each with its arguments as a `clap` type; this file holds the command tree,
//! what the commands share (number parsers, output macros) and the dispatch.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
mod element;
mod emit;
mod gguf;
mod info;
mod matmul;
mod matmul_run;
mod model_cost;
mod op;
mod op_conv;
mod op_ew;
mod op_lut;
mod op_pool;
mod sim;
mod trace;
mod verify;

/// The command line: one subcommand.
#[derive(Parser)]
#[command(
    name = "rknpu",
    version,
    about = "Decode, simulate, verify, trace and run programs for the Rockchip RK3588 NPU",
    long_about = None,
    subcommand_required = true,
    arg_required_else_help = true,
    after_help = "Exit codes: 0 success, 1 bad input or a failed check, 2 usage error.\n\
                  Numbers take decimal or 0x hexadecimal. More in docs/cli.md."
)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The commands, in the order `rknpu --help` lists them.
#[derive(Subcommand)]
enum Command {
    /// Decode a file of regcmd entries to text or JSON.
    ///
    /// The file holds little-endian u64 entries (the bytes the NPU fetches). Text ends
    /// with the line `summary: <N> entries, <U> unknown`; --json prints one JSON document
    /// whose "summary" holds the same counts.
    Decode(decode::DecodeArgs),
    /// Run regcmd programs on the simulator.
    Sim {
        /// What to do with the simulator.
        #[command(subcommand)]
        command: sim::SimCommand,
    },
    /// Multiply random matrices on the NPU and check them against the CPU.
    ///
    /// Seeded random matrices are multiplied on the NPU (or, with no NPU, the emulated
    /// kernel) and checked against a CPU reference; the plan, a time breakdown, the
    /// largest error and OK are printed. --plan-only only plans the product; --emit only
    /// writes its program; --gguf takes the weights from a tensor of a GGUF file.
    Matmul(matmul::MatmulArgs),
    /// Check a program's DMA ranges against the buffers of a job.
    ///
    /// Every DMA range of every task must lie inside a listed buffer that allows its
    /// access; each task's ranges are printed. Exit 1 when one does not (named) or a task
    /// does not decode.
    Verify(verify::VerifyArgs),
    /// Measure the library's own speed.
    Bench {
        /// The benchmark.
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Build, print and replay traces (docs/trace-format.md).
    Trace {
        /// What to do with a trace.
        #[command(subcommand)]
        command: trace::TraceCommand,
    },
    /// Print the NPU this machine has.
    ///
    /// Or the emulated one RKNPU_DEVICE selects: interface, node, driver name and version,
    /// cores, IOMMU state, clock.
    Info,
    /// Run the bring-up ladder for a new board or kernel.
    ///
    /// Probe the node and driver, check buffers, then run programs from the worked example
    /// up to the matmul grid on 1, 2 and 3 cores, each job with a deadline. One line per
    /// rung (ok, skip or FAIL, with its time); it stops at the first failure with a
    /// diagnosis. Exit 0 when every rung passes, 1 at the first failure.
    Doctor(doctor::DoctorArgs),
    /// List the tensors of a GGUF file.
    ///
    /// The format version, metadata count and alignment, then one line a tensor (name,
    /// ggml type, shape in GGUF order: ne0 first) and the line `<N> tensors`; --json
    /// prints one JSON document. Exit 1 on a file the reader refuses.
    Gguf(gguf::GgufArgs),
    /// Run one operation beyond matmul on seeded data and check it against the CPU.
    ///
    /// Convolution, element-wise, LUT activation or pooling, on the NPU (or, with no
    /// NPU, the emulated kernel): prints the program summary, the time, the largest error
    /// against the library's CPU reference with its bound, and OK (docs/ops.md).
    Op {
        /// The operation.
        #[command(subcommand)]
        command: op::OpCommand,
    },
    /// Print the modelled LLM throughput of a GGUF model's matmuls on the RK3588.
    ///
    /// From the header only (no device, no tensor data): every 2-D `.weight` tensor but
    /// token_embd.weight is costed by the library's planner and cost model, once a token
    /// (decode, M = 1) and over a prompt (--prompt N rows; the LM head one row). Prints
    /// the tensor counts, bank types, weight bytes, decode and prompt tokens/s with the
    /// NPU and host parts, and what the model leaves out (docs/cli.md).
    ModelCost(model_cost::ModelCostArgs),
}

/// A failure with its exit code: 1 for bad input or a failed check, 2 for usage.
struct Failure(u8, String);

/// A usage error (exit 2) found after the arguments parsed: a combination of options, or
/// an input `verify` or `sim run` cannot take.
fn usage(msg: impl Into<String>) -> Failure {
    Failure(2, msg.into())
}

/// A decimal or `0x` hexadecimal number of 32 bits (a `clap` value parser).
fn parse_u32(s: &str) -> Result<u32, String> {
    let v = parse_u64(s)?;
    u32::try_from(v).map_err(|_| format!("{v:#x} does not fit in 32 bits"))
}

/// A decimal or `0x` hexadecimal number of 64 bits (a `clap` value parser).
fn parse_u64(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("not a number (decimal or 0x hexadecimal): {e}"))
}

/// A file placed at a device address: `ADDR=FILE`.
#[derive(Clone, Debug)]
struct AddrFile {
    /// The device address.
    addr: u32,
    /// The file.
    file: String,
}

/// `ADDR=FILE` (a `clap` value parser).
fn parse_addr_file(s: &str) -> Result<AddrFile, String> {
    let (a, f) = s
        .split_once('=')
        .ok_or_else(|| format!("expected ADDR=FILE, got {s}"))?;
    Ok(AddrFile {
        addr: parse_u32(a)?,
        file: f.to_string(),
    })
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

/// The usage line of the command at `path` (subcommand names below `cmd`, as far as they
/// name subcommands) and where its help is.
fn usage_of(cmd: &mut clap::Command, path: &[String]) -> String {
    if let Some((name, rest)) = path.split_first()
        && let Some(next) = cmd.find_subcommand_mut(name)
    {
        return usage_of(next, rest);
    }
    let usage = cmd.render_usage().to_string();
    let name = cmd.get_bin_name().unwrap_or("rknpu").to_string();
    format!("{usage}\n\nFor more information, try '{name} --help'.")
}

/// The subcommand names the parsed arguments selected, outermost first.
fn path_of(matches: &clap::ArgMatches) -> Vec<String> {
    let mut path = Vec::new();
    let mut m = matches;
    while let Some((name, sub)) = m.subcommand() {
        path.push(name.to_string());
        m = sub;
    }
    path
}

/// The subcommand names in arguments that did not parse: the leading words that are not
/// options (the commands with subcommands take no option but `--help`).
fn path_in(args: &[std::ffi::OsString]) -> Vec<String> {
    args.iter()
        .skip(1)
        .map_while(|a| a.to_str().filter(|a| !a.starts_with('-')))
        .map(str::to_string)
        .collect()
}

/// Reports a usage error clap found and exits 2; help and version exit 0 as clap does.
/// The message ends with the usage of the command it concerns (clap leaves it out of
/// some errors, such as a bad value) and where that command's help is.
fn parse_error(e: clap::Error, cmd: &mut clap::Command, args: &[std::ffi::OsString]) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let text = e.render().to_string();
    let lines: Vec<&str> = text
        .trim_end()
        .lines()
        .filter(|l| !l.starts_with("For more information, try"))
        .collect();
    let has_usage = lines.iter().any(|l| l.starts_with("Usage:"));
    eprintln!("{}", lines.join("\n").trim_end());
    let usage = usage_of(cmd, &path_in(args));
    if has_usage {
        // Keep clap's usage line; add only where the help is.
        let help = usage.lines().last().unwrap_or_default();
        eprintln!("\n{help}");
    } else {
        eprintln!("\n{usage}");
    }
    std::process::exit(2);
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut cmd = Cli::command();
    // clap's own errors exit 2; --help and --version print to stdout and exit 0.
    let matches = match cmd.try_get_matches_from_mut(&args) {
        Ok(m) => m,
        Err(e) => parse_error(e, &mut cmd, &args),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => parse_error(e, &mut cmd, &args),
    };
    let result = match cli.command {
        Command::Decode(a) => decode::run(a),
        Command::Sim { command } => sim::run(command),
        Command::Matmul(a) => matmul::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Bench { command } => bench::run(command),
        Command::Trace { command } => trace::run(command),
        Command::Info => info::run(),
        Command::Doctor(a) => doctor::run(a),
        Command::Gguf(a) => gguf::run(a),
        Command::Op { command } => op::run(command),
        Command::ModelCost(a) => model_cost::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, msg)) => {
            eprintln!("rknpu: {msg}");
            if code == 2 {
                eprintln!("\n{}", usage_of(&mut cmd, &path_of(&matches)));
            }
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cli, parse_addr_file, parse_u32, parse_u64};
    use clap::CommandFactory;

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn numbers_are_decimal_or_hexadecimal() {
        assert_eq!(parse_u64("4096"), Ok(4096));
        assert_eq!(parse_u64("0x1000"), Ok(4096));
        assert_eq!(parse_u64("0X1000"), Ok(4096));
        assert_eq!(parse_u32("0xffffffff"), Ok(u32::MAX));
        assert!(parse_u32("0x100000000").is_err());
        assert!(parse_u64("").is_err());
        assert!(parse_u64("0x").is_err());
        assert!(parse_u64("-1").is_err());
        assert!(parse_u64("12k").is_err());
    }

    #[test]
    fn a_load_is_an_address_and_a_file() {
        let a = parse_addr_file("0x200000=a.bin").map(|a| (a.addr, a.file));
        assert_eq!(a, Ok((0x20_0000, "a.bin".to_string())));
        assert!(parse_addr_file("0x200000").is_err());
        assert!(parse_addr_file("zz=a.bin").is_err());
    }
}
