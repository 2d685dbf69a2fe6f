//! The device layer's errors.

use crate::sys::Errno;
use std::fmt;

/// What can go wrong opening, allocating on and submitting to an NPU. Each names the
/// operation and, for kernel errors, the errno.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceError {
    /// No NPU was found.
    NotFound {
        /// What was looked for.
        looked_for: String,
        /// How to select a device.
        hint: String,
    },
    /// The node could not be opened.
    Open {
        /// The node.
        node: String,
        /// Why.
        errno: Errno,
    },
    /// A driver, or a driver version, whose interface the library does not speak.
    UnsupportedDriver {
        /// Driver name.
        driver: String,
        /// Its version.
        version: String,
        /// Why it is refused.
        why: String,
    },
    /// A feature the interface does not offer (or the library does not use on it).
    Unsupported {
        /// What was asked for, and why not.
        what: String,
    },
    /// A request the library refuses before asking the kernel.
    InvalidArgument {
        /// What was wrong.
        what: String,
    },
    /// Core masks 5 and 6: the vendor kernel accepts them and never starts the job.
    CoreMask {
        /// The mask.
        mask: u32,
    },
    /// A core mask naming a core this NPU does not have (the RK3583 has cores 0 and 1:
    /// its driver refuses masks above 0x3).
    NoSuchCore {
        /// The mask.
        mask: u32,
        /// The cores the NPU has.
        cores: u32,
    },
    /// An ioctl (or mmap, poll) failed.
    Ioctl {
        /// The request's name.
        op: &'static str,
        /// The errno.
        errno: Errno,
    },
    /// The job did not complete before its deadline (rocket: or the scheduler stopped
    /// or dropped it, which the completion sentinel shows). The vendor driver
    /// soft-resets every core after a blocking timeout (the vendor and rocket driver sources docs/provenance.md).
    Timeout {
        /// Vendor, blocking: the wait core's `PC_TASK_STATUS & 0xfff`, the tasks done in
        /// its current kick of at most 4095 (`rknpu_job.c:246-256`); 0 for non-blocking
        /// jobs and on rocket, which report nothing.
        task_counter: u32,
        /// The last task's interrupt status, where the kernel wrote it (0 otherwise).
        int_status: u32,
    },
    /// The pre-submit verifier found a DMA range of the job outside its buffers, or a
    /// task it cannot read ([`crate::verify`]); nothing was submitted.
    Verify {
        /// Which task (its index in the job), register and range.
        error: crate::verify::VerifyError,
    },
    /// A buffer of a job that may still run on the NPU: it was dropped or timed out and
    /// did not finish within a bound, so the buffer is kept away from the CPU and from
    /// reuse (see [`crate::device::Device::leaked_buffers`]).
    StillRunning {
        /// Which buffer, and why it is held.
        what: String,
    },
    /// A trace could not be written.
    Trace {
        /// What went wrong, with the file where there is one.
        what: String,
    },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::NotFound { looked_for, hint } => {
                write!(f, "no NPU found: looked for {looked_for}; {hint}")
            }
            DeviceError::Open { node, errno } => write!(f, "cannot open {node}: {errno}"),
            DeviceError::UnsupportedDriver {
                driver,
                version,
                why,
            } => {
                write!(f, "driver {driver} {version} is not supported: {why}")
            }
            DeviceError::Unsupported { what } => write!(f, "not supported: {what}"),
            DeviceError::InvalidArgument { what } => write!(f, "invalid argument: {what}"),
            DeviceError::Verify { error } => write!(
                f,
                "the job was not submitted: {error} (Job::unverified skips this check)"
            ),
            DeviceError::CoreMask { mask } => write!(
                f,
                "core mask {mask:#x}: the vendor kernel accepts masks 5 and 6 but never starts them; use 1, 2, 4, 3, 7 or automatic"
            ),
            DeviceError::NoSuchCore { mask, cores } => write!(
                f,
                "core mask {mask:#x} names a core this NPU does not have: it has {cores} (an RK3583 accepts masks up to 0x3)"
            ),
            DeviceError::Ioctl { op, errno } => {
                write!(f, "{op} failed: {errno} ({})", errno.desc())
            }
            DeviceError::Timeout {
                task_counter,
                int_status,
            } => write!(
                f,
                "job timed out after {task_counter} task(s), interrupt status {int_status:#x}"
            ),
            DeviceError::StillRunning { what } => {
                write!(f, "the NPU may still use this buffer: {what}")
            }
            DeviceError::Trace { what } => write!(f, "recording a trace: {what}"),
        }
    }
}

impl std::error::Error for DeviceError {}

impl DeviceError {
    /// Whether the error names an NPU driver (rather than another DRM driver).
    pub(crate) fn is_npu(&self) -> bool {
        matches!(self, DeviceError::UnsupportedDriver { driver, .. } if driver.starts_with("rknpu") || driver == "rocket")
    }
}
