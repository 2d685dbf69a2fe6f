//! Throughput of the pre-submit verifier (`verify::check_words`: decode every task into
//! the task model and check its DMA ranges), against two baselines measured in the same
//! group and run: a memcpy of the same program words, and the plain regcmd decode
//! (`regcmd::decode`) that the verifier does first.
//!
//! The program is the one `rknpu matmul --m 128 --k 4096 --n 4096 --dtype int8 --cores 3`
//! submits, bound at the addresses `rknpu matmul --emit` uses. Every group reports
//! `Throughput::Elements(<regcmd entries>)`. Run with:
//!
//! ```text
//! cargo bench --bench verify
//! ```

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::regcmd::{RegCmd, decode};
use rknpu_driver::verify::{self, BufferAccess, JobBuffer};
use std::hint::black_box;
use std::time::Duration;

/// The bound program and the buffers of its job.
fn program() -> (u64, Vec<RegCmd>, Vec<JobBuffer>) {
    let plan = Plan::new(MatmulSpec::new(128, 4096, 4096, Dtype::Int8).on_cores(3))
        .expect("the plan of the main job");
    let program = plan.program().expect("its program");
    let at = |id: u32| 0x1000_0000 * (u64::from(id) + 1);
    let words = program.bind(|b| Some(at(b.0))).expect("binds below 4 GiB");
    let buffers = plan
        .buffers(&program)
        .iter()
        .map(|b| {
            let access = if b.written {
                BufferAccess::Write
            } else {
                BufferAccess::Read
            };
            JobBuffer::new(at(b.id.0), b.len, access)
        })
        .collect();
    (at(program.regcmd_buffer().0), words, buffers)
}

fn verify_program(c: &mut Criterion) {
    let (base, words, buffers) = program();
    let mut group = c.benchmark_group("verify_main_job");
    group
        .throughput(Throughput::Elements(words.len() as u64))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("check_words", |b| {
        b.iter(|| {
            verify::check_words(base, black_box(&words), black_box(&buffers)).expect("passes")
        })
    });
    group.bench_function("baseline_decode", |b| b.iter(|| decode(black_box(&words))));
    group.bench_function("baseline_memcpy", |b| b.iter(|| black_box(&words).to_vec()));
    group.finish();
}

criterion_group!(benches, verify_program);
criterion_main!(benches);
