//! `rknpu decode FILE [--json] [--addr ADDR] [--strict]`.

use crate::{Failure, parse_u32, usage};
use rknpu_driver::regcmd;

/// Decodes a file of little-endian regcmd entries to text or JSON.
pub(crate) fn run(args: &[String]) -> Result<(), Failure> {
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
        outln!("{}", decoded.to_json());
        outln!(
            "summary: {} entries, {} unknown",
            decoded.entries.len(),
            decoded.unknown()
        );
    } else {
        out!("{}", decoded.to_text(addr));
    }
    if strict && decoded.unknown() > 0 {
        return Err(Failure(
            1,
            format!("{file}: {} unknown entries", decoded.unknown()),
        ));
    }
    Ok(())
}
