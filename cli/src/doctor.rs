//! `rknpu doctor`: the bring-up ladder of [`rknpu_driver::doctor`], one line per rung.

use crate::{Failure, parse_u64};
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

/// The arguments of `rknpu doctor`.
#[derive(clap::Args)]
pub(crate) struct DoctorArgs {
    /// The device, as RKNPU_DEVICE names it: auto, emu, emu:rocket, emu:vendor-0.9.6 or a
    /// node path. Without it, or with auto: RKNPU_DEVICE, else probing (never the
    /// emulated kernel as a fallback).
    #[arg(long, value_name = "DEVICE")]
    device: Option<String>,
    /// Also write device.txt, a trace per rung and report.txt to DIR (created if
    /// missing), for a bug report.
    #[arg(long, value_name = "DIR")]
    bundle: Option<PathBuf>,
    /// Every job's deadline in milliseconds (default 2000).
    #[arg(long, value_name = "MS", value_parser = parse_timeout)]
    timeout: Option<Duration>,
}

/// A positive number of milliseconds (a `clap` value parser).
fn parse_timeout(s: &str) -> Result<Duration, String> {
    match parse_u64(s)? {
        0 => Err("the deadline is a positive number of milliseconds".into()),
        ms => Ok(Duration::from_millis(ms)),
    }
}

/// Runs the ladder; exit 0 when every rung passes (or is skipped), 1 at the first failure
/// or when the bundle could not be written.
pub(crate) fn run(a: DoctorArgs) -> Result<(), Failure> {
    let mut opts = Options::default();
    if let Some(deadline) = a.timeout {
        opts.deadline = deadline;
    }
    opts.bundle = a.bundle;
    opts.observer = Some(Arc::new(PrintRungs));
    // `auto` probes like no option at all (RKNPU_DEVICE, then the nodes): unlike
    // `rknpu matmul`, the doctor never falls back to the emulated kernel.
    let device = a.device.filter(|d| d != "auto");
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
