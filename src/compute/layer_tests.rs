//! Layer programs on the emulated kernel: tensors placed and reused, steps chained into
//! one job, the same work as one job per step, refusals, nothing leaked.

use super::layer::{LayerBuilder, MatmulInput, Tensor};
use super::matmul::WeightBank;
use crate::compute::matmul::Weights;
use crate::device::Device;
use crate::error::Error;
use crate::float::{f16_to_f32, f32_to_f16};
use crate::kernels::matmul::{Plan, pack};
use crate::kernels::ops::Cube;
use crate::kernels::single::{OutType, add_task, dequant_task, pack_dequant_coefficients};
use crate::regcmd::DmaAddr;
use crate::seeded::Rng;
use crate::task::{Access, Precision};
use crate::verify::VerifyError;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn emu() -> Device {
    Device::open_spec("emu").unwrap()
}

/// `ins[0] + ins[1]` on int32 cubes of `cube`'s shape (one pixel line).
fn add(cube: Cube) -> impl FnOnce(&[DmaAddr], DmaAddr) -> crate::Result<Vec<crate::task::Task>> {
    move |ins, out| {
        Ok(vec![add_task(
            cube.width,
            cube.channels,
            ins[0],
            ins[1],
            out,
        )?])
    }
}

fn values(seed: u64, n: usize) -> Vec<i32> {
    let mut rng = Rng::from_seed(seed);
    (0..n).map(|_| rng.int(-1 << 20, 1 << 20)).collect()
}

/// a, b → t1 = a + b → t2 = t1 + a → t3 = t2 + b → y = t3 + a: t1 is dead once t2 is
/// written, so t3 takes its bytes.
struct Chain {
    cube: Cube,
    a: Tensor,
    b: Tensor,
    t1: Tensor,
    t3: Tensor,
    y: Tensor,
}

fn chain(b: &mut LayerBuilder) -> Chain {
    let cube = Cube::new(16, 1, 32, Precision::Int32).unwrap();
    let a = b.input("a", cube).unwrap();
    let x = b.input("b", cube).unwrap();
    let t1 = b.op("t1", &[a, x], cube, add(cube)).unwrap();
    let t2 = b.op("t2", &[t1, a], cube, add(cube)).unwrap();
    let t3 = b.op("t3", &[t2, x], cube, add(cube)).unwrap();
    let y = b.op("y", &[t3, a], cube, add(cube)).unwrap();
    b.output(y).unwrap();
    Chain {
        cube,
        a,
        b: x,
        t1,
        t3,
        y,
    }
}

#[test]
fn a_chain_runs_as_one_job_and_reuses_dead_intermediates() {
    let dev = emu();
    let mut b = LayerBuilder::new(&dev);
    let c = chain(&mut b);
    let mut layer = b.build().unwrap();
    assert_eq!(layer.program().tasks().len(), 4);
    assert_eq!(layer.steps().len(), 4);
    let len = c.cube.bytes();
    // Three intermediates of `len` bytes each, two live at a time.
    assert_eq!(layer.scratch_bytes(), (2 * len, 3 * len));
    let t1 = layer.tensor(c.t1).unwrap().scratch_offset;
    assert_eq!(layer.tensor(c.t3).unwrap().scratch_offset, t1);
    assert_eq!(layer.tensor(c.y).unwrap().scratch_offset, None);
    let (va, vb) = (values(1, 512), values(2, 512));
    layer.write(c.a, &c.cube.pack(&va).unwrap()).unwrap();
    layer.write(c.b, &c.cube.pack(&vb).unwrap()).unwrap();
    let r = layer.run().unwrap();
    assert_eq!(r.task_counter, 4);
    let y: Vec<i32> = c.cube.unpack(&layer.read(c.y).unwrap()).unwrap();
    for i in 0..512 {
        assert_eq!(y[i], 3 * va[i] + 2 * vb[i], "element {i}");
    }
}

#[test]
fn one_job_per_step_and_an_asynchronous_run_give_the_same_result() {
    let dev = emu();
    let mut b = LayerBuilder::new(&dev);
    let c = chain(&mut b);
    let mut layer = b.build().unwrap();
    let (va, vb) = (values(3, 512), values(4, 512));
    layer.write(c.a, &c.cube.pack(&va).unwrap()).unwrap();
    layer.write(c.b, &c.cube.pack(&vb).unwrap()).unwrap();
    let times = layer.run_steps_separately().unwrap();
    assert_eq!(times.len(), 4);
    let separate = layer.read(c.y).unwrap();
    let want: Vec<i32> = (0..512).map(|i| 3 * va[i] + 2 * vb[i]).collect();
    assert_eq!(c.cube.unpack::<i32>(&separate).unwrap(), want);
    // The same layer built again, run as one job without blocking.
    let mut b2 = LayerBuilder::new(&dev);
    let c2 = chain(&mut b2);
    let mut layer2 = b2.build().unwrap();
    layer2.write(c2.a, &c2.cube.pack(&va).unwrap()).unwrap();
    layer2.write(c2.b, &c2.cube.pack(&vb).unwrap()).unwrap();
    let pending = layer2.submit().unwrap();
    pending
        .wait(Instant::now() + Duration::from_secs(5))
        .unwrap();
    assert_eq!(layer2.read(c2.y).unwrap(), separate);
}

#[test]
fn a_matmul_and_its_dequantisation_chain_on_the_device() {
    let dev = emu();
    let (m, k, n) = (3u32, 96u32, 64u32);
    let mut rng = Rng::from_seed(7);
    let w: Vec<i8> = (0..n * k).map(|_| rng.int(-127, 127) as i8).collect();
    let x: Vec<i8> = (0..m * k).map(|_| rng.int(-128, 127) as i8).collect();
    let row_scales = [0.5f32, 0.03125, 0.0078125];
    let w_scales: Vec<f32> = (0..n).map(|i| 0.001 * (i + 1) as f32).collect();
    let bank = Arc::new(WeightBank::new(&dev, (n, k), Weights::I8(&w)).unwrap());
    let plan = Plan::for_layout(bank.layout(), m, OutType::Fp32, 1).unwrap();
    let mut b = LayerBuilder::new(&dev);
    let xa = b.input_bytes("x", plan.a_bytes as usize).unwrap();
    let acc = b
        .matmul("x.W", &bank, xa, m, OutType::Fp32, MatmulInput::Packed)
        .unwrap();
    let coeffs = b
        .constant("w scales", pack_dequant_coefficients(&w_scales).unwrap())
        .unwrap();
    let y = b
        .op_raw(
            "dequant",
            &[acc, coeffs],
            (m * n * 4) as usize,
            move |ins, out| {
                (0..m)
                    .map(|r| {
                        let at = |a: DmaAddr, by: u32| match a {
                            DmaAddr::Reloc(x) => DmaAddr::reloc(x.buffer, x.offset + by),
                            fixed => fixed,
                        };
                        dequant_task(
                            m,
                            r,
                            n,
                            row_scales[r as usize],
                            ins[0],
                            ins[1],
                            at(out, r * n * 4),
                        )
                    })
                    .collect()
            },
        )
        .unwrap();
    b.output(y).unwrap();
    let mut layer = b.build().unwrap();
    assert_eq!(layer.steps()[0].tasks, 0..plan.tasks.len());
    layer
        .write(xa, &pack::activations_i8(&plan, &x).unwrap())
        .unwrap();
    layer.run().unwrap();
    let out = layer.read(y).unwrap();
    let q = |v: f32| f16_to_f32(f32_to_f16(v));
    for r in 0..m as usize {
        for j in 0..n as usize {
            let acc: i32 = (0..k as usize)
                .map(|i| x[r * k as usize + i] as i32 * w[j * k as usize + i] as i32)
                .sum();
            let want = (acc as f32 * q(row_scales[r])) * q(w_scales[j]);
            let at = (r * n as usize + j) * 4;
            let got = f32::from_le_bytes(out[at..at + 4].try_into().unwrap());
            assert_eq!(got, want, "row {r} column {j}");
        }
    }
}

#[test]
fn bad_layers_are_refused_and_nothing_leaks() {
    let dev = emu();
    let before = dev.live_buffers();
    let cube = Cube::new(4, 1, 8, Precision::Int32).unwrap();
    // No step.
    assert!(LayerBuilder::new(&dev).build().is_err());
    // A tensor of another builder (of an index this builder has not given out).
    let mut other = LayerBuilder::new(&dev);
    for i in 0..3 {
        other.input(&format!("i{i}"), cube).unwrap();
    }
    let foreign = other.input("foreign", cube).unwrap();
    let mut b = LayerBuilder::new(&dev);
    let a = b.input("a", cube).unwrap();
    assert!(matches!(
        b.op("x", &[a, foreign], cube, add(cube)),
        Err(Error::Foreign { .. })
    ));
    assert!(matches!(b.output(foreign), Err(Error::Foreign { .. })));
    // A step that makes no task.
    let mut b = LayerBuilder::new(&dev);
    let a = b.input("a", cube).unwrap();
    b.op("nothing", &[a], cube, |_, _| Ok(vec![])).unwrap();
    assert!(matches!(b.build(), Err(Error::InvalidArgument { .. })));
    // A step whose task reads past its input: the verifier refuses the chain at build.
    let mut b = LayerBuilder::new(&dev);
    let a = b.input("a", cube).unwrap();
    let big = Cube::new(64, 1, 1024, Precision::Int32).unwrap();
    let y = b.op("too wide", &[a, a], cube, add(big)).unwrap();
    b.output(y).unwrap();
    let e = b.build().unwrap_err();
    assert!(
        matches!(&e, Error::LayerStep { step, .. } if step == "too wide"),
        "{e}"
    );
    // Writing what is not an input, reading what is not an output, too many bytes.
    let mut b = LayerBuilder::new(&dev);
    let a = b.input("a", cube).unwrap();
    let t = b.op("t", &[a, a], cube, add(cube)).unwrap();
    let y = b.op("y", &[t, a], cube, add(cube)).unwrap();
    b.output(y).unwrap();
    let mut layer = b.build().unwrap();
    assert!(layer.write(y, &[0; 16]).is_err());
    assert!(layer.read(t).is_err());
    assert!(layer.read(a).is_err());
    assert!(layer.write(a, &vec![0; cube.bytes() as usize + 1]).is_err());
    drop(layer);
    assert_eq!(dev.live_buffers(), before);
}

/// Two builders whose first tensors have the same index, `a` of the first and `b` of
/// the second, each with one add step and an output.
fn twins(dev: &Device, cube: Cube) -> [(LayerBuilder, Tensor, Tensor); 2] {
    [0, 1].map(|_| {
        let mut b = LayerBuilder::new(dev);
        let a = b.input("a", cube).unwrap();
        let y = b.op("y", &[a, a], cube, add(cube)).unwrap();
        b.output(y).unwrap();
        (b, a, y)
    })
}

#[test]
fn tensors_of_another_layer_are_refused_even_at_the_same_index() {
    let dev = emu();
    let before = dev.live_buffers();
    let cube = Cube::new(4, 1, 8, Precision::Int32).unwrap();
    let [(mut b1, a1, y1), (b2, a2, y2)] = twins(&dev, cube);
    // The builder refuses the other builder's handles, though their indices are its own.
    let foreign = |r: crate::Result<Tensor>| matches!(r, Err(Error::Foreign { .. }));
    assert!(foreign(b1.op("z", &[a2, a1], cube, add(cube))));
    assert!(matches!(b1.output(y2), Err(Error::Foreign { .. })));
    let (mut l1, mut l2) = (b1.build().unwrap(), b2.build().unwrap());
    // The built layers refuse each other's handles: no write into the other's input,
    // no read of the other's output, no info.
    let ones = cube.pack(&[1i32; 32]).unwrap();
    let twos = cube.pack(&[2i32; 32]).unwrap();
    assert!(matches!(l1.write(a2, &twos), Err(Error::Foreign { .. })));
    assert!(matches!(l1.read(y2), Err(Error::Foreign { .. })));
    assert!(matches!(l2.tensor(a1), Err(Error::Foreign { .. })));
    // Each layer still runs with its own handles, untouched by the refused calls.
    l1.write(a1, &ones).unwrap();
    l2.write(a2, &twos).unwrap();
    l1.run().unwrap();
    l2.run().unwrap();
    assert_eq!(cube.unpack::<i32>(&l1.read(y1).unwrap()).unwrap(), [2; 32]);
    assert_eq!(cube.unpack::<i32>(&l2.read(y2).unwrap()).unwrap(), [4; 32]);
    drop((l1, l2));
    assert_eq!(dev.live_buffers(), before);
}

#[test]
fn a_matmul_step_with_a_bank_of_another_device_is_refused() {
    let (dev, other) = (emu(), emu());
    let (m, k, n) = (2u32, 32u32, 32u32);
    let w = vec![1i8; (n * k) as usize];
    let bank = Arc::new(WeightBank::new(&other, (n, k), Weights::I8(&w)).unwrap());
    let plan = Plan::for_layout(bank.layout(), m, OutType::Int32, 1).unwrap();
    let before = (dev.live_buffers(), other.live_buffers());
    let mut b = LayerBuilder::new(&dev);
    let x = b.input_bytes("x", plan.a_bytes as usize).unwrap();
    let e = b
        .matmul("x.W", &bank, x, m, OutType::Int32, MatmulInput::Packed)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Foreign { what } if what.contains("x.W")),
        "{e}"
    );
    // The same bank on its own device's layer is a step.
    let mut b = LayerBuilder::new(&other);
    let x = b.input_bytes("x", plan.a_bytes as usize).unwrap();
    let y = b
        .matmul("x.W", &bank, x, m, OutType::Int32, MatmulInput::Packed)
        .unwrap();
    b.output(y).unwrap();
    drop(b.build().unwrap());
    assert_eq!((dev.live_buffers(), other.live_buffers()), before);
}

/// How step w of [`overlapping`] is declared and what its task does.
#[derive(Clone, Copy, PartialEq)]
enum W {
    /// Reads a, writes its 64 bytes.
    Right,
    /// Declares 64 bytes, writes 512.
    WritesPast,
    /// Reads t (64 bytes) as 512.
    ReadsPast,
}

/// `a`, `b` (inputs of 512 bytes) → t = a + a (64 bytes) → u = a + b (512, live until
/// y) → v = t + t (64; t is dead after it) → w (see [`W`]) → y = u + u, the output.
/// Returns the layer and t, u, w.
fn overlapping(dev: &Device, how: W) -> crate::Result<(super::layer::Layer, [Tensor; 3])> {
    let small = Cube::new(4, 1, 4, Precision::Int32)?;
    let big = Cube::new(32, 1, 4, Precision::Int32)?;
    let mut b = LayerBuilder::new(dev);
    let a = b.input("a", big)?;
    let x = b.input("b", big)?;
    let t = b.op("t", &[a, a], small, add(small))?;
    let u = b.op("u", &[a, x], big, add(big))?;
    b.op("v", &[t, t], small, add(small))?;
    let w = match how {
        W::Right => b.op("w", &[a, a], small, add(small))?,
        W::WritesPast => b.op("w", &[a, a], small, add(big))?,
        W::ReadsPast => b.op("w", &[t, t], big, add(big))?,
    };
    let y = b.op("y", &[u, u], big, add(big))?;
    b.output(y)?;
    Ok((b.build()?, [t, u, w]))
}

#[test]
fn a_step_that_writes_past_its_output_into_a_live_intermediate_is_refused() {
    let dev = emu();
    let before = dev.live_buffers();
    let small = Cube::new(4, 1, 4, Precision::Int32).unwrap();
    let big = Cube::new(32, 1, 4, Precision::Int32).unwrap();
    assert_eq!((small.bytes(), big.bytes()), (64, 512));
    // Declared right, the layer builds: w takes t's 64 freed bytes, in front of u's.
    let (layer, [t, u, w]) = overlapping(&dev, W::Right).unwrap();
    let at = |x| layer.tensor(x).unwrap().scratch_offset;
    assert_eq!((at(t), at(u), at(w)), (Some(0), Some(64), Some(0)));
    drop(layer);
    // w's task writes 512 bytes into its 64: over u, which y still reads, yet inside
    // the scratch buffer the whole-chain verifier checks. Refused, naming w and the
    // write.
    let e = overlapping(&dev, W::WritesPast).unwrap_err();
    assert!(
        matches!(&e, Error::LayerStep { step, error: VerifyError::Outside { task: 3, range } }
            if step == "w" && range.len == 512 && range.access == Access::Write),
        "{e}"
    );
    assert!(e.to_string().contains("layer step w"), "{e}");
    // w's task reads 512 bytes of t's 64 (u's bytes after them): refused too.
    let e = overlapping(&dev, W::ReadsPast).unwrap_err();
    assert!(
        matches!(&e, Error::LayerStep { step, error: VerifyError::Outside { task: 3, range } }
            if step == "w" && range.access == Access::Read),
        "{e}"
    );
    assert_eq!(dev.live_buffers(), before);
}
