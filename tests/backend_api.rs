//! The backend-facing matmul API (`compute::matmul`) against CPU references computed here:
//! one weight bank for any M, int8 / int4 / fp16 banks, quantised layers, typed errors,
//! owned handles, the split across cores, batches of matmuls in one job, and the
//! asynchronous calls. Everything runs on the emulated kernels (vendor and rocket), which
//! execute the programs on the simulator.
//!
//! Integer products are exact. Float results are checked against f64 references with the
//! bounds stated at each test.

mod common;

use common::Rng;

use half::f16;
use proptest::prelude::*;
use rknpu_driver::Error;
use rknpu_driver::compute::matmul::{
    Activations, Matmul, MatmulBatch, MatmulOptions, PendingMatmul, WeightBank, Weights,
};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::{Plan, WeightLayout, pack_weights_int_nk, quant};
use rknpu_driver::kernels::single::{Dtype, OutType};
use rknpu_driver::trace::{Chunk, MemorySink, Trace};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The emulated kernels every test runs on where it is cheap: vendor 0.9.8 and rocket.
const SPECS: [&str; 2] = ["emu", "emu:rocket"];

fn open(spec: &str) -> Device {
    Device::open_spec(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// `n` rows of `k` values in `lo..=hi`.
fn ints(rng: &mut Rng, len: usize, lo: i32, hi: i32) -> Vec<i8> {
    (0..len).map(|_| rng.int(lo, hi) as i8).collect()
}

/// `C[i][j] = Σ_k a[i][k] · w[j][k]` for A as M×K and W as N×K (`[out][in]`), in i64.
fn cpu_nk(a: &[i64], w_nk: &[i64], m: usize, k: usize, n: usize) -> Vec<i64> {
    let mut c = vec![0i64; m * n];
    for i in 0..m {
        let row = &a[i * k..(i + 1) * k];
        for j in 0..n {
            let col = &w_nk[j * k..(j + 1) * k];
            c[i * n + j] = row.iter().zip(col).map(|(&x, &y)| x * y).sum();
        }
    }
    c
}

fn wide<T: Copy + Into<i64>>(v: &[T]) -> Vec<i64> {
    v.iter().map(|&x| x.into()).collect()
}

/// Transposes `rows` × `cols` row-major.
fn transpose<T: Copy>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| (r, c)))
        .map(|(r, c)| v[r * cols + c])
        .collect()
}

fn as_i32(v: &[i64]) -> Vec<i32> {
    v.iter().map(|&x| i32::try_from(x).unwrap()).collect()
}

/// Submissions recorded while `f` runs on `dev` (from a trace recorded in memory).
fn submissions(dev: &Device, f: impl FnOnce()) -> usize {
    let sink = MemorySink::default();
    dev.start_recording(Box::new(sink.clone())).unwrap();
    f();
    dev.stop_recording().unwrap();
    let trace = Trace::from_bytes(&sink.bytes()).unwrap();
    trace
        .chunks
        .iter()
        .filter(|c| matches!(c, Chunk::Submit(_)))
        .count()
}

#[path = "backend_api/api.rs"]
mod api;
#[path = "backend_api/cores.rs"]
mod cores;
#[path = "backend_api/floats.rs"]
mod floats;
#[path = "backend_api/integers.rs"]
mod integers;
