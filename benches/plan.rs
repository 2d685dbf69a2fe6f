//! Cost of planning, encoding and rebinding matmul programs, each against a copy baseline
//! measured in the same group and the same run.
//!
//! * `plan_and_encode_4096x4096`: `Plan::new(MatmulSpec::new(1, 4096, 4096, Dtype::Int8))`
//!   followed by `Plan::program()`, i.e. planning a 4096×4096 int8 layer for one row of
//!   activations and encoding its program (2 tasks, 224 entries) from typed registers,
//!   relocations still symbolic. The target is under 50 µs. Baseline `vec_push_baseline`:
//!   pushing the same number of precomputed `u64` words (`program.words().len()`) one by
//!   one into a fresh `Vec<u64>` (allocated once, with capacity), a memcpy-like floor.
//!   The group reports `Throughput::Elements(<entries>)`, so criterion prints entries per
//!   second.
//! * `rebind_per_task`: the program of `MatmulSpec::new(128, 4096, 11008, Dtype::Int8)`
//!   (8 tasks, 896 entries, 31 relocations), bound once to `0x1000_0000 × (id + 1)`
//!   outside the timing; `rebind` times `Program::rebind(&mut words, base)` patching those
//!   bound words in place for new buffer addresses (`0x1000_0000 × (id + 1) +
//!   0x0100_0000`). Before timing, the rebound words are checked against `Program::bind`
//!   onto the new addresses. Baseline `to_vec_baseline`: copying the bound words into a
//!   fresh vector (`to_vec`). The group reports `Throughput::Elements(<tasks>)`, so
//!   criterion prints tasks per second; the time per task is the printed time divided by
//!   8. The target is under 1 µs per task.
//!
//! * `costed_search_128x4096x4096`: `Plan::cheapest(MatmulSpec::new(128, 4096, 4096,
//!   Dtype::Int8).on_cores(3), &HardwareProfile::rk3588())` — the costed search (the
//!   candidate K splits on 1 to 3 cores, each planned and costed from its tasks' DMA
//!   ranges) — then `Plan::program()`, against `plan_program` of `Plan::new` of the same
//!   spec in the same group (the search's price over a plain plan); and the same search
//!   for 512×3840×4096 fp16, whose candidates run to six waves.
//!
//! Run with:
//!
//! ```text
//! cargo bench --bench plan
//! ```

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::regcmd::{BufferId, Program, RegCmd};
use std::hint::black_box;
use std::time::Duration;

/// The first device address of every buffer: `0x1000_0000 × (id + 1)`.
fn address(buffer: BufferId) -> Option<u64> {
    Some(0x1000_0000 * (buffer.0 as u64 + 1))
}

/// The new device address of every buffer: 16 MiB past [`address`].
fn new_address(buffer: BufferId) -> Option<u64> {
    address(buffer).map(|a| a + 0x0100_0000)
}

/// Plans and encodes `spec`.
fn plan_and_encode(spec: MatmulSpec) -> Program {
    Plan::new(spec)
        .expect("the shape plans")
        .program()
        .expect("the program builds")
}

fn plan_and_encode_4096x4096(c: &mut Criterion) {
    let spec = MatmulSpec::new(1, 4096, 4096, Dtype::Int8);
    let words: Vec<u64> = plan_and_encode(spec).words().iter().map(|w| w.0).collect();

    let mut group = c.benchmark_group("plan_and_encode_4096x4096");
    group
        .throughput(Throughput::Elements(words.len() as u64))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("plan_program", |b| {
        b.iter(|| plan_and_encode(black_box(spec)))
    });
    group.bench_function("vec_push_baseline", |b| {
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

fn costed_search_128x4096x4096(c: &mut Criterion) {
    let profile = HardwareProfile::rk3588();
    let mut group = c.benchmark_group("costed_search_128x4096x4096");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let cheapest = MatmulSpec::new(128, 4096, 4096, Dtype::Int8).on_cores(3);
    let widest = MatmulSpec::new(512, 3840, 4096, Dtype::Fp16).on_cores(3);
    for (name, spec) in [
        ("cheapest_program", cheapest),
        ("cheapest_program_512x3840x4096_fp16", widest),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                Plan::cheapest(black_box(spec), &profile)
                    .expect("the shape plans")
                    .program()
                    .expect("the program builds")
            })
        });
    }
    group.bench_function("plan_program", |b| {
        b.iter(|| plan_and_encode(black_box(cheapest)))
    });
    group.finish();
}

fn rebind_per_task(c: &mut Criterion) {
    let program = plan_and_encode(MatmulSpec::new(128, 4096, 11008, Dtype::Int8));
    let bound: Vec<RegCmd> = program.bind(address).expect("the program binds");

    // One checked rebind, outside the timing.
    let mut words = bound.clone();
    program
        .rebind(&mut words, new_address)
        .expect("the program rebinds");
    assert_eq!(
        words,
        program.bind(new_address).expect("the program binds"),
        "rebind differs from bind onto the same addresses"
    );
    assert_ne!(words, bound, "rebind changed no entry");

    let mut group = c.benchmark_group("rebind_per_task");
    group
        .throughput(Throughput::Elements(program.tasks().len() as u64))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    group.bench_function("rebind", |b| {
        b.iter(|| {
            program
                .rebind(black_box(&mut words), black_box(new_address))
                .expect("the program rebinds")
        })
    });
    group.bench_function("to_vec_baseline", |b| b.iter(|| black_box(&bound).to_vec()));
    group.finish();
}

criterion_group!(
    benches,
    plan_and_encode_4096x4096,
    costed_search_128x4096x4096,
    rebind_per_task
);
criterion_main!(benches);
