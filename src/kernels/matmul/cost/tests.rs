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
    // The total first, then the NPU job and the host's parts.
    let total = format!(
        "model {:.2} ms (npu {:.2} ms, ",
        vendor.total_s() * 1e3,
        vendor.seconds * 1e3
    );
    assert!(line.contains(&total), "{line}");
    assert!(line.contains(" GOP/s on rk3588; host "), "{line}");
    assert!(line.ends_with(" on cortex-a76 (estimate))"), "{line}");
    assert_eq!(vendor.total_s(), vendor.seconds + vendor.host.total_s());
    // One core, one task: the paths differ by their submission cost alone.
    let one = plan(1, 4096, 2048, Dtype::Int8, 1);
    assert_eq!(one.tasks.len(), 1);
    let vendor = one.cost(&HardwareProfile::rk3588()).unwrap();
    let rocket = one.cost(&HardwareProfile::rk3588_rocket()).unwrap();
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
    // a `cost:` line is what the plain plan of that shape on 3 cores prints
    // (`UPDATE_FIXTURES=1` rewrites the lines; review the diff).
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/matmul.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let dtype_of = |name: &str| match name {
        "int8" => Dtype::Int8,
        "int4" => Dtype::Int4,
        "fp16" => Dtype::Fp16,
        other => panic!("docs/matmul.md names dtype {other}"),
    };
    let profile = HardwareProfile::rk3588();
    let (mut rows, mut stale) = (0, Vec::new());
    let mut updated = String::with_capacity(doc.len());
    for line in doc.lines() {
        let mut out = line.to_string();
        if let Some((shape, rest)) = line
            .strip_prefix("| ")
            .and_then(|l| l.split_once(" | `cost: "))
        {
            let (dims, dtype) = shape.split_once(' ').expect("shape and dtype");
            let v: Vec<u32> = dims.split('×').map(|d| d.parse().unwrap()).collect();
            let expected = format!("cost: {}", rest.trim_end_matches("` |"));
            let c = plan(v[0], v[1], v[2], dtype_of(dtype), 3)
                .cost(&profile)
                .unwrap();
            if c.to_string() != expected {
                stale.push(format!("{shape}: {c}"));
                out = format!("| {shape} | `{c}` |");
            }
            rows += 1;
        }
        updated.push_str(&out);
        updated.push('\n');
    }
    assert!(rows >= 5, "the table of cost lines has {rows} rows");
    if !stale.is_empty() && std::env::var_os("UPDATE_FIXTURES").is_some() {
        std::fs::write(&path, updated).unwrap();
    } else {
        assert!(
            stale.is_empty(),
            "stale cost lines in docs/matmul.md (UPDATE_FIXTURES=1 rewrites them):\n{}",
            stale.join("\n")
        );
    }
}

#[test]
fn one_task_costs_its_work_and_one_submission_and_each_further_task_its_overhead() {
    let profile = HardwareProfile::rk3588();
    let one = plan(1, 4096, 2048, Dtype::Int8, 1);
    assert_eq!(one.tasks.len(), 1);
    let c = one.cost(&profile).unwrap();
    let stream = c.bytes_per_core[0] as f64 / profile.core_dram_bytes_per_s;
    let compute = (4096 * 2048) as f64 / profile.int8_macs_per_s;
    let want = stream.max(compute) + profile.per_submit_vendor_s;
    assert!((c.seconds - want).abs() < 1e-12, "{} vs {want}", c.seconds);
    // Unchained, every task after the first is a submission instead of a task.
    let many = plan(128, 4096, 4096, Dtype::Fp16, 1);
    let tasks = many.tasks.len() as f64;
    assert!(tasks > 2.0);
    let chained = many.cost(&profile).unwrap().seconds;
    let unchained = many.cost_unchained(&profile).unwrap().seconds;
    let step = profile.per_submit_vendor_s - profile.per_task_vendor_s;
    assert!((unchained - chained - (tasks - 1.0) * step).abs() < 1e-9);
}

#[test]
fn the_clock_scales_the_mac_rates_and_nothing_else() {
    let base = HardwareProfile::rk3588();
    let slow = base.at_clock(0.5e9);
    assert_eq!(slow.npu_clock_hz, 0.5e9);
    assert_eq!(slow.int8_macs_per_s, base.int8_macs_per_s / 2.0);
    assert_eq!(slow.int4_macs_per_s, base.int4_macs_per_s / 2.0);
    assert_eq!(slow.fp16_macs_per_s, base.fp16_macs_per_s / 2.0);
    assert_eq!(slow.dram_bytes_per_s, base.dram_bytes_per_s);
    assert_eq!(slow.per_submit_vendor_s, base.per_submit_vendor_s);
    // A product bound by its MACs takes longer at the lower clock; a GEMV, bound by its
    // stream, does not.
    let gemm = plan(256, 1024, 1024, Dtype::Fp16, 1);
    assert!(gemm.cost(&slow).unwrap().seconds > 1.5 * gemm.cost(&base).unwrap().seconds);
    let gemv = plan(1, 4096, 4096, Dtype::Int8, 1);
    assert_eq!(
        gemv.cost(&slow).unwrap().seconds,
        gemv.cost(&base).unwrap().seconds
    );
}

#[test]
fn rocket_runs_the_chains_of_one_open_device_on_one_core() {
    let p = plan(128, 4096, 4096, Dtype::Int8, 3);
    assert_eq!(p.per_core.len(), 3);
    let mut one = HardwareProfile::rk3588_rocket();
    assert_eq!(one.rocket_devices, 1);
    let c = p.cost(&one).unwrap();
    // Back to back on one core, at one core's stream: the three chains add up, with one
    // more task transition for each chain after the first.
    let chains: f64 = p
        .per_core
        .iter()
        .enumerate()
        .map(|(i, &tasks)| {
            let stream = c.bytes_per_core[i] as f64 / one.core_dram_bytes_per_s;
            let compute = (c.macs as f64 / 3.0) / one.int8_macs_per_s;
            stream.max(compute) + (tasks - 1) as f64 * one.per_task_rocket_s
        })
        .sum();
    let want = chains + 2.0 * one.per_task_rocket_s + one.per_submit_rocket_s;
    assert!(
        (c.seconds - want).abs() < 1e-6 * want,
        "{} vs {want}",
        c.seconds
    );
    // One open device per core: the cores run side by side.
    one.rocket_devices = 3;
    let spread = p.cost(&one).unwrap();
    assert!(spread.seconds < 0.5 * c.seconds, "{spread} against {c}");
    // The vendor driver runs every core's chain on its core.
    let vendor = p.cost(&HardwareProfile::rk3588()).unwrap();
    assert!(vendor.seconds < 0.5 * c.seconds);
}

#[test]
fn a_profile_value_outside_its_range_is_refused_by_name() {
    let p = plan(4, 64, 32, Dtype::Int8, 1);
    type Spoil = fn(&mut HardwareProfile);
    let cases: [(&str, Spoil); 6] = [
        ("profile fp16_macs_per_s", |h| h.fp16_macs_per_s = f64::NAN),
        ("profile dram_bytes_per_s", |h| h.dram_bytes_per_s = 0.0),
        ("profile core_dram_bytes_per_s", |h| {
            h.core_dram_bytes_per_s = -1.0
        }),
        ("profile per_task_vendor_s", |h| h.per_task_vendor_s = -1e-6),
        ("profile core_start_s", |h| h.core_start_s = f64::INFINITY),
        ("profile rocket_devices", |h| h.rocket_devices = 0),
    ];
    for (field, spoil) in cases {
        let mut h = HardwareProfile::rk3588();
        spoil(&mut h);
        match p.cost(&h) {
            Err(Error::OutOfRange { what, .. }) => assert_eq!(what, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    // No per-core limit, and no overhead, are values a profile may hold.
    let mut h = HardwareProfile::rk3588();
    h.core_dram_bytes_per_s = f64::INFINITY;
    h.per_task_vendor_s = 0.0;
    h.core_start_s = 0.0;
    assert!(p.cost(&h).unwrap().seconds.is_finite());
}

#[test]
fn tile_limits_bound_the_tiles_and_can_split_rows_across_cores() {
    use crate::kernels::matmul::TileLimits;
    let layout = WeightLayout::new(1024, 4096, Dtype::Fp16).unwrap();
    let limits = TileLimits {
        rows: 48,
        cols: 256,
        split_rows: false,
    };
    let p = Plan::with_limits(&layout, 200, OutType::Fp32, 3, limits).unwrap();
    assert!(p.tasks.iter().all(|t| t.rows <= 48 && t.nt <= 256), "{p}");
    assert!(p.m_tile <= 48 && p.n_tile <= 256);
    // Columns split: every core starts at its own column.
    let first_cols: Vec<u32> = (0..3)
        .map(|c| p.tasks.iter().find(|t| t.core == c).unwrap().n0)
        .collect();
    assert_eq!(first_cols.len(), 3);
    assert!(first_cols[1] > 0 && first_cols[2] > first_cols[1]);
    let rows = Plan::with_limits(
        &layout,
        200,
        OutType::Fp32,
        3,
        TileLimits {
            split_rows: true,
            ..limits
        },
    )
    .unwrap();
    for c in 0..3 {
        let mine: Vec<_> = rows.tasks.iter().filter(|t| t.core == c).collect();
        assert!(mine.iter().any(|t| t.n0 == 0), "core {c}");
        let cols: u32 = mine
            .iter()
            .filter(|t| t.m0 == mine[0].m0)
            .map(|t| t.nt)
            .sum();
        assert!(cols >= 4096, "core {c} covers {cols} columns of its rows");
    }
    for bad in [
        TileLimits { rows: 0, ..limits },
        TileLimits { cols: 31, ..limits },
    ] {
        assert!(matches!(
            Plan::with_limits(&layout, 200, OutType::Fp32, 3, bad),
            Err(Error::Unsupported { .. })
        ));
    }
}
