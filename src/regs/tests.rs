//! Table sanity and typed-versus-table agreement for every register.

use super::generated::typed::{FAMILIES, FIELD_CONSTS, TYPED};
use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashSet};

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
    // the model (docs/hardware/registers.md#blocks) holds 201 registers (199 of Mesa's XML plus CORE 0x3030
    // and DPU 0x40C4); every block that regcmd reaches has its target (docs/hardware/registers.md#targets).
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

/// `name` without its trailing decimal index: `DCOMP_AMOUNT12` -> `("DCOMP_AMOUNT", 12)`.
fn split_index(name: &str) -> Option<(&str, u32)> {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let number = name[stem.len()..].parse().ok()?;
    (!stem.is_empty()).then_some((stem, number))
}

/// Everything but the names that a family's members must share.
fn same_shape(a: &RegisterInfo, b: &RegisterInfo) -> bool {
    a.reset == b.reset
        && a.dma_address == b.dma_address
        && a.align == b.align
        && a.fields.len() == b.fields.len()
        && a.fields.iter().zip(b.fields).all(|(f, g)| {
            (f.lo, f.width, f.access, f.minus_one, f.hex)
                == (g.lo, g.width, g.access, g.minus_one, g.hex)
                && f.values.map(|v| v.name) == g.values.map(|v| v.name)
        })
}

#[test]
fn field_constants_are_the_table_fields() {
    let mut covered = BTreeSet::new();
    let mut element_fields = BTreeMap::<&str, usize>::new();
    for c in FIELD_CONSTS.iter() {
        let row = c.type_info;
        assert!(std::ptr::eq((c.register)(), row), "{}: register()", c.path);
        assert!(
            lookup(row.offset).is_some_and(|r| std::ptr::eq(r, row)),
            "{}: INFO is not a table row",
            c.path
        );
        let field = &row.fields[c.index];
        // By value: a constant's reference may point at a copy of the table's memory.
        assert_eq!(
            c.info, field,
            "{}: info() is not fields[{}]",
            c.path, c.index
        );
        assert_eq!(
            (c.name, c.info.lo, c.info.width, c.max),
            (field.name, field.lo, field.width, field.max()),
            "{}",
            c.path
        );
        assert_eq!(
            (c.debug)(),
            format!("{}.{}", row.full_name, field.name),
            "{}",
            c.path
        );
        // The constant is named after the field (upper case, `_FIELD` when renamed); an
        // element type's constant drops the member's index from the name.
        let ident = c.path.rsplit("::").next().unwrap();
        let ident = ident
            .strip_suffix("_FIELD")
            .unwrap_or(ident)
            .to_ascii_lowercase();
        let mut expected = field.name.trim_end_matches('_');
        if c.element && expected != ident {
            expected = split_index(expected).map_or(expected, |(s, _)| s.trim_end_matches('_'));
        }
        assert_eq!(ident, expected, "{}: named after {}", c.path, field.name);
        if c.element {
            *element_fields
                .entry(c.path.rsplit_once("::").unwrap().0)
                .or_default() += 1;
        } else {
            assert!(covered.insert((row.offset, c.index)), "{} twice", c.path);
        }
    }
    let all: BTreeSet<(u16, usize)> = REGISTERS
        .iter()
        .flat_map(|r| (0..r.fields.len()).map(move |j| (r.offset, j)))
        .collect();
    assert_eq!(
        covered, all,
        "every field of every register has one constant"
    );
    for f in FAMILIES.iter() {
        let (module, array) = f.path.split_once("::").unwrap();
        let ty = format!(
            "{module}::{}",
            REGISTERS
                .iter()
                .find(|r| std::ptr::eq(*r, f.element))
                .unwrap()
                .type_name
                .trim_end_matches(|c: char| c.is_ascii_digit())
        );
        assert_eq!(
            element_fields.get(ty.as_str()),
            Some(&f.element.fields.len()),
            "{array}: element type {ty}"
        );
    }
}

#[test]
fn field_constants_spot_checks() {
    let f = cna::ConvCon2::FEATURE_GRAINS;
    assert_eq!((f.info().lo, f.info().width, f.max()), (4, 10, 0x3FF));
    assert_eq!(f.name(), "feature_grains");
    assert_eq!(format!("{f:?}"), "CNA.CONV_CON2.feature_grains");
    assert_eq!(f.extract(0x0000_3FF0), 0x3FF);
    let v = f.set(cna::ConvCon2::new(), 7).unwrap();
    assert_eq!(
        v.feature_grains(),
        7,
        "the typed accessor sees the same bits"
    );
    assert_eq!(f.get(v), 7);
    assert_eq!(
        f.set(v, 0x400),
        Err(crate::Error::FieldOverflow {
            register: "CNA.CONV_CON2",
            field: "feature_grains",
            value: 0x400,
            max: 0x3FF
        })
    );
    // Read-only fields have a constant too; it sets raw bits.
    assert_eq!(
        cna::SStatus::STATUS_1
            .set(cna::SStatus::new(), 3)
            .unwrap()
            .raw(),
        3 << 16
    );
    // Copy, Eq and Hash need no bound on the register type.
    fn pair<R>(f: Field<R>) -> (Field<R>, Field<R>) {
        (f, f)
    }
    let (a, b) = pair(f);
    assert_eq!(a, b);
    assert_ne!(cna::ConvCon2::FEATURE_GRAINS, cna::ConvCon2::KERNEL_GROUP);
    let set: HashSet<_> = [a, b, cna::ConvCon2::KERNEL_GROUP].into_iter().collect();
    assert_eq!(set.len(), 2);
    assert_eq!(
        dpu::DstBaseAddr::DST_BASE_ADDR.max(),
        u32::MAX >> dpu::DstBaseAddr::DST_BASE_ADDR.info().lo
    );
}

#[test]
fn field_new_refuses_a_field_of_another_register() {
    let foreign = &REGISTERS[0].fields[0];
    assert!(std::panic::catch_unwind(|| Field::<cna::ConvCon2>::new(foreign)).is_err());
    let own = &cna::ConvCon2::INFO.fields[3];
    assert_eq!(
        Field::<cna::ConvCon2>::new(own),
        cna::ConvCon2::FEATURE_GRAINS
    );
}

#[test]
fn register_families_are_equally_spaced_runs_of_one_layout() {
    for f in FAMILIES.iter() {
        let members = (f.members)();
        assert!(members.len() >= 2, "{}", f.path);
        assert_eq!(f.len, members.len(), "{}: len()", f.path);
        assert_eq!(f.member_types.len(), members.len(), "{}", f.path);
        for (m, (ty, target)) in members.iter().zip(f.member_types) {
            assert!(
                std::ptr::eq(*m, *ty),
                "{}: {} out of order",
                f.path,
                m.full_name
            );
            assert_eq!(*target, f.element_target, "{}: {}", f.path, m.full_name);
        }
        let mut offsets: Vec<Option<u16>> = members.iter().map(|m| Some(m.offset)).collect();
        offsets.push(None);
        assert_eq!((f.offsets)(), offsets, "{}: offset()", f.path);
        assert!(
            std::ptr::eq(f.element, members[0]),
            "{}: element INFO",
            f.path
        );
        assert_eq!(
            Some(f.element_target),
            f.element.block.target(),
            "{}",
            f.path
        );
        let (stem, first) = split_index(members[0].name).unwrap();
        assert_eq!(
            f.path.split_once("::").unwrap().1,
            stem.trim_end_matches('_')
        );
        let stride = members[1].offset - members[0].offset;
        assert!(stride > 0);
        for (i, m) in members.iter().enumerate() {
            assert_eq!(m.block, f.element.block, "{}", m.full_name);
            assert_eq!(
                split_index(m.name),
                Some((stem, first + i as u32)),
                "{}: member {i}",
                f.path
            );
            assert_eq!(
                m.offset,
                members[0].offset + stride * i as u16,
                "{}: spacing",
                m.full_name
            );
            assert!(
                same_shape(m, f.element),
                "{}: layout differs from {}",
                m.full_name,
                f.element.full_name
            );
        }
    }
}

/// Whether the field names of a run (name index, register) agree: at each position, one
/// name, or one stem plus a number that moves with the register index. Without this,
/// `FC_CON1`/`FC_CON2` (data and weight offsets) would pass for a family.
fn names_follow_index(run: &[(u32, &RegisterInfo)]) -> bool {
    (0..run[0].1.fields.len()).all(|p| {
        let names: Vec<&str> = run.iter().map(|(_, r)| r.fields[p].name).collect();
        let steps: Option<Vec<(&str, i64)>> = run
            .iter()
            .zip(&names)
            .map(|(&(i, _), n)| split_index(n).map(|(s, k)| (s, i64::from(k) - i64::from(i))))
            .collect();
        names.iter().all(|n| *n == names[0]) || steps.is_some_and(|s| s.iter().all(|x| *x == s[0]))
    })
}

/// The families, found again from the table alone: in each regcmd block, the longest run
/// of registers with consecutive name indices, one offset step, one layout and field
/// names that follow the index, per name stem.
#[test]
fn register_families_are_every_longest_run() {
    let mut expected = BTreeSet::new();
    for block in Block::ALL.into_iter().filter(|b| b.target().is_some()) {
        let mut groups = BTreeMap::<&str, Vec<(u32, &RegisterInfo)>>::new();
        for r in block.registers() {
            if let Some((stem, i)) = split_index(r.name) {
                groups.entry(stem).or_default().push((i, r));
            }
        }
        for (_, mut regs) in groups {
            regs.sort_by_key(|&(i, _)| i);
            let mut best: &[(u32, &RegisterInfo)] = &[];
            let mut start = 0;
            while start < regs.len() {
                let mut end = start + 1;
                while end < regs.len()
                    && regs[end].0 == regs[end - 1].0 + 1
                    && regs[end].1.offset > regs[end - 1].1.offset
                    && (end == start + 1
                        || regs[end].1.offset - regs[end - 1].1.offset
                            == regs[start + 1].1.offset - regs[start].1.offset)
                    && same_shape(regs[end].1, regs[start].1)
                    && names_follow_index(&regs[start..=end])
                {
                    end += 1;
                }
                if end - start >= 2 && end - start > best.len() {
                    best = &regs[start..end];
                }
                start = end;
            }
            if !best.is_empty() {
                expected.insert((best[0].1.full_name, best.len()));
            }
        }
    }
    let generated: BTreeSet<(&str, usize)> = FAMILIES
        .iter()
        .map(|f| (f.element.full_name, f.len))
        .collect();
    assert_eq!(generated, expected);
    let names: Vec<(&str, usize)> = FAMILIES.iter().map(|f| (f.path, f.len)).collect();
    assert_eq!(
        names,
        [
            ("cna::CVT_CON", 4),
            ("cna::DCOMP_AMOUNT", 16),
            ("dpu::EW_OP_VALUE", 8)
        ]
    );
}

#[test]
fn register_arrays_spot_checks() {
    assert_eq!(cna::DCOMP_AMOUNT.len(), 16);
    assert!(!cna::DCOMP_AMOUNT.is_empty());
    assert_eq!(cna::DCOMP_AMOUNT.offset(15), Some(0x117C));
    assert_eq!(cna::CVT_CON.info(0).map(|r| r.name), Some("CVT_CON1"));
    assert_eq!(
        dpu::EW_OP_VALUE.iter().map(|r| r.offset).last(),
        Some(0x40AC)
    );
    assert_eq!(dpu::EwOpValue::NAME, "DPU.EW_OP_VALUE0");
    assert_eq!(<dpu::EwOpValue as CommandRegister>::TARGET, 0x1001);
    assert!(format!("{:?}", cna::CVT_CON).starts_with("[\"CNA.CVT_CON1\", \"CNA.CVT_CON2\""));
    let v = cna::CvtCon::new().with_cvt_offset(1).with_cvt_scale(3);
    assert_eq!(v.raw(), 0x0003_0001);
    assert_eq!(cna::CvtCon::CVT_SCALE.get(v), 3);
    assert_eq!(cna::CvtCon::CVT_SCALE.info().lo, 16);
}

#[test]
fn register_array_new_refuses_other_layouts_and_blocks() {
    assert!(
        std::panic::catch_unwind(|| RegArray::<cna::CvtCon, 1>::new([cna::ConvCon1::INFO]))
            .is_err()
    );
    // Same layout (one 32-bit field), other block.
    assert!(
        std::panic::catch_unwind(|| RegArray::<cna::DcompAmount, 1>::new([dpu::EwOpValue0::INFO]))
            .is_err()
    );
    assert_eq!(
        RegArray::<cna::DcompAmount, 1>::new([cna::DcompAmount7::INFO]).offset(0),
        Some(0x115C)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn field_set_then_get_round_trips(i in 0..FIELD_CONSTS.len(), raw in any::<u32>(), value in any::<u32>()) {
        let c = &FIELD_CONSTS[i];
        let fits = value & c.max;
        let mask = c.max << c.info.lo;
        let expected = (raw & !mask) | (fits << c.info.lo);
        prop_assert_eq!((c.set_get)(raw, fits), Ok((expected, fits, fits)), "{}", c.path);
        if c.max < u32::MAX {
            let big = value.max(c.max + 1);
            prop_assert_eq!(
                (c.set_get)(raw, big),
                Err(crate::Error::FieldOverflow {
                    register: c.type_info.full_name,
                    field: c.name,
                    value: big.into(),
                    max: c.max,
                }),
                "{}",
                c.path
            );
        }
    }

    #[test]
    fn family_element_encode_equals_table_encode(i in 0..FAMILIES.len(), raw in prop::collection::vec(any::<u32>(), 32)) {
        let f = &FAMILIES[i];
        let values = field_values(f.element, &raw, true);
        let bits = table_encode(f.element, &values);
        prop_assert_eq!((f.encode)(&values), bits, "{}", f.path);
        prop_assert_eq!((f.decode)(bits), values, "{}", f.path);
    }

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
