//! The output converter's rounding, the typed refusals and the golden decoded programs.

use super::*;

/// The output converter rounds ties to even and adds its offset after the rounding
/// shift, then saturates: the RK3588 measurement of gregordinary/rocket-userspace
/// (`tests/requant_model.h`, probe `tests/requant_round_probe`). With SCALE 1, SHIFT 1,
/// OFFSET 1: 3 → round(1.5) = 2, + 1 = 3 (adding the offset first would give
/// (3 + 1) / 2 = 2); 5 → round(2.5) = 2 → 3; 7 → 4 → 5; −3 → −2 → −1; 300 → 151 → 127.
#[test]
fn the_output_converter_rounds_ties_to_even_and_offsets_after_rounding() {
    let rq = Requant::per_tensor(OutScale::new(1, 1, 1));
    let cube = Cube::new(1, 1, 16, Precision::Int32).unwrap();
    let mut acc = vec![0i32; 16];
    acc[..6].copy_from_slice(&[3, 5, 7, -3, 300, -300]);
    let op = RequantOp::new(rq, cube, &[], &[]).unwrap();
    let tasks = bound(
        &op,
        &[(Role::Input, ops::INPUT), (Role::Output, ops::OUTPUT)],
    )
    .unwrap();
    let (r, out) = on_sim(
        &ops::chain(&tasks).unwrap(),
        &[
            (ops::INPUT, cube.pack(&acc).unwrap()),
            (ops::PARAMS, vec![0; 16]),
        ],
        16,
    );
    assert_eq!(
        out[..6].iter().map(|&b| b as i8).collect::<Vec<_>>(),
        [3, 3, 5, -1, 127, -128]
    );
    // A flying int32 → int8 task is derived from Mesa's convolution: the lint says so.
    assert!(r.lints.iter().any(|l| l.kind == LintKind::Unvalidated));
}

#[test]
fn refusals_are_typed_errors() {
    assert!(matches!(
        Dequant::new(1e9, Precision::Fp16),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        Dequant::new(0.5, Precision::Int8),
        Err(Error::Unsupported { .. })
    ));
    let dq = Dequant::new(0.5, Precision::Fp16).unwrap();
    // An fp16 output of 12 fp32 channels (not whole fp16 atoms).
    let odd = Cube::new(2, 1, 12, Precision::Fp32).unwrap();
    let odd = DequantOp::new(dq, odd, &[1.0; 12]).unwrap();
    assert!(matches!(program(&odd), Err(Error::Unsupported { .. })));
    // A requantisation of 8 int32 channels (not whole int8 atoms).
    let i32c = Cube::new(2, 1, 8, Precision::Int32).unwrap();
    let rq = Requant::per_tensor(OutScale::new(1, 0, 0));
    let narrow = RequantOp::new(rq, i32c, &[], &[]).unwrap();
    assert!(matches!(program(&narrow), Err(Error::Unsupported { .. })));
    assert!(matches!(
        rq.with_channel_multipliers(64),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        Requant::per_channel(&[0.1, -0.2], 0),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        rq.with_bias().params(4, &[1, 2], &[]),
        Err(Error::InvalidArgument { .. })
    ));
    let mut no_dpu = rknpu_driver::kernels::single::add_task(
        4,
        4,
        DmaAddr::Fixed(0),
        DmaAddr::Fixed(0),
        DmaAddr::Fixed(0),
    )
    .unwrap();
    no_dpu.dpu = None;
    assert!(matches!(
        rq.apply(&mut no_dpu, ops::at(ops::INPUT, 0)),
        Err(Error::InvalidArgument { .. })
    ));
}

/// The decoded programs, reviewed: the dequantisation to fp16 of a 4 × 1 × 32 fp32 cube,
/// and the int32 → int8 requantisation with bias and per-channel multipliers of a
/// 4 × 1 × 16 cube.
#[test]
fn decoded_programs_match_the_golden_fixtures() {
    let fixture = |name: &str| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/ops")
            .join(name)
    };
    let roles = [
        (Role::Input, ops::INPUT),
        (Role::Params, ops::PARAMS),
        (Role::Output, ops::OUTPUT),
    ];
    // The tasks read the parameters from memory: their values do not enter the program.
    let dq = Dequant::new(0.125, Precision::Fp16).unwrap();
    let cube = Cube::new(4, 1, 32, Precision::Fp32).unwrap();
    let dq = bound(&DequantOp::new(dq, cube, &[1.0; 32]).unwrap(), &roles).unwrap();
    common::check_text_fixture(
        &fixture("requant-dequant-fp16-4x1x32.txt"),
        &ops::chain(&dq).unwrap().decode().to_text(None),
    );
    let rq = Requant::per_tensor(OutScale::from_scale(0.0017, -5).unwrap())
        .with_bias()
        .with_channel_multipliers(14)
        .unwrap();
    let cube = Cube::new(4, 1, 16, Precision::Int32).unwrap();
    let rq = RequantOp::new(rq, cube, &[0; 16], &[1; 16]).unwrap();
    let rq = bound(&rq, &roles).unwrap();
    common::check_text_fixture(
        &fixture("requant-int8-bias-per-channel-4x1x16.txt"),
        &ops::chain(&rq).unwrap().decode().to_text(None),
    );
}
