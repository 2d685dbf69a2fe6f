//! Every simulator error, stall, lint and fault, each triggered by a program that differs
//! from a working one in the one place that matters.

use super::*;
use crate::kernels::single::{self, Dtype, Layout, SingleMatmul, add_task};
use crate::regcmd::{BlockMask, BufferId, DmaAddr, ProgramBuilder, RegCmd, words_to_le_bytes};

const BASE: u64 = 0x1000_0000;

fn addr(b: BufferId) -> Option<u64> {
    Some(BASE * (b.0 as u64 + 1))
}

fn at(b: BufferId) -> u32 {
    addr(b).unwrap() as u32
}

/// A working one-task program and a simulator with its buffers in place.
struct Setup {
    mm: SingleMatmul,
    words: Vec<RegCmd>,
    body: u32,
}

impl Setup {
    fn new(mm: SingleMatmul) -> Setup {
        let program = mm.program().unwrap();
        Setup {
            mm,
            words: program.bind(addr).unwrap(),
            body: program.tasks()[0].regcfg_amount,
        }
    }

    fn int8(m: u32, k: u32, n: u32) -> Setup {
        Setup::new(SingleMatmul::new(m, k, n, Dtype::Int8))
    }

    /// Replaces the value of every body entry that writes `offset`.
    fn patch(mut self, offset: u16, value: u32) -> Setup {
        let mut found = false;
        for w in self
            .words
            .iter_mut()
            .filter(|w| w.offset() == offset && w.target() > 0x0081)
        {
            *w = w.with_value(value);
            found = true;
        }
        assert!(found, "no entry writes {offset:#06x}");
        self
    }

    /// Changes one field of the entries that write `offset`.
    fn field(self, offset: u16, name: &str, value: u32) -> Setup {
        let info = regs::lookup(offset).unwrap().field(name).unwrap();
        let old = self
            .words
            .iter()
            .find(|w| w.offset() == offset && w.target() > 0x0081);
        let raw = info.insert(old.unwrap().value(), value).unwrap();
        self.patch(offset, raw)
    }

    fn sim(&self) -> Simulator {
        let mut sim = Simulator::new();
        let mm = &self.mm;
        let m = sim.memory_mut();
        m.map(at(single::REGCMD), words_to_le_bytes(&self.words))
            .unwrap();
        m.map_zeroed(at(single::A), 4 * mm.a_bytes()).unwrap();
        m.map_zeroed(at(single::B), mm.b_bytes()).unwrap();
        // A and C get room for the lint tests' other strides.
        m.map_zeroed(at(single::C), 4 * mm.c_bytes()).unwrap();
        m.map_zeroed(at(single::E), mm.e_bytes()).unwrap();
        sim
    }

    fn kick(&self) -> Kick {
        Kick::new(at(single::REGCMD), self.body)
    }

    fn run(&self) -> Result<CoreRun, SimError> {
        self.sim().kick(&self.kick())
    }
}

fn lint_kinds(r: &CoreRun) -> Vec<LintKind> {
    r.lints.iter().map(|l| l.kind).collect()
}

#[test]
fn a_working_program_runs_clean() {
    let r = Setup::int8(4, 64, 32).run().unwrap();
    assert!(r.completed && r.stall.is_none());
    assert!(r.lints.is_empty(), "{:?}", r.lints);
    assert_eq!(
        r.raw_status, 0x155,
        "CNA feature/weight/CSC, CORE and DPU, group 0"
    );
    assert_eq!(r.int_status, 0x100);
}

#[test]
fn ping_pong_groups_alternate_across_kicks_of_a_core() {
    let s = Setup::int8(4, 64, 32);
    let mut sim = s.sim();
    let first = sim.kick(&s.kick()).unwrap();
    let second = sim.kick(&s.kick()).unwrap();
    assert_eq!(first.int_status, 0x100);
    assert_eq!(second.int_status, 0x200);
    assert!(
        second.completed,
        "the vendor kernel widens either bit to the pair"
    );
    assert_eq!(
        sim.register(0, 1, 0x100C),
        Some(s.mm.body().unwrap().entries()[3].value())
    );
}

// ----- errors -----

#[test]
fn dma_outside_memory_names_block_and_register() {
    let s = Setup::int8(4, 64, 32);
    let mut sim = s.sim();
    sim.memory_mut().unmap(at(single::C)).unwrap();
    match sim.kick(&s.kick()) {
        Err(SimError::Dma {
            block,
            register,
            write,
            addr,
            ..
        }) => {
            assert_eq!((block, register, write), ("DPU", "DPU.DST_BASE_ADDR", true));
            assert_eq!(addr, at(single::C) as u64);
        }
        other => panic!("{other:?}"),
    }
    let mut sim = s.sim();
    sim.memory_mut().unmap(at(single::B)).unwrap();
    assert!(matches!(
        sim.kick(&s.kick()),
        Err(SimError::Dma {
            block: "CNA",
            register: "CNA.DCOMP_ADDR0",
            write: false,
            ..
        })
    ));
    let mut sim = s.sim();
    sim.memory_mut().unmap(at(single::REGCMD)).unwrap();
    assert!(matches!(
        sim.kick(&s.kick()),
        Err(SimError::Dma { block: "PC", .. })
    ));
}

#[test]
fn unsupported_field_values_are_named() {
    let cases: [(u16, &str, u32, &str); 6] = [
        (0x100C, "conv_mode", 3, "CNA.CONV_CON1"),
        (0x100C, "in_precision", 7, "CNA.CONV_CON1"),
        (0x1100, "decomp_control", 1, "CNA.DCOMP_CTRL"),
        (0x1038, "weight_width", 3, "CNA.WEIGHT_SIZE2"),
        (0x4070, "ew_lut_bypass", 0, "DPU.EW_CFG"),
        (0x4088, "minus_exp", 1, "DPU.OUT_CVT_SHIFT"),
    ];
    for (offset, field, value, register) in cases {
        // The EW stage is bypassed in the base program; enable it to reach the LUT check.
        let s = Setup::int8(4, 64, 32).field(offset, field, value);
        let s = if register == "DPU.EW_CFG" {
            s.field(0x4070, "ew_bypass", 0)
        } else {
            s
        };
        match s.run() {
            Err(SimError::Unsupported {
                register: r,
                field: f,
                value: v,
                at,
                ..
            }) => {
                assert_eq!((r, f, v), (register, field, value as u64));
                assert_eq!(at, At { core: 0, task: 0 });
            }
            other => panic!("{register}.{field}: {other:?}"),
        }
    }
    // PPU tasks are not modelled.
    let mut s = Setup::int8(4, 64, 32);
    let i = s
        .words
        .iter()
        .position(|w| w.target() == regs::TARGET_OP_ENABLE)
        .unwrap();
    s.words[i] = RegCmd::op_enable(BlockMask(0x6D));
    assert!(matches!(
        s.run(),
        Err(SimError::Unsupported {
            field: "op_en",
            value: 0x6D,
            ..
        })
    ));
}

#[test]
fn inconsistent_sizes_are_named() {
    let cases: [(u16, &str, u32, &str); 5] = [
        (0x1084, "dma_height", 3, "CNA.FC_DATA_SIZE0"),
        (0x1030, "weight_bytes", 100, "CNA.WEIGHT_SIZE0"),
        (0x3018, "dataout_channel", 7, "CORE.DATAOUT_SIZE_1"),
        (0x4034, "height", 9, "DPU.DATA_CUBE_HEIGHT"),
        (0x1044, "data_entries", 0, "CNA.CBUF_CON1"),
    ];
    for (offset, field, value, register) in cases {
        match Setup::int8(4, 64, 32).field(offset, field, value).run() {
            Err(SimError::Inconsistent {
                register: r,
                field: f,
                value: v,
                ..
            }) => {
                assert_eq!((r, f, v), (register, field, value as u64));
            }
            other => panic!("{register}.{field}: {other:?}"),
        }
    }
}

#[test]
fn cbuf_budget_overflows_are_errors() {
    // 100 rows × 512 int8 channels = 51200 bytes do not fit one data bank.
    let s = Setup::int8(100, 512, 32).patch(0x1040, 0xB1);
    assert!(matches!(
        s.run(),
        Err(SimError::CbufOverflow {
            banks: 1,
            needed_bytes: 51200,
            ..
        })
    ));
    // 13 banks in all.
    let s = Setup::int8(4, 64, 32).patch(0x1040, 0xA3);
    assert!(matches!(
        s.run(),
        Err(SimError::CbufOverflow { banks: 12, .. })
    ));
    // 32 kernels of 8192 bytes need 8 weight banks.
    let s = Setup::int8(1, 8192, 32).patch(0x1040, 0x51);
    assert!(matches!(
        s.run(),
        Err(SimError::CbufOverflow {
            banks: 5,
            needed_bytes: 262_144,
            ..
        })
    ));
}

#[test]
fn bad_entries_are_named() {
    let base = Setup::int8(4, 64, 32);
    let program_at = |_s: &Setup, i: usize| at(single::REGCMD) + 8 * i as u32;
    let cases: [(RegCmd, &str); 6] = [
        (RegCmd::new(0x0201, 0, 0x10FC), "no register at offset"),
        (RegCmd::new(0x0801, 0, 0x100C), "addresses CORE"),
        (RegCmd::new(0x0201, 0x8000_0000, 0x1014), "reserved bits"),
        (RegCmd::new(0x0201, 0, 0x1000), "not written by programs"),
        (RegCmd::new(0x0101, 0, 0x0020), "only the chain registers"),
        (RegCmd::new(0x0003, 0, 0), "unknown target code"),
    ];
    for (entry, why_part) in cases {
        let mut s = Setup {
            words: base.words.clone(),
            ..base
        };
        s.words[1] = entry;
        match s.run() {
            Err(SimError::BadEntry {
                addr,
                entry: e,
                why,
                ..
            }) => {
                assert_eq!(addr, program_at(&s, 1));
                assert_eq!(e, entry.0);
                assert!(why.contains(why_part), "{why}");
            }
            other => panic!("{entry:?}: {other:?}"),
        }
    }
    // Anything but padding after the op-enable entry of a fetch.
    let mut s = Setup {
        words: base.words.clone(),
        ..base
    };
    let i = s
        .words
        .iter()
        .position(|w| w.target() == regs::TARGET_OP_ENABLE)
        .unwrap();
    s.words.extend([RegCmd::NOP; 2]);
    s.words[i + 1] = RegCmd::new(0x1001, 0, 0x4014);
    s.body += 2;
    let r = s.run();
    assert!(
        matches!(r, Err(SimError::BadEntry { ref why, .. }) if why.contains("after the op-enable")),
        "{r:?}"
    );
}

#[test]
fn setup_errors() {
    let s = Setup::int8(4, 64, 32);
    let mut sim = s.sim();
    let bad = [
        Kick {
            core: 3,
            ..s.kick()
        },
        Kick {
            regcmd_addr: at(single::REGCMD) + 8,
            ..s.kick()
        },
        Kick {
            task_number: Some(0),
            ..s.kick()
        },
        Kick {
            task_number: Some(4096),
            ..s.kick()
        },
        Kick {
            regcfg_amount: 200_000,
            ..s.kick()
        },
    ];
    for k in bad {
        assert!(matches!(sim.kick(&k), Err(SimError::Setup { .. })), "{k:?}");
    }
    assert!(
        sim.memory_mut()
            .map(at(single::A) + 16, vec![0; 4])
            .is_err(),
        "overlap"
    );
    assert!(
        sim.memory_mut().map(0xFFFF_FFF0, vec![0; 32]).is_err(),
        "past 4 GiB"
    );
    assert!(sim.memory_mut().map(0x10, Vec::new()).is_err(), "empty");
}

// ----- stalls -----

#[test]
fn stalls_are_reported_with_the_task_counter() {
    let s = Setup::int8(4, 64, 32);
    // Too small a fetch: the op-enable entry is never read.
    let r = s
        .sim()
        .kick(&Kick {
            regcfg_amount: 20,
            ..s.kick()
        })
        .unwrap();
    assert!(!r.completed);
    assert_eq!(r.tasks_run, 0);
    assert!(r.stall.unwrap().why.contains("no op-enable"));
    // TASK_NUMBER beyond the chain.
    let r = s
        .sim()
        .kick(&Kick {
            task_number: Some(2),
            ..s.kick()
        })
        .unwrap();
    assert!(!r.completed);
    assert_eq!(r.tasks_run, 1);
    assert_eq!(r.stall.unwrap().at, At { core: 0, task: 1 });
    // An injected hang.
    let mut sim = s.sim();
    sim.set_faults(Faults {
        hang: Some(At { core: 0, task: 0 }),
        ..Faults::default()
    });
    let r = sim.kick(&s.kick()).unwrap();
    assert_eq!((r.completed, r.tasks_run, r.raw_status), (false, 0, 0));
}

#[test]
fn a_dpu_task_without_its_read_dma_stalls_and_lints() {
    let mut p = ProgramBuilder::new(single::REGCMD);
    let r = |b: u32| DmaAddr::reloc(BufferId(b), 0);
    p.push_task(add_task(4, 32, r(1), r(2), r(3)).unwrap(), BlockMask::DPU);
    let program = p.build().unwrap();
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    m.map(
        at(single::REGCMD),
        words_to_le_bytes(&program.bind(addr).unwrap()),
    )
    .unwrap();
    for b in 1..=3 {
        m.map_zeroed(at(BufferId(b)), 4 * 32 * 4).unwrap();
    }
    let run = sim
        .kick(&Kick::new(
            at(single::REGCMD),
            program.tasks()[0].regcfg_amount,
        ))
        .unwrap();
    assert!(!run.completed && run.stall.is_some());
    assert!(lint_kinds(&run).contains(&LintKind::DpuWithoutRdma));
    // The same with a matmul whose EW operand needs DPU_RDMA.
    let mut mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    mm.post.add = true;
    let mut s = Setup::new(mm);
    let i = s
        .words
        .iter()
        .position(|w| w.target() == regs::TARGET_OP_ENABLE)
        .unwrap();
    s.words[i] = RegCmd::op_enable(BlockMask::CONV);
    let run = s.run().unwrap();
    assert!(run.stall.is_some());
    assert!(lint_kinds(&run).contains(&LintKind::DpuWithoutRdma));
}

// ----- faults -----

#[test]
fn dma_error_faults_set_status_bits_and_drop_the_output() {
    let s = Setup::int8(4, 64, 32);
    for (faults, bit) in [
        (
            Faults {
                dma_read_error: Some(At { core: 0, task: 0 }),
                ..Faults::default()
            },
            irq::DMA_READ_ERROR,
        ),
        (
            Faults {
                dma_write_error: Some(At { core: 0, task: 0 }),
                ..Faults::default()
            },
            irq::DMA_WRITE_ERROR,
        ),
    ] {
        let mut sim = s.sim();
        // Mark the output so that a write would show.
        let marker = vec![0xAA; 4 * s.mm.c_bytes()];
        sim.memory_mut().unmap(at(single::C));
        sim.memory_mut().map(at(single::C), marker.clone()).unwrap();
        sim.set_faults(faults.clone());
        let r = sim.kick(&s.kick()).unwrap();
        assert_eq!(r.raw_status & bit, bit);
        assert!(r.completed, "the error bit is masked out by int_mask 0x300");
        assert_eq!(
            sim.memory().read_vec(at(single::C), marker.len()).unwrap(),
            marker
        );
        // Enabled in the mask, the error makes the vendor kernel reject the interrupt.
        let mut sim = s.sim();
        sim.set_faults(faults);
        let r = sim
            .kick(&Kick {
                int_mask: 0x300 | bit,
                ..s.kick()
            })
            .unwrap();
        assert!(!r.completed);
    }
}

// ----- lints -----

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
    let mut p = ProgramBuilder::new(single::REGCMD);
    let r = |b: u32| DmaAddr::reloc(BufferId(b), 0);
    for _ in 0..4096 {
        p.push_task(
            add_task(1, 4, r(1), r(2), r(3)).unwrap(),
            BlockMask::ELEMENTWISE,
        );
    }
    let program = p.build().unwrap();
    let mut words = program.bind(addr).unwrap();
    // Break the first chain amount.
    let i = words
        .iter()
        .position(|w| w.target() == 0x0101 && w.offset() == 0x14)
        .unwrap();
    words[i] = words[i].with_value(words[i].value() + 1);
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    m.map(at(single::REGCMD), words_to_le_bytes(&words))
        .unwrap();
    for b in 1..=3 {
        m.map_zeroed(at(BufferId(b)), 16).unwrap();
    }
    let run = sim
        .kick(&Kick::new(
            at(single::REGCMD),
            program.tasks()[0].regcfg_amount,
        ))
        .unwrap();
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
    // A second task that writes only its addresses relies on the first task's group...
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let mut short = crate::regcmd::TaskBuilder::new();
    short
        .write_addr::<regs::dpu::DstBaseAddr>(DmaAddr::reloc(single::C, 0))
        .unwrap();
    let mut p = ProgramBuilder::new(single::REGCMD);
    p.push_task(mm.body().unwrap(), BlockMask::CONV);
    p.push_task(mm.body().unwrap(), BlockMask::CONV);
    p.push_task(short, BlockMask::CONV);
    let program = p.build().unwrap();
    let s = Setup {
        mm,
        words: program.bind(addr).unwrap(),
        body: program.tasks()[0].regcfg_amount,
    };
    let run = s.run().unwrap();
    assert_eq!(run.tasks_run, 3);
    let stale: Vec<_> = run
        .lints
        .iter()
        .filter(|l| l.kind == LintKind::StaleRegisters)
        .collect();
    assert_eq!(stale.len(), 1, "{:?}", run.lints);
    assert_eq!(stale[0].at.task, 2);
    assert!(
        stale[0].message.contains("CNA.CONV_CON1"),
        "{}",
        stale[0].message
    );
}

#[test]
fn matmul_quirks_are_linted() {
    // Quirk 3: one weight bank.
    assert!(lints_of(Setup::int8(4, 64, 32).patch(0x1040, 0x1B)).contains(&LintKind::CbufSplit));
    // Quirk 4: int8 K tile of 3200 with 8 rows.
    assert!(lints_of(Setup::int8(8, 3200, 32)).contains(&LintKind::Int8KTile));
    assert!(!lints_of(Setup::int8(4, 3200, 32)).contains(&LintKind::Int8KTile));
    // Quirk 5: fp16 grains below rows + 1.
    let fp16 = Setup::new(SingleMatmul::new(8, 64, 32, Dtype::Fp16));
    assert!(lints_of(fp16.field(0x1010, "feature_grains", 2)).contains(&LintKind::FeatureGrains));
    // Quirk 6: a clamped notch makes rows overlap.
    let s = Setup::int8(8, 64, 1024)
        .field(0x4038, "notch_addr_0", 103)
        .field(0x4038, "notch_addr_1", 103);
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
    let s = Setup::new(add).field(0x4070, "ew_op_cvt_bypass", 1);
    assert!(lints_of(s).contains(&LintKind::Fp16EwAddDropped));
    // Quirk 16: fp16 output scattered into rows wider than the task's channels.
    let mut f16 = SingleMatmul::new(4, 64, 32, Dtype::Fp16);
    f16.out = single::OutType::Fp16;
    let s = Setup::new(f16)
        .field(0x4038, "notch_addr_0", 7)
        .field(0x4038, "notch_addr_1", 7);
    assert!(lints_of(s).contains(&LintKind::Fp16NTileScatter));
    // Group line fetch with a line stride no validated program uses.
    let s = Setup::int8(4, 64, 32)
        .field(0x100C, "group_line_off", 0)
        .field(0x107C, "line_stride", 16);
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
    let s = Setup::new(add).field(0x4070, "ew_op_cvt_bypass", 1);
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

// ----- robustness -----

mod random_programs {
    use super::*;
    use proptest::prelude::*;

    /// Entries that look like programs: block targets with offsets inside their block,
    /// chain entries, markers, op-enables with any mask, NOPs, and raw words.
    fn entry() -> impl Strategy<Value = RegCmd> {
        let blocks = [
            (0x0201u16, 0x1000u16),
            (0x0801, 0x3000),
            (0x1001, 0x4000),
            (0x2001, 0x5000),
            (0x0101, 0x0000),
        ];
        prop_oneof![
            6 => (0..blocks.len(), 0u16..0x140, any::<u32>(), 0u32..4).prop_map(move |(b, off, v, small)| {
                let (t, base) = blocks[b];
                let v = if small == 0 { v } else { v & 0xFFF };
                RegCmd::new(t, v, base + off * 4)
            }),
            1 => any::<u32>().prop_map(|m| RegCmd::op_enable(BlockMask(m & 0x7F))),
            1 => Just(RegCmd::MARKER),
            1 => Just(RegCmd::NOP),
            1 => any::<u64>().prop_map(RegCmd),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Whatever the words, a kick returns a result or a typed error: no panic, no
        /// unbounded allocation.
        #[test]
        fn random_programs_never_panic(
            words in proptest::collection::vec(entry(), 1..160),
            body in 0u32..200,
            regions in proptest::collection::vec((0u32..16, 1usize..4096), 0..4),
        ) {
            let mut sim = Simulator::new();
            sim.memory_mut().map(0x1000, words_to_le_bytes(&words)).unwrap();
            for (slot, len) in regions {
                let _ = sim.memory_mut().map_zeroed(0x10_0000 * (slot + 1), len);
            }
            let _ = sim.kick(&Kick { task_number: None, ..Kick::new(0x1000, body) });
        }

        /// A working program with one register replaced by a random value never panics.
        #[test]
        fn one_random_register_never_panics(index in 0usize..100, value in any::<u32>()) {
            let mut s = Setup::int8(4, 64, 32);
            let body = s.body as usize;
            let i = index % body;
            s.words[i] = s.words[i].with_value(value);
            let _ = s.run();
        }
    }
}
