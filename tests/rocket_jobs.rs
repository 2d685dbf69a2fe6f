//! Rocket stops a job after 500 ms of running: programs the cost model puts near that
//! are submitted as several jobs (`kernels::matmul::cost::jobs`), and the emulated
//! rocket kernel stops a job whose modelled time passes its timeout, as the board's
//! scheduler would. The emulated kernel's timeout is shortened here so that products
//! the simulator runs in a fraction of a second stand for ones a board runs for longer.

mod common;

use rknpu_driver::Error;
use rknpu_driver::compute::layer::{LayerBuilder, Tensor};
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, MatmulBatch, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::emu::{EmuKernel, Flavour, ROCKET_TIME_MODEL};
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::single::{Dtype, add_task};
use rknpu_driver::task::Precision;
use std::sync::Arc;
use std::time::Duration;

/// The emulated kernel's time model is the cost model's rocket profile at its fastest
/// MAC rate: never longer than the model's time for the same work.
#[test]
fn the_emulated_kernels_time_model_is_the_cost_models() {
    let p = HardwareProfile::rk3588_rocket();
    assert_eq!(ROCKET_TIME_MODEL.per_submit_s, p.per_submit_rocket_s);
    assert_eq!(ROCKET_TIME_MODEL.per_task_s, p.per_task_rocket_s);
    assert_eq!(ROCKET_TIME_MODEL.bytes_per_s, p.core_dram_bytes_per_s);
    let fastest = [Dtype::Int4, Dtype::Int8, Dtype::Fp16]
        .map(|d| p.macs_per_s(d))
        .into_iter()
        .fold(0.0, f64::max);
    assert_eq!(ROCKET_TIME_MODEL.macs_per_s, fastest);
}

/// Seeded int8 values in -4..=4.
fn values(n: usize, seed: u64) -> Vec<i8> {
    let mut r = common::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..n).map(|_| r.int(-4, 4) as i8).collect()
}

/// `C = A · Wᵀ` for `w` of `n` rows of `k`.
fn reference(a: &[i8], w: &[i8], (m, k, n): (usize, usize, usize)) -> Vec<i32> {
    let mut c = vec![0i32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| a[i * k + p] as i32 * w[j * k + p] as i32)
                .sum();
        }
    }
    c
}

/// A device on an emulated rocket kernel of its own (the knob below is the kernel's).
fn own_rocket() -> Device {
    Device::open_emulator(Arc::new(EmuKernel::new(Flavour::Rocket))).unwrap()
}

const K: u32 = 4096;
const N: u32 = 4096;

#[test]
fn a_program_modelled_beyond_the_timeout_runs_as_several_jobs_and_one_job_is_stopped() {
    // A GEMV streams its 16.8 MB of weights: 1.7 ms at one core's 10 GB/s in the cost
    // model and in the emulated kernel alike, about 0.6 ms for each core's third.
    const M: u32 = 1;
    let dev = own_rocket();
    assert_eq!(
        dev.capabilities().job_timeout,
        Some(Duration::from_millis(500))
    );
    let w = values((N * K) as usize, 1);
    let a = values((M * K) as usize, 2);
    let want = reference(&a, &w, (M as usize, K as usize, N as usize));
    let bank = Arc::new(WeightBank::new(&dev, (N, K), Weights::I8(&w)).unwrap());
    // Made under the 500 ms timeout: one job.
    let mut whole = Matmul::new(&bank, M).unwrap();
    assert_eq!(whole.jobs().len(), 1);

    // The kernel now stops jobs after 1.5 ms of modelled time: the one job of 1.7 ms
    // is stopped.
    let emu = dev.emulator().unwrap();
    let short = Duration::from_micros(1500);
    emu.set_rocket_job_timeout(short);
    assert_eq!(dev.capabilities().job_timeout, Some(short));
    match whole.run::<i8, i32>(&a) {
        Err(Error::Timeout { .. }) => {}
        other => panic!("one job of 1.7 ms under a 1.5 ms timeout: {other:?}"),
    }
    assert!(
        emu.log()
            .iter()
            .any(|l| l.contains("beyond the scheduler's job timeout of 1.5ms")),
        "{:?}",
        emu.log()
    );

    // Made under the 1.5 ms timeout: one job per core's third (each modelled beyond
    // half the timeout alone, within the timeout), in order, covering every task; the
    // product is exact.
    let mut split = Matmul::new(&bank, M).unwrap();
    let jobs = split.jobs().to_vec();
    assert!(jobs.len() > 2, "{jobs:?}");
    let tasks: usize = jobs.iter().map(|r| r.len()).sum();
    assert_eq!(jobs.first().unwrap().start, 0);
    assert!(jobs.windows(2).all(|w| w[0].end == w[1].start));
    assert_eq!(tasks, split.plan().tasks.len());
    assert_eq!(split.run::<i8, i32>(&a).unwrap(), want);
    // The same, submitted without blocking.
    let mut got = vec![0i32; want.len()];
    split
        .submit::<i8>(&a)
        .unwrap()
        .wait(
            std::time::Instant::now() + Duration::from_secs(30),
            &mut got,
        )
        .unwrap();
    assert_eq!(got, want);
}

#[test]
fn a_batch_is_split_the_same_way_with_the_same_results() {
    let (w1, w2) = (values((N * K) as usize, 3), values((N * K) as usize, 4));
    let x: Vec<f32> = values(K as usize, 5)
        .iter()
        .map(|&v| v as f32 * 0.37)
        .collect();
    // The same batch on a kernel with rocket's own timeout (one job) and on one whose
    // timeout is 1 ms (several): the same program cut into jobs gives the same bits.
    let run = |timeout: Option<Duration>| {
        let dev = own_rocket();
        if let Some(t) = timeout {
            dev.emulator().unwrap().set_rocket_job_timeout(t);
        }
        let b1 = Arc::new(WeightBank::new(&dev, (N, K), Weights::I8(&w1)).unwrap());
        let b2 = Arc::new(WeightBank::new(&dev, (N, K), Weights::I8(&w2)).unwrap());
        let members = vec![Matmul::new(&b1, 1).unwrap(), Matmul::new(&b2, 1).unwrap()];
        let mut batch = MatmulBatch::new(members).unwrap();
        let (mut y1, mut y2) = (vec![0f32; N as usize], vec![0f32; N as usize]);
        batch.mul_mat(&[&x, &x], &mut [&mut y1, &mut y2]).unwrap();
        (y1, y2, batch.jobs().len())
    };
    let (one1, one2, jobs) = run(None);
    assert_eq!(jobs, 1);
    let (cut1, cut2, jobs) = run(Some(Duration::from_millis(1)));
    assert!(jobs > 2, "{jobs} jobs");
    assert_eq!(one1, cut1);
    assert_eq!(one2, cut2);
    assert!(one1.iter().any(|&v| v != 0.0));
}

/// A layer of `steps` chained int32 adds (`y = y + a`) of 8 pixels × 16 channels.
fn add_chain(dev: &Device, steps: usize) -> (rknpu_driver::compute::layer::Layer, [Tensor; 2]) {
    let cube = Cube::new(8, 1, 16, Precision::Int32).unwrap();
    let mut b = LayerBuilder::new(dev);
    let a = b.input("a", cube).unwrap();
    let add = |ins: &[_], out| Ok(vec![add_task(8, 16, ins[0], ins[1], out)?]);
    let mut y = a;
    for i in 0..steps {
        y = b.op(&format!("add {i}"), &[y, a], cube, add).unwrap();
    }
    b.output(y).unwrap();
    (b.build().unwrap(), [a, y])
}

#[test]
fn a_layer_program_is_split_the_same_way() {
    // 20 DPU-only tasks: each moves 1.5 KB, so the job is its submission and 19
    // per-task costs, about 0.9 ms; under a 0.5 ms timeout one job is stopped and the
    // layer built for it runs as several.
    let dev = own_rocket();
    let cube = Cube::new(8, 1, 16, Precision::Int32).unwrap();
    let va: Vec<i32> = (0..128).map(|i| i * 7 - 300).collect();
    let (mut whole, [a, _]) = add_chain(&dev, 20);
    assert_eq!(whole.jobs().len(), 1);
    whole.write(a, &cube.pack(&va).unwrap()).unwrap();
    dev.emulator()
        .unwrap()
        .set_rocket_job_timeout(Duration::from_micros(500));
    assert!(matches!(whole.run(), Err(Error::Timeout { .. })));
    let (mut split, [a, y]) = add_chain(&dev, 20);
    assert!(split.jobs().len() > 2, "{:?}", split.jobs());
    split.write(a, &cube.pack(&va).unwrap()).unwrap();
    split.run().unwrap();
    let out: Vec<i32> = cube.unpack(&split.read(y).unwrap()).unwrap();
    let want: Vec<i32> = va.iter().map(|v| v * 21).collect();
    assert_eq!(out, want);
    // Submitted without blocking: the same.
    split.write(a, &cube.pack(&vec![1; 128]).unwrap()).unwrap();
    split
        .submit()
        .unwrap()
        .wait(std::time::Instant::now() + Duration::from_secs(10))
        .unwrap();
    let out: Vec<i32> = cube.unpack(&split.read(y).unwrap()).unwrap();
    assert_eq!(out, vec![21; 128]);
}
