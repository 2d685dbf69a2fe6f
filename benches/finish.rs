//! Finishing a matmul call on the host: the K-wave reduction, unpacking and scaling of
//! `kernels::matmul::finish::Reduction::scale_i32_into`, against a `memcpy` of the same
//! bytes measured in the same group and run.
//!
//! * `finish_int8_128x4096x4096_<W>_waves`, W = 1 to 6: the int8 plan of 128×4096×4096
//!   on 3 cores with its K in W waves (`WeightLayout::with_k_tile(4096, 4096, Int8,
//!   4096 / W rounded up to 32)`), its C buffer of W partial blocks (W · 2 MiB of int32
//!   partials within ±2²⁰, seeded) summed, unpacked to row-major and scaled by a row
//!   and a column scale into a preallocated 128×4096 `f32` result. The `Reduction` is
//!   made once, outside the timing, as a `Matmul` makes it.
//!
//! On an x86-64 processor with AVX2 the reduction runs the vector kernel the library
//! picks at run time (`sys::simd::sum_scale_tile`); without it, the scalar path.
//!
//! Baseline `memcpy`, in every group: a copy of as many bytes as C holds, from a
//! preallocated source into a preallocated destination. Every group reports
//! `Throughput::Bytes(<C bytes>)`, so criterion prints bytes of C per second and the
//! ratio of the two lines is the reduction's speed as a fraction of memcpy's
//! (docs/matmul.md, "Host work"). Run with:
//!
//! ```text
//! cargo bench --bench finish
//! ```

mod common;

use common::{XorShift, group, memcpy_baseline};
use criterion::{Criterion, criterion_group, criterion_main};
use rknpu_driver::kernels::matmul::{Plan, WeightLayout};
use rknpu_driver::kernels::single::{Dtype, OutType};
use std::hint::black_box;

const M: u32 = 128;
const K: u32 = 4096;
const N: u32 = 4096;
const CORES: u32 = 3;

fn finish(c: &mut Criterion) {
    for waves in 1..=6u32 {
        let kw = K.div_ceil(waves).next_multiple_of(32);
        let layout = WeightLayout::with_k_tile(K, N, Dtype::Int8, kw).expect("the layout");
        assert_eq!(layout.waves.len(), waves as usize);
        let plan = Plan::for_layout(&layout, M, OutType::Int32, CORES).expect("the plan");
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 + u64::from(waves));
        // Int32 partials within ±2²⁰: a seeded byte, shifted.
        let partials: Vec<u8> = (0..plan.c_bytes / 4)
            .flat_map(|_| (i32::from(rng.next_i8()) << 12).to_le_bytes())
            .collect();
        let rows: Vec<f32> = (0..M).map(|i| 1.0 / (1 + i) as f32).collect();
        let cols: Vec<f32> = (0..N).map(|j| 0.5 + j as f32 / N as f32).collect();
        let reduction = plan.reduction();
        let mut out = vec![0f32; (M * N) as usize];
        reduction
            .scale_i32_into(&partials, &rows, Some(&cols), &mut out)
            .expect("C finishes");
        let name = format!("finish_int8_128x4096x4096_{waves}_waves");
        let mut group = group(c, &name, partials.len(), true);
        group.bench_function("scale_i32_into", |bch| {
            bch.iter(|| {
                reduction
                    .scale_i32_into(black_box(&partials), &rows, Some(&cols), &mut out)
                    .expect("C finishes");
                black_box(&mut out);
            })
        });
        memcpy_baseline(
            &mut group,
            rng.vec(partials.len()).iter().map(|&v| v as u8).collect(),
        );
        group.finish();
    }
}

criterion_group!(benches, finish);
criterion_main!(benches);
