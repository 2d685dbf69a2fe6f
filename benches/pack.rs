//! Throughput of the fast packers of `kernels::matmul::pack`, each against a `memcpy`
//! baseline measured in the same group and the same run.
//!
//! * `int8_weights_4096x4096`: `pack::weights_i8_kn_into(&plan.layout, &b, &mut out)` for the
//!   plan of `MatmulSpec::new(128, 4096, 4096, Dtype::Int8)`: B is a row-major 4096×4096
//!   `Vec<i8>`, `out` a preallocated buffer of `plan.layout.bytes` (16 MiB) that the packer
//!   overwrites every iteration.
//! * `int4_weights_4096x4096`: `pack::weights_i4_kn_into` for the Int4 plan of the same
//!   shape, B holding values in `-8..=7` (the packer's range check over all of B is inside
//!   the timing), `out` a preallocated buffer of `plan.layout.bytes` (8 MiB). This group
//!   counts and copies the 16 MiB of B the packer reads, not the 8 MiB it writes: a
//!   memcpy of 8 MiB (16 MiB of source and destination) stays in a 32 MiB last-level
//!   cache while the packer's 24 MiB of input and output does not, and timing the
//!   packer against that baseline would compare cache with DRAM.
//! * `int8_activations_128x4096`: `pack::activations_i8(&plan, &a)` for the Int8 plan
//!   above, A a row-major 128×4096 `Vec<i8>`. This packer allocates and zeroes its output
//!   of `plan.a_bytes` (512 KiB) on every call, so that allocation is inside the timing;
//!   the baseline does not allocate.
//! * `int32_unpack_128x4096`: `pack::unpack_i32(&plan, &c, &mut out)` for the Int8 plan
//!   above, `c` a `Vec<u8>` of `plan.c_bytes` (2 MiB) of int32 partials and `out` a
//!   preallocated `Vec<i32>` of 128×4096 results (2 MiB).
//!
//! * `w4a8_activations_128x4096`: `pack::activations_w4a8_into(&plan, &a, &mut out)` for
//!   the Int4 plan of 256×4096×4096 (the W4A8 plan of 128 rows: high halves, then low
//!   halves), A a row-major 128×4096 `Vec<i8>`, `out` a preallocated buffer of
//!   `plan.a_bytes` (512 KiB). Counted and copied: A's 512 KiB (bytes read).
//! * `w4a8_prepare_f32_128x4096`: the same from f32 activations,
//!   `quant::quantize_rows_i8_into` into preallocated values and scales, then
//!   `activations_w4a8_into`. Counted and copied: the 2 MiB of f32 read.
//! * `fp16_activations_f32_128x4096`: `pack::activations_float_into(&plan, &x, &mut out)`
//!   for the fp16 plan of 128×4096×4096 on three cores, `x` 128×4096 f32 activations
//!   (rounded to fp16, checked and laid out in one pass), `out` a preallocated buffer of
//!   `plan.a_bytes` (1 MiB). Counted and copied: the 2 MiB of f32 read.
//! * `fp16_activations_f16_128x4096`: `pack::activations_half_into` of the same values
//!   given as fp16 (what an F16 input of `Matmul::run_into` packs), into the same plan's
//!   buffer. Counted and copied: the 1 MiB read.
//!
//! On an x86-64 processor with AVX2 the int8 K×N packer and the W4A8 activation packer
//! run the vector kernels the library picks at run time (`sys::simd`), and with F16C the
//! fp16 activation packer; without them, their scalar paths.
//!
//! Baseline `memcpy`, in every group: `dst.copy_from_slice(&src)` of as many bytes as the
//! operation writes (int4 weights, the W4A8 and fp16 activation groups: reads), from a
//! preallocated source into a preallocated destination.
//!
//! Every group reports `Throughput::Bytes` of those bytes, so criterion prints them per
//! second and the ratio of a group's two lines is the routine's speed as a fraction of
//! memcpy's. Inputs come from a xorshift64 generator with a fixed seed, so every
//! run packs the same values. The weight groups use flat sampling, 20 samples and 3 s of
//! measurement, because one iteration takes milliseconds; the whole bench runs in about
//! a minute. Run with:
//!
//! ```text
//! cargo bench --bench pack
//! ```

mod common;

use common::{group, memcpy_baseline};
use criterion::{Criterion, criterion_group, criterion_main};
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan, pack, quant};
use rknpu_driver::kernels::single::Dtype;
use std::hint::black_box;

/// Rows of A and C.
const M: u32 = 128;
/// Channels: columns of A, rows of B.
const K: u32 = 4096;
/// Columns of B and C.
const N: u32 = 4096;

/// A deterministic xorshift64 generator, so every run uses the same data.
struct XorShift(u64);

impl XorShift {
    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// The next value in `-128..=127`.
    fn next_i8(&mut self) -> i8 {
        (self.next_u64() >> 56) as u8 as i8
    }

    /// `len` values in `-128..=127`.
    fn i8s(&mut self, len: usize) -> Vec<i8> {
        (0..len).map(|_| self.next_i8()).collect()
    }

    /// `len` values in `-8..=7` (the top nibble, sign-extended).
    fn i4s(&mut self, len: usize) -> Vec<i8> {
        (0..len).map(|_| self.next_i8() >> 4).collect()
    }

    /// `len` bytes.
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_i8() as u8).collect()
    }
}

/// The generator every group starts from.
fn rng() -> XorShift {
    XorShift(0x9E37_79B9_7F4A_7C15)
}

/// The plan of `M × K × N` in `dtype`.
fn plan(dtype: Dtype) -> Plan {
    Plan::new(MatmulSpec::new(M, K, N, dtype)).expect("the shape plans")
}

fn int8_weights(c: &mut Criterion) {
    let plan = plan(Dtype::Int8);
    let b = rng().i8s(K as usize * N as usize);
    let mut out = vec![0u8; plan.layout.bytes as usize];
    pack::weights_i8_kn_into(&plan.layout, &b, &mut out).expect("int8 B packs");
    let bytes = out.len();

    let mut group = group(c, "int8_weights_4096x4096", bytes, true);
    group.bench_function("weights_i8_kn_into", |bch| {
        bch.iter(|| {
            pack::weights_i8_kn_into(black_box(&plan.layout), black_box(&b), &mut out)
                .expect("int8 B packs");
            black_box(&mut out);
        })
    });
    memcpy_baseline(&mut group, rng().bytes(bytes));
    group.finish();
}

fn int4_weights(c: &mut Criterion) {
    let plan = plan(Dtype::Int4);
    let b = rng().i4s(K as usize * N as usize);
    let mut out = vec![0u8; plan.layout.bytes as usize];
    pack::weights_i4_kn_into(&plan.layout, &b, &mut out).expect("int4 B packs");
    // The bytes read (B, one value a byte): see the module documentation.
    let bytes = b.len();

    let mut group = group(c, "int4_weights_4096x4096", bytes, true);
    group.bench_function("weights_i4_kn_into", |bch| {
        bch.iter(|| {
            pack::weights_i4_kn_into(black_box(&plan.layout), black_box(&b), &mut out)
                .expect("int4 B packs");
            black_box(&mut out);
        })
    });
    memcpy_baseline(&mut group, rng().bytes(bytes));
    group.finish();
}

fn int8_activations(c: &mut Criterion) {
    let plan = plan(Dtype::Int8);
    let a = rng().i8s(M as usize * K as usize);
    let bytes = pack::activations_i8(&plan, &a).expect("int8 A packs").len();
    assert_eq!(bytes as u64, plan.a_bytes);

    let mut group = group(c, "int8_activations_128x4096", bytes, false);
    group.bench_function("activations_i8", |bch| {
        bch.iter(|| pack::activations_i8(black_box(&plan), black_box(&a)).expect("int8 A packs"))
    });
    memcpy_baseline(&mut group, rng().bytes(bytes));
    group.finish();
}

fn int32_unpack(c: &mut Criterion) {
    let plan = plan(Dtype::Int8);
    let partials = rng().bytes(plan.c_bytes as usize);
    let mut out = vec![0i32; M as usize * N as usize];
    pack::unpack_i32(&plan, &partials, &mut out).expect("int32 C unpacks");
    let bytes = std::mem::size_of_val(out.as_slice());

    let mut group = group(c, "int32_unpack_128x4096", bytes, false);
    group.bench_function("unpack_i32", |bch| {
        bch.iter(|| {
            pack::unpack_i32(black_box(&plan), black_box(&partials), &mut out)
                .expect("int32 C unpacks");
            black_box(&mut out);
        })
    });
    memcpy_baseline(&mut group, rng().bytes(bytes));
    group.finish();
}

fn w4a8_activations(c: &mut Criterion) {
    // The int4 plan of twice the rows: high halves, then low halves.
    let plan = Plan::new(MatmulSpec::new(2 * M, K, N, Dtype::Int4)).expect("the shape plans");
    let a = rng().i8s(M as usize * K as usize);
    let mut out = vec![0u8; plan.a_bytes as usize];
    pack::activations_w4a8_into(&plan, &a, &mut out).expect("W4A8 A packs");

    let mut packing = group(c, "w4a8_activations_128x4096", a.len(), false);
    packing.bench_function("activations_w4a8_into", |bch| {
        bch.iter(|| {
            pack::activations_w4a8_into(black_box(&plan), black_box(&a), &mut out)
                .expect("W4A8 A packs");
            black_box(&mut out);
        })
    });
    memcpy_baseline(&mut packing, rng().bytes(a.len()));
    packing.finish();

    // From f32 activations: quantised per row, then split and packed.
    let x: Vec<f32> = rng()
        .i8s(a.len())
        .iter()
        .map(|&v| v as f32 * 0.37)
        .collect();
    let mut q = vec![0i8; x.len()];
    let mut scales = vec![0f32; M as usize];
    let bytes = std::mem::size_of_val(x.as_slice());
    let mut group = group(c, "w4a8_prepare_f32_128x4096", bytes, false);
    group.bench_function("quantize_rows_i8_into+activations_w4a8_into", |bch| {
        bch.iter(|| {
            quant::quantize_rows_i8_into(black_box(&x), K as usize, &mut q, &mut scales)
                .expect("finite activations");
            pack::activations_w4a8_into(&plan, &q, &mut out).expect("W4A8 A packs");
            black_box(&mut out);
        })
    });
    memcpy_baseline(&mut group, rng().bytes(bytes));
    group.finish();
}

fn float_activations(c: &mut Criterion) {
    // The fp16 plan of the same shape, on three cores (several M tiles and K waves).
    let spec = MatmulSpec::new(M, K, N, Dtype::Fp16).on_cores(3);
    let plan = Plan::new(spec).expect("the shape plans");
    let x: Vec<f32> = rng()
        .i8s(M as usize * K as usize)
        .iter()
        .map(|&v| v as f32 * 0.37)
        .collect();
    let mut out = vec![0u8; plan.a_bytes as usize];
    let bytes = std::mem::size_of_val(x.as_slice());
    let mut group = group(c, "fp16_activations_f32_128x4096", bytes, false);
    group.bench_function("activations_float_into", |bch| {
        bch.iter(|| {
            pack::activations_float_into(black_box(&plan), black_box(&x), &mut out)
                .expect("finite activations");
            black_box(&mut out);
        })
    });
    memcpy_baseline(&mut group, rng().bytes(bytes));
    group.finish();
    // The same values already in fp16: their bits laid out, no conversion.
    let bits: Vec<u16> = x
        .iter()
        .map(|&v| half::f16::from_f32(v).to_bits())
        .collect();
    let bytes = std::mem::size_of_val(bits.as_slice());
    let mut halves = common::group(c, "fp16_activations_f16_128x4096", bytes, false);
    halves.bench_function("activations_half_into", |bch| {
        bch.iter(|| {
            pack::activations_half_into(black_box(&plan), black_box(&bits), &mut out)
                .expect("finite activations");
            black_box(&mut out);
        })
    });
    memcpy_baseline(&mut halves, rng().bytes(bytes));
    halves.finish();
}

criterion_group!(
    benches,
    int8_weights,
    int4_weights,
    int8_activations,
    int32_unpack,
    w4a8_activations,
    float_activations
);
criterion_main!(benches);
