//! Layer programs of operations of the `Op` contract (`LayerBuilder::step`): each step's
//! roles bound to layer tensors by name, the operations' constants and scratch placed by
//! the builder, the whole chain one job on the emulated kernels, and the result equal to
//! the operations' own references composed on the host. Every step here is exact (integer
//! arithmetic, ReLU6, max pooling), so the comparison is exact too.

use rknpu_driver::Error;
use rknpu_driver::compute::layer::{LayerBuilder, MatmulInput};
use rknpu_driver::compute::matmul::WeightBank;
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::{Plan, WeightLayout};
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::{Op, Role, Values, pack_values, sample, unpack_values};
use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
use rknpu_driver::kernels::ops::lut::{Activation, ActivationOp};
use rknpu_driver::kernels::ops::pool::{Pool2d, PoolKind};
use rknpu_driver::kernels::single::{Dtype, OutType};
use rknpu_driver::task::Precision;
use std::sync::Arc;

fn values(pairs: &[(Role, &[f64])]) -> Values {
    pairs.iter().map(|(r, v)| (*r, v.to_vec())).collect()
}

#[test]
fn an_integer_chain_with_a_pool_equals_the_composed_references() {
    let dev = Device::open_spec("emu").unwrap();
    let cube = Cube::new(8, 6, 24, Precision::Int8).unwrap();
    let add = Eltwise::new(EltwiseOp::Add, cube, Operand::Tensor).unwrap();
    let scale = Eltwise::new(EltwiseOp::Mul, cube, Operand::PerChannel).unwrap();
    let pool = Pool2d::new(cube, PoolKind::Max, 2);
    let pooled = pool.output().unwrap();
    // Seeded inputs from the operations' own sampling (the whole int8 range).
    let ab = sample(&add, 11).unwrap();
    let (x, y) = (&ab[&Role::Input], &ab[&Role::Operand]);
    let w: Vec<f64> = (0..24).map(|c| f64::from(c % 5) - 2.0).collect();

    let mut b = LayerBuilder::new(&dev);
    let tx = b.input("x", cube).unwrap();
    let ty = b.input("y", cube).unwrap();
    let tw = b.input("w", scale.operand_cube()).unwrap();
    let s = b
        .step("x+y", add, &[(Role::Operand, ty), (Role::Input, tx)])
        .unwrap();
    let m = b
        .step("(x+y)*w", scale, &[(Role::Input, s), (Role::Operand, tw)])
        .unwrap();
    let p = b.step("max 2x2", pool, &[(Role::Input, m)]).unwrap();
    b.output(p).unwrap();
    let mut layer = b.build().unwrap();
    layer.write(tx, &pack_values(&cube, x).unwrap()).unwrap();
    layer.write(ty, &pack_values(&cube, y).unwrap()).unwrap();
    let wc = scale.operand_cube();
    layer.write(tw, &pack_values(&wc, &w).unwrap()).unwrap();
    layer.run().unwrap();
    let got = unpack_values(&pooled, &layer.read(p).unwrap()).unwrap();

    let sum = add.reference(&ab).unwrap();
    let prod = scale
        .reference(&values(&[(Role::Input, &sum), (Role::Operand, &w)]))
        .unwrap();
    let want = pool.reference(&values(&[(Role::Input, &prod)])).unwrap();
    assert_eq!(got, want);
    // The chain saturated somewhere (int8 sums of the whole range): the references
    // carry the DPU's saturation, not a wider sum.
    assert!(sum.iter().any(|&v| v == 127.0 || v == -128.0));
}

/// ReLU6 reads a constant operand (sixes) and a global max pool of 20 x 20 runs in two
/// passes through scratch: both placed by the builder.
fn relu6_then_global_max(dev: &Device, pool: bool) {
    let cube = Cube::new(20, 20, 8, Precision::Fp16).unwrap();
    let add = Eltwise::new(EltwiseOp::Add, cube, Operand::Tensor).unwrap();
    let relu6 = ActivationOp::new(Activation::Relu6, cube).unwrap();
    let global = Pool2d::global(cube, PoolKind::Max);
    let mut ab = sample(&add, 5).unwrap();
    if pool {
        // Values in [-2, 2] (exact in fp16): the window maxima differ by channel.
        for v in ab.values_mut().flatten() {
            *v /= 8.0;
        }
    }
    let mut b = LayerBuilder::new(dev);
    let tx = b.input("x", cube).unwrap();
    let ty = b.input("y", cube).unwrap();
    let s = b
        .step("x+y", add, &[(Role::Input, tx), (Role::Operand, ty)])
        .unwrap();
    let r = b.step("relu6", relu6, &[(Role::Input, s)]).unwrap();
    let out = if pool {
        b.step("global max", global, &[(Role::Input, r)]).unwrap()
    } else {
        r
    };
    b.output(out).unwrap();
    let mut layer = b.build().unwrap();
    layer
        .write(tx, &pack_values(&cube, &ab[&Role::Input]).unwrap())
        .unwrap();
    layer
        .write(ty, &pack_values(&cube, &ab[&Role::Operand]).unwrap())
        .unwrap();
    layer.run().unwrap();
    let bytes = layer.read(out).unwrap();
    let sum = add.reference(&ab).unwrap();
    let clamped = relu6.reference(&values(&[(Role::Input, &sum)])).unwrap();
    if pool {
        let o = global.output().unwrap();
        let want = global
            .reference(&values(&[(Role::Input, &clamped)]))
            .unwrap();
        assert!(global.scratch_bytes().unwrap() > 0);
        assert_eq!(unpack_values(&o, &bytes).unwrap(), want);
        assert!(want.iter().any(|&v| v != want[0]), "{want:?}");
    } else {
        assert_eq!(unpack_values(&cube, &bytes).unwrap(), clamped);
        assert!(clamped.contains(&6.0) && clamped.contains(&0.0));
    }
}

#[test]
fn constants_and_scratch_of_a_step_are_placed_by_the_builder() {
    relu6_then_global_max(&Device::open_spec("emu").unwrap(), true);
    // Rocket refuses pooling; the chain before it runs there too.
    relu6_then_global_max(&Device::open_spec("emu:rocket").unwrap(), false);
}

#[test]
fn roles_that_do_not_match_the_operation_are_refused_by_name() {
    let dev = Device::open_spec("emu").unwrap();
    let cube = Cube::new(8, 2, 16, Precision::Int8).unwrap();
    let add = Eltwise::new(EltwiseOp::Add, cube, Operand::Tensor).unwrap();
    let mut b = LayerBuilder::new(&dev);
    let x = b.input("x", cube).unwrap();
    let small = b
        .input("small", Cube::new(4, 2, 16, Precision::Int8).unwrap())
        .unwrap();
    let msg = |e: Error| e.to_string();
    let missing = msg(b.step("a", add, &[(Role::Input, x)]).unwrap_err());
    assert!(missing.contains("no tensor for the operand"), "{missing}");
    let extra = [(Role::Input, x), (Role::Operand, x), (Role::Weights, x)];
    let extra = msg(b.step("b", add, &extra).unwrap_err());
    assert!(extra.contains("does not read a weights"), "{extra}");
    let twice = [(Role::Input, x), (Role::Input, x), (Role::Operand, x)];
    let twice = msg(b.step("c", add, &twice).unwrap_err());
    assert!(twice.contains("given twice"), "{twice}");
    let short = msg(b
        .step("d", add, &[(Role::Input, x), (Role::Operand, small)])
        .unwrap_err());
    assert!(short.contains("the operand is 128 bytes"), "{short}");
    let mut other = LayerBuilder::new(&dev);
    let foreign = other.input("f", cube).unwrap();
    let e = b
        .step("e", add, &[(Role::Input, x), (Role::Operand, foreign)])
        .unwrap_err();
    assert!(matches!(e, Error::Foreign { .. }), "{e}");
    // The same tensor in two roles is an operation of x with itself.
    let doubled = b
        .step("x+x", add, &[(Role::Input, x), (Role::Operand, x)])
        .unwrap();
    b.output(doubled).unwrap();
    let mut layer = b.build().unwrap();
    let v: Vec<f64> = (0..cube.elems()).map(|i| (i % 100) as f64 - 50.0).collect();
    layer.write(x, &pack_values(&cube, &v).unwrap()).unwrap();
    layer.run().unwrap();
    let got = unpack_values(&cube, &layer.read(doubled).unwrap()).unwrap();
    let want: Vec<f64> = v.iter().map(|a| (2.0 * a).clamp(-128.0, 127.0)).collect();
    assert_eq!(got, want);
}

/// A matmul step against an int4 bank: its int16 result cube read back and summed exactly
/// (the step runs through `MatmulOp`, which emits every plan, host values or not).
#[test]
fn an_int4_matmul_step_gives_the_exact_product() {
    let dev = Device::open_spec("emu").unwrap();
    let (m, k, n) = (4u32, 64u32, 64u32);
    let layout = WeightLayout::new(k, n, Dtype::Int4).unwrap();
    let w: Vec<i32> = (0..k * n).map(|i| (i * 7 % 16) as i32 - 8).collect();
    let bank = Arc::new(WeightBank::from_kn_in(&dev, &layout, Weights::Int(&w)).unwrap());
    let plan = Plan::for_layout(&layout, m, OutType::Int16, 1).unwrap();
    let mut b = LayerBuilder::new(&dev);
    let a = b.input_bytes("a", plan.a_bytes as usize).unwrap();
    let y = b
        .matmul("a.W", &bank, a, m, OutType::Int16, MatmulInput::Packed)
        .unwrap();
    b.output(y).unwrap();
    let mut layer = b.build().unwrap();
    let x: Vec<i32> = (0..m * k).map(|i| (i * 5 % 16) as i32 - 8).collect();
    layer.write(a, &plan.pack_a_int(&x).unwrap()).unwrap();
    layer.run().unwrap();
    let got = plan.reduce_int(&layer.read(y).unwrap()).unwrap();
    let (k, n) = (k as usize, n as usize);
    let want: Vec<i64> = (0..m as usize * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            (0..k).map(|j| i64::from(x[r * k + j] * w[j * n + c])).sum()
        })
        .collect();
    assert_eq!(got, want);
}
