//! `rknpu trace import | dump | replay`.

use crate::{Failure, first_body, parse_load, parse_u32, usage};
use rknpu_driver::regcmd;
use rknpu_driver::replay::{self, Mode, ReplayOptions};
use rknpu_driver::trace::{self, Trace};

const REPLAY: &str = "trace replay: expected FILE [--mode check|model|hw] [--ulps N]";

fn read(path: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure(1, format!("{path}: {e}")))
}

fn load(path: &str) -> Result<Trace, Failure> {
    Trace::from_bytes(&read(path)?).map_err(|e| Failure(1, format!("{path}: {e}")))
}

/// Dispatches to the subcommand.
pub(crate) fn run(args: &[String]) -> Result<(), Failure> {
    match args.first().map(String::as_str) {
        Some("dump") => {
            let [_, file] = args else {
                return Err(usage("trace dump: expected one FILE"));
            };
            out!("{}", trace::dump(&load(file)?));
            Ok(())
        }
        Some("replay") => replay_file(&args[1..]),
        Some("import") if args.get(1).map(String::as_str) == Some("--capture") => {
            import_capture(args)
        }
        Some("import") => import_raw(&args[1..]),
        _ => Err(usage("trace: import, dump or replay")),
    }
}

/// `trace replay FILE [--mode check|model|hw] [--ulps N]`.
fn replay_file(args: &[String]) -> Result<(), Failure> {
    let Some((file, opts)) = args.split_first() else {
        return Err(usage(REPLAY));
    };
    let (mut mode, mut ulps) = ("model", None);
    for pair in opts.chunks(2) {
        match pair {
            [o, v] if o == "--mode" => mode = v.as_str(),
            [o, v] if o == "--ulps" => {
                ulps = Some(
                    v.parse::<u32>()
                        .map_err(|_| usage(format!("--ulps: {v}")))?,
                )
            }
            _ => return Err(usage(REPLAY)),
        }
    }
    let mode = match mode {
        "check" => Mode::Check,
        "model" => Mode::Model,
        "hw" => Mode::Hw,
        m => {
            return Err(usage(format!("trace replay: mode {m}: check, model or hw")));
        }
    };
    let t = load(file)?;
    let mut options = ReplayOptions::for_trace(&t);
    if let Some(u) = ulps {
        options.tolerance.float_ulps = u;
    }
    let r = replay::replay(&t, mode, &options).map_err(|e| Failure(1, e.to_string()))?;
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

/// `trace import --capture DIR --out FILE` (`args` from `import`).
fn import_capture(args: &[String]) -> Result<(), Failure> {
    let [_, _, dir, o, out] = args else {
        return Err(usage("trace import: --capture DIR --out FILE"));
    };
    if o != "--out" {
        return Err(usage("trace import: --capture DIR --out FILE"));
    }
    let t =
        trace::import_capture(std::path::Path::new(dir)).map_err(|e| Failure(1, e.to_string()))?;
    std::fs::write(out, t.to_bytes()).map_err(|e| Failure(1, format!("{out}: {e}")))?;
    outln!("wrote {out}: {} chunk(s)", t.chunks.len() + 1);
    Ok(())
}

/// `trace import --regcmd PROG.bin ... --out FILE` (`args` after `import`).
fn import_raw(args: &[String]) -> Result<(), Failure> {
    let (mut prog, mut addr, mut words, mut out) = (None, 0u32, None, None);
    let (mut loads, mut expect) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it
            .next()
            .ok_or_else(|| usage(format!("{a} needs a value")))?;
        match a.as_str() {
            "--regcmd" => prog = Some(v.clone()),
            "--regcmd-addr" => {
                addr = parse_u32(v).ok_or_else(|| usage(format!("--regcmd-addr: {v}")))?
            }
            "--task-words" => {
                words = Some(parse_u32(v).ok_or_else(|| usage(format!("--task-words: {v}")))?)
            }
            "--load" | "--expect" => {
                let (at, file) = parse_load(v)
                    .ok_or_else(|| usage(format!("{a}: expected ADDR=FILE, got {v}")))?;
                let target = if a == "--load" {
                    &mut loads
                } else {
                    &mut expect
                };
                target.push((at, read(&file)?));
            }
            "--out" => out = Some(v.clone()),
            s => return Err(usage(format!("trace import: unexpected argument {s}"))),
        }
    }
    let (Some(prog), Some(out)) = (prog, out) else {
        return Err(usage("trace import: --regcmd and --out are required"));
    };
    let bytes = read(&prog)?;
    let entries =
        regcmd::words_from_le_bytes(&bytes).map_err(|e| Failure(1, format!("{prog}: {e}")))?;
    let words = words.unwrap_or(first_body(&entries) as u32);
    let t = trace::import_raw(&bytes, addr, words, &loads, &expect);
    std::fs::write(&out, t.to_bytes()).map_err(|e| Failure(1, format!("{out}: {e}")))?;
    outln!("wrote {out}: {} chunk(s)", t.chunks.len() + 1);
    Ok(())
}
