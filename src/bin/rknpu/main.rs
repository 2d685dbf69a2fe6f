//! `rknpu`: the command-line tool of rknpu-driver (see docs/cli.md).

use rknpu_driver::regcmd;
use rknpu_driver::sim::{Kick, Simulator};
use std::process::ExitCode;

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
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn cmd_decode(args: &[String]) -> Result<(), Failure> {
    let mut file = None;
    let mut json = false;
    let mut strict = false;
    let mut addr = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--strict" => strict = true,
            "--addr" => {
                let v = it.next().ok_or_else(|| usage("--addr needs a value"))?;
                addr = Some(
                    parse_u32(v)
                        .ok_or_else(|| usage(format!("--addr: not a 32-bit address: {v}")))?,
                );
            }
            s if s.starts_with('-') => return Err(usage(format!("decode: unknown option {s}"))),
            s if file.is_none() => file = Some(s.to_string()),
            s => return Err(usage(format!("decode: unexpected argument {s}"))),
        }
    }
    let file = file.ok_or_else(|| usage("decode: missing FILE"))?;
    let bytes = std::fs::read(&file).map_err(|e| Failure(1, format!("{file}: {e}")))?;
    let decoded = regcmd::decode_bytes(&bytes).map_err(|e| Failure(1, format!("{file}: {e}")))?;
    if json {
        println!("{}", decoded.to_json());
        println!(
            "summary: {} entries, {} unknown",
            decoded.entries.len(),
            decoded.unknown()
        );
    } else {
        print!("{}", decoded.to_text(addr));
    }
    if strict && decoded.unknown() > 0 {
        return Err(Failure(
            1,
            format!("{file}: {} unknown entries", decoded.unknown()),
        ));
    }
    Ok(())
}

/// `ADDR=FILE`.
fn parse_load(s: &str) -> Option<(u32, String)> {
    let (a, f) = s.split_once('=')?;
    Some((parse_u32(a)?, f.to_string()))
}

/// `ADDR:LEN=FILE`.
fn parse_dump(s: &str) -> Option<(u32, u32, String)> {
    let (range, f) = s.split_once('=')?;
    let (a, l) = range.split_once(':')?;
    Some((parse_u32(a)?, parse_u32(l)?, f.to_string()))
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

fn cmd_sim(args: &[String]) -> Result<(), Failure> {
    match args.first().map(String::as_str) {
        Some("run") => {}
        Some(other) => return Err(usage(format!("sim: unknown subcommand {other}"))),
        None => return Err(usage("sim: missing subcommand (run)")),
    }
    let mut prog = None;
    let mut addr = 0u32;
    let mut task_words = None;
    let mut core = 0usize;
    let mut loads = Vec::new();
    let mut dumps = Vec::new();
    let mut int_mask = rknpu_driver::sim::irq::DPU;
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| usage(format!("{name} needs a value")))
        };
        match a.as_str() {
            "--regcmd" => prog = Some(value("--regcmd")?),
            "--regcmd-addr" => {
                let v = value("--regcmd-addr")?;
                addr = parse_u32(&v)
                    .ok_or_else(|| usage(format!("--regcmd-addr: not a 32-bit address: {v}")))?;
            }
            "--task-words" => {
                let v = value("--task-words")?;
                task_words = Some(
                    parse_u32(&v)
                        .ok_or_else(|| usage(format!("--task-words: not a number: {v}")))?,
                );
            }
            "--core" => {
                let v = value("--core")?;
                core = match v.as_str() {
                    "0" => 0,
                    "1" => 1,
                    "2" => 2,
                    _ => return Err(usage(format!("--core: 0, 1 or 2, not {v}"))),
                };
            }
            "--load" => {
                let v = value("--load")?;
                loads.push(
                    parse_load(&v)
                        .ok_or_else(|| usage(format!("--load: expected ADDR=FILE, got {v}")))?,
                );
            }
            "--dump" => {
                let v = value("--dump")?;
                dumps
                    .push(parse_dump(&v).ok_or_else(|| {
                        usage(format!("--dump: expected ADDR:LEN=FILE, got {v}"))
                    })?);
            }
            "--int-mask" => {
                let v = value("--int-mask")?;
                int_mask =
                    parse_u32(&v).ok_or_else(|| usage(format!("--int-mask: not a number: {v}")))?;
            }
            s => return Err(usage(format!("sim run: unexpected argument {s}"))),
        }
    }
    let prog = prog.ok_or_else(|| usage("sim run: missing --regcmd PROG.bin"))?;
    let read = |path: &str| std::fs::read(path).map_err(|e| Failure(1, format!("{path}: {e}")));
    let bytes = read(&prog)?;
    let words =
        regcmd::words_from_le_bytes(&bytes).map_err(|e| Failure(1, format!("{prog}: {e}")))?;
    let body = match task_words {
        Some(n) => n,
        None => u32::try_from(first_body(&words))
            .map_err(|_| Failure(1, format!("{prog}: too large")))?,
    };
    let mut sim = Simulator::new();
    let mem_err = |e: rknpu_driver::sim::SimError| usage(e.to_string());
    sim.memory_mut().map(addr, bytes).map_err(mem_err)?;
    for (a, file) in &loads {
        let data = read(file)?;
        if data.is_empty() {
            return Err(usage(format!("--load {a:#x}={file}: the file is empty")));
        }
        sim.memory_mut().map(*a, data).map_err(mem_err)?;
    }
    for (a, len, _) in &dumps {
        let covered = sim.memory().read(*a as u64, *len as usize).is_some();
        if !covered {
            sim.memory_mut()
                .map_zeroed(*a, *len as usize)
                .map_err(mem_err)?;
        }
    }
    let kick = Kick {
        core,
        regcmd_addr: addr,
        regcfg_amount: body,
        task_number: None,
        int_mask,
    };
    let run = sim.kick(&kick).map_err(|e| Failure(1, e.to_string()))?;
    for (a, len, file) in &dumps {
        let data = sim
            .memory()
            .read_vec(*a, *len as usize)
            .ok_or_else(|| Failure(1, format!("--dump {a:#x}:{len}: not in one region")))?;
        std::fs::write(file, data).map_err(|e| Failure(1, format!("{file}: {e}")))?;
    }
    println!("tasks: {}", run.tasks_run);
    println!("macs: {}", run.macs);
    println!("raw_status: {:#x}", run.raw_status);
    println!(
        "int_status: {:#x} (int_mask {:#x})",
        run.int_status, int_mask
    );
    for l in &run.lints {
        println!("warning: {l}");
    }
    if let Some(s) = &run.stall {
        return Err(Failure(1, format!("{}: stalls: {}", s.at, s.why)));
    }
    if !run.completed {
        return Err(Failure(
            1,
            format!(
                "not completed: int_status {:#x} does not match int_mask {int_mask:#x}",
                run.int_status
            ),
        ));
    }
    println!("completed");
    Ok(())
}

fn cmd_info(args: &[String]) -> Result<(), Failure> {
    if let Some(a) = args.first() {
        return Err(usage(format!("info: unexpected argument {a}")));
    }
    let dev = rknpu_driver::device::Device::open().map_err(|e| Failure(1, e.to_string()))?;
    let i = dev.info();
    println!(
        "interface: {}",
        match i.interface {
            rknpu_driver::device::Interface::Vendor => "vendor rknpu",
            rknpu_driver::device::Interface::Rocket => "rocket",
        }
    );
    println!(
        "node: {}{}",
        i.node,
        if i.emulated { " (emulated)" } else { "" }
    );
    println!(
        "driver: {} {}.{}.{}",
        i.driver, i.version.0, i.version.1, i.version.2
    );
    if !i.date.is_empty() {
        println!("date: {}", i.date);
    }
    println!("cores: {}", i.cores);
    println!("iommu: {}", if i.iommu { "enabled" } else { "disabled" });
    if let Some(f) = i.freq_hz {
        println!("clock: {} MHz", f / 1_000_000);
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("decode") => cmd_decode(&args[1..]),
        Some("sim") => cmd_sim(&args[1..]),
        Some("info") => cmd_info(&args[1..]),
        Some("help") | Some("--help") | Some("-h") => {
            println!("{USAGE}");
            Ok(())
        }
        Some("--version") | Some("-V") => {
            println!("rknpu {}", env!("CARGO_PKG_VERSION"));
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
