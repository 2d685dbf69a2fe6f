//! Tasks against published programs: the reference worked example, the dequantisation
//! and split-K add tasks of a public program, and the vendor's dummy PPU task.

use super::*;

#[test]
fn the_reference_worked_example_decodes_into_the_model() {
    use crate::kernels::worked_example;
    let body = worked_example::body().unwrap();
    let mut regs = Snapshot::from_writes(body.entries().iter().map(|e| (e.offset(), e.value())));
    let t = Task::decode(&mut regs, crate::regcmd::BlockMask::CONV).unwrap();
    let cna = t.cna.unwrap();
    assert_eq!(cna.precision, Precision::Int8);
    assert_eq!(
        (cna.feature.width, cna.feature.height, cna.feature.channels),
        (1, 4, 32)
    );
    assert_eq!(cna.weights.kernels, 32);
    let dpu = t.dpu.unwrap();
    assert_eq!(dpu.out.precision, Precision::Int32);
    assert_eq!(dpu.cube, (1, 4, 32));
    assert!(dpu.ew.is_none() && dpu.bs.bypass && dpu.bn.bypass);
}

/// The dequantisation task decodes back into its model, and its list writes the register
/// values of the public program it follows (happyme531/rknpu2_matmul_open, commit
/// 601269cfb7f5aa2c0d7fa96314e87ffdef996744, `middle_body(gate = false)` in
/// `src/rk_npu_moe_regs.h`).
#[test]
fn the_dequant_task_round_trips_and_writes_the_published_values() {
    use crate::kernels::single::{dequant_task, dequant_task_model};
    let (rows, row, channels, scale) = (8u32, 3u32, 96u32, 0.0137f32);
    let (acc, coeffs, out) = (0x10_0000u32, 0x20_0000u32, 0x30_0000u32);
    let task = dequant_task_model(
        rows,
        row,
        channels,
        scale,
        DmaAddr::Fixed(acc),
        DmaAddr::Fixed(coeffs),
        DmaAddr::Fixed(out),
    )
    .unwrap();
    assert_eq!(round_trip(&task).unwrap(), task);
    assert_eq!(task.enable(), crate::regcmd::BlockMask::ELEMENTWISE);
    let body = dequant_task(
        rows,
        row,
        channels,
        scale,
        DmaAddr::Fixed(acc),
        DmaAddr::Fixed(coeffs),
        DmaAddr::Fixed(out),
    )
    .unwrap();
    let writes: std::collections::BTreeMap<u16, u32> = body
        .entries()
        .iter()
        .map(|e| (e.offset(), e.value()))
        .collect();
    let c = channels - 1;
    let half = u32::from(crate::float::f32_to_f16(scale));
    let published: &[(u16, u32)] = &[
        (0x4004, 14),
        (0x400c, 0x1e5),
        (0x4010, 0xB400_0005),
        (0x4014, 0),
        (0x4020, out),
        (0x4024, 16),
        (0x4030, 0),
        (0x4034, 0),
        (0x4038, 0),
        (0x403c, (c << 16) | c),
        (0x4040, 0x42),
        (0x4044, 0),
        (0x4048, half << 16),
        (0x404c, 0),
        (0x4050, 2),
        (0x4054, 0),
        (0x4058, c),
        (0x405c, 0),
        (0x4060, 0x53),
        (0x4064, 0),
        (0x4068, 0),
        (0x406c, 0),
        (0x4070, 0x10C0_03C4),
        (0x4074, 0),
        (0x4078, 1),
        (0x407c, 0),
        (0x4080, 0),
        (0x4084, 1),
        (0x4088, 0),
        (0x40c0, 16),
        (0x40c4, 0),
        (0x5004, 14),
        (0x500c, 0),
        (0x5010, 0),
        (0x5014, c),
        (0x5018, acc + row * 16),
        (0x501c, 0),
        (0x5020, 0),
        (0x5028, 0),
        (0x502c, 0),
        (0x5034, 0x4000_000C),
        (0x5038, coeffs),
        (0x5040, 16),
        (0x5044, (5 << 15) | (15 << 11) | (5 << 5) | 1),
        (0x5048, 0),
        (0x504c, (rows - 1) * 16),
        (0x5064, 0),
        (0x5068, 0x0101_0101),
        (0x506c, 0),
    ];
    for &(offset, value) in published {
        assert_eq!(writes.get(&offset), Some(&value), "register {offset:#06x}");
    }
    for offset in (0x4090..0x40b0).step_by(4) {
        assert_eq!(writes.get(&offset), Some(&0), "EW_OP_VALUE {offset:#06x}");
    }
    // Every other register the list writes (the LUT block the program leaves alone) is 0.
    let named: std::collections::BTreeSet<u16> = published
        .iter()
        .map(|&(o, _)| o)
        .chain((0x4090..0x40b0).step_by(4))
        .collect();
    for (offset, value) in &writes {
        if !named.contains(offset) {
            assert_eq!(*value, 0, "register {offset:#06x}");
        }
    }
}

/// The fp32-output split-K add differs from the int32 one in DATA_FORMAT only, which is
/// (5 << 29) | (4 << 26) | 4 as in `add_body(.., fp32 = true)` of
/// happyme531/rknpu2_matmul_open `src/rk_npu_i8_dpu_chain.cpp`.
#[test]
fn the_fp32_add_differs_from_the_int32_add_in_data_format_only() {
    use crate::kernels::single::{add_task, add_to_fp32_task, add_to_fp32_task_model};
    let f = |a| DmaAddr::Fixed(a);
    let task = add_to_fp32_task_model(8, 64, f(0x1000), f(0x2000), f(0x3000)).unwrap();
    assert_eq!(round_trip(&task).unwrap(), task);
    let int = add_task(8, 64, f(0x1000), f(0x2000), f(0x3000)).unwrap();
    let fp = add_to_fp32_task(8, 64, f(0x1000), f(0x2000), f(0x3000)).unwrap();
    let diff: Vec<(u16, u32, u32)> = int
        .entries()
        .iter()
        .zip(fp.entries())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| (a.offset(), a.value(), b.value()))
        .collect();
    assert_eq!(
        diff,
        [(dpu::DataFormat::OFFSET, 0x9000_0004, 0xB000_0004)],
        "{diff:x?}"
    );
}

/// The vendor's dummy PPU task as `allbilly/rk3588` recorded it in the RKNN add model
/// (every multi-core program ends with one): a 1x1 int8 max over 1x1x32, all strides one
/// atom. It decodes into the model and emits back to the same register values.
#[test]
fn the_vendor_dummy_ppu_task_decodes_and_emits_back() {
    let writes: [(u16, u32); 26] = [
        (0x6004, 0xE),
        (0x7004, 0xE),
        (0x600C, 0),
        (0x6010, 0),
        (0x6014, 0x1F),
        (0x6018, 0),
        (0x601C, 0),
        (0x6020, 0x1F),
        (0x6024, 0x11),
        (0x6034, 0),
        (0x6038, 0),
        (0x603C, 0),
        (0x6040, 0),
        (0x6044, 0),
        (0x6048, 0),
        (0x6070, 0xFFD7_0080),
        (0x607C, 0x10),
        (0x6084, 0x10),
        (0x60DC, 3),
        (0x700C, 0),
        (0x7010, 0),
        (0x7014, 0x1F),
        (0x701C, 0xFFD7_0480),
        (0x7024, 0x10),
        (0x7028, 0x10),
        (0x7030, 1),
    ];
    let mut regs = Snapshot::from_writes(writes);
    let t = Task::decode(&mut regs, crate::regcmd::BlockMask(0x60)).unwrap();
    let (p, r) = (t.ppu.unwrap(), t.ppu_rdma.unwrap());
    assert_eq!((p.cube_in, p.cube_out), ((1, 1, 32), (1, 1, 32)));
    assert_eq!(
        (p.method, p.from_memory, p.precision),
        (PoolMethod::Max, true, Precision::Int8)
    );
    assert_eq!(
        (p.kernel, p.stride, p.surf_stride, p.index_add),
        ((1, 1), (1, 1), 1, 1)
    );
    assert_eq!((r.size_code, r.line_stride, r.surf_stride), (1, 1, 1));
    assert_eq!(
        (p.out, r.src),
        (DmaAddr::Fixed(0xFFD7_0080), DmaAddr::Fixed(0xFFD7_0480))
    );
    let mut b = TaskBuilder::new();
    t.emit(&mut b).unwrap();
    let emitted: Vec<(u16, u32)> = b
        .entries()
        .iter()
        .map(|e| (e.offset(), e.value()))
        .collect();
    assert_eq!(emitted, writes);
    // Two 16-byte surfaces read and written.
    let d = t.dma();
    assert_eq!(
        (d[0].start, d[0].len, d[0].access),
        (0xFFD7_0480, 32, Access::Read)
    );
    assert_eq!(
        (d[1].start, d[1].len, d[1].access),
        (0xFFD7_0080, 32, Access::Write)
    );
}
