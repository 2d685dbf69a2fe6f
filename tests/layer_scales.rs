//! Per-call scales of a built layer (`Layer::set_step_scale`): a dequantisation step's
//! per-tensor scale set between runs gives, bit for bit, the DPU arithmetic with that
//! scale (`(x · fp16(s)) · fp16(w[c])` in fp32, computed here), on the emulated vendor
//! and rocket kernels; bad requests are typed errors and leave the layer as it was.

mod common;

use common::Rng;
use half::f16;
use rknpu_driver::Error;
use rknpu_driver::compute::layer::{Layer, LayerBuilder, Tensor};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::{Bindings, DequantOp, Op, Role};
use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
use rknpu_driver::kernels::ops::epilogue::Dequant;
use rknpu_driver::task::Precision;

const M: u32 = 6;
const N: u32 = 40;

/// A layer of one dequantisation step (scale `s0`, fp32 out) over an fp32 input cube,
/// whose output is the layer's: the layer, its input, the step's output and the
/// channel scales.
fn layer(dev: &Device, s0: f32) -> (Layer, Tensor, Tensor, Vec<f32>) {
    let cube = Cube::new(M, 1, N, Precision::Fp32).unwrap();
    let mut rng = Rng(0x5ca1e);
    let w: Vec<f32> = (0..N).map(|_| 0.5 + rng.float()).collect();
    let mut b = LayerBuilder::new(dev);
    let x = b.input("x", cube).unwrap();
    let dq = Dequant::new(s0, Precision::Fp32).unwrap();
    let y = b
        .step(
            "dequant",
            DequantOp::new(dq, cube, &w).unwrap(),
            &[(Role::Input, x)],
        )
        .unwrap();
    b.output(y).unwrap();
    (b.build().unwrap(), x, y, w)
}

fn expected(x: &[f32], s: f32, w: &[f32]) -> Vec<f32> {
    let h = |v: f32| f16::from_f32(v).to_f32();
    x.iter()
        .enumerate()
        .map(|(i, &v)| (v * h(s)) * h(w[i % N as usize]))
        .collect()
}

#[test]
fn a_dequantisation_steps_scale_follows_each_call() {
    let cube = Cube::new(M, 1, N, Precision::Fp32).unwrap();
    let mut rng = Rng(0xca11);
    let x: Vec<f32> = (0..M * N).map(|_| 8.0 * rng.float() - 4.0).collect();
    for spec in ["emu", "emu:rocket"] {
        let dev = Device::open_spec(spec).unwrap();
        let (mut layer, xin, y, w) = layer(&dev, 0.25);
        layer.write(xin, &cube.pack(&x).unwrap()).unwrap();
        for s in [0.25f32, 3.0, 1.0 / 300.0, 0.25] {
            layer.set_step_scale(y, s).unwrap();
            layer.run().unwrap();
            let got: Vec<f32> = cube.unpack(&layer.read(y).unwrap()).unwrap();
            let want = expected(&x, s, &w);
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    e.to_bits(),
                    "{spec} scale {s} [{i}]: {g} vs {e}"
                );
            }
        }
    }
}

#[test]
fn bad_scale_requests_are_typed_errors_and_change_nothing() {
    let dev = Device::open_spec("emu").unwrap();
    let cube = Cube::new(M, 1, N, Precision::Fp32).unwrap();
    let (mut layer, xin, y, w) = layer(&dev, 2.0);
    let x: Vec<f32> = (0..M * N).map(|i| i as f32 / 7.0).collect();
    layer.write(xin, &cube.pack(&x).unwrap()).unwrap();
    // Not written by a step: the layer's input.
    assert!(matches!(
        layer.set_step_scale(xin, 1.0),
        Err(Error::InvalidArgument { .. })
    ));
    // Scales fp16 cannot carry.
    for s in [f32::NAN, f32::INFINITY, 1e6, 1e-12] {
        assert!(
            matches!(layer.set_step_scale(y, s), Err(Error::OutOfRange { .. })),
            "{s}"
        );
    }
    // A tensor of another layer.
    let (_, _, other_y, _) = self::layer(&dev, 1.0);
    assert!(matches!(
        layer.set_step_scale(other_y, 1.0),
        Err(Error::Foreign { .. })
    ));
    // The layer still computes with its scale of 2.
    layer.run().unwrap();
    let got: Vec<f32> = cube.unpack(&layer.read(y).unwrap()).unwrap();
    assert_eq!(got, expected(&x, 2.0, &w));

    // A step without a multiplier: an fp16 element-wise add.
    let half = Cube::new(8, 1, 16, Precision::Fp16).unwrap();
    let mut b = LayerBuilder::new(&dev);
    let a = b.input("a", half).unwrap();
    let add = Eltwise::new(EltwiseOp::Add, half, Operand::Tensor).unwrap();
    let s = b
        .op("a+a", &[a], half, move |i, o| {
            add.tasks(
                &Bindings::new()
                    .bind(Role::Input, i[0])
                    .bind(Role::Operand, i[0])
                    .bind(Role::Output, o),
            )
        })
        .unwrap();
    b.output(s).unwrap();
    let mut plain = b.build().unwrap();
    assert!(matches!(
        plain.set_step_scale(s, 1.0),
        Err(Error::InvalidArgument { .. })
    ));
}
