//! Every operation of the `Op` contract (`kernels::ops::contract`) through the one
//! generic path: its program built with its buffers bound by role, run on the emulated
//! kernels (vendor and rocket), and its result held to its own CPU reference within its
//! own tolerance (`compute::ops::check_op`). The operations' own test files check their
//! references against hand-computed values; this harness checks that the contract joins
//! them correctly for every operation, so a new operation gets the same test by adding
//! one line to `ops(..)`.

use rknpu_driver::Error;
use rknpu_driver::compute::ops::{check_op, run_op};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan, TileLimits};
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::{
    self, Access, Bindings, DequantOp, MatmulOp, Op, Port, RequantOp, Role, Sampling, Tolerance,
    Values,
};
use rknpu_driver::kernels::ops::conv::{Conv2d, ConvOut};
use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
use rknpu_driver::kernels::ops::epilogue::{Dequant, OutScale, Requant};
use rknpu_driver::kernels::ops::lut::{Activation, ActivationOp};
use rknpu_driver::kernels::ops::pool::{Pool2d, PoolKind};
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::task::{Precision, Task};

const SPECS: [&str; 2] = ["emu", "emu:rocket"];

fn cube(w: u32, h: u32, c: u32, p: Precision) -> Cube {
    Cube::new(w, h, c, p).unwrap()
}

/// One operation of every kind the contract covers, at shapes with partial atoms.
fn ops(reuse: bool) -> Vec<Box<dyn Op>> {
    let mut v: Vec<Box<dyn Op>> = Vec::new();
    for (p, op, operand) in [
        (Precision::Int8, EltwiseOp::Add, Operand::Tensor),
        (Precision::Int8, EltwiseOp::Mul, Operand::PerChannel),
        (Precision::Int16, EltwiseOp::Sub, Operand::Tensor),
        (Precision::Fp16, EltwiseOp::Mul, Operand::Tensor),
        (Precision::Fp16, EltwiseOp::Max, Operand::PerChannel),
        (Precision::Fp16, EltwiseOp::Min, Operand::Tensor),
    ] {
        v.push(Box::new(
            Eltwise::new(op, cube(5, 3, 20, p), operand).unwrap(),
        ));
    }
    for a in Activation::ALL {
        v.push(Box::new(
            ActivationOp::new(a, cube(7, 3, 20, Precision::Fp16)).unwrap(),
        ));
    }
    let pool = |p, kind, k| Pool2d::new(cube(9, 8, 24, p), kind, k);
    v.push(Box::new(pool(Precision::Int8, PoolKind::Max, 2)));
    v.push(Box::new(
        pool(Precision::Fp16, PoolKind::Min, 3).with_stride(2, 2),
    ));
    v.push(Box::new(
        pool(Precision::Fp16, PoolKind::Avg, 3)
            .with_stride(2, 2)
            .with_pad(1),
    ));
    v.push(Box::new(Pool2d::global(
        cube(20, 20, 8, Precision::Fp16),
        PoolKind::Avg,
    )));
    let conv = |p| Conv2d::new(cube(6, 5, 16, p), 24, (3, 3)).with_pad_symmetric(1);
    v.push(Box::new(conv(Precision::Int8)));
    v.push(Box::new(conv(Precision::Fp16).with_out(ConvOut::Fp16)));
    v.push(Box::new(
        Conv2d::new(cube(6, 5, 32, Precision::Fp16), 32, (3, 3))
            .with_depthwise(true)
            .with_stride(2, 2)
            .with_out(ConvOut::Fp16),
    ));
    let scales: Vec<f32> = (0..32).map(|c| 0.002 + 0.0001 * c as f32).collect();
    let (rq, mult) = Requant::per_channel(&scales, 3).unwrap();
    let bias: Vec<i32> = (0..32).map(|c| 50 * c - 700).collect();
    let acc = cube(6, 2, 32, Precision::Int32);
    v.push(Box::new(
        RequantOp::new(rq.with_bias(), acc, &bias, &mult).unwrap(),
    ));
    let plain = Requant::per_tensor(OutScale::from_scale(0.01, -4).unwrap());
    v.push(Box::new(RequantOp::new(plain, acc, &[], &[]).unwrap()));
    let w: Vec<f32> = (0..32).map(|c| 0.5 + c as f32 / 16.0).collect();
    let dq = |out, p| DequantOp::new(Dequant::new(0.125, out).unwrap(), cube(6, 2, 32, p), &w);
    v.push(Box::new(dq(Precision::Fp16, Precision::Fp32).unwrap()));
    v.push(Box::new(dq(Precision::Fp32, Precision::Int32).unwrap()));
    // Matmuls of one and of several K waves (the host sums the waves in `unpack`).
    for (m, k, n, dtype) in [
        (5, 96, 64, Dtype::Int8),
        (3, 9000, 32, Dtype::Int8),
        (4, 128, 48, Dtype::Fp16),
        (2, 5000, 32, Dtype::Fp16),
        (3, 64, 32, Dtype::Bf16),
    ] {
        let plan = Plan::new(MatmulSpec::new(m, k, n, dtype)).unwrap();
        v.push(Box::new(MatmulOp::new(plan).unwrap()));
    }
    v.extend(cube_matmuls(reuse));
    v
}

/// Matmuls writing C as one cube (what a layer step runs): M tiles, column tiles, cores
/// and K waves written in place, later waves added on the NPU, A packed or native. With
/// `reuse` the plans keep their CBUF reuse (the vendor driver runs a core's tasks as one
/// chain); the rocket driver starts each task alone, so there they load every operand.
fn cube_matmuls(reuse: bool) -> Vec<Box<dyn Op>> {
    let mut v: Vec<Box<dyn Op>> = Vec::new();
    // (m, k, n, dtype, cores, tile rows, tile columns, native A)
    for (m, k, n, dtype, cores, rows, cols, native) in [
        (70, 256, 96, Dtype::Int8, 1, 32, 64, true),
        (6, 9000, 64, Dtype::Int8, 1, u32::MAX, 32, false),
        (40, 5120, 64, Dtype::Int8, 1, 16, u32::MAX, true),
        (9, 96, 96, Dtype::Int8, 3, u32::MAX, u32::MAX, false),
        (5, 128, 48, Dtype::Fp16, 1, 2, u32::MAX, true),
        (7, 64, 40, Dtype::Bf16, 2, 3, 32, false),
    ] {
        let layout = Plan::new(MatmulSpec::new(m, k, n, dtype)).unwrap().layout;
        let limits = TileLimits {
            rows,
            cols,
            split_rows: false,
        };
        let plan = Plan::with_limits(&layout, m, dtype.default_out(), cores, limits).unwrap();
        let plan = if reuse { plan } else { plan.without_reuse() };
        let op = MatmulOp::new(plan)
            .unwrap()
            .with_native_input(native)
            .with_cube_output()
            .unwrap();
        v.push(Box::new(op));
    }
    v
}

#[test]
fn cube_matmuls_cover_tiles_waves_and_cores() {
    let ops = cube_matmuls(true);
    let plans: Vec<_> = ops.iter().map(|op| op.describe()).collect();
    let tasks = |i: usize| {
        let op = &ops[i];
        op.tasks(&Bindings::slots(&op.ports().unwrap())).unwrap()
    };
    // Several M tiles and column tiles; several K waves (with their adds, DPU-only
    // tasks); several cores.
    assert!(tasks(0).len() >= 6, "{}", plans[0]);
    assert!(tasks(1).iter().any(|t| t.cna.is_none()), "{}", plans[1]);
    assert!(plans[1].contains("3 K wave(s)"), "{}", plans[1]);
    assert!(tasks(2).iter().any(|t| t.cna.is_none()), "{}", plans[2]);
    assert!(!tasks(4).iter().any(|t| t.cna.is_none()), "{}", plans[4]);
}

#[test]
fn a_float_plan_of_several_waves_is_not_written_as_one_cube() {
    let plan = Plan::new(MatmulSpec::new(2, 5000, 32, Dtype::Fp16)).unwrap();
    let e = MatmulOp::new(plan).unwrap().with_cube_output().unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("int32 partials"), "{e}");
}

#[test]
fn every_operation_meets_its_reference_on_the_emulated_kernels() {
    for spec in SPECS {
        let dev = Device::open_spec(spec).unwrap();
        for op in ops(spec == "emu") {
            let tasks = op.tasks(&Bindings::slots(&op.ports().unwrap())).unwrap();
            let pools = tasks.iter().any(|t| t.ppu.is_some());
            let result = check_op(&dev, op.as_ref(), 7);
            if pools && spec == "emu:rocket" {
                // The rocket driver waits for DPU interrupts only: the device refuses
                // PPU tasks rather than letting them time out (docs/device.md).
                let e = result.unwrap_err();
                assert!(matches!(e, Error::NotOffered { .. }), "{e}");
                continue;
            }
            let c = result.unwrap_or_else(|e| panic!("{spec}: {}: {e}", op.describe()));
            assert!(
                c.within,
                "{spec}: {}: worst error {:e} ({})",
                op.describe(),
                c.worst,
                c.basis
            );
            assert!(c.elements > 0);
        }
    }
}

/// An operation whose reference is off by `by`: the harness must see it.
#[derive(Debug)]
struct Off<O>(O, f64);

impl<O: Op> Op for Off<O> {
    fn describe(&self) -> String {
        format!("{} (reference off by {})", self.0.describe(), self.1)
    }
    fn ports(&self) -> rknpu_driver::Result<Vec<Port>> {
        self.0.ports()
    }
    fn tasks(&self, b: &Bindings) -> rknpu_driver::Result<Vec<Task>> {
        self.0.tasks(b)
    }
    fn sampling(&self, role: Role) -> Sampling {
        self.0.sampling(role)
    }
    fn reference(&self, inputs: &Values) -> rknpu_driver::Result<Vec<f64>> {
        let mut r = self.0.reference(inputs)?;
        let mid = r.len() / 2;
        r[mid] += self.1;
        Ok(r)
    }
    fn tolerance(&self, inputs: &Values, r: &[f64]) -> rknpu_driver::Result<Tolerance> {
        self.0.tolerance(inputs, r)
    }
}

#[test]
fn a_result_outside_the_tolerance_fails_the_check() {
    let dev = Device::open_spec("emu").unwrap();
    let add = Eltwise::new(
        EltwiseOp::Add,
        cube(4, 2, 16, Precision::Int8),
        Operand::Tensor,
    );
    let add = add.unwrap();
    assert!(check_op(&dev, &Off(add, 0.0), 3).unwrap().within);
    let c = check_op(&dev, &Off(add, 1.0), 3).unwrap();
    assert!(!c.within);
    assert_eq!(c.worst, 1.0);
    // The LUT's bound is not zero: an error just beyond it fails, one within it passes.
    let silu = ActivationOp::new(Activation::Silu, cube(8, 1, 16, Precision::Fp16)).unwrap();
    let bound = Activation::Silu.error_bound();
    assert!(!check_op(&dev, &Off(silu, 3.0 * bound), 3).unwrap().within);
}

#[test]
fn roles_are_bound_by_name_and_a_missing_one_is_named() {
    let ew = Eltwise::new(
        EltwiseOp::Sub,
        cube(4, 2, 16, Precision::Int8),
        Operand::Tensor,
    );
    let ew = ew.unwrap();
    let ports = ew.ports().unwrap();
    let roles: Vec<Role> = ports.iter().map(|p| p.role).collect();
    assert_eq!(roles, [Role::Input, Role::Operand, Role::Output]);
    // Input and operand swapped by role give the program of the swapped operation's
    // addresses: the tasks read what the bindings say, whatever order they were bound in.
    let at = |b: u32, o: u32| rknpu_driver::regcmd::DmaAddr::Fixed(0x10_0000 * b + o);
    let one = Bindings::new()
        .bind(Role::Output, at(3, 0))
        .bind(Role::Operand, at(2, 0))
        .bind(Role::Input, at(1, 0));
    let two = Bindings::new()
        .bind(Role::Input, at(1, 0))
        .bind(Role::Operand, at(2, 0))
        .bind(Role::Output, at(3, 0));
    assert_eq!(ew.tasks(&one).unwrap(), ew.tasks(&two).unwrap());
    let e = ew
        .tasks(&Bindings::new().bind(Role::Input, at(1, 0)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("operand"), "{e}");
}

#[test]
fn run_op_refuses_missing_values_and_frees_everything() {
    let dev = Device::open_emulator(std::sync::Arc::new(rknpu_driver::emu::EmuKernel::new(
        rknpu_driver::emu::Flavour::Vendor098,
    )))
    .unwrap();
    let ew = Eltwise::new(
        EltwiseOp::Add,
        cube(4, 2, 16, Precision::Int8),
        Operand::Tensor,
    );
    let ew = ew.unwrap();
    let mut inputs = contract::sample(&ew, 1).unwrap();
    inputs.remove(&Role::Operand);
    let e = run_op(&dev, &ew, &inputs).unwrap_err().to_string();
    assert!(e.contains("operand"), "{e}");
    // Values that are not int8 are refused, not truncated.
    let mut inputs = contract::sample(&ew, 1).unwrap();
    inputs.get_mut(&Role::Input).unwrap()[0] = 300.0;
    assert!(run_op(&dev, &ew, &inputs).is_err());
    inputs.get_mut(&Role::Input).unwrap()[0] = 0.5;
    assert!(run_op(&dev, &ew, &inputs).is_err());
    assert_eq!(dev.live_buffers(), 0);
}

#[test]
fn constants_and_scratch_are_the_operations_own() {
    let relu = ActivationOp::new(Activation::Relu6, cube(8, 1, 16, Precision::Fp16)).unwrap();
    let ports = relu.ports().unwrap();
    let operand = ports.iter().find(|p| p.role == Role::Operand).unwrap();
    let Access::Constant(bytes) = &operand.access else {
        panic!("ReLU6's sixes are a constant: {operand:?}")
    };
    assert!(
        bytes
            .chunks_exact(2)
            .all(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32() == 6.0)
    );
    let sig = ActivationOp::new(Activation::Sigmoid, cube(8, 1, 16, Precision::Fp16)).unwrap();
    assert!(sig.ports().unwrap().iter().all(|p| p.role != Role::Operand));
    let global = Pool2d::global(cube(20, 20, 8, Precision::Fp16), PoolKind::Max);
    let scratch = contract::port(&global, Role::Scratch).unwrap();
    assert_eq!(scratch.access, Access::Scratch);
    assert_eq!(scratch.bytes, global.scratch_bytes().unwrap());
    assert!(scratch.bytes > 0);
}
