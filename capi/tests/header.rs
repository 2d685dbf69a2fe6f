//! `include/rknpu.h` is the text the declaration table generates, and the table names
//! exactly the exported functions, with the signatures its prototypes describe.

use rknpu::handle::{BatchHandle, DeviceHandle, JobHandle, WeightsHandle};
use rknpu::header::{FUNCTIONS, header};
use rknpu::{Code, ffi};
use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void};

// Short names for the pointer types the prototypes pass, so that each signature below
// reads as one line of its C prototype.
type Dev = *mut DeviceHandle;
type W = *mut WeightsHandle;
type Batch = *mut BatchHandle;
type Job = *mut JobHandle;
type OutW = *mut W;
type OutJ = *mut Job;
type X = *const c_void;
type Ys = *const *mut f32;

/// The checked-in header is the generated text (`UPDATE_FIXTURES=1` rewrites it).
#[test]
fn header_file_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("include/rknpu.h");
    let text = header();
    if std::env::var_os("UPDATE_FIXTURES").is_some() {
        std::fs::write(&path, &text).expect("write include/rknpu.h");
    }
    let file = std::fs::read_to_string(&path).expect("read include/rknpu.h");
    assert!(
        file == text,
        "include/rknpu.h is stale: regenerate it with \
         UPDATE_FIXTURES=1 cargo test -p rknpu-capi --test header"
    );
}

/// `(name, address)` of each `ffi` function named, coerced to the type after its name.
macro_rules! signed {
    ($($name:ident: $ty:ty),* $(,)?) => {
        vec![$((stringify!($name), ffi::$name as $ty as usize)),*]
    };
}

/// Each exported function, by name, coerced to the Rust signature of its C prototype: a
/// function missing from `ffi`, or one whose signature changed, does not compile.
fn exported() -> Vec<(&'static str, usize)> {
    [
        device_fns(),
        weights_fns(),
        mul_mat_fns(),
        batch_fns(),
        job_fns(),
    ]
    .concat()
}

/// The device and error functions: open, close, the capability queries, the last error.
fn device_fns() -> Vec<(&'static str, usize)> {
    type Open = unsafe extern "C" fn(*const c_char, *mut Dev) -> c_int;
    type Close = extern "C" fn(Dev) -> c_int;
    type LastError = extern "C" fn() -> *const c_char;
    type Supported = extern "C" fn(Dev, u32, u32, u32, u32) -> c_int;
    type MulMatSupported = extern "C" fn(Dev, u32, u32, u32, u32, u32) -> c_int;
    signed![
        rknpu_open: Open,
        rknpu_close: Close,
        rknpu_mul_mat_supported: MulMatSupported,
        rknpu_ggml_supported: Supported,
        rknpu_last_error: LastError,
    ]
}

/// The weight functions: a bank from int8, int4, fp16 or ggml data, and its free.
fn weights_fns() -> Vec<(&'static str, usize)> {
    type I8 = unsafe extern "C" fn(Dev, *const i8, *const f32, u32, u32, OutW) -> c_int;
    type I4 = unsafe extern "C" fn(Dev, *const u8, *const f32, u32, u32, OutW) -> c_int;
    type F16 = unsafe extern "C" fn(Dev, *const u16, u32, u32, OutW) -> c_int;
    type Ggml = unsafe extern "C" fn(Dev, u32, X, usize, u32, u32, OutW) -> c_int;
    type Free = extern "C" fn(W) -> c_int;
    signed![
        rknpu_weights_i8: I8,
        rknpu_weights_i4: I4,
        rknpu_weights_f16: F16,
        rknpu_weights_ggml: Ggml,
        rknpu_weights_free: Free,
    ]
}

/// The single-bank products: blocking (f32 or any activation type) and submitted.
fn mul_mat_fns() -> Vec<(&'static str, usize)> {
    type MulMat = unsafe extern "C" fn(W, *const f32, u32, *mut f32) -> c_int;
    type MulMatEx = unsafe extern "C" fn(W, u32, X, usize, u32, *mut f32, usize) -> c_int;
    type Submit = unsafe extern "C" fn(W, u32, X, usize, u32, *mut f32, usize, OutJ) -> c_int;
    type Write =
        unsafe extern "C" fn(W, u32, u32, ffi::RowWriter, *mut c_void, *mut f32, usize) -> c_int;
    signed![
        rknpu_mul_mat: MulMat,
        rknpu_mul_mat_write: Write,
        rknpu_mul_mat_ex: MulMatEx,
        rknpu_mul_mat_submit: Submit,
    ]
}

/// The batch functions: make, run, submit and free a batch of banks.
fn batch_fns() -> Vec<(&'static str, usize)> {
    type BatchNew = unsafe extern "C" fn(*const W, u32, u32, *mut Batch) -> c_int;
    type BatchMulMat = unsafe extern "C" fn(Batch, u32, X, usize, Ys, *const usize) -> c_int;
    type BatchSubmit = unsafe extern "C" fn(Batch, u32, X, usize, Ys, *const usize, OutJ) -> c_int;
    type BatchFree = extern "C" fn(Batch) -> c_int;
    signed![
        rknpu_batch_new: BatchNew,
        rknpu_batch_mul_mat: BatchMulMat,
        rknpu_batch_submit: BatchSubmit,
        rknpu_batch_free: BatchFree,
    ]
}

/// The job functions: poll, wait for and free a submitted job.
fn job_fns() -> Vec<(&'static str, usize)> {
    type JobDone = extern "C" fn(Job) -> c_int;
    type JobWait = unsafe extern "C" fn(Job) -> c_int;
    type JobFree = extern "C" fn(Job) -> c_int;
    signed![
        rknpu_job_done: JobDone,
        rknpu_job_wait: JobWait,
        rknpu_job_free: JobFree,
    ]
}

/// The table declares exactly the exported functions, each prototype naming its function.
#[test]
fn table_matches_exports() {
    let table: BTreeSet<&str> = FUNCTIONS.iter().map(|f| f.name).collect();
    let exports: BTreeSet<&str> = exported().iter().map(|(name, _)| *name).collect();
    assert_eq!(table, exports);
    assert_eq!(table.len(), FUNCTIONS.len(), "a function is declared twice");
    for f in FUNCTIONS {
        assert!(
            f.prototype.contains(&format!("{}(", f.name)),
            "{}",
            f.prototype
        );
        assert!(!f.doc.is_empty(), "{} has no comment", f.name);
    }
    let src = [
        include_str!("../src/ffi/mod.rs"),
        include_str!("../src/ffi/weights.rs"),
        include_str!("../src/ffi/mul_mat.rs"),
        include_str!("../src/ffi/jobs.rs"),
    ]
    .concat();
    let defined = src.matches("extern \"C\" fn rknpu_").count();
    assert_eq!(
        defined,
        FUNCTIONS.len(),
        "the ffi module defines a function the table lacks"
    );
}

/// The header defines every error code with its value, and the codes are distinct and
/// negative.
#[test]
fn header_defines_the_codes() {
    let text = header();
    let values: BTreeSet<i32> = Code::ALL.iter().map(|&c| c as i32).collect();
    assert_eq!(values.len(), Code::ALL.len());
    for &code in Code::ALL {
        assert!((code as i32) < 0);
        assert!(text.contains(&format!("#define {} ({})\n", code.name(), code as i32)));
    }
    assert!(text.contains("typedef struct rknpu_device rknpu_device;"));
    assert!(text.contains("typedef struct rknpu_weights rknpu_weights;"));
    assert!(text.contains("typedef struct rknpu_job rknpu_job;"));
    assert!(text.contains("#define RKNPU_WEIGHTS_I8 (256u)\n"));
    assert!(text.contains("#define RKNPU_WEIGHTS_I4 (257u)\n"));
}
