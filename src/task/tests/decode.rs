//! Refusals by name: fields the model does not represent, reserved values, and the
//! precision codes the decoders accept.

use super::*;

#[test]
fn a_reserved_pooling_method_is_named() {
    let mut regs = Snapshot::default();
    let v = ppu::OperationModeCfg::POOLING_METHOD
        .set(ppu::OperationModeCfg::new(), 3)
        .unwrap();
    regs.set(ppu::OperationModeCfg::OFFSET, v.raw());
    let e = Task::decode(&mut regs, crate::regcmd::BlockMask(0x60)).unwrap_err();
    assert_eq!(
        (e.register, e.field, e.value),
        (
            ppu::OperationModeCfg::NAME,
            ppu::OperationModeCfg::POOLING_METHOD.name(),
            3
        )
    );
}

#[test]
fn precision_codes_are_the_generated_value_set() {
    use crate::regs::values::Precision as P;
    for p in [
        Precision::Int8,
        Precision::Int16,
        Precision::Fp16,
        Precision::Bf16,
        Precision::Int4,
    ] {
        let name = P::SET.name_of(p.code()).map(str::to_lowercase);
        assert_eq!(name.as_deref(), Some(p.name()));
    }
    for p in Precision::ALL {
        assert_eq!(Precision::from_code(p.code()), Some(p));
    }
    assert_eq!(Precision::from_code(7), None);
}

/// PPU fields the model does not represent must be 0; each is refused by name.
#[test]
fn unmodelled_ppu_fields_are_named() {
    let cases: [(u16, u32, &str, &str); 5] = [
        (
            ppu::OperationModeCfg::OFFSET,
            1 << 5,
            ppu::OperationModeCfg::NAME,
            ppu::OperationModeCfg::USE_CNT.name(),
        ),
        (
            ppu::OperationModeCfg::OFFSET,
            1 << 16,
            ppu::OperationModeCfg::NAME,
            ppu::OperationModeCfg::NOTCH_ADDR.name(),
        ),
        (
            ppu::OperationModeCfg::OFFSET,
            1 << 30,
            ppu::OperationModeCfg::NAME,
            ppu::OperationModeCfg::INDEX_EN.name(),
        ),
        (
            ppu::MiscCtrl::OFFSET,
            1 << 16,
            ppu::MiscCtrl::NAME,
            ppu::MiscCtrl::SURF_LEN.name(),
        ),
        (
            ppu::DataFormat::OFFSET,
            1 << 3,
            ppu::DataFormat::NAME,
            ppu::DataFormat::DPU_FLYIN.name(),
        ),
    ];
    for (offset, value, register, field) in cases {
        let mut regs = Snapshot::from_writes([(offset, value)]);
        let e = Task::decode(&mut regs, crate::regcmd::BlockMask(0x60)).unwrap_err();
        assert_eq!((e.register, e.field), (register, field), "{e}");
    }
}
