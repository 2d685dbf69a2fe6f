//! What a failed rung reports: what was expected, what came back, and what to check.

use super::Rung;
use crate::Error;
use crate::OsError;
use crate::device::JobResult;
use std::fmt;

/// Where a result first differs from the CPU's.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mismatch {
    /// What was compared (`C`, `buffer`, `C of int8 16x4500x96`).
    pub what: String,
    /// Row-major index of the first differing element.
    pub index: usize,
    /// Its row (0 for one-dimensional data).
    pub row: usize,
    /// Its column.
    pub col: usize,
    /// The CPU's value there.
    pub expected: String,
    /// The device's value there.
    pub got: String,
    /// Elements that differ.
    pub differing: usize,
    /// Elements compared.
    pub total: usize,
    /// Whether every element still holds what the buffer held before the job (the fill
    /// pattern, or zeros for buffers the ladder cannot fill): the NPU wrote nothing.
    pub unwritten: bool,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}[{}][{}] = {} where the CPU has {} (the first of {} differing elements of {})",
            self.what, self.row, self.col, self.got, self.expected, self.differing, self.total
        )?;
        if self.unwritten {
            write!(
                f,
                "; every element still holds what was there before the job: nothing was written"
            )?;
        }
        Ok(())
    }
}

/// What a rung found instead of what it expected.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Finding {
    /// The device layer returned an error (a timeout carries the task counter and the
    /// interrupt status the kernel reported).
    Device(Error),
    /// The ladder could not build its own program or pack its data (a library bug).
    Build(String),
    /// The job completed but the kernel counted a different number of tasks.
    TaskCounter {
        /// Tasks submitted.
        expected: u32,
        /// Tasks the kernel reports completed.
        got: u32,
    },
    /// The result differs from the CPU's.
    Mismatch(Mismatch),
    /// Buffers or mappings outlived the rung.
    Leak {
        /// Buffer objects left.
        buffers: usize,
        /// CPU mappings left.
        mappings: usize,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Device(e) => write!(f, "{e}"),
            Finding::Build(what) => write!(f, "the ladder could not build its program: {what}"),
            Finding::TaskCounter { expected, got } => write!(
                f,
                "the job completed with task counter {got}, for {expected} task(s) submitted"
            ),
            Finding::Mismatch(m) => write!(f, "{m}"),
            Finding::Leak { buffers, mappings } => write!(
                f,
                "{buffers} buffer(s) and {mappings} mapping(s) outlived the rung"
            ),
        }
    }
}

/// Why a rung failed: the step, what it expected, what it got, the job's counters where
/// a job ran, and what to check.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Diagnosis {
    /// The rung that failed.
    pub rung: Rung,
    /// What the rung expected.
    pub expected: String,
    /// What it found instead.
    pub finding: Finding,
    /// The result of the job, when it completed (task counter, interrupt status).
    pub job: Option<JobResult>,
    /// What to check.
    pub hint: String,
}

impl Diagnosis {
    /// A diagnosis of `finding` at `rung`, with the hint that fits it.
    pub fn new(
        rung: Rung,
        expected: impl Into<String>,
        finding: Finding,
        job: Option<JobResult>,
    ) -> Diagnosis {
        let hint = hint(rung, &finding);
        Diagnosis {
            rung,
            expected: expected.into(),
            finding,
            job,
            hint,
        }
    }
}

impl fmt::Display for Diagnosis {
    /// Indented lines: `expected:`, `got:`, `job:` (when a job completed), `hint:`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "      expected: {}", self.expected)?;
        write!(f, "      got:      {}", self.finding)?;
        if let Some(j) = &self.job {
            let status: Vec<String> = j.int_status.iter().map(|s| format!("{s:#x}")).collect();
            write!(
                f,
                "\n      job:      task counter {}, int_status [{}]",
                j.task_counter,
                status.join(", ")
            )?;
        }
        write!(f, "\n      hint:     {}", self.hint)
    }
}

const SEND: &str =
    "run `rknpu doctor --bundle DIR` and send DIR with the report (docs/hw-testing.md)";

/// What to check, for `finding` at `rung`.
fn hint(rung: Rung, finding: &Finding) -> String {
    match finding {
        Finding::Device(e) => device_hint(rung, e),
        Finding::Build(_) => format!("a library bug, not the board: {SEND}"),
        Finding::TaskCounter { .. } => format!(
            "the kernel reported completion before every task ran: the driver's handling of the submitted task count and per-core task ranges differs from the vendor and rocket driver sources (docs/provenance.md); {SEND}"
        ),
        Finding::Leak { .. } => {
            format!("a free (MEM_DESTROY / GEM_CLOSE) or an unmap did not happen: {SEND}")
        }
        Finding::Mismatch(m) if rung == Rung::Buffers => format!(
            "bytes written by the CPU did not read back: check the cache maintenance the driver does (vendor MEM_SYNC, rocket PREP_BO/FINI_BO), a CMA or IOMMU misconfiguration, and memory stability{}",
            if m.unwritten {
                ""
            } else {
                " (a single flipped byte points at memory)"
            }
        ),
        Finding::Mismatch(m) if m.unwritten => format!(
            "the job completed but wrote nothing: a DMA fault (look for rk_iommu page faults or NPU DMA errors in dmesg; the vendor driver masks the DMA error interrupt bits out of int_status), or the output is read without the sync after the job; {SEND}"
        ),
        Finding::Mismatch(_) => match rung {
            Rung::Grid2 | Rung::Grid3 => format!(
                "one core passed but this split did not: a core computes wrongly or reads stale data; check that every core's power domain and IOMMU are enabled (rocket: the rknn-core device-tree nodes); {SEND}"
            ),
            _ => format!(
                "the NPU computed something other than the CPU: corrupted inputs (cache maintenance before the job), an operand layout the hardware reads differently, or a clock or voltage too low for the NPU; {SEND}"
            ),
        },
    }
}

fn device_hint(rung: Rung, e: &Error) -> String {
    match e {
        Error::NotFound { .. } => "is the driver loaded? `dmesg | grep -i -e rknpu -e rocket` should show it; the vendor driver needs CONFIG_ROCKCHIP_RKNPU (DRM flavour), mainline needs Linux 6.18+ with CONFIG_DRM_ACCEL_ROCKET and the rknn-core nodes enabled in the device tree; or set RKNPU_DEVICE to the node".into(),
        Error::Open { errno, .. } if *errno == OsError::EACCES || *errno == OsError::EPERM => "the user may not open the node: add it to the `render` group (renderD*), `video` (card*) or add a udev rule for accel* (docs/hw-testing.md)".into(),
        Error::Open { .. } => "the node named does not open: check the path (`ls -l /dev/dri /dev/accel`) and that the driver is bound (dmesg)".into(),
        Error::UnsupportedDriver { .. } => "the library speaks the vendor rknpu 0.9.6 and later 0.9.x (DRM flavour) and rocket: update the BSP kernel or switch to the mainline driver".into(),
        Error::Timeout { task_counter, .. } => timeout_hint(rung, *task_counter),
        Error::Ioctl { op, .. } => format!(
            "the kernel refused {op}: compare the driver's version and build options with the vendor and rocket driver sources (docs/provenance.md), and look in dmesg for the driver's message; {SEND}"
        ),
        Error::Verify { .. } => format!(
            "the pre-submit verifier refused a program the library built: a library bug, not the board; {SEND}"
        ),
        Error::NotOffered { .. } | Error::CoreMask { .. } => format!(
            "the ladder asked for something this interface does not offer: a library bug; {SEND}"
        ),
        _ => SEND.into(),
    }
}

fn timeout_hint(rung: Rung, task_counter: u32) -> String {
    let tail = "the vendor driver soft-resets every core after a timeout, so check dmesg for its messages and that no other NPU user (librknnrt) runs";
    match rung {
        Rung::WorkedExample => format!(
            "the NPU ran no program at all: check that the NPU's power domain and clocks are on (devfreq under /sys/class/devfreq), that its IOMMU is enabled (rk_iommu faults in dmesg), and the job's interrupt reaches the driver; {tail}"
        ),
        Rung::SingleInt8 | Rung::SingleInt4 | Rung::SingleFp16 => format!(
            "the worked example ran but this task did not complete: a register value the generator writes for this precision stalls the pipeline on this board; {SEND}; {tail}"
        ),
        Rung::Chained => format!(
            "single tasks run but the chain stopped after task {task_counter}: the program controller follows each task's tail to the next (its address and fetch amount); check the regcmd buffer's device address and the task count the driver programs; {tail}"
        ),
        Rung::Grid2 | Rung::Grid3 => format!(
            "one core runs the grid but a multi-core job did not complete: a core that is off or whose IOMMU is disabled never raises its interrupt (rocket: enable every rknn-core node and its IOMMU in the device tree); {tail}"
        ),
        _ => format!(
            "smaller programs run but this one stopped after {task_counter} task(s): a longer job may need a longer --timeout on a slow clock; otherwise {SEND}; {tail}"
        ),
    }
}
