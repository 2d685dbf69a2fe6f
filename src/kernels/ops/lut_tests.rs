//! Unit tests of the LUT activations: the reference functions, the tiling, the recipes'
//! constants and the refused types.

use super::*;

#[test]
fn the_reference_functions_match_hand_values() {
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    assert!(close(erf(0.5), 0.520_499_877_813_046_5));
    assert!(close(erf(-2.0), -0.995_322_265_018_952_7));
    assert!(close(erf(3.5), 0.999_999_256_901_627_7));
    assert!(close(Activation::Gelu.exact(1.0), 0.841_344_746_068_542_9));
    assert!(close(
        Activation::Silu.exact(2.0),
        2.0 / (1.0 + (-2f64).exp())
    ));
    assert!(close(Activation::Relu6.exact(7.5), 6.0));
    let r = reference(
        Activation::Sigmoid,
        &[f16::from_f32(0.0), f16::from_f32(-1.0)],
    );
    assert!(close(r[0], 0.5) && close(r[1], 0.268_941_421_369_995_1));
}

#[test]
fn tiles_cover_the_tensor_at_most_4096_atoms_wide() {
    let t = tiles(4096 * 3 + 5).unwrap();
    assert_eq!(
        t,
        vec![
            Tile {
                w: 4096,
                h: 3,
                offset: 0
            },
            Tile {
                w: 5,
                h: 1,
                offset: 4096 * 3 * 16
            }
        ]
    );
    assert_eq!(
        tiles(7).unwrap(),
        vec![Tile {
            w: 7,
            h: 1,
            offset: 0
        }]
    );
}

#[test]
fn recipes_hold_the_board_run_constants() {
    let s = recipe(Gate::Sigmoid);
    assert_eq!(s.bn_mul, 0x6912);
    assert_eq!(s.bn_alu, 0x8000_0000);
    assert_eq!((s.lut.le.start, s.lut.lo.end), (-16384, 16384));
    assert_eq!(
        (s.lut.le.slope.uflow_scale, s.lut.le.slope.uflow_shift),
        (23107, 22)
    );
    // LO[0] = sigmoid(0) = 0.5; LE[0] = sigmoid(-512 · 32/2596).
    assert_eq!(s.tables.lo[0], 16384);
    assert_eq!(
        s.tables.le[0],
        (sigmoid(-512.0 * 32.0 / 2596.0) * 32768.0).round() as i16
    );
    let e = recipe(Gate::Exp);
    assert_eq!(e.bn_mul, 0x6400);
    assert_eq!(e.bn_alu, 0x4680_0000);
    assert!(e.tables.lo.iter().chain(&e.tables.le).all(|&q| q >= 1));
    let t = recipe(Gate::Tanh);
    assert_eq!((t.out_cvt.offset, t.out_cvt.minus_exp), (-16384, 14));
}

#[test]
fn int8_and_other_types_are_refused() {
    let c = Cube::new(4, 1, 16, Precision::Int8).unwrap();
    let e = ActivationOp::new(Activation::Sigmoid, c).unwrap_err();
    assert!(e.to_string().contains("int8"), "{e}");
    assert!(
        ActivationOp::new(Activation::Relu, c.with_precision(Precision::Fp32).unwrap()).is_err()
    );
}
