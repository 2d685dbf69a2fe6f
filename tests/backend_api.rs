//! The backend-facing matmul API (`compute::matmul`) against CPU references computed here:
//! one weight bank for any M, int8 / int4 / fp16 banks, quantised layers, typed errors,
//! owned handles, the split across cores, batches of matmuls in one job, and the
//! asynchronous calls. Everything runs on the emulated kernels (vendor and rocket), which
//! execute the programs on the simulator.
//!
//! Integer products are exact. Float results are checked against f64 references with the
//! bounds stated at each test.

mod common;

use common::Rng;

use half::f16;
use proptest::prelude::*;
use rknpu_driver::Error;
use rknpu_driver::compute::matmul::{
    Activations, Matmul, MatmulBatch, MatmulOptions, PendingMatmul, WeightBank, Weights,
};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::{Plan, WeightLayout, pack_weights_int_nk, quant};
use rknpu_driver::kernels::single::{Dtype, OutType};
use rknpu_driver::trace::{Chunk, MemorySink, Trace};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The emulated kernels every test runs on where it is cheap: vendor 0.9.8 and rocket.
const SPECS: [&str; 2] = ["emu", "emu:rocket"];

fn open(spec: &str) -> Device {
    Device::open_spec(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// `n` rows of `k` values in `lo..=hi`.
fn ints(rng: &mut Rng, len: usize, lo: i32, hi: i32) -> Vec<i8> {
    (0..len).map(|_| rng.int(lo, hi) as i8).collect()
}

/// `C[i][j] = Σ_k a[i][k] · w[j][k]` for A as M×K and W as N×K (`[out][in]`), in i64.
fn cpu_nk(a: &[i64], w_nk: &[i64], m: usize, k: usize, n: usize) -> Vec<i64> {
    let mut c = vec![0i64; m * n];
    for i in 0..m {
        let row = &a[i * k..(i + 1) * k];
        for j in 0..n {
            let col = &w_nk[j * k..(j + 1) * k];
            c[i * n + j] = row.iter().zip(col).map(|(&x, &y)| x * y).sum();
        }
    }
    c
}

fn wide<T: Copy + Into<i64>>(v: &[T]) -> Vec<i64> {
    v.iter().map(|&x| x.into()).collect()
}

/// Transposes `rows` × `cols` row-major.
fn transpose<T: Copy>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| (r, c)))
        .map(|(r, c)| v[r * cols + c])
        .collect()
}

fn as_i32(v: &[i64]) -> Vec<i32> {
    v.iter().map(|&x| i32::try_from(x).unwrap()).collect()
}

/// Submissions recorded while `f` runs on `dev` (from a trace recorded in memory).
fn submissions(dev: &Device, f: impl FnOnce()) -> usize {
    let sink = MemorySink::default();
    dev.start_recording(Box::new(sink.clone())).unwrap();
    f();
    dev.stop_recording().unwrap();
    let trace = Trace::from_bytes(&sink.bytes()).unwrap();
    trace
        .chunks
        .iter()
        .filter(|c| matches!(c, Chunk::Submit { .. }))
        .count()
}

/// One int8 bank, from `[out][in]` and from `[in][out]` weights, serves M = 1, 5, 33 and
/// 130 (two M tiles): `run_i8` and `run_i8_into` equal the CPU product exactly, on the
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
            Arc::new(WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w_nk).unwrap()),
            Arc::new(WeightBank::from_i8_kn(&dev, k as u32, n as u32, &w_kn).unwrap()),
        ];
        for bank in &banks {
            for m in [1usize, 5, 33, 130] {
                let a = ints(&mut rng, m * k, -128, 127);
                let want = as_i32(&cpu_nk(&wide(&a), &wide(&w_nk), m, k, n));
                let mut mm = Matmul::new(bank, m as u32).unwrap();
                assert_eq!(mm.rows(), m as u32);
                assert_eq!(mm.run_i8(&a).unwrap(), want, "{spec} run_i8 M={m}");
                let mut out = vec![i32::MIN; m * n];
                mm.run_i8_into(&a, &mut out).unwrap();
                assert_eq!(out, want, "{spec} run_i8_into M={m}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Random small int8 shapes (K 1..300, N 1..200, M 1..70) on at most 1 to 3 cores, on
    /// either kernel: `run_i8` against an `[out][in]` bank is exact.
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
        let bank = Arc::new(WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w).unwrap());
        let opts = MatmulOptions::default().cores(cores);
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        prop_assert!(mm.plan().cores_used() <= cores);
        let got = mm.run_i8(&a).unwrap();
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

/// int4 banks: one-value-per-byte (`from_i4_nk`) and hand-packed nibbles
/// (`from_i4_packed_nk`) give identical results; W4A8 (int8 activations against int4
/// weights) equals the CPU product exactly, with random values, with every activation
/// at −128 or 127 against weights at −8 or 7, and with K = 1000 (several int4 K waves).
#[test]
fn int4_banks_agree_and_w4a8_is_exact() {
    let mut rng = Rng(0x5eed_0002);
    for spec in SPECS {
        let dev = open(spec);
        for (k, n) in [(96usize, 70usize), (1000, 64)] {
            let w = ints(&mut rng, n * k, -8, 7);
            let unpacked = Arc::new(WeightBank::from_i4_nk(&dev, n as u32, k as u32, &w).unwrap());
            let packed = Arc::new(
                WeightBank::from_i4_packed_nk(&dev, n as u32, k as u32, &nibbles_by_hand(&w))
                    .unwrap(),
            );
            for m in [1usize, 9] {
                let a = ints(&mut rng, m * k, -128, 127);
                let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
                let x = Matmul::new(&unpacked, m as u32)
                    .unwrap()
                    .run_i8(&a)
                    .unwrap();
                let y = Matmul::new(&packed, m as u32).unwrap().run_i8(&a).unwrap();
                assert_eq!(x, want, "{spec} from_i4_nk W4A8 {m}x{k}x{n}");
                assert_eq!(y, want, "{spec} from_i4_packed_nk W4A8 {m}x{k}x{n}");
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
        let bank = Arc::new(WeightBank::from_i4_nk(&dev, n as u32, k as u32, &w).unwrap());
        let mut out = vec![0i32; m * n];
        Matmul::new(&bank, m as u32)
            .unwrap()
            .run_i8_into(&a, &mut out)
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
        let bank = Arc::new(WeightBank::from_i4_nk(&dev, n as u32, k as u32, &w).unwrap());
        let layout = bank.layout().clone();
        assert_eq!(layout.waves.len(), 2, "{spec}: {layout:?}");
        assert!(layout.is_certified_i4());
        let packed =
            WeightBank::from_i4_packed_nk(&dev, n as u32, k as u32, &nibbles_by_hand(&w)).unwrap();
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
                .run_int(&a4)
                .unwrap();
            assert_eq!(
                got,
                cpu_nk(&wide(&a4), &wide(&w), m, k, n),
                "{spec} int4 {fill}"
            );
        }
        for fill in [-128i8, 127] {
            let a8 = vec![fill; m * k];
            let got = Matmul::new(&bank, m as u32).unwrap().run_i8(&a8).unwrap();
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
        let big_bank = WeightBank::from_i4_nk(&dev, n as u32, k as u32, &big).unwrap();
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
    /// (`run_i8`) and int4 × int4 (`run_int`) are exact.
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
        let bank = Arc::new(WeightBank::from_i4_nk(&dev, n as u32, k as u32, &w).unwrap());
        let opts = MatmulOptions::default().cores(cores);
        let got = Matmul::with_options(&bank, m as u32, opts).unwrap().run_i8(&a8).unwrap();
        prop_assert_eq!(got, as_i32(&cpu_nk(&wide(&a8), &wide(&w), m, k, n)));
        let opts = opts.activations(Activations::Int4);
        let got = Matmul::with_options(&bank, m as u32, opts).unwrap().run_int(&a4).unwrap();
        prop_assert_eq!(got, cpu_nk(&wide(&a4), &wide(&w), m, k, n));
    }
}

/// int4 × int4 (`Activations::Int4`, `run_int`) is exact against the CPU product, for
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
                WeightBank::from_i4_nk(&dev, n as u32, k as u32, &w).unwrap(),
                WeightBank::from_i4_packed_nk(&dev, n as u32, k as u32, &nibbles_by_hand(&w))
                    .unwrap(),
            ] {
                let bank = Arc::new(bank);
                let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
                assert_eq!(mm.activations(), Activations::Int4);
                assert_eq!(mm.run_int(&a).unwrap(), want, "{spec} {m}x{k}x{n}");
            }
        }
    }
}

/// 16-bit floats as f64.
fn wide_f<T: Copy>(v: &[T], f: impl Fn(T) -> f64) -> Vec<f64> {
    v.iter().map(|&x| f(x)).collect()
}

/// `out` (M×N, f32) is `a` (M×K) times `w` (N×K) transposed within the bound of fp32
/// summation of exact products, `(K + 1)·2⁻²⁴·Σ|a·b|`, result by result.
fn within_fp32_bound(
    spec: &str,
    a: &[f64],
    w: &[f64],
    out: &[f32],
    (m, k, n): (usize, usize, usize),
) {
    for i in 0..m {
        for j in 0..n {
            let (mut exact, mut mag) = (0f64, 0f64);
            for kk in 0..k {
                let p = a[i * k + kk] * w[j * k + kk];
                exact += p;
                mag += p.abs();
            }
            let bound = (k as f64 + 1.0) * 2f64.powi(-24) * mag;
            let got = out[i * n + j] as f64;
            assert!(
                (got - exact).abs() <= bound,
                "{spec} {m}x{k}x{n} [{i}][{j}]: {got} vs {exact}, bound {bound}"
            );
        }
    }
}

/// fp16 banks: `run_f16_into` against an f64 reference. The inputs are fp16 values, so
/// every product `a·b` is exact in fp32 (11 + 11 significant bits); the simulator sums
/// each K wave in fp32 and the host adds the waves in f64 and rounds once to f32. Summing
/// K exact terms in fp32 in any order errs by at most `(K − 1)·u·Σ|a·b|` (u = 2⁻²⁴, to
/// first order), and the final rounding by `u·|Σ a·b|`, so the bound checked is
/// `(K + 1)·2⁻²⁴·Σ|a·b|`. K = 5000 takes two waves.
#[test]
fn fp16_bank_is_within_the_fp32_accumulation_bound() {
    let mut rng = Rng(0x5eed_0004);
    for spec in SPECS {
        let dev = open(spec);
        for (m, k, n) in [(1usize, 40usize, 33usize), (7, 300, 64), (2, 5000, 40)] {
            let w: Vec<f16> = (0..n * k).map(|_| f16::from_f32(rng.float())).collect();
            let a: Vec<f16> = (0..m * k).map(|_| f16::from_f32(rng.float())).collect();
            let bank = Arc::new(WeightBank::from_f16_nk(&dev, n as u32, k as u32, &w).unwrap());
            let mut mm = Matmul::new(&bank, m as u32).unwrap();
            assert_eq!(mm.activations(), Activations::Fp16);
            let mut out = vec![f32::NAN; m * n];
            mm.run_f16_into(&a, &mut out).unwrap();
            let (a, w) = (wide_f(&a, f16::to_f64), wide_f(&w, f16::to_f64));
            within_fp32_bound(spec, &a, &w, &out, (m, k, n));
        }
    }
}

/// The bound on a quantised product `y[i][j]` of `x` row `i` and `w` row `j` (K values
/// each): x is quantised per row with step `sx = max|x_i|/127`, w per channel with step
/// `sw = max|w_j|/qmax`, each value within half a step (0.5001 steps, allowing for the
/// f32 rounding of `x/step`). Then `|Σ x̂ŵ − Σ xw| ≤ Σ |x||ew| + |ŵ||ex|
/// ≤ sw/2·Σ|x| + sx/2·Σ(|w| + sw/2)`. The integer sum is exact; converting it to f32
/// and the two scale multiplications add at most 4·2⁻²⁴ relative, plus the f32
/// rounding of the two steps themselves (2·2⁻²⁴ relative).
fn quantised_bound(x: &[f32], w: &[f32], qmax: f32) -> f64 {
    let amax = |v: &[f32]| v.iter().fold(0f64, |m, &t| m.max(t.abs() as f64));
    let sx = amax(x) / 127.0;
    let sw = amax(w) / qmax as f64;
    let sum_x: f64 = x.iter().map(|&t| t.abs() as f64).sum();
    let sum_w: f64 = w.iter().map(|&t| t.abs() as f64).sum();
    let half = 0.5001;
    let quant = half * sw * sum_x + half * sx * (sum_w + half * sw * x.len() as f64);
    let mag: f64 = sum_x * amax(w) + quant;
    quant + 8.0 * 2f64.powi(-24) * mag
}

/// Quantised layers: `quantize_f32_nk` to int8 (W8A8) and to int4 (W4A8), `mul_mat` of
/// f32 activations within the quantisation bound of [`quantised_bound`] of the f64
/// product of the unquantised values; and, on the data used here, the bound is a small
/// relative error (under 2 % for int8, 15 % for int4, of `Σ|x||w|`).
#[test]
fn quantised_layers_are_within_the_quantisation_bound() {
    let mut rng = Rng(0x5eed_0005);
    let (m, k, n) = (6usize, 200usize, 48usize);
    let w: Vec<f32> = (0..n * k).map(|_| rng.float() * 0.3).collect();
    let x: Vec<f32> = (0..m * k).map(|_| rng.float() * 4.0).collect();
    for spec in SPECS {
        let dev = open(spec);
        for (dtype, qmax, rel) in [(Dtype::Int8, 127.0, 0.02), (Dtype::Int4, 7.0, 0.15)] {
            let bank =
                Arc::new(WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &w, dtype).unwrap());
            assert_eq!(bank.scales().map(<[f32]>::len), Some(n));
            let mut y = vec![f32::NAN; m * n];
            Matmul::new(&bank, m as u32)
                .unwrap()
                .mul_mat(&x, &mut y)
                .unwrap();
            for i in 0..m {
                let xr = &x[i * k..(i + 1) * k];
                for j in 0..n {
                    let wr = &w[j * k..(j + 1) * k];
                    let exact: f64 = xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum();
                    let mag: f64 = xr.iter().zip(wr).map(|(&a, &b)| (a * b).abs() as f64).sum();
                    let tol = quantised_bound(xr, wr, qmax);
                    let err = (y[i * n + j] as f64 - exact).abs();
                    assert!(
                        err <= tol,
                        "{spec} {dtype:?} ({i},{j}): {} vs {exact}, bound {tol}",
                        y[i * n + j]
                    );
                    assert!(err <= rel * mag, "{spec} {dtype:?} ({i},{j}): relative");
                }
            }
        }
    }
}

/// `run_quantized_into` with the output of `quant::quantize_rows_i8` gives bit for bit
/// what `mul_mat` gives for the same f32 activations (int8 and int4 quantised banks).
#[test]
fn run_quantized_equals_mul_mat_bit_for_bit() {
    let mut rng = Rng(0x5eed_0006);
    let (m, k, n) = (4usize, 130usize, 96usize);
    let w: Vec<f32> = (0..n * k).map(|_| rng.float()).collect();
    let x: Vec<f32> = (0..m * k).map(|_| rng.float() * 10.0).collect();
    let (q, scales) = quant::quantize_rows_i8(&x, k).unwrap();
    for spec in SPECS {
        let dev = open(spec);
        for dtype in [Dtype::Int8, Dtype::Int4] {
            let bank =
                Arc::new(WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &w, dtype).unwrap());
            let mut mm = Matmul::new(&bank, m as u32).unwrap();
            let (mut y1, mut y2) = (vec![0f32; m * n], vec![1f32; m * n]);
            mm.mul_mat(&x, &mut y1).unwrap();
            mm.run_quantized_into(&q, &scales, &mut y2).unwrap();
            let bits = |v: &[f32]| v.iter().map(|t| t.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&y1), bits(&y2), "{spec} {dtype:?}");
        }
    }
}

/// `with_scales` multiplies channel `j` of `mul_mat`'s results by `scales[j]`: with
/// integer activations whose row maximum is 127 the row scale is 1, so `y[i][j]` is the
/// exact integer product times `scales[j]` (one f32 rounding: relative 2⁻²⁴).
#[test]
fn with_scales_scales_each_output_channel() {
    let mut rng = Rng(0x5eed_0007);
    let (m, k, n) = (3usize, 50usize, 40usize);
    let w = ints(&mut rng, n * k, -128, 127);
    let mut a = ints(&mut rng, m * k, -127, 127);
    for i in 0..m {
        a[i * k + i] = 127;
    }
    let x: Vec<f32> = a.iter().map(|&v| v as f32).collect();
    let scales: Vec<f32> = (0..n).map(|j| (j as f32 - 17.5) / 8.0).collect();
    let acc = cpu_nk(&wide(&a), &wide(&w), m, k, n);
    for spec in SPECS {
        let dev = open(spec);
        let bank = WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w).unwrap();
        let bank = Arc::new(bank.with_scales(&scales).unwrap());
        let mut y = vec![0f32; m * n];
        Matmul::new(&bank, m as u32)
            .unwrap()
            .mul_mat(&x, &mut y)
            .unwrap();
        for (idx, (&got, &c)) in y.iter().zip(&acc).enumerate() {
            let want = c as f64 * scales[idx % n] as f64;
            assert!(
                (got as f64 - want).abs() <= want.abs() * 2f64.powi(-23),
                "{spec} [{idx}]: {got} vs {want}"
            );
        }
    }
}

/// Bad inputs are typed errors, never panics: wrong lengths are `ShapeMismatch` with the
/// expected and given counts; an int4 weight of 9, NaN activations in `mul_mat` and a
/// NaN scale are `OutOfRange`; `run_f16` on an int8 bank is `Precision`; `cores(0)`, a
/// packed int4 bank of odd K and `for_plan` with another layout's plan are errors.
#[test]
fn bad_inputs_are_typed_errors() {
    let dev = open("emu");
    let (m, k, n) = (2u32, 64u32, 32u32);
    let w = vec![1i8; (n * k) as usize];
    // Weights of the wrong length.
    match WeightBank::from_i8_nk(&dev, n, k, &w[1..]) {
        Err(Error::ShapeMismatch {
            expected, actual, ..
        }) => assert_eq!((expected, actual), ((n * k) as u64, (n * k - 1) as u64)),
        r => panic!("short weights: {r:?}"),
    }
    match WeightBank::from_i4_packed_nk(&dev, n, k, &vec![0u8; (n * k / 2 + 3) as usize]) {
        Err(Error::ShapeMismatch {
            expected, actual, ..
        }) => assert_eq!(
            (expected, actual),
            ((n * k / 2) as u64, (n * k / 2 + 3) as u64)
        ),
        r => panic!("long packed weights: {r:?}"),
    }
    // An odd K with packed nibbles.
    assert!(matches!(
        WeightBank::from_i4_packed_nk(&dev, 4, 5, &[0u8; 10]),
        Err(Error::ShapeMismatch { .. })
    ));
    // An int4 weight of 9.
    let mut w4 = vec![0i8; (n * k) as usize];
    w4[37] = 9;
    match WeightBank::from_i4_nk(&dev, n, k, &w4) {
        Err(Error::OutOfRange { index, value, .. }) => {
            assert_eq!((index, value.as_str()), (37, "9"))
        }
        r => panic!("int4 weight 9: {r:?}"),
    }
    let bank = Arc::new(WeightBank::from_i8_nk(&dev, n, k, &w).unwrap());
    let mut mm = Matmul::new(&bank, m).unwrap();
    // Activations and results of the wrong length.
    match mm.run_i8(&vec![0i8; (m * k + 1) as usize]) {
        Err(Error::ShapeMismatch {
            expected, actual, ..
        }) => assert_eq!((expected, actual), ((m * k) as u64, (m * k + 1) as u64)),
        r => panic!("long activations: {r:?}"),
    }
    let mut short = vec![0i32; (m * n - 1) as usize];
    match mm.run_i8_into(&vec![0i8; (m * k) as usize], &mut short) {
        Err(Error::ShapeMismatch {
            expected, actual, ..
        }) => assert_eq!((expected, actual), ((m * n) as u64, (m * n - 1) as u64)),
        r => panic!("short results: {r:?}"),
    }
    let mut y = vec![0f32; (m * n) as usize];
    match mm.mul_mat(&vec![0f32; (m * k - 2) as usize], &mut y) {
        Err(Error::ShapeMismatch {
            expected, actual, ..
        }) => assert_eq!((expected, actual), ((m * k) as u64, (m * k - 2) as u64)),
        r => panic!("short f32 activations: {r:?}"),
    }
    // NaN activations.
    let mut x = vec![0.5f32; (m * k) as usize];
    x[70] = f32::NAN;
    match mm.mul_mat(&x, &mut y) {
        Err(Error::OutOfRange { index, .. }) => assert_eq!(index, 70),
        r => panic!("NaN activations: {r:?}"),
    }
    // fp16 activations on an int8 bank.
    let h = vec![f16::ONE; (m * k) as usize];
    assert!(matches!(mm.run_f16(&h), Err(Error::Precision { .. })));
    // No cores.
    assert!(Matmul::with_options(&bank, m, MatmulOptions::default().cores(0)).is_err());
    // A NaN scale, and scales of the wrong length.
    let mut scales = vec![1f32; n as usize];
    scales[3] = f32::NAN;
    let b2 = WeightBank::from_i8_nk(&dev, n, k, &w).unwrap();
    match b2.with_scales(&scales) {
        Err(Error::OutOfRange { index, .. }) => assert_eq!(index, 3),
        r => panic!("NaN scale: {r:?}"),
    }
    let b3 = WeightBank::from_i8_nk(&dev, n, k, &w).unwrap();
    assert!(matches!(
        b3.with_scales(&[1.0; 3]),
        Err(Error::ShapeMismatch {
            expected: 32,
            actual: 3,
            ..
        })
    ));
    // A plan of another layout: other K, and the same shape as int4.
    for other in [
        WeightLayout::new(k + 32, n, Dtype::Int8).unwrap(),
        WeightLayout::new(k, n, Dtype::Int4).unwrap(),
    ] {
        let plan = Plan::for_layout(&other, m, OutType::Int32, 1).unwrap();
        assert!(
            Matmul::for_plan(&bank, plan).is_err(),
            "a plan for {other:?}"
        );
    }
    // Activations the bank's type has no kernel for.
    for acts in [Activations::Fp16, Activations::Int4] {
        let opts = MatmulOptions::default().activations(acts);
        assert!(
            matches!(
                Matmul::with_options(&bank, m, opts),
                Err(Error::Precision { .. })
            ),
            "{acts:?} on an int8 bank"
        );
    }
    // A plan of a layout with the same byte count but transposed shape.
    let transposed = WeightLayout::new(n, k, Dtype::Int8).unwrap();
    assert_eq!(transposed.bytes, bank.layout().bytes);
    let plan = Plan::for_layout(&transposed, m, OutType::Int32, 1).unwrap();
    assert!(Matmul::for_plan(&bank, plan).is_err());
    // An empty batch, and a batch given the wrong number of inputs or outputs.
    assert!(matches!(
        MatmulBatch::new(Vec::new()),
        Err(Error::ShapeMismatch {
            expected: 1,
            actual: 0,
            ..
        })
    ));
    // Members of another open of the (emulated) NPU: refused before anything runs.
    let other = open("emu");
    let foreign = Arc::new(WeightBank::from_i8_nk(&other, n, k, &w).unwrap());
    assert!(!other.same_device(&dev) && dev.same_device(&dev.clone()));
    assert!(matches!(
        MatmulBatch::new(vec![
            Matmul::new(&bank, m).unwrap(),
            Matmul::new(&foreign, m).unwrap()
        ]),
        Err(Error::InvalidArgument { .. })
    ));
    let mut batch = MatmulBatch::new(vec![Matmul::new(&bank, m).unwrap()]).unwrap();
    let x = vec![0.25f32; (m * k) as usize];
    let mut y1 = vec![0f32; (m * n) as usize];
    assert!(matches!(
        batch.mul_mat(&[&x, &x], &mut [&mut y1]),
        Err(Error::ShapeMismatch {
            expected: 1,
            actual: 2,
            ..
        })
    ));
    assert!(matches!(
        batch.mul_mat(&[&x], &mut []),
        Err(Error::ShapeMismatch {
            expected: 1,
            actual: 0,
            ..
        })
    ));
    batch.mul_mat(&[&x], &mut [&mut y1]).unwrap();
    // The bank still works after all of that.
    let ok = mm.run_i8(&vec![1i8; (m * k) as usize]).unwrap();
    assert!(ok.iter().all(|&v| v == k as i32));
}

/// Compiles only if `T` can be held by a backend: owned, shareable across threads.
fn assert_owned<T: Send + Sync + 'static>() {}

/// A layer as a backend holds it.
struct Layer {
    bank: Arc<WeightBank>,
    mm: Matmul,
}

/// `WeightBank`, `Matmul`, `MatmulBatch` and `Device` are `Send + Sync + 'static`; a bank
/// and matmul moved into a struct and to another thread still run there (exactly); and
/// dropping the matmul and the bank frees every buffer they allocated.
#[test]
fn handles_are_owned_and_free_their_buffers() {
    assert_owned::<WeightBank>();
    assert_owned::<Matmul>();
    assert_owned::<MatmulBatch>();
    assert_owned::<Device>();
    let (m, k, n) = (3usize, 40usize, 50usize);
    let mut rng = Rng(0x5eed_0008);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
    for spec in SPECS {
        let dev = open(spec);
        let before = dev.live_buffers();
        let layer = {
            let bank = Arc::new(WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w).unwrap());
            let mm = Matmul::new(&bank, m as u32).unwrap();
            Layer { bank, mm }
        };
        assert!(dev.live_buffers() > before);
        let a2 = a.clone();
        let mut layer = std::thread::spawn(move || {
            let mut layer = layer;
            let got = layer.mm.run_i8(&a2).unwrap();
            (layer, got)
        })
        .join()
        .map(|(layer, got)| {
            assert_eq!(got, want, "{spec} on another thread");
            layer
        })
        .unwrap();
        // Back on this thread, it still runs.
        assert_eq!(layer.mm.run_i8(&a).unwrap(), want, "{spec} back");
        assert_eq!(Arc::strong_count(&layer.bank), 2);
        drop(layer);
        assert_eq!(
            dev.live_buffers(),
            before,
            "{spec}: buffers left after drop"
        );
    }
}

/// Distinct column tiles `(n0, nt)` of each core of `plan`.
fn columns_per_core(plan: &Plan) -> Vec<u32> {
    let mut tiles: Vec<BTreeSet<(u32, u32)>> = vec![BTreeSet::new(); plan.per_core.len()];
    for t in &plan.tasks {
        tiles[t.core as usize].insert((t.n0, t.nt));
    }
    tiles
        .iter()
        .map(|s| s.iter().map(|&(_, nt)| nt).sum())
        .collect()
}

/// N = 4096 on 3 cores: three chains with 1376, 1376 and 1344 columns (contiguous, all
/// of N), and the product is exact.
#[test]
fn wide_n_splits_columns_evenly_over_three_cores() {
    let (m, k, n) = (2usize, 64usize, 4096usize);
    let mut rng = Rng(0x5eed_0009);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
    for spec in SPECS {
        let dev = open(spec);
        let bank = Arc::new(WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w).unwrap());
        let opts = MatmulOptions::default().cores(3);
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        assert_eq!(mm.plan().per_core.len(), 3);
        assert_eq!(columns_per_core(mm.plan()), [1376, 1376, 1344]);
        // Contiguous: core c starts where core c - 1 ends.
        let starts: Vec<u32> = (0..3)
            .map(|c| {
                let p = mm.plan();
                p.tasks
                    .iter()
                    .filter(|t| t.core == c)
                    .map(|t| t.n0)
                    .min()
                    .unwrap()
            })
            .collect();
        assert_eq!(starts, [0, 1376, 2752]);
        assert_eq!(mm.run_i8(&a).unwrap(), want, "{spec}");
    }
}

/// N = 32 (one column granule) with M = 300 on 3 cores: the M tiles are split, every
/// core is used, and the product is exact.
#[test]
fn small_n_splits_m_over_cores() {
    let (m, k, n) = (300usize, 64usize, 32usize);
    let mut rng = Rng(0x5eed_000a);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
    for spec in SPECS {
        let dev = open(spec);
        let bank = Arc::new(WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w).unwrap());
        let opts = MatmulOptions::default().cores(3);
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        let plan = mm.plan();
        assert_eq!(plan.per_core.len(), 3);
        assert!(plan.per_core.iter().all(|&c| c > 0));
        // Every core covers all columns of its own rows; together, every row once.
        let mut rows: Vec<(u32, u32)> = plan.tasks.iter().map(|t| (t.m0, t.rows)).collect();
        rows.sort();
        rows.dedup();
        assert_eq!(rows.iter().map(|&(_, r)| r).sum::<u32>(), m as u32);
        let cores_of_rows: BTreeSet<u32> = plan.tasks.iter().map(|t| t.core).collect();
        assert_eq!(cores_of_rows.len(), 3);
        assert_eq!(mm.run_i8(&a).unwrap(), want, "{spec}");
    }
}

/// `cores(3)` is a maximum: a 2×64×32 product (one M tile, one column granule) runs on
/// one core, without error, exactly.
#[test]
fn tiny_product_runs_on_one_core() {
    let (m, k, n) = (2usize, 64usize, 32usize);
    let mut rng = Rng(0x5eed_000b);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
    for spec in SPECS {
        let dev = open(spec);
        let bank = Arc::new(WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w).unwrap());
        let opts = MatmulOptions::default().cores(3);
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        assert_eq!(mm.plan().per_core.len(), 1);
        assert_eq!(mm.plan().cores_used(), 1);
        assert_eq!(mm.run_i8(&a).unwrap(), want, "{spec}");
    }
}

/// A `MatmulBatch` of three matmuls (a quantised int8 bank, an fp16 bank and a quantised
/// int4 bank, each of its own N and M) gives bit for bit what each member gives alone,
/// in one submission (counted in a trace recorded in memory), while each member alone
/// is one submission.
#[test]
fn batch_equals_members_alone_in_one_submission() {
    let mut rng = Rng(0x5eed_000c);
    let k = 96usize;
    let shapes = [(3usize, 64usize), (5, 100), (2, 130)];
    let ws: Vec<Vec<f32>> = shapes
        .iter()
        .map(|&(_, n)| (0..n * k).map(|_| rng.float()).collect())
        .collect();
    let xs: Vec<Vec<f32>> = shapes
        .iter()
        .map(|&(m, _)| (0..m * k).map(|_| rng.float() * 3.0).collect())
        .collect();
    for spec in SPECS {
        let dev = open(spec);
        let make = |i: usize| {
            let (m, n) = shapes[i];
            let bank = match i {
                0 => WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &ws[i], Dtype::Int8),
                1 => WeightBank::from_f32_nk(&dev, n as u32, k as u32, &ws[i]),
                _ => WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &ws[i], Dtype::Int4),
            };
            Matmul::new(&Arc::new(bank.unwrap()), m as u32).unwrap()
        };
        let mut alone: Vec<Vec<f32>> = Vec::new();
        for (i, &(m, n)) in shapes.iter().enumerate() {
            let mut mm = make(i);
            let mut y = vec![0f32; m * n];
            let subs = submissions(&dev, || mm.mul_mat(&xs[i], &mut y).unwrap());
            assert_eq!(subs, 1, "{spec} member {i} alone");
            alone.push(y);
        }
        let mut batch = MatmulBatch::new((0..3).map(make).collect()).unwrap();
        assert_eq!(batch.members().len(), 3);
        let mut ys: Vec<Vec<f32>> = shapes.iter().map(|&(m, n)| vec![0f32; m * n]).collect();
        let subs = submissions(&dev, || {
            let inputs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(Vec::as_mut_slice).collect();
            batch.mul_mat(&inputs, &mut outs).unwrap();
        });
        assert_eq!(subs, 1, "{spec}: the batch is one submission");
        for (i, (y, a)) in ys.iter().zip(&alone).enumerate() {
            let bits = |v: &[f32]| v.iter().map(|t| t.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(y), bits(a), "{spec} member {i}");
        }
    }
}

/// A batch of two int8 matmuls of different N: each member's result equals the exact
/// integer product (through `mul_mat` with a row maximum of 127, so the row scale is 1
/// and the results are the integers themselves).
#[test]
fn batch_of_int8_members_is_exact() {
    let mut rng = Rng(0x5eed_000d);
    let (m, k) = (4usize, 70usize);
    let mut a = ints(&mut rng, m * k, -127, 127);
    for i in 0..m {
        a[i * k] = 127;
    }
    let x: Vec<f32> = a.iter().map(|&v| v as f32).collect();
    for spec in SPECS {
        let dev = open(spec);
        let ns = [40usize, 200];
        let ws: Vec<Vec<i8>> = ns
            .iter()
            .map(|&n| ints(&mut rng, n * k, -128, 127))
            .collect();
        let members = ns
            .iter()
            .zip(&ws)
            .map(|(&n, w)| {
                let bank = WeightBank::from_i8_nk(&dev, n as u32, k as u32, w).unwrap();
                Matmul::new(&Arc::new(bank), m as u32).unwrap()
            })
            .collect();
        let mut batch = MatmulBatch::new(members).unwrap();
        let (mut y0, mut y1) = (vec![0f32; m * ns[0]], vec![0f32; m * ns[1]]);
        batch.mul_mat(&[&x, &x], &mut [&mut y0, &mut y1]).unwrap();
        for (y, (&n, w)) in [y0, y1].iter().zip(ns.iter().zip(&ws)) {
            let want: Vec<f32> = cpu_nk(&wide(&a), &wide(w), m, k, n)
                .iter()
                .map(|&v| v as f32)
                .collect();
            assert_eq!(y, &want, "{spec} N={n}");
        }
    }
}

/// Checks the asynchronous calls on `spec` against the blocking ones: `submit_i8` then
/// `wait_i32_into` equals `run_i8` (and the CPU product); `submit_mul_mat` then
/// `wait_f32_into` equals `mul_mat` bit for bit, on an int8 quantised bank and on an
/// fp16 bank; each on at most 1 and at most 3 cores.
fn check_async(spec: &str) {
    let mut rng = Rng(0x5eed_000e);
    let (m, k, n) = (6usize, 120usize, 72usize);
    let w8 = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let wf: Vec<f32> = (0..n * k).map(|_| rng.float()).collect();
    let x: Vec<f32> = (0..m * k).map(|_| rng.float()).collect();
    let deadline = || Instant::now() + Duration::from_secs(10);
    let dev = open(spec);
    for cores in [1, 3] {
        let opts = MatmulOptions::default().cores(cores);
        let bank = Arc::new(WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w8).unwrap());
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        let mut out = vec![0i32; m * n];
        let pending: PendingMatmul<'_> = mm
            .submit_i8(&a)
            .unwrap_or_else(|e| panic!("{spec} submit_i8 on {cores} core(s): {e:?}"));
        pending.wait_i32_into(deadline(), &mut out).unwrap();
        assert_eq!(out, as_i32(&cpu_nk(&wide(&a), &wide(&w8), m, k, n)));
        assert_eq!(out, mm.run_i8(&a).unwrap(), "{spec} submit_i8");

        let banks = [
            WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &wf, Dtype::Int8).unwrap(),
            WeightBank::from_f32_nk(&dev, n as u32, k as u32, &wf).unwrap(),
        ];
        for bank in banks {
            let dtype = bank.layout().dtype;
            let mut mm = Matmul::with_options(&Arc::new(bank), m as u32, opts).unwrap();
            let (mut y1, mut y2) = (vec![0f32; m * n], vec![0f32; m * n]);
            mm.submit_mul_mat(&x)
                .unwrap_or_else(|e| panic!("{spec} submit_mul_mat on {cores} core(s): {e:?}"))
                .wait_f32_into(deadline(), &mut y1)
                .unwrap();
            mm.mul_mat(&x, &mut y2).unwrap();
            let bits = |v: &[f32]| v.iter().map(|t| t.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&y1), bits(&y2), "{spec} {dtype:?} submit_mul_mat");
        }
    }
}

/// Asynchronous calls on the rocket kernel equal the blocking calls ([`check_async`]).
#[test]
fn async_submissions_equal_blocking_calls_on_rocket() {
    check_async("emu:rocket");
}

/// Asynchronous calls on the vendor kernel equal the blocking calls ([`check_async`]).
#[test]
fn async_submissions_equal_blocking_calls_on_vendor() {
    check_async("emu");
}

/// With no `RKNPU_DEVICE` and no NPU, `Device::open_or_emulated` opens the emulated
/// kernel, which says so in its info (skipped when `RKNPU_DEVICE` is set).
#[test]
fn open_or_emulated_falls_back_to_the_emulator() {
    if std::env::var_os("RKNPU_DEVICE").is_some_and(|v| !v.is_empty()) {
        eprintln!("RKNPU_DEVICE is set: skipped");
        return;
    }
    let dev = Device::open_or_emulated().unwrap();
    assert!(dev.info().emulated, "{}", dev.info());
    assert!(dev.emulator().is_some());
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

/// A result that leaves the int32 range is an error from `run_i8`, not a wrapped value:
/// K = 35·4096 channels of 127 × 127 sum to 2 311 786 240 > 2³¹ − 1.
#[test]
fn int8_result_outside_int32_is_an_error() {
    let (k, a, _) = long_k_case();
    let w = vec![127i8; k];
    let exact: i64 = 127 * 127 * k as i64;
    assert!(exact > i32::MAX as i64);
    let dev = open("emu");
    let bank = Arc::new(WeightBank::from_i8_nk(&dev, 1, k as u32, &w).unwrap());
    let mut mm = Matmul::new(&bank, 1).unwrap();
    assert!(mm.plan().layout.waves.len() > 1);
    let r = mm.run_i8(&a);
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
        let got = mm.run_i8(&a);
        assert_eq!(got, Ok(vec![want as i32]), "{spec}");
    }
}

/// The fp16 bound of [`fp16_bank_is_within_the_fp32_accumulation_bound`] for `out`
/// (M×N) of fp16 `a` (M×K) and `w` (N×K), plus, for fp16 results, the DPU's rounding of
/// the fp32 sum to fp16: half an fp16 ulp, `2⁻¹¹·|sum|`, or `2⁻²⁵` among subnormals.
fn check_f16(out: &[f32], a: &[f16], w: &[f16], (m, k, n): (usize, usize, usize), f16_out: bool) {
    for i in 0..m {
        for j in 0..n {
            let (mut exact, mut mag) = (0f64, 0f64);
            for kk in 0..k {
                let p = a[i * k + kk].to_f64() * w[j * k + kk].to_f64();
                exact += p;
                mag += p.abs();
            }
            let mut tol = (k as f64 + 1.0) * 2f64.powi(-24) * mag;
            if f16_out {
                tol += (exact.abs() + tol) * 2f64.powi(-11) + 2f64.powi(-25);
            }
            let got = out[i * n + j] as f64;
            assert!(
                (got - exact).abs() <= tol,
                "{m}x{k}x{n} ({i},{j}): {got} vs {exact}, bound {tol}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Random fp16 shapes (K 1..300, N 1..200, M 1..70) on at most 1 to 3 cores, fp32
    /// and fp16 results, within the bounds of [`check_f16`].
    #[test]
    fn fp16_products_of_random_shapes_are_within_bound(
        k in 1usize..300,
        n in 1usize..200,
        m in 1usize..70,
        cores in 1u32..=3,
        f16_out in any::<bool>(),
        rocket in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dev = open(SPECS[usize::from(rocket)]);
        let mut rng = Rng(seed | 1);
        let w: Vec<f16> = (0..n * k).map(|_| f16::from_f32(rng.float())).collect();
        let a: Vec<f16> = (0..m * k).map(|_| f16::from_f32(rng.float())).collect();
        let bank = Arc::new(WeightBank::from_f16_nk(&dev, n as u32, k as u32, &w).unwrap());
        let mut opts = MatmulOptions::default().cores(cores);
        if f16_out {
            opts = opts.fp16_out();
        }
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        let out = mm.run_f16(&a).unwrap();
        check_f16(&out, &a, &w, (m, k, n), f16_out);
    }
}

/// A bank's packed bytes (`packed`) loaded again with `from_packed` give the same
/// results: int8, fp16, and int4 through W4A8 (whose correction needs each channel's
/// weight sum, recomputed from the packed bytes) and int4 × int4, all exact or equal.
#[test]
fn packed_bytes_round_trip_through_from_packed() {
    let mut rng = Rng(0x5eed_000f);
    let (m, k, n) = (5usize, 150usize, 90usize);
    let dev = open("emu");
    let w8 = ints(&mut rng, n * k, -128, 127);
    let w4 = ints(&mut rng, n * k, -8, 7);
    let a = ints(&mut rng, m * k, -128, 127);
    let a4: Vec<i32> = (0..m * k).map(|_| rng.int(-8, 7)).collect();
    for (w, bank) in [
        (
            &w8,
            WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w8).unwrap(),
        ),
        (
            &w4,
            WeightBank::from_i4_nk(&dev, n as u32, k as u32, &w4).unwrap(),
        ),
    ] {
        let bytes = bank.packed().unwrap();
        assert_eq!(bytes.len() as u64, bank.layout().bytes);
        let again = Arc::new(WeightBank::from_packed(&dev, bank.layout(), &bytes).unwrap());
        let want = as_i32(&cpu_nk(&wide(&a), &wide(w), m, k, n));
        let dtype = again.layout().dtype;
        let got = Matmul::new(&again, m as u32).unwrap().run_i8(&a).unwrap();
        assert_eq!(got, want, "{dtype:?} from_packed");
        if dtype == Dtype::Int4 {
            let opts = MatmulOptions::default().activations(Activations::Int4);
            let got = Matmul::with_options(&again, m as u32, opts)
                .unwrap()
                .run_int(&a4)
                .unwrap();
            assert_eq!(got, cpu_nk(&wide(&a4), &wide(w), m, k, n));
        }
    }
    let wf: Vec<f16> = (0..n * k).map(|_| f16::from_f32(rng.float())).collect();
    let af: Vec<f16> = (0..m * k).map(|_| f16::from_f32(rng.float())).collect();
    let bank = Arc::new(WeightBank::from_f16_nk(&dev, n as u32, k as u32, &wf).unwrap());
    let again =
        Arc::new(WeightBank::from_packed(&dev, bank.layout(), &bank.packed().unwrap()).unwrap());
    let x = Matmul::new(&bank, m as u32).unwrap().run_f16(&af).unwrap();
    let y = Matmul::new(&again, m as u32).unwrap().run_f16(&af).unwrap();
    assert_eq!(x, y);
}

/// Quantised layers with rows of zeros: their scale is 0 and every result of the row is
/// exactly 0, while the other rows are unaffected (equal to the same rows run alone).
#[test]
fn quantised_rows_of_zeros_give_zeros() {
    let mut rng = Rng(0x5eed_0010);
    let (k, n) = (64usize, 40usize);
    let w: Vec<f32> = (0..n * k).map(|_| rng.float()).collect();
    let row: Vec<f32> = (0..k).map(|_| rng.float()).collect();
    let mut x = vec![0f32; 3 * k];
    x[k..2 * k].copy_from_slice(&row);
    let dev = open("emu");
    for dtype in [Dtype::Int8, Dtype::Int4] {
        let bank =
            Arc::new(WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &w, dtype).unwrap());
        let mut y = vec![f32::NAN; 3 * n];
        Matmul::new(&bank, 3).unwrap().mul_mat(&x, &mut y).unwrap();
        let mut alone = vec![f32::NAN; n];
        Matmul::new(&bank, 1)
            .unwrap()
            .mul_mat(&row, &mut alone)
            .unwrap();
        assert!(
            y[..n].iter().chain(&y[2 * n..]).all(|&v| v == 0.0),
            "{dtype:?}"
        );
        assert_eq!(&y[n..2 * n], &alone[..], "{dtype:?}");
    }
}

/// A bank and matmul keep the device open: with every other `Device` handle dropped,
/// the matmul still runs exactly.
#[test]
fn a_matmul_outlives_the_device_handle() {
    let (m, k, n) = (2usize, 33usize, 17usize);
    let mut rng = Rng(0x5eed_0011);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    for spec in SPECS {
        let mut mm = {
            let dev = open(spec);
            let bank = Arc::new(WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w).unwrap());
            Matmul::new(&bank, m as u32).unwrap()
        };
        let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
        assert_eq!(mm.run_i8(&a).unwrap(), want, "{spec}");
    }
}

/// int8 K = 3500 (a K tile in (3072, 4096)): the default bank layout serves M = 5 (it
/// takes two waves) exactly; a single-token layout (`for_max_rows(.., 1)`, one wave)
/// serves M = 1..=4 exactly and refuses M = 5 with an error. Also on vendor 0.9.6.
#[test]
fn single_token_layouts_serve_few_rows_only() {
    let (k, n) = (3500usize, 40usize);
    let mut rng = Rng(0x5eed_0012);
    let w = ints(&mut rng, n * k, -128, 127);
    let w32: Vec<i32> = w.iter().map(|&v| v as i32).collect();
    let a = ints(&mut rng, 5 * k, -128, 127);
    let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), 5, k, n));
    for spec in ["emu", "emu:rocket", "emu:vendor-0.9.6"] {
        let dev = open(spec);
        let bank = Arc::new(WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w).unwrap());
        assert!(bank.layout().waves.len() >= 2);
        let got = Matmul::new(&bank, 5).unwrap().run_i8(&a).unwrap();
        assert_eq!(got, want, "{spec} default layout");

        let layout = WeightLayout::for_max_rows(k as u32, n as u32, Dtype::Int8, 1).unwrap();
        assert_eq!(layout.waves.len(), 1);
        let single = Arc::new(WeightBank::from_int_nk(&dev, &layout, &w32).unwrap());
        for m in 1..=4usize {
            let got = Matmul::new(&single, m as u32)
                .unwrap()
                .run_i8(&a[..m * k])
                .unwrap();
            assert_eq!(got, want[..m * n], "{spec} single-token layout, M={m}");
        }
        assert!(Matmul::new(&single, 5).is_err(), "{spec} M=5");
    }
}

/// On the asynchronous emulated kernels a submitted matmul (and batch) is not done while
/// the kernel's worker is held, the CPU goes on meanwhile, and once released the results
/// equal the CPU product; on the vendor kernel a 3-core matmul is one job per core's chain.
#[test]
fn pending_matmuls_report_is_done_and_overlap_the_cpu() {
    for spec in ["emu:async", "emu:rocket:async"] {
        let dev = open(spec);
        let emu = dev.emulator().expect("an emulated kernel");
        let (m, k, n) = (5usize, 200usize, 300usize);
        let mut rng = Rng(77);
        let w: Vec<i8> = (0..n * k).map(|_| rng.int(-128, 127) as i8).collect();
        let a: Vec<i8> = (0..m * k).map(|_| rng.int(-128, 127) as i8).collect();
        let want = cpu_nk(&wide(&a), &wide(&w), m, k, n);
        let bank = Arc::new(WeightBank::from_i8_nk(&dev, n as u32, k as u32, &w).unwrap());
        let mut mm =
            Matmul::with_options(&bank, m as u32, MatmulOptions::default().cores(3)).unwrap();
        let hold = emu.hold_worker();
        let pending = mm.submit_i8(&a).unwrap();
        assert!(
            !pending.is_done().unwrap(),
            "{spec}: done while the worker is held"
        );
        // The CPU is free meanwhile.
        let busy: i64 = (0..1000i64).sum();
        assert_eq!(busy, 499_500);
        drop(hold);
        let mut out = vec![0i32; m * n];
        pending
            .wait_i32_into(Instant::now() + Duration::from_secs(10), &mut out)
            .unwrap();
        let got: Vec<i64> = out.iter().map(|&v| v as i64).collect();
        assert_eq!(got, want, "{spec}");

        let mut batch = MatmulBatch::new(vec![Matmul::new(&bank, 1).unwrap()]).unwrap();
        let x = vec![1.0f32; k];
        let hold = emu.hold_worker();
        let pending = batch.submit(&[&x]).unwrap();
        assert!(!pending.is_done().unwrap(), "{spec}: batch done while held");
        drop(hold);
        let mut y = vec![0f32; n];
        pending
            .wait_f32_into(Instant::now() + Duration::from_secs(10), &mut [&mut y])
            .unwrap();
        // x is all ones: quantised to 127 with scale 1/127, so y[j] = Σ w[j][·] exactly.
        for (j, &v) in y.iter().enumerate() {
            let s: i64 = w[j * k..(j + 1) * k].iter().map(|&v| v as i64).sum();
            assert!(
                (v as f64 - s as f64).abs() <= 1e-3 * (s.abs() as f64 + 1.0),
                "{spec} col {j}: {v} vs {s}"
            );
        }
    }
}

/// What the NPU's dequantisation computes for one result: the int32 sum cast to fp32,
/// times the row scale and then the channel scale, each read as fp16, each product
/// rounded to fp32 (docs/simulator.md, "Dequantisation task").
fn npu_dequant_value(acc: i64, row: f32, channel: f32) -> f32 {
    let h = |s: f32| f16::from_f32(s).to_f32();
    (acc as f32 * h(row)) * h(channel)
}

/// `mul_mat` with the dequantisation on the NPU gives, bit for bit, the value the DPU's
/// arithmetic defines, for several M tiles, more than 1024 columns (two dequantisation
/// tasks per row) and 1 or 3 cores, blocking and asynchronous; a row whose scale fp16
/// cannot hold is scaled on the host instead; it stays within the fp16 rounding of the
/// scales of the host path.
#[test]
fn dequantisation_on_the_npu_is_the_dpus_arithmetic() {
    let (k, n) = (96usize, 1100usize);
    let mut rng = Rng(0x5eed_00de);
    let w: Vec<f32> = (0..n * k).map(|_| rng.float() - 0.5).collect();
    let (wq, ws) = quant::quantize_weights_i8(&w, n, k).unwrap();
    for spec in ["emu", "emu:rocket", "emu:async"] {
        let dev = open(spec);
        let bank = Arc::new(
            WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &w, Dtype::Int8).unwrap(),
        );
        for (m, cores) in [(1usize, 1u32), (3, 3), (130, 3)] {
            let mut x: Vec<f32> = (0..m * k).map(|_| 4.0 * rng.float() - 2.0).collect();
            // Row 0 so small that its scale is below fp16's normal range: host-scaled.
            for v in &mut x[..k] {
                *v *= 1e-6;
            }
            let (xq, xs) = quant::quantize_rows_i8(&x, k).unwrap();
            let acc = cpu_nk(&wide(&xq), &wide(&wq), m, k, n);
            let opts = MatmulOptions::default().cores(cores).dequantize_on_npu();
            let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
            let mut y = vec![0f32; m * n];
            mm.mul_mat(&x, &mut y).unwrap();
            for (i, (&got, &a)) in y.iter().zip(&acc).enumerate() {
                let (r, c) = (i / n, i % n);
                let want = if r == 0 {
                    npu_dequant_value(a, 1.0, ws[c]) * xs[0]
                } else {
                    npu_dequant_value(a, xs[r], ws[c])
                };
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{spec} m {m} [{r}][{c}]: {got} vs {want}"
                );
            }
            // Against the host path: the scales' fp16 rounding only.
            let mut host =
                Matmul::with_options(&bank, m as u32, MatmulOptions::default().cores(cores))
                    .unwrap();
            let mut yh = vec![0f32; m * n];
            host.mul_mat(&x, &mut yh).unwrap();
            for (&a, &b) in y.iter().zip(&yh) {
                assert!(
                    (a - b).abs() <= 2.0 * 2f32.powi(-11) * b.abs() + 1e-30,
                    "{a} vs {b}"
                );
            }
            // Asynchronously: the same bits.
            let pending = mm.submit_mul_mat(&x).unwrap();
            let mut ya = vec![0f32; m * n];
            pending
                .wait_f32_into(Instant::now() + Duration::from_secs(10), &mut ya)
                .unwrap();
            assert_eq!(ya, y, "{spec} m {m} asynchronous");
            // Integer results are not what this program computes.
            assert!(matches!(mm.run_i8(&xq), Err(Error::Precision { .. })));
        }
    }
}

/// NPU dequantisation is offered where its register path is: int8 weights, one K wave,
/// fp16-normal channel scales; elsewhere a typed error.
#[test]
fn dequantisation_on_the_npu_is_refused_outside_its_path() {
    let dev = open("emu");
    let npu = MatmulOptions::default().dequantize_on_npu();
    // Two K waves: the DPU casts one task's sums.
    let long = Arc::new(WeightBank::from_i8_nk(&dev, 32, 5000, &vec![1; 32 * 5000]).unwrap());
    assert!(matches!(
        Matmul::with_options(&long, 1, npu),
        Err(Error::Unsupported { .. })
    ));
    // int4 and fp16 banks.
    let i4 = Arc::new(WeightBank::from_i4_nk(&dev, 64, 64, &vec![1; 64 * 64]).unwrap());
    assert!(matches!(
        Matmul::with_options(&i4, 1, npu),
        Err(Error::Precision { .. })
    ));
    let f = Arc::new(WeightBank::from_f32_nk(&dev, 32, 32, &vec![0.5; 32 * 32]).unwrap());
    assert!(matches!(
        Matmul::with_options(&f, 1, npu),
        Err(Error::Precision { .. })
    ));
    // A channel scale fp16 holds only as a subnormal.
    let tiny = WeightBank::from_i8_nk(&dev, 32, 32, &vec![1; 32 * 32])
        .unwrap()
        .with_scales(&[1e-7; 32])
        .unwrap();
    let tiny = Arc::new(tiny);
    assert!(matches!(
        Matmul::with_options(&tiny, 1, npu),
        Err(Error::OutOfRange { index: 0, .. })
    ));
}

/// A bf16 bank (`from_bf16_nk`) with bf16 activations: within the bound of fp32
/// summation, `(K + 1)·2⁻²⁴·Σ|a·b|` (bf16 products are exact in fp32), for one and two
/// K waves; `mul_mat` rounds f32 activations to bf16 first and agrees with
/// `run_bf16_into` on the rounded values bit for bit.
#[test]
fn bf16_banks_are_within_the_fp32_accumulation_bound() {
    use half::bf16;
    for (m, k, n) in [(3usize, 100usize, 40usize), (2, 5000, 33)] {
        let mut rng = Rng(0x5eed_0b16 + k as u64);
        let w: Vec<bf16> = (0..n * k)
            .map(|_| bf16::from_f32(rng.float() * 4.0 - 2.0))
            .collect();
        let a: Vec<bf16> = (0..m * k)
            .map(|_| bf16::from_f32(rng.float() * 4.0 - 2.0))
            .collect();
        for spec in SPECS {
            let dev = open(spec);
            let bank = Arc::new(WeightBank::from_bf16_nk(&dev, n as u32, k as u32, &w).unwrap());
            let mut mm = Matmul::new(&bank, m as u32).unwrap();
            let mut out = vec![0f32; m * n];
            mm.run_bf16_into(&a, &mut out).unwrap();
            within_fp32_bound(
                spec,
                &wide_f(&a, bf16::to_f64),
                &wide_f(&w, bf16::to_f64),
                &out,
                (m, k, n),
            );
            let x: Vec<f32> = a.iter().map(|v| v.to_f32()).collect();
            let mut y = vec![0f32; m * n];
            mm.mul_mat(&x, &mut y).unwrap();
            assert_eq!(y, out, "{spec}: mul_mat on values bf16 holds exactly");
            assert!(matches!(
                mm.run_i8(&vec![0; m * k]),
                Err(Error::Precision { .. })
            ));
        }
    }
}

/// The cost model's bytes (from each task's DMA ranges) are the bytes the simulator's DMA
/// engines move when the plan runs on the emulated vendor kernel: feature reads, weight
/// reads and output writes, engine by engine, for int8, int4 and fp16 plans on 1-3 cores.
#[test]
fn the_cost_model_counts_what_the_simulator_moves() {
    use rknpu_driver::kernels::matmul::MatmulSpec;
    use rknpu_driver::kernels::matmul::cost::HardwareProfile;
    let dev = open("emu:vendor-0.9.6");
    let emu = dev.emulator().unwrap();
    for (m, k, n, dtype, cores) in [
        (1, 4096, 4096, Dtype::Int8, 3),
        (130, 300, 200, Dtype::Int8, 2),
        (9, 1000, 130, Dtype::Int4, 3),
        (20, 200, 96, Dtype::Fp16, 1),
    ] {
        let plan = Plan::new(MatmulSpec::new(m, k, n, dtype).on_cores(cores)).unwrap();
        let cost = plan.cost(&HardwareProfile::rk3588()).unwrap();
        let bank = if dtype == Dtype::Fp16 {
            WeightBank::from_f32_kn(&dev, &plan.layout, &vec![0.5; (k * n) as usize])
        } else {
            WeightBank::from_int_kn(&dev, &plan.layout, &vec![1; (k * n) as usize])
        };
        let bank = Arc::new(bank.unwrap());
        let mut mm = Matmul::for_plan(&bank, plan).unwrap();
        emu.reset_dma_counters();
        if dtype == Dtype::Fp16 {
            mm.run_f32(&vec![1.0; (m * k) as usize]).unwrap();
        } else {
            mm.run_int(&vec![1; (m * k) as usize]).unwrap();
        }
        let what = format!("{m}x{k}x{n} {dtype:?} on {cores}");
        common::assert_dma_is_the_cost(&what, &emu.dma_counters(), &cost, 0);
    }
}

/// A bank packed in the layout the cost model prefers for prompts of 128 rows (narrower
/// K waves) serves every M exactly, as the layout for any M does; a bank's weights of
/// another type than its layout's are a typed error.
#[test]
fn a_bank_in_a_chosen_layout_serves_any_m() {
    use rknpu_driver::compute::matmul::Weights;
    use rknpu_driver::kernels::matmul::cost::HardwareProfile;
    let (k, n) = (4096usize, 96usize);
    let mut rng = Rng(0x5eed_1a70);
    let w = ints(&mut rng, n * k, -128, 127);
    let dev = open("emu");
    let layout = WeightLayout::cheapest_for(
        k as u32,
        n as u32,
        Dtype::Int8,
        (128, OutType::Int32, 3),
        &HardwareProfile::rk3588(),
    )
    .unwrap();
    assert!(
        layout.waves.len() > 1,
        "prompts take narrower waves: {layout:?}"
    );
    let bank = Arc::new(WeightBank::from_nk_in(&dev, &layout, Weights::I8(&w)).unwrap());
    for m in [1usize, 128] {
        let a = ints(&mut rng, m * k, -128, 127);
        let got = Matmul::new(&bank, m as u32).unwrap().run_i8(&a).unwrap();
        assert_eq!(got, as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n)), "M={m}");
    }
    assert!(matches!(
        WeightBank::from_nk_in(&dev, &layout, Weights::F16(&[])),
        Err(Error::Precision { .. })
    ));
}
