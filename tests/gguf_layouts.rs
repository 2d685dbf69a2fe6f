//! Every bank layout the library offers for each GGUF type of issue 24 (Q8_0, Q4_0,
//! Q4_1, Q5_0, Q4_K, Q5_K, Q6_K), side by side: fp16, per-channel int8 and int4
//! (`gguf::load_bank`), and the grouped int8 bank with the options `gguf::grouped_options`
//! gives it (for Q6_K also with one pass of activations). For each: the relative RMS error
//! of `mul_mat` against the f64 product of the file's weights, that error over llama.cpp's
//! CPU backend's on the same activations, and the bytes held over the tensor's bytes in
//! the file. Asserted: the grouped default is within 1.25x the CPU's error and 1 %,
//! within its size bound (1.15x for Q8_0, 2.0x otherwise), and the most accurate of the
//! layouts within that bound, as `rknpu matmul --gguf` assumes when it picks it.
//! `cargo test --release --test gguf_layouts -- --nocapture` prints the table that
//! docs/gguf.md ("Layouts compared") shows.

mod common;

use common::Rng;
use common::llama_cpu::q8_0_activations;
use common::reference::{product, rel};
use half::f16;
use rknpu_driver::compute::matmul::{Matmul, MatmulOptions, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::gguf::write::Writer;
use rknpu_driver::gguf::{GgmlType, Gguf, grouped_options, load_bank, load_grouped};
use rknpu_driver::kernels::single::Dtype;
use std::sync::Arc;

const K: usize = 1024;
const N: usize = 64;
const M: usize = 7;

/// Each type: its block's values and bytes, and the byte offsets of its fp16 scales
/// (`d`, and `dmin` or `m` where it has one).
const TYPES: [(GgmlType, usize, usize, &[usize]); 7] = [
    (GgmlType::Q8_0, 32, 34, &[0]),
    (GgmlType::Q4_0, 32, 18, &[0]),
    (GgmlType::Q4_1, 32, 20, &[0, 2]),
    (GgmlType::Q5_0, 32, 22, &[0]),
    (GgmlType::Q4_K, 256, 144, &[0, 2]),
    (GgmlType::Q5_K, 256, 176, &[0, 2]),
    (GgmlType::Q6_K, 256, 210, &[208]),
];

/// A file of one N×K tensor of each type, blocks of seeded random bytes with finite
/// scales in [0.001, 0.05) (as `.ci/write-gguf.py` writes its K-quant tensors).
fn file(rng: &mut Rng) -> Gguf {
    let mut out = Writer::new();
    for (ty, values, size, scales) in TYPES {
        let mut bytes = Vec::new();
        for _ in 0..N * K / values {
            let mut block: Vec<u8> = (0..size).map(|_| rng.int(0, 255) as u8).collect();
            for &at in scales {
                let d = f16::from_f32(0.001 + 0.049 * (rng.float() + 1.0) / 2.0);
                block[at..at + 2].copy_from_slice(&d.to_le_bytes());
            }
            bytes.extend(block);
        }
        out.tensor_raw(ty.name(), ty, &[K as u64, N as u64], bytes)
            .unwrap();
    }
    Gguf::parse(&out.to_bytes()).unwrap()
}

/// The relative RMS error of a matmul against `bank` made with `options`.
fn error(bank: WeightBank, options: MatmulOptions, x: &[f32], want: &[f64]) -> (f64, u64) {
    let held = bank.held_bytes();
    let mut mm = Matmul::with_options(&Arc::new(bank), M as u32, options).unwrap();
    let mut y = vec![0f32; M * N];
    mm.mul_mat(x, &mut y).unwrap();
    let y: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
    (rel(want, &y), held)
}

#[test]
fn the_grouped_default_is_the_most_accurate_layout_within_the_size_bound() {
    let mut rng = Rng(0x1a70);
    let g = file(&mut rng);
    let dev = Device::open_spec("emu").unwrap();
    let x: Vec<f32> = (0..M * K).map(|_| rng.float()).collect();
    let wide: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    eprintln!("| type | layout | error | x CPU | bytes x file |");
    eprintln!("| --- | --- | --- | --- | --- |");
    for (ty, ..) in TYPES {
        let name = ty.name();
        let file_bytes = g.tensor(name).unwrap().bytes() as f64;
        let w = g.dequantize(name).unwrap();
        let want = product(&wide, &w, M, K, N);
        let e_cpu = rel(&want, &product(&q8_0_activations(&x), &w, M, K, N));
        let bound = if ty == GgmlType::Q8_0 { 1.15 } else { 2.0 };
        let mut rows = Vec::new();
        for (layout, dtype) in [
            ("fp16", Dtype::Fp16),
            ("int8", Dtype::Int8),
            ("int4", Dtype::Int4),
        ] {
            let bank = load_bank(&dev, &g, name, dtype).unwrap();
            rows.push((layout, error(bank, MatmulOptions::default(), &x, &want)));
        }
        if ty == GgmlType::Q6_K {
            let bank = load_grouped(&dev, &g, name).unwrap();
            let one = error(bank, MatmulOptions::default(), &x, &want);
            rows.push(("grouped int8, one pass", one));
        }
        let bank = load_grouped(&dev, &g, name).unwrap();
        let default = error(bank, grouped_options(ty), &x, &want);
        rows.push(("grouped int8 (default)", default));
        for (layout, (e, held)) in &rows {
            eprintln!(
                "| {name} | {layout} | {:.2} % | {:.2} | {:.2} |",
                100.0 * e,
                e / e_cpu,
                *held as f64 / file_bytes
            );
        }
        let (e, held) = default;
        assert!(e <= 1.25 * e_cpu && e <= 0.01, "{name}: {e} vs CPU {e_cpu}");
        assert!(held as f64 <= bound * file_bytes, "{name}: {held} bytes");
        for (layout, (other, other_held)) in &rows {
            if *other_held as f64 <= bound * file_bytes {
                assert!(
                    e <= *other,
                    "{name}: {layout} {other} beats the default {e}"
                );
            }
        }
    }
}
