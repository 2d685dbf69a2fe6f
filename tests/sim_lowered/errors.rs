//! Every simulator error, named by task, register, field and value.

use super::*;
use rknpu_driver::regs::Block;

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
            assert_eq!(
                (block, register, write),
                (Block::Dpu, dpu::DstBaseAddr::NAME, true)
            );
            assert_eq!(addr, at(single::C) as u64);
        }
        other => panic!("{other:?}"),
    }
    let mut sim = s.sim();
    sim.memory_mut().unmap(at(single::B)).unwrap();
    assert!(matches!(
        sim.kick(&s.kick()),
        Err(SimError::Dma {
            block: Block::Cna,
            register: cna::DcompAddr0::NAME,
            write: false,
            ..
        })
    ));
    let mut sim = s.sim();
    sim.memory_mut().unmap(at(single::REGCMD)).unwrap();
    assert!(matches!(
        sim.kick(&s.kick()),
        Err(SimError::Dma {
            block: Block::Pc,
            ..
        })
    ));
}

#[test]
fn unsupported_field_values_are_named() {
    type Case = (fn(Setup) -> Setup, &'static str, &'static str, u32);
    let cases: [Case; 7] = [
        (
            // Only the vendor's multi-core values of CONV_CON2 bits 31:24 are known.
            |s| s.field(cna::ConvCon2::UNK_31_24, 0x30),
            cna::ConvCon2::NAME,
            cna::ConvCon2::UNK_31_24.name(),
            0x30,
        ),
        (
            // 0 direct and 3 depthwise are modelled; 1 and 2 are reserved.
            |s| s.field(cna::ConvCon1::CONV_MODE, 1),
            cna::ConvCon1::NAME,
            cna::ConvCon1::CONV_MODE.name(),
            1,
        ),
        (
            |s| s.field(cna::ConvCon1::IN_PRECISION, 7),
            cna::ConvCon1::NAME,
            cna::ConvCon1::IN_PRECISION.name(),
            7,
        ),
        (
            |s| s.field(cna::DcompCtrl::DECOMP_CONTROL, 1),
            cna::DcompCtrl::NAME,
            cna::DcompCtrl::DECOMP_CONTROL.name(),
            1,
        ),
        (
            // K×K kernels are modelled; an int8 padding value not as Mesa writes it is not.
            |s| s.field(cna::PadCon1::PAD_VALUE, 0x1234),
            cna::PadCon1::NAME,
            cna::PadCon1::PAD_VALUE.name(),
            0x1234,
        ),
        // The EW stage is bypassed in the base program; enable it to reach the LUT check,
        // which refuses the LUT in an integer (int8, code 0) pipeline.
        (
            |s| {
                s.field(dpu::EwCfg::EW_LUT_BYPASS, 0)
                    .field(dpu::EwCfg::EW_BYPASS, 0)
            },
            dpu::DataFormat::NAME,
            dpu::DataFormat::PROC_PRECISION.name(),
            0,
        ),
        (
            |s| s.field(dpu::OutCvtShift::MINUS_EXP, 1),
            dpu::OutCvtShift::NAME,
            dpu::OutCvtShift::MINUS_EXP.name(),
            1,
        ),
    ];
    for (change, register, field, value) in cases {
        match change(Setup::int8(4, 64, 32)).run() {
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
    // The PPU beside the convolution blocks is not modelled.
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
            field,
            value: 0x6D,
            ..
        }) if field == rknpu_driver::regs::pc::OperationEnable::OP_EN.name()
    ));
}

#[test]
fn a_vendor_multi_core_split_value_runs_as_derived() {
    // The int8 matmul with 0x20 (a three-core row split in the vendor's programs): the
    // same product as without, and the `unvalidated` lint naming the field.
    let plain = Setup::int8(4, 64, 32);
    let split = Setup::int8(4, 64, 32).field(cna::ConvCon2::UNK_31_24, 0x20);
    let (mut a, mut b) = (plain.sim(), split.sim());
    let ra = a.kick(&plain.kick()).unwrap();
    let rb = b.kick(&split.kick()).unwrap();
    assert!(ra.completed && rb.completed);
    assert_eq!(lint_kinds(&rb), vec![LintKind::Unvalidated]);
    assert!(
        rb.lints[0]
            .to_string()
            .contains(cna::ConvCon2::UNK_31_24.name())
    );
    let c = at(single::C);
    let len = 4 * 32 * 4;
    assert_eq!(
        a.memory().read_vec(c, len).unwrap(),
        b.memory().read_vec(c, len).unwrap()
    );
}

#[test]
fn inconsistent_sizes_are_named() {
    type Case = (fn(Setup) -> Setup, &'static str, &'static str, u32);
    let cases: [Case; 6] = [
        (
            // The DPU in depthwise mode under a direct convolution.
            |s| s.field(dpu::FeatureModeCfg::CONV_MODE, 3),
            dpu::FeatureModeCfg::NAME,
            dpu::FeatureModeCfg::CONV_MODE.name(),
            3,
        ),
        (
            |s| s.field(cna::FcDataSize0::DMA_HEIGHT, 3),
            cna::FcDataSize0::NAME,
            cna::FcDataSize0::DMA_HEIGHT.name(),
            3,
        ),
        (
            |s| s.field(cna::WeightSize0::WEIGHT_BYTES, 100),
            cna::WeightSize0::NAME,
            cna::WeightSize0::WEIGHT_BYTES.name(),
            100,
        ),
        (
            |s| s.field(core::DataoutSize1::DATAOUT_CHANNEL, 7),
            core::DataoutSize1::NAME,
            core::DataoutSize1::DATAOUT_CHANNEL.name(),
            7,
        ),
        (
            |s| s.field(dpu::WdmaSize1::HEIGHT_WDMA, 9),
            dpu::WdmaSize1::NAME,
            dpu::WdmaSize1::HEIGHT_WDMA.name(),
            9,
        ),
        (
            |s| s.field(cna::CbufCon1::DATA_ENTRIES, 0),
            cna::CbufCon1::NAME,
            cna::CbufCon1::DATA_ENTRIES.name(),
            0,
        ),
    ];
    for (change, register, field, value) in cases {
        match change(Setup::int8(4, 64, 32)).run() {
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
