//! GGUF Q4_1, Q4_K, Q5_K and Q6_K tensors loaded as grouped int8 banks
//! (`gguf::load_grouped`): Q4_1, Q4_K and Q5_K exactly (centred integers, a scale and an
//! offset per 32 values, the offset term added by the matmul), Q6_K requantised from its
//! scales per 16 values to one per 32. Held to the yardstick of llama.cpp's CPU backend,
//! computed here: activations quantised to Q8_0 (int8, one fp16 scale per 32 values)
//! times the file's weights; its relative RMS error against the f64 product of the
//! file's weights is `e_cpu`.

mod common;

use common::Rng;
use common::llama_cpu::{errors, q8_0_activations};
use common::reference::{product, rel};
use half::f16;
use rknpu_driver::compute::matmul::{Matmul, MatmulOptions};
use rknpu_driver::device::Device;
use rknpu_driver::gguf::write::Writer;
use rknpu_driver::gguf::{
    GgmlType, Gguf, GgufError, grouped_options, groups, groups_exactly, load_grouped,
    load_grouped_report,
};
use std::sync::Arc;

const N: usize = 64;
const K: usize = 512;

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

/// Q4_1 blocks (32 values): `m` the block's minimum, `d = (max − m) / 15`, both fp16,
/// `q = round((x − m) / d)` in 0..=15, value `j` in the low nibble of byte `j` and value
/// `j + 16` in its high nibble.
fn q4_1(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in values.chunks_exact(32) {
        let (lo, hi) = b
            .iter()
            .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        let (d, m) = (
            f16::from_f32((hi - lo) / 15.0).to_f32(),
            f16::from_f32(lo).to_f32(),
        );
        let inv = if d != 0.0 { 1.0 / d } else { 0.0 };
        let q: Vec<u8> = b
            .iter()
            .map(|&v| ((v - m) * inv).round().clamp(0.0, 15.0) as u8)
            .collect();
        out.extend_from_slice(&f16_bytes(d));
        out.extend_from_slice(&f16_bytes(m));
        out.extend((0..16).map(|j| q[j] | (q[j + 16] << 4)));
    }
    out
}

/// The 12 scale bytes of a Q4_K/Q5_K block from eight 6-bit scales and minimums:
/// sub-blocks 0–3 in the low six bits of bytes `i` (scale) and `i + 4` (minimum), 4–7
/// in the nibbles of byte `i + 4` with their top two bits in the top bits of bytes
/// `i − 4` (scale) and `i` (minimum).
fn k_scale_bytes(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for i in 0..4 {
        s[i] = sc[i] | ((sc[i + 4] >> 4) << 6);
        s[i + 4] = mn[i] | ((mn[i + 4] >> 4) << 6);
        s[i + 8] = (sc[i + 4] & 0xF) | ((mn[i + 4] & 0xF) << 4);
    }
    s
}

/// Q4_K (`top` 15) or Q5_K (`top` 31) blocks of 256 values: per sub-block of 32, a range
/// `(max − min) / top` and a minimum `min(0, min)`; `d` and `dmin` (fp16) the largest of
/// them over 63, the 6-bit scale and minimum rounded, `q = round((x + dmin·mn) / (d·sc))`
/// in 0..=top. Quants: each 64 values in 32 bytes, low nibbles the first 32; Q5_K adds
/// the fifth bit of value `l` of sub-block `s` as bit `s` of `qh[l]`.
fn q_k(values: &[f32], top: u8) -> Vec<u8> {
    let mut out = Vec::new();
    for b in values.chunks_exact(256) {
        let (mut range, mut neg) = ([0f32; 8], [0f32; 8]);
        for (s, sub) in b.chunks_exact(32).enumerate() {
            let lo = sub.iter().fold(0f32, |l, &v| l.min(v));
            let hi = sub.iter().fold(lo, |h, &v| h.max(v));
            (range[s], neg[s]) = ((hi - lo) / f32::from(top), -lo);
        }
        let d = f16::from_f32(range.iter().fold(0f32, |m, &v| m.max(v)) / 63.0).to_f32();
        let dmin = f16::from_f32(neg.iter().fold(0f32, |m, &v| m.max(v)) / 63.0).to_f32();
        let six = |v: f32, by: f32| {
            if by > 0.0 {
                (v / by).round().clamp(0.0, 63.0) as u8
            } else {
                0
            }
        };
        let sc: [u8; 8] = std::array::from_fn(|s| six(range[s], d));
        let mn: [u8; 8] = std::array::from_fn(|s| six(neg[s], dmin));
        let q: Vec<u8> = b
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let (step, min) = (d * f32::from(sc[i / 32]), dmin * f32::from(mn[i / 32]));
                if step == 0.0 {
                    0
                } else {
                    ((v + min) / step).round().clamp(0.0, f32::from(top)) as u8
                }
            })
            .collect();
        out.extend_from_slice(&f16_bytes(d));
        out.extend_from_slice(&f16_bytes(dmin));
        out.extend_from_slice(&k_scale_bytes(&sc, &mn));
        if top == 31 {
            out.extend((0..32).map(|l| (0..8).fold(0u8, |h, s| h | ((q[32 * s + l] >> 4) << s))));
        }
        for j in 0..4 {
            out.extend((0..32).map(|l| (q[64 * j + l] & 0xF) | ((q[64 * j + 32 + l] & 0xF) << 4)));
        }
    }
    out
}

/// Q6_K blocks of 256 values: per sub-block of 16 a step `max|x| / 31`, `d` (fp16) the
/// largest over 127, the int8 scale `round(step / d)`, `q = round(x / (d·sc))` in
/// −32..=31 stored plus 32: in each half of 128, value `32g + l` keeps its low nibble
/// in `ql[l + 32·(g mod 2)]` (low for g < 2) and its top two bits in bits `2g` of `qh[l]`.
fn q6_k(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in values.chunks_exact(256) {
        let steps: Vec<f32> = b
            .chunks_exact(16)
            .map(|s| s.iter().fold(0f32, |m, v| m.max(v.abs())) / 31.0)
            .collect();
        let d = f16::from_f32(steps.iter().fold(0f32, |m, &v| m.max(v)) / 127.0).to_f32();
        let sc: Vec<i8> = steps
            .iter()
            .map(|&s| {
                if d > 0.0 {
                    (s / d).round().clamp(-128.0, 127.0) as i8
                } else {
                    0
                }
            })
            .collect();
        let q: Vec<u8> = b
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let step = d * f32::from(sc[i / 16]);
                let q = if step == 0.0 {
                    0.0
                } else {
                    (v / step).round().clamp(-32.0, 31.0)
                };
                (q + 32.0) as u8
            })
            .collect();
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        for (i, &v) in q.iter().enumerate() {
            let (half, g, l) = (i / 128, i % 128 / 32, i % 32);
            ql[64 * half + l + 32 * (g % 2)] |= (v & 0xF) << (4 * (g / 2));
            qh[32 * half + l] |= (v >> 4) << (2 * g);
        }
        out.extend_from_slice(&ql);
        out.extend_from_slice(&qh);
        out.extend(sc.iter().map(|&s| s as u8));
        out.extend_from_slice(&f16_bytes(d));
    }
    out
}

/// The four types' tensors of the same seeded weights (offset from zero, so that the
/// minimums matter), and an F32 copy.
fn file(rng: &mut Rng) -> Gguf {
    let w: Vec<f32> = (0..N * K).map(|_| 0.05 * rng.float() + 0.01).collect();
    let dims = [K as u64, N as u64];
    let mut out = Writer::new();
    out.tensor_raw("q4_1", GgmlType::Q4_1, &dims, q4_1(&w))
        .unwrap();
    out.tensor_raw("q4_k", GgmlType::Q4_K, &dims, q_k(&w, 15))
        .unwrap();
    out.tensor_raw("q5_k", GgmlType::Q5_K, &dims, q_k(&w, 31))
        .unwrap();
    out.tensor_raw("q6_k", GgmlType::Q6_K, &dims, q6_k(&w))
        .unwrap();
    out.tensor_f32("f32", &dims, &w).unwrap();
    Gguf::parse(&out.to_bytes()).unwrap()
}

/// Each type: the NPU path's error within 1.25x the CPU backend's and within 1 % at
/// M = 1, 7 and 64, with and without outliers (one activation in 400 eight times the
/// rest; reported, and held to 1.5x or, where the CPU's own rise is more, to that within
/// 5 %); Q6_K with residual activations (`grouped_options`); the bank's bytes against
/// the file's (fp16 scales and offsets): Q4_1, Q4_K and Q5_K within 2.0x, Q6_K within
/// 1.4x.
#[test]
fn k_quants_and_q4_1_meet_the_cpu_backends_error() {
    let mut rng = Rng(0x4b51);
    let g = file(&mut rng);
    let dev = Device::open_spec("emu").unwrap();
    for (name, size_bound) in [("q4_1", 2.0), ("q4_k", 2.0), ("q5_k", 2.0), ("q6_k", 1.4)] {
        let info = g.tensor(name).unwrap();
        assert!(groups(info.ggml_type));
        assert_eq!(groups_exactly(info.ggml_type), name != "q6_k");
        let w = g.dequantize(name).unwrap();
        let (bank, report) = load_grouped_report(&dev, &g, name).unwrap();
        assert_eq!(report.max_abs == 0.0, name != "q6_k", "{name}: {report:?}");
        let bank = Arc::new(bank);
        // The device buffer, an fp16 scale and (with minimums) an fp16 offset a group.
        let held = bank.layout().bytes
            + 2 * bank.group_scales().unwrap().len() as u64
            + 2 * bank.group_offsets().map_or(0, |o| o.len() as u64);
        assert_eq!(held, bank.held_bytes());
        let ratio = held as f64 / info.bytes() as f64;
        eprintln!(
            "{name}: {held} bytes, {ratio:.3}x the file's {}",
            info.bytes()
        );
        assert!(ratio <= size_bound, "{name}: {ratio:.3}x");
        for m in [1usize, 7, 64] {
            let options = grouped_options(info.ggml_type);
            let errs = errors((&bank, options), &w, (m, K, N), &mut rng);
            for (e, e_cpu) in errs {
                assert!(
                    e <= 1.25 * e_cpu && e <= 0.01,
                    "{name} m {m}: {e} vs CPU {e_cpu}"
                );
            }
            let (npu, cpu) = (errs[1].0 / errs[0].0, errs[1].1 / errs[0].1);
            eprintln!(
                "{name} m {m}: e {:.3e} (CPU {:.3e}, {:.3}x); outliers e {:.3e} (CPU {:.3e}), rise {npu:.2}x (CPU {cpu:.2}x)",
                errs[0].0,
                errs[0].1,
                errs[0].0 / errs[0].1,
                errs[1].0,
                errs[1].1
            );
            // The bound, or where the CPU's own activations miss it, the CPU's rise.
            assert!(
                npu <= 1.5 || npu <= 1.05 * cpu,
                "{name} m {m}: outliers {npu} vs CPU {cpu}"
            );
        }
    }
    assert!(!groups(g.tensor("f32").unwrap().ggml_type));
    assert!(matches!(
        load_grouped(&dev, &g, "f32"),
        Err(GgufError::Unsupported { .. })
    ));
}

/// The offset term is the matmul's own: every path that serves a grouped bank (blocking,
/// submitted, pre-quantised activations) adds it, and they agree.
#[test]
fn every_path_adds_the_offset_term() {
    let mut rng = Rng(0x0ff5);
    let g = file(&mut rng);
    let dev = Device::open_spec("emu").unwrap();
    let bank = Arc::new(load_grouped(&dev, &g, "q4_1").unwrap());
    let w = g.dequantize("q4_1").unwrap();
    let m = 3;
    let x: Vec<f32> = (0..m * K).map(|_| rng.float()).collect();
    let want = product(
        &x.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
        &w,
        m,
        K,
        N,
    );
    let mut mm = Matmul::new(&bank, m as u32).unwrap();
    let mut blocking = vec![0f32; m * N];
    mm.mul_mat(&x, &mut blocking).unwrap();
    let mut submitted = vec![0f32; m * N];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    mm.submit::<f32>(&x)
        .unwrap()
        .wait(deadline, &mut submitted)
        .unwrap();
    let (q, s) = rknpu_driver::compute::matmul::quantize_groups_i8(&x, K, 32).unwrap();
    let mut quantised = vec![0f32; m * N];
    mm.mul_mat_quantized(&q, &s, &mut quantised).unwrap();
    for y in [&blocking, &submitted, &quantised] {
        let y: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
        assert!(rel(&want, &y) < 0.01, "{}", rel(&want, &y));
    }
    assert_eq!(blocking, submitted);
}

/// A non-finite scale or minimum is refused with a typed error naming the tensor and
/// the first column of its block.
#[test]
fn a_non_finite_scale_or_minimum_is_refused_by_name() {
    let mut rng = Rng(0xbad5);
    let w: Vec<f32> = (0..N * K).map(|_| 0.05 * rng.float()).collect();
    let dims = [K as u64, N as u64];
    let nan = f16::NAN.to_le_bytes();
    let inf = f16::INFINITY.to_le_bytes();
    // (name, type, bytes, byte offset of the bad field in the second block of row 0)
    let cases = [
        ("q4_1 min", GgmlType::Q4_1, q4_1(&w), 20 + 2, nan, 32u64),
        ("q4_k dmin", GgmlType::Q4_K, q_k(&w, 15), 144 + 2, inf, 256),
        ("q5_k d", GgmlType::Q5_K, q_k(&w, 31), 176, nan, 256),
        ("q6_k d", GgmlType::Q6_K, q6_k(&w), 210 + 208, inf, 256),
    ];
    let dev = Device::open_spec("emu").unwrap();
    for (name, ty, mut bytes, at, bad, column) in cases {
        bytes[at..at + 2].copy_from_slice(&bad);
        let mut out = Writer::new();
        out.tensor_raw(name, ty, &dims, bytes).unwrap();
        let g = Gguf::parse(&out.to_bytes()).unwrap();
        match load_grouped(&dev, &g, name) {
            Err(GgufError::NotRepresentable {
                tensor,
                row,
                column: c,
                value,
                ..
            }) => {
                assert_eq!((tensor.as_str(), row, c), (name, 0, column));
                assert!(!value.is_finite());
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// Q6_K blocks of random bytes (random sub-block scales of either sign and any ratio,
/// `d` finite): the requantisation to one scale per 32 values costs more here than on
/// tensors quantised in ggml's manner. Reported, and held to what docs/gguf.md states:
/// one pass within 1.5x the CPU backend's error and 1 %, residual activations (the
/// default, `grouped_options`) within 1.25x and 1 %.
#[test]
fn q6_k_of_random_blocks_stays_within_the_documented_margin() {
    let mut rng = Rng(0x6b6b);
    const KR: usize = 1024;
    let mut bytes = Vec::new();
    for _ in 0..N * KR / 256 {
        let mut block: Vec<u8> = (0..210).map(|_| rng.int(0, 255) as u8).collect();
        let d = f16::from_f32(0.001 + 0.049 * (rng.float() + 1.0) / 2.0);
        block[208..210].copy_from_slice(&d.to_le_bytes());
        bytes.extend(block);
    }
    let mut out = Writer::new();
    out.tensor_raw("q6_k", GgmlType::Q6_K, &[KR as u64, N as u64], bytes)
        .unwrap();
    let g = Gguf::parse(&out.to_bytes()).unwrap();
    let w = g.dequantize("q6_k").unwrap();
    let dev = Device::open_spec("emu").unwrap();
    let bank = Arc::new(load_grouped(&dev, &g, "q6_k").unwrap());
    for m in [1usize, 7, 64] {
        let x: Vec<f32> = (0..m * KR).map(|_| rng.float()).collect();
        let wide = |x: &[f64]| -> Vec<f64> {
            (0..m * N)
                .map(|i| {
                    (0..KR)
                        .map(|j| x[i / N * KR + j] * f64::from(w[i % N * KR + j]))
                        .sum()
                })
                .collect()
        };
        let want = wide(&x.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
        let e_cpu = rel(&want, &wide(&q8_0_activations(&x)));
        let mut y = vec![0f32; m * N];
        let one_pass = MatmulOptions::default();
        let mut e = [0f64; 2];
        for (e, options) in e
            .iter_mut()
            .zip([one_pass, grouped_options(GgmlType::Q6_K)])
        {
            // Both passes of 64 rows of 32 groups are more tasks than one submission
            // counts (`Error::Unsupported`): calls of at most 32 rows.
            let rows = m.min(32);
            let mut mm = Matmul::with_options(&bank, rows as u32, options).unwrap();
            for (x, y) in x.chunks(rows * KR).zip(y.chunks_mut(rows * N)) {
                mm.mul_mat(x, y).unwrap();
            }
            *e = rel(&want, &y.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
        }
        let [one, two] = e;
        eprintln!(
            "q6_k random blocks m {m}: one pass {one:.3e} ({:.3}x CPU {e_cpu:.3e}), residual {two:.3e} ({:.3}x)",
            one / e_cpu,
            two / e_cpu
        );
        assert!(
            one <= 1.5 * e_cpu && one <= 0.01,
            "m {m}: {one} vs CPU {e_cpu}"
        );
        assert!(
            two <= 1.25 * e_cpu && two <= 0.01,
            "m {m}: {two} vs CPU {e_cpu}"
        );
    }
}

/// With `gguf::outlier_options` (activations in three passes for Q4_1, two for the
/// K-quants), outliers raise no type's error more than 1.5x, and every error stays within
/// the CPU backend's targets.
#[test]
fn outlier_options_keep_outliers_harmless() {
    let mut rng = Rng(0x0a72);
    let cases = [("q4_1", 3), ("q4_k", 2), ("q5_k", 2), ("q6_k", 2)];
    common::llama_cpu::outlier_options_keep_outliers_harmless(
        &file(&mut rng),
        &cases,
        (K, N),
        &mut rng,
    );
}
