//! Why the ggml backend claims no op but `MUL_MAT` (docs/ggml.md, "What runs on the
//! NPU"): the measured gap between the NPU's fp16 results of f32 tensors and the bound
//! ggml's test-backend-ops holds these ops to.
//!
//! test-backend-ops compares a backend's result with its CPU backend's by normalised
//! mean squared error, `Σ (r − c)² / Σ c²`, and allows 1e-7 for the element-wise, unary
//! and GLU ops; its inputs are uniform in [−1, 1]. A backend on the NPU rounds each f32
//! input to fp16 (what the element-wise and LUT tasks read), runs the op and widens the
//! fp16 result. This test does exactly that on the emulated kernel through the op
//! contract (`run_op`) and measures the error against the op computed in f64 on the f32
//! inputs, the CPU's result up to its own f32 rounding.
//!
//! `cargo test --test ggml_op_gaps -- --nocapture` prints the figures docs/ggml.md quotes.

use half::f16;
use rknpu_driver::compute::ops::run_op;
use rknpu_driver::device::Device;
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::{Op, Role, Values};
use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
use rknpu_driver::kernels::ops::lut::{Activation, ActivationOp};
use rknpu_driver::seeded::Rng;
use rknpu_driver::task::Precision;

/// test-backend-ops' bound for the element-wise, unary and GLU ops.
const GGML_NMSE: f64 = 1e-7;

/// Values test-backend-ops would draw: f32, uniform in [−1, 1).
fn uniform(rng: &mut Rng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.unit() * 2.0 - 1.0).collect()
}

/// `Σ (r − c)² / Σ c²`, ggml's measure.
fn nmse(result: &[f64], exact: &[f64]) -> f64 {
    let err: f64 = result
        .iter()
        .zip(exact)
        .map(|(r, c)| (r - c) * (r - c))
        .sum();
    err / exact.iter().map(|c| c * c).sum::<f64>()
}

/// The values as the NPU reads them: rounded to fp16.
fn as_fp16(x: &[f32]) -> Vec<f64> {
    x.iter()
        .map(|&v| f64::from(f16::from_f32(v).to_f32()))
        .collect()
}

/// Runs `op` on the emulated kernel over `inputs` (each role's f32 values rounded to
/// fp16) and returns ggml's measure of its result against `exact`.
fn measured(op: &impl Op, inputs: &[(Role, &[f32])], exact: &[f64]) -> f64 {
    let dev = Device::open_spec("emu").expect("the emulated kernel opens");
    let values: Values = inputs.iter().map(|&(r, v)| (r, as_fp16(v))).collect();
    let result = run_op(&dev, op, &values).expect("the op runs");
    assert_eq!(result.len(), exact.len());
    nmse(&result, exact)
}

/// ggml's measure of ADD, MUL and SILU in fp16 over `a` and `b` (SILU reads `a`), each
/// value of a `cube`.
fn three_ops(cube: Cube, a: &[f32], b: &[f32]) -> [(&'static str, f64); 3] {
    let add = Eltwise::new(EltwiseOp::Add, cube, Operand::Tensor).expect("ADD");
    let mul = Eltwise::new(EltwiseOp::Mul, cube, Operand::Tensor).expect("MUL");
    let silu = ActivationOp::new(Activation::Silu, cube).expect("SILU");
    let exact = |f: &dyn Fn(f64, f64) -> f64| -> Vec<f64> {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| f(f64::from(x), f64::from(y)))
            .collect()
    };
    let two = [(Role::Input, a), (Role::Operand, b)];
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    [
        ("ADD", measured(&add, &two, &exact(&|x, y| x + y))),
        ("MUL", measured(&mul, &two, &exact(&|x, y| x * y))),
        (
            "SILU",
            measured(&silu, &[(Role::Input, a)], &exact(&|x, _| x * sigmoid(x))),
        ),
    ]
}

#[test]
fn fp16_results_of_f32_tensors_miss_ggml_bound_for_these_ops() {
    let mut rng = Rng::new(0x99);
    // A large case (64 × 64 pixels of 16 channels, 65,536 values): the mean error.
    let large = Cube::new(64, 64, 16, Precision::Fp16).expect("the cube");
    let len = (large.width * large.height * large.channels) as usize;
    let (a, b) = (uniform(&mut rng, len), uniform(&mut rng, len));
    let means = three_ops(large, &a, &b);
    // Small cases, as most of test-backend-ops' are (4 × 4 pixels of 16 channels, 256
    // values): how many of 40 would fail.
    let small = Cube::new(4, 4, 16, Precision::Fp16).expect("the cube");
    let mut over = [0usize; 3];
    for _ in 0..40 {
        let (a, b) = (uniform(&mut rng, 256), uniform(&mut rng, 256));
        for (i, (_, e)) in three_ops(small, &a, &b).into_iter().enumerate() {
            over[i] += usize::from(e > GGML_NMSE);
        }
    }
    // Rounding alone: the fp16 inputs' own error, what any fp16 path starts from.
    let exact_a: Vec<f64> = a.iter().map(|&v| f64::from(v)).collect();
    let input_alone = nmse(&as_fp16(&a), &exact_a);
    println!(
        "ggml's bound {GGML_NMSE:.1e}; one fp16 rounding of the inputs alone: {input_alone:.2e}"
    );
    for ((name, e), over) in means.into_iter().zip(over) {
        println!(
            "{name}: NMSE {e:.2e} on 65,536 values ({:.2}x the bound); {over} of 40 cases of 256 values over it",
            e / GGML_NMSE
        );
        // The error is fp16's rounding, not a wrong result...
        assert!(e < 1e-6, "{name}: {e:e} is more than fp16 rounding");
        // ...and it fails cases of ggml's suite: a claim would not pass it.
        assert!(
            over > 0,
            "{name}: every small case met ggml's bound: claim the op"
        );
    }
    assert!(input_alone > 0.1 * GGML_NMSE, "{input_alone:e}");
}
