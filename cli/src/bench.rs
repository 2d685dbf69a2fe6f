//! `rknpu bench pack`: packing throughput against memcpy of the same bytes.

use crate::Failure;
use rknpu_driver::seeded::Rng;

/// The benchmarks of `rknpu bench`.
#[derive(clap::Subcommand)]
pub(crate) enum BenchCommand {
    /// Measure packing throughput against memcpy of the same bytes.
    ///
    /// Measured in the same run: int8 weight packing from K x N and from N x K, int4 weight packing (4096x4096),
    /// int8 activation packing (128x4096), int32 output unpacking (128x4096).
    Pack,
}

/// Best time of `f` over runs filling about 0.3 s.
fn best_of(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    let start = std::time::Instant::now();
    let mut runs = 0;
    while runs < 3 || (start.elapsed().as_secs_f64() < 0.3 && runs < 1000) {
        let t = std::time::Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    best
}

/// Measures each packer and prints its throughput beside memcpy's.
pub(crate) fn run(command: BenchCommand) -> Result<(), Failure> {
    use rknpu_driver::kernels::matmul::{MatmulSpec, Plan, pack};
    use rknpu_driver::kernels::single::Dtype;
    use std::hint::black_box;
    let BenchCommand::Pack = command;
    let fail = |e: rknpu_driver::Error| Failure(1, e.to_string());
    let mut rng = Rng::new(7);
    let line = |name: &str, bytes: usize, secs: f64| {
        let src = vec![1u8; bytes];
        let mut dst = vec![0u8; bytes];
        let copy = best_of(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&dst);
        });
        let (gbs, mem) = (bytes as f64 / secs / 1e9, bytes as f64 / copy / 1e9);
        outln!(
            "{name}: {gbs:.2} GB/s (memcpy {mem:.2} GB/s, ratio {:.2})",
            gbs / mem
        );
    };
    let p8 = Plan::new(MatmulSpec::new(128, 4096, 4096, Dtype::Int8)).map_err(fail)?;
    let b8: Vec<i8> = (0..4096 * 4096).map(|_| rng.int(-128, 127) as i8).collect();
    let mut bank = vec![0u8; p8.layout.bytes as usize];
    let t = best_of(|| {
        black_box(pack::weights_i8_kn_into(&p8.layout, black_box(&b8), &mut bank).ok());
    });
    line("int8 weight packing (K x N)", p8.layout.bytes as usize, t);
    let t = best_of(|| {
        black_box(pack::weights_i8_nk_into(&p8.layout, black_box(&b8), &mut bank).ok());
    });
    line("int8 weight packing (N x K)", p8.layout.bytes as usize, t);
    let p4 = Plan::new(MatmulSpec::new(128, 4096, 4096, Dtype::Int4)).map_err(fail)?;
    let b4: Vec<i8> = (0..4096 * 4096).map(|_| rng.int(-8, 7) as i8).collect();
    let mut bank4 = vec![0u8; p4.layout.bytes as usize];
    let t = best_of(|| {
        black_box(pack::weights_i4_kn_into(&p4.layout, black_box(&b4), &mut bank4).ok());
    });
    // The bytes read (one value a byte), twice those written: a copy of the written
    // bytes alone stays in the cache while the packer's input does not.
    line("int4 weight packing (K x N)", b4.len(), t);
    let a8: Vec<i8> = (0..128 * 4096).map(|_| rng.int(-128, 127) as i8).collect();
    let t = best_of(|| {
        black_box(pack::activations_i8(&p8, black_box(&a8)).ok());
    });
    line("int8 activation packing", p8.a_bytes as usize, t);
    let c: Vec<u8> = (0..p8.c_bytes).map(|i| i as u8).collect();
    let mut out = vec![0i32; 128 * 4096];
    let t = best_of(|| {
        black_box(pack::unpack_i32(&p8, black_box(&c), &mut out).ok());
    });
    line("int32 output unpacking", p8.c_bytes as usize, t);
    Ok(())
}
