//! The regcmd layer against a generator: the worked example's program equals the
//! published table, and binding it refuses unbound, misaligned and overflowing
//! addresses. (The builder's and the decoder's own tests are unit tests in
//! `src/regcmd/tests.rs`; these need a kernel, which the regcmd layer may not import.)

use rknpu_driver::Error;
use rknpu_driver::kernels::worked_example;
use rknpu_driver::regcmd::{RegCmd, pc_data_amount};
use rknpu_driver::regs::{Register, dpu};

/// Body of the worked example (mtx512's int8 matmul; docs/provenance.md) as (offset, value), transcribed from its
/// published program (IN/WT/OUT as bound by the fixture: 0x200000, 0x300000, 0x400000).
fn reference_body() -> Vec<(u16, u32)> {
    let mut v = vec![
        (0x4004, 0x0E),
        (0x100C, 0),
        (0x1010, 0x50),
        (0x1014, 0x09),
        (0x1020, 0x0001_0004),
        (0x1024, 0x001F_0020),
        (0x1028, 1),
        (0x102C, 4),
        (0x1030, 0x400),
        (0x1034, 0x20),
        (0x1038, 0x0101_0020),
        (0x1040, 0xB1),
        (0x1044, 1),
        (0x104C, 0x0B),
        (0x1050, 0x0001_0000),
        (0x1054, 0x0001_0000),
        (0x1058, 0x0001_0000),
        (0x105C, 0x0001_0000),
        (0x1060, 0),
        (0x1064, 0),
        (0x1068, 0),
        (0x1070, 0x0020_0000),
        (0x1074, 0),
        (0x1078, 0x000F_000F),
        (0x107C, 4),
        (0x1080, 0),
        (0x1084, 0x0001_0004),
        (0x1088, 0x20),
        (0x1100, 0),
        (0x1104, 0),
        (0x1110, 0x0030_0000),
    ];
    v.extend((0..16).map(|n| (0x1140 + 4 * n, 0)));
    v.extend([
        (0x1180, 0),
        (0x1184, 0),
        (0x3010, 0),
        (0x3014, 0x0003_0000),
        (0x3018, 0x1F),
        (0x301C, 0),
        (0x3030, 0),
        (0x400C, 0x1E4),
        (0x4010, 0x8000_0000),
        (0x4014, 0),
        (0x4020, 0x0040_0000),
        (0x4024, 0x40),
        (0x4030, 0),
        (0x4034, 3),
        (0x4038, 0),
        (0x403C, 0x001F_001F),
        (0x4040, 0x53),
        (0x4044, 0),
        (0x4048, 0),
        (0x404C, 0),
        (0x4050, 0x7FE),
        (0x4054, 0),
        (0x4058, 0x1F),
        (0x405C, 0x0003_0000),
        (0x4060, 0x53),
        (0x4064, 0),
        (0x4068, 0),
        (0x406C, 0),
        (0x4070, 0x383),
        (0x4074, 0),
        (0x4078, 1),
        (0x407C, 0),
        (0x4080, 0),
        (0x4084, 1),
        (0x4088, 0),
    ]);
    v.extend((0..8).map(|n| (0x4090 + 4 * n, 0)));
    v.extend([(0x40C0, 0x200), (0x40C4, 0)]);
    v.extend((0..12).map(|n| (0x4100 + 4 * n, 0)));
    v
}

#[test]
fn worked_example_equals_the_reference_table() {
    let program = worked_example::program().unwrap();
    let words = program.bind(worked_example::fixture_address).unwrap();
    let body: Vec<(u16, u32)> = words[..104]
        .iter()
        .map(|w| (w.offset(), w.value()))
        .collect();
    assert_eq!(body, reference_body());
    // The encoded examples given under the table.
    assert_eq!(words[0].0, 0x1001_0000_000E_4004);
    assert_eq!(words[11].0, 0x0201_0000_00B1_1040);
    assert_eq!(words[55].0, 0x1001_8000_0000_4010);
    assert_eq!(words[104].0, 0);
    assert_eq!(words[105].0, 0x0101_0000_0000_0014);
    assert_eq!(words[106].0, 0x0041_0000_0000_0000);
    assert_eq!(words[107].0, 0x0081_0000_000D_0008);
    assert_eq!(&words[108..], &[RegCmd::NOP; 4]);
    // Submission facts: 112 entries, regcfg_amount 104, int_mask 0x300, amount 53.
    let t = program.tasks()[0];
    assert_eq!(
        (
            t.regcfg_amount,
            t.regcmd_count(),
            t.int_mask,
            pc_data_amount(t.regcfg_amount as usize).unwrap()
        ),
        (104, 108, 0x300, 53)
    );
    assert_eq!(program.byte_len(), 112 * 8);
}

#[test]
fn bind_rejects_unbound_misaligned_and_overflowing_addresses() {
    let program = worked_example::program().unwrap();
    assert_eq!(
        program.bind(|b| (b != worked_example::WEIGHTS).then_some(0x1000)),
        Err(Error::UnboundBuffer { buffer: 2 })
    );
    assert_eq!(
        program.bind(|b| Some(if b == worked_example::OUTPUT {
            0x1008
        } else {
            0x1000
        })),
        Err(Error::Misaligned {
            register: dpu::DstBaseAddr::NAME,
            addr: 0x1008,
            align: 16
        })
    );
    assert!(matches!(
        program.bind(|_| Some(0x1_0000_0000)),
        Err(Error::AddressOverflow { .. })
    ));
    let mut words = program.bind(|_| Some(0x1000)).unwrap();
    program.rebind(&mut words, |_| Some(0x2000)).unwrap();
    assert_eq!(words[21].value(), 0x2000, "rebind patches relocations");
    assert_eq!(words, program.bind(|_| Some(0x2000)).unwrap());
    assert!(program.rebind(&mut words[..10], |_| Some(0)).is_err());
}
