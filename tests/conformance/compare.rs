//! Comparing two register files field by field, and judging the differences.

use super::*;

// ---------------------------------------------------------------------------------------
// Comparison.

/// A field whose value differs.
pub(crate) struct Diff {
    pub(crate) register: &'static RegisterInfo,
    pub(crate) field: &'static FieldInfo,
    pub(crate) vendor: u32,
    pub(crate) library: u32,
}

/// Every field of every register of the started blocks, walked in the register table;
/// returns the number of fields compared and the ones that differ.
pub(crate) fn compare(
    enable: BlockMask,
    vendor: &Snapshot,
    library: &Snapshot,
) -> (usize, Vec<Diff>) {
    let blocks: Vec<Block> = enable.blocks().collect();
    let (mut vendor, mut library) = (vendor.clone(), library.clone());
    let mut compared = 0;
    let mut out = Vec::new();
    for r in REGISTERS.iter() {
        if !blocks.contains(&r.block) || r.offset >= 0x8000 {
            continue;
        }
        let (v, l) = (vendor.value(r.offset), library.value(r.offset));
        for f in r.fields {
            compared += 1;
            if f.extract(v) != f.extract(l) {
                out.push(Diff {
                    register: r,
                    field: f,
                    vendor: f.extract(v),
                    library: f.extract(l),
                });
            }
        }
    }
    (compared, out)
}

/// How the differences of one task are judged.
#[derive(Default)]
pub(crate) struct Judged {
    /// Differences on the allow-list, by allow-list index.
    pub(crate) allowed: Vec<usize>,
    /// Known deviations, by index.
    pub(crate) known: Vec<usize>,
    /// Everything else, as messages.
    pub(crate) failures: Vec<String>,
}

pub(crate) fn judge(
    what: &str,
    diffs: &[Diff],
    allow: &[Allowed],
    deviations: &[Deviation],
) -> Judged {
    let mut j = Judged::default();
    for d in diffs {
        if let Some(i) = allow.iter().position(|a| a.field.is(d.register, d.field)) {
            j.allowed.push(i);
        } else if let Some(i) = deviations.iter().position(|k| {
            k.field.is(d.register, d.field) && k.vendor == d.vendor && k.library == d.library
        }) {
            j.known.push(i);
        } else {
            j.failures.push(format!(
                "{what}: {}.{} is {} ({:#x}) in the vendor program, {} ({:#x}) in the library's",
                d.register.full_name, d.field.name, d.vendor, d.vendor, d.library, d.library
            ));
        }
    }
    j
}

/// The vendor's choices on the allow-list are sound for the task: the bank split holds
/// the A tile and leaves at least 2 weight banks of 12, the grains are at least one line,
/// and weights are reused only from the previous task of the chain with the same weights
/// in the same banks.
pub(crate) fn check_choices(what: &str, tasks: &[TaskState], i: usize) -> Vec<String> {
    let mut out = Vec::new();
    let Some(cna) = tasks[i].model.cna.as_ref() else {
        return out;
    };
    let c = &cna.cbuf;
    if c.data_banks + c.weight_banks > 12 || c.weight_banks < 2 {
        out.push(format!(
            "{what}: CBUF split {} data + {} weight banks",
            c.data_banks, c.weight_banks
        ));
    }
    let cube = cna.feature.cube_bytes(cna.precision);
    if cube > c.data_bytes() {
        out.push(format!(
            "{what}: A tile of {cube} bytes in {} data banks",
            c.data_banks
        ));
    }
    if cna.feature.grains == 0 {
        out.push(format!("{what}: FEATURE_GRAINS 0"));
    }
    if c.weight_reuse {
        let prev = i.checked_sub(1).and_then(|p| tasks[p].model.cna.as_ref());
        let same = prev.is_some_and(|p| {
            p.weights == cna.weights
                && p.kernel_bytes() == cna.kernel_bytes()
                && (p.cbuf.data_banks, p.cbuf.weight_banks) == (c.data_banks, c.weight_banks)
        });
        if !same {
            out.push(format!(
                "{what}: WEIGHT_REUSE without the previous task loading the same weights into the same banks"
            ));
        }
    }
    out
}

pub(crate) fn fixed(a: DmaAddr) -> Option<u64> {
    match a {
        DmaAddr::Fixed(a) => Some(u64::from(a)),
        DmaAddr::Reloc(_) => None,
    }
}

/// The tiles of a multi-task capture are the row tiles of one matmul: every task reads the
/// same B, and reads A and writes C where the library's layout of the whole M puts the
/// tile's first row. Returns the whole M.
pub(crate) fn check_tiles(
    name: &str,
    tasks: &[TaskState],
    shapes: &[SingleMatmul],
) -> Result<u32, String> {
    let m: u32 = shapes.iter().map(|s| s.m).sum();
    let whole = SingleMatmul { m, ..shapes[0] };
    let addrs = |t: &TaskState| {
        let cna = t.model.cna.as_ref()?;
        let dpu = t.model.dpu.as_ref()?;
        Some((
            fixed(cna.feature.addr)?,
            fixed(cna.weights.addr)?,
            fixed(dpu.out.addr)?,
        ))
    };
    let Some((a0, b0, c0)) = addrs(&tasks[0]) else {
        return Err(format!("{name}: task 0 has no fixed addresses"));
    };
    let mut m0 = 0;
    for (i, (t, s)) in tasks.iter().zip(shapes).enumerate() {
        if (SingleMatmul { m: s.m, ..whole }) != *s {
            return Err(format!(
                "{name} task {i}: {s:?} is no row tile of {whole:?}"
            ));
        }
        let Some((a, b, c)) = addrs(t) else {
            return Err(format!("{name} task {i}: addresses not fixed"));
        };
        let want = (
            a0 + whole.a_offset(m0, 0) as u64,
            b0,
            c0 + whole.c_offset(m0, 0) as u64,
        );
        if (a, b, c) != want {
            return Err(format!(
                "{name} task {i} (rows {m0}..{}): A, B, C at {a:#x}, {b:#x}, {c:#x}; \
                 the row tile is at {:#x}, {:#x}, {:#x}",
                m0 + s.m,
                want.0,
                want.1,
                want.2
            ));
        }
        m0 += s.m;
    }
    Ok(m)
}

/// A full vendor body writes the registers the library's body writes, in the same order
/// with the same targets; an incremental one writes a subset of them.
pub(crate) fn check_body(what: &str, vendor: &[RegCmd], library: &[RegCmd]) -> Option<String> {
    let key = |w: &RegCmd| (w.target(), w.offset());
    let v: Vec<_> = vendor.iter().map(key).collect();
    let l: Vec<_> = library.iter().map(key).collect();
    if v.len() >= l.len() {
        (v != l).then(|| format!("{what}: the full body writes other registers or another order"))
    } else {
        v.iter().find(|k| !l.contains(k)).map(|k| {
            format!("{what}: the incremental body writes {k:x?}, which the library's does not")
        })
    }
}

/// What one capture gave.
pub(crate) struct Outcome {
    pub(crate) name: &'static str,
    pub(crate) shape: String,
    pub(crate) tasks: usize,
    pub(crate) compared: usize,
    pub(crate) allowed: Vec<usize>,
    pub(crate) known: Vec<usize>,
}

pub(crate) fn run_capture(
    name: &'static str,
    dir: &Path,
    allow: &[Allowed],
    deviations: &[Deviation],
    failures: &mut Vec<String>,
) -> Option<Outcome> {
    let vendor = match tasks(&load(dir)) {
        Ok(t) => t,
        Err(e) => {
            failures.push(format!("{name}: {e}"));
            return None;
        }
    };
    let mut outcome = Outcome {
        name,
        shape: String::new(),
        tasks: vendor.len(),
        compared: 0,
        allowed: Vec::new(),
        known: Vec::new(),
    };
    let mut shapes = Vec::new();
    for (i, v) in vendor.iter().enumerate() {
        let what = format!("{name} task {i}");
        let generated = shape_of(&v.model).and_then(|mm| {
            let g = generate(&mm)?;
            // The derivation reads the library's own task back to the same shape.
            match shape_of(&g.model) {
                Ok(back) if back == mm => Ok((mm, g)),
                Ok(back) => Err(format!(
                    "the generated task reads back as {back:?}, not {mm:?}"
                )),
                Err(e) => Err(format!("the generated task: {e}")),
            }
        });
        let (mm, ours) = match generated {
            Ok(x) => x,
            Err(e) => {
                failures.push(format!("{what}: {e}"));
                continue;
            }
        };
        if ours.enable != v.enable {
            failures.push(format!(
                "{what}: the vendor task starts {}, the library's {}",
                v.enable, ours.enable
            ));
        }
        let (n, diffs) = compare(v.enable, &v.regs, &ours.regs);
        let j = judge(&what, &diffs, allow, deviations);
        outcome.compared += n;
        outcome.allowed.extend(&j.allowed);
        outcome.known.extend(&j.known);
        failures.extend(j.failures);
        failures.extend(check_choices(&what, &vendor, i));
        failures.extend(check_body(&what, &v.body, &ours.body));
        shapes.push(mm);
    }
    if shapes.len() == vendor.len() && !shapes.is_empty() {
        let s = &shapes[0];
        let m = if shapes.len() > 1 {
            match check_tiles(name, &vendor, &shapes) {
                Ok(m) => m,
                Err(e) => {
                    failures.push(e);
                    0
                }
            }
        } else {
            s.m
        };
        let rows: Vec<String> = shapes.iter().map(|s| s.m.to_string()).collect();
        outcome.shape = format!(
            "{m}x{}x{} {:?}->{:?}, A {:?}, C {:?}, row tiles {}",
            s.k,
            s.n,
            s.dtype,
            s.out,
            s.a_layout,
            s.c_layout,
            rows.join("+")
        );
    }
    Some(outcome)
}
