//! The C API of rknpu-driver: `librknpu.so` / `librknpu.a` and `include/rknpu.h`.
//!
//! A C program (a ggml backend, say) opens an NPU with `rknpu_open`, packs a weight
//! matrix once with `rknpu_weights_i8`, `rknpu_weights_i4`, `rknpu_weights_f16` or, from
//! ggml's raw block data of any type the library converts, `rknpu_weights_ggml`, and runs
//! `rknpu_mul_mat` (or `rknpu_mul_mat_ex`, for f16 or strided rows, or
//! `rknpu_mul_mat_write`, for rows a callback writes into the NPU's input) for any number
//! of activation rows against it; `rknpu_mul_mat_supported` (and `rknpu_ggml_supported`)
//! says beforehand whether a shape runs, `rknpu_batch_*` runs several weights that share
//! one input as one job, and `rknpu_mul_mat_submit` / `rknpu_batch_submit` start products
//! that `rknpu_job_wait` collects. Handles are entries of a table ([`handle`]), so a freed
//! or wrong-kind handle is an error code rather than undefined behaviour. docs/capi.md
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
//! build, for twenty functions), and the comments in the header are the table's.

#![deny(unsafe_code)]

pub mod batch;
#[allow(unsafe_code)]
pub mod ffi;
pub mod handle;
pub mod header;
mod in_place;
pub mod job;
pub mod limits;
mod rows;

pub use batch::RknpuBatch;
pub use job::Job;
pub use limits::{
    GGML_INT8, WEIGHTS_I4, WEIGHTS_I8, ggml_bank, ggml_supported, ggml_type, mul_mat_supported,
};
pub use rows::{Rows, XType};

use rknpu_driver::Error;
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::gguf;
use rknpu_driver::kernels::matmul::{Plan, WeightLayout};
use rknpu_driver::kernels::single::{Dtype, OutType};
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
                 n * k or m * k too large, a scale that is not finite, a handle that is \
                 not live (freed already) or of the wrong kind."
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
            | Error::WorkBudget { .. }
            | Error::TooLargeToSimulate { .. }
            | Error::StillRunning { .. } => Code::Device,
            Error::Unsupported { .. } | Error::Precision { .. } => Code::Unsupported,
            Error::InputLength { .. }
            | Error::EmptyInput
            | Error::InvalidArgument { .. }
            | Error::ShapeMismatch { .. }
            | Error::OutOfRange { .. }
            | Error::Foreign { .. } => Code::Arg,
            // A layer step is refused for what its inputs ask: the caller's argument.
            Error::LayerStep { .. } => Code::Arg,
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

impl From<gguf::GgufError> for Failure {
    fn from(e: gguf::GgufError) -> Failure {
        let code = match &e {
            gguf::GgufError::Bank(inner) => Code::of(inner),
            gguf::GgufError::Unsupported { .. } => Code::Unsupported,
            _ => Code::Arg,
        };
        Failure {
            code,
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
            set_last_error(&format!("panic in rknpu: {}", panic_message(&*payload)));
            Code::Panic as i32
        }
    }
}

/// The message of a panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
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

/// How many plans (one per row count `m`) a weights handle keeps: alternating prompt and
/// decode sizes, and the few batch sizes a ggml graph uses, never plan again, while a
/// caller sweeping `m` holds at most this many programs and their buffers.
pub const PLAN_CACHE: usize = 8;

/// Weights packed for the NPU (`rknpu_weights` in C), with the plans of the last
/// [`PLAN_CACHE`] row counts used.
#[derive(Debug)]
pub struct RknpuWeights {
    /// The packed weights.
    pub bank: Arc<WeightBank>,
    /// Rows `n` (output channels).
    pub n: u32,
    /// Values per row `k`.
    pub k: u32,
    /// The matmuls of the row counts used last, least recently used first; calls on one
    /// handle take turns on it.
    plans: Mutex<Vec<Matmul>>,
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

/// Checks, from arithmetic alone (nothing is allocated and no caller memory is read),
/// that a bank of `dtype` holding `n` rows of `k` values can be made on `dev` and that a
/// product of `m` rows can be planned against it, as [`Matmul::new`] plans it.
pub fn check_plan(dev: &Device, dtype: Dtype, n: u32, k: u32, m: u32) -> Result<()> {
    weight_shape(n, k, dtype == Dtype::Int4)?;
    elements("x", m, k)?;
    elements("y", m, n)?;
    let (out, rows) = match dtype {
        Dtype::Fp16 | Dtype::Bf16 => (OutType::Fp32, Some(m)),
        Dtype::Int8 => (OutType::Int32, Some(m)),
        // int4 weights run twice as many int8 activation rows (W4A8).
        Dtype::Int4 => (OutType::Int32, m.checked_mul(2)),
        other => {
            return Err(Failure {
                code: Code::Unsupported,
                message: format!("{} weights have no C API", other.name()),
            });
        }
    };
    let rows = rows.ok_or_else(|| Failure {
        code: Code::Unsupported,
        message: format!("{m} rows of int4 products (they run 2 * m rows)"),
    })?;
    // The layout the constructors pack in (int4: the narrowest a bank can take).
    let layout = WeightLayout::decode_and_prompts(k, n, dtype, dev.cores())?;
    Plan::for_layout(&layout, rows, out, dev.cores())?;
    Ok(())
}

impl RknpuWeights {
    fn new(bank: WeightBank, n: u32, k: u32) -> RknpuWeights {
        RknpuWeights {
            bank: Arc::new(bank),
            n,
            k,
            plans: Mutex::new(Vec::new()),
        }
    }

    /// Weights from ggml's raw data of type code `ty` (`enum ggml_type`, with
    /// [`GGML_INT8`] for an int8 bank): `n` rows of `k` values, rows back to back
    /// (`gguf::bank_from_raw_as`).
    pub fn ggml(dev: &RknpuDevice, ty: u32, data: &[u8], n: u32, k: u32) -> Result<Self> {
        let bank = gguf::bank_from_raw_as(&dev.device, ggml_bank(ty)?, n, k, data)?;
        Ok(RknpuWeights::new(bank, n, k))
    }

    /// int8 weights (`n` rows of `k`) with per-row scales.
    pub fn i8(dev: &RknpuDevice, w: &[i8], scale: &[f32], n: u32, k: u32) -> Result<Self> {
        weight_shape(n, k, false)?;
        let bank = WeightBank::new(&dev.device, (n, k), Weights::I8(w))?.with_scales(scale)?;
        Ok(RknpuWeights::new(bank, n, k))
    }

    /// int4 weights (`n` rows of `k / 2` bytes) with per-row scales.
    pub fn i4(dev: &RknpuDevice, w: &[u8], scale: &[f32], n: u32, k: u32) -> Result<Self> {
        weight_shape(n, k, true)?;
        let bank =
            WeightBank::new(&dev.device, (n, k), Weights::I4Packed(w))?.with_scales(scale)?;
        Ok(RknpuWeights::new(bank, n, k))
    }

    /// fp16 weights (`n` rows of `k` values), packed from `w` without a copy.
    pub fn f16(dev: &RknpuDevice, w: &[half::f16], n: u32, k: u32) -> Result<Self> {
        weight_shape(n, k, false)?;
        let bank = WeightBank::new(&dev.device, (n, k), Weights::F16(w))?;
        Ok(RknpuWeights::new(bank, n, k))
    }

    /// Runs `body` on the matmul of `m` rows, planning it only when none of the cached
    /// plans is for `m` (the least recently used is dropped beyond [`PLAN_CACHE`]).
    fn with_plan<T>(&self, m: u32, body: impl FnOnce(&mut Matmul) -> Result<T>) -> Result<T> {
        let mut plans = self.plans.lock().unwrap_or_else(|poisoned| {
            // A panic mid-run may have left a matmul half-updated: plan afresh.
            let mut guard = poisoned.into_inner();
            guard.clear();
            guard
        });
        match plans.iter().position(|mm| mm.rows() == m) {
            Some(i) => {
                let mm = plans.remove(i);
                plans.push(mm);
            }
            None => {
                let mm = Matmul::new(&self.bank, m)?;
                if plans.len() >= PLAN_CACHE {
                    plans.remove(0);
                }
                plans.push(mm);
            }
        }
        let mm = plans.last_mut().ok_or_else(|| Failure::arg("no plan"))?;
        body(mm)
    }

    /// Plans the product of `m` rows (or finds its plan cached), so that a shape the
    /// library refuses is refused before any caller memory is read.
    pub fn prepare(&self, m: u32) -> Result<()> {
        self.with_plan(m, |_| Ok(()))
    }

    /// `y = x · wᵀ` for `m` rows of f32, contiguous.
    pub fn mul_mat(&self, x: &[f32], m: u32, y: &mut [f32]) -> Result<()> {
        self.with_plan(m, |mm| Ok(mm.mul_mat(x, y)?))
    }

    /// `y = x · wᵀ` for `m` rows of `x`'s element type, row `i` at byte `i · x.stride`
    /// of `x.bytes`, into rows of `y` `y_stride` floats apart. fp16 rows on an fp16 bank
    /// and bf16 rows on a bf16 bank go to the NPU as they are; other rows are read as
    /// f32 and rounded to the bank's type (integer banks: quantised per row).
    pub fn mul_mat_rows(&self, x: Rows<'_>, m: u32, y: &mut [f32], y_stride: usize) -> Result<()> {
        let (k, rows) = (self.k as usize, m as usize);
        // Plan first: a refused m must not cost a gather of m rows.
        self.prepare(m)?;
        let native = self.native(x.ty);
        self.with_output_rows(m, y, y_stride, |target| match x.ty {
            XType::F16 if native => {
                let a = x.values(rows, k, half::f16::from_bits)?;
                self.with_plan(m, |mm| Ok(mm.run_into(&a, target)?))
            }
            XType::Bf16 if native => {
                let a = x.values(rows, k, half::bf16::from_bits)?;
                self.with_plan(m, |mm| Ok(mm.run_into(&a, target)?))
            }
            _ => {
                let a = x.f32_values(rows, k)?;
                self.with_plan(m, |mm| Ok(mm.mul_mat(&a, target)?))
            }
        })
    }

    /// Whether rows of `ty` go to the NPU as they are: fp16 rows on an fp16 bank, bf16
    /// rows on a bf16 bank.
    fn native(&self, ty: XType) -> bool {
        matches!(
            (ty, self.bank.layout().dtype),
            (XType::F16, Dtype::Fp16) | (XType::Bf16, Dtype::Bf16)
        )
    }

    /// Runs `body` on `m` contiguous result rows: `y` itself when its rows are
    /// `y_stride = n` floats apart, else a buffer copied into `y`'s rows afterwards.
    fn with_output_rows(
        &self,
        m: u32,
        y: &mut [f32],
        y_stride: usize,
        body: impl FnOnce(&mut [f32]) -> Result<()>,
    ) -> Result<()> {
        let n = self.n as usize;
        let out_len = elements("y", m, self.n)?;
        if y_stride == n {
            let target = y
                .get_mut(..out_len)
                .ok_or_else(|| Failure::arg("y is shorter than m rows"))?;
            return body(target);
        }
        let mut out = vec![0f32; out_len];
        body(&mut out)?;
        for (r, src) in out.chunks_exact(n).enumerate() {
            let at = r * y_stride;
            y.get_mut(at..at + n)
                .ok_or_else(|| Failure::arg("y is shorter than m rows"))?
                .copy_from_slice(src);
        }
        Ok(())
    }

    /// The row counts whose plans are cached, least recently used first.
    pub fn cached_rows(&self) -> Vec<u32> {
        self.plans
            .lock()
            .map(|g| g.iter().map(Matmul::rows).collect())
            .unwrap_or_default()
    }
}
