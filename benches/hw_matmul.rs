//! On a board: NPU throughput of a 128×1024×8192 matmul in each precision, next to the
//! published figures for Rockchip's own matmul API at that shape
//! (docs/hardware/matmul-programs.md#performance: about 1.8 TOPS int8, 0.9 TFLOPS fp16, almost 4 TOPS int4 on one
//! core). Built only with `--features hw`:
//!
//! ```text
//! cargo bench --features hw --bench hw_matmul
//! ```
//!
//! For each precision it plans the product on one core, packs random operands once, runs
//! it ten times and reports the best submit+wait time as TOPS (2·M·K·N operations). With
//! `RKNPU_DEVICE=emu` it runs on the emulated kernel and the figure is the simulator's.

use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::Dtype;

/// Deterministic values in `lo..lo + span`.
fn values(len: usize, seed: usize, lo: i32, span: i32) -> Vec<i32> {
    (0..len)
        .map(|i| (((i * 2_654_435_761 + seed) >> 7) as i32).rem_euclid(span) + lo)
        .collect()
}

fn main() {
    let dev = Device::open().unwrap_or_else(|e| panic!("{e}"));
    println!(
        "device: {}{}",
        dev.info(),
        if dev.info().emulated {
            ": the figures are the simulator's"
        } else {
            ""
        }
    );
    let (m, k, n) = (128usize, 1024usize, 8192usize);
    let ops = 2.0 * (m * k * n) as f64;
    for (dtype, name, vendor) in [
        (Dtype::Int8, "int8", "about 1.8 TOPS"),
        (Dtype::Int4, "int4", "almost 4 TOPS"),
        (Dtype::Fp16, "fp16", "about 0.9 TFLOPS"),
    ] {
        let plan = Plan::new(MatmulSpec::new(m as u32, k as u32, n as u32, dtype)).unwrap();
        let tasks = plan.tasks.len();
        let mut best = f64::MAX;
        if dtype == Dtype::Fp16 {
            let a: Vec<f32> = values(m * k, 1, -8, 16)
                .iter()
                .map(|&v| v as f32 / 8.0)
                .collect();
            let b: Vec<f32> = values(k * n, 2, -8, 16)
                .iter()
                .map(|&v| v as f32 / 8.0)
                .collect();
            let bank = std::sync::Arc::new(
                WeightBank::from_kn_in(&dev, &plan.layout, Weights::F32(&b)).unwrap(),
            );
            let mut mm = Matmul::for_plan(&bank, plan).unwrap();
            for _ in 0..10 {
                mm.run::<f32, f32>(&a).unwrap();
                best = best.min(mm.timings.submit_wait.as_secs_f64());
            }
        } else {
            let (lo, span) = if dtype == Dtype::Int4 {
                (-8, 16)
            } else {
                (-128, 256)
            };
            let a = values(m * k, 1, lo, span);
            let b = values(k * n, 2, lo, span);
            let bank = std::sync::Arc::new(
                WeightBank::from_kn_in(&dev, &plan.layout, Weights::Int(&b)).unwrap(),
            );
            let mut mm = Matmul::for_plan(&bank, plan).unwrap();
            for _ in 0..10 {
                mm.run::<i32, i64>(&a).unwrap();
                best = best.min(mm.timings.submit_wait.as_secs_f64());
            }
        }
        println!(
            "{name} {m}x{k}x{n}, {tasks} task(s), one core: {:.3} ms, {:.3} TOPS (vendor API: {vendor})",
            best * 1e3,
            ops / best / 1e12
        );
    }
}
