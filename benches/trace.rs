//! Reading and model-replaying the trace of one int8 matmul, each against a baseline
//! measured in the same group and the same run.
//!
//! Setup, outside every timing: a 128×4096×4096 int8 matmul (`C[128×4096] =
//! A[128×4096] × B[4096×4096]`, int32 results) runs once on the emulated kernel
//! (`Device::open_spec("emu")`) through `WeightBank::new_int` and `Matmul::run` (exact `i64`), with
//! `Device::start_recording` streaming the trace into an in-memory `Vec<u8>`. A and B come
//! from a xorshift64 generator with a fixed seed, so every run records the same trace. The
//! setup checks once that the device's C equals the CPU baseline's C, that the bytes read
//! back as a trace, and that `replay_model` of it matches the recording with at least one
//! comparison (a benchmark of a broken replay is worthless), then prints the trace's size
//! in bytes and its number of chunks.
//!
//! * `trace_read`: `Trace::from_bytes(&bytes)`, the whole parse of the recorded file
//!   from memory: chunk framing, every bounds check, and copying each buffer's contents
//!   (packed B, packed A, the regcmd list, the int32 partials of C) into owned `Vec`s.
//!   Baseline `memcpy`: `dst.copy_from_slice(&bytes)` into a preallocated destination of
//!   the same length. Both report `Throughput::Bytes(<trace bytes>)`, so criterion prints
//!   MiB/s (or GiB/s); reading runs at disk/memory speed when the ratio `from_bytes /
//!   memcpy` of the throughputs is close to 1. Reading allocates its output on every
//!   call and memcpy does not, so a ratio somewhat below 1 is the cost of those
//!   allocations.
//! * `trace_replay_model`: `replay_model(&trace)` of the parsed trace: a fresh simulator,
//!   every buffer mapped and written, the submission kicked (the 2^31 MACs of the matmul
//!   on the simulator) and the completion and outputs compared with the recording.
//!   Baseline `cpu_int8_gemm`: a single-threaded GEMM of the same shape on the same A and
//!   B held row-major as `Vec<i8>`, the plain i-k-j loop with i32 accumulation (no SIMD
//!   intrinsics, no threads; the compiler may auto-vectorise the inner loop), C zeroed
//!   inside the timing. Both report `Throughput::Elements(128·4096·4096)`, so criterion
//!   prints MACs per second; the ratio of the two throughputs (replay over GEMM, above 1
//!   when the replay is faster) compares a whole replay, checks included, with computing
//!   the product directly on the CPU. One iteration of either takes around a second on a
//!   small machine, so this group uses flat sampling, 10 samples and 15 s of measurement.
//!
//! Run with:
//!
//! ```text
//! cargo bench --bench trace
//! ```

mod common;

use common::{XorShift, cpu_int8_gemm};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::replay::replay_model;
use rknpu_driver::trace::{Chunk, MemorySink, Trace};
use std::hint::black_box;
use std::time::Duration;

/// Rows of A and C.
const M: usize = 128;
/// Columns of A, rows of B.
const K: usize = 4096;
/// Columns of B and C.
const N: usize = 4096;

/// Everything the groups share, built once.
struct Fixture {
    /// The recorded trace file.
    bytes: Vec<u8>,
    /// The same, parsed.
    trace: Trace,
    /// A, row-major M×K.
    a: Vec<i8>,
    /// B, row-major K×N.
    b: Vec<i8>,
}

/// How many chunks of each type `t` holds, e.g. `BUFC 4, BUFD 4, ...`.
fn chunk_kinds(t: &Trace) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for c in &t.chunks {
        let kind = match c {
            Chunk::Buffer { .. } => "BUFC",
            Chunk::Data { .. } => "BUFD",
            Chunk::Output { .. } => "OUTD",
            Chunk::Reloc { .. } => "RELO",
            Chunk::Submit(_) => "SUBM",
            Chunk::Done(_) => "DONE",
            Chunk::Note(_) => "NOTE",
            Chunk::Unknown { .. } => "unknown",
            _ => "other",
        };
        match counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind, 1)),
        }
    }
    counts
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Records the trace of one `M × K × N` int8 matmul on the emulated kernel and checks it:
/// the device's C against the CPU baseline, the bytes against the reader, and the model
/// replay against the recording. Prints the trace's size and chunk count.
fn fixture() -> Fixture {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let a = rng.vec(M * K);
    let b = rng.vec(K * N);
    let widen = |v: &[i8]| v.iter().map(|&x| x as i32).collect::<Vec<i32>>();

    let dev = Device::open_spec("emu").expect("the emulated kernel opens");
    let sink = MemorySink::default();
    dev.start_recording(Box::new(sink.clone()))
        .expect("recording starts");
    let device_c = {
        let plan = Plan::new(MatmulSpec::new(M as u32, K as u32, N as u32, Dtype::Int8))
            .expect("the shape plans");
        let bank = std::sync::Arc::new(
            WeightBank::from_kn_in(&dev, &plan.layout, Weights::Int(&widen(&b)))
                .expect("B uploads"),
        );
        let mut mm = Matmul::for_plan(&bank, plan).expect("the matmul binds");
        mm.timeout = Duration::from_secs(60);
        mm.run::<i32, i64>(&widen(&a)).expect("the matmul runs")
    };
    dev.stop_recording().expect("recording stops cleanly");
    drop(dev);
    let bytes = sink.bytes();

    let mut cpu_c = vec![0i32; M * N];
    cpu_int8_gemm(&a, &b, &mut cpu_c, K, N);
    if let Some(i) = (0..M * N).find(|&i| device_c[i] != cpu_c[i] as i64) {
        panic!(
            "the device and the CPU baseline differ at C[{}][{}]: device {} != cpu {}",
            i / N,
            i % N,
            device_c[i],
            cpu_c[i]
        );
    }

    let trace = Trace::from_bytes(&bytes).expect("the recording reads back as a trace");
    assert!(trace.header.emulated, "the trace says it was not emulated");
    let report = replay_model(&trace);
    assert!(
        report.is_match(),
        "the model replay does not match the recording: {:?}",
        report.mismatches
    );
    assert!(
        report.compared > 0,
        "the model replay compared nothing: {report:?}"
    );
    println!(
        "trace of the {M}x{K}x{N} int8 matmul: {} bytes, {} chunks after HEAD ({}); \
         the model replay ran {} submissions and made {} comparisons",
        bytes.len(),
        trace.chunks.len(),
        chunk_kinds(&trace),
        report.submits,
        report.compared
    );
    Fixture { bytes, trace, a, b }
}

/// `trace_read`: parsing the trace against a memcpy of its bytes.
fn trace_read(c: &mut Criterion, f: &Fixture) {
    let bytes = &f.bytes;
    let mut dst = vec![0u8; bytes.len()];
    let mut group = c.benchmark_group("trace_read");
    group
        .throughput(Throughput::Bytes(bytes.len() as u64))
        .sample_size(30)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("from_bytes", |bch| {
        bch.iter(|| Trace::from_bytes(black_box(bytes)).expect("the trace reads"))
    });
    group.bench_function("memcpy", |bch| {
        bch.iter(|| {
            dst.copy_from_slice(black_box(bytes));
            black_box(&mut dst);
        })
    });
    group.finish();
}

/// `trace_replay_model`: replaying the trace on the simulator against a CPU GEMM of the
/// same shape and data.
fn trace_replay_model(c: &mut Criterion, f: &Fixture) {
    let mut cpu_c = vec![0i32; M * N];
    let mut group = c.benchmark_group("trace_replay_model");
    group
        .throughput(Throughput::Elements((M * K * N) as u64))
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(15));
    group.bench_function("replay_model", |bch| {
        bch.iter(|| replay_model(black_box(&f.trace)))
    });
    group.bench_function("cpu_int8_gemm", |bch| {
        bch.iter(|| {
            cpu_int8_gemm(black_box(&f.a), black_box(&f.b), &mut cpu_c, K, N);
            black_box(&cpu_c);
        })
    });
    group.finish();
}

/// Both groups over one recorded fixture.
fn trace(c: &mut Criterion) {
    let f = fixture();
    trace_read(c, &f);
    trace_replay_model(c, &f);
}

criterion_group!(benches, trace);
criterion_main!(benches);
