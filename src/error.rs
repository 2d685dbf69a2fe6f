//! The crate's one error type, for the pure layers (registers, programs, plans) and the
//! device alike, and the operating-system error code it carries.

use std::fmt;

/// Everything that can go wrong in this library. Each variant names what was wrong and
/// where; nothing in the library panics on bad input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A regcmd byte stream whose length is not a multiple of 8.
    InputLength {
        /// Length of the input in bytes.
        len: usize,
        /// Byte offset where the incomplete trailing entry starts.
        offset: usize,
    },
    /// An input that holds no regcmd entry at all.
    EmptyInput,
    /// A value does not fit the register field it is meant for.
    FieldOverflow {
        /// `BLOCK.REGISTER`.
        register: &'static str,
        /// Field name.
        field: &'static str,
        /// The value that was offered.
        value: u64,
        /// The largest value the field holds.
        max: u32,
    },
    /// A register has no field of that name.
    UnknownField {
        /// `BLOCK.REGISTER`.
        register: &'static str,
        /// The name asked for.
        field: &'static str,
    },
    /// A kernel shape or option the generator cannot express.
    Unsupported {
        /// What was asked for.
        what: &'static str,
        /// Why it cannot be built, with the limit.
        why: String,
    },
    /// A DMA address that breaks the alignment its register requires.
    Misaligned {
        /// `BLOCK.REGISTER` (or `PC.BASE_ADDRESS` for task lists).
        register: &'static str,
        /// The address.
        addr: u64,
        /// Required alignment in bytes.
        align: u32,
    },
    /// A buffer base plus offset that does not fit the NPU's 32-bit device addresses.
    AddressOverflow {
        /// The buffer the relocation refers to.
        buffer: u32,
        /// Offset inside the buffer.
        offset: u32,
        /// The base address the buffer was bound to.
        base: u64,
    },
    /// A relocation refers to a buffer that was not bound.
    UnboundBuffer {
        /// The buffer id.
        buffer: u32,
    },
    /// A program or task is larger than the hardware can fetch or count.
    ProgramTooLarge {
        /// What exceeded its limit.
        what: &'static str,
        /// The offending amount.
        value: usize,
        /// The limit.
        limit: usize,
    },
    /// A program with no task.
    EmptyProgram,

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
        errno: OsError,
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
    NotOffered {
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
        errno: OsError,
    },
    /// The job did not complete before its deadline (rocket: or the scheduler stopped
    /// or dropped it, which the completion sentinel shows). The vendor driver
    /// soft-resets every core after a blocking timeout (docs/hardware/kernel-behaviours.md#k4).
    Timeout {
        /// Vendor, blocking: the wait core's `PC_TASK_STATUS & 0xfff`, the tasks done in
        /// its current kick of at most 4095 (`rknpu_job.c:246-256`); 0 for non-blocking
        /// jobs and on rocket, which report nothing.
        task_counter: u32,
        /// The last task's interrupt status, where the kernel wrote it (0 otherwise).
        int_status: u32,
    },
    /// The emulated kernel could not finish the job because the simulator's work budget
    /// ran out (docs/simulator.md, "Bounds"): a limit of the emulation, which a board
    /// does not have, reported as such rather than as a [`Error::Timeout`]. The job's
    /// buffers hold what its finished tasks wrote.
    WorkBudget {
        /// The simulator's error: where, what step, the budget and what it needed.
        why: String,
    },
    /// The emulated kernel could not run a task because one of its cubes is larger than
    /// the simulator holds (docs/simulator.md, "Bounds"): a limit of the emulation, not
    /// of the NPU, reported as such rather than as a [`Error::Timeout`].
    TooLargeToSimulate {
        /// The simulator's error: where, which register, the cube's size and the limit.
        why: String,
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
    /// An input whose size does not match what the operation expects.
    ShapeMismatch {
        /// Which input, and in what unit (`A values`, `weight rows`, `scales`).
        what: &'static str,
        /// What the operation expects.
        expected: u64,
        /// What was given.
        actual: u64,
    },
    /// A value outside the range its type or operation accepts.
    OutOfRange {
        /// Which input.
        what: &'static str,
        /// Its index in that input.
        index: usize,
        /// The value (as text: integers and floats alike, `NaN` included).
        value: String,
        /// The accepted range, as text (`-8..=7`, `finite`).
        range: &'static str,
    },
    /// A combination of input, weight and output types that no kernel offers.
    Precision {
        /// Activation type.
        input: &'static str,
        /// Weight type.
        weights: &'static str,
        /// Result type.
        output: &'static str,
    },
    /// A handle used with a device or layer that did not issue it: a weight bank of
    /// another open of the NPU in a layer step, a layer tensor of another layer. Its
    /// buffers are not addressable in this device's jobs (or it names another layer's
    /// tensor), so nothing is submitted.
    Foreign {
        /// The handle, and where it was used.
        what: String,
    },
    /// A layer step whose tasks read outside the tensors the step reads, or write
    /// outside the tensor it writes: the layer is refused at build, since such a task
    /// would overwrite (or read) another live tensor of the layer.
    LayerStep {
        /// The step's name.
        step: String,
        /// The offending task (its index in the layer's program) and range.
        error: crate::verify::VerifyError,
    },
    /// The simulator refused or could not run a program ([`crate::sim`]).
    Sim {
        /// Where, which register, field and value.
        error: crate::sim::SimError,
    },
    /// A register file holds a value the task model cannot represent
    /// ([`crate::task::Task::decode`]).
    Decode {
        /// The register and field.
        error: crate::task::DecodeError,
    },
    /// A GGUF file could not be read or loaded ([`crate::gguf::GgufError`], as text: its
    /// dequantised values may be NaN, which this type's equality does not admit; a bank
    /// refusal inside it converts to the refusal itself).
    Gguf {
        /// The reader's or loader's error.
        what: String,
    },
    /// A job (a matmul, a batch, a layer) whose buffers lie in more than one of the
    /// vendor driver's IOMMU domains: the driver runs a job in one domain, and a buffer
    /// is mapped only in the domain it was created in (docs/device.md, "Beyond 4 GiB: IOMMU domains").
    /// Nothing is submitted.
    MixedDomains {
        /// What was refused.
        what: String,
        /// The domains its buffers lie in, ascending.
        domains: Vec<u8>,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InputLength { .. }
            | Error::EmptyInput
            | Error::FieldOverflow { .. }
            | Error::UnknownField { .. }
            | Error::Unsupported { .. }
            | Error::Misaligned { .. }
            | Error::AddressOverflow { .. }
            | Error::UnboundBuffer { .. }
            | Error::ProgramTooLarge { .. }
            | Error::EmptyProgram => self.fmt_program(f),
            Error::NotFound { looked_for, hint } => {
                write!(f, "no NPU found: looked for {looked_for}; {hint}")
            }
            Error::Open { node, errno } => write!(f, "cannot open {node}: {errno}"),
            Error::UnsupportedDriver {
                driver,
                version,
                why,
            } => {
                write!(f, "driver {driver} {version} is not supported: {why}")
            }
            Error::NotOffered { what } => write!(f, "not supported: {what}"),
            Error::InvalidArgument { what } => write!(f, "invalid argument: {what}"),
            Error::MixedDomains { what, domains } => write!(
                f,
                "{what} uses buffers of IOMMU domains {domains:?}: a job runs in one domain, and a buffer is mapped only in the domain it was created in"
            ),
            Error::Verify { error } => write!(
                f,
                "the job was not submitted: {error} (Job::unverified skips this check)"
            ),
            Error::CoreMask { mask } => write!(
                f,
                "core mask {mask:#x}: the vendor kernel accepts masks 5 and 6 but never starts them; use 1, 2, 4, 3, 7 or automatic"
            ),
            Error::NoSuchCore { mask, cores } => write!(
                f,
                "core mask {mask:#x} names a core this NPU does not have: it has {cores} (an RK3583 accepts masks up to 0x3)"
            ),
            Error::Ioctl { op, errno } => {
                write!(f, "{op} failed: {errno}")
            }
            Error::Timeout {
                task_counter,
                int_status,
            } => write!(
                f,
                "job timed out after {task_counter} task(s), interrupt status {int_status:#x}"
            ),
            Error::WorkBudget { why } => write!(
                f,
                "the emulated kernel's simulator ran out of its work budget (a limit of the emulation, not of the NPU): {why}"
            ),
            Error::TooLargeToSimulate { why } => write!(
                f,
                "the emulated kernel's simulator cannot hold this task (a limit of the emulation, not of the NPU): {why}"
            ),
            Error::StillRunning { what } => {
                write!(f, "the NPU may still use this buffer: {what}")
            }
            Error::Trace { what } => write!(f, "recording a trace: {what}"),
            Error::ShapeMismatch {
                what,
                expected,
                actual,
            } => write!(f, "{what}: expected {expected}, got {actual}"),
            Error::OutOfRange {
                what,
                index,
                value,
                range,
            } => write!(f, "{what}[{index}] = {value} is outside {range}"),
            Error::Precision {
                input,
                weights,
                output,
            } => write!(
                f,
                "no kernel takes {input} activations with {weights} weights to {output} results"
            ),
            Error::Foreign { what } => write!(f, "a handle of another device or layer: {what}"),
            Error::LayerStep { step, error } => write!(
                f,
                "layer step {step} reaches outside the tensors it declares: {error}"
            ),
            Error::Sim { error } => write!(f, "simulator: {error}"),
            Error::Decode { error } => write!(f, "decoding a task: {error}"),
            Error::Gguf { what } => write!(f, "GGUF: {what}"),
        }
    }
}

impl Error {
    /// The messages of the errors of building and encoding programs.
    fn fmt_program(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InputLength { len, offset } => write!(
                f,
                "input length {len} is not a multiple of 8: incomplete entry at byte offset {offset}"
            ),
            Error::EmptyInput => write!(f, "input holds no regcmd entry"),
            Error::FieldOverflow {
                register,
                field,
                value,
                max,
            } => write!(
                f,
                "{register}.{field}: value {value} exceeds the field maximum {max}"
            ),
            Error::UnknownField { register, field } => {
                write!(f, "{register} has no field {field}")
            }
            Error::Unsupported { what, why } => write!(f, "{what}: {why}"),
            Error::Misaligned {
                register,
                addr,
                align,
            } => write!(
                f,
                "{register}: address {addr:#x} is not aligned to {align} bytes"
            ),
            Error::AddressOverflow {
                buffer,
                offset,
                base,
            } => write!(
                f,
                "buffer {buffer} bound at {base:#x} plus offset {offset:#x} exceeds 32-bit device addresses"
            ),
            Error::UnboundBuffer { buffer } => {
                write!(f, "buffer {buffer} is not bound to an address")
            }
            Error::ProgramTooLarge { what, value, limit } => {
                write!(f, "{what} is {value}, above the limit of {limit}")
            }
            Error::EmptyProgram => write!(f, "program has no task"),
            // Every other error has its message in `Display::fmt`.
            other => write!(f, "{other:?}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Verify { error } | Error::LayerStep { error, .. } => Some(error),
            Error::Sim { error } => Some(error),
            Error::Decode { error } => Some(error),
            _ => None,
        }
    }
}

impl From<crate::verify::VerifyError> for Error {
    fn from(error: crate::verify::VerifyError) -> Error {
        Error::Verify { error }
    }
}

impl From<crate::sim::SimError> for Error {
    fn from(error: crate::sim::SimError) -> Error {
        Error::Sim { error }
    }
}

impl From<crate::task::DecodeError> for Error {
    fn from(error: crate::task::DecodeError) -> Error {
        Error::Decode { error }
    }
}

impl From<crate::trace::TraceError> for Error {
    fn from(e: crate::trace::TraceError) -> Error {
        Error::Trace {
            what: e.to_string(),
        }
    }
}

impl From<crate::gguf::GgufError> for Error {
    /// A bank refusal inside the GGUF error is that refusal; anything else its text.
    fn from(e: crate::gguf::GgufError) -> Error {
        match e {
            crate::gguf::GgufError::Bank(inner) => inner,
            e => Error::Gguf {
                what: e.to_string(),
            },
        }
    }
}

impl Error {
    /// `Ok` when `actual == expected`, else [`Error::ShapeMismatch`] naming `what`.
    pub(crate) fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
        if expected != actual {
            return Err(Error::ShapeMismatch {
                what,
                expected: expected as u64,
                actual: actual as u64,
            });
        }
        Ok(())
    }

    /// Whether the error names an NPU driver (rather than another DRM driver).
    pub(crate) fn is_npu(&self) -> bool {
        matches!(self, Error::UnsupportedDriver { driver, .. } if driver.starts_with("rknpu") || driver == "rocket")
    }
}

/// An operating-system error code (`errno`) a kernel request returned. The library's own
/// type, so that no system-binding crate is part of the public API.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OsError(i32);

impl OsError {
    /// No such file or directory.
    pub const ENOENT: OsError = OsError(2);
    /// Operation not permitted.
    pub const EPERM: OsError = OsError(1);
    /// Bad address.
    pub const EFAULT: OsError = OsError(14);
    /// Permission denied.
    pub const EACCES: OsError = OsError(13);
    /// Device or resource busy.
    pub const EBUSY: OsError = OsError(16);
    /// Invalid argument.
    pub const EINVAL: OsError = OsError(22);
    /// Out of memory.
    pub const ENOMEM: OsError = OsError(12);
    /// Inappropriate ioctl for device.
    pub const ENOTTY: OsError = OsError(25);
    /// Timer expired.
    pub const ETIME: OsError = OsError(62);
    /// Connection timed out (what the drivers return for a job that did not finish).
    pub const ETIMEDOUT: OsError = OsError(110);

    /// The error of a raw `errno` value.
    pub const fn from_raw(code: i32) -> OsError {
        OsError(code)
    }

    /// The raw `errno` value.
    pub const fn code(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for OsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", nix::errno::Errno::from_raw(self.0))
    }
}

impl fmt::Display for OsError {
    /// `EINVAL: Invalid argument`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = nix::errno::Errno::from_raw(self.0);
        write!(f, "{e:?}: {}", e.desc())
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// Each sub-error converts into the crate's error with `?`, and the typed ones are
    /// its `source()`; a GGUF bank refusal is that refusal.
    #[test]
    fn sub_errors_convert_and_are_their_source() {
        let sim = crate::sim::SimError::Setup { why: "no".into() };
        let e: Error = sim.clone().into();
        assert_eq!(e, Error::Sim { error: sim });
        assert!(e.source().is_some_and(|s| s.to_string().contains("no")));
        let trace = crate::trace::TraceError {
            offset: 8,
            what: "bad magic".into(),
        };
        let e: Error = trace.into();
        assert!(matches!(&e, Error::Trace { what } if what.contains("bad magic")));
        let inner = Error::EmptyProgram;
        let e: Error = crate::gguf::GgufError::Bank(inner.clone()).into();
        assert_eq!(e, inner);
        let e: Error = crate::gguf::GgufError::NoSuchTensor { name: "w".into() }.into();
        assert!(matches!(&e, Error::Gguf { what } if what.contains('w')));
        assert!(e.source().is_none());
    }
}
