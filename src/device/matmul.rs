//! A matmul on a device: a plan, its program bound once to device buffers, a resident
//! weight bank, and `run` — pack A, submit, wait, reduce.
//!
//! ```
//! use rknpu_driver::device::Device;
//! use rknpu_driver::device::matmul::{Matmul, WeightBank};
//! use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
//! use rknpu_driver::kernels::single::Dtype;
//!
//! let dev = Device::open_spec("emu")?;
//! let plan = Plan::new(MatmulSpec::new(3, 100, 40, Dtype::Int8))?;
//! let b: Vec<i32> = (0..100 * 40).map(|i| i % 7 - 3).collect();
//! let bank = WeightBank::new_int(&dev, &plan, &b)?;        // packed once, resident
//! let mut mm = Matmul::new(&dev, plan, &bank)?;            // program built and bound once
//! let c = mm.run_int(&vec![1; 3 * 100])?;                  // row-major 3x40
//! assert_eq!(c[0], (0..100).map(|k| (k * 40) % 7 - 3).sum::<i32>() as i64);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::{Bo, BoFlags, CoreMask, Device, DeviceError, Job, JobResult};
use crate::kernels::matmul::{self, Plan, pack};
use crate::kernels::single::Dtype;
use crate::regcmd::{BufferId, Program, words_to_le_bytes};
use std::time::{Duration, Instant};

fn plan_err(e: crate::Error) -> DeviceError {
    DeviceError::InvalidArgument {
        what: e.to_string(),
    }
}

/// Integer input as the fast packers of [`matmul::pack`] take it: `Some` when there are
/// `len` values and every one fits `dtype`; `None` otherwise, so that the general packer
/// checks the input and reports what is wrong.
fn narrow(dtype: Dtype, values: &[i32], len: usize) -> Option<Vec<i8>> {
    let (lo, hi) = dtype.int_range();
    if values.len() != len {
        return None;
    }
    // Two plain passes (both vectorise) rather than one that stops at the first misfit.
    values
        .iter()
        .all(|v| (lo..=hi).contains(v))
        .then(|| values.iter().map(|&v| v as i8).collect())
}

/// Packed weights resident in a device buffer, for one plan's waves and padding; reused
/// across calls.
#[derive(Debug)]
pub struct WeightBank {
    bo: Bo,
    plan: Plan,
}

impl WeightBank {
    /// Packs integer B (row-major K×N) for `plan` and uploads it.
    pub fn new_int(dev: &Device, plan: &Plan, b: &[i32]) -> Result<WeightBank, DeviceError> {
        let len = plan.spec.k as usize * plan.spec.n as usize;
        let fast = match plan.spec.dtype {
            Dtype::Int8 => narrow(Dtype::Int8, b, len).map(|b8| pack::weights_i8_kn(plan, &b8)),
            Dtype::Int4 => narrow(Dtype::Int4, b, len).map(|b4| pack::weights_i4_kn(plan, &b4)),
            _ => None,
        };
        let bytes = fast
            .unwrap_or_else(|| matmul::pack_weights_int(plan, b))
            .map_err(plan_err)?;
        WeightBank::upload(dev, plan, &bytes)
    }

    /// Packs B (row-major K×N, rounded to fp16) for `plan` and uploads it.
    pub fn new_f32(dev: &Device, plan: &Plan, b: &[f32]) -> Result<WeightBank, DeviceError> {
        let bytes = matmul::pack_weights_f32(plan, b).map_err(plan_err)?;
        WeightBank::upload(dev, plan, &bytes)
    }

    /// Packs integer B given as N×K (an `[out][in]` weight matrix) for `plan`.
    pub fn new_int_nk(dev: &Device, plan: &Plan, bt: &[i32]) -> Result<WeightBank, DeviceError> {
        let len = plan.spec.k as usize * plan.spec.n as usize;
        let fast = (plan.spec.dtype == Dtype::Int8)
            .then(|| narrow(Dtype::Int8, bt, len))
            .flatten()
            .map(|b8| pack::weights_i8_nk(plan, &b8));
        let bytes = fast
            .unwrap_or_else(|| matmul::pack_weights_int_nk(plan, bt))
            .map_err(plan_err)?;
        WeightBank::upload(dev, plan, &bytes)
    }

    /// Packs B given as N×K (rounded to fp16) for `plan`.
    pub fn new_f32_nk(dev: &Device, plan: &Plan, bt: &[f32]) -> Result<WeightBank, DeviceError> {
        let bytes = matmul::pack_weights_f32_nk(plan, bt).map_err(plan_err)?;
        WeightBank::upload(dev, plan, &bytes)
    }

    fn upload(dev: &Device, plan: &Plan, bytes: &[u8]) -> Result<WeightBank, DeviceError> {
        let mut bo = dev.alloc(bytes.len(), BoFlags::default())?;
        bo.write(0, bytes)?;
        Ok(WeightBank {
            bo,
            plan: plan.clone(),
        })
    }

    /// The device buffer.
    pub fn buffer(&self) -> &Bo {
        &self.bo
    }
}

/// Time spent in the steps of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// Packing A.
    pub pack: Duration,
    /// Submission and wait.
    pub submit_wait: Duration,
    /// Reading and reducing the partial results.
    pub unpack: Duration,
}

/// A matmul bound to a device: plan, program (encoded and bound once), A and C buffers,
/// and a weight bank.
#[derive(Debug)]
pub struct Matmul<'d, 'w> {
    dev: &'d Device,
    plan: Plan,
    program: Program,
    regcmd: Bo,
    a: Bo,
    c: Bo,
    bank: &'w WeightBank,
    /// Deadline per call.
    pub timeout: Duration,
    /// Timings of the last call.
    pub timings: Timings,
    /// The job result of the last call.
    pub last: Option<JobResult>,
}

impl<'d, 'w> Matmul<'d, 'w> {
    /// Builds the plan's program, allocates A and C, and binds the program once.
    pub fn new(
        dev: &'d Device,
        plan: Plan,
        bank: &'w WeightBank,
    ) -> Result<Matmul<'d, 'w>, DeviceError> {
        if bank.plan != plan {
            return Err(DeviceError::InvalidArgument {
                what: "the weight bank was packed for another plan".into(),
            });
        }
        let program = plan.program().map_err(plan_err)?;
        let mut regcmd = dev.alloc(program.byte_len(), BoFlags::default())?;
        let a = dev.alloc(plan.a_bytes.max(1) as usize, BoFlags::default())?;
        let c = dev.alloc(plan.c_bytes.max(1) as usize, BoFlags::default())?;
        let bases = [
            regcmd.dma_addr(),
            a.dma_addr(),
            bank.bo.dma_addr(),
            c.dma_addr(),
        ];
        let words = program
            .bind(|id: BufferId| bases.get(id.0 as usize).map(|&x| x as u64))
            .map_err(plan_err)?;
        regcmd.write(0, &words_to_le_bytes(&words))?;
        Ok(Matmul {
            dev,
            plan,
            program,
            regcmd,
            a,
            c,
            bank,
            timeout: Duration::from_secs(5),
            timings: Timings::default(),
            last: None,
        })
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    fn submit(&mut self) -> Result<Vec<u8>, DeviceError> {
        let t0 = Instant::now();
        let mask = match self.plan.per_core.len() {
            // A driver that places jobs on cores itself (rocket) is given none.
            _ if self.dev.inner.backend.picks_cores() => CoreMask::Auto,
            // Core 0 named explicitly, as every board-validated vendor submit of a one-core
            // job does (mask 1; the board-validated matmul programs docs/provenance.md), rather than the kernel's auto pick.
            1 => CoreMask::Core0,
            2 => CoreMask::Cores01,
            _ => CoreMask::All,
        };
        let split = if mask == CoreMask::Auto {
            vec![self.plan.tasks.len()]
        } else {
            self.plan.per_core.clone()
        };
        let job = Job::from_program(&self.regcmd, &self.program)
            .on_cores(mask, &split)
            .reads(&self.a)
            .reads(&self.bank.bo)
            .writes(&self.c)
            .timeout(self.timeout);
        let result = self.dev.submit(&job)?;
        drop(job);
        self.timings.submit_wait = t0.elapsed();
        self.last = Some(result);
        self.c.read_all()
    }

    /// C = A · B for integer A (row-major M×K), as row-major M×N, each sum exact (i64: K
    /// waves are never wrapped; an int16 result saturates as the NPU does).
    pub fn run_int(&mut self, a: &[i32]) -> Result<Vec<i64>, DeviceError> {
        let t0 = Instant::now();
        let len = self.plan.spec.m as usize * self.plan.spec.k as usize;
        let int8 = self.plan.spec.dtype == Dtype::Int8;
        let fast = int8
            .then(|| narrow(Dtype::Int8, a, len))
            .flatten()
            .map(|a8| pack::activations_i8(&self.plan, &a8));
        let packed = fast
            .unwrap_or_else(|| self.plan.pack_a_int(a))
            .map_err(plan_err)?;
        self.a.write(0, &packed)?;
        self.timings.pack = t0.elapsed();
        let c = self.submit()?;
        let t1 = Instant::now();
        // int8 partials are int32: the streaming unpacker sums them while the sum fits
        // int32; a product beyond it (K in the hundreds of thousands) takes the exact i64
        // reduction instead, so the result is never wrapped.
        let mut out32 = vec![0i32; self.plan.spec.m as usize * self.plan.spec.n as usize];
        let out = if int8 && pack::unpack_i32(&self.plan, &c, &mut out32).is_ok() {
            out32.into_iter().map(i64::from).collect()
        } else {
            self.plan.reduce_int(&c).map_err(plan_err)?
        };
        self.timings.unpack = t1.elapsed();
        Ok(out)
    }

    /// C = A · B for float A (row-major M×K, rounded to fp16), as row-major M×N.
    pub fn run_f32(&mut self, a: &[f32]) -> Result<Vec<f32>, DeviceError> {
        let t0 = Instant::now();
        let packed = self.plan.pack_a_f32(a).map_err(plan_err)?;
        self.a.write(0, &packed)?;
        self.timings.pack = t0.elapsed();
        let c = self.submit()?;
        let t1 = Instant::now();
        let out = self.plan.reduce_f32(&c).map_err(plan_err)?;
        self.timings.unpack = t1.elapsed();
        Ok(out)
    }
}
