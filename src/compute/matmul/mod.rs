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
mod npu_dequant;
mod rows;

pub use bank::{WeightBank, Weights};
pub use batch::{MatmulBatch, PendingBatch};

use crate::device::{Bo, BoFlags, CoreMask, Device, Job, JobResult, Pending};
use crate::error::{Error, Result};
use crate::kernels::matmul::{Plan, REGCMD, pack, quant};
use crate::kernels::single::{Dtype, OutType};
use crate::regcmd::{BufferId, Program, ProgramBuilder, words_to_le_bytes};
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

/// How a [`Matmul`] is made; the default suits most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MatmulOptions {
    /// The most cores to use (1..=3); `None` for every core the device has. A maximum: a
    /// product too small to split runs on fewer.
    pub cores: Option<u32>,
    /// The activations; `None` for int8 on integer banks, fp16 on fp16 banks.
    pub activations: Option<Activations>,
    /// fp16 banks: the DPU writes fp16 results (K within one wave) instead of fp32.
    pub fp16_out: bool,
    /// int8 banks with one K wave: [`Matmul::mul_mat`] scales and converts to f32 on the
    /// NPU (docs/matmul.md, "What runs where") instead of on the host.
    pub npu_dequant: bool,
    /// Incremental task bodies: after the first two tasks of each core's chain, a task
    /// writes only the registers whose values differ from what its ping-pong register
    /// group holds (and those the vendor runtime always writes), as the vendor runtime's
    /// chains do ([`ProgramBuilder::incremental`]). Shorter programs, the same results.
    /// Vendor driver only: refused on rocket, where it has not been validated
    /// (docs/device.md).
    pub incremental: bool,
    /// The deadline of a blocking call.
    pub timeout: Duration,
}

impl Default for MatmulOptions {
    fn default() -> MatmulOptions {
        MatmulOptions {
            cores: None,
            activations: None,
            fp16_out: false,
            npu_dequant: false,
            incremental: false,
            timeout: Duration::from_secs(5),
        }
    }
}

impl MatmulOptions {
    /// At most `cores` cores.
    pub fn cores(self, cores: u32) -> MatmulOptions {
        MatmulOptions {
            cores: Some(cores),
            ..self
        }
    }

    /// These activations.
    pub fn activations(self, activations: Activations) -> MatmulOptions {
        MatmulOptions {
            activations: Some(activations),
            ..self
        }
    }

    /// fp16 results written by the DPU (fp16 banks).
    pub fn fp16_out(self) -> MatmulOptions {
        MatmulOptions {
            fp16_out: true,
            ..self
        }
    }

    /// Dequantisation on the NPU (int8 banks with one K wave, int8 activations): the
    /// DPU casts the sums to fp32 and multiplies them by the row and channel scales, read
    /// as fp16 (so each scale is rounded to fp16: a relative error of at most 2⁻¹¹ each).
    /// Only [`Matmul::mul_mat`] and its kin are offered then.
    pub fn dequantize_on_npu(self) -> MatmulOptions {
        MatmulOptions {
            npu_dequant: true,
            ..self
        }
    }

    /// Incremental task bodies on (`true`) or off (the default); see
    /// [`MatmulOptions::incremental`](MatmulOptions#structfield.incremental). A rocket
    /// device refuses them with [`Error::NotOffered`].
    pub fn incremental(self, on: bool) -> MatmulOptions {
        MatmulOptions {
            incremental: on,
            ..self
        }
    }

    /// This deadline for blocking calls.
    pub fn timeout(self, timeout: Duration) -> MatmulOptions {
        MatmulOptions { timeout, ..self }
    }
}

/// Time spent in the steps of the last blocking call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
/// use rknpu_driver::compute::matmul::{Matmul, MatmulOptions, WeightBank};
/// use std::sync::Arc;
///
/// let dev = Device::open_spec("emu")?;
/// let w: Vec<i8> = (0..4096).map(|i| (i % 9) as i8 - 4).collect(); // 64 × 64, [out][in]
/// let bank = Arc::new(WeightBank::from_i8_nk(&dev, 64, 64, &w)?);
/// let mut mm = Matmul::with_options(&bank, 3, MatmulOptions::default().cores(2))?;
/// let a = vec![2i8; 3 * 64];
/// let mut c = vec![0i32; 3 * 64];
/// mm.run_i8_into(&a, &mut c)?; // exact int32, into the caller's slice
/// assert_eq!(c[1], 2 * w[64..128].iter().map(|&v| v as i32).sum::<i32>());
/// # Ok::<(), rknpu_driver::Error>(())
/// ```
#[derive(Debug)]
pub struct Matmul {
    bank: Arc<WeightBank>,
    plan: Plan,
    /// Rows of A as the caller sees them (W4A8 plans have twice as many).
    rows: u32,
    acts: Activations,
    program: Program,
    regcmd: Bo,
    a: Bo,
    c: Bo,
    /// Row scales of the last quantised submission.
    row_scales: Vec<f32>,
    /// NPU dequantisation, when chosen.
    npu: Option<NpuDequant>,
    /// Whether the program has incremental bodies.
    incremental: bool,
    /// The deadline of a blocking call.
    pub timeout: Duration,
    /// Timings of the last blocking call.
    pub timings: Timings,
    /// The job result of the last blocking call.
    pub last: Option<JobResult>,
}

fn shape(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    Error::check_len(what, expected, actual)
}

fn in_range(
    what: &'static str,
    a: &[i32],
    (lo, hi): (i32, i32),
    range: &'static str,
) -> Result<()> {
    match a.iter().position(|v| !(lo..=hi).contains(v)) {
        Some(i) => Err(Error::OutOfRange {
            what,
            index: i,
            value: a[i].to_string(),
            range,
        }),
        None => Ok(()),
    }
}

/// Submits `program` (chains of `per_core` tasks) without blocking, each job given its
/// buffers by `buffers`. The vendor driver takes non-blocking jobs only with the
/// automatic core mask (an explicitly placed one can crash the kernel in its timeout
/// clean-up; docs/device.md), and the automatic mask runs one chain on one idle core:
/// so each chain is its own job there, and the kernel places them on idle cores side by
/// side. Rocket places every task itself: one job.
fn submit_chains<'a>(
    dev: &'a Device,
    (regcmd, program): (&'a Bo, &Program),
    per_core: &[usize],
    timeout: Duration,
    buffers: impl Fn(Job<'a>) -> Job<'a>,
) -> Result<Vec<Pending<'a>>> {
    let jobs = if dev.capabilities().picks_cores || per_core.len() == 1 {
        vec![Job::from_program(regcmd, program).on_cores(CoreMask::Auto, &[per_core.iter().sum()])]
    } else {
        let mut first = 0;
        per_core
            .iter()
            .map(|&count| {
                let tasks = program.tasks()[first..first + count].to_vec();
                first += count;
                Job::new(regcmd, tasks)
            })
            .collect()
    };
    jobs.into_iter()
        .map(|job| dev.submit_nonblocking(buffers(job.timeout(timeout))))
        .collect()
}

/// Waits for every pending job until `deadline`; the first error, after all were waited
/// for (a job left unwaited would be settled on drop anyway).
fn wait_all(pending: Vec<Pending<'_>>, deadline: Instant) -> Result<()> {
    let mut first = Ok(());
    for p in pending {
        if let Err(e) = p.wait(deadline)
            && first.is_ok()
        {
            first = Err(e);
        }
    }
    first
}

/// Whether every pending job finished.
fn all_done(pending: &[Pending<'_>]) -> Result<bool> {
    for p in pending {
        if !p.is_done()? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Incremental bodies are validated on the vendor driver only (docs/device.md).
fn refuse_incremental_on_rocket(dev: &Device, incremental: bool) -> Result<()> {
    if incremental && !dev.capabilities().incremental_tasks {
        return Err(Error::NotOffered {
            what: "incremental task bodies on the rocket driver: validated on the vendor driver only (a delta program did not work on rocket; docs/device.md)".into(),
        });
    }
    Ok(())
}

/// The core mask and per-core task counts of a job whose chains are `per_core`.
fn cores_of(dev: &Device, per_core: &[usize]) -> (CoreMask, Vec<usize>) {
    let mask = match per_core.len() {
        // A driver that places jobs on cores itself (rocket) is given none.
        _ if dev.capabilities().picks_cores => CoreMask::Auto,
        // Core 0 named explicitly, as every board-validated vendor submit of a one-core
        // job does (mask 1), rather than the kernel's automatic pick.
        1 => CoreMask::Core0,
        2 => CoreMask::Cores01,
        _ => CoreMask::All,
    };
    let split = if mask == CoreMask::Auto {
        vec![per_core.iter().sum()]
    } else {
        per_core.to_vec()
    };
    (mask, split)
}

impl Matmul {
    /// A matmul of `m` rows against `bank`, with the default options: every core of the
    /// device (as a maximum), int8 activations on integer banks, fp16 on fp16 banks.
    pub fn new(bank: &Arc<WeightBank>, m: u32) -> Result<Matmul> {
        Matmul::with_options(bank, m, MatmulOptions::default())
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
        if options.npu_dequant && !(dtype == Dtype::Int8 && acts == Activations::Int8) {
            return Err(Error::Precision {
                input: acts.name(),
                weights: dtype.name(),
                output: "fp32 dequantised on the NPU (int8 weights and activations only)",
            });
        }
        let out = match (dtype, acts) {
            (Dtype::Int8, Activations::Int8) if options.npu_dequant => OutType::Fp32,
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
        let w4a8 = dtype == Dtype::Int4 && acts == Activations::Int8;
        let plan_rows = if w4a8 { m.checked_mul(2) } else { Some(m) };
        let plan_rows = plan_rows.ok_or(Error::OutOfRange {
            what: "rows",
            index: 0,
            value: m.to_string(),
            range: "1..=2^31 (W4A8 runs twice as many)",
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
        let npu = if options.npu_dequant {
            let ones;
            let scales = match bank.scales.as_deref() {
                Some(s) => s,
                None => {
                    ones = vec![1.0; bank.layout.n as usize];
                    &ones
                }
            };
            Some(NpuDequant::new(dev, &plan, scales)?)
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
            Some(_) => NpuDequant::program(&plan, incremental)?,
            None => plan.program_in(ProgramBuilder::new(REGCMD).incremental(incremental))?,
        };
        let regcmd = dev.alloc(program.byte_len(), BoFlags::default())?;
        let a = dev.alloc(plan.a_bytes.max(1) as usize, BoFlags::default())?;
        let c = dev.alloc(plan.c_bytes.max(1) as usize, BoFlags::default())?;
        let mut mm = Matmul {
            bank: bank.clone(),
            plan,
            rows,
            acts,
            program,
            regcmd,
            a,
            c,
            row_scales: Vec::new(),
            npu,
            incremental,
            timeout,
            timings: Timings::default(),
            last: None,
        };
        mm.bind()?;
        Ok(mm)
    }

    /// Binds the program to the buffers and writes it into its buffer.
    fn bind(&mut self) -> Result<()> {
        let mut bases = vec![
            self.regcmd.dma_addr(),
            self.a.dma_addr(),
            self.bank.bo.dma_addr(),
            self.c.dma_addr(),
        ];
        if let Some(d) = &self.npu {
            bases.extend([d.coeffs.dma_addr(), d.out.dma_addr()]);
        }
        let words = self
            .program
            .bind(|id: BufferId| bases.get(id.0 as usize).map(|&x| x as u64))?;
        self.regcmd.write(0, &words_to_le_bytes(&words))?;
        if let Some(d) = &mut self.npu {
            d.keep(&self.plan, &self.program, words);
        }
        Ok(())
    }

    /// Tasks per core of the program: the plan's, plus the dequantisation tasks when the
    /// NPU dequantises.
    fn per_core(&self) -> &[usize] {
        match &self.npu {
            Some(d) => &d.per_core,
            None => &self.plan.per_core,
        }
    }

    /// The plan (for W4A8, of twice the rows: the high and low halves).
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
        let (mask, split) = cores_of(self.bank.device(), self.per_core());
        let job = Job::from_program(&self.regcmd, &self.program)
            .on_cores(mask, &split)
            .timeout(self.timeout);
        self.with_buffers(job)
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

    /// Packs int8 activations into the A buffer (W4A8: their high and low halves).
    fn put_i8(&mut self, a: &[i8]) -> Result<()> {
        shape("activation values", self.len_a(), a.len())?;
        let packed = match self.bank.layout.dtype {
            Dtype::Int8 => pack::activations_i8(&self.plan, a)?,
            _ => {
                let (mut hi, mut lo) = (vec![0i8; a.len()], vec![0i8; a.len()]);
                quant::split_w4a8(a, &mut hi, &mut lo)?;
                let both: Vec<i32> = hi.iter().chain(&lo).map(|&v| v as i32).collect();
                self.plan.pack_a_int(&both)?
            }
        };
        self.a.write(0, &packed)
    }

    /// Packs integer activations of this matmul's type into the A buffer.
    fn put_int(&mut self, a: &[i32]) -> Result<()> {
        shape("activation values", self.len_a(), a.len())?;
        match self.acts {
            Activations::Int8 => {
                in_range("activations", a, (-128, 127), "-128..=127")?;
                let a8: Vec<i8> = a.iter().map(|&v| v as i8).collect();
                self.put_i8(&a8)
            }
            Activations::Int4 => {
                in_range("activations", a, (-8, 7), "-8..=7")?;
                let packed = self.plan.pack_a_int(a)?;
                self.a.write(0, &packed)
            }
            Activations::Fp16 | Activations::Bf16 => Err(Error::Precision {
                input: "integer",
                weights: self.bank.layout.dtype.name(),
                output: "fp32",
            }),
        }
    }

    /// Packs float activations, rounded to the bank's 16-bit type (the packer rounds),
    /// into the A buffer of a matmul made for `acts`.
    fn put_float(&mut self, acts: Activations, a: &[f32]) -> Result<()> {
        self.expect(acts)?;
        shape("activation values", self.len_a(), a.len())?;
        let packed = self.plan.pack_a_f32(a)?;
        self.a.write(0, &packed)
    }

    /// Packs fp16 activations into the A buffer.
    fn put_f16(&mut self, a: &[f16]) -> Result<()> {
        let wide: Vec<f32> = a.iter().map(|v| v.to_f32()).collect();
        self.put_float(Activations::Fp16, &wide)
    }

    /// Packs bf16 activations into the A buffer.
    fn put_bf16(&mut self, a: &[bf16]) -> Result<()> {
        let wide: Vec<f32> = a.iter().map(|v| v.to_f32()).collect();
        self.put_float(Activations::Bf16, &wide)
    }

    /// Quantises f32 activations per row (integer banks) or rounds them to fp16 or bf16
    /// (float banks) into the A buffer.
    fn put_f32(&mut self, x: &[f32]) -> Result<Submitted> {
        shape("activation values", self.len_a(), x.len())?;
        match self.acts {
            Activations::Bf16 | Activations::Fp16 => {
                self.put_float(self.acts, x)?;
                Ok(Submitted::Float)
            }
            Activations::Int8 => {
                let (q, s) = quant::quantize_rows_i8(x, self.k())?;
                self.put_i8(&q)?;
                self.row_scales = s;
                if self.npu.is_some() {
                    self.encode_row_scales()?;
                    return Ok(Submitted::NpuScaled);
                }
                Ok(Submitted::Quantized)
            }
            Activations::Int4 => Err(Error::Precision {
                input: "f32 (quantised to int8)",
                weights: "int4",
                output: "this matmul, made for int4 activations",
            }),
        }
    }

    /// Writes the current row scales into the program (NPU dequantisation). A scale
    /// fp16 cannot hold to its precision is left to the host: the NPU gets 1.
    fn encode_row_scales(&mut self) -> Result<()> {
        let Some(d) = &mut self.npu else {
            return Ok(());
        };
        let words = d.set_row_scales(&self.row_scales)?;
        self.regcmd.write(0, &words_to_le_bytes(words))
    }

    /// The NPU-dequantised rows into `out`, each multiplied on the host by its scale if
    /// the NPU did not take it.
    fn read_npu_scaled_into(&self, out: &mut [f32]) -> Result<()> {
        shape("result values", self.len_c(), out.len())?;
        let Some(d) = &self.npu else {
            return Err(Error::Precision {
                input: "int8",
                weights: "int8",
                output: "fp32 dequantised on the NPU (not chosen for this matmul)",
            });
        };
        let (n, n_pad) = (self.n(), self.bank.layout.n_pad as usize);
        d.out.read_with(|bytes| {
            for (m, row) in out.chunks_exact_mut(n).enumerate() {
                let src = &bytes[m * n_pad * 4..][..n * 4];
                let host = self.row_scales[m];
                let factor = if fp16_normal(host) { 1.0 } else { host };
                for (y, v) in row.iter_mut().zip(src.chunks_exact(4)) {
                    *y = f32::from_le_bytes([v[0], v[1], v[2], v[3]]) * factor;
                }
            }
        })
    }

    /// The exact integer results, row-major M×N, from the C buffer.
    fn read_int(&self) -> Result<Vec<i64>> {
        let all = self.c.read_with(|c| self.plan.reduce_int(c))??;
        if self.bank.layout.dtype == Dtype::Int4 && self.acts == Activations::Int8 {
            // W4A8: rows [0, M) are Hi·W, rows [M, 2M) Lo·W.
            let half = self.len_c();
            let n = self.n();
            let sums = &self.bank.col_sums;
            return Ok((0..half)
                .map(|i| 16 * all[i] + all[half + i] + 8 * sums[i % n])
                .collect());
        }
        Ok(all)
    }

    /// The results as `i32` into `out`: an error names the first that leaves the int32
    /// range (nothing is wrapped).
    fn read_i32_into(&self, out: &mut [i32]) -> Result<()> {
        shape("result values", self.len_c(), out.len())?;
        if self.bank.layout.dtype == Dtype::Int8 {
            return self.c.read_with(|c| pack::unpack_i32(&self.plan, c, out))?;
        }
        for (i, (d, v)) in out.iter_mut().zip(self.read_int()?).enumerate() {
            *d = i32::try_from(v).map_err(|_| Error::OutOfRange {
                what: "results",
                index: i,
                value: v.to_string(),
                range: "the int32 range (Matmul::run_int returns it exactly)",
            })?;
        }
        Ok(())
    }

    /// Float results (fp16 banks) into `out`.
    fn read_f32_into(&self, out: &mut [f32]) -> Result<()> {
        shape("result values", self.len_c(), out.len())?;
        self.c.read_with(|c| self.plan.reduce_f32_into(c, out))?
    }

    /// Quantised results: `acc · row_scale · channel_scale` into `out`.
    fn read_scaled_into(&self, out: &mut [f32]) -> Result<()> {
        shape("result values", self.len_c(), out.len())?;
        let n = self.n();
        let scales = self.bank.scales.as_deref();
        let scale = |i: usize| scales.map_or(1.0, |s| s[i % n]);
        if self.bank.layout.dtype == Dtype::Int8 {
            let mut acc = vec![0i32; out.len()];
            self.c
                .read_with(|c| pack::unpack_i32(&self.plan, c, &mut acc))??;
            for (i, (y, &v)) in out.iter_mut().zip(&acc).enumerate() {
                *y = v as f32 * self.row_scales[i / n] * scale(i);
            }
        } else {
            for (i, (y, v)) in out.iter_mut().zip(self.read_int()?).enumerate() {
                *y = v as f32 * self.row_scales[i / n] * scale(i);
            }
        }
        Ok(())
    }

    /// Reads what `what` computed into `out` as f32.
    fn read_f32_of(&self, what: Submitted, out: &mut [f32]) -> Result<()> {
        match what {
            Submitted::Quantized => self.read_scaled_into(out),
            Submitted::NpuScaled => self.read_npu_scaled_into(out),
            Submitted::Float => self.read_f32_into(out),
            Submitted::Int => {
                shape("result values", self.len_c(), out.len())?;
                for (y, v) in out.iter_mut().zip(self.read_int()?) {
                    *y = v as f32;
                }
                Ok(())
            }
        }
    }

    /// Submits and waits, timing it.
    fn run_job(&mut self) -> Result<()> {
        let t0 = Instant::now();
        let result = self.bank.device().submit(&self.job())?;
        self.timings.submit_wait = t0.elapsed();
        self.last = Some(result);
        Ok(())
    }

    /// Runs `put`, the job and `read`, timing each.
    fn run<T>(
        &mut self,
        put: impl FnOnce(&mut Matmul) -> Result<T>,
        read: impl FnOnce(&Matmul, T) -> Result<()>,
    ) -> Result<()> {
        let t0 = Instant::now();
        let what = put(self)?;
        self.timings.pack = t0.elapsed();
        self.run_job()?;
        let t1 = Instant::now();
        read(self, what)?;
        self.timings.unpack = t1.elapsed();
        Ok(())
    }

    /// `C = A · W` for int8 A (row-major M×K) into `out` (M×N `i32`): exact, and an error
    /// if a result leaves the int32 range (int8: K above 131 072 can). Int8 banks, and
    /// int4 banks through W4A8.
    pub fn run_i8_into(&mut self, a: &[i8], out: &mut [i32]) -> Result<()> {
        self.expect(Activations::Int8)?;
        self.integer_results()?;
        shape("result values", self.len_c(), out.len())?;
        self.run(|m| m.put_i8(a), |m, ()| m.read_i32_into(out))
    }

    /// [`Matmul::run_i8_into`] into a new vector.
    pub fn run_i8(&mut self, a: &[i8]) -> Result<Vec<i32>> {
        let mut out = vec![0i32; self.len_c()];
        self.run_i8_into(a, &mut out)?;
        Ok(out)
    }

    /// `C = A · W` for integer A of this matmul's activation type (row-major M×K, each
    /// value checked against it), exact in `i64`.
    pub fn run_int(&mut self, a: &[i32]) -> Result<Vec<i64>> {
        self.integer_results()?;
        let mut out = Vec::new();
        self.run(
            |m| m.put_int(a),
            |m, ()| {
                out = m.read_int()?;
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// `C = A · W` for fp16 A (row-major M×K) into `out` (M×N `f32`): fp32 sums of each
    /// K wave, waves summed in f64 and rounded once (or the DPU's fp16, widened, with
    /// [`MatmulOptions::fp16_out`]).
    pub fn run_f16_into(&mut self, a: &[f16], out: &mut [f32]) -> Result<()> {
        shape("result values", self.len_c(), out.len())?;
        self.run(|m| m.put_f16(a), |m, ()| m.read_f32_into(out))
    }

    /// [`Matmul::run_f16_into`] into a new vector.
    pub fn run_f16(&mut self, a: &[f16]) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.len_c()];
        self.run_f16_into(a, &mut out)?;
        Ok(out)
    }

    /// `C = A · W` for bf16 A (row-major M×K) into `out` (M×N `f32`), on a bf16 bank:
    /// fp32 sums of each K wave, waves summed in f64 and rounded once.
    pub fn run_bf16_into(&mut self, a: &[bf16], out: &mut [f32]) -> Result<()> {
        shape("result values", self.len_c(), out.len())?;
        self.run(|m| m.put_bf16(a), |m, ()| m.read_f32_into(out))
    }

    /// `C = A · W` for float A rounded to the bank's 16-bit float type (fp16 or bf16
    /// banks).
    pub fn run_f32(&mut self, a: &[f32]) -> Result<Vec<f32>> {
        if self.acts != Activations::Bf16 {
            self.expect(Activations::Fp16)?;
        }
        let mut out = vec![0f32; self.len_c()];
        self.mul_mat(a, &mut out)?;
        Ok(out)
    }

    /// `y = x · Wᵀ` (ggml's `mul_mat`) for f32 `x` (row-major M×K) into `y` (M×N): on an
    /// integer bank `x` is quantised to int8 per row and the result scaled by the row's
    /// scale and the bank's per-channel scales (1 when it has none); on an fp16 or bf16
    /// bank `x` is rounded to that type.
    pub fn mul_mat(&mut self, x: &[f32], y: &mut [f32]) -> Result<()> {
        shape("result values", self.len_c(), y.len())?;
        self.run(|m| m.put_f32(x), |m, what| m.read_f32_of(what, y))
    }

    /// [`Matmul::mul_mat`] with fp16 results (rounded to nearest even).
    pub fn mul_mat_f16(&mut self, x: &[f32], y: &mut [f16]) -> Result<()> {
        let mut wide = vec![0f32; self.len_c()];
        shape("result values", wide.len(), y.len())?;
        self.mul_mat(x, &mut wide)?;
        for (d, v) in y.iter_mut().zip(wide) {
            *d = f16::from_f32(v);
        }
        Ok(())
    }

    /// A quantised product from int8 activations and their per-row scales (as
    /// [`quant::quantize_rows_i8`] makes them): `y = (A · W) · row_scale · channel_scale`.
    pub fn run_quantized_into(
        &mut self,
        a: &[i8],
        row_scales: &[f32],
        y: &mut [f32],
    ) -> Result<()> {
        self.expect(Activations::Int8)?;
        shape("row scales", self.rows as usize, row_scales.len())?;
        shape("result values", self.len_c(), y.len())?;
        self.run(
            |m| {
                m.put_i8(a)?;
                m.row_scales = row_scales.to_vec();
                if m.npu.is_some() {
                    m.encode_row_scales()?;
                }
                Ok(())
            },
            |m, ()| match m.npu {
                Some(_) => m.read_npu_scaled_into(y),
                None => m.read_scaled_into(y),
            },
        )
    }

    /// Submits `C = A · W` for int8 A and returns at once: the CPU is free until
    /// [`PendingMatmul::wait_i32_into`].
    pub fn submit_i8(&mut self, a: &[i8]) -> Result<PendingMatmul<'_>> {
        self.expect(Activations::Int8)?;
        self.integer_results()?;
        self.put_i8(a)?;
        self.start(Submitted::Int)
    }

    /// Submits [`Matmul::mul_mat`] of `x` and returns at once.
    pub fn submit_mul_mat(&mut self, x: &[f32]) -> Result<PendingMatmul<'_>> {
        let what = self.put_f32(x)?;
        self.start(what)
    }

    /// Submits `C = A · W` for fp16 A and returns at once.
    pub fn submit_f16(&mut self, a: &[f16]) -> Result<PendingMatmul<'_>> {
        self.put_f16(a)?;
        self.start(Submitted::Float)
    }

    fn start(&mut self, what: Submitted) -> Result<PendingMatmul<'_>> {
        let this: &Matmul = self;
        let pending = submit_chains(
            this.bank.device(),
            (&this.regcmd, &this.program),
            this.per_core(),
            this.timeout,
            |job| this.with_buffers(job),
        )?;
        Ok(PendingMatmul {
            mm: this,
            pending,
            what,
        })
    }
}

/// A submitted matmul not yet waited for. It borrows the matmul, so its buffers cannot
/// be touched while the NPU may use them; dropping it without a wait waits with a bound
/// (and holds the buffers if the job may still run; see [`Pending`]).
///
/// ```
/// use rknpu_driver::device::Device;
/// use rknpu_driver::compute::matmul::{Matmul, WeightBank};
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
///
/// let dev = Device::open_spec("emu:async")?; // the emulated kernel runs jobs on a worker
/// let bank = Arc::new(WeightBank::from_i8_nk(&dev, 32, 64, &vec![1; 32 * 64])?);
/// let mut mm = Matmul::new(&bank, 2)?;
/// let pending = mm.submit_i8(&vec![3; 2 * 64])?;
/// let _busy = pending.is_done()?; // false while the NPU works; the CPU is free
/// let mut c = vec![0i32; 2 * 32];
/// pending.wait_i32_into(Instant::now() + Duration::from_secs(5), &mut c)?;
/// assert!(c.iter().all(|&v| v == 3 * 64));
/// # Ok::<(), rknpu_driver::Error>(())
/// ```
#[derive(Debug)]
pub struct PendingMatmul<'m> {
    mm: &'m Matmul,
    /// One job, or on the vendor driver one per core's chain.
    pending: Vec<Pending<'m>>,
    what: Submitted,
}

impl PendingMatmul<'_> {
    /// Whether the job finished (without blocking).
    pub fn is_done(&self) -> Result<bool> {
        all_done(&self.pending)
    }

    /// Waits until `deadline`, then reads the integer results of
    /// [`Matmul::submit_i8`] into `out` (M×N).
    pub fn wait_i32_into(self, deadline: Instant, out: &mut [i32]) -> Result<()> {
        if self.what != Submitted::Int {
            return Err(Error::Precision {
                input: "float",
                weights: self.mm.bank.layout.dtype.name(),
                output: "int32 (the submission computes floats)",
            });
        }
        shape("result values", self.mm.len_c(), out.len())?;
        wait_all(self.pending, deadline)?;
        self.mm.read_i32_into(out)
    }

    /// Waits until `deadline`, then reads the results as f32 into `out` (M×N): the scaled
    /// results of [`Matmul::submit_mul_mat`], the float results of
    /// [`Matmul::submit_f16`], or integer results converted.
    pub fn wait_f32_into(self, deadline: Instant, out: &mut [f32]) -> Result<()> {
        shape("result values", self.mm.len_c(), out.len())?;
        wait_all(self.pending, deadline)?;
        self.mm.read_f32_of(self.what, out)
    }
}
