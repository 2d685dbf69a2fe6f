//! Element-wise operations (`kernels::ops::eltwise`) on the emulated kernel and on the
//! simulator, against an independent CPU reference: plain loops over row-major
//! `[height][width][channels]` data written here, not the crate's layout code.
//!
//! Integer results must be exact (64-bit arithmetic saturated to the type). fp16 results
//! must lie within half an fp16 ulp of the exact result plus the fp32 rounding of the
//! intermediate (`2⁻²⁴·|exact|`): the simulator computes in fp32 and rounds to fp16
//! (docs/simulator.md, "DPU semantics").

mod common;

use common::Rng;
use half::f16;
use proptest::prelude::*;
use rknpu_driver::Error;
use rknpu_driver::compute::ops::{ProgramBuffers, run_program};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::kernels::ops::eltwise::{self, Eltwise, EltwiseOp, MAX_TASK_WIDTH, Operand};
use rknpu_driver::kernels::ops::{self, Cube, Element};
use rknpu_driver::regcmd::{BufferId, Program, words_to_le_bytes};
use rknpu_driver::sim::{CoreRun, Kick, LintKind, Simulator};
use rknpu_driver::task::Precision;

fn program(op: &Eltwise) -> Program {
    let tasks = op
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Operand, ops::at(ops::OPERAND, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
        )
        .unwrap();
    ops::chain(&tasks).unwrap()
}

/// Runs the operation on the emulated kernel; returns the output in row-major order.
fn on_emu<T: Element>(op: &Eltwise, a: &[T], b: &[T]) -> Vec<T> {
    let dev = Device::open_spec("emu").unwrap();
    let out = run_program(
        &dev,
        &program(op),
        ProgramBuffers::new()
            .input(ops::INPUT, op.cube.pack(a).unwrap())
            .input(ops::OPERAND, op.operand_cube().pack(b).unwrap())
            .output(ops::OUTPUT, op.cube.bytes() as usize),
    )
    .unwrap();
    op.cube.unpack(&out[0]).unwrap()
}

fn addr(b: BufferId) -> Option<u64> {
    Some(0x1000_0000 * (b.0 as u64 + 1))
}

/// Runs the operation on the simulator directly (for its lints); returns the run and the
/// output.
fn on_sim<T: Element>(op: &Eltwise, a: &[T], b: &[T]) -> (CoreRun, Vec<T>) {
    let p = program(op);
    let words = p.bind(addr).unwrap();
    let a32 = |id| addr(id).unwrap() as u32;
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    m.map(a32(ops::REGCMD), words_to_le_bytes(&words)).unwrap();
    m.map(a32(ops::INPUT), op.cube.pack(a).unwrap()).unwrap();
    m.map(a32(ops::OPERAND), op.operand_cube().pack(b).unwrap())
        .unwrap();
    m.map_zeroed(a32(ops::OUTPUT), op.cube.bytes() as usize)
        .unwrap();
    let r = sim
        .kick(&Kick::new(a32(ops::REGCMD), p.tasks()[0].regcfg_amount))
        .unwrap();
    assert!(r.completed, "{r:?}");
    assert_eq!(r.tasks_run as usize, p.tasks().len());
    let out = sim
        .memory()
        .read_vec(a32(ops::OUTPUT), op.cube.bytes() as usize)
        .unwrap();
    (r, op.cube.unpack(&out).unwrap())
}

/// The independent reference: 64-bit integers or f64, per element.
fn exact(op: EltwiseOp, x: f64, y: f64) -> f64 {
    match op {
        EltwiseOp::Add => x + y,
        EltwiseOp::Sub => x - y,
        EltwiseOp::Mul => x * y,
        EltwiseOp::Max => x.max(y),
        EltwiseOp::Min => x.min(y),
        _ => unreachable!(),
    }
}

/// B's value for element `i` of A (row-major, `c` channels).
fn b_at<T: Copy>(operand: Operand, b: &[T], i: usize, c: usize) -> T {
    match operand {
        Operand::PerChannel => b[i % c],
        _ => b[i],
    }
}

fn check_int<T>(op: EltwiseOp, operand: Operand, c: usize, a: &[T], b: &[T], got: &[T])
where
    T: Copy + Into<i64> + std::fmt::Debug,
{
    let (lo, hi) = match std::mem::size_of::<T>() {
        1 => (-128i64, 127i64),
        _ => (-32768, 32767),
    };
    for (i, &x) in a.iter().enumerate() {
        let (x, y) = (x.into(), b_at(operand, b, i, c).into());
        let want = match op {
            EltwiseOp::Add => x + y,
            EltwiseOp::Sub => x - y,
            EltwiseOp::Mul => x * y,
            EltwiseOp::Max => x.max(y),
            _ => x.min(y),
        }
        .clamp(lo, hi);
        assert_eq!(got[i].into(), want, "{op:?} element {i}: {x} and {y}");
    }
}

/// Half the spacing of fp16 values around `r` (the fp16 nearest the exact result).
fn half_ulp(r: f16) -> f64 {
    let bits = r.to_bits() & 0x7FFF;
    let next = f16::from_bits(bits + 1).to_f64();
    (next - f16::from_bits(bits).to_f64()) / 2.0
}

fn check_f16(op: EltwiseOp, operand: Operand, c: usize, a: &[f16], b: &[f16], got: &[f16]) {
    for (i, &x) in a.iter().enumerate() {
        let y = b_at(operand, b, i, c);
        let e = exact(op, x.to_f64(), y.to_f64());
        let g = got[i].to_f64();
        let nearest = f16::from_f64(e);
        if nearest.is_infinite() {
            assert_eq!(g, nearest.to_f64(), "{op:?} element {i}: {x} and {y}");
            continue;
        }
        let bound = half_ulp(nearest) + e.abs() * 2f64.powi(-24);
        assert!(
            (g - e).abs() <= bound,
            "{op:?} element {i}: {x} and {y} gave {g}, exact {e}"
        );
    }
}

fn values_i8(rng: &mut Rng, n: usize) -> Vec<i8> {
    (0..n).map(|_| rng.int(-128, 127) as i8).collect()
}

fn values_i16(rng: &mut Rng, n: usize) -> Vec<i16> {
    (0..n).map(|_| rng.int(-32768, 32767) as i16).collect()
}

fn values_f16(rng: &mut Rng, n: usize) -> Vec<f16> {
    (0..n)
        .map(|_| f16::from_f32((rng.float() - 0.5) * 64.0))
        .collect()
}

fn operand_len(operand: Operand, cube: &Cube) -> usize {
    match operand {
        Operand::PerChannel => cube.channels as usize,
        _ => cube.elems(),
    }
}

fn one_case(op: EltwiseOp, p: Precision, operand: Operand, w: u32, h: u32, c: u32, seed: u64) {
    let cube = Cube::new(w, h, c, p).unwrap();
    let e = Eltwise::new(op, cube, operand).unwrap();
    let mut rng = Rng(seed | 1);
    let (n, nb, cu) = (cube.elems(), operand_len(operand, &cube), c as usize);
    match p {
        Precision::Int8 => {
            let (a, b) = (values_i8(&mut rng, n), values_i8(&mut rng, nb));
            let got = on_emu(&e, &a, &b);
            check_int(op, operand, cu, &a, &b, &got);
            // The crate's reference agrees with the independent one.
            assert_eq!(eltwise::reference(op, operand, cu, &a, &b).unwrap(), got);
        }
        Precision::Int16 => {
            let (a, b) = (values_i16(&mut rng, n), values_i16(&mut rng, nb));
            let got = on_emu(&e, &a, &b);
            check_int(op, operand, cu, &a, &b, &got);
            assert_eq!(eltwise::reference(op, operand, cu, &a, &b).unwrap(), got);
        }
        _ => {
            let (a, b) = (values_f16(&mut rng, n), values_f16(&mut rng, nb));
            let got = on_emu(&e, &a, &b);
            check_f16(op, operand, cu, &a, &b, &got);
        }
    }
}

fn precision() -> impl Strategy<Value = Precision> {
    prop::sample::select(vec![Precision::Int8, Precision::Int16, Precision::Fp16])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Every operation × element type × operand shape on small cubes, channel counts
    /// that are and are not multiples of the atom.
    #[test]
    fn every_op_matches_the_cpu_reference_on_the_emulated_kernel(
        op in prop::sample::select(EltwiseOp::ALL.to_vec()),
        p in precision(),
        per_channel in any::<bool>(),
        w in 1u32..=5,
        h in 1u32..=3,
        c in 1u32..=40,
        seed in any::<u64>(),
    ) {
        let operand = if per_channel { Operand::PerChannel } else { Operand::Tensor };
        one_case(op, p, operand, w, h, c, seed);
    }
}

/// Every combination once, deterministically (the property test samples them).
#[test]
fn every_combination_runs_once() {
    for op in EltwiseOp::ALL {
        for p in [Precision::Int8, Precision::Int16, Precision::Fp16] {
            for operand in [Operand::Tensor, Operand::PerChannel] {
                one_case(op, p, operand, 3, 2, 20, 7);
            }
        }
    }
}

#[test]
fn integer_results_saturate() {
    let cube = Cube::new(4, 1, 1, Precision::Int8).unwrap();
    let a = [127i8, -128, 100, -100];
    let b = [1i8, -1, 100, 100];
    let run = |op| on_emu(&Eltwise::new(op, cube, Operand::Tensor).unwrap(), &a, &b);
    assert_eq!(run(EltwiseOp::Add), [127, -128, 127, 0]);
    assert_eq!(run(EltwiseOp::Sub), [126, -127, 0, -128]);
    assert_eq!(run(EltwiseOp::Mul), [127, 127, 127, -128]);
    let cube = Cube::new(2, 1, 1, Precision::Int16).unwrap();
    let e = Eltwise::new(EltwiseOp::Mul, cube, Operand::Tensor).unwrap();
    assert_eq!(on_emu(&e, &[300i16, -300], &[300, 300]), [32767, -32768]);
    let e = Eltwise::new(EltwiseOp::Add, cube, Operand::Tensor).unwrap();
    assert_eq!(on_emu(&e, &[32767i16, -32768], &[1, -1]), [32767, -32768]);
}

#[test]
fn fp16_rounds_ties_to_even_and_overflows_to_infinity() {
    let h = f16::from_f32;
    let cube = Cube::new(4, 1, 1, Precision::Fp16).unwrap();
    let e = Eltwise::new(EltwiseOp::Add, cube, Operand::Tensor).unwrap();
    // Above 2048 fp16 values are 2 apart: 2048 + 1 and 2050 + 1 are ties.
    let got = on_emu(
        &e,
        &[h(2048.0), h(2050.0), h(65504.0), h(-65504.0)],
        &[h(1.0), h(1.0), h(65504.0), h(-65504.0)],
    );
    assert_eq!(
        got,
        [h(2048.0), h(2052.0), f16::INFINITY, f16::NEG_INFINITY]
    );
    let e = Eltwise::new(EltwiseOp::Mul, cube, Operand::Tensor).unwrap();
    // 1.5 × (1 + 2⁻¹⁰) = 1.5 + 1.5·2⁻¹⁰: a tie between 1.5 + 2⁻¹⁰ and 1.5 + 2·2⁻¹⁰ (odd,
    // even mantissas), so even: 1.5 + 2⁻⁹.
    let one_plus = f16::from_bits(0x3C01);
    let got = on_emu(
        &e,
        &[h(1.5), h(-3.0), h(0.0), h(2.0)],
        &[one_plus, h(0.5), h(-1.0), h(0.25)],
    );
    assert_eq!(got, [h(1.5 + 1.0 / 512.0), h(-1.5), h(-0.0), h(0.5)]);
}

#[test]
fn fp16_same_shape_runs_clean_and_derived_paths_say_so() {
    let mut rng = Rng(3 | 1);
    let cube = Cube::new(4, 4, 16, Precision::Fp16).unwrap();
    let a = values_f16(&mut rng, cube.elems());
    let b = values_f16(&mut rng, cube.elems());
    for op in EltwiseOp::ALL {
        let (r, _) = on_sim(&Eltwise::new(op, cube, Operand::Tensor).unwrap(), &a, &b);
        assert!(r.lints.is_empty(), "{op:?}: {:?}", r.lints);
    }
    // A per-channel operand over several pixels is derived.
    let pc = Eltwise::new(EltwiseOp::Add, cube, Operand::PerChannel).unwrap();
    let (r, _) = on_sim(&pc, &a, &b[..16]);
    assert!(
        r.lints.iter().any(|l| l.kind == LintKind::Unvalidated),
        "{r:?}"
    );
    // One pixel with a per-channel operand is the vendor's own one-pixel form.
    let one = Cube::new(1, 1, 64, Precision::Fp16).unwrap();
    let e = Eltwise::new(EltwiseOp::Add, one, Operand::PerChannel).unwrap();
    let (r, _) = on_sim(&e, &a[..64], &b[..64]);
    assert!(r.lints.is_empty(), "{:?}", r.lints);
    // int8 and int16 arithmetic are derived.
    let i8cube = Cube::new(2, 1, 16, Precision::Int8).unwrap();
    let e = Eltwise::new(EltwiseOp::Add, i8cube, Operand::Tensor).unwrap();
    let (r, out) = on_sim(&e, &[1i8; 32], &[2i8; 32]);
    assert_eq!(out, [3i8; 32]);
    assert!(
        r.lints.iter().any(|l| l.kind == LintKind::Unvalidated),
        "{r:?}"
    );
}

#[test]
fn widths_at_the_tiling_limit() {
    let mut rng = Rng(11 | 1);
    for w in [MAX_TASK_WIDTH, MAX_TASK_WIDTH + 1] {
        let cube = Cube::new(w, 1, 8, Precision::Fp16).unwrap();
        let e = Eltwise::new(EltwiseOp::Sub, cube, Operand::Tensor).unwrap();
        let tasks = e
            .tasks(
                &Bindings::new()
                    .bind(Role::Input, ops::at(ops::INPUT, 0))
                    .bind(Role::Operand, ops::at(ops::OPERAND, 0))
                    .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
            )
            .unwrap();
        assert_eq!(tasks.len(), if w == MAX_TASK_WIDTH { 1 } else { 2 });
        let a = values_f16(&mut rng, cube.elems());
        let b = values_f16(&mut rng, cube.elems());
        let got = on_emu(&e, &a, &b);
        check_f16(EltwiseOp::Sub, Operand::Tensor, 8, &a, &b, &got);
    }
    // Two bands of a two-surface int16 cube with a per-channel operand.
    let cube = Cube::new(MAX_TASK_WIDTH + 3, 2, 12, Precision::Int16).unwrap();
    let e = Eltwise::new(EltwiseOp::Max, cube, Operand::PerChannel).unwrap();
    let a = values_i16(&mut rng, cube.elems());
    let b = values_i16(&mut rng, 12);
    let got = on_emu(&e, &a, &b);
    check_int(EltwiseOp::Max, Operand::PerChannel, 12, &a, &b, &got);
}

#[test]
fn refusals_are_typed_errors() {
    let f32cube = Cube::new(2, 2, 4, Precision::Fp32).unwrap();
    assert!(matches!(
        Eltwise::new(EltwiseOp::Add, f32cube, Operand::Tensor),
        Err(Error::Unsupported { .. })
    ));
    let i32cube = Cube::new(2, 2, 4, Precision::Int32).unwrap();
    assert!(matches!(
        Eltwise::new(EltwiseOp::Mul, i32cube, Operand::Tensor),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        eltwise::reference(EltwiseOp::Add, Operand::Tensor, 2, &[1i8, 2], &[1i8]),
        Err(Error::InvalidArgument { .. })
    ));
    // A cube whose bands would overflow 32-bit addresses.
    let cube = Cube::new(8192, 1, 8, Precision::Fp16).unwrap();
    let e = Eltwise::new(EltwiseOp::Add, cube, Operand::Tensor).unwrap();
    assert!(matches!(
        e.tasks(
            &Bindings::new()
                .bind(
                    Role::Input,
                    rknpu_driver::regcmd::DmaAddr::Fixed(u32::MAX - 16)
                )
                .bind(Role::Operand, ops::at(ops::OPERAND, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0))
        ),
        Err(Error::Unsupported { .. })
    ));
}

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/ops")
        .join(name)
}

/// The decoded programs, reviewed: fp16 add of a 16 × 16 × 8 cube (the vendor's task 02
/// field for field), fp16 mul with a per-channel operand, int8 max (derived).
#[test]
fn decoded_programs_match_the_golden_fixtures() {
    let cases = [
        (
            "eltwise-add-fp16-16x16x8.txt",
            EltwiseOp::Add,
            (16, 16, 8),
            Precision::Fp16,
            Operand::Tensor,
        ),
        (
            "eltwise-mul-fp16-4x2x24-per-channel.txt",
            EltwiseOp::Mul,
            (4, 2, 24),
            Precision::Fp16,
            Operand::PerChannel,
        ),
        (
            "eltwise-max-int8-8x1x32.txt",
            EltwiseOp::Max,
            (8, 1, 32),
            Precision::Int8,
            Operand::Tensor,
        ),
    ];
    for (name, op, (w, h, c), p, operand) in cases {
        let e = Eltwise::new(op, Cube::new(w, h, c, p).unwrap(), operand).unwrap();
        let text = program(&e).decode().to_text(None);
        common::check_text_fixture(&fixture(name), &text);
    }
}

/// The generator writes the vendor's words for fp16 add and the board-tested words of the
/// other operations (EW_CFG), ERDMA_CFG 0x40000008 and RDMA FEATURE_MODE_CFG 0x17849.
#[test]
fn register_words_are_the_recorded_ones() {
    use rknpu_driver::regs::{Register, dpu, dpu_rdma};
    let words = |op, operand| {
        let e = Eltwise::new(op, Cube::new(16, 16, 8, Precision::Fp16).unwrap(), operand).unwrap();
        let p = program(&e);
        let d = p.decode();
        let find = |offset: u16| {
            d.entries
                .iter()
                .find(|x| x.word.offset() == offset && x.word.target() != 0x0081)
                .map(|x| x.word.value())
                .unwrap()
        };
        (
            find(dpu::EwCfg::OFFSET),
            find(dpu_rdma::RdmaErdmaCfg::OFFSET),
            find(dpu_rdma::RdmaFeatureModeCfg::OFFSET),
            find(dpu::OutCvtScale::OFFSET),
        )
    };
    let t = Operand::Tensor;
    assert_eq!(
        words(EltwiseOp::Add, t),
        (0x1082_02C0, 0x4000_0008, 0x1_7849, 0x1_0001)
    );
    assert_eq!(words(EltwiseOp::Mul, t).0, 0x1080_03C4);
    assert_eq!(words(EltwiseOp::Max, t).0, 0x1080_02C0);
    assert_eq!(words(EltwiseOp::Min, t).0, 0x1081_02C0);
    assert_eq!(words(EltwiseOp::Sub, t).0, 0x1084_02C0);
    // Per channel: the vendor's one-pixel words (EW_DATA_MODE and ERDMA_DATA_MODE 0).
    let pc = words(EltwiseOp::Add, Operand::PerChannel);
    assert_eq!((pc.0, pc.1), (0x0082_02C0, 0x0000_0008));
}

/// The measured error of the fp16 operations on the emulated kernel: the largest
/// `|result − exact| / ulp` over 4096 seeded pairs per operation (printed; docs/ops.md
/// quotes it), which must stay within half an ulp plus the fp32 rounding.
#[test]
fn fp16_error_in_ulps() {
    let cube = Cube::new(64, 8, 8, Precision::Fp16).unwrap();
    let mut rng = Rng(2024);
    let a: Vec<f16> = (0..cube.elems())
        .map(|_| f16::from_f32(rng.float() * 1000.0))
        .collect();
    let b: Vec<f16> = (0..cube.elems())
        .map(|_| f16::from_f32(rng.float() * 10.0))
        .collect();
    for op in EltwiseOp::ALL {
        let got = on_emu(&Eltwise::new(op, cube, Operand::Tensor).unwrap(), &a, &b);
        let worst = got
            .iter()
            .zip(a.iter().zip(&b))
            .map(|(g, (x, y))| {
                let e = exact(op, x.to_f64(), y.to_f64());
                (g.to_f64() - e).abs() / (2.0 * half_ulp(f16::from_f64(e)))
            })
            .fold(0f64, f64::max);
        eprintln!("fp16 {}: worst error {worst:.3} ulp", op.name());
        assert!(worst <= 0.5 + 1e-3, "{op:?}: {worst}");
    }
}
