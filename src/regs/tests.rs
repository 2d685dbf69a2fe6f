//! Table sanity and typed-versus-table agreement for every register.

use super::generated::typed::TYPED;
use super::*;
use proptest::prelude::*;

#[test]
fn table_fields_fit_and_do_not_overlap() {
    for r in REGISTERS.iter() {
        assert!(!r.fields.is_empty(), "{} has no field", r.full_name);
        let mut used = 0u32;
        for f in r.fields {
            assert!(
                f.width >= 1 && u32::from(f.lo) + u32::from(f.width) <= 32,
                "{}.{}",
                r.full_name,
                f.name
            );
            assert_eq!(used & f.mask(), 0, "{}.{} overlaps", r.full_name, f.name);
            used |= f.mask();
            if let Some(set) = f.values {
                for v in set.values {
                    assert!(
                        v.value <= f.max(),
                        "{}.{}: {} does not fit",
                        r.full_name,
                        f.name,
                        v.name
                    );
                }
            }
        }
        assert_eq!(
            r.reset & !used,
            0,
            "{} reset sets reserved bits",
            r.full_name
        );
    }
}

#[test]
fn table_offsets_are_unique_sorted_and_inside_their_block() {
    for pair in REGISTERS.windows(2) {
        assert!(
            pair[0].offset < pair[1].offset,
            "{} / {}",
            pair[0].full_name,
            pair[1].full_name
        );
    }
    for r in REGISTERS.iter() {
        assert_eq!(r.offset % 4, 0, "{}", r.full_name);
        assert_eq!(
            Block::from_offset(r.offset),
            Some(r.block),
            "{}",
            r.full_name
        );
        assert!(r.offset >= r.block.base() && r.offset - r.block.base() < 0x1000);
        assert_eq!(r.full_name, format!("{}.{}", r.block.name(), r.name));
        assert_eq!(lookup(r.offset), Some(r));
        assert!(std::ptr::eq(lookup_name(r.full_name).unwrap(), r));
    }
    let per_block: usize = Block::ALL.iter().map(|b| b.registers().len()).sum();
    assert_eq!(per_block, REGISTERS.len());
}

#[test]
fn table_covers_the_reference() {
    // register-map.md section 3 lists 201 registers (199 of Mesa's XML plus CORE 0x3030
    // and DPU 0x40C4); every block that regcmd reaches has its target (section 4.2).
    assert_eq!(REGISTERS.len(), 201);
    assert_eq!(Block::Cna.target(), Some(0x0201));
    assert_eq!(Block::PpuRdma.target(), Some(0x8001));
    assert_eq!(Block::Ddma.target(), None);
    for b in Block::ALL {
        if let Some(t) = b.target() {
            assert_eq!(t, (1 << (8 + (b.base() >> 12))) | 1, "{b:?}");
            assert_eq!(Block::from_target(t), Some(b));
        }
    }
    assert!(lookup(0x3030).is_some() && lookup(0x40C4).is_some());
    assert!(lookup(0x1018).is_none(), "CONV_CON4 is RK3568 only");
}

#[test]
fn typed_types_carry_the_table_row() {
    assert_eq!(cna::ConvCon1::OFFSET, 0x100C);
    assert_eq!(cna::ConvCon1::NAME, "CNA.CONV_CON1");
    assert_eq!(<cna::ConvCon1 as CommandRegister>::TARGET, 0x0201);
    assert_eq!(dpu::DstBaseAddr::ALIGN, 16);
    assert_eq!(pc::InterruptMask::new().raw(), 0x1FFFF, "reset value");
    assert_eq!(core::MacGating::new().raw(), 0x0780_0800, "reset value");
    assert_eq!(
        cna::ConvCon1::from_raw(0x120).in_precision(),
        values::Precision::FP16
    );
    assert_eq!(values::Precision::from_bits(5).name(), None);
    assert_eq!(format!("{:?}", values::DpuPrecision::INT32), "INT32");
    assert_eq!(TYPED.len(), REGISTERS.len());
    for (t, r) in TYPED.iter().zip(REGISTERS.iter()) {
        assert_eq!(t.offset, r.offset);
    }
}

/// Field values for register `r` from raw random words, each masked to its field width;
/// read-only fields get 0 when `writable_only`.
fn field_values(r: &RegisterInfo, raw: &[u32], writable_only: bool) -> Vec<u32> {
    r.fields
        .iter()
        .zip(raw)
        .map(|(f, v)| {
            if writable_only && f.access == Access::Ro {
                0
            } else {
                v & f.max()
            }
        })
        .collect()
}

fn table_encode(r: &RegisterInfo, values: &[u32]) -> u32 {
    r.fields.iter().zip(values).fold(0, |raw, (f, &v)| {
        f.insert(raw, v).expect("value masked to width")
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn typed_encode_equals_table_encode(i in 0..REGISTERS.len(), raw in prop::collection::vec(any::<u32>(), 32)) {
        let r = &REGISTERS[i];
        let values = field_values(r, &raw, true);
        prop_assert_eq!((TYPED[i].encode)(&values), table_encode(r, &values), "{}", r.full_name);
    }

    #[test]
    fn fields_round_trip_through_bits(i in 0..REGISTERS.len(), raw in prop::collection::vec(any::<u32>(), 32)) {
        let r = &REGISTERS[i];
        let values = field_values(r, &raw, false);
        let bits = table_encode(r, &values);
        let table: Vec<u32> = r.fields.iter().map(|f| f.extract(bits)).collect();
        prop_assert_eq!(&table, &values);
        prop_assert_eq!(&(TYPED[i].decode)(bits), &values, "{}", r.full_name);
    }

    #[test]
    fn no_bit_is_lost(i in 0..REGISTERS.len(), bits in any::<u32>()) {
        let r = &REGISTERS[i];
        let rebuilt = r.fields.iter().fold(bits & !r.known_mask(), |acc, f| acc | (f.extract(bits) << f.lo));
        prop_assert_eq!(rebuilt, bits);
    }
}
