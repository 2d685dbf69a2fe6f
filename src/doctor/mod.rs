//! The bring-up ladder behind `rknpu doctor`: for the first run on a new board or kernel.
//!
//! It probes the node and the driver, checks that buffers allocate, map, sync and free
//! with their contents intact, then runs programs from the smallest to the largest, each
//! job with a deadline, and stops at the first rung that fails with a [`Diagnosis`]:
//! what was expected, what the kernel or the NPU gave instead, and what to check. The
//! rungs, in order, are the variants of [`Rung`] ([`Rung::ALL`]).
//!
//! With [`Options::bundle`] it also writes what a bug report needs into a folder:
//! `device.txt` (the driver, its version, the nodes present), one trace per rung
//! (`NN-<rung>.rknputrace`, docs/trace-format.md) and `report.txt`.
//!
//! ```
//! use rknpu_driver::device::Device;
//! use rknpu_driver::doctor::{self, Options};
//!
//! let dev = Device::open_spec("emu")?;
//! let report = doctor::run(&dev, &Options::default());
//! assert!(report.passed(), "{report}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Tests inject the fault each rung exists to catch through an [`Observer`] (which sees
//! every rung before it runs, with the device, so it can call
//! [`crate::emu::EmuKernel::inject`]) or [`Options::corrupt`].

mod bundle;
mod check;
mod diagnosis;
mod grid;
mod rungs;

pub use bundle::BundleError;
pub use diagnosis::{Diagnosis, Finding, Mismatch};

use crate::device::{Device, DeviceInfo};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One step of the ladder, from the smallest to the largest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Rung {
    /// The node opens, the driver answers its version query and is one the library speaks.
    Probe,
    /// Buffers allocate, map, sync and free; bytes survive write → device → read; nothing
    /// is left behind.
    Buffers,
    /// The board-validated worked int8 example (4×32×32, one task) computes the CPU's
    /// product.
    WorkedExample,
    /// A single-task int8 matmul.
    SingleInt8,
    /// A single-task int4 matmul.
    SingleInt4,
    /// A single-task fp16 matmul (fp32 result).
    SingleFp16,
    /// Three tasks chained through their tails in one submission.
    Chained,
    /// Planned matmuls (int8, int4, fp16) through the executor on one core.
    Grid1,
    /// Planned matmuls on two cores.
    Grid2,
    /// Planned matmuls on three cores.
    Grid3,
}

impl Rung {
    /// Every rung, in the order the ladder climbs them.
    pub const ALL: [Rung; 10] = [
        Rung::Probe,
        Rung::Buffers,
        Rung::WorkedExample,
        Rung::SingleInt8,
        Rung::SingleInt4,
        Rung::SingleFp16,
        Rung::Chained,
        Rung::Grid1,
        Rung::Grid2,
        Rung::Grid3,
    ];

    /// The rung's short name, as printed and as used in bundle file names.
    pub fn name(self) -> &'static str {
        match self {
            Rung::Probe => "probe",
            Rung::Buffers => "buffers",
            Rung::WorkedExample => "worked-example",
            Rung::SingleInt8 => "matmul-int8",
            Rung::SingleInt4 => "matmul-int4",
            Rung::SingleFp16 => "matmul-fp16",
            Rung::Chained => "chained",
            Rung::Grid1 => "grid-1-core",
            Rung::Grid2 => "grid-2-cores",
            Rung::Grid3 => "grid-3-cores",
        }
    }

    /// What passing the rung shows.
    pub fn checks(self) -> &'static str {
        match self {
            Rung::Probe => {
                "the node opens, the driver reports its name and version, and the library speaks it"
            }
            Rung::Buffers => {
                "buffers allocate, map, sync and free; bytes written read back the same; no buffer or mapping is left"
            }
            Rung::WorkedExample => {
                "the board-validated worked int8 program (one task) runs and computes the CPU's product"
            }
            Rung::SingleInt8 => {
                "a single-task int8 matmul built by the kernel generator matches the CPU"
            }
            Rung::SingleInt4 => "a single-task int4 matmul matches the CPU",
            Rung::SingleFp16 => "a single-task fp16 matmul matches the CPU within rounding",
            Rung::Chained => {
                "three tasks chained through their tails run in one submission and match the CPU"
            }
            Rung::Grid1 => {
                "planned int8, int4 and fp16 matmuls through the executor match the CPU on one core"
            }
            Rung::Grid2 => "the same on two cores (skipped where the driver picks cores itself)",
            Rung::Grid3 => "the same on three cores (skipped where the driver picks cores itself)",
        }
    }
}

impl fmt::Display for Rung {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Sees the ladder as it climbs: before each rung runs (with the device: tests inject
/// faults into an emulated kernel here) and after (the `rknpu doctor` command prints each
/// rung's line as soon as it is known). Both do nothing by default.
pub trait Observer: Send + Sync {
    /// Called before `rung` runs on `dev` (not for [`Rung::Probe`] when the device did
    /// not open).
    fn before(&self, rung: Rung, dev: &Device) {
        let _ = (rung, dev);
    }

    /// Called when a rung has passed, failed or been skipped.
    fn after(&self, report: &RungReport) {
        let _ = report;
    }
}

/// How the ladder runs.
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    /// The timeout of every job the ladder submits (the kernel's timeout on vendor, the
    /// wait's deadline on rocket). Default 2 s.
    pub deadline: Duration,
    /// Write a bug-report bundle into this folder (created if missing).
    pub bundle: Option<PathBuf>,
    /// Corrupt one input of this rung after its CPU reference is computed (A\[0\]\[0\] of
    /// a matmul; for buffers, one byte between the write and the read-back; the probe has
    /// none): a self-test showing that the rung catches wrong data and what it reports.
    pub corrupt: Option<Rung>,
    /// Sees each rung before and after it runs.
    pub observer: Option<Arc<dyn Observer>>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            deadline: Duration::from_secs(2),
            bundle: None,
            corrupt: None,
            observer: None,
        }
    }
}

impl Options {
    /// These options with a job timeout of `deadline`.
    pub fn with_deadline(mut self, deadline: Duration) -> Options {
        self.deadline = deadline;
        self
    }

    /// These options writing a bug-report bundle into `dir`.
    pub fn with_bundle(mut self, dir: impl Into<PathBuf>) -> Options {
        self.bundle = Some(dir.into());
        self
    }

    /// These options corrupting one input of `rung` (the self-test of [`Options::corrupt`]).
    pub fn with_corrupt(mut self, rung: Rung) -> Options {
        self.corrupt = Some(rung);
        self
    }

    /// These options with `observer` seeing each rung.
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Options {
        self.observer = Some(observer);
        self
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("deadline", &self.deadline)
            .field("bundle", &self.bundle)
            .field("corrupt", &self.corrupt)
            .field("observer", &self.observer.as_ref().map(|_| "..."))
            .finish()
    }
}

/// How a rung ended.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Status {
    /// It passed.
    Ok,
    /// It was not run on this device, for the reason given.
    Skipped {
        /// Why (e.g. the driver places jobs on cores itself).
        why: String,
    },
    /// It failed: the ladder stops here.
    Failed(Box<Diagnosis>),
}

/// One rung's outcome.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RungReport {
    /// Which rung.
    pub rung: Rung,
    /// Passed, skipped or failed.
    pub status: Status,
    /// Wall time the rung took.
    pub elapsed: Duration,
    /// What it ran (shapes, device), when it ran.
    pub detail: String,
}

impl fmt::Display for RungReport {
    /// `ok    matmul-int8        1.2 ms  8x64x32 int8, 1 task`; a failure is followed by
    /// its diagnosis, indented.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.elapsed.as_secs_f64() * 1e3;
        let (word, text) = match &self.status {
            Status::Ok => ("ok", self.detail.clone()),
            Status::Skipped { why } => ("skip", why.clone()),
            Status::Failed(_) => ("FAIL", self.detail.clone()),
        };
        write!(f, "{word:<5} {:<15} {ms:>9.1} ms  {text}", self.rung.name())?;
        if let Status::Failed(d) = &self.status {
            write!(f, "\n{d}")?;
        }
        Ok(())
    }
}

/// What the ladder found.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Report {
    /// The device, when it opened.
    pub device: Option<DeviceInfo>,
    /// The rungs run (and skipped), in order, up to the first failure.
    pub rungs: Vec<RungReport>,
    /// What could not be written into the bundle folder (empty without a bundle).
    pub bundle_errors: Vec<BundleError>,
}

impl Report {
    /// Whether every rung passed or was skipped (and the ladder reached its top).
    pub fn passed(&self) -> bool {
        self.rungs.len() == Rung::ALL.len() && self.failure().is_none()
    }

    /// The rung that failed and its diagnosis.
    pub fn failure(&self) -> Option<(Rung, &Diagnosis)> {
        self.rungs.iter().find_map(|r| match &r.status {
            Status::Failed(d) => Some((r.rung, &**d)),
            _ => None,
        })
    }

    /// The report of `rung`, if it was reached.
    pub fn rung(&self, rung: Rung) -> Option<&RungReport> {
        self.rungs.iter().find(|r| r.rung == rung)
    }

    /// The closing line: `all 10 rungs passed (2 skipped)` or `stopped at RUNG: ...`.
    pub fn summary(&self) -> String {
        let skipped = self
            .rungs
            .iter()
            .filter(|r| matches!(r.status, Status::Skipped { .. }))
            .count();
        match self.failure() {
            Some((rung, _)) => format!(
                "stopped at {rung} (rung {} of {}); the rungs above it were not run",
                self.rungs.len(),
                Rung::ALL.len()
            ),
            None if skipped > 0 => {
                format!("all {} rungs passed ({skipped} skipped)", Rung::ALL.len())
            }
            None => format!("all {} rungs passed", Rung::ALL.len()),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.device {
            Some(info) => writeln!(f, "device: {info}")?,
            None => writeln!(f, "device: none opened")?,
        }
        for r in &self.rungs {
            writeln!(f, "{r}")?;
        }
        write!(f, "{}", self.summary())
    }
}

/// Opens the device `spec` names (as [`Device::open_spec`]; `None`: as [`Device::open`],
/// from `RKNPU_DEVICE` or by probing) and runs the ladder on it. A device that does not
/// open fails [`Rung::Probe`].
pub fn run_spec(spec: Option<&str>, opts: &Options) -> Report {
    let t0 = Instant::now();
    let opened = match spec {
        Some(s) => Device::open_spec(s),
        None => Device::open(),
    };
    match opened {
        Ok(dev) => run(&dev, opts),
        Err(e) => {
            let diagnosis = Diagnosis::new(
                Rung::Probe,
                "an rknpu (0.9.6 or later 0.9.x) or rocket DRM node that opens",
                Finding::Device(e),
                None,
            );
            let report = RungReport {
                rung: Rung::Probe,
                status: Status::Failed(Box::new(diagnosis)),
                elapsed: t0.elapsed(),
                detail: spec.map_or_else(|| "probing".into(), |s| format!("opening {s}")),
            };
            if let Some(o) = &opts.observer {
                o.after(&report);
            }
            let mut out = Report {
                device: None,
                rungs: vec![report],
                bundle_errors: Vec::new(),
            };
            if let Some(dir) = &opts.bundle {
                out.bundle_errors = bundle::write_closing(dir, None, &out);
            }
            out
        }
    }
}

/// Runs the ladder on `dev`, stopping at the first rung that fails.
pub fn run(dev: &Device, opts: &Options) -> Report {
    let mut report = Report {
        device: Some(dev.info().clone()),
        rungs: Vec::new(),
        bundle_errors: Vec::new(),
    };
    if let Some(dir) = &opts.bundle {
        report.bundle_errors.extend(bundle::prepare(dir, dev));
    }
    for (i, &rung) in Rung::ALL.iter().enumerate() {
        if let Some(o) = &opts.observer {
            o.before(rung, dev);
        }
        let trace = opts
            .bundle
            .as_ref()
            .filter(|_| rung != Rung::Probe)
            .map(|dir| {
                let path = dir.join(format!("{i:02}-{rung}.rknputrace"));
                if let Err(e) = dev.record_to_file(&path) {
                    report.bundle_errors.push(BundleError::new(&path, e));
                }
                path
            });
        let t0 = Instant::now();
        let outcome = rungs::climb(rung, dev, opts);
        let elapsed = t0.elapsed();
        if let Some(path) = trace
            && let Err(e) = dev.stop_recording()
        {
            report.bundle_errors.push(BundleError::new(&path, e));
        }
        let (status, detail) = match outcome {
            rungs::Outcome::Passed(detail) => (Status::Ok, detail),
            rungs::Outcome::Skipped(why) => (Status::Skipped { why }, String::new()),
            rungs::Outcome::Failed(detail, d) => (Status::Failed(d), detail),
        };
        let r = RungReport {
            rung,
            status,
            elapsed,
            detail,
        };
        if let Some(o) = &opts.observer {
            o.after(&r);
        }
        let failed = matches!(r.status, Status::Failed(_));
        report.rungs.push(r);
        if failed {
            break;
        }
    }
    if let Some(dir) = &opts.bundle {
        let errors = bundle::write_closing(dir, Some(dev), &report);
        report.bundle_errors.extend(errors);
    }
    report
}

#[cfg(test)]
mod tests;
