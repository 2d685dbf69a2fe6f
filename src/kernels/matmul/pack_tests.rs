//! Tests of `pack.rs`.

use super::i4_stats::nibble_sum;
use super::*;
use crate::kernels::matmul::quant::unpack_nibbles;
use proptest::prelude::*;

/// The int8 `[out][in]` packer wave by wave, atom by atom: the order the fast one
/// replaced, kept as its specification.
fn weights_i8_nk_atom_order(layout: &WeightLayout, bt: &[i8]) -> Vec<u8> {
    let mut out = vec![0u8; layout.bytes as usize];
    let (k_all, n) = (layout.k as usize, layout.n as usize);
    for (w, &base) in layout.waves.iter().zip(&layout.b_offsets) {
        let kb_count = w.ai as usize / 32;
        for g in 0..n.div_ceil(32) {
            for kb in 0..kb_count {
                let k0 = w.k0 as usize + kb * 32;
                let len = (w.kw as usize - kb * 32).min(32);
                let atom = base as usize + (g * kb_count + kb) * 1024;
                for nn in 0..(n - g * 32).min(32) {
                    let src = (g * 32 + nn) * k_all + k0;
                    for i in 0..len {
                        out[atom + nn * 32 + i] = bt[src + i] as u8;
                    }
                }
            }
        }
    }
    out
}

/// The packed-nibble int4 packer byte by byte in atom order, as specification.
fn weights_i4_packed_nk_atom_order(layout: &WeightLayout, w: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; layout.bytes as usize];
    let (row, n) = (layout.k as usize / 2, layout.n as usize);
    for (wave, &base) in layout.waves.iter().zip(&layout.b_offsets) {
        let kb_count = wave.ai as usize / 32;
        for g in 0..n.div_ceil(64) {
            for kb in 0..kb_count {
                let k0 = wave.k0 as usize + kb * 32;
                let len = (wave.kw as usize - kb * 32).min(32) / 2;
                let atom = base as usize + (g * kb_count + kb) * 1024;
                for nn in 0..(n - g * 64).min(64) {
                    for i in 0..len {
                        let b = w[(g * 64 + nn) * row + k0 / 2 + i];
                        out[atom + nn * 16 + i] = b.rotate_left(4);
                    }
                }
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The `[out][in]` packers write every byte of the bank (a dirty buffer comes out
    /// the same as a clean one) as their atom-order specifications and the general
    /// packer do, and the int4 column sums are the sums of the weights.
    #[test]
    fn nk_packers_and_column_sums_match_their_specifications(
        half_k in 1u32..700,
        n in 1u32..300,
        seed in any::<u64>(),
    ) {
        let k = 2 * half_k;
        let mut rng = crate::seeded::Rng::from_seed(seed);
        let l8 = WeightLayout::new(k, n, Dtype::Int8).unwrap();
        let bt: Vec<i8> = (0..k * n).map(|_| rng.next_u64() as i8).collect();
        let mut out = vec![0xA5u8; l8.bytes as usize];
        weights_i8_nk_into(&l8, &bt, &mut out).unwrap();
        prop_assert_eq!(&out, &weights_i8_nk_atom_order(&l8, &bt));
        let wide: Vec<i32> = bt.iter().map(|&v| v as i32).collect();
        prop_assert_eq!(&out, &super::super::pack_weights_int_nk(&l8, &wide).unwrap());

        let l4 = WeightLayout::new(k, n, Dtype::Int4).unwrap();
        let w: Vec<u8> = (0..half_k * n).map(|_| rng.next_u64() as u8).collect();
        let mut out = vec![0xA5u8; l4.bytes as usize];
        weights_i4_packed_nk_into(&l4, &w, &mut out).unwrap();
        prop_assert_eq!(&out, &weights_i4_packed_nk_atom_order(&l4, &w));
        let values: Vec<i32> = unpack_nibbles(&w).into_iter().map(i32::from).collect();
        prop_assert_eq!(&out, &super::super::pack_weights_int_nk(&l4, &values).unwrap());
        let sums: Vec<i64> = values
            .chunks_exact(k as usize)
            .map(|r| r.iter().map(|&v| v as i64).sum())
            .collect();
        prop_assert_eq!(i4_column_sums(&l4, &out).unwrap(), sums.clone());
        let mut fused = vec![0x5Au8; l4.bytes as usize];
        let fused_sums = weights_i4_packed_nk_sums_into(&l4, &w, &mut fused).unwrap();
        prop_assert_eq!(&fused, &out);
        prop_assert_eq!(fused_sums, sums);
    }
}

#[test]
fn nibble_sums_cover_every_byte() {
    for b in 0..=255u8 {
        let v = ((b << 4) as i8 >> 4) as i32 + ((b as i8) >> 4) as i32;
        let mut run = [0u8; 16];
        run[b as usize % 16] = b;
        assert_eq!(nibble_sum(&run), v, "byte {b:#04x}");
        assert_eq!(nibble_sum(&[b; 16]), 16 * v, "16 bytes {b:#04x}");
    }
}

#[test]
fn transpose8_transposes() {
    let rows: [u64; 8] =
        std::array::from_fn(|i| u64::from_le_bytes(std::array::from_fn(|j| (i * 8 + j) as u8)));
    let t = transpose8(rows);
    for (j, row) in t.iter().enumerate() {
        for (i, &v) in row.to_le_bytes().iter().enumerate() {
            assert_eq!(v as usize, i * 8 + j);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The int4 `K×N` packer (whole atoms a strip of groups at a time, the rest byte by
    /// byte) writes every byte of the bank as the general packer does, over shapes with
    /// whole and partial atoms and strips and several waves.
    #[test]
    fn the_int4_kn_packer_matches_the_general_packer(
        k in 1u32..1100,
        n in 1u32..1200,
        seed in any::<u64>(),
    ) {
        let mut rng = crate::seeded::Rng::from_seed(seed);
        let l4 = WeightLayout::new(k, n, Dtype::Int4).unwrap();
        let b: Vec<i8> = (0..k * n).map(|_| (rng.next_u64() % 16) as i8 - 8).collect();
        let mut out = vec![0xA5u8; l4.bytes as usize];
        weights_i4_kn_into(&l4, &b, &mut out).unwrap();
        let wide: Vec<i32> = b.iter().map(|&v| v as i32).collect();
        prop_assert_eq!(&out, &super::super::pack_weights_int(&l4, &wide).unwrap());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The int8 `K×N` packer (whole atoms a strip of groups at a time, the rest byte by
    /// byte) writes every byte of the bank as the general packer does, over shapes with
    /// whole and partial atoms and strips, in one wave or waves of 32 to 256 channels.
    #[test]
    fn the_int8_kn_packer_matches_the_general_packer(
        k in 1u32..1100,
        n in 1u32..1200,
        tile in prop_oneof![Just(0u32), 1u32..=8],
        seed in any::<u64>(),
    ) {
        let mut rng = crate::seeded::Rng::from_seed(seed);
        let l8 = match tile {
            0 => WeightLayout::new(k, n, Dtype::Int8).unwrap(),
            t => WeightLayout::with_k_tile(k, n, Dtype::Int8, 32 * t).unwrap(),
        };
        let b: Vec<i8> = (0..k * n).map(|_| rng.next_u64() as i8).collect();
        let mut out = vec![0xA5u8; l8.bytes as usize];
        weights_i8_kn_into(&l8, &b, &mut out).unwrap();
        let wide: Vec<i32> = b.iter().map(|&v| v as i32).collect();
        prop_assert_eq!(&out, &super::super::pack_weights_int(&l8, &wide).unwrap());
    }
}

#[test]
fn an_int4_value_out_of_range_is_refused_by_value() {
    let l4 = WeightLayout::new(64, 64, Dtype::Int4).unwrap();
    let mut b = vec![3i8; 64 * 64];
    b[100] = 8;
    let mut out = vec![0u8; l4.bytes as usize];
    match weights_i4_kn_into(&l4, &b, &mut out) {
        Err(crate::error::Error::Unsupported { why, .. }) => {
            assert!(why.contains("int4 weight 8"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

/// A value outside −8..=7 anywhere in B, in a whole atom or in a partial one (K and N
/// not multiples of the atom), of either sign, is refused by value; B in range packs.
#[test]
fn an_int4_value_out_of_range_is_refused_wherever_it_is() {
    let (k, n) = (70usize, 100usize);
    let l4 = WeightLayout::new(k as u32, n as u32, Dtype::Int4).unwrap();
    let mut out = vec![0u8; l4.bytes as usize];
    let b = vec![-8i8; k * n];
    weights_i4_kn_into(&l4, &b, &mut out).unwrap();
    for (at, v) in [
        (0, 8i8),
        (5 * n + 3, -9),
        (64 * n + 99, 127),
        (k * n - 1, -128),
        (33 * n + 70, 16),
    ] {
        let mut bad = b.clone();
        bad[at] = v;
        match weights_i4_kn_into(&l4, &bad, &mut out) {
            Err(crate::error::Error::Unsupported { why, .. }) => {
                assert!(why.contains(&format!("int4 weight {v} ")), "{at}: {why}")
            }
            other => panic!("{at}: {other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The W4A8 activation packer writes every byte of the A buffer as the general
    /// packer does from the split halves, over row counts that cross M tiles (and the
    /// high/low boundary inside one), K with whole and partial channel groups and
    /// several waves, on 1 to 3 cores.
    #[test]
    fn the_w4a8_activation_packer_matches_the_split_and_the_general_packer(
        m in 1u32..150,
        k in 1u32..1100,
        n in 1u32..200,
        cores in 1u32..=3,
        seed in any::<u64>(),
    ) {
        let mut rng = crate::seeded::Rng::from_seed(seed);
        let plan = Plan::new(super::super::MatmulSpec::new(2 * m, k, n, Dtype::Int4).on_cores(cores)).unwrap();
        let a: Vec<i8> = (0..m * k).map(|_| rng.next_u64() as i8).collect();
        let (mut hi, mut lo) = (vec![0i8; a.len()], vec![0i8; a.len()]);
        crate::kernels::matmul::quant::split_w4a8(&a, &mut hi, &mut lo).unwrap();
        let both: Vec<i32> = hi.iter().chain(&lo).map(|&v| v as i32).collect();
        let mut out = vec![0xA5u8; plan.a_bytes as usize];
        activations_w4a8_into(&plan, &a, &mut out).unwrap();
        prop_assert_eq!(&out, &plan.pack_a_int(&both).unwrap());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The float activation packer writes every byte of the A buffer as each task's own
    /// single-matmul packer lays out its block (rows padded to 32 channels), over row
    /// counts that cross M tiles, K with partial channel groups and several waves, on 1
    /// to 3 cores, for fp16 and bf16, into a buffer holding other bytes before; and the
    /// int8 one as the general packer does.
    #[test]
    fn the_float_and_int8_activation_packers_match_the_general_ones(
        m in 1u32..150,
        k in 1u32..1100,
        n in 1u32..200,
        cores in 1u32..=3,
        bf16 in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dtype = if bf16 { Dtype::Bf16 } else { Dtype::Fp16 };
        let mut rng = crate::seeded::Rng::from_seed(seed);
        let plan = Plan::new(super::super::MatmulSpec::new(m, k, n, dtype).on_cores(cores)).unwrap();
        let a: Vec<f32> = (0..m * k).map(|_| rng.unit() * 6.0 - 3.0).collect();
        let mut want = vec![0u8; plan.a_bytes as usize];
        for t in &plan.tasks {
            let w = plan.layout.waves[t.wave as usize];
            let block: Vec<f32> = (0..t.rows * w.kw)
                .map(|i| a[((t.m0 + i / w.kw) * k + w.k0 + i % w.kw) as usize])
                .collect();
            let bytes = plan.task_matmul(t).pack_a_f32(&block).unwrap();
            want[t.a_offset as usize..][..bytes.len()].copy_from_slice(&bytes);
        }
        let mut out = vec![0xA5u8; plan.a_bytes as usize];
        activations_float_into(&plan, &a, &mut out).unwrap();
        prop_assert_eq!(&out, &want);
        prop_assert_eq!(&plan.pack_a_f32(&a).unwrap(), &want);

        // The int8 packer of the same shape, on the same cores.
        let plan = Plan::new(super::super::MatmulSpec::new(m, k, n, Dtype::Int8).on_cores(cores)).unwrap();
        let a: Vec<i8> = (0..m * k).map(|_| rng.next_u64() as i8).collect();
        let a32: Vec<i32> = a.iter().map(|&v| i32::from(v)).collect();
        let mut out = vec![0xA5u8; plan.a_bytes as usize];
        activations_i8_into(&plan, &a, &mut out).unwrap();
        prop_assert_eq!(&out, &plan.pack_a_int(&a32).unwrap());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The vector paths of the int8 K×N packer and the W4A8 activation packer write the
    /// same bytes as their scalar paths: one row, odd K, N and K not multiples of 32,
    /// several waves and cores.
    #[test]
    fn the_vector_packers_match_the_scalar_packers(
        m in 1u32..70,
        k in 1u32..1100,
        n in 1u32..200,
        waves in 1u32..=4,
        cores in 1u32..=3,
        seed in any::<u64>(),
    ) {
        let mut rng = crate::seeded::Rng::from_seed(seed);
        let kw = k.div_ceil(waves).next_multiple_of(32);
        let layout = WeightLayout::with_k_tile(k, n, Dtype::Int8, kw).unwrap();
        let b: Vec<i8> = (0..k * n).map(|_| rng.next_u64() as i8).collect();
        let mut scalar = vec![0x5Au8; layout.bytes as usize];
        let mut vector = vec![0xA5u8; layout.bytes as usize];
        i8_kn(&layout, &b, &mut scalar, false).unwrap();
        i8_kn(&layout, &b, &mut vector, true).unwrap();
        prop_assert_eq!(&scalar, &vector);

        let spec = super::super::MatmulSpec::new(2 * m, k, n, Dtype::Int4).on_cores(cores);
        let plan = Plan::new(spec).unwrap();
        let a: Vec<i8> = (0..m * k).map(|_| rng.next_u64() as i8).collect();
        let mut scalar = vec![0x5Au8; plan.a_bytes as usize];
        let mut vector = vec![0xA5u8; plan.a_bytes as usize];
        w4a8::w4a8(&plan, &a, &mut scalar, false).unwrap();
        w4a8::w4a8(&plan, &a, &mut vector, true).unwrap();
        prop_assert_eq!(&scalar, &vector);
    }
}

#[test]
fn the_int8_activation_packer_refuses_other_plans_and_sizes() {
    let plan = |dtype| Plan::new(super::super::MatmulSpec::new(3, 40, 8, dtype)).unwrap();
    let (int8, fp16) = (plan(Dtype::Int8), plan(Dtype::Fp16));
    let a = vec![1i8; 120];
    let mut out = vec![0u8; int8.a_bytes as usize];
    let r = activations_i8_into(&fp16, &a, &mut out);
    assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
    let r = activations_i8_into(&int8, &a[..119], &mut out);
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    let r = activations_i8_into(&int8, &a, &mut out[1..]);
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    activations_i8_into(&int8, &a, &mut out).unwrap();
}
