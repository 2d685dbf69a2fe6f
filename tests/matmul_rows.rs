//! One `Matmul` for every row count up to its own (`Matmul::mul_mat` of fewer rows), and batches
//! that give their members back (`MatmulBatch::into_members`).

mod common;

use common::Rng;
use rknpu_driver::Error;
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, MatmulBatch, WeightBank};
use rknpu_driver::device::Device;
use std::sync::Arc;

const N: u32 = 48;
const K: u32 = 96;

fn x(rng: &mut Rng, rows: u32) -> Vec<f32> {
    (0..rows * K)
        .map(|_| rng.int(-100, 100) as f32 / 16.0)
        .collect()
}

#[test]
fn fewer_rows_give_what_a_matmul_of_that_size_gives() {
    let dev = Device::open_spec("emu").unwrap();
    let mut rng = Rng(0x5eed);
    let w: Vec<i8> = (0..N * K).map(|_| rng.int(-127, 127) as i8).collect();
    let bank = Arc::new(WeightBank::new(&dev, (N, K), Weights::I8(&w)).unwrap());
    let mut big = Matmul::new(&bank, 24).unwrap();
    for rows in [1, 2, 7, 23, 24] {
        let x = x(&mut rng, rows);
        let mut got = vec![0f32; (rows * N) as usize];
        big.mul_mat(&x, &mut got).unwrap();
        let mut want = vec![0f32; (rows * N) as usize];
        Matmul::new(&bank, rows)
            .unwrap()
            .mul_mat(&x, &mut want)
            .unwrap();
        assert_eq!(got, want, "{rows} rows");
    }
}

#[test]
fn row_counts_and_lengths_outside_the_matmul_are_refused() {
    let dev = Device::open_spec("emu").unwrap();
    let bank =
        Arc::new(WeightBank::new(&dev, (N, K), Weights::I8(&vec![1; (N * K) as usize])).unwrap());
    let mut mm = Matmul::new(&bank, 4).unwrap();
    let mut y = vec![0f32; (5 * N) as usize];
    for rows in [0, 5] {
        let x = vec![1f32; (rows * K) as usize];
        let r = mm.mul_mat(&x, &mut y[..(rows * N) as usize]);
        assert!(
            matches!(r, Err(Error::ShapeMismatch { .. })),
            "{rows}: {r:?}"
        );
    }
    let r = mm.mul_mat(&[1.0; 10], &mut y[..(2 * N) as usize]);
    assert!(r.is_err(), "a short x");
    let r = mm.mul_mat(&vec![1.0; (2 * K) as usize], &mut y[..3]);
    assert!(r.is_err(), "a short y");
}

#[test]
fn a_batch_gives_its_members_back_to_run_alone() {
    let dev = Device::open_spec("emu").unwrap();
    let banks: Vec<_> = [1i8, 2]
        .iter()
        .map(|&v| {
            Arc::new(
                WeightBank::new(&dev, (N, K), Weights::I8(&vec![v; (N * K) as usize])).unwrap(),
            )
        })
        .collect();
    let members = banks.iter().map(|b| Matmul::new(b, 2).unwrap()).collect();
    let mut batch = MatmulBatch::new(members).unwrap();
    let x = vec![0.5f32; (2 * K) as usize];
    let (mut y0, mut y1) = (vec![0f32; (2 * N) as usize], vec![0f32; (2 * N) as usize]);
    batch.mul_mat(&[&x, &x], &mut [&mut y0, &mut y1]).unwrap();
    let mut members = batch.into_members();
    assert_eq!(members.len(), 2);
    for (j, mm) in members.iter_mut().enumerate() {
        let mut y = vec![0f32; (2 * N) as usize];
        mm.mul_mat(&x, &mut y).unwrap();
        assert_eq!(&y, if j == 0 { &y0 } else { &y1 }, "member {j}");
        let want = 0.5 * K as f32 * (j + 1) as f32;
        assert!(
            y.iter().all(|&v| (v - want).abs() < 0.5),
            "member {j}: {}",
            y[0]
        );
    }
}
