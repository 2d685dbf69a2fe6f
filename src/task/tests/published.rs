//! Tasks against published programs: the vendor's dummy PPU task. (The generated tasks
//! held to published programs are in `tests/task_lowered.rs`.)

use super::*;

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
