//! The task model on generated tasks: each generator's tasks decode back to themselves,
//! touch the DMA ranges their layouts say, write the values of the public programs they
//! follow, and carry a LUT upload in their body only. (The task layer may not import the
//! kernels, so these tests, which build their tasks with one, are integration tests; the
//! model's own round trips are unit tests in `src/task/tests.rs`, inert fields of generated
//! tasks are in `tests/task_inert.rs`.)

mod common;

use common::lowered::{fp16_add, matmul_task_at_0x1000, round_trip, snapshot, tasks_of};
use proptest::prelude::*;
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::kernels::ops::conv::Conv2d;
use rknpu_driver::kernels::ops::eltwise::Operand;
use rknpu_driver::kernels::single::{Dtype, Layout, OutType, PostOps, SingleMatmul};
use rknpu_driver::regcmd::{BlockMask, DmaAddr};
use rknpu_driver::regs::{Block, Register, cna, dpu};
use rknpu_driver::task::{
    Access, LUT_ENTRIES, Lut, LutRange, LutSlope, LutTables, OperandRead, Precision, Snapshot, Task,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_matmul_tasks_round_trip(
        m in 1u32..=64, k in 1u32..=512, n in 1u32..=256,
        dtype in prop::sample::select(vec![Dtype::Int8, Dtype::Int4, Dtype::Int16, Dtype::Fp16, Dtype::Bf16]),
        native in any::<bool>(), add in any::<bool>(),
    ) {
        let mut mm = SingleMatmul::new(m, k, n, dtype);
        if native {
            mm.a_layout = Layout::Native;
            mm.c_layout = Layout::Native;
        }
        mm.post = PostOps { add, ..PostOps::default() };
        let fixed = |a: u32| DmaAddr::Fixed(a);
        let t = mm.task_at(fixed(0x10_0000), fixed(0x20_0000), fixed(0x30_0000), fixed(0x40_0000)).unwrap();
        prop_assert_eq!(round_trip(&t), Ok(t));
    }
}

#[test]
fn a_field_the_model_does_not_represent_is_named() {
    let t = matmul_task_at_0x1000(&SingleMatmul::new(4, 64, 32, Dtype::Int8));
    let mut regs = snapshot(&t);
    // CNA.FC_CON0.fc_skip_en: zero skipping, which no decoder reads.
    let v = cna::FcCon0::FC_SKIP_EN.set(cna::FcCon0::new(), 1).unwrap();
    regs.set(cna::FcCon0::OFFSET, v.raw());
    let e = Task::decode(&mut regs, t.enable()).unwrap_err();
    assert_eq!(
        (e.register, e.field, e.value),
        (cna::FcCon0::NAME, cna::FcCon0::FC_SKIP_EN.name(), 1)
    );
    // A reserved bit of a written register.
    let mut regs = snapshot(&t);
    let reserved = !dpu::DataCubeWidth::INFO.known_mask();
    regs.set(
        dpu::DataCubeWidth::OFFSET,
        reserved & reserved.wrapping_neg(),
    );
    let e = Task::decode(&mut regs, t.enable()).unwrap_err();
    assert_eq!(
        (e.register, e.field),
        (dpu::DataCubeWidth::NAME, "reserved bits")
    );
}
#[test]
fn dma_ranges_cover_what_the_layouts_say() {
    // 4 x 64 int8, plain: A is 4 lines of 64 bytes, B 32 kernels x 64 bytes, C int32.
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let r = matmul_task_at_0x1000(&mm).dma();
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
    let e = matmul_task_at_0x1000(&mm)
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
    use rknpu_driver::kernels::single::dequant_task;
    let (rows, row, channels) = (8u32, 5u32, 256u32);
    let task = dequant_task(
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
    use rknpu_driver::kernels::ops::pool::{Pool2d, PoolKind};
    let c = Cube::new(6, 4, 16, Precision::Fp16).unwrap();
    let pool = Pool2d::new(c, PoolKind::Max, 2);
    assert_eq!(pool.scratch_bytes().unwrap(), 0, "one pass, no scratch");
    let b = Bindings::new()
        .bind(Role::Input, DmaAddr::Fixed(0x1000))
        .bind(Role::Output, DmaAddr::Fixed(0x9000));
    let t = pool.tasks(&b).unwrap().remove(0);
    let d = t.dma();
    let read = d.iter().find(|r| r.block == Block::PpuRdma).unwrap();
    assert_eq!((read.start, read.len), (0x1000, 2 * 6 * 4 * 16));
    let write = d.iter().find(|r| r.block == Block::Ppu).unwrap();
    assert_eq!(
        (write.start, write.len, write.access),
        (0x9000, 2 * 3 * 2 * 16, Access::Write)
    );
}

#[test]
fn kxk_conv_dma_ranges_cover_the_band_and_the_kernels() {
    // 40 × 40 × 160 fp16, 32 kernels of 3 × 3: two bands of 23 and 19 input rows
    // (rows 0..23 and 21..40), each task reading its rows of all 20 surfaces.
    let cv = Conv2d::new(Cube::new(40, 40, 160, Precision::Fp16).unwrap(), 32, (3, 3));
    let b = Bindings::new()
        .bind(Role::Input, DmaAddr::Fixed(0x10_0000))
        .bind(Role::Weights, DmaAddr::Fixed(0x80_0000))
        .bind(Role::Output, DmaAddr::Fixed(0x100_0000));
    let tasks = cv.tasks(&b).unwrap();
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
    use rknpu_driver::kernels::ops::contract::RequantOp;
    use rknpu_driver::kernels::ops::epilogue::{OutScale, Requant};
    let cube = Cube::new(4, 1, 32, Precision::Int32).unwrap();
    let rq = Requant::per_tensor(OutScale::new(1, 0, 0))
        .with_bias()
        .with_channel_multipliers(3)
        .unwrap();
    let op = RequantOp::new(rq, cube, &[0; 32], &[1; 32]).unwrap();
    let t = tasks_of(&op, Role::Params).remove(0);
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
    let e = fp16_add(3, 2, Operand::PerChannel);
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

#[test]
fn the_reference_worked_example_decodes_into_the_model() {
    use rknpu_driver::kernels::worked_example;
    let body = worked_example::body().unwrap();
    let mut regs = Snapshot::from_writes(body.entries().iter().map(|e| (e.offset(), e.value())));
    let t = Task::decode(&mut regs, BlockMask::CONV).unwrap();
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
    use rknpu_driver::kernels::single::dequant_task;
    let (rows, row, channels, scale) = (8u32, 3u32, 96u32, 0.0137f32);
    let (acc, coeffs, out) = (0x10_0000u32, 0x20_0000u32, 0x30_0000u32);
    let f = DmaAddr::Fixed;
    let task = dequant_task(rows, row, channels, scale, f(acc), f(coeffs), f(out)).unwrap();
    assert_eq!(round_trip(&task).unwrap(), task);
    assert_eq!(task.enable(), BlockMask::ELEMENTWISE);
    let body = dequant_task(rows, row, channels, scale, f(acc), f(coeffs), f(out))
        .unwrap()
        .body()
        .unwrap();
    let writes: std::collections::BTreeMap<u16, u32> = body
        .entries()
        .iter()
        .map(|e| (e.offset(), e.value()))
        .collect();
    let c = channels - 1;
    let half = u32::from(rknpu_driver::float::f32_to_f16(scale));
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
    use rknpu_driver::kernels::single::{add_task, add_to_fp32_task};
    let f = |a| DmaAddr::Fixed(a);
    let add = || add_task(8, 64, f(0x1000), f(0x2000), f(0x3000)).unwrap();
    let task = add_to_fp32_task(add());
    assert_eq!(round_trip(&task).unwrap(), task);
    let int = add().body().unwrap();
    let fp = add_to_fp32_task(add()).body().unwrap();
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

/// A generated sigmoid LUT task of 4 × 2 fp16 values with `lut` as its LUT.
fn lut_task(lut: Lut) -> Task {
    use rknpu_driver::kernels::ops::lut::{Gate, lut_task, recipe};
    let r = recipe(Gate::Sigmoid);
    let mut t = lut_task(
        &r,
        4,
        2,
        DmaAddr::Fixed(0x1000),
        DmaAddr::Fixed(0x2000),
        false,
    );
    t.dpu.as_mut().unwrap().ew.as_mut().unwrap().lut = Some(lut);
    t
}

/// Tables whose entries differ with `seed`.
fn tables(seed: i16) -> LutTables {
    let mut t = LutTables {
        le: [0; LUT_ENTRIES],
        lo: [0; LUT_ENTRIES],
    };
    for i in 0..LUT_ENTRIES {
        t.le[i] = (i as i16).wrapping_mul(37).wrapping_add(seed);
        t.lo[i] = (i as i16).wrapping_mul(-91).wrapping_sub(seed);
    }
    t
}

prop_compose! {
    /// One LUT range of any start, end, index select and slopes.
    fn lut_range()(
        (start, end) in any::<(i32, i32)>(),
        index_select in 0..=dpu::LutInfo::LUT_LE_INDEX_SELECT.max(),
        (uflow_scale, oflow_scale) in any::<(i16, i16)>(),
        uflow_shift in 0..=dpu::LutLeSlopeShift::LUT_LE_SLOPE_UFLOW_SHIFT.max(),
        oflow_shift in 0..=dpu::LutLeSlopeShift::LUT_LE_SLOPE_OFLOW_SHIFT.max(),
    ) -> LutRange {
        let slope = LutSlope { uflow_scale, uflow_shift, oflow_scale, oflow_shift };
        LutRange { start, end, index_select, slope }
    }
}

prop_compose! {
    /// Any LUT configuration without an upload.
    fn lut_block()(
        flags in prop::array::uniform6(any::<bool>()),
        lo_le_mux in 0..=dpu::LutCfg::LUT_LO_LE_MUX.max(),
        le in lut_range(),
        lo in lut_range(),
    ) -> Lut {
        let [road_sel, expand, uflow_lo, oflow_lo, hybrid_lo, cal_sel] = flags;
        Lut { road_sel, expand, lo_le_mux, uflow_lo, oflow_lo, hybrid_lo, cal_sel, le, lo, upload: None }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn a_lut_task_round_trips_without_its_upload(l in lut_block(), seed in any::<i16>()) {
        let plain = lut_task(l);
        prop_assert_eq!(&round_trip(&plain).unwrap(), &plain);
        // With an upload the register file is the same: the port is not state.
        let uploading = lut_task(l.with_upload(tables(seed)));
        prop_assert_eq!(&round_trip(&uploading).unwrap(), &plain);
    }
}

#[test]
fn the_upload_is_two_runs_of_513_port_writes_in_the_body() {
    let lut = Lut::hybrid(5).unwrap().with_upload(tables(3));
    let task = lut_task(lut);
    let body = task.body().unwrap();
    let e = body.entries();
    let cfg = dpu::LutAccessCfg::OFFSET;
    let data = dpu::LutAccessData::OFFSET;
    let starts: Vec<usize> = e
        .iter()
        .enumerate()
        .filter(|(_, x)| x.offset() == cfg)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(starts.len(), 2);
    assert_eq!(e[starts[0]].value(), 0x0002_0000);
    assert_eq!(e[starts[1]].value(), 0x0003_0000);
    assert_eq!(starts[1] - starts[0], 514);
    let t = tables(3);
    for i in 0..LUT_ENTRIES {
        assert_eq!(e[starts[0] + 1 + i].offset(), data);
        assert_eq!(e[starts[0] + 1 + i].value(), u32::from(t.le[i] as u16));
        assert_eq!(e[starts[1] + 1 + i].value(), u32::from(t.lo[i] as u16));
    }
    // Without an upload the port gets its two zero words, as in every DPU body.
    let plain = lut_task(lut.without_upload()).body().unwrap();
    let port: Vec<u32> = plain
        .entries()
        .iter()
        .filter(|x| x.offset() == cfg || x.offset() == data)
        .map(|x| x.value())
        .collect();
    assert_eq!(port, vec![0, 0]);
    // LUT_CFG of the hybrid configuration is the 0x68 of every program that ran.
    let lut_cfg = plain
        .entries()
        .iter()
        .find(|x| x.offset() == dpu::LutCfg::OFFSET)
        .unwrap()
        .value();
    assert_eq!(lut_cfg, 0x68);
}
