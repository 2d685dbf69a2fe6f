//! `rknpu sim run`: a regcmd program on the simulator.

use crate::{AddrFile, Failure, first_body, parse_addr_file, parse_u32, usage};
use rknpu_driver::regcmd;
use rknpu_driver::sim::{CoreRun, Kick, SimError, Simulator};
use rknpu_driver::submit::irq;

/// The subcommands of `rknpu sim`.
#[derive(clap::Subcommand)]
pub(crate) enum SimCommand {
    /// Run a regcmd program on the simulator.
    ///
    /// Print the tasks run, the interrupt status and every lint; exit 0 when the program
    /// completed, 1 on a simulator error, a stall or a status that does not match the
    /// mask.
    Run(SimArgs),
}

/// The arguments of `rknpu sim run`.
#[derive(clap::Args)]
pub(crate) struct SimArgs {
    /// The program: little-endian u64 regcmd entries.
    #[arg(long = "regcmd", value_name = "PROG.bin")]
    prog: String,
    /// The device address the program is placed at (16-byte aligned).
    #[arg(long = "regcmd-addr", value_name = "ADDR", default_value = "0", value_parser = parse_u32)]
    addr: u32,
    /// The first task's body length in words (the vendor kernel's regcfg_amount). Default:
    /// the entries before the first task tail, or the whole file when there is none.
    #[arg(long, value_name = "N", value_parser = parse_u32)]
    task_words: Option<u32>,
    /// The core that runs the program.
    #[arg(long, value_name = "0|1|2", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    core: u8,
    /// Place FILE's bytes at device address ADDR before the run (repeatable; regions must
    /// not overlap each other or the program).
    #[arg(long = "load", value_name = "ADDR=FILE", value_parser = parse_addr_file)]
    loads: Vec<AddrFile>,
    /// After the run, write LEN bytes from device address ADDR to FILE (repeatable); a
    /// range no --load covers is created zeroed before the run.
    #[arg(long = "dump", value_name = "ADDR:LEN=FILE", value_parser = parse_dump)]
    dumps: Vec<Dump>,
    /// The completion interrupt mask (default 0x300, the DPU pair).
    #[arg(long, value_name = "MASK", value_parser = parse_u32)]
    int_mask: Option<u32>,
}

/// A range to write to a file after the run: `ADDR:LEN=FILE`.
#[derive(Clone, Debug)]
pub(crate) struct Dump {
    /// The device address.
    addr: u32,
    /// The length in bytes.
    len: u32,
    /// The file.
    file: String,
}

/// `ADDR:LEN=FILE` (a `clap` value parser).
fn parse_dump(s: &str) -> Result<Dump, String> {
    let bad = || format!("expected ADDR:LEN=FILE, got {s}");
    let (range, f) = s.split_once('=').ok_or_else(bad)?;
    let (a, l) = range.split_once(':').ok_or_else(bad)?;
    Ok(Dump {
        addr: parse_u32(a)?,
        len: parse_u32(l)?,
        file: f.to_string(),
    })
}

/// Runs the program, writes the dumps and prints what the run did; exit 0 when it
/// completed.
pub(crate) fn run(command: SimCommand) -> Result<(), Failure> {
    let SimCommand::Run(a) = command;
    let int_mask = a.int_mask.unwrap_or(irq::DPU);
    let (mut sim, body) = load(&a)?;
    let kick = Kick {
        core: usize::from(a.core),
        regcmd_addr: a.addr,
        regcfg_amount: body,
        task_number: None,
        int_mask,
    };
    let run = sim.kick(&kick).map_err(|e| Failure(1, e.to_string()))?;
    for d in &a.dumps {
        let (at, len, file) = (d.addr, d.len, &d.file);
        let data = sim
            .memory()
            .read_vec(at, len as usize)
            .ok_or_else(|| Failure(1, format!("--dump {at:#x}:{len}: not in one region")))?;
        std::fs::write(file, data).map_err(|e| Failure(1, format!("{file}: {e}")))?;
    }
    report(&run, int_mask)
}

/// A simulator with the program, the loaded files and the dump regions in memory, and
/// the first task's body length.
fn load(a: &SimArgs) -> Result<(Simulator, u32), Failure> {
    let read = |path: &str| std::fs::read(path).map_err(|e| Failure(1, format!("{path}: {e}")));
    let bytes = read(&a.prog)?;
    let words =
        regcmd::words_from_le_bytes(&bytes).map_err(|e| Failure(1, format!("{}: {e}", a.prog)))?;
    let body = match a.task_words {
        Some(n) => n,
        None => u32::try_from(first_body(&words))
            .map_err(|_| Failure(1, format!("{}: too large", a.prog)))?,
    };
    let mut sim = Simulator::new();
    let mem_err = |e: SimError| usage(e.to_string());
    sim.memory_mut().map(a.addr, bytes).map_err(mem_err)?;
    for AddrFile { addr: at, file } in &a.loads {
        let data = read(file)?;
        if data.is_empty() {
            return Err(usage(format!("--load {at:#x}={file}: the file is empty")));
        }
        sim.memory_mut().map(*at, data).map_err(mem_err)?;
    }
    for Dump { addr: at, len, .. } in &a.dumps {
        let covered = sim.memory().read(*at as u64, *len as usize).is_some();
        if !covered {
            sim.memory_mut()
                .map_zeroed(*at, *len as usize)
                .map_err(mem_err)?;
        }
    }
    Ok((sim, body))
}

/// Prints the run; a stall or an incomplete run is a failure.
fn report(run: &CoreRun, int_mask: u32) -> Result<(), Failure> {
    outln!("tasks: {}", run.tasks_run);
    outln!("macs: {}", run.macs);
    outln!("raw_status: {:#x}", run.raw_status);
    outln!(
        "int_status: {:#x} (int_mask {:#x})",
        run.int_status,
        int_mask
    );
    for l in &run.lints {
        outln!("warning: {l}");
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
    outln!("completed");
    Ok(())
}
