//! Q6_K as groups of 32: its weights are `d · sc · q` with an int8 scale `sc` per 16
//! values and `q` in −32..=31, but an int8 K wave of the NPU spans whole multiples of 32
//! channels (`WeightLayout::with_k_tile`), so a group's two sub-blocks share one scale.
//! Each group's products `p = sc · q` (integers, |p| ≤ 4096) are requantised to int8 as
//! `t · q'` with the `t` of a few candidates that keeps them nearest: the largest `|p|`
//! over 96..=127 (127: what a plain int8 requantisation would use), each sub-block scale
//! over 1..=8 (one sub-block exact when its `|sc| / t` is a whole number, the other
//! rounded to the same step), and for each the least-squares step of its integers (a
//! search in the manner of ggml's `make_qx_quants`, written here for int8).

/// Sub-block values.
const SUB: usize = 16;
/// Group values.
const GROUP: usize = 32;

/// Requantises one Q6_K block's signed quants `file` (256) with its sixteen int8 scales
/// `sc` and super-scale `d` to int8 `q` (256) and a scale per 32 values into `scales`
/// (8): the largest `|bank weight − file weight|` (in f64, the bank's weights being
/// `scales[g] · q`).
pub(super) fn requantise(
    file: &[i8; 256],
    sc: &[u8],
    d: f32,
    q: &mut [i8],
    scales: &mut [f32],
) -> f64 {
    let mut worst = 0f64;
    for (g, (qg, scale)) in q.chunks_exact_mut(GROUP).zip(scales.iter_mut()).enumerate() {
        let (sa, sb) = (sc[2 * g] as i8, sc[2 * g + 1] as i8);
        let p: Vec<f64> = file[g * GROUP..(g + 1) * GROUP]
            .iter()
            .enumerate()
            .map(|(i, &v)| f64::from(if i < SUB { sa } else { sb }) * f64::from(v))
            .collect();
        let t = best_step(&p, [sa, sb]);
        for (o, &v) in qg.iter_mut().zip(&p) {
            *o = round_i8(v, t);
        }
        *scale = (f64::from(d) * t) as f32;
        for (i, (&o, &v)) in qg.iter().zip(&file[g * GROUP..]).enumerate() {
            let s = if i < SUB { sa } else { sb };
            let want = f64::from(d * f32::from(s)) * f64::from(v);
            worst = worst.max((f64::from(*scale) * f64::from(o) - want).abs());
        }
    }
    worst
}

/// `v / t` rounded to the nearest integer and clamped to int8 (0 when `t` is 0).
fn round_i8(v: f64, t: f64) -> i8 {
    if t == 0.0 {
        0
    } else {
        (v / t).round().clamp(-128.0, 127.0) as i8
    }
}

/// The squared error of `p` held as `t · round_i8(p, t)`.
fn error(p: &[f64], t: f64) -> f64 {
    p.iter()
        .map(|&v| (v - t * f64::from(round_i8(v, t))).powi(2))
        .sum()
}

/// The step `t` of the candidates (module docs) with the least squared error on `p`.
fn best_step(p: &[f64], subs: [i8; 2]) -> f64 {
    let max = p.iter().fold(0f64, |m, v| m.max(v.abs()));
    if max == 0.0 {
        return 0.0;
    }
    // The largest product at 96..=127 steps, and each sub-block scale over 1..=8.
    let by_max = (96..=127).map(|v| max / f64::from(v));
    let by_sub = subs
        .into_iter()
        .filter(|&s| s != 0)
        .flat_map(|s| (1..=8).map(move |m| f64::from(s).abs() / f64::from(m)));
    let mut best = (f64::INFINITY, max / 127.0);
    for t in by_max.chain(by_sub) {
        // Each candidate's integers with their least-squares step, too.
        let (pq, qq) = p.iter().fold((0f64, 0f64), |(a, b), &v| {
            let o = f64::from(round_i8(v, t));
            (a + v * o, b + o * o)
        });
        let refined = if qq > 0.0 { pq / qq } else { t };
        for t in [t, refined] {
            let e = error(p, t);
            if e < best.0 {
                best = (e, t);
            }
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group whose sub-block scales are a multiple of one another is held exactly;
    /// any other is held within half the chosen step of every product.
    #[test]
    fn exact_for_commensurate_scales_and_within_half_a_step_otherwise() {
        let file: [i8; 256] = std::array::from_fn(|i| (i as i32 * 7 % 64 - 32) as i8);
        let mut sc = [0u8; 16];
        sc[0] = 12;
        sc[1] = (-3i8) as u8; // 12 = −4 · −3: group 0 exact with t = 3
        sc[2] = 37;
        sc[3] = 11; // 37 and 11: not commensurate within int8
        let (mut q, mut scales) = ([0i8; 256], [0f32; 8]);
        let worst = requantise(&file, &sc, 0.5, &mut q, &mut scales);
        for i in 0..32 {
            let s = if i < 16 { 12.0 } else { -3.0 };
            assert_eq!(
                f64::from(scales[0]) * f64::from(q[i]),
                0.5 * s * f64::from(file[i])
            );
        }
        let step = f64::from(scales[1]);
        for i in 32..64 {
            let s = if i < 48 { 37.0 } else { 11.0 };
            let want = 0.5 * s * f64::from(file[i]);
            assert!((step * f64::from(q[i]) - want).abs() <= step / 2.0 + 1e-9);
        }
        // Groups 2..8 have zero scales: zero weights, zero scale.
        assert!(scales[2..].iter().all(|&s| s == 0.0));
        assert!(worst > 0.0 && worst <= step / 2.0 + 1e-9);
    }

    /// On groups of random sub-block scales (either sign, any ratio) and quants, the
    /// candidates' step is within 1 % of the best single step a dense search finds
    /// (`max|p| / v` for `v` over 48..=256 in steps of 1/16, clamping included, each
    /// with its least-squares refinement): one step per 32 values cannot hold these
    /// groups much nearer than `best_step` does.
    #[test]
    fn the_candidates_are_as_good_as_a_dense_search() {
        let mut rng = crate::seeded::Rng::from_seed(0x6b32);
        let (mut ours, mut dense, mut total) = (0f64, 0f64, 0f64);
        for _ in 0..400 {
            let (sa, sb) = (rng.int(-128, 127) as i8, rng.int(-128, 127) as i8);
            let p: Vec<f64> = (0..GROUP)
                .map(|i| f64::from(if i < SUB { sa } else { sb }) * f64::from(rng.int(-32, 31)))
                .collect();
            ours += error(&p, best_step(&p, [sa, sb]));
            let max = p.iter().fold(0f64, |m, v| m.max(v.abs()));
            let best = (48 * 16..=256 * 16)
                .map(|v| max / (f64::from(v) / 16.0))
                .flat_map(|t| {
                    let (pq, qq) = p.iter().fold((0f64, 0f64), |(a, b), &v| {
                        let o = f64::from(round_i8(v, t));
                        (a + v * o, b + o * o)
                    });
                    [t, if qq > 0.0 { pq / qq } else { t }]
                })
                .map(|t| error(&p, t))
                .fold(f64::INFINITY, f64::min);
            dense += if max == 0.0 { 0.0 } else { best };
            total += p.iter().map(|v| v * v).sum::<f64>();
        }
        let (ours, dense) = ((ours / total).sqrt(), (dense / total).sqrt());
        assert!(dense > 0.0 && ours <= 1.01 * dense, "{ours:e} vs {dense:e}");
        // What a single step costs here: about 0.3 % of the weights' RMS.
        assert!(ours > 0.002 && ours < 0.005, "{ours:e}");
    }
}
