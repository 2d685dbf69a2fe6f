//! A cost model for matmul plans: the bytes every task moves, read from the tasks
//! themselves ([`Task::dma`](crate::task::Task::dma)), and a predicted time on a
//! [`HardwareProfile`] of published board figures. Pure arithmetic: no device.
//!
//! The prediction, per core `c` of a plan on `n` busy cores:
//!
//! ```text
//! t_c   = max(bytes_c / min(BW / n, BW_core), MACs_c / peak) + tasks_c × per_task
//! t_job = max_c t_c + per_submit
//! ```
//!
//! `BW` is the DRAM bandwidth all cores share, `BW_core` the most one core streams alone
//! (below `BW` on the RK3588: one task's stream does not saturate DRAM, several do); with
//! `BW_core` infinite the stream term is `bytes_c / (BW / n)`. `bytes_c` is every byte the
//! tasks of core `c` read or write (feature, weights, DPU read and write DMA), `MACs_c` the
//! multiply-accumulates its MAC arrays run (the padded `rows × ai × nt` of each task),
//! `peak` the profile's MAC rate of the plan's precision.
//!
//! Assumptions: the busy cores share the DRAM bandwidth evenly and each streams at its
//! share (at most `BW_core`) for its whole run, even after another core has finished;
//! transfers and MACs overlap completely within a core (the slower of the two is the
//! core's time); per-task overhead overlaps with neither; one submission starts every
//! core's chain at once. An operand a task finds in the CBUF (a reuse bit) is not
//! charged. Left out: the regcmd fetches (incremental tasks fetch fewer), contention with the CPU for DDR, and all host work (packing, cache
//! maintenance, the reduction of K waves). docs/matmul.md ("Cost model") has the figures
//! and their sources.

use super::Plan;
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
    /// `KSLICE_RE_WIP.md` (`tools/mtile_probe`): one int8 task of M×2048×128 takes
    /// 80/79/80/88/93 µs for M = 1/8/16/32/36, and of M×3584×128 98/105 µs for M = 8/16;
    /// the marginal cost of a row (0.50 µs at K = 2048, 0.875 µs at K = 3584) is 1.05
    /// TOP/s both times, 51% of the 2.05 TOP/s (1024 MACs per cycle) core peak.
    pub int8_macs_per_s: f64,
    /// int4 MACs per second per core. rk3588: 1.05·10¹², twice the int8 rate: the int4
    /// MAC array is twice the int8 one (core peaks of 4.1 and 2.05 TOP/s at 1 GHz, the
    /// Rockchip RK3588 datasheet's 6 TOPS int8 for three cores), and the same 51% of peak
    /// is assumed. No single-task int4 rate is published; the vendor matmul API's best
    /// int4 call (`wtwver/rk3588-matmul-bench`, `result.csv`, 128×2048×2048 in 312 µs,
    /// 3.4 TOP/s) shows the array can run faster, so this rate is conservative.
    pub int4_macs_per_s: f64,
    /// fp16 and bf16 MACs per second per core. rk3588: 0.35·10¹², 69% of the 1 GHz core
    /// peak (512 MACs per cycle, 1.02 TFLOP/s) — the fraction
    /// `gregordinary/rocket-userspace`, `tests/multicore_probe.c` with
    /// `gregordinary/rockchip-npu-notes`, `perf/iova-and-multicore.md` measured at
    /// 600 MHz: 64 fp16 tasks of 256×384×256 in one job at 117–120 µs per task,
    /// 419–429 GFLOP/s = 68–70% of the 600 MHz peak, per-task overhead included. The
    /// vendor API's best fp16 call (`wtwver/rk3588-matmul-bench`, `result.csv`,
    /// 128×512×4096 in 671 µs, 0.80 TFLOP/s = 0.40·10¹² MAC/s) agrees.
    pub fp16_macs_per_s: f64,
    /// DRAM bytes per second the NPU's DMA reads and writes, shared by all busy cores.
    /// rk3588: 20·10⁹ — `oRKLLM/ork-driver`, `OPS_REGISTRY.md` (`decode_bw_probe`): S
    /// independent int8 1×1024×3072 GEMVs chained in one submission stream their weights
    /// at 8.62/12.74/15.05/19.87 GB/s for S = 1/2/3/6 (1×3072×1024: 8.81, 15.08, 20.17
    /// GB/s for S = 1/3/6), "ceiling ~22 GB/s", at DDR 2112 MHz.
    pub dram_bytes_per_s: f64,
    /// DRAM bytes per second one core's DMA streams at most, however idle the others.
    /// rk3588: 8.7·10⁹ — the same probe with S = 1: one GEMV task streams 8.62 GB/s
    /// (1×1024×3072) and 8.81 GB/s (1×3072×1024). `f64::INFINITY` leaves only the shared
    /// limit.
    pub core_dram_bytes_per_s: f64,
    /// Seconds of overhead per task, not overlapped with its transfers or MACs. rk3588:
    /// 44 µs — `gregordinary/rockchip-npu-notes`, `perf/iova-and-multicore.md`
    /// (batched submit, 512×3840×4096 fp16 as 320 tiles): batching rocket's per-task
    /// interrupt round trips cut the wait from 62 to 48 ms, 14 ms over 315 removed round
    /// trips. Measured on rocket; no per-task figure of a vendor chain (tasks fetched by
    /// the program controller without an interrupt between them) is published, and the
    /// same value is used for both paths.
    pub per_task_s: f64,
    /// Seconds per submission through the vendor driver. rk3588: 54 µs —
    /// `oRKLLM/ork-driver`, `KSLICE_RE_WIP.md` (`tools/mtile_probe`): a warm blocking
    /// single-task submit extrapolated to zero weight bytes (intercepts 75 and 91 µs at
    /// 128×2048 and 128×3584 int8 weights, which load at about 12 GB/s).
    pub per_submit_vendor_s: f64,
    /// Seconds per submission through rocket. rk3588: 52 µs —
    /// `gregordinary/rockchip-npu-notes`, `perf/iova-and-multicore.md`: a one-task job,
    /// submit to completion, 51–53 µs median on Linux 7.1 at 600 MHz with the interrupt on
    /// a Cortex-A55 (the default); 27–34 µs with it moved to a Cortex-A76.
    pub per_submit_rocket_s: f64,
    /// Which per-submit figure [`HardwareProfile::per_submit_s`] uses. rk3588:
    /// [`SubmitPath::Vendor`].
    pub submit_path: SubmitPath,
    /// CBUF banks per core. rk3588: 12 — the board-validated programs
    /// (docs/provenance.md), [`crate::task::cbuf::BANKS`].
    pub cbuf_banks: u32,
    /// Bytes per CBUF bank. rk3588: 32 KiB — as above,
    /// [`crate::task::cbuf::BANK_BYTES`].
    pub cbuf_bank_bytes: u64,
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
            int4_macs_per_s: 1.05e12,
            fp16_macs_per_s: 0.35e12,
            dram_bytes_per_s: 20.0e9,
            core_dram_bytes_per_s: 8.7e9,
            per_task_s: 44.0e-6,
            per_submit_vendor_s: 54.0e-6,
            per_submit_rocket_s: 52.0e-6,
            submit_path: SubmitPath::Vendor,
            cbuf_banks: cbuf::BANKS,
            cbuf_bank_bytes: cbuf::BANK_BYTES,
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

    /// The per-submit overhead of [`HardwareProfile::submit_path`], in seconds.
    pub fn per_submit_s(&self) -> f64 {
        match self.submit_path {
            SubmitPath::Vendor => self.per_submit_vendor_s,
            SubmitPath::Rocket => self.per_submit_rocket_s,
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
    /// The predicted time of the job, in seconds: the slowest core plus one submission.
    pub seconds: f64,
}

impl Cost {
    /// Useful operations (`2·M·K·N`) per predicted second.
    pub fn ops_per_s(&self) -> f64 {
        2.0 * self.macs as f64 / self.seconds
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
            "cost: {} read, {} written, minimum {} (ratio {:.2}); {} task(s) on {} core(s) {:?}; model {:.2} ms, {:.1} GOP/s on {}",
            mb(self.read_bytes),
            mb(self.written_bytes),
            mb(self.min_bytes),
            self.traffic_ratio,
            tasks,
            self.tasks_per_core.len(),
            self.tasks_per_core,
            self.seconds * 1e3,
            self.ops_per_s() / 1e9,
            self.profile
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
        let sharing = tasks_per_core.iter().filter(|&&c| c > 0).count().max(1) as f64;
        let share = (profile.dram_bytes_per_s / sharing).min(profile.core_dram_bytes_per_s);
        let peak = profile.macs_per_s(s.dtype);
        let core_seconds: Vec<f64> = (0..slots)
            .map(|c| {
                if tasks_per_core[c] == 0 {
                    return 0.0;
                }
                let stream = bytes_per_core[c] as f64 / share;
                let compute = macs_per_core[c] as f64 / peak;
                stream.max(compute) + tasks_per_core[c] as f64 * profile.per_task_s
            })
            .collect();
        let slowest = core_seconds.iter().copied().fold(0.0, f64::max);
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
            seconds: slowest + profile.per_submit_s(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::{MatmulSpec, WeightLayout};
    use crate::kernels::single::OutType;

    fn plan(m: u32, k: u32, n: u32, dtype: Dtype, cores: u32) -> Plan {
        Plan::new(MatmulSpec::new(m, k, n, dtype).on_cores(cores)).unwrap()
    }

    /// Bytes the CNA reads as feature data: each task's rows, padded to its wave's `ai`
    /// channels, in the input type, except a task that finds its A block in the CBUF.
    fn padded_rows(p: &Plan) -> u64 {
        let bits = p.spec.dtype.bits() as u64;
        p.tasks
            .iter()
            .filter(|t| t.reuse != crate::kernels::matmul::Reuse::Data)
            .map(|t| t.rows as u64 * p.layout.waves[t.wave as usize].ai as u64 * bits / 8)
            .sum()
    }

    #[test]
    fn gemv_int8_on_one_core_reads_the_bank_once_and_the_row_once() {
        // 1×4096×4096 int8 on one core: M ≤ 4 takes the single-token layout, one wave of
        // 4096 channels; int8 N tiles are at most 3072 columns, so the 128 granules of 32
        // columns become 2 even tiles of 2048. Each of the 2 tasks loads the weights of
        // its tile, 2048 kernels × 4096 channels × 1 byte, at its own offset in the bank:
        // together 4096·4096 bytes, the bank once. The first task reads the one row of A,
        // padded to 4096 channels (4096 bytes); the second finds it in the CBUF
        // (DATA_REUSE, with a spare data bank: 2 data + 10 weight banks). Each writes its
        // 1×2048 int32 block, together the C buffer of 1×4096×4 bytes.
        let p = plan(1, 4096, 4096, Dtype::Int8, 1);
        assert_eq!((p.layout.waves.len(), p.tasks.len()), (1, 2));
        let c = p.cost(&HardwareProfile::rk3588()).unwrap();
        assert_eq!(c.weight_bytes, 4096 * 4096);
        assert_eq!(c.weight_bytes, p.layout.bytes);
        assert_eq!(p.tasks[1].reuse, crate::kernels::matmul::Reuse::Data);
        assert_eq!(c.feature_bytes, padded_rows(&p));
        assert_eq!(c.feature_bytes, 4096);
        assert_eq!(c.written_bytes, p.c_bytes);
        assert_eq!(c.written_bytes, 4096 * 4);
        assert_eq!(c.dpu_write_bytes, c.written_bytes);
        assert_eq!(c.dpu_read_bytes, 0);
        assert_eq!(c.read_bytes, c.feature_bytes + c.weight_bytes);
        assert_eq!(c.tasks_per_core, vec![2]);
        assert_eq!(c.bytes_per_core, vec![c.read_bytes + c.written_bytes]);
    }

    #[test]
    fn gemv_int8_traffic_is_near_the_minimum() {
        for cores in 1..=3 {
            let c = plan(1, 4096, 4096, Dtype::Int8, cores)
                .cost(&HardwareProfile::rk3588())
                .unwrap();
            assert!(
                (1.0..1.05).contains(&c.traffic_ratio),
                "{cores} core(s): {c}"
            );
        }
    }

    #[test]
    fn every_m_tile_rereads_the_weights() {
        // 512×4096×4096 int8 on one core: one wave of 4096 channels takes 4 weight
        // banks (32 kernels × 4096 bytes), leaving 8 data banks of 32 KiB, 64 rows of
        // 4096 bytes: 8 M tiles of 64 rows. Each column tile runs its wave over every M
        // tile, and every one of those tasks loads its tile's whole weight range (nothing
        // stays in the CBUF from one task to the next), so the bank is streamed once per
        // M tile: 8 × 4096·4096 bytes. The same holds for 512×3840×4096 fp16, whose one
        // wave of 3840 channels leaves 4 data banks, 17 rows: 31 M tiles.
        let p = plan(512, 4096, 4096, Dtype::Int8, 1);
        let m_tiles = p.spec.m.div_ceil(p.m_tile) as u64;
        assert_eq!(m_tiles, 8);
        let c = p.cost(&HardwareProfile::rk3588()).unwrap();
        assert_eq!(c.weight_bytes, p.layout.bytes * m_tiles);
        assert_eq!(c.feature_bytes, padded_rows(&p));
        let p = plan(512, 3840, 4096, Dtype::Fp16, 3);
        let m_tiles = p.spec.m.div_ceil(p.m_tile) as u64;
        assert_eq!(m_tiles, 31);
        let c = p.cost(&HardwareProfile::rk3588()).unwrap();
        assert_eq!(c.weight_bytes, p.layout.bytes * m_tiles);
    }

    #[test]
    fn predicted_time_is_monotone_in_m() {
        let profile = HardwareProfile::rk3588();
        for (dtype, out) in [
            (Dtype::Int8, OutType::Int32),
            (Dtype::Int4, OutType::Int16),
            (Dtype::Fp16, OutType::Fp32),
        ] {
            let layout = WeightLayout::new(4096, 4096, dtype).unwrap();
            for cores in [1, 3] {
                let mut last = 0.0;
                for m in 1..=520 {
                    let p = Plan::for_layout(&layout, m, out, cores).unwrap();
                    let c = p.cost(&profile).unwrap();
                    assert!(c.seconds >= last, "{dtype:?} m = {m} on {cores}: {c}");
                    last = c.seconds;
                }
            }
        }
    }

    #[test]
    fn more_cores_never_predict_a_longer_time_for_n_4096() {
        let profile = HardwareProfile::rk3588();
        for dtype in [Dtype::Int8, Dtype::Int4, Dtype::Fp16, Dtype::Bf16] {
            for k in [512, 1024, 4096] {
                for m in [1, 4, 5, 16, 64, 100, 128, 256, 512] {
                    let time = |cores| {
                        let spec = MatmulSpec::new(m, k, 4096, dtype).on_cores(cores);
                        Plan::cheapest(spec, &profile)
                            .unwrap()
                            .cost(&profile)
                            .unwrap()
                            .seconds
                    };
                    let (t1, t2, t3) = (time(1), time(2), time(3));
                    assert!(
                        t1 >= t2 && t2 >= t3,
                        "{m}x{k}x4096 {dtype:?}: {t1} {t2} {t3}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_field_is_finite_and_positive() {
        for p in [
            plan(1, 4096, 4096, Dtype::Int8, 3),
            plan(128, 4096, 4096, Dtype::Int8, 3),
            plan(128, 4096, 11008, Dtype::Int4, 3),
            plan(512, 3840, 4096, Dtype::Fp16, 3),
            plan(7, 100, 33, Dtype::Bf16, 1),
        ] {
            let c = p.cost(&HardwareProfile::rk3588()).unwrap();
            let counts = [
                c.read_bytes,
                c.written_bytes,
                c.feature_bytes,
                c.weight_bytes,
                c.dpu_write_bytes,
                c.min_bytes,
                c.macs,
            ];
            assert!(counts.iter().all(|&b| b > 0), "{c:?}");
            // Matmul tasks read nothing through the DPU's read DMA.
            assert_eq!(c.dpu_read_bytes, 0);
            assert!(c.tasks_per_core.iter().all(|&t| t > 0), "{c:?}");
            assert!(c.bytes_per_core.iter().all(|&b| b > 0), "{c:?}");
            let times = [c.traffic_ratio, c.seconds, c.ops_per_s()];
            let times = times.iter().chain(&c.core_seconds);
            for v in times {
                assert!(v.is_finite() && *v > 0.0, "{c:?}");
            }
            assert_eq!(
                c.read_bytes + c.written_bytes,
                c.bytes_per_core.iter().sum()
            );
            assert_eq!(c.tasks_per_core.iter().sum::<usize>(), p.tasks.len());
        }
    }

    #[test]
    fn the_line_names_the_traffic_the_cores_and_the_profile() {
        let p = plan(1, 4096, 4096, Dtype::Int8, 3);
        let vendor = p.cost(&HardwareProfile::rk3588()).unwrap();
        let line = vendor.to_string();
        assert!(line.starts_with("cost: 16.8 MB read, 0.016 MB written, minimum 16.8 MB (ratio 1.00); 3 task(s) on 3 core(s) [1, 1, 1]; model "), "{line}");
        assert!(line.ends_with(" GOP/s on rk3588"), "{line}");
        let rocket = p.cost(&HardwareProfile::rk3588_rocket()).unwrap();
        let profile = HardwareProfile::rk3588();
        let step = profile.per_submit_vendor_s - profile.per_submit_rocket_s;
        assert!((vendor.seconds - rocket.seconds - step).abs() < 1e-12);
        // An idle core is listed with no tasks and no time.
        let p = plan(1, 64, 32, Dtype::Int8, 3);
        let c = p.cost(&HardwareProfile::rk3588()).unwrap();
        assert_eq!(c.tasks_per_core, vec![1, 0, 0]);
        assert_eq!(c.core_seconds[1], 0.0);
        assert!(c.to_string().contains("1 task(s) on 3 core(s) [1, 0, 0]"));
    }

    #[test]
    fn the_documented_cost_lines() {
        // Every row of the table in docs/matmul.md ("Cost model") whose second column is
        // a `cost:` line is what the plain plan of that shape on 3 cores prints.
        let doc = include_str!("../../../docs/matmul.md");
        let dtype_of = |name: &str| match name {
            "int8" => Dtype::Int8,
            "int4" => Dtype::Int4,
            "fp16" => Dtype::Fp16,
            other => panic!("docs/matmul.md names dtype {other}"),
        };
        let profile = HardwareProfile::rk3588();
        let mut rows = 0;
        for line in doc.lines() {
            let Some((shape, rest)) = line
                .strip_prefix("| ")
                .and_then(|l| l.split_once(" | `cost: "))
            else {
                continue;
            };
            let (dims, dtype) = shape.split_once(' ').expect("shape and dtype");
            let v: Vec<u32> = dims.split('×').map(|d| d.parse().unwrap()).collect();
            let expected = format!("cost: {}", rest.trim_end_matches("` |"));
            let c = plan(v[0], v[1], v[2], dtype_of(dtype), 3)
                .cost(&profile)
                .unwrap();
            assert_eq!(c.to_string(), expected, "{shape}");
            rows += 1;
        }
        assert!(rows >= 5, "the table of cost lines has {rows} rows");
    }
}
