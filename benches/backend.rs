//! The host's share of a backend's matmul on a 4096 (in) × 11008 (out) layer, each
//! against a `memcpy` baseline measured in the same group and the same run, so that the
//! results read as a ratio. No device is opened: NPU time is not in any figure.
//!
//! * `host_m1_4096x11008`: the host work of one W8A8 call for M = 1, on the plan
//!   `Plan::for_layout(&WeightLayout::new(4096, 11008, Dtype::Int8)?, 1, OutType::Int32, 3)`:
//!   `quantize` (`quant::quantize_rows_i8_into` of 4096 f32 activations into
//!   preallocated values and a row scale), `pack_a` (`pack::activations_i8`, which
//!   allocates and zeroes its output on every call), `unpack_scale` (`pack::unpack_i32`
//!   of a C buffer of `plan.c_bytes` holding seeded int32 partials, then each result
//!   times the row scale and its channel scale into preallocated f32 results), and
//!   `all` (the three in a row). Baseline: a `memcpy` of the input and output bytes
//!   (4096 f32 in, 11008 f32 out: 60 KiB).
//! * `int8_bank_4096x11008`: `pack::weights_i8_nk_into` of `[out][in]` i8 weights into a
//!   preallocated buffer of `layout.bytes`. Baseline: a `memcpy` of the weight bytes.
//! * `int4_bank_4096x11008`: `pack::weights_i4_packed_nk_into` of packed nibbles (11008
//!   rows of 2048 bytes) into a preallocated buffer of `layout.bytes`, `pack::i4_column_sums`
//!   of the packed bank, `both` (what a bank made from cached bytes costs), and
//!   `weights_i4_packed_nk_sums_into` (packing and summing in one pass), and `certify`
//!   (`quant::i4_magnitudes_packed` and `WeightLayout::certified_i4`: choosing the
//!   waves, which `WeightBank::new` of packed nibbles adds to the one-pass packing).
//!   Baseline: a `memcpy` of the packed bytes.
//!
//! Every group reports `Throughput::Bytes` of the baseline's bytes, so each line's
//! throughput divided by the `memcpy` line's is the ratio. Inputs are seeded
//! (`rknpu_driver::seeded::Rng`): every run uses the same values. Run with:
//!
//! ```text
//! cargo bench --bench backend
//! cargo bench --bench backend -- --warm-up-time 1 --measurement-time 3
//! ```

mod common;

use common::{group, memcpy_baseline};
use criterion::{Criterion, criterion_group, criterion_main};
use rknpu_driver::kernels::matmul::{Plan, WeightLayout, pack, quant};
use rknpu_driver::kernels::single::{Dtype, OutType};
use rknpu_driver::seeded::Rng;
use std::hint::black_box;

/// Input features.
const K: u32 = 4096;
/// Output features.
const N: u32 = 11008;

/// `len` seeded bytes.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::from_seed(seed);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// `len` seeded floats in `[-1, 1)`.
fn floats(seed: u64, len: usize) -> Vec<f32> {
    let mut rng = Rng::from_seed(seed);
    (0..len).map(|_| rng.unit()).collect()
}

/// The layout of the layer in `dtype`.
fn layout(dtype: Dtype) -> WeightLayout {
    WeightLayout::new(K, N, dtype).expect("the layer lays out")
}

/// What one M = 1 call does on the host around the NPU, with its buffers.
struct HostCall {
    plan: Plan,
    /// f32 activations.
    x: Vec<f32>,
    /// Their int8 values.
    q: Vec<i8>,
    /// Their row scale.
    row_scales: Vec<f32>,
    /// The C buffer as the NPU leaves it.
    c: Vec<u8>,
    /// Integer results.
    acc: Vec<i32>,
    /// Per-channel weight scales.
    channel_scales: Vec<f32>,
    /// f32 results.
    y: Vec<f32>,
}

impl HostCall {
    fn new() -> HostCall {
        let plan =
            Plan::for_layout(&layout(Dtype::Int8), 1, OutType::Int32, 3).expect("M = 1 plans");
        // Partials within ±2^24, so that the waves' sums stay in the int32 range as the
        // NPU's would (int8 products over 4096 channels stay within ±2^26).
        let mut rng = Rng::from_seed(3);
        let c: Vec<u8> = (0..plan.c_bytes / 4)
            .flat_map(|_| rng.int(-(1 << 24), 1 << 24).to_le_bytes())
            .collect();
        HostCall {
            x: floats(1, K as usize),
            q: vec![0; K as usize],
            row_scales: vec![0.0; 1],
            c,
            acc: vec![0; N as usize],
            channel_scales: floats(2, N as usize)
                .iter()
                .map(|v| v.abs() / 127.0)
                .collect(),
            y: vec![0.0; N as usize],
            plan,
        }
    }

    /// Quantises the activations.
    fn quantize(&mut self) {
        quant::quantize_rows_i8_into(
            black_box(&self.x),
            K as usize,
            &mut self.q,
            &mut self.row_scales,
        )
        .expect("activations quantise");
    }

    /// Packs A.
    fn pack_a(&self) -> Vec<u8> {
        pack::activations_i8(&self.plan, black_box(&self.q)).expect("A packs")
    }

    /// Unpacks C and scales the results.
    fn unpack_scale(&mut self) {
        pack::unpack_i32(&self.plan, black_box(&self.c), &mut self.acc).expect("C unpacks");
        let n = N as usize;
        for (i, (y, &v)) in self.y.iter_mut().zip(&self.acc).enumerate() {
            *y = v as f32 * self.row_scales[i / n] * self.channel_scales[i % n];
        }
        black_box(&mut self.y);
    }
}

fn host_m1(c: &mut Criterion) {
    let mut call = HostCall::new();
    let bytes = (K as usize + N as usize) * 4;
    let mut group = group(c, "host_m1_4096x11008", bytes, false);
    group.bench_function("quantize", |bch| bch.iter(|| call.quantize()));
    group.bench_function("pack_a", |bch| bch.iter(|| call.pack_a()));
    group.bench_function("unpack_scale", |bch| bch.iter(|| call.unpack_scale()));
    group.bench_function("all", |bch| {
        bch.iter(|| {
            call.quantize();
            black_box(call.pack_a());
            call.unpack_scale();
        })
    });
    memcpy_baseline(&mut group, self::bytes(99, bytes));
    group.finish();
}

fn int8_bank(c: &mut Criterion) {
    let layout = layout(Dtype::Int8);
    let w: Vec<i8> = bytes(4, K as usize * N as usize)
        .into_iter()
        .map(|b| b as i8)
        .collect();
    let mut out = vec![0u8; layout.bytes as usize];
    let mut group = group(c, "int8_bank_4096x11008", w.len(), true);
    group.bench_function("weights_i8_nk_into", |bch| {
        bch.iter(|| {
            pack::weights_i8_nk_into(black_box(&layout), black_box(&w), &mut out)
                .expect("int8 weights pack");
            black_box(&mut out);
        })
    });
    memcpy_baseline(&mut group, bytes(99, w.len()));
    group.finish();
}

fn int4_bank(c: &mut Criterion) {
    let layout = layout(Dtype::Int4);
    let w = bytes(5, K as usize / 2 * N as usize);
    let mut out = vec![0u8; layout.bytes as usize];
    pack::weights_i4_packed_nk_into(&layout, &w, &mut out).expect("int4 weights pack");
    let mut group = group(c, "int4_bank_4096x11008", w.len(), true);
    group.bench_function("weights_i4_packed_nk_into", |bch| {
        bch.iter(|| {
            pack::weights_i4_packed_nk_into(black_box(&layout), black_box(&w), &mut out)
                .expect("int4 weights pack");
            black_box(&mut out);
        })
    });
    group.bench_function("i4_column_sums", |bch| {
        bch.iter(|| pack::i4_column_sums(black_box(&layout), black_box(&out)).expect("sums"))
    });
    group.bench_function("both", |bch| {
        bch.iter(|| {
            pack::weights_i4_packed_nk_into(black_box(&layout), black_box(&w), &mut out)
                .expect("int4 weights pack");
            pack::i4_column_sums(&layout, black_box(&out)).expect("sums")
        })
    });
    group.bench_function("weights_i4_packed_nk_sums_into", |bch| {
        bch.iter(|| {
            pack::weights_i4_packed_nk_sums_into(black_box(&layout), black_box(&w), &mut out)
                .expect("int4 weights pack")
        })
    });
    group.bench_function("certify", |bch| {
        bch.iter(|| {
            let m = quant::i4_magnitudes_packed(black_box(&w), N as usize, K as usize)
                .expect("magnitudes");
            WeightLayout::certified_i4(K, N, &m).expect("a layout")
        })
    });
    memcpy_baseline(&mut group, bytes(99, w.len()));
    group.finish();
}

criterion_group!(benches, host_m1, int8_bank, int4_bank);
criterion_main!(benches);
