//! `rknpu sim run`: a regcmd program on the simulator.

use crate::{Failure, first_body, parse_load, parse_u32, usage};
use rknpu_driver::regcmd;
use rknpu_driver::sim::{CoreRun, Kick, SimError, Simulator};
use rknpu_driver::submit::irq;

/// What `sim run` was asked.
struct SimArgs {
    prog: String,
    addr: u32,
    task_words: Option<u32>,
    core: usize,
    loads: Vec<(u32, String)>,
    dumps: Vec<(u32, u32, String)>,
    int_mask: u32,
}

/// `ADDR:LEN=FILE`.
fn parse_dump(s: &str) -> Option<(u32, u32, String)> {
    let (range, f) = s.split_once('=')?;
    let (a, l) = range.split_once(':')?;
    Some((parse_u32(a)?, parse_u32(l)?, f.to_string()))
}

/// Runs the program, writes the dumps and prints what the run did; exit 0 when it
/// completed.
pub(crate) fn run(args: &[String]) -> Result<(), Failure> {
    let a = parse(args)?;
    let (mut sim, body) = load(&a)?;
    let kick = Kick {
        core: a.core,
        regcmd_addr: a.addr,
        regcfg_amount: body,
        task_number: None,
        int_mask: a.int_mask,
    };
    let run = sim.kick(&kick).map_err(|e| Failure(1, e.to_string()))?;
    for (at, len, file) in &a.dumps {
        let data = sim
            .memory()
            .read_vec(*at, *len as usize)
            .ok_or_else(|| Failure(1, format!("--dump {at:#x}:{len}: not in one region")))?;
        std::fs::write(file, data).map_err(|e| Failure(1, format!("{file}: {e}")))?;
    }
    report(&run, a.int_mask)
}

fn parse(args: &[String]) -> Result<SimArgs, Failure> {
    match args.first().map(String::as_str) {
        Some("run") => {}
        Some(other) => return Err(usage(format!("sim: unknown subcommand {other}"))),
        None => return Err(usage("sim: missing subcommand (run)")),
    }
    let mut prog = None;
    let mut a = SimArgs {
        prog: String::new(),
        addr: 0,
        task_words: None,
        core: 0,
        loads: Vec::new(),
        dumps: Vec::new(),
        int_mask: irq::DPU,
    };
    let mut it = args[1..].iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| usage(format!("{name} needs a value")))
        };
        match arg.as_str() {
            "--regcmd" => prog = Some(value("--regcmd")?),
            "--regcmd-addr" => {
                let v = value("--regcmd-addr")?;
                a.addr = parse_u32(&v)
                    .ok_or_else(|| usage(format!("--regcmd-addr: not a 32-bit address: {v}")))?;
            }
            "--task-words" => {
                let v = value("--task-words")?;
                a.task_words = Some(
                    parse_u32(&v)
                        .ok_or_else(|| usage(format!("--task-words: not a number: {v}")))?,
                );
            }
            "--core" => {
                let v = value("--core")?;
                a.core = match v.as_str() {
                    "0" => 0,
                    "1" => 1,
                    "2" => 2,
                    _ => return Err(usage(format!("--core: 0, 1 or 2, not {v}"))),
                };
            }
            "--load" => {
                let v = value("--load")?;
                a.loads.push(
                    parse_load(&v)
                        .ok_or_else(|| usage(format!("--load: expected ADDR=FILE, got {v}")))?,
                );
            }
            "--dump" => {
                let v = value("--dump")?;
                a.dumps
                    .push(parse_dump(&v).ok_or_else(|| {
                        usage(format!("--dump: expected ADDR:LEN=FILE, got {v}"))
                    })?);
            }
            "--int-mask" => {
                let v = value("--int-mask")?;
                a.int_mask =
                    parse_u32(&v).ok_or_else(|| usage(format!("--int-mask: not a number: {v}")))?;
            }
            s => return Err(usage(format!("sim run: unexpected argument {s}"))),
        }
    }
    a.prog = prog.ok_or_else(|| usage("sim run: missing --regcmd PROG.bin"))?;
    Ok(a)
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
    for (at, file) in &a.loads {
        let data = read(file)?;
        if data.is_empty() {
            return Err(usage(format!("--load {at:#x}={file}: the file is empty")));
        }
        sim.memory_mut().map(*at, data).map_err(mem_err)?;
    }
    for (at, len, _) in &a.dumps {
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
