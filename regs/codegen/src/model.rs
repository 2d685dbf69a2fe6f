//! Loading and validating `regs/*.toml`.

use crate::family::{self, Family};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The block files, in the order of the `Block` enum.
pub const BLOCK_FILES: [&str; 10] = [
    "pc", "cna", "core", "dpu", "dpu_rdma", "ppu", "ppu_rdma", "ddma", "sdma", "global",
];

/// The source tags a field may carry (regs/README.md).
pub const SOURCES: [&str; 5] = ["trm", "mesa", "capture", "experiment", "guess"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockFile {
    pub block: BlockHeader,
    #[serde(default)]
    pub register: Vec<Register>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockHeader {
    pub name: String,
    pub base: u32,
    pub size: u32,
    pub doc: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Register {
    pub name: String,
    pub offset: u32,
    pub reset: u32,
    #[serde(default)]
    pub doc: Option<String>,
    #[serde(default)]
    pub dma_address: bool,
    #[serde(default)]
    pub align: Option<u32>,
    #[serde(default)]
    pub field: Vec<Field>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Field {
    pub name: String,
    pub bits: String,
    pub access: String,
    pub doc: String,
    pub source: String,
    #[serde(default)]
    pub refs: Vec<String>,
    #[serde(default)]
    pub values: Option<String>,
    #[serde(default)]
    pub minus_one: bool,
    #[serde(default)]
    pub hex: bool,
    #[serde(default)]
    pub discrepancy: Option<String>,
    /// Parsed from `bits`.
    #[serde(skip)]
    pub lo: u32,
    #[serde(skip)]
    pub width: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValuesFile {
    pub set: Vec<ValueSet>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueSet {
    pub name: String,
    pub doc: String,
    pub source: String,
    pub values: Vec<NamedValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedValue {
    pub name: String,
    pub value: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetsFile {
    pub block: Vec<BlockTarget>,
    pub special: Vec<SpecialTarget>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockTarget {
    pub block: String,
    pub code: u32,
    pub source: String,
    #[serde(default)]
    pub refs: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecialTarget {
    pub name: String,
    pub code: u32,
    pub offset: u32,
    pub doc: String,
    pub source: String,
    #[serde(default)]
    pub refs: Vec<String>,
}

/// Everything the renderer needs, validated.
pub struct Model {
    /// Block files in enum order, with their module names.
    pub blocks: Vec<(String, BlockFile)>,
    pub values: ValuesFile,
    pub targets: TargetsFile,
    /// The register families of each block, parallel to `blocks` (empty for MMIO-only
    /// blocks: a `RegArray` is for registers a regcmd entry can write).
    pub families: Vec<Vec<Family>>,
}

impl Model {
    pub fn register_count(&self) -> usize {
        self.blocks.iter().map(|(_, b)| b.register.len()).sum()
    }
    pub fn field_count(&self) -> usize {
        self.blocks
            .iter()
            .flat_map(|(_, b)| &b.register)
            .map(|r| r.field.len())
            .sum()
    }
    pub fn target_of(&self, block: &str) -> Option<u32> {
        self.targets
            .block
            .iter()
            .find(|t| t.block == block)
            .map(|t| t.code)
    }
    pub fn value_set(&self, name: &str) -> Option<&ValueSet> {
        self.values.set.iter().find(|s| s.name == name)
    }
}

fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses `"hi:lo"` or `"bit"` into (lo, width).
pub fn parse_bits(bits: &str) -> Result<(u32, u32), String> {
    let parse = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("bad bit range {bits:?}"))
    };
    let (hi, lo) = match bits.split_once(':') {
        Some((h, l)) => (parse(h)?, parse(l)?),
        None => {
            let b = parse(bits)?;
            (b, b)
        }
    };
    if hi < lo || hi > 31 {
        return Err(format!("bad bit range {bits:?} (need 31 >= hi >= lo)"));
    }
    Ok((lo, hi - lo + 1))
}

pub fn load(dir: &Path) -> Result<Model, String> {
    let mut blocks = Vec::new();
    for module in BLOCK_FILES {
        let path = dir.join(format!("{module}.toml"));
        let mut file: BlockFile = read(&path)?;
        for reg in &mut file.register {
            for f in &mut reg.field {
                let (lo, width) = parse_bits(&f.bits)
                    .map_err(|e| format!("{module}.toml {}.{}: {e}", reg.name, f.name))?;
                f.lo = lo;
                f.width = width;
            }
            reg.field.sort_by_key(|f| f.lo);
        }
        file.register.sort_by_key(|r| r.offset);
        blocks.push((module.to_string(), file));
    }
    let values: ValuesFile = read(&dir.join("values.toml"))?;
    let targets: TargetsFile = read(&dir.join("targets.toml"))?;
    let mut model = Model {
        blocks,
        values,
        targets,
        families: Vec::new(),
    };
    validate(&model)?;
    model.families = families(&model)?;
    Ok(model)
}

/// Finds the families of every block and checks that every field constant and family
/// gets a name nothing else in its module has.
fn families(m: &Model) -> Result<Vec<Vec<Family>>, String> {
    let mut errors = Vec::new();
    let value_sets: Vec<&str> = m.values.set.iter().map(|s| s.name.as_str()).collect();
    let mut all = Vec::new();
    for (module, file) in &m.blocks {
        for r in &file.register {
            let names: Vec<String> = r.field.iter().map(|f| f.name.clone()).collect();
            if let Err(e) = family::field_consts(&names) {
                errors.push(format!("{module}.toml {}: {e}", r.name));
            }
        }
        let found = if m.target_of(&file.block.name).is_some() {
            family::find(&file.register)
        } else {
            Vec::new()
        };
        for f in &found {
            if let Err(e) = family::field_consts(&f.fields) {
                errors.push(format!("{module}.toml family {}: {e}", f.name));
            }
        }
        errors.extend(
            family::check_names(&file.register, &found, &value_sets)
                .into_iter()
                .map(|e| format!("{module}.toml: {e}")),
        );
        all.push(found);
    }
    if errors.is_empty() {
        Ok(all)
    } else {
        Err(format!(
            "{} naming problem(s) in regs/:\n  {}",
            errors.len(),
            errors.join("\n  ")
        ))
    }
}

/// The checks that make the generated table trustworthy; any failure stops generation.
fn validate(m: &Model) -> Result<(), String> {
    let mut errors = Vec::new();
    check_value_sets(m, &mut errors);
    check_targets(m, &mut errors);
    let mut offsets = BTreeMap::new();
    for (module, file) in &m.blocks {
        check_block(m, module, file, &mut offsets, &mut errors);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} problem(s) in regs/:\n  {}",
            errors.len(),
            errors.join("\n  ")
        ))
    }
}

/// Each value set has a name of its own, a known source and no value named twice.
fn check_value_sets(m: &Model, errors: &mut Vec<String>) {
    let mut set_names = BTreeSet::new();
    for s in &m.values.set {
        if !set_names.insert(s.name.as_str()) {
            errors.push(format!("value set {} defined twice", s.name));
        }
        if !SOURCES.contains(&s.source.as_str()) {
            errors.push(format!(
                "value set {}: unknown source {:?}",
                s.name, s.source
            ));
        }
        let mut seen = BTreeSet::new();
        for v in &s.values {
            if !seen.insert(v.value) {
                errors.push(format!(
                    "value set {}: value {} named twice",
                    s.name, v.value
                ));
            }
        }
    }
}

/// Every block target in targets.toml names a block that has a file.
fn check_targets(m: &Model, errors: &mut Vec<String>) {
    for t in &m.targets.block {
        if !m.blocks.iter().any(|(_, b)| b.block.name == t.block) {
            errors.push(format!("targets.toml: unknown block {}", t.block));
        }
    }
}

/// One block file: its target follows the one-hot rule and each register passes
/// `check_register`; `offsets` collects the register offsets of every block so far.
fn check_block(
    m: &Model,
    module: &str,
    file: &BlockFile,
    offsets: &mut BTreeMap<u32, String>,
    errors: &mut Vec<String>,
) {
    let b = &file.block;
    if let Some(code) = m.target_of(&b.name) {
        // the TRM and Mesa register database (docs/hardware/registers.md): one-hot bit 8 + (offset >> 12), plus bit 0.
        let rule = (1u32 << (8 + (b.base >> 12))) | 1;
        if code != rule {
            errors.push(format!(
                "{}: target 0x{code:04X} breaks the one-hot rule (0x{rule:04X})",
                b.name
            ));
        }
    }
    for r in &file.register {
        let where_ = format!("{module}.toml {}", r.name);
        check_register(m, &where_, b, r, offsets, errors);
    }
}

/// One register (`where_` names it in messages): an aligned offset of its own inside
/// the block's window, fields that do not overlap and have names of their own, a reset
/// value inside its fields, and a DMA address's shape.
fn check_register(
    m: &Model,
    where_: &str,
    b: &BlockHeader,
    r: &Register,
    offsets: &mut BTreeMap<u32, String>,
    errors: &mut Vec<String>,
) {
    if r.offset < b.base || r.offset >= b.base + b.size {
        errors.push(format!(
            "{where_}: offset 0x{:04X} outside the block window",
            r.offset
        ));
    }
    if !r.offset.is_multiple_of(4) {
        errors.push(format!(
            "{where_}: offset 0x{:04X} not 4-byte aligned",
            r.offset
        ));
    }
    if let Some(prev) = offsets.insert(r.offset, where_.to_string()) {
        errors.push(format!(
            "{where_}: offset 0x{:04X} also used by {prev}",
            r.offset
        ));
    }
    if r.field.is_empty() {
        errors.push(format!("{where_}: no fields"));
    }
    let mut used = 0u32;
    let mut names = BTreeSet::new();
    for f in &r.field {
        let mask = field_mask(f);
        if used & mask != 0 {
            errors.push(format!(
                "{where_}.{}: bits {} overlap another field",
                f.name, f.bits
            ));
        }
        used |= mask;
        if !names.insert(f.name.as_str()) {
            errors.push(format!("{where_}.{}: field named twice", f.name));
        }
        check_field(m, where_, f, errors);
    }
    if r.reset & !used != 0 {
        errors.push(format!(
            "{where_}: reset 0x{:08X} sets bits outside every field",
            r.reset
        ));
    }
    check_dma_address(where_, r, errors);
}

/// One field of the register `where_`: a known source and access, and a value set that
/// exists and fits the field.
fn check_field(m: &Model, where_: &str, f: &Field, errors: &mut Vec<String>) {
    if !SOURCES.contains(&f.source.as_str()) {
        errors.push(format!(
            "{where_}.{}: unknown source {:?}",
            f.name, f.source
        ));
    }
    if !["RW", "RO", "WO", "W1C"].contains(&f.access.as_str()) {
        errors.push(format!(
            "{where_}.{}: unknown access {:?}",
            f.name, f.access
        ));
    }
    if let Some(set) = &f.values {
        match m.value_set(set) {
            None => errors.push(format!("{where_}.{}: unknown value set {set}", f.name)),
            Some(s) => {
                if f.width > 8 {
                    errors.push(format!(
                        "{where_}.{}: value sets need fields of at most 8 bits",
                        f.name
                    ));
                }
                for v in &s.values {
                    if u64::from(v.value) >= 1u64 << f.width {
                        errors.push(format!(
                            "{where_}.{}: value {} of {set} does not fit {} bits",
                            f.name, v.name, f.width
                        ));
                    }
                }
            }
        }
    }
}

/// A DMA address register has one field ending at bit 31 and an alignment, a power of
/// two covering the field's low bit; other registers have no alignment.
fn check_dma_address(where_: &str, r: &Register, errors: &mut Vec<String>) {
    if r.dma_address {
        let full = r.field.len() == 1 && r.field[0].lo + r.field[0].width == 32;
        if !full {
            errors.push(format!(
                "{where_}: dma_address needs one field ending at bit 31"
            ));
        }
        match r.align {
            Some(a) if a.is_power_of_two() && a >= (1 << r.field[0].lo) => {}
            _ => errors.push(format!(
                "{where_}: dma_address needs align, a power of two covering the field's low bit"
            )),
        }
    } else if r.align.is_some() {
        errors.push(format!("{where_}: align without dma_address"));
    }
}

pub fn field_mask(f: &Field) -> u32 {
    (((1u64 << f.width) - 1) << f.lo) as u32
}
