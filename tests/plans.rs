//! The matmul planner (issue 14): the plans `Plan::cheapest` chooses for the issue's grid
//! on 3 cores as a reviewed golden table, with rules checked case by case (tasks
//! balanced over the cores, the costed search never predicting longer than the plain
//! plan, the issue's traffic targets); and random small shapes planned the same way, run on the
//! emulated kernels against a CPU reference, with the cost model's byte counts equal to
//! the simulator's DMA counters for the run.
//!
//! `UPDATE_FIXTURES=1 cargo test --test plans` rewrites `fixtures/plans/grid.txt`; review
//! the diff before committing it.

mod common;

use common::Rng;

use half::{bf16, f16};
use proptest::prelude::*;
use rknpu_driver::compute::matmul::{Matmul, WeightBank, Weights};
use rknpu_driver::device::{Device, Interface};
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::{Dtype, OutType};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn rk3588() -> HardwareProfile {
    HardwareProfile::rk3588()
}

/// The RK3588 with a host so fast that its work never decides a plan: the NPU side of
/// the planner (balance over the cores, traffic), as issue 14's targets judge it.
fn npu_bound() -> HardwareProfile {
    let mut p = HardwareProfile::rk3588();
    p.host.prepare_bytes_per_s = 1e18;
    p.host.finish_bytes_per_s = 1e18;
    p.host.verify_task_s = 1e-15;
    p
}

/// Issue 14's grid, on 3 cores: K×N of 4096×4096, 4096×11008 and 11008×4096 for M of 1,
/// 4, 16, 32, 64, 100 and 128 in int8, int4 and fp16; 128×1024×8192 in the same three;
/// 512×3840×4096 fp16 and 512×4096×4096 int8.
fn grid() -> Vec<MatmulSpec> {
    let dtypes = [Dtype::Int8, Dtype::Int4, Dtype::Fp16];
    let mut v = Vec::new();
    for (k, n) in [(4096, 4096), (4096, 11008), (11008, 4096)] {
        for d in dtypes {
            for m in [1, 4, 16, 32, 64, 100, 128] {
                v.push(MatmulSpec::new(m, k, n, d));
            }
        }
    }
    for d in dtypes {
        v.push(MatmulSpec::new(128, 1024, 8192, d));
    }
    v.push(MatmulSpec::new(512, 3840, 4096, Dtype::Fp16));
    v.push(MatmulSpec::new(512, 4096, 4096, Dtype::Int8));
    v.into_iter().map(|s| s.on_cores(3)).collect()
}

fn name(s: &MatmulSpec) -> String {
    format!("{}x{}x{} {:?} on {}", s.m, s.k, s.n, s.dtype, s.cores)
}

fn cheapest(spec: MatmulSpec, profile: &HardwareProfile) -> Plan {
    Plan::cheapest(spec, profile).unwrap_or_else(|e| panic!("{}: {e}", name(&spec)))
}

/// The balance rule: no core runs more than ⌈tasks / cores used⌉ + 1 tasks, and no task
/// is on a core beyond `cores`.
/// Counts each core's tasks from the task list itself; `None` when the rule holds.
fn unbalanced(plan: &Plan, cores: u32) -> Option<String> {
    let mut per_core = vec![0usize; cores as usize];
    for t in &plan.tasks {
        assert!(
            t.core < cores,
            "{}: a task on core {}",
            name(&plan.spec),
            t.core
        );
        per_core[t.core as usize] += 1;
    }
    // Balance among the cores the plan uses (a small product may run on fewer).
    let used = per_core.iter().filter(|&&n| n > 0).count().max(1);
    let limit = plan.tasks.len().div_ceil(used) + 1;
    let busiest = per_core.iter().copied().max().unwrap_or(0);
    (busiest > limit).then(|| {
        format!(
            "{}: tasks per core {per_core:?}, more than {limit}",
            name(&plan.spec)
        )
    })
}

/// Plans each of `specs` with `Plan::cheapest` on `profile` and fails once, naming every
/// case for which `check` says how it breaks `rule`.
fn no_case_breaks(
    (rule, profile): (&str, &HardwareProfile),
    specs: impl IntoIterator<Item = MatmulSpec>,
    check: impl Fn(MatmulSpec, &Plan) -> Option<String>,
) {
    let failures: Vec<String> = specs
        .into_iter()
        .filter_map(|spec| check(spec, &cheapest(spec, profile)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} case(s) break {rule}:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

/// The golden table: each grid case's `plan:` and `cost:` lines, as `Display` prints them.
#[test]
fn golden_table_of_the_grid() {
    let mut text = String::from(
        "# Plan::cheapest(spec.on_cores(3), &HardwareProfile::rk3588()) for issue 14's grid (tests/plans.rs); UPDATE_FIXTURES=1 cargo test --test plans rewrites it\n",
    );
    for spec in grid() {
        let plan = cheapest(spec, &rk3588());
        let cost = plan.cost(&rk3588()).unwrap();
        text += &format!("\nplan: {plan}\n{cost}\n");
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/plans/grid.txt");
    common::check_text_fixture(&path, &text);
}

/// Rule (a): on 3 cores, no core of a grid plan runs more than ⌈tasks / 3⌉ + 1 tasks,
/// and the plan's own per-core counts are those of its task list.
#[test]
fn grid_plans_balance_tasks_over_the_cores() {
    no_case_breaks(("the balance rule", &npu_bound()), grid(), |spec, plan| {
        let listed: Vec<usize> = (0..plan.per_core.len() as u32)
            .map(|c| plan.tasks.iter().filter(|t| t.core == c).count())
            .collect();
        assert_eq!(listed, plan.per_core, "{}", name(&spec));
        unbalanced(plan, 3)
    });
}

/// Issue 14's targets for the traffic ratio (bytes moved over A, B and C once each):
/// at most 1.25 for M ≤ 128 on the three large shapes and 128×1024×8192, at most 3.0 for
/// the two 512-row cases. `dtypes` selects the cases; every case of those that misses
/// its target is named in one failure.
fn traffic_targets_hold(dtypes: &[Dtype]) {
    let specs = grid().into_iter().filter(|s| dtypes.contains(&s.dtype));
    no_case_breaks(
        ("their traffic target", &npu_bound()),
        specs,
        |spec, plan| {
            let target = if spec.m <= 128 { 1.25 } else { 3.0 };
            let ratio = plan.cost(&npu_bound()).unwrap().traffic_ratio;
            (ratio > target).then(|| format!("{}: ratio {ratio:.3} > {target}", name(&spec)))
        },
    );
}

#[test]
fn int8_and_fp16_grid_plans_meet_the_traffic_targets_of_issue_14() {
    traffic_targets_hold(&[Dtype::Int8, Dtype::Fp16]);
}

/// int4 misses from 64 rows on: its K waves stay at 480 channels so that int16 sums
/// cannot saturate (quirk 13, docs/hardware/quirks.md#quirk-13), and each wave writes an int16 partial block of M×N, more
/// bytes than the weights once M reaches about 64 (docs/matmul.md).
#[test]
#[ignore = "int4 targets not met: 480-channel waves write one int16 partial block each"]
fn int4_grid_plans_meet_the_traffic_targets_of_issue_14() {
    traffic_targets_hold(&[Dtype::Int4]);
}

/// Three shapes whose tasks once piled up on one core, on 3 cores: three 480-channel
/// int4 waves of one column granule (1×961×1: the cores now split K); column runs of
/// 97, 96 and 96 granules that became 2, 1 and 1 tiles of at most 3072 columns
/// (1×11008×9248 int8: every core now cuts its run into as many tiles); 4 M tiles
/// dealt 2, 1 and 1 (512×961×1 int4: M tiles are now a multiple of the cores).
#[test]
fn formerly_unbalanced_plans_are_balanced() {
    let specs = [
        (1, 961, 1, Dtype::Int4),
        (1, 11008, 9248, Dtype::Int8),
        (512, 961, 1, Dtype::Int4),
    ]
    .map(|(m, k, n, d)| MatmulSpec::new(m, k, n, d).on_cores(3));
    no_case_breaks(("the balance rule", &npu_bound()), specs, |_, plan| {
        unbalanced(plan, 3)
    });
}

/// `Plan::cheapest` is the plan a one-off product should run, so it plans what
/// `Plan::new` plans: int8 with fp32 results for at most 4 rows and K in (3072, 4096] is
/// one single-token wave, which only the layout for those rows allows.
#[test]
fn cheapest_plans_every_spec_plan_new_plans() {
    for m in [1, 4] {
        let spec = MatmulSpec {
            out: OutType::Fp32,
            ..MatmulSpec::new(m, 3073, 1, Dtype::Int8)
        };
        let plain = Plan::new(spec).unwrap();
        assert_eq!(plain.layout.waves.len(), 1, "{plain}");
        let costed = Plan::cheapest(spec, &rk3588());
        assert!(costed.is_ok(), "{}: {costed:?}", name(&spec));
    }
}

/// The costed search never predicts a longer time than `Plan::new` for the same spec
/// on the same profile (its candidates start with `Plan::new`'s layout), including the
/// single-token int8 layouts of at most 4 rows.
#[test]
fn cheapest_never_predicts_longer_than_plan_new() {
    let mut specs = grid();
    specs.push(MatmulSpec::new(1, 3073, 1, Dtype::Int8));
    no_case_breaks(
        ("cheapest <= plain time", &rk3588()),
        specs,
        |spec, plan| {
            let costed = plan.cost(&rk3588()).unwrap().total_s();
            let plain = Plan::new(spec).unwrap().cost(&rk3588()).unwrap().total_s();
            (costed > plain).then(|| {
                format!(
                    "{}: {:.3} ms against {:.3} ms for Plan::new",
                    name(&spec),
                    costed * 1e3,
                    plain * 1e3
                )
            })
        },
    );
}

/// A dimension in `1..=max`: uniform two times in five, next to a multiple of 32 (one
/// less, equal, one more: where tiles, waves and padding change) two times in five, and
/// 1 to 4 (a single token, the single-token layouts' rows) once in five.
fn dim(max: u32) -> impl Strategy<Value = u32> {
    prop_oneof![
        2 => 1..=max,
        2 => (1..=max / 32, -1i64..=1)
            .prop_map(move |(g, d)| (g as i64 * 32 + d).clamp(1, max as i64) as u32),
        1 => 1..=4u32,
    ]
}

fn dtype() -> impl Strategy<Value = Dtype> {
    prop_oneof![
        Just(Dtype::Int8),
        Just(Dtype::Int4),
        Just(Dtype::Fp16),
        Just(Dtype::Bf16)
    ]
}

/// Random small specs: M 1..=300, K 1..=1500, N 1..=700, on at most 1 to 3 cores; one
/// in four of the int4 and fp16 ones with the narrow result (int16, fp16). int8 with
/// fp32 results is left out: the integer readers refuse it, and only the NPU
/// dequantisation path, which plans its own layout, reads it.
fn small_spec() -> impl Strategy<Value = MatmulSpec> {
    let narrow = prop::bool::weighted(0.25);
    (dim(300), dim(1500), dim(700), dtype(), 1u32..=3, narrow).prop_map(
        |(m, k, n, d, cores, narrow)| {
            let spec = MatmulSpec::new(m, k, n, d).on_cores(cores);
            let out = match d {
                Dtype::Int4 if narrow => OutType::Int16,
                Dtype::Fp16 if narrow => OutType::Fp16,
                _ => spec.out,
            };
            MatmulSpec { out, ..spec }
        },
    )
}

/// `C[i][j] = Σₖ a[i][k]·w[j][k]` (A M×K, W N×K) in f64 with `Σₖ |a[i][k]·w[j][k]|`
/// beside it. Exact for the integer types here: every partial sum is an integer below
/// 1500·128², far within f64's 2⁵³.
fn reference(a: &[f64], w: &[f64], (m, k, n): (usize, usize, usize)) -> Vec<(f64, f64)> {
    let mut c = Vec::with_capacity(m * n);
    for row in a.chunks_exact(k).take(m) {
        for col in w.chunks_exact(k).take(n) {
            let products = row.iter().zip(col).map(|(x, y)| x * y);
            c.push(products.fold((0.0, 0.0), |(s, g), p| (s + p, g + p.abs())));
        }
    }
    c
}

/// The largest error an fp32 result of a 16-bit float product may carry: a significand
/// of `bits` bits (fp16 11, bf16 8) makes every product exact in fp32 (2·bits ≤ 24), so
/// the error is that of summing K exact terms in fp32 in any order, at most
/// `(K − 1)·2⁻²⁴·Σ|aᵢbᵢ|` to first order, within each K wave on the NPU, plus one
/// rounding to fp32 of the waves' sum on the host (`2⁻²⁴·|Σ|` ≤ `2⁻²⁴·Σ|aᵢbᵢ|`). `(K + 1)`
/// covers both and the second-order terms for K below 2²⁰.
fn float_tolerance(k: usize, bits: u32, magnitude: f64) -> f64 {
    assert!(
        2 * bits <= 24,
        "products of {bits}-bit significands are not exact in fp32"
    );
    (k as f64 + 1.0) * 2f64.powi(-24) * magnitude
}

/// The plan a device runs for `plan`: on rocket, which starts each task on its own,
/// without CBUF reuse.
fn ran(dev: &Device, plan: &Plan) -> Plan {
    match dev.info().interface {
        Interface::Rocket => plan.without_reuse(),
        // The vendor driver, and any interface added later, runs the plan as planned.
        _ => plan.clone(),
    }
}

/// Runs `plan` on `dev` with seeded random operands and returns its results as f64
/// beside the CPU reference: the plan itself through `Matmul::for_plan`, on a bank packed
/// in the plan's layout from `[out][in]` weights.
fn run(dev: &Device, plan: &Plan, seed: u64) -> (Vec<f64>, Vec<(f64, f64)>) {
    let s = plan.spec;
    let (m, k, n) = (s.m as usize, s.k as usize, s.n as usize);
    let mut rng = Rng(seed | 1);
    let matmul = |weights| {
        let bank = Arc::new(WeightBank::from_nk_in(dev, &plan.layout, weights).unwrap());
        let mm = Matmul::for_plan(&bank, plan.clone()).unwrap();
        assert_eq!(
            mm.plan(),
            &ran(dev, plan),
            "the matmul runs the plan tested"
        );
        mm
    };
    let mut got = vec![0f32; m * n];
    let (a, w): (Vec<f64>, Vec<f64>) = match s.dtype {
        Dtype::Fp16 | Dtype::Bf16 => {
            // Operands in [-2, 2], rounded to the type; the reference takes the rounded values.
            let mut floats = |len| (0..len).map(|_| 2.0 * rng.float()).collect::<Vec<f32>>();
            let (a, w) = (floats(m * k), floats(n * k));
            if s.dtype == Dtype::Fp16 {
                let (a, w) = (f16s(&a), f16s(&w));
                matmul(Weights::F16(&w)).run_into(&a, &mut got).unwrap();
                (wide(&a, f16::to_f64), wide(&w, f16::to_f64))
            } else {
                let (a, w) = (bf16s(&a), bf16s(&w));
                matmul(Weights::Bf16(&w)).run_into(&a, &mut got).unwrap();
                (wide(&a, bf16::to_f64), wide(&w, bf16::to_f64))
            }
        }
        _ => {
            let (lo, hi) = if s.dtype == Dtype::Int4 {
                (-8, 7)
            } else {
                (-128, 127)
            };
            let mut ints = |len| (0..len).map(|_| rng.int(lo, hi) as i8).collect::<Vec<i8>>();
            let (a, w) = (ints(m * k), ints(n * k));
            let exact: Vec<f64> = if s.dtype == Dtype::Int8 {
                let mut out = vec![i32::MIN; m * n];
                matmul(Weights::I8(&w)).run_into(&a, &mut out).unwrap();
                wide(&out, |v| v as f64)
            } else {
                let a32: Vec<i32> = a.iter().map(|&v| v as i32).collect();
                let out = matmul(Weights::I4(&w)).run::<i32, i64>(&a32).unwrap();
                wide(&out, |v| v as f64)
            };
            let want = reference(&wide(&a, |v| v as f64), &wide(&w, |v| v as f64), (m, k, n));
            return (exact, want);
        }
    };
    let got = wide(&got, |v| v as f64);
    (got, reference(&a, &w, (m, k, n)))
}

fn wide<T: Copy>(v: &[T], f: impl Fn(T) -> f64) -> Vec<f64> {
    v.iter().map(|&x| f(x)).collect()
}

fn f16s(v: &[f32]) -> Vec<f16> {
    v.iter().map(|&x| f16::from_f32(x)).collect()
}

fn bf16s(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

/// Checks `got` against `want`: exact for integer plans (an int16 result saturated
/// once), within [`float_tolerance`] for float plans, plus for an fp16 result the DPU's
/// rounding of the fp32 sum to fp16: half an fp16 ulp, `2⁻¹¹` of the value, or `2⁻²⁵`
/// among subnormals. Names the first result outside.
fn compare(spec: &MatmulSpec, got: &[f64], want: &[(f64, f64)]) {
    assert_eq!(got.len(), want.len(), "{}: result count", name(spec));
    let bits = match spec.dtype {
        Dtype::Fp16 => Some(11),
        Dtype::Bf16 => Some(8),
        _ => None,
    };
    for (i, (&g, &(exact, magnitude))) in got.iter().zip(want).enumerate() {
        let mut tol = bits.map_or(0.0, |b| float_tolerance(spec.k as usize, b, magnitude));
        let exact = match spec.out {
            OutType::Int16 => exact.clamp(i16::MIN.into(), i16::MAX.into()),
            OutType::Fp16 => {
                tol += (exact.abs() + tol) * 2f64.powi(-11) + 2f64.powi(-25);
                exact
            }
            _ => exact,
        };
        assert!(
            (g - exact).abs() <= tol,
            "{}: C[{}][{}] = {g}, reference {exact} (tolerance {tol})",
            name(spec),
            i / spec.n as usize,
            i % spec.n as usize
        );
    }
}

/// The emulated kernel of each flavour is one per process, and so are its DMA counters:
/// every test here that runs on it takes turns, so that none counts another's bytes.
fn counting_turn() -> std::sync::MutexGuard<'static, ()> {
    static COUNTING: Mutex<()> = Mutex::new(());
    COUNTING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `plan` on the emulated vendor kernel (or rocket) with operands from `seed`:
/// the results are the CPU reference's ([`compare`]) and the simulator's DMA counters
/// for the run are the cost model's bytes (plus the rocket sentinel's).
fn check_run(plan: &Plan, rocket: bool, seed: u64) {
    let _turn = counting_turn();
    let dev = Device::open_spec(if rocket { "emu:rocket" } else { "emu" }).unwrap();
    let emu = dev.emulator().unwrap();
    emu.reset_dma_counters();
    let (got, want) = run(&dev, plan, seed);
    let cost = ran(&dev, plan).cost(&rk3588()).unwrap();
    let kernel = if rocket { "rocket" } else { "vendor" };
    let what = format!("{} ({kernel})", name(&plan.spec));
    common::assert_dma_is_the_cost(&what, &emu.dma_counters(), &cost, u64::from(rocket));
    compare(&plan.spec, &got, &want);
}

/// Medium shapes whose costed plans take K waves narrower than the widest (2752, 1024,
/// 960, 416 and 1280 channels when written), several waves and M tiles per core:
/// exact or within the bound on both kernels, moving what the cost model says.
#[test]
fn medium_cheapest_plans_compute_the_product_and_move_what_they_cost() {
    for (m, k, n, d) in [
        (130, 11008, 64, Dtype::Int8),
        (128, 4096, 130, Dtype::Bf16),
        (100, 3840, 100, Dtype::Fp16),
        (200, 2000, 300, Dtype::Int4),
        (300, 5000, 33, Dtype::Fp16),
    ] {
        let plan = cheapest(MatmulSpec::new(m, k, n, d).on_cores(3), &rk3588());
        for rocket in [false, true] {
            check_run(&plan, rocket, u64::from(m * k + n));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random small shapes, `Plan::cheapest` on rk3588: the plan runs (on the emulated
    /// vendor kernel, one case in four on rocket) to the CPU reference, and the cost
    /// model's feature, weight and DPU bytes are the simulator's DMA counters for the run.
    #[test]
    fn random_cheapest_plans_compute_the_product_and_move_what_they_cost(
        spec in small_spec(),
        rocket in prop::bool::weighted(0.25),
        seed in any::<u64>(),
    ) {
        check_run(&cheapest(spec, &rk3588()), rocket, seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// The balance rule for random small shapes: on the `c` cores the cheapest plan uses,
    /// no core runs more than ⌈tasks / c⌉ + 1 tasks. (The search may use fewer cores
    /// than the spec allows when the model predicts that faster, e.g. 257×1472×129 int4
    /// on 3: its four waves split over 2 cores, 6 tasks each, where 3 cores splitting the
    /// 3 column granules would each run 12.)
    #[test]
    fn random_cheapest_plans_balance_tasks_over_the_cores(spec in small_spec()) {
        let plan = cheapest(spec, &rk3588());
        prop_assert_eq!(unbalanced(&plan, plan.cores_used()), None);
    }
}

/// Plans whose tasks find operands in the CBUF compute bit for bit what the same plan
/// computes with every task loading its operands (`Plan::without_reuse`), on the
/// emulated vendor kernel, whose simulator refuses a reuse bit the previous task does
/// not make true; and they fetch fewer bytes.
#[test]
fn reuse_programs_compute_what_full_programs_compute() {
    use rknpu_driver::kernels::matmul::Reuse;
    let _turn = counting_turn();
    let dev = Device::open_spec("emu").unwrap();
    for (m, k, n, d, kept) in [
        (1, 4096, 4096, Dtype::Int8, Reuse::Data),
        (600, 512, 64, Dtype::Bf16, Reuse::Weights),
        (300, 128, 64, Dtype::Int8, Reuse::Weights),
        (96, 1024, 8192, Dtype::Int4, Reuse::Data),
        (200, 2000, 300, Dtype::Int4, Reuse::Weights),
    ] {
        let plan = cheapest(MatmulSpec::new(m, k, n, d).on_cores(1), &rk3588());
        assert!(
            plan.tasks.iter().any(|t| t.reuse == kept),
            "{}: no task reuses {kept:?}",
            name(&plan.spec)
        );
        let full = plan.without_reuse();
        let results = [&plan, &full].map(|p| run(&dev, p, 7).0);
        assert_eq!(results[0], results[1], "{}", name(&plan.spec));
        let bytes = |p: &Plan| {
            let c = p.cost(&rk3588()).unwrap();
            c.read_bytes + c.written_bytes
        };
        assert!(bytes(&plan) < bytes(&full), "{}", name(&plan.spec));
    }
}

/// int4 plans over weights as a model's layers give them, f32 values drawn near a
/// normal distribution and quantised per output channel to ±7
/// (`quant::quantize_weights_i4`): the waves their magnitudes certify
/// (`WeightLayout::certified_i4`) move fewer bytes than the 480-channel waves any weights
/// allow for every M, and bring int4 × int4 products of up to 64 rows on the grid's three
/// shapes within issue 14's traffic target (at 128 rows the partials of 1376-channel
/// waves still weigh: docs/matmul.md has the figures).
#[test]
fn int4_plans_over_quantised_model_weights_move_less() {
    use rknpu_driver::kernels::matmul::{WeightLayout, quant};
    let mut rng = Rng(0x5eed_4444);
    let mut failures = Vec::new();
    for (k, n) in [(4096u32, 4096u32), (4096, 11008), (11008, 4096)] {
        // The sum of four uniforms: near normal, as trained weights are.
        let w: Vec<f32> = (0..k as usize * n as usize)
            .map(|_| (0..4).map(|_| rng.float() - 0.5).sum())
            .collect();
        let (q, _) = quant::quantize_weights_i4(&w, n as usize, k as usize).unwrap();
        let mags = quant::i4_magnitudes(&q, n as usize, k as usize).unwrap();
        let layout = WeightLayout::certified_i4(k, n, &mags).unwrap();
        let any = WeightLayout::new(k, n, Dtype::Int4).unwrap();
        assert!(layout.waves.len() < any.waves.len(), "{k}x{n}: {layout:?}");
        for m in [1, 32, 64, 128] {
            let ratio = |l: &WeightLayout| {
                let plan = Plan::for_layout(l, m, OutType::Int32, 3).unwrap();
                plan.cost(&rk3588()).unwrap().traffic_ratio
            };
            let (certified, plain) = (ratio(&layout), ratio(&any));
            if certified >= plain || (m <= 64 && certified > 1.25) {
                failures.push(format!(
                    "{m}x{k}x{n} int4: ratio {certified:.3} ({} waves) against {plain:.3}",
                    layout.waves.len()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
