//! `rknpu trace import | dump | replay`.

use crate::{AddrFile, Failure, first_body, parse_addr_file, parse_u32, usage};
use rknpu_driver::regcmd;
use rknpu_driver::replay::{self, Mode, ReplayOptions};
use rknpu_driver::trace::{self, Trace};
use std::io::Write as _;

fn read(path: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure(1, format!("{path}: {e}")))
}

/// Reads a trace chunk by chunk from its file: the file is never held alongside the
/// parsed trace.
fn load(path: &str) -> Result<Trace, Failure> {
    let io = |e: std::io::Error| Failure(1, format!("{path}: {e}"));
    let f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut r = std::io::BufReader::with_capacity(64 << 10, f);
    Trace::read_from(&mut r, len).map_err(|e| Failure(1, format!("{path}: {e}")))
}

/// The subcommands of `rknpu trace`.
#[derive(clap::Subcommand)]
pub(crate) enum TraceCommand {
    /// Build a trace from a program and its buffers, or from a capture folder.
    ///
    /// With --regcmd: from the inputs of `sim run` and the contents expected after the
    /// run. With --capture: from a capture folder, one submission per chain.
    Import(ImportArgs),
    /// Print a trace as stable text, each task's list decoded.
    Dump {
        /// The trace.
        #[arg(value_name = "FILE")]
        file: String,
    },
    /// Check or run a trace and compare it with what was recorded.
    ///
    /// check: decode and check every task and relocation; model (the default): run on the
    /// simulator and compare completions and outputs; hw: the same on the device. Exit 0
    /// on a match, 1 on a mismatch (with where).
    Replay(ReplayArgs),
}

/// The arguments of `rknpu trace import`.
#[derive(clap::Args)]
pub(crate) struct ImportArgs {
    /// The program: little-endian u64 regcmd entries.
    #[arg(long, value_name = "PROG.bin", required_unless_present = "capture")]
    regcmd: Option<String>,
    /// The device address the program is placed at (default 0).
    #[arg(long, value_name = "ADDR", value_parser = parse_u32)]
    regcmd_addr: Option<u32>,
    /// The first task's body length in words, as for `sim run`.
    #[arg(long, value_name = "N", value_parser = parse_u32)]
    task_words: Option<u32>,
    /// An input: FILE's bytes at device address ADDR (repeatable).
    #[arg(long = "load", value_name = "ADDR=FILE", value_parser = parse_addr_file)]
    loads: Vec<AddrFile>,
    /// The contents expected at ADDR after the run (repeatable).
    #[arg(long = "expect", value_name = "ADDR=FILE", value_parser = parse_addr_file)]
    expects: Vec<AddrFile>,
    /// A capture folder (task-NN.regcmd.bin or regcmd.bin, buf-ADDR.bin, meta.json)
    /// instead of --regcmd and its options.
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with_all = ["regcmd", "regcmd_addr", "task_words", "loads", "expects"]
    )]
    capture: Option<String>,
    /// The trace to write.
    #[arg(long, value_name = "FILE")]
    out: String,
}

/// How `trace replay` runs a trace.
#[derive(Clone, Copy, clap::ValueEnum)]
enum ModeArg {
    /// Decode and check every task and relocation, running nothing.
    Check,
    /// Run each submission on the simulator and compare completions and outputs.
    Model,
    /// Run on the device RKNPU_DEVICE or probing finds, buffers relocated.
    Hw,
}

/// The arguments of `rknpu trace replay`.
#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    /// The trace.
    #[arg(value_name = "FILE")]
    file: String,
    /// How to replay it.
    #[arg(long, value_enum, default_value = "model")]
    mode: ModeArg,
    /// How many ULPs fp16, bf16 and fp32 outputs may differ (default 0 for traces from
    /// the emulated kernel, 2 otherwise).
    #[arg(long, value_name = "N")]
    ulps: Option<u32>,
}

/// Runs the subcommand.
pub(crate) fn run(command: TraceCommand) -> Result<(), Failure> {
    match command {
        TraceCommand::Dump { file } => {
            // Chunk by chunk: the text is never held whole.
            let t = load(&file)?;
            let mut w = std::io::BufWriter::new(std::io::stdout().lock());
            if trace::write_dump(&t, &mut w)
                .and_then(|()| w.flush())
                .is_err()
            {
                // A closed pipe (`| head`) ends the output, as `out!` does.
                std::process::exit(0);
            }
            Ok(())
        }
        TraceCommand::Replay(a) => replay_file(a),
        TraceCommand::Import(a) => match &a.capture {
            Some(dir) => import_capture(dir, &a.out),
            None => import_raw(a),
        },
    }
}

/// `trace replay FILE [--mode check|model|hw] [--ulps N]`.
fn replay_file(a: ReplayArgs) -> Result<(), Failure> {
    let mode = match a.mode {
        ModeArg::Check => Mode::Check,
        ModeArg::Model => Mode::Model,
        ModeArg::Hw => Mode::Hw,
    };
    let file = &a.file;
    let io = |e: std::io::Error| Failure(1, format!("{file}: {e}"));
    let bad = |e: &dyn std::fmt::Display| Failure(1, format!("{file}: {e}"));
    let f = std::fs::File::open(file).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut reader = std::io::BufReader::with_capacity(64 << 10, f);
    // Chunk by chunk: the replay never holds the whole trace.
    let mut chunks = trace::ChunkReader::new(&mut reader, len).map_err(|e| bad(&e))?;
    let mut options = ReplayOptions::for_header(chunks.header());
    if let Some(u) = a.ulps {
        options.tolerance.float_ulps = u;
    }
    let r = match replay::replay_stream(&mut chunks, mode, &options) {
        Ok(r) => r,
        Err(replay::StreamError::Trace(e)) => return Err(bad(&e)),
        Err(e) => return Err(Failure(1, e.to_string())),
    };
    outln!(
        "{} submission(s), {} task(s) checked, {} recorded completion(s) and output(s) compared",
        r.submits,
        r.tasks,
        r.compared
    );
    for l in &r.lints {
        outln!("warning: {l}");
    }
    if !r.is_match() {
        return Err(Failure(
            1,
            format!("mismatch:\n  {}", r.mismatches.join("\n  ")),
        ));
    }
    outln!("match");
    Ok(())
}

/// `trace import --capture DIR --out FILE`.
fn import_capture(dir: &str, out: &str) -> Result<(), Failure> {
    let t =
        trace::import_capture(std::path::Path::new(dir)).map_err(|e| Failure(1, e.to_string()))?;
    std::fs::write(out, t.to_bytes()).map_err(|e| Failure(1, format!("{out}: {e}")))?;
    outln!("wrote {out}: {} chunk(s)", t.chunks.len() + 1);
    Ok(())
}

/// `trace import --regcmd PROG.bin ... --out FILE`.
fn import_raw(a: ImportArgs) -> Result<(), Failure> {
    let Some(prog) = a.regcmd else {
        return Err(usage("trace import: --regcmd PROG.bin or --capture DIR"));
    };
    let out = a.out;
    let read_all = |files: &[AddrFile]| -> Result<Vec<(u32, Vec<u8>)>, Failure> {
        files.iter().map(|f| Ok((f.addr, read(&f.file)?))).collect()
    };
    let (loads, expect) = (read_all(&a.loads)?, read_all(&a.expects)?);
    let bytes = read(&prog)?;
    let entries =
        regcmd::words_from_le_bytes(&bytes).map_err(|e| Failure(1, format!("{prog}: {e}")))?;
    let words = match a.task_words {
        Some(n) => n,
        None => u32::try_from(first_body(&entries))
            .map_err(|_| Failure(1, format!("{prog}: too large")))?,
    };
    let addr = a.regcmd_addr.unwrap_or(0);
    let t = trace::import_raw(&bytes, addr, words, &loads, &expect);
    std::fs::write(&out, t.to_bytes()).map_err(|e| Failure(1, format!("{out}: {e}")))?;
    outln!("wrote {out}: {} chunk(s)", t.chunks.len() + 1);
    Ok(())
}
