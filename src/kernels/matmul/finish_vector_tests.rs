//! The vector path of the int32 finish against the stage path, bit for bit.

use super::*;
use crate::kernels::matmul::WeightLayout;
use crate::kernels::single::Dtype;

/// Deterministic int32 partials, each of magnitude below `2^bits` (xorshift64).
fn partials(len: usize, mut x: u64, bits: u32) -> Vec<u8> {
    (0..len / 4)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x as i32) >> (31 - bits)).to_le_bytes()
        })
        .collect()
}

#[test]
fn the_vector_finish_matches_the_stage_finish() {
    // One row, odd K, N not a multiple of 16 or 4, rows not a multiple of 4, 1-6 waves.
    for (m, k, n, cores) in [
        (1u32, 4095u32, 33u32, 1u32),
        (7, 1001, 70, 2),
        (40, 3000, 200, 3),
        (128, 2048, 512, 3),
    ] {
        for waves in 1..=6u32 {
            let kw = k.div_ceil(waves).next_multiple_of(32);
            let Ok(layout) = WeightLayout::with_k_tile(k, n, Dtype::Int8, kw) else {
                continue;
            };
            let plan = Plan::for_layout(&layout, m, OutType::Int32, cores).unwrap();
            let r = plan.reduction();
            let rows: Vec<f32> = (0..m).map(|i| 0.5 + i as f32 / 9.0).collect();
            let cols: Vec<f32> = (0..n).map(|j| 1.0 / (1 + j) as f32).collect();
            // Small partials take the i32 sums; 2^30 ones overflow them for two waves on.
            for bits in [20, 30] {
                let c = partials(plan.c_bytes as usize, u64::from(m * k + n + bits), bits);
                for cs in [Some(cols.as_slice()), None] {
                    let mut stage = vec![0f32; (m * n) as usize];
                    let mut vector = vec![1f32; (m * n) as usize];
                    let a = r.scale_i32_narrow(&c, &rows, cs, &mut stage, false);
                    let b = r.scale_i32_narrow(&c, &rows, cs, &mut vector, true);
                    assert_eq!(a, b, "{plan}");
                    if a {
                        let same = stage
                            .iter()
                            .zip(&vector)
                            .all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(same, "{plan} {bits}");
                    }
                }
            }
        }
    }
}
