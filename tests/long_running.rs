//! A long-running client on one emulated device (issue 25, item 4): a hundred
//! consecutive 128×4096×4096 int8 products through one `Matmul`, each checked. The
//! simulator's work budget bounds one job, not the device's lifetime, so the hundredth
//! call runs as the first did; the program is verified once, when the matmul binds it.

mod common;

use common::Rng;
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::device::Device;
use std::sync::Arc;

const M: usize = 128;
const K: usize = 4096;
const N: usize = 4096;
const CALLS: usize = 100;
/// Result entries checked per call, at random places, beside the whole of one row.
const SAMPLES: usize = 256;

fn dot(a: &[i8], w: &[i8]) -> i32 {
    a.iter()
        .zip(w)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

#[test]
fn a_hundred_large_calls_on_one_emulated_device_succeed() {
    let dev = Device::open_spec("emu").unwrap();
    let mut rng = Rng(25);
    // W as N rows of K (ggml's src0 of mul_mat).
    let w: Vec<i8> = (0..N * K).map(|_| rng.int(-128, 127) as i8).collect();
    let bank = Arc::new(WeightBank::new(&dev, (N as u32, K as u32), Weights::I8(&w)).unwrap());
    let mut mm = Matmul::new(&bank, M as u32).unwrap();
    let mut a = vec![0i8; M * K];
    let mut c = vec![0i32; M * N];
    for call in 0..CALLS {
        a.iter_mut().for_each(|x| *x = rng.int(-128, 127) as i8);
        mm.run_into(&a, &mut c)
            .unwrap_or_else(|e| panic!("call {call}: {e}"));
        let row = call % M;
        let random = |rng: &mut Rng, n: usize| rng.int(0, n as i32 - 1) as usize;
        let mut places: Vec<(usize, usize)> = (0..N).map(|j| (row, j)).collect();
        for _ in 0..SAMPLES {
            places.push((random(&mut rng, M), random(&mut rng, N)));
        }
        for (i, j) in places {
            let expected = dot(&a[i * K..(i + 1) * K], &w[j * K..(j + 1) * K]);
            assert_eq!(c[i * N + j], expected, "call {call}, C[{i}][{j}]");
        }
    }
}
