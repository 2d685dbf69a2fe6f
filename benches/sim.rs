//! Simulated int8 matmul throughput in multiply-accumulates per second, each against a
//! CPU int8 GEMM baseline on the same data, measured in the same group and the same run.
//!
//! * `sim_int8_matmul_128x4096x4096`: `C[128×4096] = A[128×4096] × B[4096×4096]`, int8
//!   inputs, int32 output. One task cannot hold 128 rows of K = 4096 in the CBUF, so the
//!   program is two chained tasks of 64-row M tiles (`SingleMatmul::body_at` over slices
//!   of A and C, sharing B). `sim_kick` times one whole `Simulator::kick` of that program:
//!   the PC fetching both task lists, the register checks, the CNA feature and weight
//!   gather, the 2^31 MACs, the DPU and the write-back of C. Packing A and B into the
//!   NPU layouts and mapping the simulator's memory happen once, outside the timing.
//!   The group uses flat sampling, 10 samples, 2 s of warm-up and 15 s of measurement,
//!   because one iteration takes around a second.
//! * `sim_int8_matvec_1x4096x4096`: the same with M = 1, one task
//!   (`SingleMatmul::program`), 10 samples and 5 s of measurement.
//!
//! Baseline `cpu_int8_gemm`, in both groups: a straightforward single-threaded GEMM on
//! the same values held row-major as `Vec<i8>` A (M×K) and B (K×N), producing a
//! row-major `Vec<i32>` C (M×N) with the plain i-k-j triple loop: no SIMD intrinsics
//! (the compiler may auto-vectorise the inner loop), no threads, no raw-pointer code. C
//! is zeroed inside the timed closure.
//!
//! Before timing, each group checks once that the simulator's C equals the baseline's C
//! and panics if it does not: a benchmark of a wrong result is worthless.
//!
//! Every group reports `Throughput::Elements(M·K·N)`, so criterion prints MACs per second.
//! The target for the simulator is at least 2 GMAC/s single-threaded on
//! 128×4096×4096. Run with:
//!
//! ```text
//! cargo bench --bench sim
//! ```

mod common;

use common::{XorShift, cpu_int8_gemm};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use rknpu_driver::kernels::single::{A, B, C, Dtype, E, REGCMD, SingleMatmul};
use rknpu_driver::regcmd::{BufferId, DmaAddr, Program, ProgramBuilder, words_to_le_bytes};
use rknpu_driver::sim::{DEFAULT_WORK_BUDGET, Kick, Simulator};
use std::hint::black_box;
use std::time::Duration;

/// Device address of the regcmd buffer.
const REGCMD_ADDR: u32 = 0x1000_0000;
/// Device address of packed A.
const A_ADDR: u32 = 0x2000_0000;
/// Device address of packed B.
const B_ADDR: u32 = 0x3000_0000;
/// Device address of C.
const C_ADDR: u32 = 0x4000_0000;

/// Rows per task in the tiled program: 64 rows of K = 4096 int8 fill 8 CBUF banks.
const M_TILE: u32 = 64;

/// Device address of every buffer: `0x1000_0000 × (id + 1)` (REGCMD, A, B, C, E).
fn address(buffer: BufferId) -> Option<u64> {
    Some(0x1000_0000u64 * (buffer.0 as u64 + 1))
}

/// The program for `m × k × n`: one task when `m` fits, else chained [`M_TILE`]-row tiles
/// over slices of A and C sharing B.
fn program(m: u32, k: u32, n: u32) -> Program {
    if m <= M_TILE {
        return SingleMatmul::new(m, k, n, Dtype::Int8)
            .program()
            .expect("single-task program builds");
    }
    assert_eq!(
        m % M_TILE,
        0,
        "M must be a multiple of the {M_TILE}-row tile"
    );
    let tile = SingleMatmul::new(M_TILE, k, n, Dtype::Int8);
    let mut p = ProgramBuilder::new(REGCMD);
    for t in 0..m / M_TILE {
        let body = tile
            .body_at(
                DmaAddr::reloc(A, t * M_TILE * k),
                DmaAddr::reloc(B, 0),
                DmaAddr::reloc(C, t * M_TILE * n * 4),
                DmaAddr::reloc(E, 0),
            )
            .expect("tile body builds");
        p.push_task(body, tile.enable());
    }
    p.build().expect("tiled program builds")
}

/// Benchmarks one shape: the simulated kick against the CPU baseline, after checking that
/// both give the same C.
fn bench_shape(
    c: &mut Criterion,
    group_name: &str,
    (m, k, n): (u32, u32, u32),
    measurement: Duration,
) {
    let (mu, ku, nu) = (m as usize, k as usize, n as usize);
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let a = rng.vec(mu * ku);
    let b = rng.vec(ku * nu);

    // The simulator: program and operands mapped once.
    let prog = program(m, k, n);
    let words = prog.bind(address).expect("program binds");
    let full = SingleMatmul::new(m, k, n, Dtype::Int8);
    let widen = |v: &[i8]| v.iter().map(|&x| x as i32).collect::<Vec<i32>>();
    let ab = full.pack_a_int(&widen(&a)).expect("A packs");
    let bb = full.pack_b_int(&widen(&b)).expect("B packs");
    let mut sim = Simulator::new();
    let mem = sim.memory_mut();
    mem.map(REGCMD_ADDR, words_to_le_bytes(&words))
        .expect("regcmd maps");
    mem.map(A_ADDR, ab).expect("A maps");
    mem.map(B_ADDR, bb).expect("B maps");
    mem.map_zeroed(C_ADDR, full.c_bytes()).expect("C maps");
    let kick = Kick::new(REGCMD_ADDR, prog.tasks()[0].regcfg_amount);

    // One checked run of each, outside the timing.
    let run = sim.kick(&kick).expect("simulated kick runs");
    let macs = mu as u64 * ku as u64 * nu as u64;
    assert!(
        run.completed,
        "{group_name}: the kick did not complete: {run:?}"
    );
    assert_eq!(run.macs, macs, "{group_name}: simulated MAC count");
    let c_bytes = sim
        .memory()
        .read_vec(C_ADDR, full.c_bytes())
        .expect("C is mapped");
    let sim_c = full.unpack_c_int(&c_bytes).expect("C unpacks");
    let mut cpu_c = vec![0i32; mu * nu];
    cpu_int8_gemm(&a, &b, &mut cpu_c, ku, nu);
    if let Some(i) = (0..mu * nu).find(|&i| sim_c[i] != cpu_c[i] as i64) {
        panic!(
            "{group_name}: simulator and CPU baseline differ at C[{}][{}]: sim {} != cpu {}",
            i / nu,
            i % nu,
            sim_c[i],
            cpu_c[i]
        );
    }

    let mut group = c.benchmark_group(group_name);
    group
        .throughput(Throughput::Elements(macs))
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(measurement);
    group.bench_function("sim_kick", |bch| {
        bch.iter(|| {
            // Each kick gets the whole budget, as each job on the emulated kernel does:
            // the budget counts a simulator's lifetime, and criterion kicks many times.
            sim.set_work_budget(DEFAULT_WORK_BUDGET);
            black_box(sim.kick(black_box(&kick)).expect("simulated kick runs"))
        })
    });
    group.bench_function("cpu_int8_gemm", |bch| {
        bch.iter(|| {
            cpu_int8_gemm(black_box(&a), black_box(&b), &mut cpu_c, ku, nu);
            black_box(&cpu_c);
        })
    });
    group.finish();
}

/// `sim_int8_matmul_128x4096x4096`: two chained 64-row tasks.
fn matmul_128x4096x4096(c: &mut Criterion) {
    bench_shape(
        c,
        "sim_int8_matmul_128x4096x4096",
        (128, 4096, 4096),
        Duration::from_secs(15),
    );
}

/// `sim_int8_matvec_1x4096x4096`: one task.
fn matvec_1x4096x4096(c: &mut Criterion) {
    bench_shape(
        c,
        "sim_int8_matvec_1x4096x4096",
        (1, 4096, 4096),
        Duration::from_secs(5),
    );
}

criterion_group!(benches, matmul_128x4096x4096, matvec_1x4096x4096);
criterion_main!(benches);
