//! The LUT RAM and the simulator: hand-computed interpolation, the tables across a chain,
//! the board-measured hazards and the tiling of wide tensors.

use super::*;
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};

#[test]
fn hand_computed_interpolation_cases() {
    let dev = emu();
    // (x, expected): worked by hand from the tables of `hand_recipe`.
    let cases: [(f32, f32); 8] = [
        (3.0, 17.0),       // X = 96: LO point 3 = 3·3 + 8
        (3.25, 17.75),     // X = 104: a quarter into LO segment 3: 17 + 0.25 · 3
        (0.0, 8.0),        // X = 0 hits both tables: the hybrid priority takes LO[0]
        (-0.5, 23.0),      // X = -16: LE position 511.5: (-1000 + 1022) + 0.5 · 2
        (-512.0, -1000.0), // X = LE_START: LE[0]
        (-600.0, -2408.0), // X = -19200: LE[0] + (-2816) · 0.5
        (512.0, 1544.0),   // X = LO_END: LO[512]
        (600.0, 2248.0),   // X = 19200: LO[512] + 2816 · 0.25
    ];
    let xs: Vec<f16> = cases.iter().map(|c| f16::from_f32(c.0)).collect();
    let cube = Cube::new(1, 1, 8, Precision::Fp16).unwrap();
    let t = lut_task(
        &hand_recipe(),
        1,
        1,
        ops::at(ops::INPUT, 0),
        ops::at(ops::OUTPUT, 0),
        true,
    );
    let out = run(&dev, cube, &[t], &xs, None);
    for ((x, want), got) in cases.iter().zip(&out) {
        assert_eq!(got.to_f32(), *want, "x = {x}");
    }
}

#[test]
fn the_tables_persist_across_a_chain_and_a_lut_task_without_them_is_refused() {
    let cube = Cube::new(2, 1, 8, Precision::Fp16).unwrap();
    let xs: Vec<f16> = (0..16)
        .map(|i| f16::from_f32(i as f32 * 0.75 - 6.0))
        .collect();
    let r = hand_recipe();
    // Task 0 uploads and does the first pixel; task 1 uses the RAM for the second.
    let t0 = lut_task(
        &r,
        1,
        1,
        ops::at(ops::INPUT, 0),
        ops::at(ops::OUTPUT, 0),
        true,
    );
    let t1 = lut_task(
        &r,
        1,
        1,
        ops::at(ops::INPUT, 16),
        ops::at(ops::OUTPUT, 16),
        false,
    );
    assert!(t1.dpu.unwrap().ew.unwrap().lut.unwrap().upload.is_none());
    let (run, bytes) = simulate(&[t0, t1.clone()], cube.pack(&xs).unwrap(), 32);
    let run = run.unwrap();
    assert!(run.completed && run.tasks_run == 2);
    let out: Vec<f16> = cube.unpack(&bytes).unwrap();
    // The hand tables: x in [-6, 5.25] gives X = 32 x in [-192, 168], inside the tables.
    for (x, y) in xs.iter().zip(&out) {
        let big_x = x.to_f32() * 32.0;
        let want = if big_x >= 0.0 {
            8.0 + 3.0 * big_x / 32.0
        } else {
            -1000.0 + 2.0 * (big_x + 16384.0) / 32.0
        };
        assert_eq!(y.to_f32(), f16::from_f32(want).to_f32(), "x = {x}");
    }
    // A fresh core has uploaded nothing: the reusing task alone is a named error.
    let (run, _) = simulate(&[t1], cube.pack(&xs).unwrap(), 32);
    match run {
        Err(SimError::Inconsistent { field, why, .. }) => {
            assert_eq!(field, rknpu_driver::regs::dpu::EwCfg::EW_LUT_BYPASS.name());
            assert!(why.contains("LUT RAM holds no uploaded"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn board_measured_hazards_are_linted() {
    // Tables with a zero entry and a long flat run, and tanh's signed decode; the raw
    // decode of the fp32 SiLU (whose table holds zeros) and sigmoid have none (below and
    // `the_fp32_silu_runs_clean_and_its_error_is_bounded`).
    let cube = Cube::new(1, 1, 8, Precision::Fp16).unwrap();
    let xs = vec![f16::from_f32(0.5); 8];
    let mut r = hand_recipe();
    r.tables.lo[..100].fill(0);
    // Zero entries were measured with the fixed-point decode.
    r.out_cvt.minus_exp = 15;
    r.out_cvt.add_first = true;
    let t = lut_task(
        &r,
        1,
        1,
        ops::at(ops::INPUT, 0),
        ops::at(ops::OUTPUT, 0),
        true,
    );
    let (run, _) = simulate(&[t], cube.pack(&xs).unwrap(), 16);
    let quirks: Vec<String> = run
        .unwrap()
        .lints
        .into_iter()
        .filter(|l| l.kind == LintKind::LutQuirk)
        .map(|l| l.message)
        .collect();
    assert!(
        quirks.iter().any(|m| m.contains("equal to 0")),
        "{quirks:?}"
    );
    assert!(quirks.iter().any(|m| m.contains("flat run")), "{quirks:?}");
    let tanh = ActivationOp::new(Activation::Tanh, cube).unwrap();
    let tasks = tanh
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0))
                .bind(Role::Operand, ops::at(ops::OPERAND, 0)),
        )
        .unwrap();
    let (run, _) = simulate(&tasks, cube.pack(&xs).unwrap(), 16);
    let lints = run.unwrap().lints;
    assert!(
        lints
            .iter()
            .any(|l| l.kind == LintKind::LutQuirk && l.message.contains("signed")),
        "{lints:?}"
    );
    // The sigmoid program of the boards has none.
    let sig = ActivationOp::new(Activation::Sigmoid, cube).unwrap();
    let tasks = sig
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0))
                .bind(Role::Operand, ops::at(ops::OPERAND, 0)),
        )
        .unwrap();
    let (run, _) = simulate(&tasks, cube.pack(&xs).unwrap(), 16);
    assert!(
        !run.unwrap()
            .lints
            .iter()
            .any(|l| l.kind == LintKind::LutQuirk)
    );
}

#[test]
fn wide_tensors_are_tiled_at_4096_atoms() {
    let cube = Cube::new(4100, 2, 8, Precision::Fp16).unwrap();
    let op = ActivationOp::new(Activation::Sigmoid, cube).unwrap();
    let tasks = op
        .tasks(
            &Bindings::new()
                .bind(Role::Input, DmaAddr::Fixed(0x10_0000))
                .bind(Role::Output, DmaAddr::Fixed(0x80_0000))
                .bind(Role::Operand, DmaAddr::Fixed(0)),
        )
        .unwrap();
    let widths: Vec<(u32, u32, u32)> = tasks.iter().map(|t| t.dpu.unwrap().cube).collect();
    assert_eq!(widths, vec![(4096, 2, 8), (8, 1, 8)]);
    let uploads: Vec<bool> = tasks
        .iter()
        .map(|t| t.dpu.unwrap().ew.unwrap().lut.unwrap().upload.is_some())
        .collect();
    assert_eq!(uploads, vec![true, false]);
}
