//! Tests of `pool.rs`.

use super::*;

fn fp16(w: u32, h: u32, c: u32) -> Cube {
    Cube::new(w, h, c, Precision::Fp16).unwrap()
}

#[test]
fn factorisations_keep_intermediates_at_least_4() {
    assert_eq!(factor(64, 2, 1), Some(vec![16, 4]));
    assert_eq!(factor(40, 2, 2), Some(vec![10, 4]));
    assert_eq!(factor(1024, 3, 2), Some(vec![16, 16, 4]));
    assert_eq!(factor(17, 2, 1), None);
    assert_eq!(factor(1, 2, 1), None);
    assert_eq!(factor(12, 1, 2), Some(vec![12]));
}

#[test]
fn a_global_pool_of_a_large_plane_is_a_chain_of_passes() {
    let p = Pool2d::global(fp16(64, 40, 8), PoolKind::Avg);
    let t = p
        .tasks_at(
            DmaAddr::Fixed(0x1000),
            DmaAddr::Fixed(0x8000),
            DmaAddr::Fixed(0x20000),
        )
        .unwrap();
    assert_eq!(t.len(), 2);
    let (a, b) = (t[0].ppu.unwrap(), t[1].ppu.unwrap());
    assert_eq!((a.kernel, a.cube_out), ((16, 10), (4, 4, 8)));
    assert_eq!(
        (b.kernel, b.cube_in, b.cube_out),
        ((4, 4), (4, 4, 8), (1, 1, 8))
    );
    assert_eq!(t[1].ppu_rdma.unwrap().src, DmaAddr::Fixed(0x20000));
    assert_eq!(b.out, DmaAddr::Fixed(0x8000));
    assert_eq!(p.scratch_bytes().unwrap(), 4 * 4 * 16);
    assert_eq!(p.output().unwrap().width, 1);
}

#[test]
fn tall_outputs_split_by_rows_as_windows_of_the_whole_tensors() {
    // 1024 wide: 7 output rows per task; 3x3 stride 1 pad 1 keeps 20 rows.
    let p = Pool2d::new(fp16(1024, 20, 8), PoolKind::Max, 3)
        .with_stride(1, 1)
        .with_pad(1);
    let t = p
        .tasks_at(
            DmaAddr::Fixed(0),
            DmaAddr::Fixed(0x100000),
            DmaAddr::Fixed(0),
        )
        .unwrap();
    assert_eq!(t.len(), 3);
    let rows: Vec<_> = t.iter().map(|t| t.ppu.unwrap().cube_out.1).collect();
    assert_eq!(rows, vec![7, 7, 6]);
    let second = (t[1].ppu.unwrap(), t[1].ppu_rdma.unwrap());
    // Output rows 7..14 read input rows 6..=14, no vertical padding.
    assert_eq!(second.0.padding, [1, 0, 1, 0]);
    assert_eq!(second.1.cube_in.1, 9);
    assert_eq!(second.1.src, DmaAddr::Fixed(6 * 1024 * 16));
    assert_eq!(second.1.surf_stride, 1024 * 20);
    assert_eq!(second.0.surf_stride, 1024 * 20);
    assert_eq!(second.0.out, DmaAddr::Fixed(0x100000 + 7 * 1024 * 16));
    let last = t[2].ppu.unwrap();
    assert_eq!(last.padding, [1, 0, 1, 1]);
}

#[test]
fn what_is_refused_is_named() {
    let c = fp16(8, 8, 8);
    let why = |p: Pool2d| match p.program() {
        Err(Error::Unsupported { why, .. }) => why,
        other => panic!("{other:?}"),
    };
    assert!(why(Pool2d::new(c, PoolKind::Max, 17)).contains("at most 16"));
    assert!(why(Pool2d::new(c, PoolKind::Avg, 1)).contains("65536"));
    assert!(why(Pool2d::new(c, PoolKind::Max, 3).with_pad(3)).contains("padding"));
    assert!(why(Pool2d::new(c, PoolKind::Max, 2).with_pad(8)).contains("padding"));
    let i8c = c.with_precision(Precision::Int8).unwrap();
    assert!(why(Pool2d::new(i8c, PoolKind::Avg, 2)).contains("int8 average"));
    let i16c = c.with_precision(Precision::Int16).unwrap();
    assert!(why(Pool2d::new(i16c, PoolKind::Max, 2)).contains("int16"));
    assert!(why(Pool2d::global(fp16(17, 17, 8), PoolKind::Max)).contains("chain"));
    assert!(why(Pool2d::global(fp16(1, 64, 8), PoolKind::Max)).contains("chain"));
}

#[test]
fn the_reference_matches_hand_computed_values() {
    // 3x3 single channel 1..9; 2x2 stride 1.
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let c = fp16(3, 3, 1);
    let max = Pool2d::new(c, PoolKind::Max, 2).with_stride(1, 1);
    assert_eq!(reference(&max, &x).unwrap(), vec![5.0, 6.0, 8.0, 9.0]);
    let min = Pool2d {
        kind: PoolKind::Min,
        ..max
    };
    assert_eq!(reference(&min, &x).unwrap(), vec![1.0, 2.0, 4.0, 5.0]);
    let avg = Pool2d {
        kind: PoolKind::Avg,
        ..max
    };
    assert_eq!(reference(&avg, &x).unwrap(), vec![3.0, 4.0, 6.0, 7.0]);
    // Padding 1, 3x3 stride 3: the corner window sees 1, 2, 4, 5 and five pads.
    let padded = Pool2d::new(c, PoolKind::Avg, 3).with_pad(1);
    assert_eq!(reference(&padded, &x).unwrap(), vec![12.0 / 9.0]);
    let padded_max = Pool2d {
        kind: PoolKind::Max,
        ..padded
    };
    let neg: Vec<f32> = x.iter().map(|v| -v).collect();
    assert_eq!(reference(&padded_max, &neg).unwrap(), vec![-1.0]);
}
