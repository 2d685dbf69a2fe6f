//! The DMA ranges of a task: what each block reads and writes, per operation.

use super::*;

#[test]
fn dma_ranges_cover_what_the_layouts_say() {
    // 4 x 64 int8, plain: A is 4 lines of 64 bytes, B 32 kernels x 64 bytes, C int32.
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let t = mm
        .task_at(
            DmaAddr::Fixed(0x1000),
            DmaAddr::Fixed(0x2000),
            DmaAddr::Fixed(0x3000),
            DmaAddr::Fixed(0x4000),
        )
        .unwrap();
    let r = t.dma();
    let find = |what| r.iter().find(|d| d.what == what).copied().unwrap();
    let a = find("feature");
    assert_eq!(
        (a.start, a.len, a.access),
        (0x1000, mm.a_bytes() as u64, Access::Read)
    );
    let b = find("weights");
    assert_eq!((b.start, b.len), (0x2000, mm.b_bytes() as u64));
    let c = find("output");
    assert_eq!(
        (c.start, c.len, c.access),
        (0x3000, mm.c_bytes() as u64, Access::Write)
    );
    assert_eq!(r.len(), 3);

    // With the element-wise operand: E has C's shape with 32-bit elements.
    let mut mm = SingleMatmul::new(8, 32, 64, Dtype::Fp16);
    mm.out = OutType::Fp32;
    mm.post.add = true;
    let t = mm
        .task_at(
            DmaAddr::Fixed(0x1000),
            DmaAddr::Fixed(0x2000),
            DmaAddr::Fixed(0x3000),
            DmaAddr::Fixed(0x4000),
        )
        .unwrap();
    let e = t
        .dma()
        .into_iter()
        .find(|d| d.what == "EW operand")
        .unwrap();
    assert_eq!((e.start, e.len), (0x4000, mm.e_bytes() as u64));
}

/// The dequantisation task reads pixel `row` of the fp32 cube (one atom per surface,
/// `rows` atoms apart), `channels` 32-bit coefficients, and writes `channels` fp32 values.
#[test]
fn the_dequant_task_touches_its_row_its_coefficients_and_its_output() {
    use crate::kernels::single::dequant_task_model;
    let (rows, row, channels) = (8u32, 5u32, 256u32);
    let task = dequant_task_model(
        rows,
        row,
        channels,
        1.0,
        DmaAddr::Fixed(0x10_0000),
        DmaAddr::Fixed(0x20_0000),
        DmaAddr::Fixed(0x30_0000),
    )
    .unwrap();
    let ranges: Vec<(u64, u64, Access)> = task
        .dma()
        .iter()
        .map(|r| (r.start, r.len, r.access))
        .collect();
    let surfaces = u64::from(channels / 4);
    let mut want = vec![
        (0x30_0000, surfaces * 16, Access::Write),
        (
            0x10_0000 + u64::from(row) * 16,
            (surfaces - 1) * u64::from(rows) * 16 + 16,
            Access::Read,
        ),
        (0x20_0000, u64::from(channels) * 4, Access::Read),
    ];
    let mut got = ranges;
    got.sort_by_key(|r| r.0);
    want.sort_by_key(|r| r.0);
    assert_eq!(got, want);
}

/// A pooling task's DMA ranges follow its strides: the read spans every surface of the
/// input at the PPU_RDMA strides, the write every surface at DST_SURF_STRIDE.
#[test]
fn pooling_dma_ranges_follow_the_strides() {
    use crate::kernels::ops::Cube;
    use crate::kernels::ops::pool::{Pool2d, PoolKind};
    let c = Cube::new(6, 4, 16, Precision::Fp16).unwrap();
    let t = Pool2d::new(c, PoolKind::Max, 2)
        .tasks_at(
            DmaAddr::Fixed(0x1000),
            DmaAddr::Fixed(0x9000),
            DmaAddr::Fixed(0),
        )
        .unwrap()
        .remove(0);
    let d = t.dma();
    let read = d
        .iter()
        .find(|r| r.block == crate::regs::Block::PpuRdma)
        .unwrap();
    assert_eq!((read.start, read.len), (0x1000, 2 * 6 * 4 * 16));
    let write = d
        .iter()
        .find(|r| r.block == crate::regs::Block::Ppu)
        .unwrap();
    assert_eq!(
        (write.start, write.len, write.access),
        (0x9000, 2 * 3 * 2 * 16, Access::Write)
    );
}

#[test]
fn kxk_conv_dma_ranges_cover_the_band_and_the_kernels() {
    use crate::kernels::ops::Cube;
    use crate::kernels::ops::conv::Conv2d;
    // 40 × 40 × 160 fp16, 32 kernels of 3 × 3: two bands of 23 and 19 input rows
    // (rows 0..23 and 21..40), each task reading its rows of all 20 surfaces.
    let cv = Conv2d::new(Cube::new(40, 40, 160, Precision::Fp16).unwrap(), 32, (3, 3));
    let tasks = cv
        .tasks_at(
            DmaAddr::Fixed(0x10_0000),
            DmaAddr::Fixed(0x80_0000),
            DmaAddr::Fixed(0x100_0000),
        )
        .unwrap();
    assert_eq!(tasks.len(), 2);
    let surface = 40 * 40 * 16;
    let ranges = tasks[1].dma();
    let find = |what| ranges.iter().find(|d| d.what == what).copied().unwrap();
    let f = find("feature");
    assert_eq!(f.start, 0x10_0000 + 21 * 40 * 16);
    assert_eq!(f.len, 19 * surface + 18 * 40 * 16 + 40 * 16);
    let w = find("weights");
    // 32 kernels of 3 · 3 · 160 halves.
    assert_eq!((w.start, w.len), (0x80_0000, 32 * 3 * 3 * 160 * 2));
    let o = find("output");
    // Output rows 21..38 of a 38 × 38 plane, in four surfaces of 8 fp16 channels.
    let plane = 38 * 38 * 16;
    assert_eq!(o.start, 0x100_0000 + 21 * 38 * 16);
    assert_eq!(o.len, 3 * plane + 16 * 38 * 16 + 38 * 16);
    // Every field of both tasks survives a round trip.
    for t in &tasks {
        assert_eq!(round_trip(t).as_ref(), Ok(t));
    }
}

/// The requantisation epilogue's BRDMA and NRDMA reads and the per-channel EW operand:
/// their registers round-trip, and the DMA ranges cover one operand per channel.
#[test]
fn per_channel_operand_reads_round_trip_and_touch_one_value_per_channel() {
    use crate::kernels::ops::Cube;
    use crate::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
    use crate::kernels::ops::epilogue::{OutScale, Requant};
    let cube = Cube::new(4, 1, 32, Precision::Int32).unwrap();
    let rq = Requant::per_tensor(OutScale::new(1, 0, 0))
        .with_bias()
        .with_channel_multipliers(3)
        .unwrap();
    let t = rq
        .tasks_at(
            cube,
            DmaAddr::Fixed(0x10_0000),
            DmaAddr::Fixed(0x20_0000),
            DmaAddr::Fixed(0x30_0000),
        )
        .unwrap()
        .remove(0);
    assert_eq!(round_trip(&t), Ok(t.clone()));
    let r = t.dpu_rdma.unwrap();
    assert_eq!(
        r.brdma,
        Some(OperandRead {
            addr: DmaAddr::Fixed(0x20_0000),
            data_use: OperandRead::ALU
        })
    );
    assert_eq!(r.nrdma.unwrap().addr, DmaAddr::Fixed(0x20_0000 + 32 * 4));
    let ranges: Vec<(u64, u64)> = t
        .dma()
        .iter()
        .filter(|x| x.access == Access::Read)
        .map(|x| (x.start, x.len))
        .collect();
    assert!(ranges.contains(&(0x20_0000, 32 * 4)), "{ranges:x?}");
    assert!(
        ranges.contains(&(0x20_0000 + 32 * 4, 32 * 2)),
        "{ranges:x?}"
    );
    // A per-channel EW operand: one atom per surface, 16 bytes apart.
    let e = Eltwise::new(
        EltwiseOp::Add,
        Cube::new(3, 2, 16, Precision::Fp16).unwrap(),
        Operand::PerChannel,
    )
    .unwrap()
    .tasks_at(
        DmaAddr::Fixed(0x10_0000),
        DmaAddr::Fixed(0x20_0000),
        DmaAddr::Fixed(0x30_0000),
    )
    .unwrap()
    .remove(0);
    assert_eq!(round_trip(&e), Ok(e.clone()));
    assert!(e.dpu_rdma.unwrap().fp16_to_fp32);
    assert!(
        e.dma()
            .iter()
            .any(|x| x.what == "EW operand" && (x.start, x.len) == (0x20_0000, 32)),
        "{:x?}",
        e.dma()
    );
}
