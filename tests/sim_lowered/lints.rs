//! Every lint of a known hazard.

use super::*;
use rknpu_driver::regcmd::Program;

fn lints_of(s: Setup) -> Vec<LintKind> {
    lint_kinds(&s.run().unwrap())
}

#[test]
fn early_and_half_interrupt_masks_are_linted() {
    let s = Setup::int8(4, 64, 32);
    let r = s
        .sim()
        .kick(&Kick {
            int_mask: 0x3,
            ..s.kick()
        })
        .unwrap();
    assert!(lint_kinds(&r).contains(&LintKind::EarlyIntMask));
    assert!(
        r.completed,
        "the CNA pair fires: the job would complete early"
    );
    let r = s
        .sim()
        .kick(&Kick {
            int_mask: 0x100,
            ..s.kick()
        })
        .unwrap();
    assert!(lint_kinds(&r).contains(&LintKind::EarlyIntMask));
    let r = s
        .sim()
        .kick(&Kick {
            int_mask: 0xC00,
            ..s.kick()
        })
        .unwrap();
    assert!(!r.completed, "no PPU ran");
}

#[test]
fn chain_amount_and_task_count_are_linted() {
    // 4096 chained add tasks: one more than TASK_NUMBER counts.
    // Break the first chain amount.
    let run = kick_with_first_amount(&chained_adds(4096), |v| v + 1).unwrap();
    assert_eq!(run.tasks_run, 4096);
    let kinds = lint_kinds(&run);
    assert!(kinds.contains(&LintKind::ChainAmount));
    assert!(kinds.contains(&LintKind::TaskCount));
    let chain = run
        .lints
        .iter()
        .find(|l| l.kind == LintKind::ChainAmount)
        .unwrap();
    assert_eq!(chain.at.task, 0);
}

#[test]
fn stale_registers_are_linted() {
    // A task that writes only its output address, first of its kick, relies on what an
    // earlier job left in its group...
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let mut short = rknpu_driver::regcmd::TaskBuilder::new();
    short
        .write_addr::<regs::dpu::DstBaseAddr>(DmaAddr::reloc(single::C, 0))
        .unwrap();
    let mut p = ProgramBuilder::new(single::REGCMD);
    p.push_task(mm.body().unwrap(), BlockMask::CONV);
    p.push_task(mm.body().unwrap(), BlockMask::CONV);
    p.end_chain();
    p.push_task(short, BlockMask::CONV);
    let program = p.build().unwrap();
    let s = Setup {
        mm,
        words: program.bind(addr).unwrap(),
        body: program.tasks()[0].regcfg_amount,
    };
    let mut sim = s.sim();
    let first = sim
        .kick(&Kick {
            task_number: Some(2),
            ..s.kick()
        })
        .unwrap();
    assert!(first.lints.is_empty(), "{:?}", first.lints);
    // ...so the second job's task (group 0 again) is linted although the values are there.
    let run = kick_task(&mut sim, &program, 2);
    assert_eq!(run.tasks_run, 1);
    assert!(run.completed);
    let stale = stale_lints(&run);
    assert_eq!(stale.len(), 1, "{:?}", run.lints);
    assert_eq!(stale[0].at.task, 0);
    assert!(
        stale[0].message.contains(cna::ConvCon1::NAME),
        "{}",
        stale[0].message
    );
}

#[test]
fn matmul_quirks_are_linted() {
    // Quirk 3: one weight bank.
    // Fewer than 2 weight banks: no validated program does it (an error, not a lint).
    assert!(matches!(
        Setup::int8(4, 64, 32).patch(0x1040, 0x1B).run(),
        Err(SimError::Unsupported {
            field,
            value: 1,
            ..
        }) if field == cna::CbufCon0::WEIGHT_BANK.name()
    ));
    // Quirk 4: int8 K tile of 3200 with 8 rows.
    assert!(lints_of(Setup::int8(8, 3200, 32)).contains(&LintKind::Int8KTile));
    assert!(!lints_of(Setup::int8(4, 3200, 32)).contains(&LintKind::Int8KTile));
    // Quirk 5: fp16 grains below rows + 1.
    let fp16 = Setup::new(SingleMatmul::new(8, 64, 32, Dtype::Fp16));
    assert!(
        lints_of(fp16.field(cna::ConvCon2::FEATURE_GRAINS, 2)).contains(&LintKind::FeatureGrains)
    );
    // Quirk 6: a clamped notch makes rows overlap.
    let s = Setup::int8(8, 64, 1024)
        .field(dpu::DataCubeNotchAddr::NOTCH_ADDR_0, 103)
        .field(dpu::DataCubeNotchAddr::NOTCH_ADDR_1, 103);
    assert!(lints_of(s).contains(&LintKind::OutputOverlap));
    // Quirk 7: a 16-bit float task wider than 4096 channels.
    let wide = Setup::new(SingleMatmul::new(1, 32, 4128, Dtype::Fp16));
    assert!(lints_of(wide).contains(&LintKind::WideFp16));
    // Quirk 13: int4 over more than 480 channels.
    let mut i4 = SingleMatmul::new(2, 512, 64, Dtype::Int4);
    i4.c_layout = Layout::Native;
    assert!(lints_of(Setup::new(i4)).contains(&LintKind::Int4Saturation));
    // Quirk 15: fp16 ADD with the operand converter bypassed (and the operand is dropped).
    let mut add = SingleMatmul::new(4, 64, 32, Dtype::Fp16);
    add.post.add = true;
    let s = Setup::new(add).field(dpu::EwCfg::EW_OP_CVT_BYPASS, 1);
    assert!(lints_of(s).contains(&LintKind::Fp16EwAddDropped));
    // Quirk 16: fp16 output scattered into rows wider than the task's channels.
    let mut f16 = SingleMatmul::new(4, 64, 32, Dtype::Fp16);
    f16.out = single::OutType::Fp16;
    let s = Setup::new(f16)
        .field(dpu::DataCubeNotchAddr::NOTCH_ADDR_0, 7)
        .field(dpu::DataCubeNotchAddr::NOTCH_ADDR_1, 7);
    assert!(lints_of(s).contains(&LintKind::Fp16NTileScatter));
    // Group line fetch with a line stride no validated program uses.
    let s = Setup::int8(4, 64, 32)
        .field(cna::ConvCon1::GROUP_LINE_OFF, 0)
        .field(cna::DmaCon1::LINE_STRIDE, 16);
    assert!(lints_of(s).contains(&LintKind::UnverifiedGeometry));
    // S_POINTER naming another core.
    let mut s = Setup::int8(4, 64, 32);
    s.words[1] = RegCmd::new(0x0201, 0x1000_000E, 0x1004);
    assert!(lints_of(s).contains(&LintKind::CoreIndex));
}

#[test]
fn fp16_add_without_operand_converter_drops_the_operand() {
    let mut add = SingleMatmul::new(1, 32, 32, Dtype::Fp16);
    add.post.add = true;
    let s = Setup::new(add).field(dpu::EwCfg::EW_OP_CVT_BYPASS, 1);
    let mut sim = s.sim();
    sim.memory_mut().unmap(at(single::E));
    sim.memory_mut()
        .map(at(single::E), add.pack_e_f32(&[5.0; 32]).unwrap())
        .unwrap();
    sim.kick(&s.kick()).unwrap();
    let c = add
        .unpack_c_f32(&sim.memory().read_vec(at(single::C), add.c_bytes()).unwrap())
        .unwrap();
    assert!(
        c.iter().all(|&v| v == 0.0),
        "A and B are zero and E is dropped: {c:?}"
    );
}

#[test]
fn the_vendor_multi_core_amount_bits_run_as_derived() {
    // Two chained adds whose tail carries bits 17:16 of the amount, as the vendor's
    // multi-core chains do (cores - 1): 1 and 2 run with `unvalidated`, 3 is refused.
    let program = chained_adds(2);
    for hi in [1u32, 2, 3] {
        let run = kick_with_first_amount(&program, |v| v | hi << 16);
        match (hi, run) {
            (1 | 2, Ok(run)) => {
                assert_eq!(run.tasks_run, 2);
                assert_eq!(lint_kinds(&run), vec![LintKind::Unvalidated], "{run:?}");
            }
            (3, Err(SimError::Unsupported { field, value, .. })) => {
                assert_eq!(
                    (field, value),
                    (rknpu_driver::regs::pc::RegisterAmounts::UNK_17_16.name(), 3)
                );
            }
            (hi, other) => panic!("bits 17:16 = {hi}: {other:?}"),
        }
    }
}

/// Runs `program` (of [`chained_adds`]) with the value of its first chain-amount word
/// (the PC's `REGISTER_AMOUNTS` in the first task's tail) changed by `f`.
fn kick_with_first_amount(program: &Program, f: impl Fn(u32) -> u32) -> Result<CoreRun, SimError> {
    let mut words = program.bind(addr).unwrap();
    let i = words
        .iter()
        .position(|w| w.target() == 0x0101 && w.offset() == 0x14)
        .unwrap();
    words[i] = words[i].with_value(f(words[i].value()));
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    m.map(at(single::REGCMD), words_to_le_bytes(&words))
        .unwrap();
    for b in 1..=3 {
        m.map_zeroed(at(BufferId(b)), 16).unwrap();
    }
    sim.kick(&Kick::new(
        at(single::REGCMD),
        program.tasks()[0].regcfg_amount,
    ))
}

/// `n` chained 1 × 4 split-K adds (A, B and C in buffers 1, 2 and 3).
fn chained_adds(n: usize) -> Program {
    let mut p = ProgramBuilder::new(single::REGCMD);
    let r = |b: u32| DmaAddr::reloc(BufferId(b), 0);
    for _ in 0..n {
        p.push_task(
            add_task(1, 4, r(1), r(2), r(3)).unwrap().body().unwrap(),
            BlockMask::ELEMENTWISE,
        );
    }
    p.build().unwrap()
}
