//! `rknpu`: the command-line tool of rknpu-driver (see docs/cli.md).

use rknpu_driver::regcmd;
use std::process::ExitCode;

const USAGE: &str = "\
usage: rknpu <command> [options]

commands:
  decode FILE [--json] [--addr ADDR] [--strict]
        Decode a raw file of little-endian u64 regcmd entries. --addr gives the device
        address of the first word (resolves chain addresses to tasks). --strict exits 1
        when an entry is unknown. The last line is `summary: <N> entries, <U> unknown`.
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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("decode") => cmd_decode(&args[1..]),
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
