//! Float and quantised banks: fp16 and bf16 within the fp32 accumulation bound,
//! quantised layers within the quantisation bound, per-channel scales, and
//! dequantisation on the NPU.

use super::*;

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

/// fp16 banks: `run_into` of `f16` against an f64 reference. The inputs are fp16 values, so
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
            let bank =
                Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::F16(&w)).unwrap());
            let mut mm = Matmul::new(&bank, m as u32).unwrap();
            assert_eq!(mm.activations(), Activations::Fp16);
            let mut out = vec![f32::NAN; m * n];
            mm.run_into(&a, &mut out).unwrap();
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

/// `mul_mat_quantized` with the output of `quant::quantize_rows_i8` gives bit for bit
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
            mm.mul_mat_quantized(&q, &scales, &mut y2).unwrap();
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
        let bank = WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w)).unwrap();
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
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::F16(&w)).unwrap());
        let mut opts = MatmulOptions::default().cores(cores);
        if f16_out {
            opts = opts.fp16_out();
        }
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        let out = mm.run::<_, f32>(&a).unwrap();
        check_f16(&out, &a, &w, (m, k, n), f16_out);
    }
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
            let pending = mm.submit::<f32>(&x).unwrap();
            let mut ya = vec![0f32; m * n];
            pending
                .wait(Instant::now() + Duration::from_secs(10), &mut ya)
                .unwrap();
            assert_eq!(ya, y, "{spec} m {m} asynchronous");
            // Integer results are not what this program computes.
            assert!(matches!(
                mm.run::<i8, i32>(&xq),
                Err(Error::Precision { .. })
            ));
        }
    }
}

/// With K in several waves each wave's tasks dequantise their own partial sums on the
/// NPU and the host adds the waves' results in wave order: bit for bit that sum of each
/// wave's DPU arithmetic, on one core and on three (which may split K), and within the
/// scales' fp16 rounding of the host path.
#[test]
fn dequantisation_on_the_npu_sums_several_k_waves() {
    let (k, n) = (9000usize, 96usize);
    let mut rng = Rng(0x5eed_0a7e);
    let w: Vec<f32> = (0..n * k).map(|_| rng.float() - 0.5).collect();
    let (wq, ws) = quant::quantize_weights_i8(&w, n, k).unwrap();
    for spec in SPECS {
        let dev = open(spec);
        let bank = Arc::new(
            WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &w, Dtype::Int8).unwrap(),
        );
        let waves = bank.layout().waves.clone();
        assert!(waves.len() >= 2, "{spec}: {} waves", waves.len());
        for (m, cores) in [(1usize, 1u32), (5, 3)] {
            let x: Vec<f32> = (0..m * k).map(|_| 4.0 * rng.float() - 2.0).collect();
            let (xq, xs) = quant::quantize_rows_i8(&x, k).unwrap();
            let opts = MatmulOptions::default().cores(cores).dequantize_on_npu();
            let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
            let mut y = vec![0f32; m * n];
            mm.mul_mat(&x, &mut y).unwrap();
            let mut want = vec![0f32; m * n];
            for (i, wave) in waves.iter().enumerate() {
                let (k0, kw) = (wave.k0 as usize, wave.kw as usize);
                let part = |v: &[i8], rows: usize| -> Vec<i64> {
                    (0..rows)
                        .flat_map(|r| v[r * k + k0..r * k + k0 + kw].iter().map(|&e| e.into()))
                        .collect()
                };
                let acc = cpu_nk(&part(&xq, m), &part(&wq, n), m, kw, n);
                for (j, (v, &a)) in want.iter_mut().zip(&acc).enumerate() {
                    let d = npu_dequant_value(a, xs[j / n], ws[j % n]);
                    *v = if i == 0 { d } else { *v + d };
                }
            }
            for (i, (&got, &exp)) in y.iter().zip(&want).enumerate() {
                assert_eq!(
                    got.to_bits(),
                    exp.to_bits(),
                    "{spec} m {m} [{i}]: {got} vs {exp}"
                );
            }
            let mut host =
                Matmul::with_options(&bank, m as u32, MatmulOptions::default().cores(cores))
                    .unwrap();
            let mut yh = vec![0f32; m * n];
            host.mul_mat(&x, &mut yh).unwrap();
            let scale = yh.iter().fold(0f32, |a, &b| a.max(b.abs()));
            for (&a, &b) in y.iter().zip(&yh) {
                assert!((a - b).abs() <= 4.0 * 2f32.powi(-11) * scale, "{a} vs {b}");
            }
        }
    }
}

/// NPU dequantisation is offered where its register path is: int8 weights and
/// fp16-normal channel scales; elsewhere a typed error.
#[test]
fn dequantisation_on_the_npu_is_refused_outside_its_path() {
    let dev = open("emu");
    let npu = MatmulOptions::default().dequantize_on_npu();
    // int4 and fp16 banks.
    let i4 = Arc::new(WeightBank::new(&dev, (64, 64), Weights::I4(&vec![1; 64 * 64])).unwrap());
    assert!(matches!(
        Matmul::with_options(&i4, 1, npu),
        Err(Error::Precision { .. })
    ));
    let f = Arc::new(WeightBank::new(&dev, (32, 32), Weights::F32(&vec![0.5; 32 * 32])).unwrap());
    assert!(matches!(
        Matmul::with_options(&f, 1, npu),
        Err(Error::Precision { .. })
    ));
    // A channel scale fp16 holds only as a subnormal.
    let tiny = WeightBank::new(&dev, (32, 32), Weights::I8(&vec![1; 32 * 32]))
        .unwrap()
        .with_scales(&[1e-7; 32])
        .unwrap();
    let tiny = Arc::new(tiny);
    assert!(matches!(
        Matmul::with_options(&tiny, 1, npu),
        Err(Error::OutOfRange { index: 0, .. })
    ));
}

/// A bf16 bank (`Weights::Bf16`) with bf16 activations: within the bound of fp32
/// summation, `(K + 1)·2⁻²⁴·Σ|a·b|` (bf16 products are exact in fp32), for one and two
/// K waves; `mul_mat` rounds f32 activations to bf16 first and agrees with
/// `run_into` of `bf16` on the rounded values bit for bit.
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
            let bank =
                Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::Bf16(&w)).unwrap());
            let mut mm = Matmul::new(&bank, m as u32).unwrap();
            let mut out = vec![0f32; m * n];
            mm.run_into(&a, &mut out).unwrap();
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
                mm.run::<i8, i32>(&vec![0; m * k]),
                Err(Error::Precision { .. })
            ));
        }
    }
}
