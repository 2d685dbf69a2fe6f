//! Layer matmul steps of any plan: several M tiles and K waves written as one cube (the
//! later waves added on the NPU), read by the next step in place. Exact int8 chains held
//! to products and requantisation computed here on the host.

use rknpu_driver::Error;
use rknpu_driver::compute::layer::{LayerBuilder, MatmulInput};
use rknpu_driver::compute::matmul::WeightBank;
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan, TileLimits, WeightLayout};
use rknpu_driver::kernels::ops::contract::{
    Bindings, MatmulOp, Op, RequantOp, Role, Values, unpack_values,
};
use rknpu_driver::kernels::ops::epilogue::{OutScale, Requant};
use rknpu_driver::kernels::ops::{self, Cube};
use rknpu_driver::kernels::single::{Dtype, OutType};
use rknpu_driver::regcmd::{BufferId, words_to_le_bytes};
use rknpu_driver::sim::{Kick, LintKind, Simulator};
use rknpu_driver::task::Precision;
use std::collections::HashSet;
use std::sync::Arc;

mod common;
use common::Rng;
use rknpu_driver::compute::matmul::Weights;

/// Row-major `m × n` product of `a` (`m × k`) and `w` (`k × n`), in i64.
fn product(a: &[i32], w: &[i32], (m, k, n): (usize, usize, usize)) -> Vec<f64> {
    let mut c = vec![0i64; m * n];
    for i in 0..m {
        for j in 0..k {
            let x = i64::from(a[i * k + j]);
            for (o, &b) in c[i * n..(i + 1) * n].iter_mut().zip(&w[j * n..(j + 1) * n]) {
                *o += x * i64::from(b);
            }
        }
    }
    c.into_iter().map(|v| v as f64).collect()
}

fn ints(rng: &mut Rng, len: usize) -> Vec<i32> {
    (0..len).map(|_| rng.int(-128, 127)).collect()
}

/// x (200 × 5120, int8) · W1 → int32 (2 K waves, 2 M tiles) → int8 by a per-tensor
/// requantisation → · W2 (read as the native cube) → int32: one job, exact.
#[test]
fn a_two_wave_two_tile_matmul_feeds_a_requantised_native_matmul_exactly() {
    let dev = Device::open_spec("emu").unwrap();
    let (m, k, n1, n2) = (200u32, 5120u32, 96u32, 40u32);
    let mut rng = Rng(0x5eed_1a7e);
    let x = ints(&mut rng, (m * k) as usize);
    let w1 = ints(&mut rng, (k * n1) as usize);
    let w2 = ints(&mut rng, (n1 * n2) as usize);
    let l1 = WeightLayout::new(k, n1, Dtype::Int8).unwrap();
    let l2 = WeightLayout::new(n1, n2, Dtype::Int8).unwrap();
    let bank1 = Arc::new(WeightBank::from_kn_in(&dev, &l1, Weights::Int(&w1)).unwrap());
    let bank2 = Arc::new(WeightBank::from_kn_in(&dev, &l2, Weights::Int(&w2)).unwrap());
    let plan1 = Plan::for_layout(&l1, m, OutType::Int32, 1).unwrap();
    assert!(plan1.layout.waves.len() >= 2, "{:?}", plan1.layout.waves);
    assert!(plan1.m_tile < m, "M tile {}", plan1.m_tile);

    let mut b = LayerBuilder::new(&dev);
    let a = b.input_bytes("x", plan1.a_bytes as usize).unwrap();
    let acc = b
        .matmul("x.W1", &bank1, a, m, OutType::Int32, MatmulInput::Packed)
        .unwrap();
    let acc_cube = Cube::new(m, 1, n1, Precision::Int32).unwrap();
    let requant = Requant::per_tensor(OutScale::from_scale(1.0 / 4096.0, 0).unwrap());
    let rq = RequantOp::new(requant, acc_cube, &[], &[]).unwrap();
    let h = b
        .step("requant", rq.clone(), &[(Role::Input, acc)])
        .unwrap();
    let y = b
        .matmul("h.W2", &bank2, h, m, OutType::Int32, MatmulInput::Native)
        .unwrap();
    b.output(y).unwrap();
    let mut layer = b.build().unwrap();
    layer.write(a, &plan1.pack_a_int(&x).unwrap()).unwrap();
    layer.run().unwrap();
    let y_cube = layer.tensor(y).unwrap().cube.unwrap();
    let got = unpack_values(&y_cube, &layer.read(y).unwrap()).unwrap();

    let (m, k, n1, n2) = (m as usize, k as usize, n1 as usize, n2 as usize);
    let c1 = product(&x, &w1, (m, k, n1));
    let inputs: Values = [(Role::Input, c1.clone())].into_iter().collect();
    let h: Vec<i32> = rq
        .reference(&inputs)
        .unwrap()
        .iter()
        .map(|&v| v as i32)
        .collect();
    assert!(h.iter().any(|&v| v != 0) && h.iter().any(|&v| v.abs() < 127));
    let want = product(&h, &w2, (m, n1, n2));
    let width = y_cube.channels as usize;
    for r in 0..m {
        for c in 0..n2 {
            assert_eq!(got[r * width + c], want[r * n2 + c], "row {r} column {c}");
        }
    }
}

/// A float plan of several K waves has fp32 partials, which no board-tested task adds:
/// the step is refused by name, before anything is built.
#[test]
fn a_float_step_of_several_waves_is_refused() {
    let dev = Device::open_spec("emu").unwrap();
    let layout = WeightLayout::new(5000, 32, Dtype::Fp16).unwrap();
    let bank = Arc::new(
        WeightBank::from_kn_in(&dev, &layout, Weights::F32(&vec![0.5; 5000 * 32])).unwrap(),
    );
    let mut b = LayerBuilder::new(&dev);
    let a = b.input_bytes("x", 1 << 20).unwrap();
    let e = b
        .matmul("x.W", &bank, a, 2, OutType::Fp32, MatmulInput::Packed)
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("int32 partials"), "{e}");
}

fn addr(b: BufferId) -> Option<u64> {
    Some(0x1000_0000 * (b.0 as u64 + 1))
}

/// The lints of `op`'s program on the simulator, its buffers zeroed but for A and B.
fn lints(op: &MatmulOp) -> HashSet<LintKind> {
    let ports = op.ports().unwrap();
    let tasks = op.tasks(&Bindings::slots(&ports)).unwrap();
    let program = ops::chain(&tasks).unwrap();
    let words = program.bind(addr).unwrap();
    let at = |b: BufferId| addr(b).unwrap() as u32;
    let mut sim = Simulator::new();
    let mem = sim.memory_mut();
    mem.map(at(ops::REGCMD), words_to_le_bytes(&words)).unwrap();
    let mut rng = Rng(3);
    for p in &ports {
        let bytes = (0..p.bytes).map(|_| rng.next() as u8).collect();
        match p.role {
            Role::Input | Role::Weights => mem.map(at(p.role.buffer()), bytes).unwrap(),
            _ => mem
                .map_zeroed(at(p.role.buffer()), p.bytes as usize)
                .unwrap(),
        }
    }
    let run = sim
        .kick(&Kick::new(
            at(ops::REGCMD),
            program.tasks()[0].regcfg_amount,
        ))
        .unwrap();
    assert!(run.completed, "{run:?}");
    assert_eq!(run.tasks_run as usize, tasks.len());
    run.lints.iter().map(|l| l.kind).collect()
}

/// The cube form's tasks (blocks written in place, the strided adds of later waves) run
/// on the simulator with no lint the plan's own tasks do not raise: they change
/// addresses and strides, not register values no board program writes.
#[test]
fn the_cube_form_raises_no_lint_of_its_own() {
    for (m, k, n, rows) in [(40, 5120, 64, 16), (70, 256, 96, 32), (6, 8000, 1100, 6)] {
        let layout = Plan::new(MatmulSpec::new(m, k, n, Dtype::Int8))
            .unwrap()
            .layout;
        let limits = TileLimits {
            rows,
            cols: u32::MAX,
            split_rows: false,
        };
        let plan = Plan::with_limits(&layout, m, OutType::Int32, 1, limits).unwrap();
        let plain = lints(&MatmulOp::new(plan.clone()).unwrap());
        for native in [false, true] {
            let op = MatmulOp::new(plan.clone())
                .unwrap()
                .with_native_input(native)
                .with_cube_output()
                .unwrap();
            let cube = lints(&op);
            assert!(
                cube.is_subset(&plain),
                "{m}x{k}x{n}: {cube:?} beyond {plain:?}"
            );
        }
    }
}

/// Builds x (m × k) · W1 → requantised → · W2 as a layer of at most `cores` cores:
/// the outputs, the layer's jobs and its tasks per core in each.
fn spread_chain(
    dev: &Device,
    cores: u32,
    (x, w1, w2): (&[i32], &[i32], &[i32]),
    (m, k, n1, n2): (u32, u32, u32, u32),
) -> (Vec<f64>, Vec<Vec<usize>>) {
    let l1 = WeightLayout::new(k, n1, Dtype::Int8).unwrap();
    let l2 = WeightLayout::new(n1, n2, Dtype::Int8).unwrap();
    let bank1 = Arc::new(WeightBank::from_kn_in(dev, &l1, Weights::Int(w1)).unwrap());
    let bank2 = Arc::new(WeightBank::from_kn_in(dev, &l2, Weights::Int(w2)).unwrap());
    let plan1 = Plan::for_layout(&l1, m, OutType::Int32, 1).unwrap();
    let mut b = LayerBuilder::new(dev).with_cores(cores);
    let a = b.input_bytes("x", plan1.a_bytes as usize).unwrap();
    let acc = b
        .matmul("x.W1", &bank1, a, m, OutType::Int32, MatmulInput::Packed)
        .unwrap();
    let acc_cube = Cube::new(m, 1, n1, Precision::Int32).unwrap();
    let requant = Requant::per_tensor(OutScale::from_scale(1.0 / 8192.0, 0).unwrap());
    let rq = RequantOp::new(requant, acc_cube, &[], &[]).unwrap();
    let h = b.step("requant", rq, &[(Role::Input, acc)]).unwrap();
    let y = b
        .matmul("h.W2", &bank2, h, m, OutType::Int32, MatmulInput::Native)
        .unwrap();
    b.output(y).unwrap();
    let mut layer = b.build().unwrap();
    layer.write(a, &plan1.pack_a_int(x).unwrap()).unwrap();
    layer.run().unwrap();
    let first = layer.read(y).unwrap();
    // Submitted without blocking too: the same result.
    layer
        .submit()
        .unwrap()
        .wait(std::time::Instant::now() + std::time::Duration::from_secs(20))
        .unwrap();
    assert_eq!(layer.read(y).unwrap(), first);
    let cube = layer.tensor(y).unwrap().cube.unwrap();
    (unpack_values(&cube, &first).unwrap(), layer.job_cores())
}

/// A decode-sized product streaming 8 MiB of weights is spread over the three cores by
/// the cost model (its own job), the chain after it is a job of its own, and the result
/// is the one-core layer's, bit for bit.
#[test]
fn a_streaming_step_is_spread_over_cores_as_a_job_of_its_own() {
    let dev = Device::open_spec("emu").unwrap();
    let (m, k, n1, n2) = (2u32, 4096u32, 2048u32, 64u32);
    let mut rng = Rng(0xc0de);
    let x = ints(&mut rng, (m * k) as usize);
    let w1 = ints(&mut rng, (k * n1) as usize);
    let w2 = ints(&mut rng, (n1 * n2) as usize);
    let shape = (m, k, n1, n2);
    let (spread, jobs) = spread_chain(&dev, 3, (&x, &w1, &w2), shape);
    let (one, one_jobs) = spread_chain(&dev, 1, (&x, &w1, &w2), shape);
    assert_eq!(one_jobs.len(), 1, "{one_jobs:?}");
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert_eq!(jobs[0].len(), 3, "{jobs:?}");
    assert_eq!(spread, one);
    assert!(spread.iter().any(|&v| v != 0.0));
}

/// By the cost model, a layer of one matmul step of several K waves (the adds on the
/// NPU, spread over cores where that pays) is no slower than the `Matmul` call it
/// replaces on the same device (its cost-chosen plan on every core, the waves summed on
/// the host): decode and prompt rows of LLM projection shapes.
#[test]
fn a_fused_step_is_modelled_no_slower_than_the_call_it_replaces() {
    let dev = Device::open_spec("emu").unwrap();
    let profile = HardwareProfile::rk3588();
    for (m, k, n) in [(1u32, 4096u32, 1024u32), (64, 4096, 1024), (128, 5120, 512)] {
        let layout = WeightLayout::new(k, n, Dtype::Int8).unwrap();
        let bank = Arc::new(
            WeightBank::from_packed(&dev, &layout, &vec![1; layout.bytes as usize]).unwrap(),
        );
        let mut b = LayerBuilder::new(&dev);
        let plan = Plan::for_layout(&layout, m, OutType::Int32, 1).unwrap();
        let a = b.input_bytes("x", plan.a_bytes as usize).unwrap();
        let y = b
            .matmul("x.W", &bank, a, m, OutType::Int32, MatmulInput::Packed)
            .unwrap();
        b.output(y).unwrap();
        let layer = b.build().unwrap();
        let fused = layer.modelled_seconds(&profile).unwrap();
        let call = Plan::for_layout(&layout, m, OutType::Int32, 3).unwrap();
        let separate = call.cost(&profile).unwrap().total_s();
        println!(
            "{m}x{k}x{n}: layer {:.1} us in {} job(s), matmul call {:.1} us ({} K waves)",
            fused * 1e6,
            layer.jobs().len(),
            separate * 1e6,
            call.layout.waves.len()
        );
        assert!(fused <= separate, "{m}x{k}x{n}: {fused} > {separate}");
    }
}
