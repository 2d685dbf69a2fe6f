//! An LLM feed-forward block as one NPU job: `y = W_down · (SiLU(W_gate · x) ⊙ (W_up · x))`
//! with int8 gate and up projections, the activation and the product on the DPU, and an
//! fp16 down projection, every intermediate tensor staying in device memory
//! (`compute::layer`, docs/ops.md "Layer programs").
//!
//! The layer's steps:
//!
//! 1. `gate = x_q · W_gate_q`, `up = x_q · W_up_q`: int8 matmuls (x quantised per tensor
//!    on the host at each call, the weights per output channel at load), written by the
//!    DPU as fp32
//!    (the exact int32 → fp32 cast);
//! 2. both scaled to real values and narrowed to fp16 on the DPU (`Dequant`: the
//!    activation scale times each channel's weight scale);
//! 3. `SiLU(gate)` on the DPU's LUT (the sigmoid gate, then `x · gate`);
//! 4. `h = SiLU(gate) ⊙ up`, an fp16 element-wise multiply;
//! 5. `y = W_down · h`: an fp16 matmul reading h as it lies in device memory.
//!
//! Each call gives the dequantisation steps its own activation scale
//! (`Layer::set_step_scale`). It runs x as drawn and three times larger, checks y against
//! the same block computed on the CPU in f64 from the unquantised weights and
//! activations, prints the error, then times the one job against the same
//! tasks submitted as one job per step (what a backend calling the NPU once per
//! operation pays), and prints `OK` last. On a machine without an NPU it runs on the
//! emulated kernel, where the time is the simulator's, not a board's. Run it with:
//!
//! ```text
//! cargo run --release --example ffn_block [SEED]
//! ```

use half::f16;
use rknpu_driver::compute::layer::{Layer, LayerBuilder, MatmulInput, Tensor};
use rknpu_driver::compute::matmul::WeightBank;
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use rknpu_driver::kernels::matmul::{Plan, pack};
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::{Bindings, DequantOp, Op, Role};
use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
use rknpu_driver::kernels::ops::epilogue::Dequant;
use rknpu_driver::kernels::ops::lut::{Activation, ActivationOp};
use rknpu_driver::kernels::single::{Dtype, OutType};
use rknpu_driver::seeded::Rng;
use rknpu_driver::task::Precision;
use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tokens (rows of x).
const M: u32 = 4;
/// Hidden size (x and y have D features).
const D: u32 = 256;
/// Intermediate size (gate, up and h have F features).
const F: u32 = 512;
/// Runs of each way when timing.
const RUNS: u32 = 5;

/// Bound on the relative RMS error of y against the f64 block. Its sources: int8
/// quantisation of x (per tensor) and of the gate and up weights (per channel), each
/// within half a step of 1/127 of its range; fp16 roundings of gate, up, SiLU, h and the
/// down weights (2^-11 relative each); the LUT's sigmoid (at most 1.6e-3 absolute). With
/// uniform weights and activations the quantisation dominates (measured on the emulated
/// kernel: 0.72 % to 0.88 % relative RMS on y over seeds 1 to 20); 5 % is a margin of
/// more than five times that still fails for a wrong step (100 % or more).
const BOUND: f64 = 0.05;

type Res<T = ()> = Result<T, Box<dyn Error>>;

fn uniform(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.unit() * scale).collect()
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// `y[m][n] = Σ_k a[m][k] · w[n][k]` in f64.
fn matmul(a: &[f64], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut y = vec![0.0; m * n];
    for r in 0..m {
        for c in 0..n {
            y[r * n + c] = (0..k).map(|i| a[r * k + i] * f64::from(w[c * k + i])).sum();
        }
    }
    y
}

/// Checks `got` (y's cube, `stride` channels a row) against the block computed on the CPU
/// in f64 from the unquantised `x` and weights; prints the error.
fn check(
    x: &[f32],
    (w_gate, w_up, w_down): (&[f32], &[f32], &[f32]),
    got: &[f32],
    stride: usize,
    factor: f32,
) -> Res {
    let (m, d, f) = (M as usize, D as usize, F as usize);
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let g = matmul(&x64, w_gate, m, d, f);
    let u = matmul(&x64, w_up, m, d, f);
    let hh: Vec<f64> = g.iter().zip(&u).map(|(&g, &u)| silu(g) * u).collect();
    let want = matmul(&hh, w_down, m, f, d);
    let (mut err2, mut ref2, mut max_abs) = (0f64, 0f64, 0f64);
    for r in 0..m {
        for c in 0..d {
            // y's cube holds D channels per pixel (row); D is a multiple of 4.
            let e = f64::from(got[r * stride + c]) - want[r * d + c];
            err2 += e * e;
            ref2 += want[r * d + c] * want[r * d + c];
            max_abs = max_abs.max(e.abs());
        }
    }
    let rel = (err2 / ref2).sqrt();
    println!(
        "x times {factor}: error against the f64 block: relative RMS {:.3} %, largest {max_abs:.3e} (bound {:.0} %)",
        rel * 100.0,
        BOUND * 100.0
    );
    if rel.is_nan() || rel > BOUND {
        return Err(format!("relative RMS error {rel} above the bound {BOUND}").into());
    }
    Ok(())
}

/// The block's activations and weights as drawn, in f32: x is M rows of D, the gate and
/// up weights F rows of D, the down weights D rows of F.
struct Block {
    x: Vec<f32>,
    w_gate: Vec<f32>,
    w_up: Vec<f32>,
    w_down: Vec<f32>,
}

impl Block {
    /// Draws x and the three weight matrices from the seeded stream `seed`.
    fn draw(seed: u64) -> Block {
        let (m, d, f) = (M as usize, D as usize, F as usize);
        let mut rng = Rng::from_seed(seed);
        let x = uniform(&mut rng, m * d, 1.0);
        let w_gate = uniform(&mut rng, f * d, 0.125);
        let w_up = uniform(&mut rng, f * d, 0.125);
        let w_down = uniform(&mut rng, d * f, 0.0625);
        Block {
            x,
            w_gate,
            w_up,
            w_down,
        }
    }
}

/// The seed of the weights and activations: the first argument, or 1.
fn seed() -> Res<u64> {
    Ok(match std::env::args().nth(1) {
        Some(s) => s.parse().map_err(|e| format!("seed {s}: {e}"))?,
        None => 1,
    })
}

/// The built layer, the plan its packed x follows and the tensors a call touches: the
/// input x, the two dequantisation steps' outputs (whose scale each call sets) and y.
struct Ffn {
    layer: Layer,
    plan: Plan,
    x_in: Tensor,
    g16: Tensor,
    u16: Tensor,
    y: Tensor,
}

/// The weight banks, packed once: int8 per output channel for gate and up, fp16 for
/// down.
fn banks(dev: &Device, block: &Block) -> Res<[Arc<WeightBank>; 3]> {
    let gate = Arc::new(WeightBank::quantize_f32_nk(
        dev,
        F,
        D,
        &block.w_gate,
        Dtype::Int8,
    )?);
    let up = Arc::new(WeightBank::quantize_f32_nk(
        dev,
        F,
        D,
        &block.w_up,
        Dtype::Int8,
    )?);
    let down_f16: Vec<f16> = block.w_down.iter().map(|&v| f16::from_f32(v)).collect();
    let down = Arc::new(WeightBank::new(dev, (D, F), Weights::F16(&down_f16))?);
    Ok([gate, up, down])
}

/// Builds the layer: five steps, one job.
fn build(dev: &Device, block: &Block) -> Res<Ffn> {
    let [gate, up, down] = banks(dev, block)?;
    let scales = |b: &WeightBank| -> Res<Vec<f32>> {
        Ok(b.scales().ok_or("a quantised bank has scales")?.to_vec())
    };
    let (gate_scales, up_scales) = (scales(&gate)?, scales(&up)?);

    let plan = Plan::for_layout(gate.layout(), M, OutType::Fp32, 1)?;

    let acc = Cube::new(M, 1, F, Precision::Fp32)?;
    let half = acc.with_precision(Precision::Fp16)?;
    let mut b = LayerBuilder::new(dev).with_timeout(Duration::from_secs(10));
    let x_in = b.input_bytes("x", plan.a_bytes as usize)?;
    let g_acc = b.matmul("gate", &gate, x_in, M, OutType::Fp32, MatmulInput::Packed)?;
    let u_acc = b.matmul("up", &up, x_in, M, OutType::Fp32, MatmulInput::Packed)?;
    // The activation scale is set per call (`Layer::set_step_scale`); 1 until then. Each
    // dequantisation's channel scales are a constant of its step.
    let dequant = Dequant::new(1.0, Precision::Fp16)?;
    let g_dq = DequantOp::new(dequant, acc, &gate_scales)?;
    let g16 = b.step("gate to fp16", g_dq, &[(Role::Input, g_acc)])?;
    let u_dq = DequantOp::new(dequant, acc, &up_scales)?;
    let u16 = b.step("up to fp16", u_dq, &[(Role::Input, u_acc)])?;
    let act = ActivationOp::new(Activation::Silu, half)?;
    let s = b.op("silu(gate)", &[g16], half, move |i, o| {
        act.tasks(
            &Bindings::new()
                .bind(Role::Input, i[0])
                .bind(Role::Output, o)
                .bind(Role::Operand, i[0]),
        )
    })?;
    let mul = Eltwise::new(EltwiseOp::Mul, half, Operand::Tensor)?;
    let h = b.op("silu(gate) * up", &[s, u16], half, move |i, o| {
        mul.tasks(
            &Bindings::new()
                .bind(Role::Input, i[0])
                .bind(Role::Operand, i[1])
                .bind(Role::Output, o),
        )
    })?;
    let y = b.matmul("down", &down, h, M, OutType::Fp32, MatmulInput::Native)?;
    b.output(y)?;
    let layer = b.build()?;
    Ok(Ffn {
        layer,
        plan,
        x_in,
        g16,
        u16,
        y,
    })
}

/// Prints the layer's steps, tasks and scratch memory.
fn describe(layer: &Layer) {
    let tasks = layer.program().tasks().len();
    let (scratch, unshared) = layer.scratch_bytes();
    println!(
        "layer: {} steps, {tasks} tasks in one chain; intermediates in {scratch} bytes of scratch ({unshared} without reuse)",
        layer.steps().len()
    );
    for step in layer.steps() {
        println!("  {:<16} tasks {:?}", step.name, step.tasks);
    }
}

/// One call with x times `factor`: quantises x per tensor on the host, gives the two
/// dequantisation steps that scale, runs the layer and checks y.
fn call(ffn: &mut Ffn, block: &Block, factor: f32) -> Res {
    let layer = &mut ffn.layer;
    let x: Vec<f32> = block.x.iter().map(|&v| v * factor).collect();
    let x_max = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let x_scale = x_max / 127.0;
    let x_q: Vec<i8> = x
        .iter()
        .map(|&v| (v / x_scale).round().clamp(-127.0, 127.0) as i8)
        .collect();
    layer.set_step_scale(ffn.g16, x_scale)?;
    layer.set_step_scale(ffn.u16, x_scale)?;
    layer.write(ffn.x_in, &pack::activations_i8(&ffn.plan, &x_q)?)?;
    layer.run()?;
    let y_cube = layer.tensor(ffn.y)?.cube.ok_or("y is a cube")?;
    let got: Vec<f32> = y_cube.unpack(&layer.read(ffn.y)?)?;
    check(
        &x,
        (&block.w_gate, &block.w_up, &block.w_down),
        &got,
        y_cube.channels as usize,
        factor,
    )
}

/// Times the layer as one job against one job per step, the same tasks and buffers,
/// and prints both.
fn time(dev: &Device, layer: &mut Layer) -> Res {
    let t0 = Instant::now();
    for _ in 0..RUNS {
        layer.run()?;
    }
    let one_job = t0.elapsed() / RUNS;
    let t1 = Instant::now();
    for _ in 0..RUNS {
        layer.run_steps_separately()?;
    }
    let per_step = t1.elapsed() / RUNS;
    let steps = layer.steps().len() as u32;
    println!(
        "time: one job {:.3} ms, {steps} jobs (one per step) {:.3} ms: {:.2} x",
        one_job.as_secs_f64() * 1e3,
        per_step.as_secs_f64() * 1e3,
        per_step.as_secs_f64() / one_job.as_secs_f64()
    );
    let p = HardwareProfile::rk3588();
    println!(
        "on a board the chain saves {} submissions of {:.0} us each (docs/ops.md), and every host round trip between the operations",
        steps - 1,
        p.per_submit_vendor_s * 1e6
    );
    if dev.emulator().is_some() {
        println!("(emulated kernel: the times above are the simulator's)");
    }
    Ok(())
}

fn run() -> Res {
    let dev = Device::open_or_emulated()?;
    println!("device: {}", dev.info());
    let block = Block::draw(seed()?);
    let mut ffn = build(&dev, &block)?;
    describe(&ffn.layer);
    // Each call quantises its x per tensor on the host and gives the two dequantisation
    // steps that scale: x as drawn, then three times larger (a scale fixed when the
    // layer was built would clamp it).
    for factor in [1.0f32, 3.0] {
        call(&mut ffn, &block, factor)?;
    }
    time(&dev, &mut ffn.layer)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ffn_block: {e}");
            ExitCode::FAILURE
        }
    }
}
