use super::*;
use crate::kernels::matmul::{MatmulSpec, WeightLayout};
use crate::kernels::single::Dtype;

/// Deterministic bytes.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    crate::seeded::Rng::new(seed).bytes(len)
}

/// Int32 partials within ±2²⁰, so any few waves sum inside int32.
fn small_i32_partials(len: usize, seed: u64) -> Vec<u8> {
    let raw = noise(len, seed);
    raw.chunks_exact(4)
        .flat_map(|v| (i32::from_le_bytes([v[0], v[1], v[2], v[3]]) >> 11).to_le_bytes())
        .collect()
}

/// Plans of `k`×`n` weights in K waves of several widths (1 to 6 waves and more), on
/// `cores` cores.
fn plans(m: u32, k: u32, n: u32, dtype: Dtype, cores: u32) -> Vec<Plan> {
    let out = match dtype {
        Dtype::Int8 => OutType::Int32,
        _ => OutType::Fp32,
    };
    (1..=8)
        .filter_map(|waves| {
            let kw = k.div_ceil(waves).next_multiple_of(32);
            let layout = WeightLayout::with_k_tile(k, n, dtype, kw).ok()?;
            Plan::for_layout(&layout, m, out, cores).ok()
        })
        .collect()
}

#[test]
fn int32_sums_match_the_exact_reduction_for_every_wave_count() {
    // M not a multiple of the row block, N not a multiple of the atom, several cores.
    let mut waves = Vec::new();
    for (m, k, n, cores) in [(13, 3000, 70, 2), (1, 4096, 33, 3), (40, 1000, 200, 1)] {
        for p in plans(m, k, n, Dtype::Int8, cores) {
            waves.push(p.layout.waves.len());
            let c = small_i32_partials(p.c_bytes as usize, u64::from(k + n));
            let exact = p.reduce_int(&c).unwrap();
            let r = p.reduction();
            let mut out = vec![7i32; exact.len()];
            r.sum_i32_into(&c, &mut out).unwrap();
            let expected: Vec<i32> = exact.iter().map(|&v| v as i32).collect();
            assert_eq!(out, expected, "{p}");
            // Scaled: the sum times its row's and its column's scale.
            let rows: Vec<f32> = (0..m).map(|i| 0.5 + i as f32 / 8.0).collect();
            let cols: Vec<f32> = (0..n).map(|j| 1.0 / (1 + j) as f32).collect();
            let mut y = vec![0f32; exact.len()];
            r.scale_i32_into(&c, &rows, Some(&cols), &mut y).unwrap();
            for (i, (&v, &s)) in y.iter().zip(&exact).enumerate() {
                let want = s as f32 * rows[i / n as usize] * cols[i % n as usize];
                assert_eq!(v, want, "{p}: result {i}");
            }
            r.scale_i32_into(&c, &rows, None, &mut y).unwrap();
            assert_eq!(y[1], exact[1] as f32 * rows[0], "{p}");
        }
    }
    waves.sort();
    waves.dedup();
    assert!(waves.len() >= 4, "wave counts covered: {waves:?}");
}

#[test]
fn fp32_sums_match_the_reduction_within_fp32_summation() {
    for p in plans(9, 3000, 50, Dtype::Fp16, 2) {
        // Partials in [-1, 1): bytes as fractions.
        let raw = noise(p.c_bytes as usize / 4, 99);
        let c: Vec<u8> = raw
            .iter()
            .flat_map(|&b| ((b as f32 - 128.0) / 128.0).to_le_bytes())
            .collect();
        let reference = p.reduce_f32(&c).unwrap();
        let mut out = vec![f32::NAN; reference.len()];
        p.reduction().sum_f32_into(&c, &mut out).unwrap();
        let waves = p.layout.waves.len() as f32;
        for (i, (&v, &r)) in out.iter().zip(&reference).enumerate() {
            // Each of at most `waves` additions of values below `waves` in magnitude
            // rounds by at most half an ulp of the running sum.
            assert!(
                (v - r).abs() <= waves * waves * f32::EPSILON,
                "{p}: {i}: {v} {r}"
            );
        }
    }
}

#[test]
fn sums_beyond_int32_are_refused_by_name() {
    // Two waves of i32::MAX at C[0][0]: no int8 product of 5000 channels reaches it,
    // but C is memory a caller can fill; the sum is exact and refused as i32.
    let p = Plan::new(MatmulSpec::new(1, 5000, 32, Dtype::Int8)).unwrap();
    assert_eq!(p.layout.waves.len(), 2);
    let mut c = vec![0u8; p.c_bytes as usize];
    for t in &p.tasks {
        c[t.c_offset as usize..][..4].copy_from_slice(&i32::MAX.to_le_bytes());
    }
    let mut out = vec![0i32; 32];
    match p.reduction().sum_i32_into(&c, &mut out) {
        Err(Error::OutOfRange {
            index: 0, value, ..
        }) => {
            assert_eq!(value, (2 * i64::from(i32::MAX)).to_string())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn wrong_buffers_are_refused() {
    let p = Plan::new(MatmulSpec::new(3, 64, 32, Dtype::Int8)).unwrap();
    let r = p.reduction();
    let c = vec![0u8; p.c_bytes as usize];
    let mut out = vec![0i32; 96];
    assert!(r.sum_i32_into(&c[..c.len() - 1], &mut out).is_err());
    assert!(r.sum_i32_into(&c, &mut out[..95]).is_err());
    let mut y = vec![0f32; 96];
    assert!(r.scale_i32_into(&c, &[1.0; 2], None, &mut y).is_err());
    assert!(
        r.scale_i32_into(&c, &[1.0; 3], Some(&[1.0; 31]), &mut y)
            .is_err()
    );
    assert!(
        r.sum_f32_into(&c, &mut y).is_err(),
        "int32 partials as fp32"
    );
    assert!(
        r.scale_i32_into(&c, &[1.0; 3], Some(&[1.0; 32]), &mut y)
            .is_ok()
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]

    /// The scaled int32 finish equals the exact reduction scaled, for shapes with whole
    /// and partial row blocks, atoms and chunks, 1 to 6 waves, and partials small
    /// (summed in i32) or large (summed again in i64, the result still representable).
    #[test]
    fn scaled_int32_sums_equal_the_exact_reduction_scaled(
        m in 1u32..40,
        n in 1u32..300,
        waves in 1u32..=6,
        cores in 1u32..=3,
        shift in proptest::prop_oneof![proptest::strategy::Just(11u32), proptest::strategy::Just(1u32)],
        seed: u64,
    ) {
        let k = 64 * waves;
        let layout = WeightLayout::with_k_tile(k, n, Dtype::Int8, 64).unwrap();
        let p = Plan::for_layout(&layout, m, OutType::Int32, cores).unwrap();
        // Partials shifted right by 11 (small) or 1 (large: beyond 2³¹ / waves, sums beyond
        // int32).
        let c: Vec<u8> = noise(p.c_bytes as usize, seed | 1)
            .chunks_exact(4)
            .flat_map(|v| (i32::from_le_bytes([v[0], v[1], v[2], v[3]]) >> shift).to_le_bytes())
            .collect();
        let exact = p.reduce_int(&c).unwrap();
        let rows: Vec<f32> = (0..m).map(|i| 0.5 + i as f32 / 8.0).collect();
        let cols: Vec<f32> = (0..n).map(|j| 1.0 / (1 + j) as f32).collect();
        let mut y = vec![f32::NAN; exact.len()];
        p.reduction().scale_i32_into(&c, &rows, Some(&cols), &mut y).unwrap();
        let mut plain = vec![f32::NAN; exact.len()];
        p.reduction().scale_i32_into(&c, &rows, None, &mut plain).unwrap();
        for (i, &s) in exact.iter().enumerate() {
            let (r, j) = (i / n as usize, i % n as usize);
            proptest::prop_assert_eq!(y[i].to_bits(), (s as f32 * rows[r] * cols[j]).to_bits(), "{}: {}", p, i);
            proptest::prop_assert_eq!(plain[i].to_bits(), (s as f32 * rows[r]).to_bits(), "{}: {}", p, i);
        }
    }
}
