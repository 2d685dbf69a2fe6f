//! An int8 matrix product on the NPU through the backend-facing matmul API: a weight
//! bank packed once from an N×K matrix (the `[out][in]` layout of a model's weights),
//! then `C = A · Wᵀ` for several row counts M against that one bank, each result checked
//! exactly against a plain CPU product.
//!
//! K and N are deliberately not multiples of 32: the library pads them to the hardware's
//! weight atoms and hands back exactly M×N results.
//!
//! It opens a board if there is one and the emulated kernel (the simulator) otherwise,
//! prints the plan and time of each product, exits non-zero at the first wrong value and
//! prints `OK` last. Run it with:
//!
//! ```text
//! cargo run --release --example matmul
//! ```

use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::seeded::Rng;
use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// Input features: columns of A, columns of the weight matrix.
const K: u32 = 1000;
/// Output features: rows of the weight matrix, columns of C.
const N: u32 = 300;
/// The row counts run against the one bank: a single token, an odd count, a tile-sized
/// batch.
const ROWS: [u32; 3] = [1, 17, 128];

/// The example's result type.
type Res<T = ()> = Result<T, Box<dyn Error>>;

/// `len` seeded int8 values covering the whole range −128..=127.
fn int8_values(seed: u64, len: usize) -> Vec<i8> {
    let mut rng = Rng::from_seed(seed);
    // `int` returns a value in −128..=127, which always fits an i8.
    (0..len).map(|_| rng.int(-128, 127) as i8).collect()
}

/// The CPU reference `C[m][n] = Σₖ A[m][k] · W[n][k]`, in i64 so that it cannot
/// overflow whatever the NPU does.
fn reference(a: &[i8], w: &[i8], m: usize, k: usize, n: usize) -> Vec<i64> {
    let mut c = Vec::with_capacity(m * n);
    for row in a.chunks_exact(k).take(m) {
        for col in w.chunks_exact(k).take(n) {
            c.push(
                row.iter()
                    .zip(col)
                    .map(|(&x, &y)| i64::from(x) * i64::from(y))
                    .sum(),
            );
        }
    }
    c
}

fn run() -> Res {
    // A board when the kernel driver is there, the emulated kernel otherwise
    // (`RKNPU_DEVICE` chooses explicitly; docs/device.md).
    let dev = Device::open_or_emulated()?;
    println!("device: {}", dev.info());

    // The weights, N rows of K values, packed once into device memory. An `Arc` lets
    // any number of `Matmul`s (one per M, or per thread) share the bank.
    let w = int8_values(1, (N * K) as usize);
    let bank = Arc::new(WeightBank::new(&dev, (N, K), Weights::I8(&w))?);
    println!("bank: {N}x{K} int8, {} bytes packed", bank.layout().bytes);

    for (i, &m) in ROWS.iter().enumerate() {
        // A `Matmul` plans the product for M rows once (tiles, K waves, cores) and owns
        // the activation and result buffers; it can be run again with new activations.
        let mut mm = Matmul::new(&bank, m)?;
        println!("M={m}: plan {}", mm.plan());

        let a = int8_values(100 + i as u64, (m * K) as usize);
        let start = Instant::now();
        // Row-major M×K int8 in, row-major M×N int32 out: exact integer results.
        let c = mm.run::<i8, i32>(&a)?;
        let time = start.elapsed();

        let want = reference(&a, &w, m as usize, K as usize, N as usize);
        if c.len() != want.len() {
            return Err(format!("M={m}: {} results, expected {}", c.len(), want.len()).into());
        }
        if let Some(at) = c.iter().zip(&want).position(|(&g, &e)| i64::from(g) != e) {
            let (row, col) = (at / N as usize, at % N as usize);
            return Err(format!(
                "M={m}: C[{row}][{col}] is {} on the NPU, {} on the CPU",
                c[at], want[at]
            )
            .into());
        }
        println!(
            "M={m}: {} results equal the CPU's, {:.1} ms",
            c.len(),
            time.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
