//! Products and errors in f64: the reference every matmul test measures against. It
//! uses the standard library only, so that the C API's tests include it too.

/// `x` (`m × k`) times `w` (`n × k`, llama.cpp's `[out][in]`) in f64, row-major `m × n`.
pub fn product(x: &[f64], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    (0..m * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            (0..k).map(|j| x[r * k + j] * f64::from(w[c * k + j])).sum()
        })
        .collect()
}

/// `v` widened to f64.
pub fn wide(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&v| f64::from(v)).collect()
}

/// Relative RMS error of `y` against `want`.
pub fn rel(want: &[f64], y: &[f64]) -> f64 {
    let e2: f64 = want.iter().zip(y).map(|(a, b)| (a - b).powi(2)).sum();
    let r2: f64 = want.iter().map(|a| a * a).sum();
    (e2 / r2).sqrt()
}

/// Relative RMS error of f32 results `y` (`m × n`) against the f64 product of f32 `x`
/// (`m × k`) and `w` (`n × k`).
pub fn rel_err(x: &[f32], w: &[f32], y: &[f32], (m, k, n): (usize, usize, usize)) -> f64 {
    rel(&product(&wide(x), w, m, k, n), &wide(y))
}
