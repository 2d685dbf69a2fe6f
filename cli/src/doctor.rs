//! `rknpu doctor`: the bring-up ladder of [`rknpu_driver::doctor`], one line per rung.

use crate::{Failure, parse_u64, usage};
use rknpu_driver::doctor::{self, Observer, Options, RungReport};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Prints each rung's line as soon as the rung ends (a hung rung then shows where).
struct PrintRungs;

impl Observer for PrintRungs {
    fn after(&self, report: &RungReport) {
        outln!("{report}");
    }
}

/// `[--device SPEC] [--bundle DIR] [--timeout MS]`.
fn parse(args: &[String]) -> Result<(Option<String>, Options), Failure> {
    let mut device = None;
    let mut opts = Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| usage(format!("doctor: {a} needs a value")))
        };
        match a.as_str() {
            "--device" => device = Some(value()?),
            "--bundle" => opts.bundle = Some(PathBuf::from(value()?)),
            "--timeout" => {
                let v = value()?;
                let ms = parse_u64(&v)
                    .filter(|&ms| ms > 0)
                    .ok_or_else(|| usage(format!("doctor: --timeout {v}: milliseconds, > 0")))?;
                opts.deadline = Duration::from_millis(ms);
            }
            other => return Err(usage(format!("doctor: unexpected argument {other}"))),
        }
    }
    // `auto` probes like no option at all (RKNPU_DEVICE, then the nodes): unlike
    // `rknpu matmul`, the doctor never falls back to the emulated kernel.
    let device = device.filter(|d| d != "auto");
    Ok((device, opts))
}

/// Runs the ladder; exit 0 when every rung passes (or is skipped), 1 at the first failure
/// or when the bundle could not be written.
pub(crate) fn run(args: &[String]) -> Result<(), Failure> {
    let (device, mut opts) = parse(args)?;
    opts.observer = Some(Arc::new(PrintRungs));
    let report = doctor::run_spec(device.as_deref(), &opts);
    outln!("{}", report.summary());
    if let Some(dir) = &opts.bundle {
        if report.bundle_errors.is_empty() {
            outln!("bundle: {}", dir.display());
        } else {
            let errors: Vec<String> = report.bundle_errors.iter().map(|e| e.to_string()).collect();
            return Err(Failure(
                1,
                format!("doctor: the bundle is incomplete: {}", errors.join("; ")),
            ));
        }
    }
    match report.failure() {
        Some((rung, _)) => Err(Failure(1, format!("doctor: {rung} failed"))),
        None => Ok(()),
    }
}
