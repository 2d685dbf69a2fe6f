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
    let doc = include_str!("../../../../docs/matmul.md");
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
