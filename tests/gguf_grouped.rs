//! GGUF Q8_0, Q4_0 and Q5_0 tensors loaded as grouped int8 banks (`gguf::load_grouped`):
//! the file's integers and block scales kept, activations quantised per row and block of
//! 32, every block dequantised on the NPU. Held to the yardstick of issue-style targets
//! computed here: llama.cpp's CPU backend multiplies such weights by activations
//! quantised to Q8_0 (int8, one fp16 scale per 32 values); its relative RMS error
//! against the f64 product of the file's weights, `e_cpu`, is the reference.

mod common;

use common::Rng;
use common::llama_cpu::errors;
use half::f16;
use rknpu_driver::compute::matmul::quantize_groups_i8;
use rknpu_driver::device::Device;
use rknpu_driver::gguf::write::Writer;
use rknpu_driver::gguf::{GgmlType, Gguf, grouped_options, groups_exactly, load_grouped};
use std::sync::Arc;

const N: usize = 64;
const K: usize = 256;

/// Q5_0 blocks of `values` (32 a block): d = max|x| / 15 as fp16 (the sign of the largest
/// magnitude, as llama.cpp's quantiser chooses: −16 then holds it), q = round(x / d) + 16
/// in 0..=31, the low nibbles in `qs`, the fifth bits in `qh`.
fn q5_0(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for block in values.chunks_exact(32) {
        let max = block
            .iter()
            .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = f16::from_f32(max / -16.0);
        let inv = if d.to_f32() != 0.0 {
            1.0 / d.to_f32()
        } else {
            0.0
        };
        let q: Vec<u8> = block
            .iter()
            .map(|&v| ((v * inv).round() + 16.0).clamp(0.0, 31.0) as u8)
            .collect();
        out.extend_from_slice(&d.to_le_bytes());
        let qh: u32 = (0..32).fold(0, |h, j| h | (u32::from(q[j] >> 4) << j));
        out.extend_from_slice(&qh.to_le_bytes());
        out.extend((0..16).map(|j| (q[j] & 0xF) | ((q[j + 16] & 0xF) << 4)));
    }
    out
}

fn file(rng: &mut Rng) -> Gguf {
    let w: Vec<f32> = (0..N * K).map(|_| 0.1 * (rng.float() - 0.5)).collect();
    let dims = [K as u64, N as u64];
    let mut out = Writer::new();
    out.tensor_q8_0("q8_0", &dims, &w).unwrap();
    out.tensor_q4_0("q4_0", &dims, &w).unwrap();
    out.tensor_raw("q5_0", GgmlType::Q5_0, &dims, q5_0(&w))
        .unwrap();
    out.tensor_f32("f32", &dims, &w).unwrap();
    Gguf::parse(&out.to_bytes()).unwrap()
}

/// Each type: the NPU path's error is within 1.25x the CPU backend's own and within 1 %,
/// for M = 1, 7 and 64 rows, with and without outliers (one activation in 400 eight times
/// the rest), and outliers cost it no more than they cost the CPU; the bank holds the
/// file's bytes within 1.15x for Q8_0 (2x for the 4- and 5-bit types, an int8 bank).
#[test]
fn grouped_banks_from_gguf_blocks_meet_the_cpu_backends_error() {
    let mut rng = Rng(0x66f0);
    let g = file(&mut rng);
    let dev = Device::open_spec("emu").unwrap();
    for (name, size_bound) in [("q8_0", 1.15), ("q4_0", 2.0), ("q5_0", 2.0)] {
        let info = g.tensor(name).unwrap();
        assert!(groups_exactly(info.ggml_type));
        let w = g.dequantize(name).unwrap();
        let bank = Arc::new(load_grouped(&dev, &g, name).unwrap());
        let held = bank.held_bytes();
        assert_eq!(
            held,
            bank.layout().bytes + 2 * bank.group_scales().unwrap().len() as u64
        );
        let ratio = held as f64 / info.bytes() as f64;
        assert!(
            ratio <= size_bound,
            "{name}: {held} bytes, {ratio:.3}x the file's"
        );
        for m in [1usize, 7, 64] {
            let options = grouped_options(info.ggml_type);
            let errs = errors((&bank, options), &w, (m, K, N), &mut rng);
            for (e, e_cpu) in errs {
                assert!(
                    e <= 1.25 * e_cpu && e <= 0.01,
                    "{name} m {m}: {e} vs CPU {e_cpu}"
                );
            }
            // Outliers cost the NPU path no more than they cost the CPU backend (whose
            // own Q8_0 activations lose up to 2.5x here, docs/gguf.md).
            let (npu, cpu) = (errs[1].0 / errs[0].0, errs[1].1 / errs[0].1);
            assert!(
                npu <= 1.05 * cpu,
                "{name} m {m}: outliers {npu} vs CPU {cpu}"
            );
        }
    }
    // Another type is refused by name.
    assert!(!groups_exactly(g.tensor("f32").unwrap().ggml_type));
    assert!(load_grouped(&dev, &g, "f32").is_err());
    assert!(load_grouped(&dev, &g, "none").is_err());
}

/// With `gguf::outlier_options` (activations in three passes), outliers raise no type's
/// error more than 1.5x, and every error stays within the CPU backend's targets.
#[test]
fn outlier_options_keep_outliers_harmless() {
    let mut rng = Rng(0x0a71);
    let cases = [("q8_0", 3), ("q4_0", 3), ("q5_0", 3)];
    common::llama_cpu::outlier_options_keep_outliers_harmless(
        &file(&mut rng),
        &cases,
        (K, N),
        &mut rng,
    );
}

/// Why a GGUF bank keeps the file's groups of 32 (its integers and scales exactly) rather
/// than wider ones, which would take fewer NPU tasks: requantising the file's weights to
/// int8 per 64, 128 or 256 values
/// (as `WeightBank::quantize_f32_nk_grouped` would, its scales as the NPU reads them, in
/// fp16) moves the product, with exact activations, by about the whole of llama.cpp's
/// CPU error for the type, and more as the group widens; the activations' own rounding
/// then comes on top, so the 1.25x target has no room left. Measured on the host: 64
/// rows of activations, each type's `e_cpu` for them.
#[test]
fn wider_groups_cost_about_the_cpu_backends_whole_error() {
    use common::llama_cpu::q8_0_activations;
    use common::reference::{product, rel, wide};
    let mut rng = Rng(0x61de);
    let g = file(&mut rng);
    let m = 64;
    let x: Vec<f32> = (0..m * K).map(|_| 2.0 * rng.float() - 1.0).collect();
    for name in ["q8_0", "q4_0", "q5_0"] {
        let w = g.dequantize(name).unwrap();
        let want = product(&wide(&x), &w, m, K, N);
        let e_cpu = rel(&want, &product(&q8_0_activations(&x), &w, m, K, N));
        let mut ratios = Vec::new();
        for group in [64usize, 128, 256] {
            let (q, scales) = quantize_groups_i8(&w, K, group).unwrap();
            let groups = K / group;
            let held: Vec<f32> = (0..N * K)
                .map(|i| {
                    f32::from(q[i]) * f16::from_f32(scales[i / K * groups + i % K / group]).to_f32()
                })
                .collect();
            ratios.push(rel(&want, &product(&wide(&x), &held, m, K, N)) / e_cpu);
        }
        eprintln!(
            "{name}: the weights' error over the CPU's for groups of 64, 128, 256: {ratios:.2?}"
        );
        // The file's own groups of 32 hold the weights exactly; wider ones cost most of the
        // CPU's error or more, more each time.
        assert!(
            ratios[0] > 0.5 && ratios.windows(2).all(|r| r[1] > r[0]),
            "{name}: {ratios:?}"
        );
    }
}
