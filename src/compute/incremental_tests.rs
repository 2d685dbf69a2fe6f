//! Incremental task bodies ([`MatmulOptions::incremental`]) on the emulated vendor
//! kernels: the same results bit for bit as full bodies for int8, int4, fp16, a
//! multi-core plan, a batch and NPU dequantisation, with fewer regcmd bytes fetched; and
//! refused on rocket.

use super::matmul::{Activations, Matmul, MatmulBatch, MatmulOptions, WeightBank};
use crate::compute::matmul::Weights;
use crate::device::*;
use crate::emu::{EmuKernel, Flavour};
use crate::error::Error;
use crate::seeded::Rng;
use half::f16;
use std::sync::Arc;

/// The vendor specs, each as a kernel of its own (its DMA counters this test's alone).
const VENDOR: [(&str, Flavour, bool); 3] = [
    ("emu", Flavour::Vendor098, false),
    ("emu:vendor-0.9.6", Flavour::Vendor096, false),
    ("emu:async", Flavour::Vendor098, true),
];

fn private(flavour: Flavour, asynchronous: bool) -> Device {
    let emu = if asynchronous {
        EmuKernel::new_async(flavour)
    } else {
        EmuKernel::new(flavour)
    };
    Device::open_emulator(Arc::new(emu)).unwrap()
}

fn ints(n: u32, lo: i32, hi: i32, seed: u64) -> Vec<i32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.int(lo, hi)).collect()
}

/// One product to run both ways.
#[derive(Clone, Copy, Debug)]
enum Case {
    Int8 { m: u32, k: u32, n: u32, cores: u32 },
    Int4 { m: u32, k: u32, n: u32 },
    Fp16 { m: u32, k: u32, n: u32 },
}

/// Runs `case` on `dev` with incremental bodies on or off: the result as bits, the plan's
/// tasks per core, and the regcmd bytes the PC fetched.
fn run(dev: &Device, case: Case, incremental: bool) -> (Vec<u64>, Vec<usize>, u64) {
    let emu = dev.emulator().unwrap();
    let options = MatmulOptions::default().incremental(incremental);
    let (mut mm, input) = match case {
        Case::Int8 { m, k, n, cores } => {
            let w: Vec<i8> = ints(n * k, -128, 127, 1).iter().map(|&v| v as i8).collect();
            let bank = Arc::new(WeightBank::new(dev, (n, k), Weights::I8(&w)).unwrap());
            let mm = Matmul::with_options(&bank, m, options.cores(cores)).unwrap();
            (mm, Ok(ints(m * k, -128, 127, 2)))
        }
        Case::Int4 { m, k, n } => {
            let w: Vec<i8> = ints(n * k, -8, 7, 3).iter().map(|&v| v as i8).collect();
            let bank = Arc::new(WeightBank::new(dev, (n, k), Weights::I4(&w)).unwrap());
            let options = options.activations(Activations::Int4).cores(1);
            let mm = Matmul::with_options(&bank, m, options).unwrap();
            (mm, Ok(ints(m * k, -8, 7, 4)))
        }
        Case::Fp16 { m, k, n } => {
            let half = |v: &i32| f16::from_f32(*v as f32 / 8.0);
            let w: Vec<f16> = ints(n * k, -16, 16, 5).iter().map(half).collect();
            let bank = Arc::new(WeightBank::new(dev, (n, k), Weights::F16(&w)).unwrap());
            let mm = Matmul::with_options(&bank, m, options.cores(1)).unwrap();
            let a: Vec<f16> = ints(m * k, -16, 16, 6).iter().map(half).collect();
            (mm, Err(a))
        }
    };
    emu.reset_dma_counters();
    let bits = match input {
        Ok(a) => mm
            .run::<i32, i64>(&a)
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
        Err(a) => mm
            .run::<_, f32>(&a)
            .unwrap()
            .iter()
            .map(|v| u64::from(v.to_bits()))
            .collect(),
    };
    (
        bits,
        mm.plan().per_core.clone(),
        emu.dma_counters().pc_regcmd,
    )
}

#[test]
fn incremental_matmuls_equal_full_bodies_with_fewer_regcmd_bytes() {
    let cases = [
        Case::Int8 {
            m: 601,
            k: 64,
            n: 256,
            cores: 1,
        },
        Case::Int4 {
            m: 384,
            k: 64,
            n: 256,
        },
        Case::Fp16 {
            m: 801,
            k: 64,
            n: 256,
        },
        Case::Int8 {
            m: 640,
            k: 64,
            n: 768,
            cores: 3,
        },
    ];
    for (spec, flavour, asynchronous) in VENDOR {
        let dev = private(flavour, asynchronous);
        for case in cases {
            let (full, per_core, full_bytes) = run(&dev, case, false);
            let (inc, inc_per_core, inc_bytes) = run(&dev, case, true);
            assert_eq!(per_core, inc_per_core);
            assert!(
                per_core.iter().all(|&n| n >= 3),
                "{spec} {case:?}: {per_core:?} (three tasks a core exercise both groups)"
            );
            assert!(full.iter().any(|&v| v != 0), "{spec} {case:?}");
            assert!(full == inc, "{spec} {case:?}: results differ");
            assert!(
                inc_bytes < full_bytes,
                "{spec} {case:?}: {inc_bytes} regcmd bytes, full {full_bytes}"
            );
        }
    }
}

#[test]
fn incremental_batches_and_npu_dequantisation_equal_full_bodies() {
    for (spec, flavour, asynchronous) in VENDOR {
        let dev = private(flavour, asynchronous);
        let (n, k, m) = (256, 64, 352);
        let w: Vec<f32> = ints(n * k, -50, 50, 7)
            .iter()
            .map(|&v| v as f32 / 50.0)
            .collect();
        let x: Vec<f32> = ints(m * k, -20, 20, 8)
            .iter()
            .map(|&v| v as f32 / 4.0)
            .collect();
        let bank = Arc::new(
            WeightBank::quantize_f32_nk(&dev, n, k, &w, crate::kernels::single::Dtype::Int8)
                .unwrap(),
        );
        let emu = dev.emulator().unwrap();
        let mut outs = Vec::new();
        let mut bytes = Vec::new();
        for incremental in [false, true] {
            let o = MatmulOptions::default().incremental(incremental).cores(1);
            let members = vec![
                Matmul::with_options(&bank, m, o).unwrap(),
                Matmul::with_options(&bank, m, o).unwrap(),
            ];
            let mut batch = MatmulBatch::new(members).unwrap();
            let mut npu = Matmul::with_options(&bank, m, o.dequantize_on_npu()).unwrap();
            let (mut y0, mut y1) = (vec![0f32; (m * n) as usize], vec![0f32; (m * n) as usize]);
            let mut y2 = vec![0f32; (m * n) as usize];
            emu.reset_dma_counters();
            batch.mul_mat(&[&x, &x], &mut [&mut y0, &mut y1]).unwrap();
            let batch_bytes = emu.dma_counters().pc_regcmd;
            emu.reset_dma_counters();
            npu.mul_mat(&x, &mut y2).unwrap();
            bytes.push((batch_bytes, emu.dma_counters().pc_regcmd));
            outs.push([y0, y1, y2].map(|y| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()));
        }
        assert!(outs[0][0].iter().any(|&v| v != 0), "{spec}");
        assert!(outs[0] == outs[1], "{spec}: results differ");
        assert!(bytes[1].0 < bytes[0].0, "{spec}: batch {bytes:?}");
        assert!(
            bytes[1].1 < bytes[0].1,
            "{spec}: NPU dequantisation {bytes:?}"
        );
    }
}

#[test]
fn incremental_bodies_are_refused_on_rocket() {
    for spec in ["emu:rocket", "emu:rocket:async"] {
        let dev = Device::open_spec(spec).unwrap();
        let bank =
            Arc::new(WeightBank::new(&dev, (64, 32), Weights::I8(&vec![1; 64 * 32])).unwrap());
        let err =
            Matmul::with_options(&bank, 4, MatmulOptions::default().incremental(true)).unwrap_err();
        match err {
            Error::NotOffered { what } => assert!(what.contains("rocket"), "{what}"),
            e => panic!("{spec}: {e:?}"),
        }
        // Off, the same matmul is made.
        Matmul::with_options(&bank, 4, MatmulOptions::default().incremental(false)).unwrap();
    }
}
