//! The matmul grid on the device under test: each shape is checked against the CPU and
//! its throughput printed (on the emulated kernel the figure is the simulator's, not the
//! NPU's). Run on a board with `cargo test --features hw -- --test-threads=1 --nocapture`
//! to see the figures.

use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::Dtype;

fn run(spec: MatmulSpec) {
    run_plan(Plan::new(spec).unwrap());
}

/// Runs `plan` on the device under test against the CPU's product, printing its speed.
fn run_plan(plan: Plan) {
    let dev = super::dev();
    let spec = plan.spec;
    let (m, k, n) = (spec.m as usize, spec.k as usize, spec.n as usize);
    let tasks = plan.tasks.len();
    let values = |len: usize, seed: usize, lo: i32, span: i32| -> Vec<i32> {
        (0..len)
            .map(|i| (((i * 2_654_435_761 + seed) >> 7) as i32).rem_euclid(span) + lo)
            .collect()
    };
    let ops = 2.0 * m as f64 * k as f64 * n as f64;
    let (secs, ok) = if spec.dtype == Dtype::Fp16 {
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
        let c = mm.run::<f32, f32>(&a).unwrap();
        // Multiples of 1/8 in [-1, 1): every partial sum is exact in fp32 for these K.
        let ok = (0..m).all(|i| {
            (0..n).step_by(97).all(|j| {
                let exact: f64 = (0..k)
                    .map(|kk| a[i * k + kk] as f64 * b[kk * n + j] as f64)
                    .sum();
                (c[i * n + j] as f64 - exact).abs() <= 1e-6 * (k as f64)
            })
        });
        (mm.timings.submit_wait.as_secs_f64(), ok)
    } else {
        let (lo, span) = if spec.dtype == Dtype::Int4 {
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
        let c = mm.run::<i32, i64>(&a).unwrap();
        let ok = (0..m).all(|i| {
            (0..n).step_by(97).all(|j| {
                let exact: i64 = (0..k)
                    .map(|kk| a[i * k + kk] as i64 * b[kk * n + j] as i64)
                    .sum();
                c[i * n + j] == exact
            })
        });
        (mm.timings.submit_wait.as_secs_f64(), ok)
    };
    eprintln!(
        "{:?} {m}x{k}x{n} on {} core(s), {tasks} task(s): {:.3} ms submit+wait, {:.1} GOPS{}",
        spec.dtype,
        spec.cores,
        secs * 1e3,
        ops / secs / 1e9,
        if dev.info().emulated {
            " (emulated: the simulator's speed)"
        } else {
            ""
        }
    );
    assert!(ok, "{spec:?}: the result differs from the CPU");
}

#[test]
fn matmul_grid_matches_the_cpu_and_reports_throughput() {
    for spec in [
        MatmulSpec::new(1, 4096, 4096, Dtype::Int8),
        MatmulSpec::new(128, 4096, 11008, Dtype::Int8).on_cores(3),
        MatmulSpec::new(1, 2048, 2048, Dtype::Int4),
        MatmulSpec::new(64, 1024, 1024, Dtype::Fp16),
        // The shape of the published vendor figures (docs/hardware/matmul-programs.md#performance).
        MatmulSpec::new(128, 1024, 8192, Dtype::Int8),
        MatmulSpec::new(128, 1024, 8192, Dtype::Int4),
        MatmulSpec::new(128, 1024, 8192, Dtype::Fp16),
    ] {
        run(spec);
    }
}

/// Costed plans that keep operands in the CBUF (WEIGHT_REUSE across M tiles, DATA_REUSE
/// across column tiles with int8's spare data bank) or whose cores split K compute the
/// CPU's product on the device under test, and so do the same plans with every task
/// loading its operands (`Plan::without_reuse`). On rocket the device runs both without
/// reuse.
#[test]
fn costed_plans_with_cbuf_reuse_and_k_splits_match_the_cpu() {
    use rknpu_driver::kernels::matmul::Reuse;
    use rknpu_driver::kernels::matmul::cost::HardwareProfile;
    for (spec, reuse, k_split) in [
        (
            MatmulSpec::new(1, 4096, 4096, Dtype::Int8),
            Reuse::Data,
            false,
        ),
        (
            MatmulSpec::new(300, 128, 64, Dtype::Int8),
            Reuse::Weights,
            false,
        ),
        (
            MatmulSpec::new(600, 512, 64, Dtype::Fp16),
            Reuse::Weights,
            false,
        ),
        (
            MatmulSpec::new(32, 4096, 1024, Dtype::Fp16).on_cores(3),
            Reuse::None,
            true,
        ),
    ] {
        let plan = Plan::cheapest(spec, &HardwareProfile::rk3588()).unwrap();
        assert!(
            reuse == Reuse::None || plan.tasks.iter().any(|t| t.reuse == reuse),
            "{plan}"
        );
        let waves_of = |core| {
            plan.tasks
                .iter()
                .filter(move |t| t.core == core)
                .map(|t| t.wave)
        };
        let disjoint = waves_of(0).all(|w| waves_of(1).all(|v| v != w));
        assert_eq!(k_split, plan.cores_used() > 1 && disjoint, "{plan}");
        run_plan(plan.without_reuse());
        run_plan(plan);
    }
}

/// Incremental task bodies (`MatmulOptions::incremental`) on the device under test: on
/// the vendor driver, int8 matmuls with at least three tasks on each core (one core, and
/// three) compute the CPU's product, as the full-body program does; on rocket the option
/// is refused before anything is submitted.
#[test]
fn incremental_bodies_match_the_cpu_on_the_vendor_driver() {
    use rknpu_driver::Error;
    use rknpu_driver::compute::matmul::MatmulOptions;
    use rknpu_driver::device::Interface;
    let dev = super::dev();
    for (m, k, n, cores) in [(601u32, 64u32, 256u32, 1u32), (640, 128, 768, 3)] {
        let w = super::values(n * k, 3);
        let w8: Vec<i8> = w.iter().map(|&v| v as i8).collect();
        let bank = std::sync::Arc::new(WeightBank::new(&dev, (n, k), Weights::I8(&w8)).unwrap());
        let options = MatmulOptions::default().cores(cores);
        if dev.info().interface == Interface::Rocket {
            let refused = Matmul::with_options(&bank, m, options.incremental(true));
            assert!(
                matches!(refused, Err(Error::NotOffered { .. })),
                "{refused:?}"
            );
            continue;
        }
        let a = super::values(m * k, 4);
        // The CPU's product of A (M×K) and the bank's W (N×K) transposed.
        let mut wt = vec![0i32; (k * n) as usize];
        for j in 0..n as usize {
            for kk in 0..k as usize {
                wt[kk * n as usize + j] = w[j * k as usize + kk];
            }
        }
        let cpu = super::cpu_matmul(&a, &wt, m as usize, k as usize, n as usize);
        for incremental in [false, true] {
            let mut mm = Matmul::with_options(&bank, m, options.incremental(incremental)).unwrap();
            assert!(
                mm.plan().per_core.iter().all(|&t| t >= 3),
                "{:?}",
                mm.plan().per_core
            );
            let c = mm.run::<i32, i64>(&a).unwrap();
            assert!(
                c == cpu,
                "{m}x{k}x{n} on {cores} core(s), incremental {incremental}: differs from the CPU"
            );
        }
    }
}
