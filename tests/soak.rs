//! Soak (issue 26, item 11): mixed jobs — matmuls, batches, layer programs and op
//! programs, blocking and non-blocking — from 4 threads on one emulated device of each
//! kind (vendor and rocket, both with jobs on the kernel's worker thread), with random
//! cancellations (a pending job dropped, a wait whose deadline has passed) and object
//! churn (banks and matmuls made and dropped, so device addresses are reused). Every
//! job that completes must give the CPU's result; at the end no buffer, mapping,
//! kernel object, descriptor or device address range may be left.
//!
//! `RKNPU_SOAK_JOBS` sets the number of jobs per device (default 10,000, a few seconds
//! in a debug build; docs/device.md, "Soak").

mod common;

use common::Rng;
use half::f16;
use rknpu_driver::compute::layer::{Layer, LayerBuilder, Tensor};
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, MatmulBatch, WeightBank};
use rknpu_driver::compute::ops::{ProgramBuffers, run_program};
use rknpu_driver::device::Device;
use rknpu_driver::emu::{EmuKernel, Flavour};
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
use rknpu_driver::kernels::ops::{self, Cube};
use rknpu_driver::kernels::single::add_task;
use rknpu_driver::regcmd::Program;
use rknpu_driver::task::Precision;
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS: u64 = 4;
const M: u32 = 2;
const K: u32 = 64;
const N: u32 = 32;

fn jobs() -> u64 {
    std::env::var("RKNPU_SOAK_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// What one thread did.
#[derive(Default, Debug)]
struct Tally {
    checked: u64,
    cancelled: u64,
    late: u64,
}

/// `A · W` for int8 A (M×K) and W given as N rows of K.
fn reference(a: &[i8], w: &[i8]) -> Vec<i32> {
    let (m, k, n) = (M as usize, K as usize, N as usize);
    let mut c = vec![0i32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|x| i32::from(a[i * k + x]) * i32::from(w[j * k + x]))
                .sum();
        }
    }
    c
}

fn int8(rng: &mut Rng, len: usize) -> Vec<i8> {
    (0..len).map(|_| rng.int(-128, 127) as i8).collect()
}

/// One thread's objects, its random stream and what it has done so far.
struct Worker<'d> {
    dev: &'d Device,
    rng: Rng,
    t: Tally,
    /// The int8 matmul's weights (N rows of K) and the matmul.
    w: Vec<i8>,
    mm: Matmul,
    /// The batch's fp16 weights (N rows of K each) and the batch.
    wf: Vec<Vec<f16>>,
    batch: MatmulBatch,
    /// The layer `(a + b) + a` on int32 cubes, its inputs `la`, `lx` and output `ly`.
    cube: Cube,
    layer: Layer,
    la: Tensor,
    lx: Tensor,
    ly: Tensor,
    /// The int8 element-wise add program and its cube.
    ecube: Cube,
    ew_program: Program,
}

/// A batch of two fp16 matmuls on small integers (exact in fp32), with their weights.
fn fp16_batch(dev: &Device) -> (Vec<Vec<f16>>, MatmulBatch) {
    let wf: Vec<Vec<f16>> = (1..=2)
        .map(|s| {
            (0..N * K)
                .map(|i| f16::from_f32(((i * s) % 5) as f32 - 2.0))
                .collect()
        })
        .collect();
    let banks: Vec<_> = wf
        .iter()
        .map(|w| Arc::new(WeightBank::new(dev, (N, K), Weights::F16(w)).unwrap()))
        .collect();
    let batch =
        MatmulBatch::new(banks.iter().map(|b| Matmul::new(b, M).unwrap()).collect()).unwrap();
    (wf, batch)
}

/// The layer `(a + b) + a` on int32 cubes as two chained tasks: the layer, its cube,
/// its inputs a and b and its output.
fn add_layer(dev: &Device) -> (Layer, Cube, [Tensor; 3]) {
    let cube = Cube::new(8, 1, 16, Precision::Int32).unwrap();
    let mut lb = LayerBuilder::new(dev);
    let la = lb.input("a", cube).unwrap();
    let lx = lb.input("b", cube).unwrap();
    let add = |ins: &[_], out| Ok(vec![add_task(8, 16, ins[0], ins[1], out)?]);
    let s = lb.op("a+b", &[la, lx], cube, add).unwrap();
    let ly = lb.op("(a+b)+a", &[s, la], cube, add).unwrap();
    lb.output(ly).unwrap();
    (lb.build().unwrap(), cube, [la, lx, ly])
}

/// An int8 element-wise add as a program for the op runner, and its cube.
fn eltwise_program() -> (Program, Cube) {
    let ecube = Cube::new(4, 1, 16, Precision::Int8).unwrap();
    let ew = Eltwise::new(EltwiseOp::Add, ecube, Operand::Tensor).unwrap();
    let ew_program = ops::chain(
        &ew.tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Operand, ops::at(ops::OPERAND, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
        )
        .unwrap(),
    )
    .unwrap();
    (ew_program, ecube)
}

/// A deadline far enough away that a wait for it does not time out.
fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

impl<'d> Worker<'d> {
    /// The thread's objects on `dev`, its stream seeded from `seed`.
    fn new(dev: &'d Device, seed: u64) -> Worker<'d> {
        let mut rng = Rng(seed | 1);
        let w = int8(&mut rng, (N * K) as usize);
        let bank = Arc::new(WeightBank::new(dev, (N, K), Weights::I8(&w)).unwrap());
        let mm = Matmul::new(&bank, M).unwrap();
        let (wf, batch) = fp16_batch(dev);
        let (layer, cube, [la, lx, ly]) = add_layer(dev);
        let (ew_program, ecube) = eltwise_program();
        Worker {
            dev,
            rng,
            t: Tally::default(),
            w,
            mm,
            wf,
            batch,
            cube,
            layer,
            la,
            lx,
            ly,
            ecube,
            ew_program,
        }
    }

    /// A random int8 A (M×K).
    fn a(&mut self) -> Vec<i8> {
        int8(&mut self.rng, (M * K) as usize)
    }

    /// A blocking int8 matmul, checked.
    fn matmul_run(&mut self) {
        let a = self.a();
        assert_eq!(self.mm.run::<i8, i32>(&a).unwrap(), reference(&a, &self.w));
        self.t.checked += 1;
    }

    /// A submitted int8 matmul waited for, checked.
    fn matmul_submit_wait(&mut self) {
        let a = self.a();
        let mut c = vec![0i32; (M * N) as usize];
        self.mm
            .submit::<i8>(&a)
            .unwrap()
            .wait(soon(), &mut c)
            .unwrap();
        assert_eq!(c, reference(&a, &self.w));
        self.t.checked += 1;
    }

    /// Cancelled: a submitted int8 matmul dropped without a wait.
    fn matmul_cancel(&mut self) {
        let a = self.a();
        drop(self.mm.submit::<i8>(&a).unwrap());
        self.t.cancelled += 1;
    }

    /// A wait whose deadline has passed: the result only if it finished.
    fn matmul_late_wait(&mut self) {
        let a = self.a();
        let mut c = vec![0i32; (M * N) as usize];
        let pending = self.mm.submit::<i8>(&a).unwrap();
        match pending.wait(Instant::now(), &mut c) {
            Ok(()) => {
                assert_eq!(c, reference(&a, &self.w));
                self.t.checked += 1;
            }
            Err(e) => {
                assert!(e.to_string().contains("timed out"), "{e}");
                self.t.late += 1;
            }
        }
    }

    /// The fp16 batch on one x, checked against the f32 products; one in four is
    /// submitted and dropped instead.
    fn batch_job(&mut self) {
        let x: Vec<f32> = (0..M * K).map(|_| self.rng.int(-3, 3) as f32).collect();
        let (mut y0, mut y1) = (vec![0f32; (M * N) as usize], vec![0f32; (M * N) as usize]);
        if self.rng.int(0, 3) == 0 {
            drop(self.batch.submit(&[&x, &x]).unwrap());
            self.t.cancelled += 1;
            return;
        }
        self.batch
            .mul_mat(&[&x, &x], &mut [&mut y0, &mut y1])
            .unwrap();
        for (wf, y) in self.wf.iter().zip([&y0, &y1]) {
            for i in 0..M as usize {
                for j in 0..N as usize {
                    let want: f32 = (0..K as usize)
                        .map(|q| x[i * K as usize + q] * wf[j * K as usize + q].to_f32())
                        .sum();
                    assert_eq!(y[i * N as usize + j], want);
                }
            }
        }
        self.t.checked += 1;
    }

    /// The layer on random a and b, checked against `2a + b`.
    fn layer_job(&mut self) {
        let va: Vec<i32> = (0..128).map(|_| self.rng.int(-1000, 1000)).collect();
        let vb: Vec<i32> = (0..128).map(|_| self.rng.int(-1000, 1000)).collect();
        let (cube, layer) = (self.cube, &mut self.layer);
        layer.write(self.la, &cube.pack(&va).unwrap()).unwrap();
        layer.write(self.lx, &cube.pack(&vb).unwrap()).unwrap();
        layer.run().unwrap();
        let out: Vec<i32> = cube.unpack(&layer.read(self.ly).unwrap()).unwrap();
        for i in 0..128 {
            assert_eq!(out[i], 2 * va[i] + vb[i]);
        }
        self.t.checked += 1;
    }

    /// The element-wise add program on random int8 a and b, checked against the
    /// saturated sum.
    fn eltwise_job(&mut self) {
        let a = int8(&mut self.rng, 64);
        let b = int8(&mut self.rng, 64);
        let ecube = self.ecube;
        let out = run_program(
            self.dev,
            &self.ew_program,
            ProgramBuffers::new()
                .input(ops::INPUT, ecube.pack(&a).unwrap())
                .input(ops::OPERAND, ecube.pack(&b).unwrap())
                .output(ops::OUTPUT, ecube.bytes() as usize),
        )
        .unwrap();
        let got: Vec<i8> = ecube.unpack(&out[0]).unwrap();
        for i in 0..64 {
            let want = (i16::from(a[i]) + i16::from(b[i])).clamp(-128, 127) as i8;
            assert_eq!(got[i], want);
        }
        self.t.checked += 1;
    }

    /// Churn: a new bank and matmul, one run, dropped (its addresses are handed out
    /// again).
    fn churn(&mut self) {
        let w2 = int8(&mut self.rng, (N * K) as usize);
        let bank2 = Arc::new(WeightBank::new(self.dev, (N, K), Weights::I8(&w2)).unwrap());
        let mut mm2 = Matmul::new(&bank2, M).unwrap();
        let a = self.a();
        assert_eq!(mm2.run::<i8, i32>(&a).unwrap(), reference(&a, &w2));
        self.t.checked += 1;
    }
}

/// One thread's objects and its share of the jobs.
fn worker(dev: &Device, seed: u64, jobs: u64) -> Tally {
    let mut wk = Worker::new(dev, seed);
    for _ in 0..jobs {
        match wk.rng.int(0, 9) {
            0 => wk.matmul_run(),
            1 => wk.matmul_submit_wait(),
            2 => wk.matmul_cancel(),
            3 => wk.matmul_late_wait(),
            4 | 5 => wk.batch_job(),
            6 => wk.layer_job(),
            7 | 8 => wk.eltwise_job(),
            _ => wk.churn(),
        }
    }
    wk.t
}

fn soak(flavour: Flavour) {
    let spec = format!("{flavour:?}");
    // A kernel of its own (jobs on its worker thread), so that nothing else counts.
    let emu = Arc::new(EmuKernel::new(flavour));
    emu.set_async(true);
    let dev = Device::open_emulator(Arc::clone(&emu)).unwrap();
    let objects_before = emu.live_objects();
    let (files_before, iova_before) = (emu.open_files(), emu.iova_in_use());
    let per_thread = jobs().div_ceil(THREADS);
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let dev = dev.clone();
                s.spawn(move || worker(&dev, 0x50a_u64 * (i + 1), per_thread))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let checked: u64 = tallies.iter().map(|t| t.checked).sum();
    let cancelled: u64 = tallies.iter().map(|t| t.cancelled).sum();
    eprintln!("{spec}: {tallies:?}");
    assert!(checked >= per_thread * THREADS / 2, "{spec}: {tallies:?}");
    assert!(cancelled > 0, "{spec}: nothing was cancelled: {tallies:?}");
    assert_eq!(dev.live_buffers(), 0, "{spec}: buffers left");
    assert_eq!(dev.live_mappings(), 0, "{spec}: mappings left");
    assert!(
        dev.leaked_buffers().is_empty(),
        "{spec}: {:?}",
        dev.leaked_buffers()
    );
    assert_eq!(
        emu.live_objects(),
        objects_before,
        "{spec}: kernel objects left"
    );
    assert_eq!(emu.open_files(), files_before, "{spec}: descriptors left");
    assert_eq!(emu.iova_in_use(), iova_before, "{spec}: addresses left");
    drop(dev);
    assert_eq!(
        emu.live_objects(),
        0,
        "{spec}: kernel objects left after close"
    );
    assert_eq!(emu.open_files(), 0, "{spec}: descriptors left after close");
    assert_eq!(emu.iova_in_use(), 0, "{spec}: addresses left after close");
}

#[test]
fn vendor_soak() {
    soak(Flavour::Vendor098);
}

#[test]
fn rocket_soak() {
    soak(Flavour::Rocket);
}
