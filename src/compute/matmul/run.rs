//! Running a matmul: the jobs of its chains, blocking calls and submissions, and the
//! pending matmul a submission returns.

use super::*;
use crate::kernels::matmul::cost::jobs::split_jobs;
use crate::kernels::matmul::cost::{HardwareProfile, SubmitPath};
use crate::verify;
use std::ops::Range;

pub(super) fn shape(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    Error::check_len(what, expected, actual)
}

pub(super) fn in_range(
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
/// side. Rocket places every task itself: one job per range of `jobs` ([`job_ranges`]),
/// run in order. The program was verified when its owner bound it, so the jobs submit
/// unverified.
pub(super) fn submit_chains<'a>(
    dev: &'a Device,
    (regcmd, program): (&'a Bo, &Program),
    (per_core, jobs): (&[usize], &[Range<usize>]),
    timeout: Duration,
    buffers: impl Fn(Job<'a>) -> Job<'a>,
) -> Result<Vec<Pending<'a>>> {
    let jobs = if dev.capabilities().picks_cores || per_core.len() == 1 {
        jobs.iter()
            .map(|r| {
                Job::new(regcmd, program.tasks()[r.clone()].to_vec())
                    .on_cores(CoreMask::Auto, &[r.len()])
            })
            .collect()
    } else {
        let mut first = 0;
        per_core
            .iter()
            .map(|&count| {
                let tasks = program.tasks()[first..first + count].to_vec();
                first += count;
                Job::new(regcmd, tasks)
            })
            .collect::<Vec<_>>()
    };
    jobs.into_iter()
        .map(|job| dev.submit_nonblocking(buffers(job.timeout(timeout).unverified())))
        .collect()
}

/// Submits `job` and waits for it, or, where `jobs` cuts the program into several
/// ([`job_ranges`]), each of them in turn with the buffers `buffers` gives it; the
/// result of the last.
pub(super) fn submit_blocking<'a>(
    dev: &Device,
    job: Job<'a>,
    (regcmd, program, jobs): (&'a Bo, &Program, &[Range<usize>]),
    timeout: Duration,
    buffers: impl Fn(Job<'a>) -> Job<'a>,
) -> Result<JobResult> {
    if jobs.len() <= 1 {
        return dev.submit(&job);
    }
    let mut last = None;
    for r in jobs {
        let part = Job::new(regcmd, program.tasks()[r.clone()].to_vec())
            .on_cores(CoreMask::Auto, &[r.len()])
            .timeout(timeout)
            .unverified();
        last = Some(dev.submit(&buffers(part))?);
    }
    last.ok_or_else(|| Error::InvalidArgument {
        what: "a program of no task".into(),
    })
}

/// The NPU clock the jobs of a driver with a fixed job timeout are modelled at: 200 MHz,
/// the clock the RK3588's NPU boots at under mainline Linux
/// (`gregordinary/rockchip-npu-notes`, `perf/clock.md`; 600 MHz needs a clock patch), so
/// the slowest a rocket board runs.
const TIMED_JOB_CLOCK_HZ: f64 = 200e6;

/// The jobs `program` (bound as `words`) is submitted as on `dev`, as ranges of its
/// tasks: the whole program, or, where the driver stops a job after a fixed time
/// (rocket, [`crate::device::Capabilities::job_timeout`]), consecutive runs each
/// modelled within half of it on one core at [`TIMED_JOB_CLOCK_HZ`]
/// ([`split_jobs`](crate::kernels::matmul::cost::jobs::split_jobs)).
pub(crate) fn job_ranges(
    dev: &Device,
    words: &[RegCmd],
    program: &Program,
) -> Result<Vec<Range<usize>>> {
    let all: Vec<Range<usize>> = std::iter::once(0..program.tasks().len()).collect();
    let Some(limit) = dev.capabilities().job_timeout else {
        return Ok(all);
    };
    let tasks = verify::tasks_of_words(words).map_err(|error| Error::Verify { error })?;
    let profile = HardwareProfile::rk3588_rocket().at_clock(TIMED_JOB_CLOCK_HZ);
    let ranges = split_jobs(&tasks, &profile, limit.as_secs_f64())?;
    Ok(if ranges.is_empty() { all } else { ranges })
}

/// Waits for every pending job until `deadline`; the first error, after all were waited
/// for (a job left unwaited would be settled on drop anyway).
pub(super) fn wait_all(pending: Vec<Pending<'_>>, deadline: Instant) -> Result<()> {
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
pub(super) fn all_done(pending: &[Pending<'_>]) -> Result<bool> {
    for p in pending {
        if !p.is_done()? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Incremental bodies are validated on the vendor driver only (docs/device.md).
pub(super) fn refuse_incremental_on_rocket(dev: &Device, incremental: bool) -> Result<()> {
    if incremental && !dev.capabilities().incremental_tasks {
        return Err(Error::NotOffered {
            what: "incremental task bodies on the rocket driver: validated on the vendor driver only (a delta program did not work on rocket; docs/device.md)".into(),
        });
    }
    Ok(())
}

/// The job of `program` (its list in `regcmd`, already verified) on the cores its chains
/// `per_core` use, with `timeout`, before its data buffers.
pub(super) fn program_job<'a>(
    dev: &Device,
    (regcmd, program): (&'a Bo, &Program),
    per_core: &[usize],
    timeout: Duration,
) -> Job<'a> {
    let (mask, split) = cores_of(dev, per_core);
    Job::from_program(regcmd, program)
        .on_cores(mask, &split)
        .timeout(timeout)
        .unverified()
}

/// The core mask and per-core task counts of a job whose chains are `per_core`.
pub(crate) fn cores_of(dev: &Device, per_core: &[usize]) -> (CoreMask, Vec<usize>) {
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
    /// Submits and waits, timing it.
    pub(super) fn run_job(&mut self) -> Result<()> {
        let t0 = Instant::now();
        let result = submit_blocking(
            self.bank.device(),
            self.job(),
            (&self.regcmd, &self.program, &self.jobs),
            self.timeout,
            |job| self.with_buffers(job),
        )?;
        self.timings.submit_wait = t0.elapsed();
        self.last = Some(result);
        Ok(())
    }

    /// The program bound to the buffers (row scales 1 on NPU dequantisation).
    pub(super) fn bound_words(&self) -> Result<Vec<RegCmd>> {
        let mut bases = vec![
            self.regcmd.dma_addr(),
            self.a.dma_addr(),
            self.bank.bo.dma_addr(),
            self.c.dma_addr(),
        ];
        if let Some(d) = &self.npu {
            bases.extend([d.coeffs.dma_addr(), d.out.dma_addr()]);
        }
        self.program
            .bind(|id: BufferId| bases.get(id.0 as usize).map(|&x| x as u64))
    }

    /// The modelled NPU seconds of one call on `profile`: one submission and each
    /// core's chain of tasks (the matmul's and, on NPU dequantisation, the
    /// dequantisation tasks, which the plan does not hold) one after another
    /// ([`HardwareProfile::serial_job_seconds`]), the chains sharing the DRAM bandwidth
    /// and, on rocket, the profile's open devices, each further lane starting
    /// [`HardwareProfile::core_start_s`] later, as [`Plan::cost`] models them; the
    /// slowest lane. The host's part is not in it, nor, where a driver cuts the program
    /// into several jobs ([`Matmul::jobs`]), the extra submissions.
    pub fn modelled_seconds(&self, profile: &HardwareProfile) -> Result<f64> {
        profile.check()?;
        let words = self.bound_words()?;
        let tasks = verify::tasks_of_words(&words).map_err(|error| Error::Verify { error })?;
        let mut chains = Vec::new();
        let mut at = 0;
        for &n in self.per_core() {
            let chain = tasks
                .get(at..at + n)
                .ok_or_else(|| Error::InvalidArgument {
                    what: format!("chain of {n} tasks beyond the program's {}", tasks.len()),
                })?;
            if n > 0 {
                chains.push(chain);
            }
            at += n;
        }
        let lanes = match profile.submit_path {
            SubmitPath::Rocket => chains.len().min(profile.rocket_devices as usize),
            SubmitPath::Vendor => chains.len(),
        }
        .max(1);
        let mut shared = profile.clone();
        shared.core_dram_bytes_per_s =
            (profile.dram_bytes_per_s / lanes as f64).min(profile.core_dram_bytes_per_s);
        let mut lane_seconds = vec![0f64; lanes];
        for (i, chain) in chains.iter().enumerate() {
            // A chain that follows another on its lane: one more task transition.
            let follows = if i >= lanes {
                profile.per_task_s()
            } else {
                0.0
            };
            lane_seconds[i % lanes] +=
                follows + shared.serial_job_seconds(chain) - profile.per_submit_s();
        }
        // Each further lane starts a little later (the profile's per-core start).
        let slowest = lane_seconds.iter().enumerate().fold(0f64, |a, (i, &t)| {
            a.max(t + i as f64 * profile.core_start_s)
        });
        Ok(profile.per_submit_s() + slowest)
    }

    /// Runs `put`, the job and `read`, timing each.
    pub(super) fn timed<T>(
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

    /// `C = A · W` for activations `a` (row-major M×K) into `out` (M×N), both of any
    /// element type the matmul takes ([`Input`], [`Output`]):
    ///
    /// - `i8` (int8 banks; int4 banks through W4A8) or `i32` (integers of the matmul's
    ///   activation type, each checked against it) into `i32`, exact (a result beyond
    ///   the int32 range is an error, none is wrapped), `i64`, or `f32` converted;
    /// - `f16` or `bf16` on a bank of that type into `f32`: fp32 sums of each K wave,
    ///   waves summed in f64 and rounded once (or the DPU's fp16, widened, with
    ///   [`MatmulOptions::fp16_out`]);
    /// - `f32` into `f32`: [`Matmul::mul_mat`] of all M rows.
    ///
    /// Integer results of float activations, and activations of another type than the
    /// matmul was made for, are [`Error::Precision`] before anything runs; lengths
    /// other than M×K and M×N are [`Error::ShapeMismatch`].
    pub fn run_into<A: Input, C: Output>(&mut self, a: &[A], out: &mut [C]) -> Result<()> {
        let (a, mut out) = (A::slice(a), C::slice_mut(out));
        self.integer_results_of(a.is_integer(), &out)?;
        shape("result values", self.len_c(), out.len())?;
        self.timed(|m| m.put(a), |m, what| m.read(what, &mut out))
    }

    /// [`Matmul::run_into`] into a new vector.
    pub fn run<A: Input, C: Output>(&mut self, a: &[A]) -> Result<Vec<C>> {
        let mut out = vec![C::default(); self.len_c()];
        self.run_into(a, &mut out)?;
        Ok(out)
    }

    /// `y = x · Wᵀ` (ggml's `mul_mat`) for f32 `x` of any number of rows up to
    /// [`Matmul::rows`] (row-major, K values a row) into `y` (as many rows of N): on an
    /// integer bank `x` is quantised to int8 per row (per row and group on a grouped
    /// bank) and the result scaled by the row's scale and the bank's scales (1 when it
    /// has none); on an fp16 or bf16 bank `x` is rounded to that type.
    ///
    /// The NPU runs the matmul's own M, the rows past `x`'s zero (a zero row quantises
    /// to zeros and adds nothing), so a call of fewer rows costs what a call of all of
    /// them costs; make a matmul per size class where that matters (the C API keeps a
    /// few per weights, docs/capi.md).
    ///
    /// ```
    /// use rknpu_driver::compute::matmul::{Matmul, WeightBank, Weights};
    /// use rknpu_driver::device::Device;
    /// use std::sync::Arc;
    ///
    /// let dev = Device::open_spec("emu")?;
    /// let bank = Arc::new(WeightBank::new(&dev, (32, 64), Weights::I8(&vec![1; 32 * 64]))?);
    /// let mut mm = Matmul::new(&bank, 16)?;
    /// let mut y = vec![0f32; 3 * 32];
    /// mm.mul_mat(&vec![0.5; 3 * 64], &mut y)?; // 3 of its 16 rows
    /// assert!(y.iter().all(|&v| (v - 32.0).abs() < 0.5));
    /// # Ok::<(), rknpu_driver::Error>(())
    /// ```
    pub fn mul_mat(&mut self, x: &[f32], y: &mut [f32]) -> Result<()> {
        let rows = self.rows_of(x)?;
        shape("result values", rows * self.n(), y.len())?;
        if rows == self.rows as usize {
            return self.run_into(x, y);
        }
        let mut padded = vec![0f32; self.len_a()];
        padded[..x.len()].copy_from_slice(x);
        let mut full = vec![0f32; self.len_c()];
        self.run_into(&padded, &mut full)?;
        y.copy_from_slice(&full[..y.len()]);
        Ok(())
    }

    /// Rows of `x`: a whole number of rows of K values, 1 up to [`Matmul::rows`].
    fn rows_of(&self, x: &[f32]) -> Result<usize> {
        let k = self.k().max(1);
        let rows = x.len() / k;
        if !x.len().is_multiple_of(k) || rows == 0 || rows > self.rows as usize {
            return Err(Error::ShapeMismatch {
                what: "activation values (1 up to M rows of K)",
                expected: self.len_a() as u64,
                actual: x.len() as u64,
            });
        }
        Ok(rows)
    }

    /// A quantised product from int8 activations and their per-row scales (as
    /// [`crate::kernels::matmul::quant::quantize_rows_i8`] makes them): `y = (A · W) · row_scale · channel_scale`.
    /// Against a grouped bank ([`WeightBank::quantize_f32_nk_grouped`]) the activations
    /// carry a scale per row and group, row-major (as [`super::quantize_groups_i8`] makes
    /// them), and each group's sums are scaled by its own scales; a bank with group
    /// offsets ([`WeightBank::from_i8_nk_grouped_offset`]) has its offset term added from
    /// the sums of these values times their scales.
    ///
    /// A matmul of residual activations ([`super::MatmulOptions::activation_passes`]) refuses
    /// them with [`Error::Precision`]: its second pass is made from the f32 values.
    pub fn mul_mat_quantized(&mut self, a: &[i8], row_scales: &[f32], y: &mut [f32]) -> Result<()> {
        self.expect(Activations::Int8)?;
        if self.npu.as_ref().is_some_and(|d| d.passes > 1) {
            return Err(Error::Precision {
                input: "int8 quantised by the caller",
                weights: "int8",
                output: "this matmul, made for residual activations from f32 (use mul_mat)",
            });
        }
        let per_row = match &self.npu {
            Some(d) if d.grouped => d.waves,
            _ => 1,
        };
        shape("row scales", self.rows as usize * per_row, row_scales.len())?;
        shape("result values", self.len_c(), y.len())?;
        self.timed(
            |m| {
                m.put_i8(a)?;
                m.row_scales = row_scales.to_vec();
                m.keep_group_sums_i8(a, row_scales);
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

    /// Submits `C = A · W` for activations `a` of any element type the matmul takes
    /// and returns at once: the CPU is free until [`PendingMatmul::wait`], which reads
    /// the results as [`Matmul::run_into`] would.
    pub fn submit<A: Input>(&mut self, a: &[A]) -> Result<PendingMatmul<'_>> {
        let what = self.put(A::slice(a))?;
        self.start(what)
    }

    /// Refuses integer results of a product that is not an integer one (`integer`: the
    /// activations are integers): before anything runs, and at a wait.
    pub(super) fn integer_results_of(&self, integer: bool, out: &OutputSlice<'_>) -> Result<()> {
        if out.is_integer() && !integer {
            return Err(Error::Precision {
                input: "float",
                weights: self.bank.layout.dtype.name(),
                output: "integer (a float product: read it as f32)",
            });
        }
        Ok(())
    }

    pub(super) fn start(&mut self, what: Submitted) -> Result<PendingMatmul<'_>> {
        let this: &Matmul = self;
        let pending = submit_chains(
            this.bank.device(),
            (&this.regcmd, &this.program),
            (this.per_core(), &this.jobs),
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
/// use rknpu_driver::compute::matmul::{Matmul, WeightBank, Weights};
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
///
/// let dev = Device::open_spec("emu:async")?; // the emulated kernel runs jobs on a worker
/// let bank = Arc::new(WeightBank::new(&dev, (32, 64), Weights::I8(&vec![1; 32 * 64]))?);
/// let mut mm = Matmul::new(&bank, 2)?;
/// let pending = mm.submit(&vec![3i8; 2 * 64])?;
/// let _busy = pending.is_done()?; // false while the NPU works; the CPU is free
/// let mut c = vec![0i32; 2 * 32];
/// pending.wait(Instant::now() + Duration::from_secs(5), &mut c)?;
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

    /// Waits until `deadline`, then reads the results into `out` (M×N) as
    /// [`Matmul::run_into`] would: integer results of integer activations as `i32`,
    /// `i64` or `f32`; float and scaled results as `f32`.
    pub fn wait<C: Output>(self, deadline: Instant, out: &mut [C]) -> Result<()> {
        let mut out = C::slice_mut(out);
        self.mm
            .integer_results_of(self.what == Submitted::Int, &out)?;
        shape("result values", self.mm.len_c(), out.len())?;
        wait_all(self.pending, deadline)?;
        self.mm.read(self.what, &mut out)
    }
}
