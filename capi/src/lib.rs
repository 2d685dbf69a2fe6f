//! The C API of rknpu-driver: `librknpu.so` / `librknpu.a` and `include/rknpu.h`.
//!
//! A C program (a ggml backend, say) opens an NPU with `rknpu_open`, packs a weight
//! matrix once with `rknpu_weights_i8`, `rknpu_weights_i4` or `rknpu_weights_f16`, and
//! runs `rknpu_mul_mat` for any number of activation rows against it. docs/capi.md
//! describes building, linking, the functions, the error codes and thread safety.
//!
//! The crate is split so that `unsafe` stays in one place: [`ffi`] holds the exported
//! `extern "C"` functions and does the pointer work (each block with a `// SAFETY:`
//! comment), and hands slices and references to the safe functions here, which validate
//! the rest and call the library. The crate denies `unsafe_code` everywhere else.
//!
//! The header is generated rather than written by hand, and without cbindgen: the
//! declarations are one table ([`header::FUNCTIONS`], with the error codes of
//! [`Code::ALL`]) and [`header::header`] prints it. A test compares `include/rknpu.h` with
//! that text (`UPDATE_FIXTURES=1` rewrites it, as the project's other golden files) and
//! checks the table's names against the exported functions and their signatures. This
//! adds no build dependency (cbindgen would add a parser and many crates to every CI
//! build, for eight functions), and the comments in the header are the table's.

#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod ffi;
pub mod header;

use rknpu_driver::Error;
use rknpu_driver::device::Device;
use rknpu_driver::device::matmul::{Matmul, WeightBank};
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

/// The error codes the functions return (0 is success).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Code {
    /// An argument is invalid.
    Arg = -1,
    /// The device failed or refused a request.
    Device = -2,
    /// A shape or type the NPU or the library does not support.
    Unsupported = -3,
    /// The library panicked (a bug); the call had no effect beyond its arguments.
    Panic = -4,
    /// No NPU was found.
    NotFound = -5,
    /// Any other failure of the library.
    Internal = -6,
}

impl Code {
    /// Every code, in the header's order.
    pub const ALL: &'static [Code] = &[
        Code::Arg,
        Code::Device,
        Code::Unsupported,
        Code::Panic,
        Code::NotFound,
        Code::Internal,
    ];

    /// The code's name in the header.
    pub fn name(self) -> &'static str {
        match self {
            Code::Arg => "RKNPU_ERR_ARG",
            Code::Device => "RKNPU_ERR_DEVICE",
            Code::Unsupported => "RKNPU_ERR_UNSUPPORTED",
            Code::Panic => "RKNPU_ERR_PANIC",
            Code::NotFound => "RKNPU_ERR_NOT_FOUND",
            Code::Internal => "RKNPU_ERR_INTERNAL",
        }
    }

    /// The code's comment in the header.
    pub fn doc(self) -> &'static str {
        match self {
            Code::Arg => {
                "An argument is invalid: a NULL pointer, a zero size, an odd k for int4, \
                 n * k or m * k too large, a scale that is not finite."
            }
            Code::Device => {
                "The device failed or refused a request (an ioctl error, a timeout, an \
                 unsupported driver)."
            }
            Code::Unsupported => {
                "A shape or type the NPU or the library does not support (too large a k \
                 or n, for instance)."
            }
            Code::Panic => "The library panicked: a bug, reported with its message.",
            Code::NotFound => "No NPU was found (open \"emu\" for the emulated one).",
            Code::Internal => "Any other failure of the library.",
        }
    }

    /// The code of a library error.
    pub fn of(e: &Error) -> Code {
        match e {
            Error::NotFound { .. } => Code::NotFound,
            Error::Open { .. }
            | Error::UnsupportedDriver { .. }
            | Error::NotOffered { .. }
            | Error::CoreMask { .. }
            | Error::NoSuchCore { .. }
            | Error::Ioctl { .. }
            | Error::Timeout { .. }
            | Error::StillRunning { .. } => Code::Device,
            Error::Unsupported { .. } | Error::Precision { .. } => Code::Unsupported,
            Error::InputLength { .. }
            | Error::EmptyInput
            | Error::InvalidArgument { .. }
            | Error::ShapeMismatch { .. }
            | Error::OutOfRange { .. } => Code::Arg,
            _ => Code::Internal,
        }
    }
}

/// A failure: its code and the message `rknpu_last_error` returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The code returned.
    pub code: Code,
    /// The message.
    pub message: String,
}

impl Failure {
    /// An invalid argument.
    pub fn arg(message: impl Into<String>) -> Failure {
        Failure {
            code: Code::Arg,
            message: message.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure {
            code: Code::of(&e),
            message: e.to_string(),
        }
    }
}

/// What the safe functions return.
pub type Result<T> = std::result::Result<T, Failure>;

thread_local! {
    /// The calling thread's last error message.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Sets the calling thread's last error message (NUL bytes in it become spaces).
pub fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs `body` for an entry point: clears the thread's last error, maps a failure or a
/// panic to its code (recording the message), and success to 0.
pub fn call(body: impl FnOnce() -> Result<()>) -> i32 {
    set_last_error("");
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(f)) => {
            set_last_error(&f.message);
            f.code as i32
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            set_last_error(&format!("panic in rknpu: {what}"));
            Code::Panic as i32
        }
    }
}

/// A pointer to the calling thread's last error message, valid until the message is
/// next set (the thread's next call).
pub fn last_error_ptr() -> *const std::ffi::c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The calling thread's last error message.
pub fn last_error() -> String {
    LAST_ERROR.with(|e| e.borrow().to_string_lossy().into_owned())
}

/// An open NPU (`rknpu_device` in C).
#[derive(Debug)]
pub struct RknpuDevice {
    /// The device; weights hold clones.
    pub device: Device,
}

/// Weights packed for the NPU (`rknpu_weights` in C), with the plan of the last `m`.
#[derive(Debug)]
pub struct RknpuWeights {
    /// The packed weights.
    pub bank: Arc<WeightBank>,
    /// Rows `n` (output channels).
    pub n: u32,
    /// Values per row `k`.
    pub k: u32,
    /// The matmul of the last `m` run; calls on one handle take turns on it.
    last: Mutex<Option<Matmul>>,
}

/// Opens the device `spec` names (`None` or empty: `RKNPU_DEVICE`, or else a board).
pub fn open(spec: Option<&CStr>) -> Result<RknpuDevice> {
    let spec = match spec {
        None => None,
        Some(s) => Some(s.to_str().map_err(|_| Failure::arg("spec is not UTF-8"))?),
    };
    let device = match spec {
        None | Some("") => Device::open()?,
        Some(s) => Device::open_spec(s)?,
    };
    Ok(RknpuDevice { device })
}

/// The number of values of an `rows` × `cols` matrix, refusing zero sizes and overflow.
pub fn elements(what: &str, rows: u32, cols: u32) -> Result<usize> {
    if rows == 0 || cols == 0 {
        return Err(Failure::arg(format!(
            "{what}: a size is zero ({rows} x {cols})"
        )));
    }
    (rows as usize)
        .checked_mul(cols as usize)
        .filter(|&len| len <= isize::MAX as usize / 4)
        .ok_or_else(|| Failure::arg(format!("{what}: {rows} x {cols} values overflow")))
}

/// Checks `n` and `k` of weights, and that `k` is even for int4.
pub fn weight_shape(n: u32, k: u32, int4: bool) -> Result<()> {
    elements("weights", n, k)?;
    if int4 && !k.is_multiple_of(2) {
        return Err(Failure::arg(format!(
            "int4 weights need an even k, not {k}"
        )));
    }
    Ok(())
}

impl RknpuWeights {
    fn new(bank: WeightBank, n: u32, k: u32) -> RknpuWeights {
        RknpuWeights {
            bank: Arc::new(bank),
            n,
            k,
            last: Mutex::new(None),
        }
    }

    /// int8 weights (`n` rows of `k`) with per-row scales.
    pub fn i8(dev: &RknpuDevice, w: &[i8], scale: &[f32], n: u32, k: u32) -> Result<Self> {
        weight_shape(n, k, false)?;
        let bank = WeightBank::from_i8_nk(&dev.device, n, k, w)?.with_scales(scale)?;
        Ok(RknpuWeights::new(bank, n, k))
    }

    /// int4 weights (`n` rows of `k / 2` bytes) with per-row scales.
    pub fn i4(dev: &RknpuDevice, w: &[u8], scale: &[f32], n: u32, k: u32) -> Result<Self> {
        weight_shape(n, k, true)?;
        let bank = WeightBank::from_i4_packed_nk(&dev.device, n, k, w)?.with_scales(scale)?;
        Ok(RknpuWeights::new(bank, n, k))
    }

    /// fp16 weights (`n` rows of `k` binary16 bit patterns).
    pub fn f16(dev: &RknpuDevice, w: &[u16], n: u32, k: u32) -> Result<Self> {
        weight_shape(n, k, false)?;
        let w: Vec<half::f16> = w.iter().map(|&b| half::f16::from_bits(b)).collect();
        let bank = WeightBank::from_f16_nk(&dev.device, n, k, &w)?;
        Ok(RknpuWeights::new(bank, n, k))
    }

    /// `y = x · wᵀ` for `m` rows, planning again only when `m` differs from the last
    /// call's.
    pub fn mul_mat(&self, x: &[f32], m: u32, y: &mut [f32]) -> Result<()> {
        let mut last = self.last.lock().unwrap_or_else(|poisoned| {
            // A panic mid-run may have left the matmul half-updated: plan afresh.
            let mut guard = poisoned.into_inner();
            *guard = None;
            guard
        });
        if last.as_ref().is_none_or(|mm| mm.rows() != m) {
            *last = None;
            *last = Some(Matmul::new(&self.bank, m)?);
        }
        let mm = last.as_mut().ok_or_else(|| Failure::arg("no plan"))?;
        mm.mul_mat(x, y)?;
        Ok(())
    }

    /// The `m` whose plan is cached, if any.
    pub fn cached_rows(&self) -> Option<u32> {
        self.last
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(Matmul::rows))
    }
}
