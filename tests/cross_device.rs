//! Handles of another device or layer, through the public API: refused before anything
//! is submitted, with a typed error, and nothing allocated for the refused call stays
//! alive on either device (docs/device.md, "Cross-device and layer handles").

use rknpu_driver::Error;
use rknpu_driver::compute::layer::{LayerBuilder, MatmulInput};
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, MatmulBatch, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::{Plan, pack};
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::single::{OutType, add_task};
use rknpu_driver::task::Precision;
use std::sync::Arc;

fn emu() -> Device {
    Device::open_spec("emu").unwrap()
}

const M: u32 = 2;
const K: u32 = 64;
const N: u32 = 32;

fn bank(dev: &Device, v: i8) -> Arc<WeightBank> {
    Arc::new(WeightBank::new(dev, (N, K), Weights::I8(&vec![v; (N * K) as usize])).unwrap())
}

#[test]
fn a_batch_of_two_devices_is_refused_and_frees_what_it_was_given() {
    let (dev, other) = (emu(), emu());
    let (mine, theirs) = (bank(&dev, 1), bank(&other, 2));
    let before = (dev.live_buffers(), other.live_buffers());
    let members = vec![
        Matmul::new(&mine, M).unwrap(),
        Matmul::new(&theirs, M).unwrap(),
    ];
    let e = MatmulBatch::new(members).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert_eq!((dev.live_buffers(), other.live_buffers()), before);
    // Each device's bank still runs on its own.
    let x = vec![1i8; (M * K) as usize];
    assert_eq!(
        Matmul::new(&mine, M).unwrap().run::<i8, i32>(&x).unwrap()[0],
        64
    );
    assert_eq!(
        Matmul::new(&theirs, M).unwrap().run::<i8, i32>(&x).unwrap()[0],
        128
    );
}

#[test]
fn a_layer_refuses_a_bank_of_another_device_and_runs_with_its_own() {
    let (dev, other) = (emu(), emu());
    let theirs = bank(&other, 2);
    let before = (dev.live_buffers(), other.live_buffers());
    let plan = Plan::for_layout(theirs.layout(), M, OutType::Int32, 1).unwrap();
    let mut b = LayerBuilder::new(&dev);
    let x = b.input_bytes("x", plan.a_bytes as usize).unwrap();
    let e = b
        .matmul("gate", &theirs, x, M, OutType::Int32, MatmulInput::Packed)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Foreign { what } if what.contains("gate")),
        "{e}"
    );
    drop(b);
    assert_eq!((dev.live_buffers(), other.live_buffers()), before);
    // With a bank of its own device the same step builds and computes x·Wᵀ.
    let mine = bank(&dev, 3);
    let mut b = LayerBuilder::new(&dev);
    let x = b.input_bytes("x", plan.a_bytes as usize).unwrap();
    let y = b
        .matmul("gate", &mine, x, M, OutType::Int32, MatmulInput::Packed)
        .unwrap();
    b.output(y).unwrap();
    let mut layer = b.build().unwrap();
    let a = pack::activations_i8(&plan, &vec![1i8; (M * K) as usize]).unwrap();
    layer.write(x, &a).unwrap();
    layer.run().unwrap();
    let c = layer.read(y).unwrap();
    assert_eq!(i32::from_le_bytes(c[..4].try_into().unwrap()), 3 * K as i32);
}

#[test]
fn a_layer_refuses_the_tensors_of_another_layer() {
    let dev = emu();
    let cube = Cube::new(4, 1, 8, Precision::Int32).unwrap();
    let layer = |dev: &Device| {
        let mut b = LayerBuilder::new(dev);
        let a = b.input("a", cube).unwrap();
        let y = b
            .op("a+a", &[a, a], cube, |ins, out| {
                Ok(vec![add_task(4, 8, ins[0], ins[1], out)?])
            })
            .unwrap();
        b.output(y).unwrap();
        (b.build().unwrap(), a, y)
    };
    let (mut first, a1, y1) = layer(&dev);
    let (mut second, a2, y2) = layer(&dev);
    // The same positions in two layers of the same shape are different handles.
    assert_ne!(a1, a2);
    let bytes = cube.pack(&[7i32; 32]).unwrap();
    assert!(matches!(
        first.write(a2, &bytes),
        Err(Error::Foreign { .. })
    ));
    assert!(matches!(second.read(y1), Err(Error::Foreign { .. })));
    first.write(a1, &bytes).unwrap();
    first.run().unwrap();
    assert_eq!(
        cube.unpack::<i32>(&first.read(y1).unwrap()).unwrap(),
        [14; 32]
    );
    // The second layer's input was never written by the refused call.
    second.run().unwrap();
    assert_eq!(
        cube.unpack::<i32>(&second.read(y2).unwrap()).unwrap(),
        [0; 32]
    );
}
