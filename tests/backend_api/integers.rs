//! Integer banks: int8 and int4 (W4A8 and int4 × int4) products, exact, for any M and
//! K, and results beyond int32 refused by name.

use super::*;

/// One int8 bank, from `[out][in]` and from `[in][out]` weights, serves M = 1, 5, 33 and
/// 130 (two M tiles): `run` and `run_into` of int8 equal the CPU product exactly, on the
/// vendor and rocket kernels.
#[test]
fn one_int8_bank_serves_any_m() {
    let (k, n) = (77usize, 100usize);
    let mut rng = Rng(0x5eed_0001);
    let w_nk = ints(&mut rng, n * k, -128, 127);
    let w_kn = transpose(&w_nk, n, k);
    for spec in SPECS {
        let dev = open(spec);
        let banks = [
            Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w_nk)).unwrap()),
            Arc::new(
                WeightBank::from_kn_in(
                    &dev,
                    &WeightLayout::decode_and_prompts(k as u32, n as u32, Dtype::Int8, dev.cores())
                        .unwrap(),
                    Weights::I8(&w_kn),
                )
                .unwrap(),
            ),
        ];
        for bank in &banks {
            for m in [1usize, 5, 33, 130] {
                let a = ints(&mut rng, m * k, -128, 127);
                let want = as_i32(&cpu_nk(&wide(&a), &wide(&w_nk), m, k, n));
                let mut mm = Matmul::new(bank, m as u32).unwrap();
                assert_eq!(mm.rows(), m as u32);
                assert_eq!(mm.run::<i8, i32>(&a).unwrap(), want, "{spec} run M={m}");
                let mut out = vec![i32::MIN; m * n];
                mm.run_into(&a, &mut out).unwrap();
                assert_eq!(out, want, "{spec} run_into M={m}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Random small int8 shapes (K 1..300, N 1..200, M 1..70) on at most 1 to 3 cores, on
    /// either kernel: an int8 `run` against an `[out][in]` bank is exact.
    #[test]
    fn int8_products_of_random_shapes_are_exact(
        k in 1usize..300,
        n in 1usize..200,
        m in 1usize..70,
        cores in 1u32..=3,
        rocket in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dev = open(SPECS[usize::from(rocket)]);
        let mut rng = Rng(seed | 1);
        let w = ints(&mut rng, n * k, -128, 127);
        let a = ints(&mut rng, m * k, -128, 127);
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w)).unwrap());
        let opts = MatmulOptions::default().cores(cores);
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        prop_assert!(mm.plan().cores_used() <= cores);
        let got = mm.run::<i8, i32>(&a).unwrap();
        prop_assert_eq!(got, as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n)));
    }
}

/// Packs int4 values two per byte by hand: value `2i` of a row in the low nibble of byte
/// `i`, value `2i + 1` in the high nibble, two's complement.
fn nibbles_by_hand(w: &[i8]) -> Vec<u8> {
    w.chunks(2)
        .map(|p| ((p[0] as u8) & 0x0F) | (((p[1] as u8) & 0x0F) << 4))
        .collect()
}

/// int4 banks: one-value-per-byte (`Weights::I4`) and hand-packed nibbles
/// (`Weights::I4Packed`) give identical results; W4A8 (int8 activations against int4
/// weights) equals the CPU product exactly, with random values, with every activation
/// at −128 or 127 against weights at −8 or 7, and with K = 1000 (several int4 K waves).
#[test]
fn int4_banks_agree_and_w4a8_is_exact() {
    let mut rng = Rng(0x5eed_0002);
    for spec in SPECS {
        let dev = open(spec);
        for (k, n) in [(96usize, 70usize), (1000, 64)] {
            let w = ints(&mut rng, n * k, -8, 7);
            let unpacked =
                Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I4(&w)).unwrap());
            let packed = Arc::new(
                WeightBank::new(
                    &dev,
                    (n as u32, k as u32),
                    Weights::I4Packed(&nibbles_by_hand(&w)),
                )
                .unwrap(),
            );
            for m in [1usize, 9] {
                let a = ints(&mut rng, m * k, -128, 127);
                let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
                let x = Matmul::new(&unpacked, m as u32)
                    .unwrap()
                    .run::<i8, i32>(&a)
                    .unwrap();
                let y = Matmul::new(&packed, m as u32)
                    .unwrap()
                    .run::<i8, i32>(&a)
                    .unwrap();
                assert_eq!(x, want, "{spec} int4 values W4A8 {m}x{k}x{n}");
                assert_eq!(y, want, "{spec} packed int4 W4A8 {m}x{k}x{n}");
            }
        }
        // Extremes: rows of -128, of 127 and alternating, against -8, 7 and alternating.
        let (k, n, m) = (64usize, 64usize, 3usize);
        let w: Vec<i8> = (0..n * k)
            .map(|i| match (i / k) % 3 {
                0 => -8,
                1 => 7,
                _ => [-8, 7][i % 2],
            })
            .collect();
        let a: Vec<i8> = (0..m * k)
            .map(|i| match i / k {
                0 => -128,
                1 => 127,
                _ => [127, -128][i % 2],
            })
            .collect();
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I4(&w)).unwrap());
        let mut out = vec![0i32; m * n];
        Matmul::new(&bank, m as u32)
            .unwrap()
            .run_into(&a, &mut out)
            .unwrap();
        assert_eq!(
            out,
            as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n)),
            "{spec} extremes"
        );
        assert_eq!(out[0], -128 * -8 * k as i32);
    }
}

/// int4 banks take the widest K waves their weights allow (`WeightLayout::certified_i4`):
/// weights in −2..=2 over K = 4096 run in two 2048-channel waves instead of nine of 480,
/// and stay exact with every activation at an extreme (int4 −8 and 7, W4A8 −128 and
/// 127), where a saturating int16 sum would show. A layout certified for small weights
/// refuses weights it does not fit, from values and from packed bytes alike.
#[test]
fn certified_int4_banks_are_exact_at_the_extremes_and_refuse_weights_beyond_them() {
    let mut rng = Rng(0x5eed_0044);
    let (k, n, m) = (4096usize, 96usize, 3usize);
    for spec in SPECS {
        let dev = open(spec);
        let w = ints(&mut rng, n * k, -2, 2);
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I4(&w)).unwrap());
        let layout = bank.layout().clone();
        assert_eq!(layout.waves.len(), 2, "{spec}: {layout:?}");
        assert!(layout.is_certified_i4());
        let packed = WeightBank::new(
            &dev,
            (n as u32, k as u32),
            Weights::I4Packed(&nibbles_by_hand(&w)),
        )
        .unwrap();
        assert_eq!(
            packed.layout(),
            &layout,
            "{spec}: both constructors certify alike"
        );
        for fill in [-8, 7] {
            let a4 = vec![fill; m * k];
            let opts = MatmulOptions::default().activations(Activations::Int4);
            let got = Matmul::with_options(&bank, m as u32, opts)
                .unwrap()
                .run::<i32, i64>(&a4)
                .unwrap();
            assert_eq!(
                got,
                cpu_nk(&wide(&a4), &wide(&w), m, k, n),
                "{spec} int4 {fill}"
            );
        }
        for fill in [-128i8, 127] {
            let a8 = vec![fill; m * k];
            let got = Matmul::new(&bank, m as u32)
                .unwrap()
                .run::<i8, i32>(&a8)
                .unwrap();
            assert_eq!(
                got,
                as_i32(&cpu_nk(&wide(&a8), &wide(&w), m, k, n)),
                "{spec} W4A8 {fill}"
            );
        }
        // Channel 5 at −8 throughout: Σ|w| over a 2048-channel wave is 16384.
        let mut big = w.clone();
        big[5 * k..6 * k].fill(-8);
        let err = WeightBank::from_nk_in(&dev, &layout, Weights::I4(&big)).unwrap_err();
        assert!(
            matches!(err, Error::OutOfRange { index: 5, ref value, .. } if value == "16384"),
            "{spec}: {err}"
        );
        let err = WeightBank::from_nk_in(&dev, &layout, Weights::I4Packed(&nibbles_by_hand(&big)))
            .unwrap_err();
        assert!(
            matches!(err, Error::OutOfRange { index: 5, .. }),
            "{spec}: {err}"
        );
        // A cached bank comes back as it was; the same bytes with a channel of −8s do not.
        let bytes = bank.packed().unwrap();
        WeightBank::from_packed(&dev, &layout, &bytes).unwrap();
        let big_bank = WeightBank::new(&dev, (n as u32, k as u32), Weights::I4(&big)).unwrap();
        assert_eq!(
            big_bank.layout().waves.len(),
            9,
            "{spec}: −8s take the 480-channel waves"
        );
        let plain_bytes = big_bank.packed().unwrap();
        let plain = big_bank.layout().clone();
        let wide_bytes =
            pack_weights_int_nk(&layout, &big.iter().map(|&v| v as i32).collect::<Vec<_>>())
                .unwrap();
        assert!(WeightBank::from_packed(&dev, &plain, &plain_bytes).is_ok());
        let err = WeightBank::from_packed(&dev, &layout, &wide_bytes).unwrap_err();
        assert!(
            matches!(err, Error::OutOfRange { index: 5, .. }),
            "{spec}: {err}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Random int4 banks (K 1..600, odd K and several int4 K waves included; N 1..150;
    /// M 1..70, so W4A8's doubled rows cross M tiles) on at most 1 to 3 cores: W4A8
    /// and int4 × int4 (`run` into `i64`) are exact.
    #[test]
    fn int4_products_of_random_shapes_are_exact(
        k in 1usize..600,
        n in 1usize..150,
        m in 1usize..70,
        cores in 1u32..=3,
        rocket in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dev = open(SPECS[usize::from(rocket)]);
        let mut rng = Rng(seed | 1);
        let w = ints(&mut rng, n * k, -8, 7);
        let a8 = ints(&mut rng, m * k, -128, 127);
        let a4: Vec<i32> = (0..m * k).map(|_| rng.int(-8, 7)).collect();
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I4(&w)).unwrap());
        let opts = MatmulOptions::default().cores(cores);
        let got = Matmul::with_options(&bank, m as u32, opts).unwrap().run::<i8, i32>(&a8).unwrap();
        prop_assert_eq!(got, as_i32(&cpu_nk(&wide(&a8), &wide(&w), m, k, n)));
        let opts = opts.activations(Activations::Int4);
        let got = Matmul::with_options(&bank, m as u32, opts).unwrap().run::<i32, i64>(&a4).unwrap();
        prop_assert_eq!(got, cpu_nk(&wide(&a4), &wide(&w), m, k, n));
    }
}

/// int4 × int4 (`Activations::Int4`, `run` of `i32` into `i64`) is exact against the CPU product, for
/// both int4 bank constructors, including K = 1000 (several K waves).
#[test]
fn int4_by_int4_is_exact() {
    let mut rng = Rng(0x5eed_0003);
    for spec in SPECS {
        let dev = open(spec);
        for (m, k, n) in [(5usize, 96usize, 70usize), (3, 1000, 130)] {
            let w = ints(&mut rng, n * k, -8, 7);
            let a: Vec<i32> = (0..m * k).map(|_| rng.int(-8, 7)).collect();
            let want = cpu_nk(&wide(&a), &wide(&w), m, k, n);
            let opts = MatmulOptions::default().activations(Activations::Int4);
            for bank in [
                WeightBank::new(&dev, (n as u32, k as u32), Weights::I4(&w)).unwrap(),
                WeightBank::new(
                    &dev,
                    (n as u32, k as u32),
                    Weights::I4Packed(&nibbles_by_hand(&w)),
                )
                .unwrap(),
            ] {
                let bank = Arc::new(bank);
                let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
                assert_eq!(mm.activations(), Activations::Int4);
                assert_eq!(mm.run::<i32, i64>(&a).unwrap(), want, "{spec} {m}x{k}x{n}");
            }
        }
    }
}

/// K = 35·4096 int8 channels (35 K waves) in one row against one column: `a = 127`
/// everywhere, `w = 127` on the first 33 waves and `−128` on the last two.
fn long_k_case() -> (usize, Vec<i8>, Vec<i8>) {
    let k = 35 * 4096;
    let a = vec![127i8; k];
    let w: Vec<i8> = (0..k)
        .map(|i| if i < 33 * 4096 { 127 } else { -128 })
        .collect();
    (k, a, w)
}

/// A result that leaves the int32 range is an error from an int32 `run`, not a wrapped value:
/// K = 35·4096 channels of 127 × 127 sum to 2 311 786 240 > 2³¹ − 1.
#[test]
fn int8_result_outside_int32_is_an_error() {
    let (k, a, _) = long_k_case();
    let w = vec![127i8; k];
    let exact: i64 = 127 * 127 * k as i64;
    assert!(exact > i32::MAX as i64);
    let dev = open("emu");
    let bank = Arc::new(WeightBank::new(&dev, (1, k as u32), Weights::I8(&w)).unwrap());
    let mut mm = Matmul::new(&bank, 1).unwrap();
    assert!(mm.plan().layout.waves.len() > 1);
    let r = mm.run::<i8, i32>(&a);
    assert!(
        matches!(&r, Err(Error::OutOfRange { index: 0, value, .. }) if *value == exact.to_string()),
        "{exact} as i32: {r:?}"
    );
}

/// A result within the int32 range is exact even when a running sum of its K waves
/// leaves the range: 33 waves of +66 064 384 and two of −66 584 576 give 2 046 955 520,
/// but the running sum after 33 waves is 2 180 124 672 > 2³¹ − 1.
#[test]
fn int8_in_range_result_is_exact_whatever_the_partial_sums() {
    let (k, a, w) = long_k_case();
    let want = cpu_nk(&wide(&a), &wide(&w), 1, k, 1)[0];
    assert_eq!(want, 2_046_955_520);
    // Waves of 4096 channels, so that the first 33 hold the positive products.
    let layout = WeightLayout::with_k_tile(k as u32, 1, Dtype::Int8, 4096).unwrap();
    for spec in SPECS {
        let dev = open(spec);
        let bank = WeightBank::from_nk_in(&dev, &layout, Weights::I8(&w)).unwrap();
        let mut mm = Matmul::new(&Arc::new(bank), 1).unwrap();
        assert_eq!(mm.plan().layout.waves.len(), 35);
        let got = mm.run::<i8, i32>(&a);
        assert_eq!(got, Ok(vec![want as i32]), "{spec}");
    }
}
