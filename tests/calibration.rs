//! The cost model against published board timings: every row of
//! fixtures/calibration/published-timings.tsv is planned as its source ran it and costed on
//! the profile of its driver and clock (`cost::calibration`); the ratios model /
//! published must sit in the bands docs/matmul.md ("Calibration") gives, whose table this
//! test also keeps true (`UPDATE_FIXTURES=1` rewrites it; review the diff).

use rknpu_driver::kernels::matmul::cost::calibration::{self, Includes, Modelled, Row};
use rknpu_driver::kernels::single::Dtype;

const TABLE: &str = include_str!("../fixtures/calibration/published-timings.tsv");
const DOC: &str = "docs/matmul.md";
const BEGIN: &str = "<!-- calibration table: tests/calibration.rs -->";
const END: &str = "<!-- end of calibration table -->";

fn modelled() -> Vec<(Row, Modelled)> {
    calibration::parse(TABLE)
        .unwrap()
        .into_iter()
        .map(|r| {
            let m = r.model().unwrap_or_else(|e| panic!("{}: {e}", r.id));
            (r, m)
        })
        .collect()
}

fn ratio((row, m): &(Row, Modelled)) -> f64 {
    m.total_s() / row.published_s
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The ratios of the rows `keep` picks.
fn ratios_where(rows: &[(Row, Modelled)], keep: impl Fn(&Row) -> bool) -> Vec<f64> {
    rows.iter().filter(|(r, _)| keep(r)).map(ratio).collect()
}

/// `(median, share within [lo, hi])` of the ratios.
fn band(ratios: &[f64], (lo, hi): (f64, f64)) -> (f64, f64) {
    let within = ratios.iter().filter(|r| (lo..=hi).contains(*r)).count();
    (median(ratios.to_vec()), within as f64 / ratios.len() as f64)
}

/// The groups the bands hold for: all rows whose figure is NPU time (with at most a
/// plain copy, which the model adds), each precision, each core count.
fn groups(rows: &[(Row, Modelled)]) -> Vec<(String, Vec<f64>)> {
    let banded: Vec<&(Row, Modelled)> = rows
        .iter()
        .filter(|(r, _)| r.includes != Includes::Reduce)
        .collect();
    let pick = |f: &dyn Fn(&Row) -> bool| -> Vec<f64> {
        banded
            .iter()
            .filter(|(r, _)| f(r))
            .map(|rm| ratio(rm))
            .collect()
    };
    let mut g = vec![("all".to_string(), pick(&|_| true))];
    for dtype in [Dtype::Int8, Dtype::Int4, Dtype::Fp16] {
        g.push((dtype.name().into(), pick(&|r| r.spec.dtype == dtype)));
    }
    for cores in 1..=3 {
        g.push((format!("{cores} core(s)"), pick(&|r| r.spec.cores == cores)));
    }
    g
}

#[test]
fn the_model_sits_in_the_bands_of_the_published_timings() {
    let rows = modelled();
    assert!(rows.len() >= 70, "{} rows", rows.len());
    for (name, ratios) in groups(&rows) {
        assert!(ratios.len() >= 5, "{name}: {} rows", ratios.len());
        let (median, within) = band(&ratios, (0.67, 1.5));
        assert!(
            (0.85..=1.15).contains(&median) && within >= 0.8,
            "{name}: median {median:.2}, {:.0}% within [0.67, 1.5]",
            within * 100.0
        );
    }
    // GEMVs stream their weights once: the model must be tighter there.
    let gemv = ratios_where(&rows, |r| r.is_gemv());
    let (median, within) = band(&gemv, (0.8, 1.25));
    assert!(gemv.len() >= 10, "{} GEMV rows", gemv.len());
    assert!(
        (0.85..=1.15).contains(&median) && within >= 0.9,
        "GEMV: median {median:.2}, {:.0}% within [0.8, 1.25]",
        within * 100.0
    );
}

#[test]
fn a_multi_core_rocket_plan_on_one_open_device_runs_its_cores_one_after_another() {
    use rknpu_driver::kernels::matmul::cost::HardwareProfile;
    let rows = calibration::parse(TABLE).unwrap();
    let row = rows.iter().find(|r| r.id == "A5.3").unwrap();
    let plan = row.plan().unwrap();
    let spread = plan.cost(&row.profile()).unwrap().seconds;
    let one_device = plan
        .cost(&HardwareProfile::rk3588_rocket().at_clock(600e6))
        .unwrap()
        .seconds;
    assert!(one_device > 2.5 * spread, "{one_device} vs {spread}");
}

/// The table of docs/matmul.md: every row, model against published.
fn render(rows: &[(Row, Modelled)]) -> String {
    let mut t = String::from(
        "| Row | Shape | Type | Cores | MHz | Driver | Tiles | Includes | Published | Model (NPU + host) | Ratio |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let ms = |s: f64| {
        if s < 1e-3 {
            format!("{:.0} µs", s * 1e6)
        } else {
            format!("{:.2} ms", s * 1e3)
        }
    };
    for rm in rows {
        let (r, m) = rm;
        let host = if m.host_s > 0.0 {
            format!(" ({} + {})", ms(m.npu_s), ms(m.host_s))
        } else {
            String::new()
        };
        t += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {}{} | {:.2} |\n",
            r.id,
            r.shape(),
            r.spec.dtype.name(),
            r.spec.cores,
            r.mhz,
            r.driver.name(),
            calibration::tiling_text(r),
            r.includes.name(),
            ms(r.published_s),
            ms(m.total_s()),
            host,
            ratio(rm)
        );
    }
    t += "\n| Group | Rows | Median | Within [0.67, 1.5] |\n|---|---|---|---|\n";
    for (name, ratios) in groups(rows) {
        let (median, within) = band(&ratios, (0.67, 1.5));
        t += &format!(
            "| {name} | {} | {median:.2} | {:.0}% |\n",
            ratios.len(),
            within * 100.0
        );
    }
    let gemv = ratios_where(rows, |r| r.is_gemv());
    let (median, within) = band(&gemv, (0.8, 1.25));
    t += &format!(
        "| GEMV (band [0.8, 1.25]) | {} | {median:.2} | {:.0}% |\n",
        gemv.len(),
        within * 100.0
    );
    let reduce = ratios_where(rows, |r| r.includes == Includes::Reduce);
    let (median, within) = band(&reduce, (0.67, 1.5));
    t += &format!(
        "| host sums included (reported, not banded) | {} | {median:.2} | {:.0}% |\n",
        reduce.len(),
        within * 100.0
    );
    t
}

#[test]
fn the_documented_table_is_the_models() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC);
    let doc = std::fs::read_to_string(&path).unwrap();
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("{DOC} has no calibration table between {BEGIN:?} and {END:?}");
    };
    let table = render(&modelled());
    let current = &doc[b + BEGIN.len()..e];
    let wanted = format!("\n{table}");
    if current != wanted {
        if std::env::var_os("UPDATE_FIXTURES").is_some() {
            let new = format!("{}{BEGIN}{wanted}{}", &doc[..b], &doc[e..]);
            std::fs::write(&path, new).unwrap();
        } else {
            panic!(
                "{DOC}'s calibration table is stale: UPDATE_FIXTURES=1 cargo test --test calibration, then review the diff"
            );
        }
    }
}
