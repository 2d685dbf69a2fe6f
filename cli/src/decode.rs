//! `rknpu decode FILE [--json] [--addr ADDR] [--strict]`.

use crate::{Failure, parse_u32};
use rknpu_driver::regcmd;

/// The arguments of `rknpu decode`.
#[derive(clap::Args)]
pub(crate) struct DecodeArgs {
    /// A raw file of little-endian u64 regcmd entries (the bytes the NPU fetches).
    #[arg(value_name = "FILE")]
    file: String,
    /// Print one JSON document (entries, tasks and the summary) instead of text.
    #[arg(long)]
    json: bool,
    /// The device address of the first word: chain addresses are then shown as the tasks
    /// they lead to (text only).
    #[arg(long, value_name = "ADDR", value_parser = parse_u32, conflicts_with = "json")]
    addr: Option<u32>,
    /// Exit 1 when an entry is unknown to the register model.
    #[arg(long)]
    strict: bool,
}

/// Decodes a file of little-endian regcmd entries to text (ending with the summary line)
/// or to one JSON document (holding the summary).
pub(crate) fn run(a: DecodeArgs) -> Result<(), Failure> {
    let file = &a.file;
    let bytes = std::fs::read(file).map_err(|e| Failure(1, format!("{file}: {e}")))?;
    let decoded = regcmd::decode_bytes(&bytes).map_err(|e| Failure(1, format!("{file}: {e}")))?;
    if a.json {
        // The library writes its JSON without serde (its users do not compile serde);
        // reading it back through serde_json here means what the command prints is
        // always one document serde accepts, or an error — never a broken document.
        let text = decoded.to_json();
        let document: &serde_json::value::RawValue = serde_json::from_str(&text)
            .map_err(|e| Failure(1, format!("{file}: the decoder's JSON is invalid: {e}")))?;
        outln!("{}", document.get());
    } else {
        out!("{}", decoded.to_text(a.addr));
    }
    if a.strict && decoded.unknown() > 0 {
        return Err(Failure(
            1,
            format!("{file}: {} unknown entries", decoded.unknown()),
        ));
    }
    Ok(())
}
