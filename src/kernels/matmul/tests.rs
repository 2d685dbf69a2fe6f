//! Plans stay clear of every documented failure boundary (docs/hardware/quirks.md),
//! and the packers put bytes where the layout formulas of docs/hardware/matmul-programs.md#layouts say.

use super::*;
use crate::float::f16_to_f32;

fn plan(m: u32, k: u32, n: u32, dtype: Dtype, cores: u32) -> Plan {
    Plan::new(MatmulSpec::new(m, k, n, dtype).on_cores(cores)).unwrap()
}

/// Every task of the plan as the single-task matmul it programs, checked.
fn each_task(p: &Plan) -> impl Iterator<Item = SingleMatmul> + '_ {
    p.tasks.iter().map(|t| {
        let mm = p.task_matmul(t);
        mm.check().unwrap();
        mm
    })
}

#[test]
fn k_tiles_avoid_the_3840_failure_for_more_than_4_rows() {
    for k in [3100, 3500, 3840, 4000, 4095] {
        let p = plan(8, k, 64, Dtype::Int8, 1);
        for w in &p.layout.waves {
            assert!(!(w.ai > 3072 && w.ai < 4096), "K {k}: a wave of {}", w.ai);
        }
        assert_eq!(p.layout.waves.iter().map(|w| w.kw).sum::<u32>(), k);
    }
    // With at most 4 rows the interval is allowed (quirk 4 (docs/hardware/quirks.md#quirk-4) concerns M > 4).
    assert_eq!(plan(4, 3840, 64, Dtype::Int8, 1).layout.waves.len(), 1);
    assert_eq!(plan(8, 4096, 64, Dtype::Int8, 1).layout.waves.len(), 1);
}

#[test]
fn int4_waves_keep_int16_sums_from_saturating() {
    for k in [32, 480, 481, 2048, 5000] {
        let p = plan(3, k, 64, Dtype::Int4, 1);
        assert!(p.layout.waves.iter().all(|w| w.kw <= 480), "K {k}");
        assert_eq!(p.layout.waves.iter().map(|w| w.kw).sum::<u32>(), k);
    }
}

#[test]
fn n_tiles_stay_within_the_channel_and_fp16_limits() {
    for (dtype, n, limit) in [
        (Dtype::Int8, 11008, 3072),
        (Dtype::Fp16, 8192, 4096),
        (Dtype::Int4, 8192, 4096),
    ] {
        let p = plan(2, 256, n, dtype, 1);
        assert!(p.tasks.iter().all(|t| t.nt <= limit), "{dtype:?}");
        assert!(
            p.tasks
                .iter()
                .all(|t| t.nt % if dtype == Dtype::Int4 { 64 } else { 32 } == 0)
        );
    }
}

#[test]
fn outputs_never_use_a_row_notch() {
    // Each task writes its own native block (NOTCH 0): the 13-group clamp of quirk 6 (docs/hardware/quirks.md#quirk-6) and
    // the fp16 full-row scatter of quirk 16 (docs/hardware/quirks.md#quirk-16) cannot arise, whatever N is.
    for (dtype, n) in [(Dtype::Int8, 1024), (Dtype::Fp16, 2048)] {
        let p = plan(40, 512, n, dtype, 1);
        for mm in each_task(&p) {
            assert_eq!(mm.c_layout, Layout::Native);
        }
        let words = p.program().unwrap();
        let notches = words
            .words()
            .iter()
            .filter(|w| w.offset() == 0x4038 && w.target() == 0x1001);
        for w in notches {
            assert_eq!(w.value(), 0);
        }
    }
}

#[test]
fn cbuf_budget_and_bank_split_are_respected() {
    for (m, k, dtype) in [
        (300, 4096, Dtype::Int8),
        (300, 8192, Dtype::Int8),
        (200, 5000, Dtype::Fp16),
        (500, 2048, Dtype::Int4),
    ] {
        let p = plan(m, k, 256, dtype, 1);
        for (t, mm) in p.tasks.iter().zip(each_task(&p)) {
            let bytes = t.rows as u64 * mm.padded_k() as u64 * dtype.bits() as u64 / 8;
            assert!(bytes <= 10 * BANK, "{dtype:?} {m}x{k}: {bytes} bytes of A");
            if dtype != Dtype::Fp16 {
                assert!(bytes <= 8 * BANK);
            }
            assert!(t.rows <= 128);
        }
    }
}

#[test]
fn task_counts_and_cores() {
    let p = plan(128, 4096, 11008, Dtype::Int8, 3);
    assert_eq!(p.per_core.len(), 3);
    assert_eq!(p.per_core.iter().sum::<usize>(), p.tasks.len());
    for (c, range) in p
        .per_core
        .iter()
        .scan(0, |at, &n| {
            let r = *at..*at + n;
            *at += n;
            Some(r)
        })
        .enumerate()
    {
        assert!(p.tasks[range].iter().all(|t| t.core == c as u32));
    }
    // Columns are covered exactly once per wave and row tile.
    let mut cover = vec![0u32; p.layout.n_pad as usize];
    for t in p.tasks.iter().filter(|t| t.wave == 0 && t.m0 == 0) {
        for c in t.n0..t.n0 + t.nt {
            cover[c as usize] += 1;
        }
    }
    assert!(cover.iter().all(|&c| c == 1));
    // More tasks than one submission counts: refused, not truncated.
    let err = Plan::new(MatmulSpec::new(60_000, 4096, 256, Dtype::Int4))
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref().is_some_and(|e| e.contains("4095")),
        "{err:?}"
    );
    // Cores are a maximum: fewer column tiles than cores use fewer cores, or split M.
    assert_eq!(plan(4, 64, 32, Dtype::Int8, 2).cores_used(), 1);
    assert_eq!(plan(4, 64, 64, Dtype::Int8, 3).cores_used(), 2);
    let by_m = plan(300, 64, 32, Dtype::Int8, 3);
    assert_eq!(by_m.cores_used(), 3);
    assert!(by_m.tasks.iter().all(|t| t.n0 == 0 && t.nt == 32));
    let mut rows = vec![0u32; 300];
    for t in &by_m.tasks {
        for r in t.m0..t.m0 + t.rows {
            rows[r as usize] += 1;
        }
    }
    assert!(rows.iter().all(|&r| r == 1), "each row once");
    assert!(Plan::new(MatmulSpec::new(4, 64, 64, Dtype::Int8).on_cores(4)).is_err());
    assert!(Plan::new(MatmulSpec::new(0, 64, 64, Dtype::Int8)).is_err());
    // Columns split evenly: 4096 on 3 cores are 1376, 1376 and 1344.
    let even = plan(1, 4096, 4096, Dtype::Int8, 3);
    let cols: Vec<u32> = (0..3)
        .map(|c| {
            even.tasks
                .iter()
                .filter(|t| t.core == c)
                .map(|t| t.nt)
                .sum()
        })
        .collect();
    assert_eq!(cols, [1376, 1376, 1344]);
    // M tiles are even too: 100 rows of K 4096 are two tiles of 50.
    let m100 = plan(100, 4096, 64, Dtype::Int8, 1);
    assert_eq!(m100.m_tile, 50);
}

#[test]
fn chains_end_at_each_core_boundary() {
    let p = plan(8, 256, 96, Dtype::Int8, 3);
    let program = p.program().unwrap();
    assert_eq!(program.tasks().len(), 3);
    let decoded = program.decode();
    // No chain address in any tail: each core runs one task.
    assert!(decoded.tasks.iter().all(|t| t.next_address.is_none()));
    let p = plan(200, 256, 96, Dtype::Int8, 1);
    let program = p.program().unwrap();
    let decoded = program.decode();
    let chained = decoded
        .tasks
        .iter()
        .filter(|t| t.next_address.is_some())
        .count();
    assert_eq!(chained, program.tasks().len() - 1);
}

#[test]
fn weights_land_where_the_layout_formulas_say() {
    // docs/hardware/matmul-programs.md#weights: int8 ((n/32)(ai/32) + k/32)·1024 + (n%32)·32 + k%32;
    // fp16 (elements) ((n/16)(ai/32) + k/32)·512 + (n%16)·32 + k%32;
    // int4 (bytes) (((n/64)(pk/32) + k/32)·64 + n%64)·16 + (k%32)/2, even k high.
    let (k, n) = (70u32, 130u32);
    let b: Vec<i32> = (0..k * n).map(|i| (i % 13) as i32 - 6).collect();
    let p8 = plan(1, k, n, Dtype::Int8, 1);
    let bytes = pack_weights_int(&p8.layout, &b).unwrap();
    let ai = 96usize;
    for kk in 0..k as usize {
        for nn in 0..n as usize {
            let o = ((nn / 32) * (ai / 32) + kk / 32) * 1024 + (nn % 32) * 32 + kk % 32;
            assert_eq!(bytes[o] as i8 as i32, b[kk * n as usize + nn]);
        }
    }
    let p4 = plan(1, k, n, Dtype::Int4, 1);
    let bytes = pack_weights_int(&p4.layout, &b).unwrap();
    for kk in 0..k as usize {
        for nn in 0..n as usize {
            let o = (((nn / 64) * (ai / 32) + kk / 32) * 64 + nn % 64) * 16 + (kk % 32) / 2;
            let nib = if kk % 2 == 0 {
                bytes[o] >> 4
            } else {
                bytes[o] & 0xF
            };
            assert_eq!(((nib << 4) as i8 >> 4) as i32, b[kk * n as usize + nn]);
        }
    }
    let bf: Vec<f32> = b.iter().map(|&v| v as f32 * 0.5).collect();
    let p16 = plan(1, k, n, Dtype::Fp16, 1);
    let bytes = pack_weights_f32(&p16.layout, &bf).unwrap();
    for kk in 0..k as usize {
        for nn in 0..n as usize {
            let e = ((nn / 16) * (ai / 32) + kk / 32) * 512 + (nn % 16) * 32 + kk % 32;
            let h = u16::from_le_bytes([bytes[2 * e], bytes[2 * e + 1]]);
            assert_eq!(f16_to_f32(h), bf[kk * n as usize + nn]);
        }
    }
}

#[test]
fn activations_land_in_their_task_blocks() {
    // int8/fp16: row-major per (wave, M tile) block; int4: native [K/32][rows][32 nibbles].
    let (m, k) = (150u32, 600u32);
    let a: Vec<i32> = (0..m * k).map(|i| (i % 15) as i32 - 7).collect();
    let p = plan(m, k, 64, Dtype::Int4, 1);
    let bytes = p.pack_a_int(&a).unwrap();
    for t in p.tasks.iter().filter(|t| t.n0 == 0) {
        let w = p.layout.waves[t.wave as usize];
        for r in 0..t.rows as usize {
            for c in 0..w.kw as usize {
                let o = t.a_offset as usize + ((c / 32) * t.rows as usize + r) * 16 + (c % 32) / 2;
                let nib = if c % 2 == 0 {
                    bytes[o] >> 4
                } else {
                    bytes[o] & 0xF
                };
                let want = a[(t.m0 as usize + r) * k as usize + w.k0 as usize + c];
                assert_eq!(((nib << 4) as i8 >> 4) as i32, want);
            }
        }
    }
    let p = plan(m, k, 64, Dtype::Int8, 1);
    let bytes = p.pack_a_int(&a).unwrap();
    for t in p.tasks.iter().filter(|t| t.n0 == 0) {
        let w = p.layout.waves[t.wave as usize];
        for r in 0..t.rows as usize {
            let row = t.a_offset as usize + r * w.ai as usize;
            for c in 0..w.kw as usize {
                assert_eq!(
                    bytes[row + c] as i8 as i32,
                    a[(t.m0 as usize + r) * k as usize + w.k0 as usize + c]
                );
            }
        }
    }
}

#[test]
fn reduction_sums_waves_exactly() {
    // Two waves whose int32 partials leave the int32 range when added: the host sum is
    // exact in i64, and the i32 unpacker refuses instead of wrapping.
    let p = plan(1, 5000, 32, Dtype::Int8, 1);
    assert_eq!(p.layout.waves.len(), 2);
    let mut c = vec![0u8; p.c_bytes as usize];
    for t in &p.tasks {
        let o = t.c_offset as usize; // row 0, column 0
        c[o..o + 4].copy_from_slice(&i32::MAX.to_le_bytes());
    }
    let r = p.reduce_int(&c).unwrap();
    assert_eq!(r[0], 2 * i32::MAX as i64);
    let mut out = vec![0i32; 32];
    assert!(pack::unpack_i32(&p, &c, &mut out).is_err());
    assert!(p.reduce_int(&c[..4]).is_err());
    assert!(p.reduce_f32(&c).is_err());
}

#[test]
fn fp16_results_are_written_by_the_dpu_within_one_wave() {
    let spec = |k| MatmulSpec {
        out: OutType::Fp16,
        ..MatmulSpec::new(5, k, 40, Dtype::Fp16).on_cores(2)
    };
    let p = Plan::new(spec(300)).unwrap();
    assert_eq!(p.layout.waves.len(), 1);
    assert_eq!(p.c_type(), OutType::Fp16);
    for mm in each_task(&p) {
        assert_eq!(mm.out, OutType::Fp16);
        let dpu = mm.task().unwrap().dpu.unwrap();
        assert!(dpu.out_cvt.fp32_to_fp16);
        assert_eq!(dpu.out.precision, crate::task::Precision::Fp16);
    }
    let written: u64 = p.tasks.iter().map(|t| (t.rows * t.nt * 2) as u64).sum();
    assert_eq!(p.c_bytes, written);
    // The host reads the halves as written: C[0][0] in the first atom, C[0][9] in the
    // second (8 halves per atom), nothing rounded again.
    let mut c = vec![0u8; p.c_bytes as usize];
    let t = &p.tasks[0];
    let at = |col: usize| t.c_offset as usize + (col / 8 * t.rows as usize) * 16 + col % 8 * 2;
    c[at(0)..at(0) + 2].copy_from_slice(&0x3c01u16.to_le_bytes()); // 1 + 2^-10
    c[at(9)..at(9) + 2].copy_from_slice(&0xc000u16.to_le_bytes()); // -2
    let r = p.reduce_f32(&c).unwrap();
    assert_eq!((r[0], r[9], r[1]), (1.0 + 2f32.powi(-10), -2.0, 0.0));
    // K beyond one wave: the tasks write fp32 partials, whose f64 sum the host rounds
    // to fp16 once (to nearest even): 1 + 2^-11 + 2^-12 rounds up to 1 + 2^-10, where
    // rounding each partial first would give 1.
    let p = Plan::new(spec(5000)).unwrap();
    assert_eq!((p.layout.waves.len(), p.c_type()), (2, OutType::Fp32));
    let mut c = vec![0u8; p.c_bytes as usize];
    let (t0, t1) = (&p.tasks[0], p.tasks.iter().find(|t| t.wave == 1).unwrap());
    assert_eq!((t0.wave, t0.n0, t1.n0), (0, 0, 0));
    let first = |t: &crate::kernels::matmul::TaskTile| t.c_offset as usize;
    c[first(t0)..first(t0) + 4].copy_from_slice(&(1.0f32 + 2f32.powi(-11)).to_le_bytes());
    c[first(t1)..first(t1) + 4].copy_from_slice(&2f32.powi(-12).to_le_bytes());
    let r = p.reduce_f32(&c).unwrap();
    assert_eq!(r[0], 1.0 + 2f32.powi(-10));
    // fp32 results of several waves stay the host's sum.
    let p = Plan::new(MatmulSpec::new(5, 5000, 40, Dtype::Fp16)).unwrap();
    assert_eq!((p.layout.waves.len(), p.c_type()), (2, OutType::Fp32));
}

#[test]
fn impossible_shapes_are_refused_before_any_task_list_is_built() {
    // Each of these would need millions of waves or tiles: refused by arithmetic alone
    // (before, K = u32::MAX built 9 million waves, and N = u32::MAX overflowed).
    for (m, k, n, dtype) in [
        (1, u32::MAX, 32, Dtype::Int4),
        (1, u32::MAX, 32, Dtype::Int8),
        (u32::MAX, 32, 32, Dtype::Int8),
        (1, 32, u32::MAX, Dtype::Int8),
        (u32::MAX, u32::MAX, u32::MAX, Dtype::Fp16),
        (4096, 4096, 4_000_000, Dtype::Int8),
    ] {
        match Plan::new(MatmulSpec::new(m, k, n, dtype)) {
            Err(Error::Unsupported { why, .. }) => {
                assert!(
                    why.contains("tasks") || why.contains("32 bits") || why.contains("4 GiB"),
                    "{why}"
                )
            }
            other => panic!("{m}x{k}x{n}: {other:?}"),
        }
    }
    // fp16 output with K beyond one wave says so without building the waves.
    let spec = MatmulSpec {
        out: OutType::Fp16,
        ..MatmulSpec::new(1, u32::MAX, 32, Dtype::Fp16)
    };
    assert!(matches!(Plan::new(spec), Err(Error::Unsupported { .. })));
    // The largest plans that are accepted keep within the task limit.
    let p = plan(64, 32, 3072 * 4095, Dtype::Int8, 1);
    assert_eq!(p.tasks.len(), 4095);
}

#[test]
fn plans_print_their_tiles() {
    let text = plan(128, 4096, 4096, Dtype::Int8, 1).to_string();
    assert!(text.contains("M tiles of 64 rows"), "{text}");
    assert!(text.contains("4 task(s) on 1 core(s)"), "{text}");
}

mod fast_packers {
    use super::super::pack;
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// The fast packers produce the general packers' bytes (which the layout tests
        /// check against the formulas), and unpacking inverts the NPU's output layout.
        #[test]
        fn fast_packers_agree_with_the_general_ones(m in 1u32..200, k in 1u32..1500, n in 1u32..300, seed in any::<u32>()) {
            let vals = |len: usize, lo: i32, span: i32| -> Vec<i8> {
                (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 9) as i32 % span + lo).map(|v| v as i8).collect()
            };
            let p = plan(m, k, n, Dtype::Int8, 1);
            let b = vals((k * n) as usize, -128, 256);
            let b32: Vec<i32> = b.iter().map(|&v| v as i32).collect();
            let general = pack_weights_int(&p.layout, &b32).unwrap();
            prop_assert_eq!(&pack::weights_i8_kn(&p.layout, &b).unwrap(), &general);
            let mut bt = vec![0i8; b.len()];
            for kk in 0..k as usize {
                for nn in 0..n as usize {
                    bt[nn * k as usize + kk] = b[kk * n as usize + nn];
                }
            }
            prop_assert_eq!(&pack::weights_i8_nk(&p.layout, &bt).unwrap(), &general);
            let a = vals((m * k) as usize, -128, 256);
            let a32: Vec<i32> = a.iter().map(|&v| v as i32).collect();
            prop_assert_eq!(pack::activations_i8(&p, &a).unwrap(), p.pack_a_int(&a32).unwrap());
            // Into a buffer of other bytes: every byte written, padding zeroed.
            let mut into = vec![0xA5u8; p.a_bytes as usize];
            pack::activations_i8_into(&p, &a, &mut into).unwrap();
            prop_assert_eq!(into, p.pack_a_int(&a32).unwrap());
            // Unpacking: random partial bytes read back the same by both readers.
            let c: Vec<u8> = (0..p.c_bytes as usize).map(|i| (i as u32).wrapping_mul(seed | 1) as u8).collect();
            let mut fast = vec![0i32; (m * n) as usize];
            pack::unpack_i32(&p, &c, &mut fast).unwrap();
            let general: Vec<i32> = p.reduce_int(&c).unwrap().into_iter().map(|v| v as i32).collect();
            prop_assert_eq!(fast, general);
            let p4 = plan(m, k, n, Dtype::Int4, 1);
            let b4 = vals((k * n) as usize, -8, 16);
            let b4_32: Vec<i32> = b4.iter().map(|&v| v as i32).collect();
            prop_assert_eq!(pack::weights_i4_kn(&p4.layout, &b4).unwrap(), pack_weights_int(&p4.layout, &b4_32).unwrap());
        }
    }
}

#[test]
fn weights_from_n_by_k_equal_weights_from_k_by_n() {
    let (k, n) = (100u32, 70u32);
    for dtype in [Dtype::Int8, Dtype::Int4] {
        let b: Vec<i32> = (0..k * n).map(|i| (i % 15) as i32 - 7).collect();
        let mut bt = vec![0i32; b.len()];
        for kk in 0..k as usize {
            for nn in 0..n as usize {
                bt[nn * k as usize + kk] = b[kk * n as usize + nn];
            }
        }
        let p = plan(3, k, n, dtype, 1);
        assert_eq!(
            pack_weights_int_nk(&p.layout, &bt).unwrap(),
            pack_weights_int(&p.layout, &b).unwrap()
        );
    }
    let b: Vec<f32> = (0..k * n).map(|i| (i % 9) as f32 * 0.25).collect();
    let mut bt = vec![0f32; b.len()];
    for kk in 0..k as usize {
        for nn in 0..n as usize {
            bt[nn * k as usize + kk] = b[kk * n as usize + nn];
        }
    }
    let p = plan(3, k, n, Dtype::Fp16, 1);
    assert_eq!(
        pack_weights_f32_nk(&p.layout, &bt).unwrap(),
        pack_weights_f32(&p.layout, &b).unwrap()
    );
}

#[test]
fn host_scales() {
    let c = [2i64, -4, 6, 8];
    let r = dequantize(&c, 2, 2, &[0.5, 2.0], &[1.0, 0.25]).unwrap();
    assert_eq!(r, vec![1.0, -0.5, 12.0, 4.0]);
    assert_eq!(
        dequantize(&c, 2, 2, &[], &[]).unwrap(),
        vec![2.0, -4.0, 6.0, 8.0]
    );
    assert!(dequantize(&c, 2, 2, &[1.0], &[]).is_err());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// Unpacking inverts the output layout: a matrix written into the plan's C blocks by
    /// the formula `[nt/4][rows][4]` per task comes back row-major.
    #[test]
    fn unpack_inverts_the_output_layout(m in 1u32..300, n in 1u32..5000, seed in 0u32..1000) {
        let p = plan(m, 64, n, Dtype::Int8, 1);
        let x: Vec<i32> = (0..m * n).map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) as i32).collect();
        let mut c = vec![0u8; p.c_bytes as usize];
        for t in &p.tasks {
            for r in 0..t.rows as usize {
                for j in 0..((n - t.n0).min(t.nt)) as usize {
                    let o = t.c_offset as usize + ((j / 4) * t.rows as usize + r) * 16 + (j % 4) * 4;
                    let v = x[(t.m0 as usize + r) * n as usize + t.n0 as usize + j];
                    c[o..o + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        let back: Vec<i32> = p.reduce_int(&c).unwrap().into_iter().map(|v| v as i32).collect();
        proptest::prop_assert_eq!(back, x);
    }
}

#[test]
fn integer_readers_refuse_float_results() {
    // An int8 plan whose one wave the DPU casts to fp32 holds floats in C: the integer
    // reductions say so rather than reading fp32 bits as int32.
    let spec = MatmulSpec {
        out: OutType::Fp32,
        ..MatmulSpec::new(2, 64, 32, Dtype::Int8)
    };
    let p = Plan::new(spec).unwrap();
    assert_eq!(p.c_type(), OutType::Fp32);
    let c = vec![0u8; p.c_bytes as usize];
    assert!(p.reduce_int(&c).is_err());
    assert!(pack::unpack_i32(&p, &c, &mut [0; 64]).is_err());
    assert_eq!(p.reduce_f32(&c).unwrap(), vec![0.0; 64]);
}

/// `n` rows of `k` int4 weights, all of magnitude `v` (alternating sign).
fn i4_rows(n: usize, k: usize, v: i8) -> Vec<i8> {
    (0..n * k)
        .map(|i| if i % 2 == 0 { v } else { -v })
        .collect()
}

#[test]
fn certified_int4_waves_are_as_wide_as_the_weights_allow() {
    // Weights at -8 and 8's magnitude: only the 480-channel waves any weights allow.
    let k = 4096;
    let big = quant::i4_magnitudes(&i4_rows(3, k, -8), 3, k).unwrap();
    let any = WeightLayout::new(k as u32, 3, Dtype::Int4).unwrap();
    assert_eq!(WeightLayout::certified_i4(k as u32, 3, &big).unwrap(), any);
    assert!(!any.is_certified_i4());
    // |w| = 1: Σ|w| over 2048 channels is 2048 ≤ 4095, so the widest waves (2048) hold.
    let ones = quant::i4_magnitudes(&i4_rows(3, k, 1), 3, k).unwrap();
    let l = WeightLayout::certified_i4(k as u32, 3, &ones).unwrap();
    assert_eq!(l.waves.len(), 2, "{l:?}");
    assert!(l.waves.iter().all(|w| w.kw == 2048));
    assert!(l.is_certified_i4());
    // |w| = 2: 2048 channels sum to 4096 > 4095, one too many; 1376 channels (3 waves)
    // sum to 2752.
    let twos = quant::i4_magnitudes(&i4_rows(3, k, 2), 3, k).unwrap();
    let l = WeightLayout::certified_i4(k as u32, 3, &twos).unwrap();
    assert_eq!(l.waves.len(), 3, "{l:?}");
    assert_eq!(
        WeightLayout::with_k_tile(k as u32, 3, Dtype::Int4, 2048).map(|_| ()),
        Err(unsupported(
            "a K tile of 2048 channels: a multiple of 32 of at most 480".into()
        )),
        "with_k_tile keeps the any-weights limit"
    );
}

#[test]
fn the_int4_bound_is_exact_at_4095() {
    // One wave of 1024 channels; channel 1 sums to exactly 4095 (the int16 limit over
    // 8: 8 · 4095 = 32760 ≤ 32767), then to 4096.
    let (n, k) = (2usize, 1024usize);
    let mut w = i4_rows(n, k, 1);
    let row = &mut w[k..];
    // 1023 ones and one 7... then 3071 more to reach 4095: 1024 channels of 4, less 1.
    for v in row.iter_mut() {
        *v = 4;
    }
    row[0] = 3;
    let mags = quant::i4_magnitudes(&w, n, k).unwrap();
    let l = WeightLayout::certified_i4(k as u32, n as u32, &mags).unwrap();
    assert_eq!(l.waves.len(), 1);
    assert_eq!(l.i4_unsafe_wave(&mags), None);
    w[k] = 4;
    let mags = quant::i4_magnitudes(&w, n, k).unwrap();
    assert_eq!(l.i4_unsafe_wave(&mags), Some((0, 1, 4096)));
    assert_eq!(
        WeightLayout::certified_i4(k as u32, n as u32, &mags)
            .unwrap()
            .waves
            .len(),
        2
    );
}

#[test]
fn int4_magnitudes_agree_from_values_nibbles_and_banks() {
    let (n, k) = (70usize, 1000usize);
    let w: Vec<i8> = (0..n * k)
        .map(|i| ((i * 7919 + i / 3) % 16) as i8 - 8)
        .collect();
    let mags = quant::i4_magnitudes(&w, n, k).unwrap();
    // By hand: channel 5, granule 3.
    let by_hand: u16 = w[5 * k + 96..5 * k + 128]
        .iter()
        .map(|&v| v.unsigned_abs() as u16)
        .sum();
    assert_eq!(mags[5 * k.div_ceil(32) + 3], by_hand);
    let nibbles = quant::pack_nibbles(&w).unwrap();
    assert_eq!(quant::i4_magnitudes_packed(&nibbles, n, k).unwrap(), mags);
    for layout in [
        WeightLayout::new(k as u32, n as u32, Dtype::Int4).unwrap(),
        WeightLayout::certified_i4(
            k as u32,
            n as u32,
            &quant::i4_magnitudes(&i4_rows(n, k, 1), n, k).unwrap(),
        )
        .unwrap(),
    ] {
        let bank =
            pack_weights_int_nk(&layout, &w.iter().map(|&v| v as i32).collect::<Vec<_>>()).unwrap();
        assert_eq!(
            pack::i4_bank_magnitudes(&layout, &bank).unwrap(),
            mags,
            "{layout:?}"
        );
    }
}
