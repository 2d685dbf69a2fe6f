//! The static register table and the typed-accessor table the tests compare with it.

use super::*;

pub(super) fn render_table(m: &Model) -> String {
    let mut s = String::from(HEADER);
    s.push_str(
        "//! The static register table: blocks, every register and field, regcmd target codes.\n\n",
    );
    s.push_str("use crate::regs::values::*;\nuse crate::regs::{Access, FieldInfo, RegisterInfo, Source, SpecialTarget};\n\n");

    render_block_enum(&mut s, m);
    render_special_targets(&mut s, m);
    render_register_rows(&mut s, m);
    s
}

/// The `Block` enum and its lookups.
fn render_block_enum(s: &mut String, m: &Model) {
    s.push_str("/// A register block of one NPU core (TRM, Mesa; docs/provenance.md).\n");
    s.push_str(
        "#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]\npub enum Block {\n",
    );
    for (_, f) in &m.blocks {
        let target = match m.targets.block.iter().find(|t| t.block == f.block.name) {
            Some(t) => format!(
                " Regcmd target `0x{:04X}` (source: {}; {}).",
                t.code,
                t.source,
                t.refs.join(", ")
            ),
            None => " MMIO only.".into(),
        };
        doc_lines(
            s,
            "    ",
            &format!(
                "`{}` at `0x{:04X}`: {}{target}",
                f.block.name, f.block.base, f.block.doc
            ),
        );
        let _ = writeln!(s, "    {},", camel(&f.block.name));
    }
    s.push_str("}\n\n");
    let n = m.blocks.len();
    s.push_str("impl Block {\n");
    let _ = writeln!(
        s,
        "    /// Every block, in offset order.\n    pub const ALL: [Block; {n}] = [{}];",
        m.blocks
            .iter()
            .map(|(_, f)| format!("Block::{}", camel(&f.block.name)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let arm = |f: &dyn Fn(&crate::model::BlockFile) -> String| -> String {
        m.blocks
            .iter()
            .map(|(_, b)| format!("        Block::{} => {},\n", camel(&b.block.name), f(b)))
            .collect()
    };
    let _ = writeln!(
        s,
        "    /// The block's name as the TRM and the decoder spell it.\n    pub const fn name(self) -> &'static str {{ match self {{\n{}    }} }}",
        arm(&|b| rust_str(&b.block.name))
    );
    let _ = writeln!(
        s,
        "    /// Offset of the block inside one core's register window.\n    pub const fn base(self) -> u16 {{ match self {{\n{}    }} }}",
        arm(&|b| format!("0x{:04X}", b.block.base))
    );
    let _ = writeln!(
        s,
        "    /// The regcmd target code that writes this block, or `None` when the block is MMIO only.\n    pub const fn target(self) -> Option<u16> {{ match self {{\n{}    }} }}",
        arm(&|b| match m.target_of(&b.block.name) {
            Some(t) => format!("Some(0x{t:04X})"),
            None => "None".into(),
        })
    );
    let _ = writeln!(
        s,
        "    /// One-line description of the block.\n    pub const fn doc(self) -> &'static str {{ match self {{\n{}    }} }}",
        arm(&|b| rust_str(&b.block.doc))
    );
    // register ranges
    let mut start = 0usize;
    let mut ranges = String::new();
    for (_, b) in &m.blocks {
        let end = start + b.register.len();
        let _ = writeln!(
            ranges,
            "        Block::{} => {start}..{end},",
            camel(&b.block.name)
        );
        start = end;
    }
    let _ = writeln!(
        s,
        "    /// The block's registers, in offset order.\n    pub fn registers(self) -> &'static [RegisterInfo] {{ let range = match self {{\n{ranges}    }}; &REGISTERS[range] }}"
    );
    s.push_str("    /// The block whose window holds `offset` (bits 15:12), if there is one.\n    pub const fn from_offset(offset: u16) -> Option<Block> { match offset >> 12 {\n");
    for (_, b) in &m.blocks {
        let _ = writeln!(
            s,
            "        0x{:X} => Some(Block::{}),",
            b.block.base >> 12,
            camel(&b.block.name)
        );
    }
    s.push_str("        _ => None } }\n");
    s.push_str("    /// The block a regcmd target code writes, if it names exactly one block.\n    pub const fn from_target(code: u16) -> Option<Block> { match code {\n");
    for t in &m.targets.block {
        let _ = writeln!(
            s,
            "        0x{:04X} => Some(Block::{}),",
            t.code,
            camel(&t.block)
        );
    }
    s.push_str("        _ => None } }\n}\n\n");
}

/// The special regcmd targets.
fn render_special_targets(s: &mut String, m: &Model) {
    for t in &m.targets.special {
        doc_lines(
            s,
            "",
            &format!("Regcmd target of the `{}` entry: {}", t.name, t.doc),
        );
        let _ = writeln!(s, "pub const TARGET_{}: u16 = 0x{:04X};", t.name, t.code);
    }
    s.push_str("\n/// The regcmd entries that are not a write to one block's register (regs/targets.toml).\npub static SPECIAL_TARGETS: &[SpecialTarget] = &[\n");
    for t in &m.targets.special {
        let _ = writeln!(
            s,
            "    SpecialTarget {{ name: {}, code: 0x{:04X}, offset: 0x{:04X}, doc: {}, source: Source::{}, refs: &[{}] }},",
            rust_str(&t.name),
            t.code,
            t.offset,
            rust_str(&t.doc),
            source_variant(&t.source),
            t.refs
                .iter()
                .map(|r| rust_str(r))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    s.push_str("];\n\n");
}

/// The `REGISTERS` table, one row per register with its fields.
fn render_register_rows(s: &mut String, m: &Model) {
    let total = m.register_count();
    let _ = writeln!(
        s,
        "/// Every register of every block, sorted by offset.\npub static REGISTERS: [RegisterInfo; {total}] = ["
    );
    for (_, b) in &m.blocks {
        for r in &b.register {
            let _ = writeln!(
                s,
                "    RegisterInfo {{ block: Block::{}, name: {}, full_name: {}, type_name: {}, offset: 0x{:04X}, reset: 0x{:08X}, dma_address: {}, align: {}, fields: &[",
                camel(&b.block.name),
                rust_str(&r.name),
                rust_str(&format!("{}.{}", b.block.name, r.name)),
                rust_str(&camel(&r.name)),
                r.offset,
                r.reset,
                r.dma_address,
                r.align.unwrap_or(1)
            );
            for f in &r.field {
                let _ = writeln!(
                    s,
                    "        FieldInfo {{ name: {}, lo: {}, width: {}, access: Access::{}, source: Source::{}, refs: &[{}], values: {}, minus_one: {}, hex: {}, doc: {}, discrepancy: {} }},",
                    rust_str(&snake(&f.name)),
                    f.lo,
                    f.width,
                    access_variant(&f.access),
                    source_variant(&f.source),
                    f.refs
                        .iter()
                        .map(|r| rust_str(r))
                        .collect::<Vec<_>>()
                        .join(", "),
                    f.values
                        .as_ref()
                        .map(|v| format!("Some({v}::SET)"))
                        .unwrap_or_else(|| "None".into()),
                    f.minus_one,
                    f.hex,
                    rust_str(&f.doc),
                    f.discrepancy
                        .as_ref()
                        .map(|d| format!("Some({})", rust_str(d)))
                        .unwrap_or_else(|| "None".into())
                );
            }
            s.push_str("    ] },\n");
        }
    }
    s.push_str("];\n");
}

/// The typed encode and decode closures of one register type (writable fields in table
/// order; all fields).
fn typed_closures(path: &str, r: &Register, names: &[String]) -> (String, String) {
    let mut enc = format!("{path}::from_bits(0)");
    let mut dec = Vec::new();
    for (i, (f, name)) in r.field.iter().zip(names).enumerate() {
        let name = snake(name);
        let ty = field_type(f);
        let arg = match ty.as_str() {
            "bool" => format!("v[{i}] != 0"),
            "u8" => format!("v[{i}] as u8"),
            "u16" => format!("v[{i}] as u16"),
            "u32" => format!("v[{i}]"),
            set => format!("{set}::from_bits(v[{i}] as u8)"),
        };
        if f.access != "RO" {
            let _ = write!(enc, ".with_{name}({arg})");
        }
        dec.push(match ty.as_str() {
            "u32" => format!("r.{name}()"),
            "bool" | "u8" | "u16" => format!("u32::from(r.{name}())"),
            _ => format!("u32::from(r.{name}().into_bits())"),
        });
    }
    (
        format!("|v| {enc}.into_bits()"),
        format!(
            "|raw| {{ let r = {path}::from_bits(raw); vec![{}] }}",
            dec.join(", ")
        ),
    )
}

pub(super) fn render_typed(m: &Model) -> String {
    let mut s = String::from(HEADER);
    s.push_str("//! Typed accessors, field constants and register families behind one signature each, so tests can compare the typed API with the table.\n\n");
    s.push_str("#![allow(clippy::all, unused_variables)]\nuse crate::regs::values::*;\nuse crate::regs::{CommandRegister, Field, FieldInfo, Register, RegisterInfo};\n\n");
    s.push_str("/// Encode (writable fields, in table order) and decode (all fields) through a register's typed accessors.\npub(crate) struct TypedAccess {\n    pub offset: u16,\n    pub encode: fn(&[u32]) -> u32,\n    pub decode: fn(u32) -> Vec<u32>,\n}\n\n");
    let _ = writeln!(
        s,
        "pub(crate) static TYPED: [TypedAccess; {}] = [",
        m.register_count()
    );
    for (module, b) in &m.blocks {
        for r in &b.register {
            let path = format!("super::{module}::{}", camel(&r.name));
            let names: Vec<String> = r.field.iter().map(|f| f.name.clone()).collect();
            let (enc, dec) = typed_closures(&path, r, &names);
            let _ = writeln!(
                s,
                "    TypedAccess {{ offset: 0x{:04X}, encode: {enc}, decode: {dec} }},",
                r.offset
            );
        }
    }
    s.push_str("];\n\n");

    // Field constants of every register type and family element type.
    s.push_str("/// One generated field constant, seen through plain values.\npub(crate) struct FieldConst {\n    /// `cna::ConvCon2::FEATURE_GRAINS`.\n    pub path: &'static str,\n    /// Whether the type is a family's element type.\n    pub element: bool,\n    /// `R::INFO` of the constant's register type.\n    pub type_info: &'static RegisterInfo,\n    /// The position the generator gave the field in `type_info.fields`.\n    pub index: usize,\n    /// `info()`, `name()`, `max()` and `register()` of the constant.\n    pub info: &'static FieldInfo,\n    pub name: &'static str,\n    pub max: u32,\n    pub register: fn() -> &'static RegisterInfo,\n    /// `Field::set` on `R::from_raw(raw)`, then the new raw word, `Field::get` and `Field::extract` of it.\n    pub set_get: fn(u32, u32) -> crate::Result<(u32, u32, u32)>,\n    /// `format!(\"{:?}\")` of the constant.\n    pub debug: fn() -> String,\n}\n\n");
    s.push_str("fn set_get<R: Register>(f: Field<R>, raw: u32, value: u32) -> crate::Result<(u32, u32, u32)> {\n    let r = f.set(R::from_raw(raw), value)?;\n    Ok((r.raw(), f.get(r), f.extract(r.raw())))\n}\n\n");
    let mut consts = Vec::new();
    let mut push_consts = |path: &str, element: bool, names: &[String]| {
        let cs = field_consts(names).expect("field constant names are validated on load");
        for (j, c) in cs.iter().enumerate() {
            let k = format!("{path}::{}", c.name);
            consts.push(format!(
                "    FieldConst {{ path: {}, element: {element}, type_info: <{path} as Register>::INFO, index: {j}, info: {k}.info(), name: {k}.name(), max: {k}.max(), register: || {k}.register(), set_get: |raw, v| set_get({k}, raw, v), debug: || format!(\"{{:?}}\", {k}) }},",
                rust_str(k.trim_start_matches("super::")),
            ));
        }
    };
    for ((module, b), families) in m.blocks.iter().zip(&m.families) {
        for r in &b.register {
            let names: Vec<String> = r.field.iter().map(|f| f.name.clone()).collect();
            push_consts(
                &format!("super::{module}::{}", camel(&r.name)),
                false,
                &names,
            );
        }
        for f in families {
            push_consts(
                &format!("super::{module}::{}", camel(&f.name)),
                true,
                &f.fields,
            );
        }
    }
    let _ = writeln!(
        s,
        "pub(crate) static FIELD_CONSTS: [FieldConst; {}] = [\n{}\n];\n",
        consts.len(),
        consts.join("\n")
    );

    // Register families.
    s.push_str("/// One register family: its `RegArray` constant, its element type and its numbered member types.\npub(crate) struct FamilyAccess {\n    /// `cna::DCOMP_AMOUNT`.\n    pub path: &'static str,\n    /// `INFO` and `TARGET` of the element type.\n    pub element: &'static RegisterInfo,\n    pub element_target: u16,\n    /// `len()` and `iter()` of the `RegArray`.\n    pub len: usize,\n    pub members: fn() -> Vec<&'static RegisterInfo>,\n    /// `offset(i)` of the `RegArray` for i in 0..=len (one past the end included).\n    pub offsets: fn() -> Vec<Option<u16>>,\n    /// `INFO` and `TARGET` of the numbered member types, in order.\n    pub member_types: &'static [(&'static RegisterInfo, u16)],\n    /// Typed encode and decode through the element type, as `TypedAccess`.\n    pub encode: fn(&[u32]) -> u32,\n    pub decode: fn(u32) -> Vec<u32>,\n}\n\n");
    let mut fams = Vec::new();
    for ((module, b), families) in m.blocks.iter().zip(&m.families) {
        for f in families {
            let arr = format!("super::{module}::{}", f.name);
            let ety = format!("super::{module}::{}", camel(&f.name));
            let (enc, dec) = typed_closures(&ety, &b.register[f.members[0]], &f.fields);
            let members: Vec<String> = f
                .members
                .iter()
                .map(|&p| {
                    let t = format!("super::{module}::{}", camel(&b.register[p].name));
                    format!("(<{t} as Register>::INFO, <{t} as CommandRegister>::TARGET)")
                })
                .collect();
            fams.push(format!(
                "    FamilyAccess {{ path: {}, element: <{ety} as Register>::INFO, element_target: <{ety} as CommandRegister>::TARGET, len: {arr}.len(), members: || {arr}.iter().collect(), offsets: || (0..={arr}.len()).map(|i| {arr}.offset(i)).collect(), member_types: &[{}], encode: {enc}, decode: {dec} }},",
                rust_str(arr.trim_start_matches("super::")),
                members.join(", ")
            ));
        }
    }
    let _ = writeln!(
        s,
        "pub(crate) static FAMILIES: [FamilyAccess; {}] = [\n{}\n];",
        fams.len(),
        fams.join("\n")
    );
    s
}
