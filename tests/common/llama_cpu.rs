//! What llama.cpp's CPU backend computes for a quantised weight type, in f64: the
//! yardstick of the grouped banks' tests.

use super::reference::{product, rel};
use half::f16;

/// Activations as llama.cpp's CPU backend quantises them for the block types (Q8_0: per
/// 32 values `d = max|x| / 127` stored as fp16, `q = round(x / d)`), dequantised again.
pub fn q8_0_activations(x: &[f32]) -> Vec<f64> {
    x.chunks_exact(32)
        .flat_map(|b| {
            let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let dh = f64::from(f16::from_f32(d).to_f32());
            b.iter()
                .map(move |&v| f64::from((v * id).round()) * dh)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The relative RMS errors `(npu, cpu)` of a matmul against `bank` for `m` rows of seeded
/// activations in [−1, 1), and again with one activation in 400 eight times larger:
/// `npu` is `Matmul::mul_mat`'s (in calls of the rows `Matmul::fitting` gives), `cpu`
/// llama.cpp's CPU backend's (activations as Q8_0), each against the f64 product with `w`
/// (`n × k`, the file's dequantised weights); the matmul made with `options`.
pub fn errors(
    (bank, options): (
        &std::sync::Arc<rknpu_driver::compute::matmul::WeightBank>,
        rknpu_driver::compute::matmul::MatmulOptions,
    ),
    w: &[f32],
    (m, k, n): (usize, usize, usize),
    rng: &mut super::Rng,
) -> [(f64, f64); 2] {
    let x: Vec<f32> = (0..m * k).map(|_| 2.0 * rng.float() - 1.0).collect();
    let mut spiky = x.clone();
    for v in spiky.iter_mut().step_by(400) {
        *v *= 8.0;
    }
    [&x, &spiky].map(|x| {
        let exact: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let want = product(&exact, w, m, k, n);
        let e_cpu = rel(&want, &product(&q8_0_activations(x), w, m, k, n));
        // In calls of the most rows one submission holds.
        let mut mm =
            rknpu_driver::compute::matmul::Matmul::fitting(bank, m as u32, options).unwrap();
        let rows = mm.rows() as usize;
        let mut y = vec![0f32; m * n];
        for (x, y) in x.chunks(rows * k).zip(y.chunks_mut(rows * n)) {
            mm.mul_mat(x, y).unwrap();
        }
        let y: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
        (rel(&want, &y), e_cpu)
    })
}

/// For each `(name, passes)`: loads tensor `name` of `g` (`n × k`) into a grouped bank on
/// the emulated kernel, asserts that `gguf::outlier_options` quantises its activations
/// in `passes` passes and that a matmul with them meets the targets with and without
/// outliers at M = 1, 7 and 64 (within 1.25x llama.cpp's CPU error and 1 %, outliers
/// raising the error no more than 1.5x), printing each figure, and prints for comparison
/// the rises with one pass fewer.
pub fn outlier_options_keep_outliers_harmless(
    g: &rknpu_driver::gguf::Gguf,
    cases: &[(&str, u32)],
    (k, n): (usize, usize),
    rng: &mut super::Rng,
) {
    let dev = rknpu_driver::device::Device::open_spec("emu").unwrap();
    for &(name, passes) in cases {
        outliers_harmless(&dev, (g, name, passes), (k, n), rng);
    }
}

/// [`outlier_options_keep_outliers_harmless`] of one tensor.
fn outliers_harmless(
    dev: &rknpu_driver::device::Device,
    (g, name, want): (&rknpu_driver::gguf::Gguf, &str, u32),
    (k, n): (usize, usize),
    rng: &mut super::Rng,
) {
    use rknpu_driver::gguf::{load_grouped, outlier_options};
    let options = outlier_options(g.tensor(name).unwrap().ggml_type);
    assert_eq!(options.activation_passes, want, "{name}");
    let w = g.dequantize(name).unwrap();
    let bank = std::sync::Arc::new(load_grouped(dev, g, name).unwrap());
    let passes = options.activation_passes;
    for m in [1usize, 7, 64] {
        let errs = errors((&bank, options), &w, (m, k, n), rng);
        for (e, e_cpu) in errs {
            assert!(
                e <= 1.25 * e_cpu && e <= 0.01,
                "{name} m {m}: {e} vs CPU {e_cpu}"
            );
        }
        let rise = errs[1].0 / errs[0].0;
        eprintln!(
            "{name} m {m}, {passes} passes: e {:.3e} (CPU {:.3e}), outliers {:.3e}, rise {rise:.2}x (CPU {:.2}x)",
            errs[0].0,
            errs[0].1,
            errs[1].0,
            errs[1].1 / errs[0].1
        );
        assert!(
            rise <= 1.5,
            "{name} m {m}: outliers raise the error {rise:.2}x"
        );
    }
    let fewer = options.activation_passes(passes - 1);
    let rises = [1usize, 7, 64].map(|m| {
        let errs = errors((&bank, fewer), &w, (m, k, n), rng);
        errs[1].0 / errs[0].0
    });
    eprintln!("{name}, one pass fewer: outliers raise the error {rises:.2?}x at M = 1, 7, 64");
}
