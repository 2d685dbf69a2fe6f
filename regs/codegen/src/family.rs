//! Register families (arrays) and the names of the per-field constants.
//!
//! A family is a run of registers of one block whose names differ only by a trailing
//! decimal index (`DCOMP_AMOUNT0`, `DCOMP_AMOUNT1`, ...), with consecutive indices, equally
//! spaced offsets and one field layout. regs/README.md states the rules; this file is
//! their only implementation.

use crate::model::Register;
use crate::render::{camel, snake};
use std::collections::{BTreeMap, BTreeSet};

/// One family found in a block.
pub struct Family {
    /// The name without the index and a trailing underscore: `DCOMP_AMOUNT`. The element
    /// type is its CamelCase (`DcompAmount`), the `RegArray` constant this name.
    pub name: String,
    /// Positions of the members in the block's offset-sorted register list, in order.
    pub members: Vec<usize>,
    /// The index in the first member's name (`CVT_CON1` -> 1).
    pub first_index: u32,
    /// Offset step between consecutive members, in bytes.
    pub stride: u32,
    /// The element type's field names, spelt as in the TOML, in bit order.
    pub fields: Vec<String>,
}

/// `DCOMP_AMOUNT12` -> `("DCOMP_AMOUNT", 12)`, `EW_OPERAND_0` -> `("EW_OPERAND_", 0)`.
/// `None` without a trailing number, with nothing before it, or with a leading zero.
pub fn split_index(name: &str) -> Option<(&str, u32)> {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let digits = &name[stem.len()..];
    if stem.is_empty() || digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    Some((stem, digits.parse().ok()?))
}

/// The element type's field names when `regs` (with name indices `indices`) share one
/// layout, else `None`.
///
/// One layout: the same reset value, DMA-address flag and alignment, and field by field
/// the same bits, access, value set, `minus_one` and `hex`. Field names must be equal, or
/// all be one stem plus a number that moves in step with the register index
/// (`CVT_CON1.CVT_OFFSET0` .. `CVT_CON4.CVT_OFFSET3`); the element then names the field
/// by the stem without a trailing underscore (`CVT_OFFSET`). Element names must stay
/// unique.
fn element_fields(regs: &[&Register], indices: &[u32]) -> Option<Vec<String>> {
    let first = regs[0];
    for r in &regs[1..] {
        if r.field.len() != first.field.len()
            || r.reset != first.reset
            || r.dma_address != first.dma_address
            || r.align != first.align
        {
            return None;
        }
        for (a, b) in first.field.iter().zip(&r.field) {
            if a.lo != b.lo
                || a.width != b.width
                || a.access != b.access
                || a.values != b.values
                || a.minus_one != b.minus_one
                || a.hex != b.hex
            {
                return None;
            }
        }
    }
    let mut names = Vec::new();
    for p in 0..first.field.len() {
        let member_names: Vec<&str> = regs.iter().map(|r| r.field[p].name.as_str()).collect();
        if member_names.iter().all(|n| *n == member_names[0]) {
            names.push(member_names[0].to_string());
            continue;
        }
        let mut common: Option<(&str, i64)> = None;
        for (name, &index) in member_names.iter().zip(indices) {
            let (stem, number) = split_index(name)?;
            let step = (stem, i64::from(number) - i64::from(index));
            if *common.get_or_insert(step) != step {
                return None;
            }
        }
        let stem = common?.0.trim_end_matches('_');
        if stem.is_empty() {
            return None;
        }
        names.push(stem.to_string());
    }
    let unique: BTreeSet<&String> = names.iter().collect();
    (unique.len() == names.len()).then_some(names)
}

/// The families of one block's offset-sorted registers, in offset order of their first
/// members.
///
/// Registers are grouped by the name before their index; each group, in index order, is
/// cut into runs: a run grows while the next register has the next index, the run's
/// offset step and its layout. Runs of two or more are candidates; a group gives at most
/// one family, its longest run (the first of equally long ones).
pub fn find(regs: &[Register]) -> Vec<Family> {
    let mut groups: BTreeMap<&str, Vec<(u32, usize)>> = BTreeMap::new();
    for (pos, r) in regs.iter().enumerate() {
        if let Some((stem, index)) = split_index(&r.name) {
            groups.entry(stem).or_default().push((index, pos));
        }
    }
    let mut families = Vec::new();
    for (stem, mut members) in groups {
        let name = stem.trim_end_matches('_');
        if name.is_empty() {
            continue;
        }
        members.sort();
        let mut best: Option<(usize, usize, Vec<String>)> = None;
        let mut start = 0;
        while start < members.len() {
            let mut end = start + 1;
            let mut fields = None;
            while end < members.len() {
                let (prev_index, prev) = members[end - 1];
                let (index, pos) = members[end];
                let step = regs[pos].offset.checked_sub(regs[prev].offset);
                let run_step = regs[members[start + 1].1].offset - regs[members[start].1].offset;
                if index != prev_index + 1
                    || step.is_none_or(|s| s == 0 || (end > start + 1 && s != run_step))
                {
                    break;
                }
                let run = &members[start..=end];
                let run_regs: Vec<&Register> = run.iter().map(|&(_, p)| &regs[p]).collect();
                let run_indices: Vec<u32> = run.iter().map(|&(i, _)| i).collect();
                match element_fields(&run_regs, &run_indices) {
                    Some(f) => fields = Some(f),
                    None => break,
                }
                end += 1;
            }
            if let Some(f) = fields
                && best.as_ref().is_none_or(|(s, e, _)| end - start > e - s)
            {
                best = Some((start, end, f));
            }
            start = end;
        }
        if let Some((start, end, fields)) = best {
            let run = &members[start..end];
            families.push(Family {
                name: name.to_string(),
                members: run.iter().map(|&(_, p)| p).collect(),
                first_index: run[0].0,
                stride: regs[run[1].1].offset - regs[run[0].1].offset,
                fields,
            });
        }
    }
    families.sort_by_key(|f| f.members[0]);
    families
}

/// The associated constants every register type has through its traits (`Register`,
/// `CommandRegister`, `DmaAddressRegister`). An inherent constant of the same name would
/// silently shadow them in `Type::NAME` paths, so a field never takes one of these names.
const TRAIT_CONSTS: [&str; 6] = ["INFO", "BLOCK", "OFFSET", "NAME", "TARGET", "ALIGN"];

/// The associated constant of one field.
pub struct FieldConst {
    /// The constant's name, e.g. `FEATURE_GRAINS`.
    pub name: String,
    /// Why the constant is not just the field name in upper case, if it is not.
    pub renamed_because: Option<String>,
}

/// The constant names of a register type whose fields (TOML spelling) are `fields`.
///
/// The name is the field name in upper case (a keyword needs no care: keywords are lower
/// case). It gets `_FIELD` appended when it would clash with a trait constant or with the
/// private `<FIELD>_BITS` / `<FIELD>_OFFSET` constants `bitfield-struct` makes for each
/// accessor; a clash that remains is an error.
pub fn field_consts(fields: &[String]) -> Result<Vec<FieldConst>, String> {
    let accessor_consts: BTreeMap<String, &str> = fields
        .iter()
        .flat_map(|f| {
            let upper = snake(f).to_ascii_uppercase();
            [
                (format!("{upper}_BITS"), f.as_str()),
                (format!("{upper}_OFFSET"), f.as_str()),
            ]
        })
        .collect();
    let taken = |n: &str| -> Option<String> {
        if TRAIT_CONSTS.contains(&n) {
            Some(format!("`{n}` is a register trait constant"))
        } else {
            accessor_consts
                .get(n)
                .map(|f| format!("`{n}` is the bitfield constant of field `{f}`"))
        }
    };
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for f in fields {
        let upper = f.to_ascii_uppercase();
        let c = match taken(&upper) {
            None => FieldConst {
                name: upper,
                renamed_because: None,
            },
            Some(why) => FieldConst {
                name: format!("{upper}_FIELD"),
                renamed_because: Some(why),
            },
        };
        if taken(&c.name).is_some() || !seen.insert(c.name.clone()) {
            return Err(format!(
                "field {f}: constant name {} is taken; rename the field",
                c.name
            ));
        }
        out.push(c);
    }
    Ok(out)
}

/// Names a block module already has besides its register types: the imports.
const MODULE_IMPORTS: [&str; 7] = [
    "CommandRegister",
    "DmaAddressRegister",
    "Field",
    "RegArray",
    "Register",
    "RegisterInfo",
    "bitfield",
];

/// Errors for families whose element type or constant would clash with a name the block
/// module already has (a register type, an import, another family).
pub fn check_names(regs: &[Register], families: &[Family], value_sets: &[&str]) -> Vec<String> {
    let mut errors = Vec::new();
    let mut types: BTreeSet<String> = regs.iter().map(|r| camel(&r.name)).collect();
    types.extend(MODULE_IMPORTS.iter().map(|s| s.to_string()));
    types.extend(value_sets.iter().map(|s| s.to_string()));
    let mut consts = BTreeSet::new();
    for f in families {
        let ty = camel(&f.name);
        if !types.insert(ty.clone()) {
            errors.push(format!(
                "family {}: element type {ty} clashes with a name of the block module",
                f.name
            ));
        }
        if !consts.insert(f.name.clone()) {
            errors.push(format!("family {}: constant named twice", f.name));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BlockFile, parse_bits};

    /// A register as `(name, offset, [(field, bits)])`.
    type Spec<'a> = (&'a str, u32, &'a [(&'a str, &'a str)]);

    /// Registers of one block, through the TOML schema.
    fn block(regs: &[Spec]) -> Vec<Register> {
        let mut text =
            String::from("[block]\nname = \"B\"\nbase = 0x1000\nsize = 0x1000\ndoc = \"d\"\n");
        for (name, offset, fields) in regs {
            text += &format!("[[register]]\nname = \"{name}\"\noffset = {offset}\nreset = 0\n");
            for (f, bits) in *fields {
                text += &format!(
                    "[[register.field]]\nname = \"{f}\"\nbits = \"{bits}\"\naccess = \"RW\"\ndoc = \"d\"\nsource = \"trm\"\n"
                );
            }
        }
        let mut file: BlockFile = toml::from_str(&text).unwrap();
        for r in &mut file.register {
            for f in &mut r.field {
                (f.lo, f.width) = parse_bits(&f.bits).unwrap();
            }
        }
        file.register
    }

    #[test]
    fn split_index_takes_a_trailing_number() {
        assert_eq!(split_index("DCOMP_AMOUNT12"), Some(("DCOMP_AMOUNT", 12)));
        assert_eq!(split_index("EW_OPERAND_0"), Some(("EW_OPERAND_", 0)));
        assert_eq!(split_index("CONV_CON"), None);
        assert_eq!(split_index("12"), None);
        assert_eq!(split_index("A01"), None);
    }

    #[test]
    fn a_family_strips_indices_that_move_with_the_register() {
        let regs = block(&[
            ("OTHER", 0x1000, &[("Z", "0")]),
            ("A1", 0x1010, &[("X0", "7:0"), ("Y", "8")]),
            ("A2", 0x1014, &[("X1", "7:0"), ("Y", "8")]),
            ("A3", 0x1018, &[("X2", "7:0"), ("Y", "8")]),
        ]);
        let f = find(&regs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].name, "A");
        assert_eq!(f[0].members, [1, 2, 3]);
        assert_eq!((f[0].first_index, f[0].stride), (1, 4));
        assert_eq!(f[0].fields, ["X", "Y"]);
    }

    #[test]
    fn no_family_without_one_layout_one_step_and_index_names() {
        // Same bits, unrelated field names (FC_CON1/FC_CON2).
        let names = block(&[
            ("C1", 0x1000, &[("DATA_OFFSET", "16:0")]),
            ("C2", 0x1004, &[("WEIGHT_OFFSET", "16:0")]),
        ]);
        assert!(find(&names).is_empty());
        // Field numbers that do not follow the register index.
        let numbers = block(&[
            ("D0", 0x1000, &[("V3", "3:0")]),
            ("D1", 0x1004, &[("V0", "3:0")]),
        ]);
        assert!(find(&numbers).is_empty());
        // Different bits.
        let bits = block(&[
            ("E0", 0x1000, &[("V", "3:0")]),
            ("E1", 0x1004, &[("V", "4:0")]),
        ]);
        assert!(find(&bits).is_empty());
    }

    #[test]
    fn the_longest_run_wins() {
        // G0 differs; G1..G3 are one step apart; G4 breaks the step.
        let regs = block(&[
            ("G0", 0x1000, &[("W", "31:0")]),
            ("G1", 0x1004, &[("V", "3:0")]),
            ("G2", 0x1008, &[("V", "3:0")]),
            ("G3", 0x100C, &[("V", "3:0")]),
            ("G4", 0x1020, &[("V", "3:0")]),
        ]);
        let f = find(&regs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].members, [1, 2, 3]);
    }

    #[test]
    fn constants_that_would_clash_get_a_suffix() {
        let names = |v: &[&str]| field_consts(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let c = names(&["NAME", "FOO", "FOO_BITS", "TYPE", "OFFSET_X"]).unwrap();
        let got: Vec<(&str, bool)> = c
            .iter()
            .map(|c| (c.name.as_str(), c.renamed_because.is_some()))
            .collect();
        assert_eq!(
            got,
            [
                ("NAME_FIELD", true),
                ("FOO", false),
                ("FOO_BITS_FIELD", true),
                ("TYPE", false),
                ("OFFSET_X", false)
            ]
        );
        assert!(names(&["NAME", "NAME_FIELD"]).is_err());
    }
}
