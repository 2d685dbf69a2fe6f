//! Degenerate operation specs — zero kernels, strides, dilations, groups or channels —
//! are typed errors from every generator, never a panic.

use rknpu_driver::kernels::ops::contract::{self, Bindings, DequantOp, Op, Role};
use rknpu_driver::kernels::ops::conv::Conv2d;
use rknpu_driver::kernels::ops::pool::{Pool2d, PoolKind};
use rknpu_driver::kernels::ops::{self, Cube};
use rknpu_driver::task::Precision;

fn addrs() -> [rknpu_driver::regcmd::DmaAddr; 3] {
    [
        ops::at(ops::INPUT, 0),
        ops::at(ops::WEIGHTS, 0),
        ops::at(ops::OUTPUT, 0),
    ]
}

#[test]
fn degenerate_convolutions_are_errors() {
    let [i, w, o] = addrs();
    for p in [Precision::Int8, Precision::Fp16] {
        let c = Cube::new(6, 6, 16, p).unwrap();
        let specs = [
            Conv2d::new(c, 0, (3, 3)),
            Conv2d::new(c, 16, (0, 3)),
            Conv2d::new(c, 16, (3, 0)),
            Conv2d::new(c, 16, (3, 3)).with_stride(0, 1),
            Conv2d::new(c, 16, (3, 3)).with_stride(1, 0),
            Conv2d::new(c, 16, (3, 3)).with_dilation(0, 1),
            Conv2d::new(c, 16, (3, 3)).with_groups(0),
            Conv2d::new(c, 16, (3, 3)).with_groups(3),
            Conv2d::new(c, 16, (7, 7)),
            Conv2d::new(c, 16, (3, 3))
                .with_depthwise(true)
                .with_groups(2),
            Conv2d::new(c, u32::MAX, (3, 3)),
            Conv2d::new(c, 16, (u32::MAX, 1)),
            Conv2d::new(c, 16, (3, 3)).with_dilation(u32::MAX, 1),
            Conv2d::new(c, 16, (3, 3)).with_stride(u32::MAX, u32::MAX),
        ];
        for (n, s) in specs.iter().enumerate() {
            assert!(
                s.tasks(
                    &Bindings::new()
                        .bind(Role::Input, i)
                        .bind(Role::Weights, w)
                        .bind(Role::Output, o)
                )
                .is_err(),
                "{p} spec {n} builds tasks"
            );
            assert!(
                s.output_size().is_err() || s.check().is_err(),
                "{p} spec {n}"
            );
        }
    }
}

#[test]
fn degenerate_pools_are_errors() {
    let [i, _, o] = addrs();
    let c = Cube::new(6, 6, 16, Precision::Fp16).unwrap();
    let specs = [
        Pool2d::new(c, PoolKind::Max, 0),
        Pool2d::new(c, PoolKind::Avg, 2).with_stride(0, 1),
        Pool2d::new(c, PoolKind::Avg, 2).with_kernel(0, 2),
        Pool2d::new(c, PoolKind::Max, 7),
        Pool2d::new(c, PoolKind::Max, 17),
        Pool2d::new(c, PoolKind::Max, 2).with_pad(u32::MAX),
        Pool2d::new(c, PoolKind::Max, 2).with_stride(u32::MAX, 1),
    ];
    for (n, s) in specs.iter().enumerate() {
        assert!(
            s.tasks(
                &Bindings::new()
                    .bind(Role::Input, i)
                    .bind(Role::Output, o)
                    .bind(Role::Scratch, o)
            )
            .is_err(),
            "spec {n} builds tasks"
        );
        assert!(s.output().is_err(), "spec {n} has an output");
    }
}

#[test]
fn degenerate_dpu_operations_are_errors() {
    use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
    use rknpu_driver::kernels::ops::epilogue::{Dequant, Requant};
    use rknpu_driver::kernels::ops::lut::{Activation, ActivationOp};
    let f32c = Cube::new(4, 1, 8, Precision::Fp32).unwrap();
    assert!(Eltwise::new(EltwiseOp::Add, f32c, Operand::Tensor).is_err());
    let i16c = Cube::new(4, 1, 8, Precision::Int16).unwrap();
    assert!(ActivationOp::new(Activation::Silu, i16c).is_err());
    for s in [f32::NAN, f32::INFINITY, 1e9, 1e-30] {
        assert!(Dequant::new(s, Precision::Fp16).is_err(), "scale {s}");
    }
    assert!(Dequant::new(0.5, Precision::Int8).is_err());
    // A dequantisation over a cube that is not fp32, or fp16 output of 6 channels.
    let d = Dequant::new(0.5, Precision::Fp16).unwrap();
    let refused = |cube: Cube| {
        let scales = vec![1.0; cube.channels as usize];
        contract::program(&DequantOp::new(d, cube, &scales).unwrap()).is_err()
    };
    assert!(refused(i16c));
    assert!(refused(Cube::new(4, 1, 6, Precision::Fp32).unwrap()));
    for scales in [vec![], vec![1.0, f32::NAN], vec![0.0], vec![-1.0]] {
        assert!(Requant::per_channel(&scales, 0).is_err(), "{scales:?}");
    }
}
