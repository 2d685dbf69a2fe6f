use super::*;
use crate::kernels::matmul::cost::HardwareProfile;

/// The predicted total of `m` rows against `layout` on 3 cores, and of the cheapest
/// plan for that M (what `rknpu matmul` picks).
fn totals(layout: &WeightLayout, m: u32) -> (f64, f64) {
    let profile = HardwareProfile::rk3588();
    let out = if layout.dtype.is_float() {
        OutType::Fp32
    } else {
        OutType::Int32
    };
    let (k, n, dtype) = (layout.k, layout.n, layout.dtype);
    let spec = MatmulSpec {
        out,
        ..MatmulSpec::new(m, k, n, dtype).on_cores(3)
    };
    let cheapest = Plan::cheapest(spec, &profile).unwrap();
    let (plan, _) = Plan::costed_split(layout, m, out, (3, &profile)).unwrap();
    (
        plan.cost(&profile).unwrap().total_s(),
        cheapest.cost(&profile).unwrap().total_s(),
    )
}

/// Issue 25's yardstick: a bank laid out without a declared M serves every row count
/// of [`DECODE_AND_PROMPTS`] within 1.15x of the cheapest plan for that M (the widest
/// waves, the previous default, are up to 3.2x slower for fp16 prompts), and the fp16
/// bank of 4096x11008 runs 128 rows within 1.1x of what `rknpu matmul` plans.
#[test]
fn the_default_layout_serves_decode_and_prompts_near_their_best() {
    let mut worst_widest = 0f64;
    for (k, n, dtype) in [
        (4096, 11008, Dtype::Fp16),
        (4096, 4096, Dtype::Fp16),
        (11008, 4096, Dtype::Fp16),
        (4096, 4096, Dtype::Bf16),
        (4096, 4096, Dtype::Int8),
        (4096, 11008, Dtype::Int8),
    ] {
        let layout = WeightLayout::decode_and_prompts(k, n, dtype, 3).unwrap();
        let widest = WeightLayout::new(k, n, dtype).unwrap();
        for m in DECODE_AND_PROMPTS {
            let (bank, best) = totals(&layout, m);
            let what = format!("{m}x{k}x{n} {dtype:?} in {} waves", layout.waves.len());
            assert!(bank <= 1.15 * best, "{what}: {bank} s, best {best} s");
            worst_widest = worst_widest.max(totals(&widest, m).0 / best);
        }
    }
    assert!(worst_widest > 2.5, "the widest waves: {worst_widest}");
    let layout = WeightLayout::decode_and_prompts(4096, 11008, Dtype::Fp16, 3).unwrap();
    let (bank, best) = totals(&layout, 128);
    assert!(bank <= 1.1 * best, "{bank} s, best {best} s");
}

#[test]
fn row_counts_no_layout_serves_are_refused() {
    let profile = HardwareProfile::rk3588();
    for rows in [&[][..], &[0], &[1, 0]] {
        assert!(
            WeightLayout::for_rows(4096, 4096, Dtype::Int8, (rows, 3), &profile).is_err(),
            "{rows:?}"
        );
    }
    // One row only: the single-token int8 layout may win; it plans that row.
    let one = WeightLayout::for_rows(3500, 64, Dtype::Int8, (&[1], 3), &profile).unwrap();
    assert!(Plan::for_layout(&one, 1, OutType::Int32, 3).is_ok());
    // With prompts declared too, the layout plans them all.
    let all = WeightLayout::decode_and_prompts(3500, 64, Dtype::Int8, 3).unwrap();
    for m in DECODE_AND_PROMPTS {
        assert!(Plan::for_layout(&all, m, OutType::Int32, 3).is_ok(), "{m}");
    }
}

#[test]
fn the_remembered_default_is_the_chosen_one() {
    let profile = HardwareProfile::rk3588();
    for cores in [1, 3] {
        let chosen = WeightLayout::for_rows(
            4096,
            4096,
            Dtype::Fp16,
            (&DECODE_AND_PROMPTS, cores),
            &profile,
        )
        .unwrap();
        for _ in 0..2 {
            let got = WeightLayout::decode_and_prompts(4096, 4096, Dtype::Fp16, cores).unwrap();
            assert_eq!(got, chosen, "{cores} cores");
        }
    }
}

/// The costed layout choice never predicts a longer total time than the widest waves,
/// and where narrower waves let the M rows share one CBUF pass it cuts the weight
/// re-reads: the traffic ratios (bytes moved over A + B + C once) it must reach on 3
/// cores when the NPU decides (a host so fast its work is negligible).
#[test]
fn the_cheapest_layout_moves_less_data_and_costs_less() {
    use crate::kernels::matmul::host_cost::HostProfile;
    let profile = HardwareProfile::rk3588();
    let mut npu_bound = HardwareProfile::rk3588();
    npu_bound.host = HostProfile {
        name: "instant",
        prepare_bytes_per_s: 1e18,
        finish_bytes_per_s: 1e18,
        verify_task_s: 1e-15,
    };
    for (m, k, n, dtype, ratio) in [
        (1, 4096, 4096, Dtype::Int8, 1.05),
        (32, 4096, 4096, Dtype::Int8, 1.05),
        (128, 4096, 4096, Dtype::Int8, 1.25),
        (128, 4096, 11008, Dtype::Int8, 1.25),
        (128, 11008, 4096, Dtype::Int8, 1.40),
        (128, 1024, 8192, Dtype::Int8, 1.05),
        (512, 4096, 4096, Dtype::Int8, 3.5),
        (128, 4096, 4096, Dtype::Fp16, 1.25),
        (512, 3840, 4096, Dtype::Fp16, 4.0),
        (128, 4096, 11008, Dtype::Int4, 1.75),
    ] {
        let spec = MatmulSpec::new(m, k, n, dtype).on_cores(3);
        for p in [&profile, &npu_bound] {
            let widest = Plan::new(spec).unwrap().cost(p).unwrap();
            let best = Plan::cheapest(spec, p).unwrap();
            let c = best.cost(p).unwrap();
            let what = format!(
                "{m}x{k}x{n} {dtype:?} (K tile {}) on {}",
                best.layout.k_tile(),
                p.host.name
            );
            assert!(
                c.total_s() <= widest.total_s(),
                "{what}: dearer than the widest waves"
            );
            if p == &npu_bound {
                assert!(
                    c.traffic_ratio <= ratio,
                    "{what}: ratio {:.2}",
                    c.traffic_ratio
                );
            }
            assert_eq!(
                Plan::cheapest(spec, p).unwrap(),
                best,
                "{what}: deterministic"
            );
        }
    }
}

/// With the host's work counted, a prompt-sized int8 product does not take the plan of
/// many K waves whose partial sums the host must add: at 512×4096×4096 on 3 cores the
/// choice predicts no more total time than the one-wave plan, and the host's share of
/// it is no larger.
#[test]
fn the_cheapest_plan_counts_the_hosts_reduction_of_k_waves() {
    let profile = HardwareProfile::rk3588();
    let spec = MatmulSpec::new(512, 4096, 4096, Dtype::Int8).on_cores(3);
    let one_wave = WeightLayout::candidates(4096, 4096, Dtype::Int8, 512, 3)
        .unwrap()
        .into_iter()
        .find(|l| l.waves.len() == 1)
        .expect("a one-wave layout for K = 4096");
    let one = Plan::for_layout(&one_wave, 512, OutType::Int32, 3)
        .unwrap()
        .cost(&profile)
        .unwrap();
    let best = Plan::cheapest(spec, &profile).unwrap();
    let c = best.cost(&profile).unwrap();
    assert!(c.total_s() <= one.total_s(), "{c} against {one}");
    assert!(c.host.finish_s <= one.host.finish_s, "{c} against {one}");
    // Counted in the total, not beside it.
    assert!(c.total_s() > c.seconds);
}

#[test]
fn the_default_int4_layout_is_the_one_any_int4_weights_take() {
    let default = WeightLayout::decode_and_prompts(4096, 11008, Dtype::Int4, 3).unwrap();
    assert_eq!(
        default,
        WeightLayout::new(4096, 11008, Dtype::Int4).unwrap()
    );
}
