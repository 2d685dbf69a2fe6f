//! Matmuls of any shape through the whole stack — plan, program, weight bank, device,
//! emulated kernel, simulator, host reduction — against a CPU reference, on 1, 2 and 3
//! cores; and the golden programs of a fixed grid.
//!
//! Integer results are exact. fp16 results lie within the bound of fp32 summation in any
//! order, `(K + 1)·2⁻²⁴·Σ|aᵢbᵢ|` (plus half an fp16 ulp for fp16 results): the products of
//! fp16 values are exact in fp32, and the simulator accumulates each wave in fp32
//! (docs/simulator.md) before the host adds the waves in f64.

mod common;

use common::Rng;

use proptest::prelude::*;
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::{Dtype, OutType};
use std::path::PathBuf;

fn check(spec: MatmulSpec, seed: u64) {
    let dev = Device::open_spec("emu").unwrap();
    let plan = Plan::new(spec).unwrap();
    let (m, k, n) = (spec.m as usize, spec.k as usize, spec.n as usize);
    let mut rng = Rng(seed | 1);
    if spec.dtype == Dtype::Fp16 {
        use rknpu_driver::float::{f16_to_f32, f32_to_f16};
        let q = |v: f32| f16_to_f32(f32_to_f16(v));
        let a: Vec<f32> = (0..m * k)
            .map(|_| q(rng.int(-1000, 1000) as f32 / 1000.0))
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|_| q(rng.int(-1000, 1000) as f32 / 1000.0))
            .collect();
        let bank = std::sync::Arc::new(
            WeightBank::from_kn_in(&dev, &plan.layout, Weights::F32(&b)).unwrap(),
        );
        let mut mm = Matmul::for_plan(&bank, plan).unwrap();
        let c = mm.run::<f32, f32>(&a).unwrap();
        for i in 0..m {
            for j in 0..n {
                let (mut exact, mut mag) = (0f64, 0f64);
                for kk in 0..k {
                    let p = a[i * k + kk] as f64 * b[kk * n + j] as f64;
                    exact += p;
                    mag += p.abs();
                }
                let mut tol = (k as f64 + 1.0) * 2f64.powi(-24) * mag;
                if spec.out == OutType::Fp16 {
                    tol += exact.abs() * 2f64.powi(-11) + 2f64.powi(-25);
                }
                let got = c[i * n + j] as f64;
                assert!(
                    (got - exact).abs() <= tol,
                    "{spec:?} ({i}, {j}): {got} vs {exact} (tolerance {tol})"
                );
            }
        }
    } else {
        let (lo, hi) = if spec.dtype == Dtype::Int4 {
            (-8, 7)
        } else {
            (-128, 127)
        };
        let a: Vec<i32> = (0..m * k).map(|_| rng.int(lo, hi)).collect();
        let b: Vec<i32> = (0..k * n).map(|_| rng.int(lo, hi)).collect();
        let bank = std::sync::Arc::new(
            WeightBank::from_kn_in(&dev, &plan.layout, Weights::Int(&b)).unwrap(),
        );
        let mut mm = Matmul::for_plan(&bank, plan).unwrap();
        let c = mm.run::<i32, i64>(&a).unwrap();
        // A second call reuses the plan, program and weights.
        let again = mm.run::<i32, i64>(&a).unwrap();
        assert_eq!(c, again);
        for i in 0..m {
            let mut row = vec![0i64; n];
            for kk in 0..k {
                let x = a[i * k + kk] as i64;
                for (o, &y) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                    *o += x * y as i64;
                }
            }
            if let Some(j) = (0..n).find(|&j| c[i * n + j] != row[j]) {
                panic!(
                    "{spec:?}: C[{i}][{j}] = {} but the reference says {}",
                    c[i * n + j],
                    row[j]
                );
            }
        }
    }
}

fn dtype() -> impl Strategy<Value = Dtype> {
    prop_oneof![Just(Dtype::Int8), Just(Dtype::Int4), Just(Dtype::Fp16)]
}

/// Shapes from M 1..300, K 1..5000, N 1..5000, with N cut so that one case stays near
/// 10⁷ multiply-accumulates (CI runs dozens), and wide enough for the cores.
fn shape(cores: u32) -> impl Strategy<Value = (u32, u32, u32)> {
    (1u32..300, 1u32..5000, 1u32..5000).prop_map(move |(m, k, n)| {
        let budget = (10_000_000 / (m as u64 * k as u64)).max(1) as u32;
        (m, k, n.min(budget).max(64 * cores))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn one_core_equals_the_reference(d in dtype(), (m, k, n) in shape(1), seed in any::<u64>()) {
        check(MatmulSpec::new(m, k, n, d), seed);
    }

    #[test]
    fn two_cores_equal_the_reference(d in dtype(), (m, k, n) in shape(2), seed in any::<u64>()) {
        check(MatmulSpec::new(m, k, n, d).on_cores(2), seed);
    }

    #[test]
    fn three_cores_equal_the_reference(d in dtype(), (m, k, n) in shape(3), seed in any::<u64>()) {
        check(MatmulSpec::new(m, k, n, d).on_cores(3), seed);
    }
}

#[test]
fn result_types_and_rocket() {
    check(
        MatmulSpec {
            out: OutType::Fp16,
            ..MatmulSpec::new(9, 300, 70, Dtype::Fp16)
        },
        5,
    );
    check(
        MatmulSpec {
            out: OutType::Int16,
            ..MatmulSpec::new(9, 300, 70, Dtype::Int4)
        },
        6,
    );
    // Through the rocket interface: one job, every task its own kick.
    let dev = Device::open_spec("emu:rocket").unwrap();
    let plan = Plan::new(MatmulSpec::new(20, 1000, 200, Dtype::Int8).on_cores(3)).unwrap();
    let b: Vec<i32> = (0..1000 * 200).map(|i| (i % 9) - 4).collect();
    let bank =
        std::sync::Arc::new(WeightBank::from_kn_in(&dev, &plan.layout, Weights::Int(&b)).unwrap());
    let mut mm = Matmul::for_plan(&bank, plan).unwrap();
    let c = mm.run::<i32, i64>(&vec![1; 20 * 1000]).unwrap();
    for (j, &got) in c.iter().take(200).enumerate() {
        let want: i64 = (0..1000).map(|kk| ((kk * 200 + j) % 9) as i64 - 4).sum();
        assert_eq!(got, want, "column {j}");
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/matmul")
        .join(name)
}

/// The decoded programs of a fixed grid are reviewed text: `UPDATE_FIXTURES=1` rewrites
/// them on purpose.
#[test]
fn golden_programs_of_the_grid() {
    for (name, spec) in [
        (
            "int8-1x4096x4096",
            MatmulSpec::new(1, 4096, 4096, Dtype::Int8),
        ),
        (
            "int8-128x4096x11008",
            MatmulSpec::new(128, 4096, 11008, Dtype::Int8),
        ),
        (
            "int4-1x2048x2048",
            MatmulSpec::new(1, 2048, 2048, Dtype::Int4),
        ),
        (
            "fp16-64x1024x1024",
            MatmulSpec::new(64, 1024, 1024, Dtype::Fp16),
        ),
    ] {
        let plan = Plan::new(spec).unwrap();
        let program = plan.program().unwrap();
        let text = format!("# plan: {plan}\n{}", program.decode().to_text(None));
        let path = fixture(&format!("{name}.txt"));
        if std::env::var_os("UPDATE_FIXTURES").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let want = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_FIXTURES=1 creates it)", path.display()));
        if let Some(diff) = common::first_difference(&want, text.as_bytes()) {
            panic!("{name} differs from its fixture: {diff}");
        }
        // Determinism: planning and encoding again gives the same words.
        assert_eq!(
            Plan::new(spec).unwrap().program().unwrap().words(),
            program.words()
        );
    }
}
