//! Matmul on a device, shaped for inference backends: weights packed once into a
//! resident [`WeightBank`] keyed by its layout, a [`Matmul`] per M (microseconds to make,
//! the same bank for every M), native element types in and out, results into the
//! caller's slices, blocking or asynchronous ([`PendingMatmul`]), several matmuls in one
//! job ([`MatmulBatch`]).
//!
//! The backend path — a quantised layer, `y = x · Wᵀ` for f32 `x` of any M:
//!
//! ```
//! use rknpu_driver::device::Device;
//! use rknpu_driver::compute::matmul::{Matmul, WeightBank};
//! use rknpu_driver::kernels::single::Dtype;
//! use std::sync::Arc;
//!
//! let dev = Device::open_or_emulated()?;          // a board if there is one
//! let (n, k) = (64, 128);
//! let w: Vec<f32> = (0..n * k).map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5).collect();
//! // Quantised per output channel to int8 once, at load (W8A8).
//! let bank = Arc::new(WeightBank::quantize_f32_nk(&dev, n, k, &w, Dtype::Int8)?);
//! for m in [1u32, 5] {
//!     let x: Vec<f32> = (0..m * k).map(|i| (i % 5) as f32 - 2.0).collect();
//!     let mut y = vec![0f32; (m * n) as usize];
//!     Matmul::new(&bank, m)?.mul_mat(&x, &mut y)?; // x quantised per row on the way
//!     let exact: f32 = (0..k as usize).map(|i| x[i] * w[i]).sum();
//!     assert!((y[0] - exact).abs() < 0.05 * exact.abs().max(1.0));
//! }
//! # Ok::<(), rknpu_driver::Error>(())
//! ```
//!
//! Quantised layers: the integer product runs on the NPU; the per-row activation scale
//! and the per-channel weight scale are applied on the host while the results are read
//! out of the NPU's layout (one pass, no extra copy). docs/matmul.md says why the
//! scaling is not done by the DPU yet.

mod bank;
mod batch;
mod element;
mod grouped;
mod in_place;
mod io;
mod npu_dequant;
mod options;
mod residual;
mod run;
mod spread;

pub use bank::{WeightBank, Weights};
pub use batch::{MatmulBatch, PendingBatch};
pub use element::{Input, InputSlice, Output, OutputSlice};
pub use grouped::quantize_groups_i8;
pub use in_place::InputRows;
pub use options::MatmulOptions;
pub use residual::{MAX_ACTIVATION_PASSES, quantize_passes_i8, quantize_residual_i8};
pub use run::PendingMatmul;
use run::{
    all_done, in_range, program_job, refuse_incremental_on_rocket, shape, submit_blocking,
    submit_chains, wait_all,
};
pub(crate) use run::{cores_of, job_ranges};
pub use spread::SpreadMatmul;

use crate::device::{Bo, BoFlags, CoreMask, Device, Job, JobResult, Pending};
use crate::error::{Error, Result};
use crate::kernels::matmul::finish::Reduction;
use crate::kernels::matmul::{Plan, REGCMD, pack};
use crate::kernels::single::{Dtype, OutType};
use crate::regcmd::{BufferId, Program, ProgramBuilder, RegCmd, words_to_le_bytes};
use half::{bf16, f16};
use npu_dequant::{NpuDequant, fp16_normal};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a matmul's activations are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Activations {
    /// int8: int8 × int8 on an int8 bank; on an int4 bank W4A8, two int4 × int4
    /// products (docs/matmul.md).
    Int8,
    /// int4 values −8..=7 on an int4 bank (int4 × int4).
    Int4,
    /// fp16 on an fp16 bank.
    Fp16,
    /// bf16 on a bf16 bank.
    Bf16,
}

impl Activations {
    fn name(self) -> &'static str {
        match self {
            Activations::Int8 => "int8",
            Activations::Int4 => "int4",
            Activations::Fp16 => "fp16",
            Activations::Bf16 => "bf16",
        }
    }
}

/// Time spent in the steps of the last blocking call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timings {
    /// Quantising and packing A.
    pub pack: Duration,
    /// Submission and wait.
    pub submit_wait: Duration,
    /// Reading, reducing and scaling the results.
    pub unpack: Duration,
}

/// What a submission computes, so that its results are read the right way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Submitted {
    /// Integer activations: integer results.
    Int,
    /// f32 activations quantised per row (integer banks): scaled f32 results.
    Quantized,
    /// Float activations (fp16 banks): float results.
    Float,
    /// f32 activations quantised per row, scaled on the NPU into its row-major fp32
    /// result; the host multiplies rows whose scale the NPU could not take by it.
    NpuScaled,
}

/// A matmul of M rows against a [`WeightBank`]: its plan, its program (encoded and bound
/// once), and its A, C and program buffers. Owns what it needs (`'static`,
/// `Send + Sync`): a backend keeps one per layer and M, or makes one per call.
///
/// ```
/// use rknpu_driver::device::Device;
/// use rknpu_driver::compute::matmul::{Matmul, MatmulOptions, WeightBank, Weights};
/// use std::sync::Arc;
///
/// let dev = Device::open_spec("emu")?;
/// let w: Vec<i8> = (0..4096).map(|i| (i % 9) as i8 - 4).collect(); // 64 × 64, [out][in]
/// let bank = Arc::new(WeightBank::new(&dev, (64, 64), Weights::I8(&w))?);
/// let mut mm = Matmul::with_options(&bank, 3, MatmulOptions::default().cores(2))?;
/// let a = vec![2i8; 3 * 64];
/// let mut c = vec![0i32; 3 * 64];
/// mm.run_into(&a, &mut c)?; // exact int32, into the caller's slice
/// assert_eq!(c[1], 2 * w[64..128].iter().map(|&v| v as i32).sum::<i32>());
/// # Ok::<(), rknpu_driver::Error>(())
/// ```
#[derive(Debug)]
pub struct Matmul {
    bank: Arc<WeightBank>,
    plan: Plan,
    /// Rows of A as the caller sees them (W4A8 plans, and those of residual
    /// activations, have twice as many).
    rows: u32,
    acts: Activations,
    program: Program,
    /// Where C holds each tile's K waves, for finishing a call in one pass.
    reduction: Reduction,
    regcmd: Bo,
    a: Bo,
    c: Bo,
    /// Row scales of the last quantised submission.
    row_scales: Vec<f32>,
    /// Against a bank with group offsets: each row's sum of activations per group
    /// (`rows × groups`) of the last submission.
    group_sums: Vec<f32>,
    /// NPU dequantisation, when chosen.
    npu: Option<NpuDequant>,
    /// Whether the program has incremental bodies.
    incremental: bool,
    /// The deadline of a blocking call.
    pub timeout: Duration,
    /// Timings of the last blocking call.
    pub timings: Timings,
    /// The job result of the last blocking call (of its last job, where it took
    /// several).
    pub last: Option<JobResult>,
    /// The ranges of the program's tasks submitted as separate jobs: one, or on rocket
    /// as many as keep each job modelled within half its timeout ([`job_ranges`]).
    jobs: Vec<std::ops::Range<usize>>,
}

impl Matmul {
    /// A matmul of `m` rows against `bank`, with the default options: every core of the
    /// device (as a maximum), int8 activations on integer banks, fp16 on fp16 banks.
    pub fn new(bank: &Arc<WeightBank>, m: u32) -> Result<Matmul> {
        Matmul::with_options(bank, m, MatmulOptions::default())
    }

    /// The matmul of the most rows, at most `m`, against `bank` with `options` that one
    /// submission holds: `m` rows where they fit; otherwise, where `m` rows are refused
    /// with [`Error::Unsupported`] (a grouped bank's or NPU-dequantised matmul's program
    /// grows by a dequantisation task per row, group and 1024 channels, and a core's chain
    /// holds 4095 tasks), the largest row count that is made, found by bisection. A
    /// product of `m` rows then runs in calls of [`Matmul::rows`] rows (the last may have
    /// fewer: [`Matmul::mul_mat`] takes them).
    ///
    /// Errors: any other error of [`Matmul::with_options`], and its error for one row
    /// when not even one fits.
    ///
    /// ```
    /// use rknpu_driver::compute::matmul::{Matmul, MatmulOptions, WeightBank};
    /// use rknpu_driver::device::Device;
    /// use std::sync::Arc;
    ///
    /// let dev = Device::open_spec("emu")?;
    /// let (n, k) = (1024u32, 4096u32);
    /// let w = vec![0.5f32; (n * k) as usize];
    /// // Groups of 32: 128 dequantisation tasks a row.
    /// let bank = Arc::new(WeightBank::quantize_f32_nk_grouped(&dev, n, k, &w, 32)?);
    /// let options = MatmulOptions::default().cores(1);
    /// assert!(Matmul::with_options(&bank, 64, options).is_err());
    /// let mm = Matmul::fitting(&bank, 64, options)?;
    /// assert!(mm.rows() < 64 && Matmul::with_options(&bank, mm.rows() + 1, options).is_err());
    /// # Ok::<(), rknpu_driver::Error>(())
    /// ```
    pub fn fitting(bank: &Arc<WeightBank>, m: u32, options: MatmulOptions) -> Result<Matmul> {
        match Matmul::with_options(bank, m, options) {
            Err(Error::Unsupported { .. }) if m > 1 => {}
            made => return made,
        }
        // `lo` rows are made (once found), `hi` rows are refused.
        let (mut best, mut lo, mut hi) = (None, 0u32, m);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match Matmul::with_options(bank, mid, options) {
                Ok(mm) => (best, lo) = (Some(mm), mid),
                Err(Error::Unsupported { .. }) => hi = mid,
                Err(e) => return Err(e),
            }
        }
        match best {
            Some(mm) => Ok(mm),
            None => Matmul::with_options(bank, 1, options),
        }
    }

    /// A matmul of `m` rows against `bank` with `options`. Plans, encodes and binds the
    /// program and allocates A and C; the bank is not touched.
    pub fn with_options(bank: &Arc<WeightBank>, m: u32, options: MatmulOptions) -> Result<Matmul> {
        let dev = bank.device();
        let dtype = bank.layout.dtype;
        let acts = options.activations.unwrap_or(match dtype {
            Dtype::Fp16 => Activations::Fp16,
            Dtype::Bf16 => Activations::Bf16,
            _ => Activations::Int8,
        });
        refuse_incremental_on_rocket(dev, options.incremental)?;
        // A grouped bank's scales are applied on the NPU, group by group.
        let grouped = bank.group_scales.is_some();
        let npu_dequant = options.npu_dequant || grouped;
        if npu_dequant && !(dtype == Dtype::Int8 && acts == Activations::Int8) {
            return Err(Error::Precision {
                input: acts.name(),
                weights: dtype.name(),
                output: "fp32 dequantised on the NPU (int8 weights and activations only)",
            });
        }
        let out = match (dtype, acts) {
            (Dtype::Int8, Activations::Int8) if npu_dequant => OutType::Fp32,
            (Dtype::Int8, Activations::Int8)
            | (Dtype::Int4, Activations::Int8 | Activations::Int4) => OutType::Int32,
            (Dtype::Fp16, Activations::Fp16) if options.fp16_out => OutType::Fp16,
            (Dtype::Fp16, Activations::Fp16) | (Dtype::Bf16, Activations::Bf16) => OutType::Fp32,
            _ => {
                return Err(Error::Precision {
                    input: acts.name(),
                    weights: dtype.name(),
                    output: if dtype == Dtype::Fp16 {
                        "fp32"
                    } else {
                        "int32"
                    },
                });
            }
        };
        let passes = options.activation_passes;
        if !(1..=MAX_ACTIVATION_PASSES).contains(&passes) {
            return Err(Error::OutOfRange {
                what: "activation passes",
                index: 0,
                value: passes.to_string(),
                range: "1..=3",
            });
        }
        if passes > 1 && !npu_dequant {
            return Err(Error::Precision {
                input: "int8 in several passes (residual activations)",
                weights: dtype.name(),
                output: "fp32 not dequantised on the NPU (residuals need it)",
            });
        }
        let w4a8 = dtype == Dtype::Int4 && acts == Activations::Int8;
        let copies = if w4a8 { 2 } else { passes };
        let plan_rows = m.checked_mul(copies).ok_or(Error::OutOfRange {
            what: "rows",
            index: 0,
            value: m.to_string(),
            range: "rows × the plan's copies of them (W4A8: 2; residual activations: the passes) within u32",
        })?;
        let cores = match options.cores {
            Some(0) => {
                return Err(Error::OutOfRange {
                    what: "cores",
                    index: 0,
                    value: "0".into(),
                    range: "1..=3",
                });
            }
            Some(c) => c.min(dev.cores()),
            None => dev.cores(),
        };
        let plan = Plan::for_layout(&bank.layout, plan_rows, out, cores)?;
        let npu = if npu_dequant {
            let held;
            let scales = match (bank.group_scales.as_deref(), bank.scales.as_deref()) {
                (Some(s), _) => {
                    held = s.iter().map(|&h| h.to_f32()).collect::<Vec<_>>();
                    &held
                }
                (None, Some(s)) => s,
                (None, None) => {
                    held = vec![1.0; bank.layout.n as usize];
                    &held
                }
            };
            let mut d = NpuDequant::new(bank.buffer(), &plan, scales, grouped)?;
            d.passes = passes;
            Some(d)
        } else {
            None
        };
        Matmul::build(
            bank,
            plan,
            m,
            acts,
            (options.timeout, options.incremental),
            npu,
        )
    }

    /// A matmul that runs `plan` against `bank` (whose layout the plan must follow), for
    /// callers that choose the plan themselves (a result type, a core count, a
    /// single-token layout). Its activations are the plan's input type (int4 plans: int4
    /// × int4).
    pub fn for_plan(bank: &Arc<WeightBank>, plan: Plan) -> Result<Matmul> {
        Matmul::for_plan_with(bank, plan, MatmulOptions::default())
    }

    /// [`Matmul::for_plan`] with the options a plan leaves open: the deadline and
    /// incremental bodies. The plan fixes the cores, the activations and the result
    /// type, so the options' `cores`, `activations`, `fp16_out` and `npu_dequant` are not
    /// read.
    pub fn for_plan_with(
        bank: &Arc<WeightBank>,
        plan: Plan,
        options: MatmulOptions,
    ) -> Result<Matmul> {
        refuse_incremental_on_rocket(bank.device(), options.incremental)?;
        if plan.layout != bank.layout {
            return Err(Error::ShapeMismatch {
                what: "weight bank bytes (the plan follows another layout)",
                expected: plan.layout.bytes,
                actual: bank.layout.bytes,
            });
        }
        let acts = match plan.spec.dtype {
            Dtype::Int8 => Activations::Int8,
            Dtype::Int4 => Activations::Int4,
            Dtype::Bf16 => Activations::Bf16,
            _ => Activations::Fp16,
        };
        let rows = plan.spec.m;
        Matmul::build(
            bank,
            plan,
            rows,
            acts,
            (options.timeout, options.incremental),
            None,
        )
    }

    /// Encodes and binds `plan`'s program, allocating A and C.
    fn build(
        bank: &Arc<WeightBank>,
        plan: Plan,
        rows: u32,
        acts: Activations,
        (timeout, incremental): (Duration, bool),
        npu: Option<NpuDequant>,
    ) -> Result<Matmul> {
        let dev = bank.device();
        // rocket starts each task on its own: nothing stays in the CBUF between them.
        let plan = match dev.capabilities().cbuf_reuse {
            true => plan,
            false => plan.without_reuse(),
        };
        let program = match &npu {
            // Each call's row scales are written into the bound words in place.
            Some(d) => NpuDequant::program(&plan, incremental, d.grouped)?,
            None => plan.program_in(ProgramBuilder::new(REGCMD).incremental(incremental))?,
        };
        let reduction = plan.reduction();
        // In the bank's IOMMU domain: one job names them all (docs/matmul.md, "Running").
        let beside = |bytes: usize| dev.alloc_beside(bank.buffer(), bytes, BoFlags::default());
        let regcmd = beside(program.byte_len())?;
        let a = beside(plan.a_bytes.max(1) as usize)?;
        let c = beside(plan.c_bytes.max(1) as usize)?;
        let mut mm = Matmul {
            bank: bank.clone(),
            plan,
            rows,
            acts,
            reduction,
            program,
            regcmd,
            a,
            c,
            row_scales: Vec::new(),
            group_sums: Vec::new(),
            npu,
            incremental,
            timeout,
            timings: Timings::default(),
            last: None,
            jobs: Vec::new(),
        };
        mm.bind()?;
        Ok(mm)
    }

    /// Binds the program to the buffers and writes it into its buffer.
    fn bind(&mut self) -> Result<()> {
        let words = self.bound_words()?;
        self.regcmd.write(0, &words_to_le_bytes(&words))?;
        self.jobs = job_ranges(self.bank.device(), &words, &self.program)?;
        if let Some(d) = &mut self.npu {
            d.keep(&self.plan, &self.program, words);
        }
        // Verified once, here: the calls submit the same words against the same
        // buffers (NPU dequantisation rewrites only its BS multiplier operands, which
        // name no memory).
        self.job().verify_on(self.bank.device())
    }

    /// Tasks per core of the program: the plan's, plus the dequantisation tasks when the
    /// NPU dequantises.
    fn per_core(&self) -> &[usize] {
        match &self.npu {
            Some(d) => &d.per_core,
            None => &self.plan.per_core,
        }
    }

    /// The ranges of the program's tasks each call submits as one job: the whole
    /// program, or on a driver that stops long jobs (rocket) runs of tasks each modelled
    /// within half its timeout ([`crate::device::Capabilities::job_timeout`]).
    pub fn jobs(&self) -> &[std::ops::Range<usize>] {
        &self.jobs
    }

    /// The plan (for W4A8, of twice the rows: the high and low halves; for residual
    /// activations, the two passes).
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The bank.
    pub fn bank(&self) -> &Arc<WeightBank> {
        &self.bank
    }

    /// Rows of A.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// The activations it takes.
    pub fn activations(&self) -> Activations {
        self.acts
    }

    fn k(&self) -> usize {
        self.bank.layout.k as usize
    }

    fn n(&self) -> usize {
        self.bank.layout.n as usize
    }

    fn len_a(&self) -> usize {
        self.rows as usize * self.k()
    }

    fn len_c(&self) -> usize {
        self.rows as usize * self.n()
    }

    fn expect(&self, acts: Activations) -> Result<()> {
        if self.acts != acts {
            return Err(Error::Precision {
                input: acts.name(),
                weights: self.bank.layout.dtype.name(),
                output: "this matmul, made for other activations",
            });
        }
        Ok(())
    }

    /// The job of this matmul's program and buffers.
    fn job(&self) -> Job<'_> {
        let dev = self.bank.device();
        let list = (&self.regcmd, &self.program);
        self.with_buffers(program_job(dev, list, self.per_core(), self.timeout))
    }

    /// `job` with this matmul's buffers.
    fn with_buffers<'a>(&'a self, job: Job<'a>) -> Job<'a> {
        let job = job.reads(&self.a).reads(&self.bank.bo);
        match &self.npu {
            // The dequantisation tasks read the matmul tasks' fp32 sums back: C is
            // listed as read and as written, as any buffer a job both reads and writes.
            Some(d) => job
                .reads(&self.c)
                .writes(&self.c)
                .reads(&d.coeffs)
                .writes(&d.out),
            None => job.writes(&self.c),
        }
    }

    /// Refuses integer results from a matmul whose program dequantises on the NPU.
    fn integer_results(&self) -> Result<()> {
        if self.npu.is_some() {
            return Err(Error::Precision {
                input: "int8",
                weights: "int8",
                output: "int32 (this matmul dequantises on the NPU: use mul_mat)",
            });
        }
        Ok(())
    }
}
