//! Errors against the exact functions: the reference itself, the measured errors over
//! every fp16 input of each range, a corrupted table caught by the bound, and property
//! tests on small cubes.

use super::*;

#[test]
fn the_reference_matches_hand_values_and_the_library() {
    let close = |a: f64, b: f64, tol: f64| (a - b).abs() < tol;
    assert!(close(exact(Activation::Gelu, 1.0), 0.841_344_746, 1e-9));
    assert!(close(exact(Activation::Gelu, -2.0), -0.045_500_263_9, 1e-9));
    assert!(close(exact(Activation::Silu, 1.0), 0.731_058_578_6, 1e-9));
    assert!(close(exact(Activation::Tanh, 0.5), 0.462_117_157_3, 1e-9));
    for a in Activation::ALL {
        for x in [-7.5, -1.25, 0.0, 0.3, 2.0, 5.5] {
            assert!(close(exact(a, x), a.exact(x), 1e-9), "{a} at {x}");
        }
    }
    let r = ops::lut::reference(Activation::Exp, &[f16::from_f32(1.0)]);
    assert!(close(r[0], std::f64::consts::E, 1e-12));
}

/// Max abs, RMS and max relative error (over |f(x)| ≥ 2^-6) of `out` against `a`.
fn errors(a: Activation, xs: &[f16], out: &[f16]) -> (f64, f64, Option<f64>) {
    let (mut max, mut sq, mut rel) = (0f64, 0f64, None::<f64>);
    for (x, y) in xs.iter().zip(out) {
        let want = exact(a, f64::from(x.to_f32()));
        let e = (f64::from(y.to_f32()) - want).abs();
        max = max.max(e);
        sq += e * e;
        if want.abs() >= 1.0 / 64.0 {
            let r = e / want.abs();
            rel = Some(rel.map_or(r, |m: f64| m.max(r)));
        }
    }
    (max, (sq / xs.len() as f64).sqrt(), rel)
}

fn measure(dev: &Device, a: Activation) -> (usize, f64, f64, Option<f64>) {
    let (lo, hi) = a.input_range();
    let mut xs = every_fp16(lo, hi);
    // Whole atoms: pad with zeros (f(0) is measured too).
    while !xs.len().is_multiple_of(8) {
        xs.push(f16::ZERO);
    }
    let cube = Cube::new((xs.len() / 8) as u32, 1, 8, Precision::Fp16).unwrap();
    let out = activation(dev, a, cube, &xs);
    let (max, rms, rel) = errors(a, &xs, &out);
    (xs.len(), max, rms, rel)
}

#[test]
fn measured_errors() {
    let dev = emu();
    println!(
        "| activation | inputs (every fp16 in) | count | max abs | RMS | max rel (|f| >= 2^-6) | bound |"
    );
    println!("|---|---|---|---|---|---|---|");
    for a in Activation::ALL {
        let (n, max, rms, rel) = measure(&dev, a);
        let (lo, hi) = a.input_range();
        println!(
            "| {a} | [{lo}, {hi}] | {n} | {max:.3e} | {rms:.3e} | {} | {:.1e} |",
            rel.map_or("-".into(), |r| format!("{r:.3e}")),
            bound(a)
        );
        assert!(
            max <= bound(a),
            "{a}: max abs error {max} above the bound {}",
            bound(a)
        );
    }
}

#[test]
fn a_shifted_or_swapped_table_breaks_the_bound() {
    // The same sigmoid program with its tables off by one entry, or LE and LO swapped,
    // must fail the bound the measured test asserts.
    let dev = emu();
    let xs = every_fp16(-8.0, 8.0);
    let n = xs.len() / 8 * 8;
    let xs = &xs[..n];
    let cube = Cube::new((n / 8) as u32, 1, 8, Precision::Fp16).unwrap();
    let good = ops::lut::recipe(ops::lut::Gate::Sigmoid);
    let mut shifted = good;
    shifted.tables.lo.rotate_left(1);
    shifted.tables.le.rotate_left(1);
    let mut swapped = good;
    std::mem::swap(&mut swapped.tables.le, &mut swapped.tables.lo);
    for (name, r, ok) in [
        ("good", good, true),
        ("shifted", shifted, false),
        ("swapped", swapped, false),
    ] {
        let t = lut_task(
            &r,
            cube.width,
            1,
            ops::at(ops::INPUT, 0),
            ops::at(ops::OUTPUT, 0),
            true,
        );
        let out = run(&dev, cube, &[t], xs, None);
        let (max, ..) = errors(Activation::Sigmoid, xs, &out);
        assert_eq!(max <= bound(Activation::Sigmoid), ok, "{name}: {max}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn activations_match_the_reference_on_small_cubes(
        a in prop::sample::select(Activation::ALL.to_vec()),
        w in 1u32..6,
        h in 1u32..3,
        c in 1u32..20,
        seed in any::<u64>(),
    ) {
        let cube = Cube::new(w, h, c, Precision::Fp16).unwrap();
        let (lo, hi) = a.input_range();
        let mut rng = common::Rng(seed | 1);
        let xs: Vec<f16> = (0..cube.elems())
            .map(|_| f16::from_f64(lo + (hi - lo) * (rng.next() >> 11) as f64 / (1u64 << 53) as f64))
            .collect();
        let out = activation(&emu(), a, cube, &xs);
        for (x, y) in xs.iter().zip(&out) {
            let want = exact(a, f64::from(x.to_f32()));
            let e = (f64::from(y.to_f32()) - want).abs();
            // fp16 output rounding of large values (ReLU's exact results are fp16).
            prop_assert!(e <= bound(a).max(want.abs() * 1e-3), "{} at {}: {} vs {}", a, x, y, want);
        }
    }
}
