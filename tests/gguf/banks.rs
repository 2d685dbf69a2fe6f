//! Weight banks loaded from a file: their values, and their products on the emulated
//! kernel against a CPU reference.

use super::*;
use crate::common::reference::{product, wide};
use rknpu_driver::compute::matmul::Weights;

fn open() -> Device {
    Device::open_spec("emu").expect("the emulated kernel")
}

#[test]
fn bank_values_are_the_quantised_weights_times_their_scales() {
    // Shapes with padded channels and several K waves (int8: waves of at most 4096).
    let dev = open();
    let mut rng = Rng::from_seed(3);
    for (dtype, n, k) in [
        (Dtype::Int8, 40, 4130),
        (Dtype::Int4, 70, 999),
        (Dtype::Int4, 33, 64),
    ] {
        let w = values(&mut rng, n * k, 1.5);
        let bank = WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &w, dtype).unwrap();
        let (q, s) = match dtype {
            Dtype::Int8 => quant::quantize_weights_i8(&w, n, k).unwrap(),
            _ => quant::quantize_weights_i4(&w, n, k).unwrap(),
        };
        let want: Vec<f32> = q
            .iter()
            .enumerate()
            .map(|(i, &v)| v as f32 * s[i / k])
            .collect();
        assert_eq!(bank_values(&bank).unwrap(), want, "{dtype:?} {n}x{k}");
    }
    let w = values(&mut rng, 20 * 77, 3.0);
    let bank = WeightBank::new(&dev, (20, 77), Weights::F32(&w)).unwrap();
    let want: Vec<f32> = w.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    assert_eq!(bank_values(&bank).unwrap(), want);
}

#[test]
fn banks_from_a_gguf_file_multiply_within_the_reported_error() {
    let (n, k, m) = (48usize, 160usize, 3usize);
    let mut rng = Rng::from_seed(4);
    let src = values(&mut rng, n * k, 0.8);
    let mut out = Writer::new();
    out.tensor_q8_0("w.q8_0", &[k as u64, n as u64], &src)
        .unwrap();
    out.tensor_q4_0("w.q4_0", &[k as u64, n as u64], &src)
        .unwrap();
    let h: Vec<f16> = src.iter().map(|&v| f16::from_f32(v)).collect();
    out.tensor_f16("w.f16", &[k as u64, n as u64], &h).unwrap();
    let g = Gguf::parse(&out.to_bytes()).unwrap();
    let dev = open();
    let x = values(&mut rng, m * k, 1.0);
    let cases = [
        ("w.q8_0", Dtype::Int8),
        ("w.q4_0", Dtype::Int4),
        ("w.f16", Dtype::Fp16),
        ("w.q8_0", Dtype::Fp16),
        ("w.q4_0", Dtype::Int8),
    ];
    for (name, dtype) in cases {
        let w = g.dequantize(name).unwrap();
        let (bank, report) = load_weights(&dev, &g, name, dtype).unwrap();
        assert_eq!(
            (report.n, report.k, report.bank),
            (n as u32, k as u32, dtype)
        );
        // The report against its own definition, from the per-channel steps: int8 and
        // int4 banks are within half a step (max|row| / 127 or / 7) of every value, fp16
        // banks within 2^-11 relative.
        let bound = w
            .chunks(k)
            .map(|row| {
                let amax = row.iter().fold(0f64, |a, &v| a.max(f64::from(v).abs()));
                match dtype {
                    Dtype::Int8 => amax / 127.0 * 0.5,
                    Dtype::Int4 => amax / 7.0 * 0.5,
                    _ => amax / 2048.0,
                }
            })
            .fold(0f64, f64::max);
        assert!(report.max_abs <= bound * 1.001, "{report}: bound {bound}");
        assert!((report.rms <= report.max_abs && report.rel_rms > 0.0) || report.max_abs == 0.0);
        if name == "w.f16" {
            assert_eq!(report.max_abs, 0.0, "an F16 tensor is an fp16 bank exactly");
        }

        let mut mm = Matmul::new(&Arc::new(bank), m as u32).unwrap();
        let mut y = vec![0f32; m * n];
        mm.mul_mat(&x, &mut y).unwrap();
        let want = product(&wide(&x), &w, m, k, n);
        // Error: the bank's (at most max_abs a weight, Σ|x| a result), the activations'
        // (int banks: int8 per row, half a step; fp16: 2^-11 relative) against the
        // bank's weights (|w| + max_abs), and f32 sums.
        for i in 0..m {
            let row = &x[i * k..(i + 1) * k];
            let sx: f64 = row.iter().map(|&v| f64::from(v).abs()).sum();
            let xstep = match dtype {
                Dtype::Int8 | Dtype::Int4 => {
                    row.iter().fold(0f64, |a, &v| a.max(f64::from(v).abs())) / 127.0 * 0.5
                }
                _ => 0.0,
            };
            for j in 0..n {
                let wrow = &w[j * k..(j + 1) * k];
                let sw: f64 = wrow
                    .iter()
                    .map(|&v| f64::from(v).abs() + report.max_abs)
                    .sum();
                let sxw: f64 = row
                    .iter()
                    .zip(wrow)
                    .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
                    .sum();
                let tol = sx * report.max_abs + sw * xstep + sxw * (1.0 / 1024.0) + 1e-5;
                let got = f64::from(y[i * n + j]);
                assert!(
                    (got - want[i * n + j]).abs() <= tol,
                    "{name} as {dtype:?} [{i}][{j}]: {got} vs {} (tolerance {tol})",
                    want[i * n + j]
                );
            }
        }
    }
    // Not a matrix; not a bank type; no such tensor.
    let mut out = Writer::new();
    out.tensor_f32("cube", &[32, 2, 2], &[0.0; 128]).unwrap();
    let g2 = Gguf::parse(&out.to_bytes()).unwrap();
    assert!(matches!(
        load_weights(&dev, &g2, "cube", Dtype::Fp16),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        load_weights(&dev, &g, "w.f16", Dtype::Int16),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        load_weights(&dev, &g, "none", Dtype::Int8),
        Err(Error::NoSuchTensor { .. })
    ));
}
