//! Stand-alone pooling tasks: a working one runs and raises the PPU's interrupt bit, the
//! arithmetic matches hand-computed values, and each check is triggered by a task that
//! differs from a working one in the one field that matters.

use super::*;
use rknpu_driver::float::f32_to_f16;
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::kernels::ops::pool::{Pool2d, PoolKind};
use rknpu_driver::regs::Block;
use rknpu_driver::regs::{ppu, ppu_rdma};
use rknpu_driver::task::{Precision, Task};

const REGCMD_AT: u32 = 0x1000_0000;
const IN_AT: u32 = 0x2000_0000;
const OUT_AT: u32 = 0x3000_0000;
const MID_AT: u32 = 0x4000_0000;

fn fixed(a: u32) -> DmaAddr {
    DmaAddr::Fixed(a)
}

/// The tasks of `pool` at the fixed addresses above.
fn tasks(pool: &Pool2d) -> Vec<Task> {
    let b = Bindings::new()
        .bind(Role::Input, fixed(IN_AT))
        .bind(Role::Output, fixed(OUT_AT))
        .bind(Role::Scratch, fixed(MID_AT));
    pool.tasks(&b).unwrap()
}

/// Runs `tasks` as one chain with `input` at IN_AT and room for the output and
/// intermediates; the kick waits for the last task's interrupt pair.
fn run(tasks: &[Task], input: Vec<u8>) -> Result<(Simulator, CoreRun), SimError> {
    let mut p = ProgramBuilder::new(BufferId(0));
    for t in tasks {
        p.push_task(t.body().unwrap(), t.enable());
    }
    let program = p.build().unwrap();
    let words = program.bind(|_| Some(u64::from(REGCMD_AT))).unwrap();
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    m.map(REGCMD_AT, words_to_le_bytes(&words)).unwrap();
    m.map(IN_AT, input).unwrap();
    m.map_zeroed(OUT_AT, 1 << 16).unwrap();
    m.map_zeroed(MID_AT, 1 << 16).unwrap();
    let last = program.tasks().last().unwrap();
    let kick = Kick {
        task_number: Some(program.tasks().len() as u32),
        int_mask: last.int_mask,
        ..Kick::new(REGCMD_AT, program.tasks()[0].regcfg_amount)
    };
    let r = sim.kick(&kick)?;
    Ok((sim, r))
}

fn f16_cube(w: u32, h: u32, c: u32) -> Cube {
    Cube::new(w, h, c, Precision::Fp16).unwrap()
}

/// fp16 bytes of `hwc` in the native layout.
fn pack(c: &Cube, hwc: &[f32]) -> Vec<u8> {
    let v: Vec<half::f16> = hwc.iter().map(|&x| half::f16::from_f32(x)).collect();
    c.pack(&v).unwrap()
}

fn output(sim: &Simulator, c: &Cube) -> Vec<f32> {
    let bytes = sim.memory().read_vec(OUT_AT, c.bytes() as usize).unwrap();
    c.unpack::<half::f16>(&bytes)
        .unwrap()
        .into_iter()
        .map(f32::from)
        .collect()
}

#[test]
fn a_max_pool_runs_clean_and_raises_the_ppu_bit() {
    let c = f16_cube(4, 4, 8);
    let pool = Pool2d::new(c, PoolKind::Max, 2);
    // Pixel (x, y) channel k holds y·4 + x + k/8.
    let x: Vec<f32> = (0..16)
        .flat_map(|p| (0..8).map(move |k| p as f32 + k as f32 / 8.0))
        .collect();
    let (sim, r) = run(&tasks(&pool), pack(&c, &x)).unwrap();
    assert!(r.completed, "{r:?}");
    assert!(r.lints.is_empty(), "{:?}", r.lints);
    assert_eq!(r.raw_status, 0x400, "PPU group 0 only");
    assert_eq!(r.int_status, 0x400);
    let y = output(&sim, &pool.output().unwrap());
    // Each window's largest pixel is its bottom-right one: 5, 7, 13, 15.
    for (i, p) in [5.0, 7.0, 13.0, 15.0].iter().enumerate() {
        for k in 0..8 {
            assert_eq!(y[i * 8 + k], p + k as f32 / 8.0);
        }
    }
}

#[test]
fn the_average_multiplies_by_the_fp16_reciprocals() {
    // Nine ones: 9 · 21840 · 21840 · 2^-32 = 0.99951177..., which rounds to the fp16
    // just below 1 (0x3BFF): 0x7555 = 21840 is 65536 / 3 rounded to fp16.
    let c = f16_cube(3, 3, 8);
    let pool = Pool2d::new(c, PoolKind::Avg, 3);
    assert_eq!(tasks(&pool)[0].ppu.unwrap().recip, (0x7555, 0x7555));
    let (sim, r) = run(&tasks(&pool), pack(&c, &[1.0; 72])).unwrap();
    assert!(r.completed && r.lints.is_empty(), "{r:?}");
    let y = output(&sim, &pool.output().unwrap());
    assert!(y.iter().all(|&v| f32_to_f16(v) == 0x3BFF), "{y:?}");
    // 2x2 of 1, 2, 3, 4: 10 · 2^15 · 2^15 · 2^-32 = 2.5 exactly.
    let c = f16_cube(2, 2, 8);
    let x: Vec<f32> = (1..=4).flat_map(|v| [v as f32; 8]).collect();
    let pool = Pool2d::new(c, PoolKind::Avg, 2);
    let (sim, _) = run(&tasks(&pool), pack(&c, &x)).unwrap();
    assert_eq!(output(&sim, &pool.output().unwrap()), vec![2.5; 8]);
}

#[test]
fn padding_counts_in_the_average_and_never_wins_a_max() {
    // 3x3 ones, 3x3 windows stride 3 with padding 1: one window of 4 ones and 5 pads;
    // 4 · 21840² · 2^-32 = 0.44422721..., fp16 0.4443359375 (1820 · 2^-12).
    let c = f16_cube(3, 3, 8);
    let pool = Pool2d::new(c, PoolKind::Avg, 3).with_pad(1);
    let (sim, r) = run(&tasks(&pool), pack(&c, &[1.0; 72])).unwrap();
    assert!(r.lints.is_empty(), "{:?}", r.lints);
    assert_eq!(
        output(&sim, &pool.output().unwrap()),
        vec![1820.0 / 4096.0; 8]
    );
    // Negative values and a -inf pad: the max is the largest real value, not 0.
    let pool = Pool2d::new(c, PoolKind::Max, 3).with_pad(1);
    assert_eq!(tasks(&pool)[0].ppu.unwrap().pad_values, (0xFC00, 0));
    let x: Vec<f32> = (0..9).flat_map(|p| [-(p as f32) - 2.0; 8]).collect();
    let (sim, r) = run(&tasks(&pool), pack(&c, &x)).unwrap();
    assert!(r.lints.is_empty(), "{:?}", r.lints);
    assert_eq!(output(&sim, &pool.output().unwrap()), vec![-2.0; 8]);
}

#[test]
fn min_and_derived_pad_values_raise_the_unvalidated_lint() {
    let c = f16_cube(4, 4, 8);
    let pool = Pool2d::new(c, PoolKind::Min, 2)
        .with_stride(1, 1)
        .with_pad(1);
    let x: Vec<f32> = (0..128).map(|v| v as f32).collect();
    let (sim, r) = run(&tasks(&pool), pack(&c, &x)).unwrap();
    let kinds: Vec<_> = r.lints.iter().map(|l| l.kind).collect();
    assert_eq!(kinds, vec![LintKind::Unvalidated, LintKind::Unvalidated]);
    assert!(r.lints[0].message.contains("min"));
    assert!(r.lints[1].message.contains("0x7c00"));
    // The +inf pad never wins: the corner window's min is pixel (0, 0).
    assert_eq!(output(&sim, &pool.output().unwrap())[0], 0.0);
}

#[test]
fn the_vendor_int8_dummy_task_runs_as_a_copy_with_a_lint() {
    // 1x1x32 int8, 1x1 max, all strides one atom: the task ending multi-core vendor
    // programs.
    let c = Cube::new(1, 1, 32, Precision::Int8).unwrap();
    let t = tasks(&Pool2d::new(c, PoolKind::Max, 1));
    let (p, rd) = (t[0].ppu.unwrap(), t[0].ppu_rdma.unwrap());
    assert_eq!((p.surf_stride, rd.line_stride, rd.surf_stride), (1, 1, 1));
    let input: Vec<u8> = (0..32).map(|i| (i as i8 - 16) as u8).collect();
    let (sim, r) = run(&t, input.clone()).unwrap();
    assert!(r.completed);
    assert_eq!(lint_kinds(&r), vec![LintKind::Unvalidated]);
    assert!(r.lints[0].message.contains("dummy"));
    assert_eq!(sim.memory().read_vec(OUT_AT, 32).unwrap(), input);
}

#[test]
fn a_ppu_written_intermediate_below_4x4_is_refused_as_input() {
    let c = f16_cube(4, 4, 8);
    let first = &tasks(&Pool2d::new(c, PoolKind::Max, 2))[0];
    // A second pass reading the 2x2 output of the first.
    let mut second = tasks(&Pool2d::new(f16_cube(2, 2, 8), PoolKind::Max, 2))[0].clone();
    second.ppu_rdma.as_mut().unwrap().src = fixed(OUT_AT);
    second.ppu.as_mut().unwrap().out = fixed(OUT_AT + 0x1000);
    match run(&[first.clone(), second], vec![0; 256]) {
        Err(SimError::Unsupported {
            register, at, why, ..
        }) => {
            assert_eq!(register, ppu_rdma::RdmaSrcBaseAddr::NAME);
            assert_eq!(at.task, 1);
            assert!(why.contains("4x4"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

/// The error of running `t` (a changed copy of a working 4x4 max task).
fn error_of(change: impl FnOnce(&mut Task)) -> SimError {
    let c = f16_cube(4, 4, 8);
    let mut t = tasks(&Pool2d::new(c, PoolKind::Max, 2))[0].clone();
    change(&mut t);
    run(&[t], vec![0; 256]).unwrap_err()
}

fn named(e: &SimError) -> (&'static str, &'static str) {
    match e {
        SimError::Unsupported {
            register, field, ..
        }
        | SimError::Inconsistent {
            register, field, ..
        } => (register, field),
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_check_names_its_field() {
    use rknpu_driver::regs::Field;
    fn field<R: Register>(f: Field<R>) -> (&'static str, &'static str) {
        (R::NAME, f.name())
    }
    type Case = (Box<dyn FnOnce(&mut Task)>, (&'static str, &'static str));
    let cases: Vec<Case> = vec![
        (
            Box::new(|t| t.ppu.as_mut().unwrap().from_memory = false),
            field(ppu::OperationModeCfg::FLYING_MODE),
        ),
        (
            Box::new(|t| t.ppu_rdma = None),
            field(rknpu_driver::regs::pc::OperationEnable::OP_EN),
        ),
        (
            Box::new(|t| t.ppu.as_mut().unwrap().cube_out.0 = 3),
            field(ppu::DataCubeOutWidth::CUBE_OUT_WIDTH),
        ),
        (
            Box::new(|t| t.ppu_rdma.as_mut().unwrap().cube_in.1 = 3),
            field(ppu_rdma::RdmaCubeInHeight::CUBE_IN_HEIGHT),
        ),
        (
            Box::new(|t| t.ppu.as_mut().unwrap().recip = (0x7800, 0)),
            field(ppu::RecipKernelWidth::RECIP_KERNEL_WIDTH),
        ),
        (
            Box::new(|t| t.ppu.as_mut().unwrap().pad_values = (0xFC00, 0)),
            field(ppu::PaddingValue1Cfg::PAD_VALUE_0),
        ),
        (
            Box::new(|t| t.ppu.as_mut().unwrap().padding = [2, 0, 0, 0]),
            field(ppu::PoolingPaddingCfg::PAD_LEFT),
        ),
        (
            Box::new(|t| t.ppu.as_mut().unwrap().index_add = 5),
            field(ppu::DataFormat::INDEX_ADD),
        ),
        (
            Box::new(|t| t.ppu.as_mut().unwrap().burst_len = 15),
            field(ppu::MiscCtrl::BURST_LEN),
        ),
        (
            Box::new(|t| t.ppu_rdma.as_mut().unwrap().size_code = 1),
            field(ppu_rdma::RdmaDataFormat::IN_PRECISION),
        ),
        (
            Box::new(|t| t.ppu.as_mut().unwrap().precision = Precision::Int16),
            field(ppu::DataFormat::PROC_PRECISION),
        ),
        (
            Box::new(|t| {
                let p = t.ppu.as_mut().unwrap();
                (p.cube_in.2, p.cube_out.2) = (4, 4);
                t.ppu_rdma.as_mut().unwrap().cube_in.2 = 4;
            }),
            field(ppu::DataCubeInChannel::CUBE_IN_CHANNEL),
        ),
        (
            Box::new(|t| t.ppu_rdma.as_mut().unwrap().line_stride = 2),
            field(ppu_rdma::RdmaSrcLineStride::SRC_LINE_STRIDE),
        ),
    ];
    for (change, want) in cases {
        let e = error_of(change);
        assert_eq!(named(&e), want, "{e}");
    }
}

#[test]
fn int8_average_and_the_ppu_beside_other_blocks_are_refused() {
    let e = error_of(|t| {
        let p = t.ppu.as_mut().unwrap();
        p.precision = Precision::Int8;
        p.method = rknpu_driver::task::PoolMethod::Average;
        t.ppu_rdma.as_mut().unwrap().size_code = 1;
        // 4x4x16 int8 is one surface, as 4x4x8 fp16.
        p.cube_in.2 = 16;
        p.cube_out.2 = 16;
        t.ppu_rdma.as_mut().unwrap().cube_in.2 = 16;
    });
    assert_eq!(
        named(&e),
        (
            ppu::OperationModeCfg::NAME,
            ppu::OperationModeCfg::POOLING_METHOD.name()
        )
    );
    // A DPU task with the PPU started too: DPU to PPU flying is not modelled.
    let mut t = single::add_task(4, 8, fixed(IN_AT), fixed(IN_AT), fixed(OUT_AT)).unwrap();
    let c = f16_cube(4, 4, 8);
    let pool = &tasks(&Pool2d::new(c, PoolKind::Max, 2))[0];
    t.ppu = pool.ppu;
    t.ppu_rdma = pool.ppu_rdma;
    let e = run(&[t], vec![0; 256]).unwrap_err();
    assert_eq!(
        named(&e),
        (
            rknpu_driver::regs::pc::OperationEnable::NAME,
            rknpu_driver::regs::pc::OperationEnable::OP_EN.name()
        )
    );
}

#[test]
fn more_rows_than_8191_over_the_width_are_refused() {
    // 1024 wide: 7 rows per task; one task of 8 rows is refused before any memory read.
    let c = f16_cube(1024, 8, 8);
    let mut t = tasks(&Pool2d::new(c, PoolKind::Max, 1))[0].clone();
    assert_eq!(t.ppu.unwrap().cube_out.1, 7, "the generator splits");
    let p = t.ppu.as_mut().unwrap();
    (p.cube_in.1, p.cube_out.1) = (8, 8);
    t.ppu_rdma.as_mut().unwrap().cube_in.1 = 8;
    let e = run(&[t], vec![0; 16]).unwrap_err();
    assert_eq!(
        named(&e),
        (
            ppu::DataCubeOutHeight::NAME,
            ppu::DataCubeOutHeight::CUBE_OUT_HEIGHT.name()
        )
    );
}

#[test]
fn a_read_outside_memory_is_a_dma_error_of_ppu_rdma() {
    let c = f16_cube(4, 4, 8);
    let t = tasks(&Pool2d::new(c, PoolKind::Max, 2));
    // 255 of the 256 input bytes are mapped.
    match run(&t, vec![0; 255]) {
        Err(SimError::Dma {
            block,
            register,
            write,
            ..
        }) => {
            assert_eq!((block, write), (Block::PpuRdma, false));
            assert_eq!(register, ppu_rdma::RdmaSrcBaseAddr::NAME);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_half_of_the_ppu_pair_follows_the_ping_pong_group() {
    let c = f16_cube(4, 4, 8);
    let t = tasks(&Pool2d::new(c, PoolKind::Max, 2));
    let (_, r) = run(&[t[0].clone(), t[0].clone()], pack(&c, &[0.5; 128])).unwrap();
    assert_eq!(r.raw_status, 0xC00, "groups 0 and 1");
    assert!(r.completed);
}

#[test]
fn a_ppu_last_kick_waiting_for_the_dpu_pair_never_completes() {
    // What mainline rocket does for every task (docs/device.md, "Pooling on rocket"):
    // the PPU finishes and writes its output, but the interrupt it waits for never comes.
    let c = f16_cube(4, 4, 8);
    let pool = Pool2d::new(c, PoolKind::Max, 2);
    let program = rknpu_driver::kernels::ops::chain(&tasks(&pool)).unwrap();
    let words = program.bind(|_| Some(u64::from(REGCMD_AT))).unwrap();
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    m.map(REGCMD_AT, words_to_le_bytes(&words)).unwrap();
    m.map(IN_AT, pack(&c, &[3.0; 128])).unwrap();
    m.map_zeroed(OUT_AT, 64).unwrap();
    let t = program.tasks()[0];
    assert_eq!(t.int_mask, 0xC00, "the program asks for the PPU pair");
    let r = sim
        .kick(&Kick {
            task_number: Some(1),
            ..Kick::new(REGCMD_AT, t.regcfg_amount)
        })
        .unwrap();
    assert_eq!((r.raw_status, r.int_status, r.completed), (0x400, 0, false));
    assert_eq!(lint_kinds(&r), vec![LintKind::EarlyIntMask]);
    assert_eq!(output(&sim, &pool.output().unwrap()), vec![3.0; 32]);
}

mod random {
    use super::*;
    use proptest::prelude::*;
    use rknpu_driver::task::{PoolMethod, Ppu, PpuRdma};

    prop_compose! {
        fn pool_task()(
            cube_in in (1u32..=12, 1u32..=12, prop::sample::select(vec![4u32, 8, 16, 32])),
            cube_out in (1u32..=12, 1u32..=12),
            method in prop::sample::select(vec![PoolMethod::Average, PoolMethod::Max, PoolMethod::Min]),
            from_memory in prop::bool::weighted(0.9),
            kernel in (1u32..=16, 1u32..=16),
            stride in (1u32..=16, 1u32..=16),
            recip in prop::sample::select(vec![(0u32, 0u32), (0x7800, 0x7800), (0x7555, 0x7800), (0x7555, 0x7555)]),
            padding in prop::array::uniform4(0u32..=7),
            pad in prop::sample::select(vec![0u32, 0xFC00, 0x7C00, 0x7_FF80, 0x3C00]),
            precision in prop::sample::select(vec![Precision::Fp16, Precision::Int8, Precision::Int16]),
            size_code in 0u32..=3,
            strides in (0u32..=160, 0u32..=1200, 0u32..=1200),
            burst in prop::sample::select(vec![3u32, 15]),
        ) -> Task {
            let (iw, ih, c) = cube_in;
            Task::pooling(
                Ppu {
                    ping_pong: true,
                    cube_in,
                    cube_out: (cube_out.0, cube_out.1, c),
                    method,
                    from_memory,
                    kernel,
                    stride,
                    recip,
                    padding,
                    pad_values: (pad, 0),
                    out: fixed(OUT_AT),
                    surf_stride: strides.2,
                    precision,
                    index_add: strides.2,
                    burst_len: burst,
                },
                PpuRdma {
                    ping_pong: true,
                    cube_in: (iw, ih, c),
                    size_code,
                    src: fixed(IN_AT),
                    line_stride: strides.0,
                    surf_stride: strides.1,
                },
            )
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Whatever the values, a pooling task runs or stops with an error that names a
        /// field or a DMA; nothing panics.
        #[test]
        fn random_pooling_tasks_run_or_name_what_they_refuse(t in pool_task()) {
            match run(&[t], vec![0x3C; 1 << 14]) {
                Ok((_, r)) => prop_assert!(r.completed),
                Err(SimError::Unsupported { .. } | SimError::Inconsistent { .. } | SimError::Dma { .. }) => {}
                Err(other) => prop_assert!(false, "{other}"),
            }
        }
    }
}
