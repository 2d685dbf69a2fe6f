//! Throughput of building and decoding regcmd programs, each against a copy baseline
//! measured in the same group and the same run.
//!
//! * `build_task`: `worked_example::program()` followed by
//!   `Program::bind(worked_example::fixture_address)`, i.e. building one task (104-entry
//!   body, 4-entry tail, padding: 112 entries) from typed registers and resolving its DMA
//!   addresses. Baseline `baseline_vec_push`: pushing the same 112 precomputed `u64`
//!   words one by one into a fresh `Vec<u64>` (allocated once, with capacity), a
//!   memcpy-like floor.
//! * `decode_1mib`: 1 MiB of words (131072 entries), the bound worked example repeated.
//!   `decode` is the structured decode (`regcmd::decode`); `decode_to_text` is
//!   `decode(..).to_text(None)`. Baseline `baseline_memcpy`: copying the same 1 MiB of
//!   words into a fresh vector (`to_vec`). The group uses flat sampling, 20 samples and
//!   3 s of measurement, because one `decode_to_text` iteration takes tens of
//!   milliseconds.
//!
//! Every group reports `Throughput::Elements(<entries>)`, so criterion prints entries per
//! second. Run with:
//!
//! ```text
//! cargo bench --bench regcmd
//! ```

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use rknpu_driver::kernels::worked_example;
use rknpu_driver::regcmd::{RegCmd, decode};
use std::hint::black_box;
use std::time::Duration;

/// Entries in 1 MiB of 8-byte words.
const MIB_ENTRIES: usize = (1 << 20) / 8;

/// The worked example, built and bound to the fixture addresses.
fn bound_worked_example() -> Vec<RegCmd> {
    worked_example::program()
        .and_then(|p| p.bind(worked_example::fixture_address))
        .expect("worked example builds and binds")
}

fn build_task(c: &mut Criterion) {
    let words: Vec<u64> = bound_worked_example().iter().map(|w| w.0).collect();
    let entries = words.len() as u64;

    let mut group = c.benchmark_group("build_task");
    group
        .throughput(Throughput::Elements(entries))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("program_bind", |b| {
        b.iter(|| {
            let program = worked_example::program().expect("worked example builds");
            program
                .bind(black_box(worked_example::fixture_address))
                .expect("worked example binds")
        })
    });
    group.bench_function("baseline_vec_push", |b| {
        b.iter(|| {
            let src = black_box(words.as_slice());
            let mut out = Vec::with_capacity(src.len());
            for &w in src {
                out.push(w);
            }
            out
        })
    });
    group.finish();
}

fn decode_1mib(c: &mut Criterion) {
    let words: Vec<RegCmd> = bound_worked_example()
        .into_iter()
        .cycle()
        .take(MIB_ENTRIES)
        .collect();
    assert_eq!(words.len() * 8, 1 << 20);

    let mut group = c.benchmark_group("decode_1mib");
    group
        .throughput(Throughput::Elements(words.len() as u64))
        .sample_size(20)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("decode", |b| b.iter(|| decode(black_box(&words))));
    group.bench_function("decode_to_text", |b| {
        b.iter(|| decode(black_box(&words)).to_text(None))
    });
    group.bench_function("baseline_memcpy", |b| b.iter(|| black_box(&words).to_vec()));
    group.finish();
}

criterion_group!(benches, build_task, decode_1mib);
criterion_main!(benches);
