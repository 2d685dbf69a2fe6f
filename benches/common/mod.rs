//! Helpers shared by the benchmarks (each benchmark uses a part of them).
#![allow(dead_code)]

/// A deterministic xorshift64 generator of int8 values, so every run uses the same data.
pub struct XorShift(pub u64);

impl XorShift {
    /// The next value in `-128..=127`.
    pub fn next_i8(&mut self) -> i8 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 56) as u8 as i8
    }

    /// `len` values.
    pub fn vec(&mut self, len: usize) -> Vec<i8> {
        (0..len).map(|_| self.next_i8()).collect()
    }
}

/// The baseline: `c = a × b` for row-major `a` (M×K), `b` (K×N) and `c` (M×N), the plain
/// i-k-j triple loop with i32 accumulation. `c` is zeroed first.
pub fn cpu_int8_gemm(a: &[i8], b: &[i8], c: &mut [i32], k: usize, n: usize) {
    c.fill(0);
    for (c_row, a_row) in c.chunks_exact_mut(n).zip(a.chunks_exact(k)) {
        for (&av, b_row) in a_row.iter().zip(b.chunks_exact(n)) {
            let av = av as i32;
            for (cv, &bv) in c_row.iter_mut().zip(b_row) {
                *cv += av * bv as i32;
            }
        }
    }
}

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use std::hint::black_box;
use std::time::Duration;

/// A group reporting `bytes` per iteration; `large` for iterations of milliseconds.
pub fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
    bytes: usize,
    large: bool,
) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .throughput(Throughput::Bytes(bytes as u64))
        .warm_up_time(Duration::from_secs(1));
    if large {
        group
            .sample_size(20)
            .sampling_mode(SamplingMode::Flat)
            .measurement_time(Duration::from_secs(3));
    } else {
        group
            .sample_size(50)
            .measurement_time(Duration::from_secs(2));
    }
    group
}

/// Adds the `memcpy` baseline to `group`: `src` (random bytes, so its pages are really
/// backed) into a destination allocated once, outside the timing.
pub fn memcpy_baseline(group: &mut BenchmarkGroup<'_, WallTime>, src: Vec<u8>) {
    let mut dst = vec![0u8; src.len()];
    group.bench_function("memcpy", |bch| {
        bch.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        })
    });
}
