//! A cost model for matmul plans: the bytes every task moves, read from the tasks
//! themselves ([`Task::dma`](crate::task::Task::dma)), and a predicted time on a
//! [`HardwareProfile`] of published board figures. Pure arithmetic: no device.
//!
//! The prediction, per core `c` of a plan on `n` busy cores (rows like `A3.3` name the
//! published figures of fixtures/calibration/published-timings.tsv each value comes from):
//!
//! ```text
//! t_c   = max(bytes_c / min(BW / n, BW_core), MACs_c / peak) + (tasks_c − 1) × per_task
//! t_job = max_c (t_c + i_c × core_start) + per_submit
//! ```
//!
//! `BW` is the DRAM bandwidth all cores share, `BW_core` the most one core streams alone
//! (below `BW` on the RK3588: one task's stream does not saturate DRAM, several do); with
//! `BW_core` infinite the stream term is `bytes_c / (BW / n)`. `bytes_c` is every byte the
//! tasks of core `c` read or write (feature, weights, DPU read and write DMA), `MACs_c` the
//! multiply-accumulates its MAC arrays run (the padded `rows × ai × nt` of each task),
//! `peak` the profile's MAC rate of the plan's precision at its NPU clock. One submission
//! costs `per_submit` and holds the first task of each chain; each further task adds
//! `per_task` (no task's fixed cost is counted twice). `i_c` is the busy core's place
//! (0, 1, 2): the driver starts the cores one after another.
//!
//! Submitted one task at a time ([`Plan::cost_unchained`]), every task after the first
//! costs `per_submit` instead of `per_task`. Through rocket, the jobs of one open device
//! run on one core, one at a time: a plan on more cores than
//! [`HardwareProfile::rocket_devices`] has its cores' chains run back to back on that
//! many cores (each merged chain one task transition more).
//!
//! Assumptions: the busy cores share the DRAM bandwidth evenly and each streams at its
//! share (at most `BW_core`) for its whole run, even after another core has finished;
//! transfers and MACs overlap completely within a core (the slower of the two is the
//! core's time); per-task overhead overlaps with neither. An operand a task finds in the
//! CBUF (a reuse bit) is not charged. Left out: the regcmd fetches (incremental tasks
//! fetch fewer) and contention with the CPU for DDR. The host's work around the job
//! (preparing A, finishing C; and verifying the program, once per binding) is costed
//! beside it on the profile's [`HardwareProfile::host`] ([`super::host_cost`]); the
//! predicted total of a call is [`Cost::total_s`], the NPU job plus the host's per-call
//! work. docs/matmul.md ("Cost model", "Calibration", "Host work") has the figures, their
//! sources and the model against every published timing it can express.

use super::Plan;
use super::host_cost::{HostCost, HostProfile};
use crate::error::{Error, Result};
use crate::kernels::single::Dtype;
use crate::regcmd::DmaAddr;
use crate::regs::{Block, Register, cna};
use crate::task::{Access, cbuf};
use std::fmt;

/// The kernel interface a job is submitted through, which sets the per-submit overhead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubmitPath {
    /// Rockchip's `rknpu` driver (`RKNPU_SUBMIT`).
    Vendor,
    /// Mainline `rocket` (`DRM_IOCTL_ROCKET_SUBMIT`).
    Rocket,
}

/// What one board can do, as the cost model needs it. A plain value: start from
/// [`HardwareProfile::rk3588`] and change fields to model another clock or board.
///
/// Rates are per core at the profile's NPU clock ([`HardwareProfile::npu_clock_hz`]) and
/// DRAM clock; times are in seconds.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HardwareProfile {
    /// Name printed in a [`Cost`] line.
    pub name: &'static str,
    /// The NPU clock the rates below hold at, in Hz. rk3588: 1 GHz, the clock of the
    /// `oRKLLM/ork-driver` measurements (Radxa ROCK 5B, vendor `rknpu` 0.9.8, kernel
    /// 6.1.115, NPU 1 GHz, DDR 2112 MHz) that most fields come from.
    pub npu_clock_hz: f64,
    /// NPU cores.
    pub cores: u32,
    /// int8 MACs per second per core. rk3588: 0.525·10¹² — `oRKLLM/ork-driver`,
    /// `KSLICE_RE_WIP.md` (`tools/mtile_probe`, rows A3.1–A3.3): one int8 task of
    /// M×2048×128 takes 80/79/80/88/93 µs for M = 1/8/16/32/36, and of M×3584×128
    /// 98/105 µs for M = 8/16; the marginal cost of a row (0.50 µs at K = 2048, 0.875 µs
    /// at K = 3584) is 1.05 TOP/s both times, 51% of the 2.05 TOP/s (1024 MACs per
    /// cycle) core peak. Every int8 row of the calibration table streams longer than it
    /// computes, so none contradicts it.
    pub int8_macs_per_s: f64,
    /// int4 MACs per second per core. rk3588: 1.72·10¹² — the vendor matmul API's best
    /// int4 call (`wtwver/rk3588-matmul-bench`, `result.csv`, row A1.13: 128×2048×2048 in
    /// 312 µs, 3.44 TOP/s, 84% of the 4.1 TOP/s core peak): the MAC arrays run at least
    /// this fast.
    pub int4_macs_per_s: f64,
    /// fp16 and bf16 MACs per second per core. rk3588: 0.40·10¹² — the vendor matmul
    /// API's best fp16 call (`wtwver/rk3588-matmul-bench`, `result.csv`, row A1.1:
    /// 128×512×4096 in 671 µs, 0.80 TFLOP/s, 78% of the 1.02 TFLOP/s core peak). Per-task
    /// overhead is counted apart ([`HardwareProfile::per_task_vendor_s`]), not in this
    /// rate.
    pub fp16_macs_per_s: f64,
    /// DRAM bytes per second the NPU's DMA reads and writes, shared by all busy cores.
    /// rk3588: 25·10⁹ — `oRKLLM/ork-driver`, `AUTOTUNE_WIP.md` (rows A3.4c, A3.6c): int8
    /// prefill matmuls on three cores move 25–26 GB/s at the tiles they state; the vendor
    /// LLM runtime decodes at 25–30 GB/s of weights (`airockchip/rknn-llm`
    /// `benchmark.md`: decode tokens per second times the model's int8 weight bytes).
    pub dram_bytes_per_s: f64,
    /// DRAM bytes per second one core's DMA streams at most, however idle the others.
    /// rk3588: 10·10⁹ — the same prefill matmuls (rows A3.4a–b, A3.6a–b): 9.3 GB/s on
    /// one core, 9.6–10.0 GB/s per core on two. One GEMV task streams 8.6–8.8 GB/s
    /// (`OPS_REGISTRY.md`, `decode_bw_probe`, rows A3.14a, A3.14e), within the
    /// per-submit cost of this. `f64::INFINITY` leaves only the shared limit.
    pub core_dram_bytes_per_s: f64,
    /// Seconds per task after the first of a chain on the vendor driver (the program
    /// controller fetching and starting the next task). rk3588: 35 µs —
    /// `gregordinary/rknpu-submit` `README.md` (row A5.1b): 512×3840×4096 fp16 as 512
    /// chained tasks on core 0 in 36.8–39.3 ms, of which the fp16 rate accounts for
    /// 20.1 ms: (38.05 − 20.1) ms / 511 tasks.
    pub per_task_vendor_s: f64,
    /// Seconds per task after the first of a job through rocket. rk3588: 44 µs —
    /// `gregordinary/rockchip-npu-notes`, `perf/iova-and-multicore.md` (row A4.3):
    /// batching rocket's per-task interrupt round trips cut the wait of 512×3840×4096
    /// fp16 as 320 tiles from 62 to 48 ms, 14 ms over 315 removed round trips.
    pub per_task_rocket_s: f64,
    /// Seconds per submission through the vendor driver, its first task included.
    /// rk3588: 60 µs — `oRKLLM/ork-driver`, `KSLICE_RE_WIP.md` (row A3.3): a warm
    /// blocking single-task submit extrapolated to zero weight bytes, 54 µs; and
    /// `gregordinary/rknpu-submit` (rows A5.1a–b): each unchained submission costs 57–69
    /// µs more than a chained task.
    pub per_submit_vendor_s: f64,
    /// Seconds per submission through rocket, its first task included. rk3588: 52 µs —
    /// `gregordinary/rockchip-npu-notes`, `perf/iova-and-multicore.md`: a one-task job,
    /// submit to completion, 51–53 µs median on Linux 7.1 at 600 MHz with the interrupt on
    /// a Cortex-A55 (the default); 27–34 µs with it moved to a Cortex-A76.
    pub per_submit_rocket_s: f64,
    /// Seconds by which each busy core after the first starts later than the one before.
    /// rk3588: 70 µs — `oRKLLM/ork-driver`, `OPS_REGISTRY.md` (`decode_bw_probe`, rows
    /// A3.14a–c): one, two and three 3 MiB GEMVs in one chained submission, each core
    /// reading its own, finish in 365, 494 and 627 µs: 60–130 µs a core more than the
    /// shared bandwidth explains.
    pub core_start_s: f64,
    /// Open rocket devices the cores of a plan are spread over (rocket runs the jobs of
    /// one open device on one core, one at a time). rk3588: 1, how the library submits
    /// today; the published multi-core rocket runs opened one per core (rows A4.11,
    /// A5.3). The vendor driver runs each core's chain on its own core.
    pub rocket_devices: u32,
    /// Which per-submit figure [`HardwareProfile::per_submit_s`] uses. rk3588:
    /// [`SubmitPath::Vendor`].
    pub submit_path: SubmitPath,
    /// CBUF banks per core. rk3588: 12 — the board-validated programs
    /// (docs/provenance.md), [`crate::task::cbuf::BANKS`].
    pub cbuf_banks: u32,
    /// Bytes per CBUF bank. rk3588: 32 KiB — as above,
    /// [`crate::task::cbuf::BANK_BYTES`].
    pub cbuf_bank_bytes: u64,
    /// The CPU that prepares A, finishes C and verifies the program around each job.
    /// rk3588: [`HostProfile::cortex_a76`] (estimates; measure the machine with
    /// `compute::host_profile::measure`).
    pub host: HostProfile,
}

impl HardwareProfile {
    /// The RK3588 at the figures of its most reliable published calibration points; each
    /// field's documentation names its source.
    pub fn rk3588() -> HardwareProfile {
        HardwareProfile {
            name: "rk3588",
            npu_clock_hz: 1.0e9,
            cores: 3,
            int8_macs_per_s: 0.525e12,
            int4_macs_per_s: 1.72e12,
            fp16_macs_per_s: 0.40e12,
            dram_bytes_per_s: 25.0e9,
            core_dram_bytes_per_s: 10.0e9,
            per_task_vendor_s: 35.0e-6,
            per_task_rocket_s: 44.0e-6,
            per_submit_vendor_s: 60.0e-6,
            per_submit_rocket_s: 52.0e-6,
            core_start_s: 70.0e-6,
            rocket_devices: 1,
            submit_path: SubmitPath::Vendor,
            cbuf_banks: cbuf::BANKS,
            cbuf_bank_bytes: cbuf::BANK_BYTES,
            host: HostProfile::cortex_a76(),
        }
    }

    /// [`HardwareProfile::rk3588`] submitting through rocket.
    pub fn rk3588_rocket() -> HardwareProfile {
        HardwareProfile {
            name: "rk3588 (rocket)",
            submit_path: SubmitPath::Rocket,
            ..HardwareProfile::rk3588()
        }
    }

    /// This profile at another NPU clock: the MAC rates scale with the clock; DRAM
    /// bandwidth and the per-task and per-submit overheads (the CPU's and the kernel's
    /// work) do not.
    pub fn at_clock(&self, hz: f64) -> HardwareProfile {
        let f = hz / self.npu_clock_hz;
        HardwareProfile {
            npu_clock_hz: hz,
            int8_macs_per_s: self.int8_macs_per_s * f,
            int4_macs_per_s: self.int4_macs_per_s * f,
            fp16_macs_per_s: self.fp16_macs_per_s * f,
            ..self.clone()
        }
    }

    /// The per-submit overhead of [`HardwareProfile::submit_path`], in seconds.
    pub fn per_submit_s(&self) -> f64 {
        match self.submit_path {
            SubmitPath::Vendor => self.per_submit_vendor_s,
            SubmitPath::Rocket => self.per_submit_rocket_s,
        }
    }

    /// The per-task overhead of [`HardwareProfile::submit_path`], in seconds.
    pub fn per_task_s(&self) -> f64 {
        match self.submit_path {
            SubmitPath::Vendor => self.per_task_vendor_s,
            SubmitPath::Rocket => self.per_task_rocket_s,
        }
    }

    /// MACs per second per core for inputs of `dtype`.
    pub fn macs_per_s(&self, dtype: Dtype) -> f64 {
        match dtype {
            Dtype::Int8 => self.int8_macs_per_s,
            Dtype::Int4 => self.int4_macs_per_s,
            Dtype::Int16 | Dtype::Fp16 | Dtype::Bf16 => self.fp16_macs_per_s,
        }
    }

    /// Bytes of one core's CBUF.
    pub fn cbuf_bytes(&self) -> u64 {
        self.cbuf_banks as u64 * self.cbuf_bank_bytes
    }
}

/// What each core of a plan does: tasks, bytes moved, MACs (one entry per core).
struct CoreWork<'a> {
    tasks: &'a [usize],
    bytes: &'a [u64],
    macs: &'a [u64],
}

impl HardwareProfile {
    /// Checks that every rate is finite and positive (`core_dram_bytes_per_s` may be
    /// infinite: no per-core limit), every overhead finite and not negative, and the
    /// counts at least 1; else [`Error::OutOfRange`] naming the field. A cost is never
    /// computed from a profile that would make it NaN or infinite.
    pub fn check(&self) -> Result<()> {
        let rates = [
            ("profile npu_clock_hz", self.npu_clock_hz),
            ("profile int8_macs_per_s", self.int8_macs_per_s),
            ("profile int4_macs_per_s", self.int4_macs_per_s),
            ("profile fp16_macs_per_s", self.fp16_macs_per_s),
            ("profile dram_bytes_per_s", self.dram_bytes_per_s),
            ("profile cores", self.cores as f64),
            ("profile rocket_devices", self.rocket_devices as f64),
        ];
        let times = [
            ("profile per_task_vendor_s", self.per_task_vendor_s),
            ("profile per_task_rocket_s", self.per_task_rocket_s),
            ("profile per_submit_vendor_s", self.per_submit_vendor_s),
            ("profile per_submit_rocket_s", self.per_submit_rocket_s),
            ("profile core_start_s", self.core_start_s),
        ];
        let per_core = self.core_dram_bytes_per_s;
        let out = |what, v: f64, range| {
            Err(Error::OutOfRange {
                what,
                index: 0,
                value: v.to_string(),
                range,
            })
        };
        for (what, v) in rates {
            if !(v.is_finite() && v > 0.0) {
                return out(what, v, "finite and positive");
            }
        }
        if per_core.is_nan() || per_core <= 0.0 {
            return out("profile core_dram_bytes_per_s", per_core, "positive");
        }
        for (what, v) in times {
            if !(v.is_finite() && v >= 0.0) {
                return out(what, v, "finite and not negative");
            }
        }
        Ok(())
    }

    /// Each core's predicted chain time and the job's, by the module's formula.
    fn job_seconds(
        &self,
        w: &CoreWork<'_>,
        dtype: Dtype,
        chained: bool,
    ) -> Result<(Vec<f64>, f64)> {
        self.check()?;
        let busy: Vec<usize> = (0..w.tasks.len()).filter(|&c| w.tasks[c] > 0).collect();
        // Rocket runs one open device's jobs on one core: the busy cores' chains are
        // dealt to that many devices and run back to back on each.
        let lanes = match self.submit_path {
            SubmitPath::Rocket => busy.len().min(self.rocket_devices as usize),
            SubmitPath::Vendor => busy.len(),
        }
        .max(1);
        let share = (self.dram_bytes_per_s / lanes as f64).min(self.core_dram_bytes_per_s);
        let peak = self.macs_per_s(dtype);
        let next_task = if chained {
            self.per_task_s()
        } else {
            self.per_submit_s()
        };
        let core_seconds: Vec<f64> = (0..w.tasks.len())
            .map(|c| match w.tasks[c] {
                0 => 0.0,
                tasks => {
                    let stream = w.bytes[c] as f64 / share;
                    let compute = w.macs[c] as f64 / peak;
                    stream.max(compute) + (tasks - 1) as f64 * next_task
                }
            })
            .collect();
        let mut lane_seconds = vec![0.0; lanes];
        for (i, &c) in busy.iter().enumerate() {
            if i >= lanes {
                // One more task transition where a chain follows another on its core.
                lane_seconds[i % lanes] += next_task;
            }
            lane_seconds[i % lanes] += core_seconds[c];
        }
        let slowest = lane_seconds
            .iter()
            .enumerate()
            .map(|(i, &t)| t + i as f64 * self.core_start_s)
            .fold(0.0, f64::max);
        Ok((core_seconds, slowest + self.per_submit_s()))
    }
}

/// The cost of a plan: the DRAM traffic its tasks' DMA ranges add up to, and the time
/// the model predicts for it on a [`HardwareProfile`] (the formula is in the module
/// documentation). Byte counts are exact for the plan; the time is a model.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Cost {
    /// The profile's name.
    pub profile: &'static str,
    /// Bytes the tasks read (feature, weights and DPU read DMA).
    pub read_bytes: u64,
    /// Bytes the tasks write (DPU write DMA).
    pub written_bytes: u64,
    /// Bytes the CNA reads as feature data (A).
    pub feature_bytes: u64,
    /// Bytes the CNA reads as weights (B).
    pub weight_bytes: u64,
    /// Bytes the DPU's read DMA reads (0 for plain matmul tasks).
    pub dpu_read_bytes: u64,
    /// Bytes the DPU's write DMA writes (C blocks).
    pub dpu_write_bytes: u64,
    /// Tasks on each core the plan may use ([`super::MatmulSpec::cores`] entries; an idle
    /// core has 0).
    pub tasks_per_core: Vec<usize>,
    /// Bytes each core's tasks move (read and written).
    pub bytes_per_core: Vec<u64>,
    /// A, B and C once each in their element types (`M·K`, `K·N` inputs, `M·N` results of
    /// [`super::MatmulSpec::out`]): what any schedule must move at least.
    pub min_bytes: u64,
    /// `(read + written) / min`.
    pub traffic_ratio: f64,
    /// Useful multiply-accumulates, `M·K·N`.
    pub macs: u64,
    /// The predicted time of each core's chain, in seconds (0 for an idle core).
    pub core_seconds: Vec<f64>,
    /// The predicted time of the NPU job, in seconds: the slowest core plus one
    /// submission.
    pub seconds: f64,
    /// The host's work around the job on the profile's [`HardwareProfile::host`].
    pub host: HostCost,
}

impl Cost {
    /// Useful operations (`2·M·K·N`) per predicted second of the NPU job.
    pub fn ops_per_s(&self) -> f64 {
        2.0 * self.macs as f64 / self.seconds
    }

    /// The predicted time of one call, in seconds: the NPU job and the host's work
    /// around it ([`Cost::seconds`] + [`HostCost::total_s`]). Plans are ranked by it.
    pub fn total_s(&self) -> f64 {
        self.seconds + self.host.total_s()
    }
}

/// Megabytes (10⁶ bytes), one decimal; more for less than 0.1 MB.
fn mb(bytes: u64) -> String {
    let v = bytes as f64 / 1e6;
    if v >= 0.1 || bytes == 0 {
        format!("{v:.1} MB")
    } else {
        format!("{v:.3} MB")
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tasks: usize = self.tasks_per_core.iter().sum();
        write!(
            f,
            "cost: {} read, {} written, minimum {} (ratio {:.2}); {} task(s) on {} core(s) {:?}; model {:.2} ms (npu {:.2} ms, {:.1} GOP/s on {}; {})",
            mb(self.read_bytes),
            mb(self.written_bytes),
            mb(self.min_bytes),
            self.traffic_ratio,
            tasks,
            self.tasks_per_core.len(),
            self.tasks_per_core,
            self.total_s() * 1e3,
            self.seconds * 1e3,
            self.ops_per_s() / 1e9,
            self.profile,
            self.host
        )
    }
}

/// Fixed device addresses for the plan's buffers, laid out back to back (4 KiB aligned)
/// the way a job binds them: byte counts do not depend on where the buffers lie, only on
/// the offsets the program relocates to within them.
struct Bases {
    a: u64,
    b: u64,
    c: u64,
}

fn cost_error(why: String) -> Error {
    Error::Unsupported {
        what: "matmul cost",
        why,
    }
}

impl Bases {
    fn new(plan: &Plan) -> Bases {
        const PAGE: u64 = 4096;
        let a = PAGE;
        let b = (a + plan.a_bytes).next_multiple_of(PAGE);
        let c = (b + plan.layout.bytes).next_multiple_of(PAGE);
        Bases { a, b, c }
    }

    /// The three buffers' start addresses.
    fn addrs(&self) -> Result<[DmaAddr; 3]> {
        let at = |base: u64| {
            u32::try_from(base)
                .map(DmaAddr::Fixed)
                .map_err(|_| cost_error(format!("address {base:#x} beyond 32 bits")))
        };
        Ok([at(self.a)?, at(self.b)?, at(self.c)?])
    }
}

impl Plan {
    /// The plan's cost on `profile`: every task built as [`Plan::program`] builds it
    /// ([`Plan::task`]), bound to fixed addresses, its [`Task::dma`](crate::task::Task::dma)
    /// ranges summed per DMA engine and per core (less an operand the task finds in the
    /// CBUF, which the CNA does not fetch), and the time of the module's formula.
    pub fn cost(&self, profile: &HardwareProfile) -> Result<Cost> {
        self.cost_as(profile, true)
    }

    /// [`Plan::cost`] of the plan submitted one task at a time (each task its own
    /// submission, each core's submissions one after another), as programs that do not
    /// chain their tasks run: what chaining saves.
    pub fn cost_unchained(&self, profile: &HardwareProfile) -> Result<Cost> {
        self.cost_as(profile, false)
    }

    fn cost_as(&self, profile: &HardwareProfile, chained: bool) -> Result<Cost> {
        let host = self.host_cost(&profile.host)?;
        let s = &self.spec;
        let bits = s.dtype.bits() as u64;
        let slots = (s.cores as usize).max(self.per_core.len());
        let mut tasks_per_core = vec![0usize; slots];
        let mut bytes_per_core = vec![0u64; slots];
        let mut macs_per_core = vec![0u64; slots];
        let (mut feature, mut weights, mut dpu_read, mut dpu_write) = (0u64, 0u64, 0u64, 0u64);
        let (mut read, mut written) = (0u64, 0u64);
        let bases = Bases::new(self);
        let feature_reg = cna::FeatureDataAddr::NAME;
        let weight_reg = cna::DcompAddr0::NAME;
        let buffers = bases.addrs()?;
        for t in &self.tasks {
            let core = t.core as usize;
            let w = self.layout.waves[t.wave as usize];
            let task = self.task(t, buffers)?;
            let (data_kept, weights_kept) = task
                .cna
                .as_ref()
                .map_or((false, false), |c| (c.cbuf.data_reuse, c.cbuf.weight_reuse));
            for r in task.dma() {
                // An operand the task finds in the CBUF is not fetched.
                let kept = (r.register == feature_reg && data_kept)
                    || (r.register == weight_reg && weights_kept);
                if r.block == Block::Cna && kept {
                    continue;
                }
                match r.access {
                    Access::Read => read += r.len,
                    Access::Write => written += r.len,
                }
                match (r.block, r.access) {
                    (Block::Cna, _) if r.register == feature_reg => feature += r.len,
                    (Block::Cna, _) if r.register == weight_reg => weights += r.len,
                    (Block::DpuRdma, _) => dpu_read += r.len,
                    (Block::Dpu, Access::Write) => dpu_write += r.len,
                    _ => {}
                }
                bytes_per_core[core] += r.len;
            }
            tasks_per_core[core] += 1;
            macs_per_core[core] += t.rows as u64 * w.ai as u64 * t.nt as u64;
        }
        let (m, k, n) = (s.m as u64, s.k as u64, s.n as u64);
        let min_bytes = (m * k + k * n) * bits / 8 + m * n * s.out.bytes() as u64;
        let work = CoreWork {
            tasks: &tasks_per_core,
            bytes: &bytes_per_core,
            macs: &macs_per_core,
        };
        let (core_seconds, seconds) = profile.job_seconds(&work, s.dtype, chained)?;
        Ok(Cost {
            profile: profile.name,
            read_bytes: read,
            written_bytes: written,
            feature_bytes: feature,
            weight_bytes: weights,
            dpu_read_bytes: dpu_read,
            dpu_write_bytes: dpu_write,
            tasks_per_core,
            bytes_per_core,
            min_bytes,
            traffic_ratio: (read + written) as f64 / min_bytes as f64,
            macs: m * k * n,
            core_seconds,
            seconds,
            host,
        })
    }
}

pub mod calibration;
pub mod jobs;

#[cfg(test)]
mod tests;
