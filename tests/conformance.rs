//! Conformance of the generated matmul programs with the vendor runtime's
//! (docs/conformance.md).
//!
//! The vendor matmul programs recorded on RK3588 boards (`../shared/captures/`, beside a
//! development checkout, absent from a fresh clone) are decoded with the library's decoder
//! into the typed task model; the matmul shape of each task is derived from that model
//! alone; the library generates its own program for that shape with [`SingleMatmul`]; and
//! the two register files are compared field by field over every register of the blocks
//! the task starts, walking the register table.
//!
//! A differing field is judged by [`allow_list`] (buffer addresses, and the prefetch and
//! CBUF choices where the vendor picks another value for the same geometry, each with a
//! check that its choice is sound), else by [`known_deviations`] (value differences of the
//! generator, pinned with both values until they are settled, and reported as such);
//! anything else fails, naming capture, task, register, field and both values.

use rknpu_driver::kernels::single::{Dtype, Layout, OutType, PostOps, SingleMatmul};
use rknpu_driver::regcmd::{self, BlockMask, DmaAddr, EntryKind, RegCmd};
use rknpu_driver::regs::{
    Block, Field, FieldInfo, REGISTERS, Register, RegisterInfo, cna, core, dpu,
};
use rknpu_driver::task::{AluOp, DpuInput, EwOp, EwSrc, Precision, RegisterFile, Snapshot, Task};
use rknpu_driver::verify;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The vendor matmul captures, by their folder under `../shared/captures/`.
const CAPTURES: [&str; 6] = [
    "allbilly-rk3588/rknn-gemm-fp16-385",
    "allbilly-rk3588/rknn-gemm-fp16-394-pcchain",
    "allbilly-rk3588/rknn-gemm-fp16-424",
    "wtwver-npu/rknn-matmul-api-demo-fp16-4x64x32",
    "wtwver-npu/rknn-matmul-api-demo-int8-4x64x32",
    "wtwver-npu/rknn-matmul-int8-4x32x32",
];

/// Where the generated programs' buffers are bound: A, B and C each at its own 16 MiB,
/// so no address can equal a capture's by accident.
fn bind_at(buffer: u32) -> u64 {
    0x1000_0000 + 0x0100_0000 * u64::from(buffer)
}

fn captures_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures");
    dir.is_dir().then_some(dir)
}

// ---------------------------------------------------------------------------------------
// Fields, named by the generated constants.

/// One field of one register: the register's offset and the field's row of the table.
#[derive(Clone, Copy)]
struct FieldRef {
    offset: u16,
    info: &'static FieldInfo,
    register: &'static str,
}

impl FieldRef {
    /// Whether `f` of `r` (a row of [`REGISTERS`]) is this field.
    fn is(&self, r: &RegisterInfo, f: &FieldInfo) -> bool {
        self.offset == r.offset && self.info == f
    }
}

fn field<R: Register>(f: Field<R>) -> FieldRef {
    FieldRef {
        offset: R::OFFSET,
        info: f.info(),
        register: R::NAME,
    }
}

/// A field that may differ, and why.
struct Allowed {
    field: FieldRef,
    why: &'static str,
}

/// The fields that may differ between a vendor program and the library's for the same
/// shape. Each is a geometry or address choice that does not change what is computed; the
/// ones that are choices of the vendor (grains, bank split, reuse) are checked for
/// soundness in [`check_choices`].
fn allow_list() -> Vec<Allowed> {
    vec![
        Allowed {
            field: field(cna::FeatureDataAddr::FEATURE_BASE_ADDR),
            why: "DMA address of A: the capture's buffer, ours bound elsewhere (tile offsets checked)",
        },
        Allowed {
            field: field(cna::DcompAddr0::DECOMPRESS_ADDR0),
            why: "DMA address of B: the capture's buffer, ours bound elsewhere (tile offsets checked)",
        },
        Allowed {
            field: field(dpu::DstBaseAddr::DST_BASE_ADDR),
            why: "DMA address of C: the capture's buffer, ours bound elsewhere (tile offsets checked)",
        },
        Allowed {
            field: field(cna::ConvCon2::FEATURE_GRAINS),
            why: "lines the CNA fetches ahead: the vendor caps them near two banks of lines, \
                  the library writes M + 1 (quirk 5); timing only, both at least 1",
        },
        Allowed {
            field: field(cna::CbufCon0::DATA_BANK),
            why: "CBUF split: the vendor keeps its first tile's split for a shorter last tile, \
                  the library sizes it to the tile; both hold the tile (checked)",
        },
        Allowed {
            field: field(cna::CbufCon0::WEIGHT_BANK),
            why: "the other half of the same CBUF split (12 banks in both, checked)",
        },
        Allowed {
            field: field(cna::CbufCon0::WEIGHT_REUSE),
            why: "the vendor chain keeps the weights the previous task loaded; a standalone \
                  task loads them (checked: same weights, same banks, not the first task)",
        },
    ]
}

/// A value difference of the generator: the field, the vendor's value and the library's.
struct Deviation {
    field: FieldRef,
    vendor: u32,
    library: u32,
    note: &'static str,
}

/// Differences that are not geometry. They are reported (docs/conformance.md), not
/// allowed: each must still be observed with exactly these values, so settling one in the
/// generator makes this test name the entry to remove.
fn known_deviations() -> Vec<Deviation> {
    // None left: QD_EN (set for every precision) and OD_BYPASS (clear for int8) follow the
    // vendor's programs since they were found here.
    Vec::new()
}

// ---------------------------------------------------------------------------------------
// Decoding.

/// The capture's program: its regcmd files in task order, concatenated (each file ends in
/// its own tail, so the decoder splits them again at the op-enable entries).
fn load(dir: &Path) -> Vec<RegCmd> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with("regcmd.bin"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no regcmd file", dir.display());
    let mut words = Vec::new();
    for f in &files {
        let bytes = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        words.extend(
            regcmd::words_from_le_bytes(&bytes).unwrap_or_else(|e| panic!("{}: {e}", f.display())),
        );
    }
    words
}

/// One task as a core runs it: the blocks it starts, the registers its body writes (in
/// order), the register file when its op-enable entry arrives, and that file read into
/// the task model.
struct TaskState {
    enable: BlockMask,
    body: Vec<RegCmd>,
    regs: Snapshot,
    model: Task,
}

/// The tasks of `words` in order. Each task's writes land in one of two ping-pong register
/// groups, alternating, so an incremental task (394-pcchain's tasks 2..10) sees what the
/// task two before it left: the rule of [`verify::tasks_of_words`], whose models must be
/// the same.
fn tasks(words: &[RegCmd]) -> Result<Vec<TaskState>, String> {
    let decoded = regcmd::decode(words);
    if decoded.unknown() != 0 {
        return Err(format!(
            "{} entries the decoder does not know",
            decoded.unknown()
        ));
    }
    let mut groups = [Snapshot::default(), Snapshot::default()];
    let mut out: Vec<TaskState> = Vec::new();
    for span in &decoded.tasks {
        let Some(enable) = span.enable else {
            continue;
        };
        let group = &mut groups[out.len() % 2];
        let mut body = Vec::new();
        for e in &decoded.entries[span.start..span.start + span.body_len] {
            if let EntryKind::Write(info) = e.kind {
                group.set(info.offset, e.word.value());
                body.push(e.word);
            }
        }
        let regs = group.clone();
        let model = Task::decode(&mut group.clone(), enable)
            .map_err(|e| format!("task {}: {e}", out.len()))?;
        out.push(TaskState {
            enable,
            body,
            regs,
            model,
        });
    }
    let models = verify::tasks_of_words(words).map_err(|e| e.to_string())?;
    if models != out.iter().map(|t| t.model.clone()).collect::<Vec<_>>() {
        return Err("the ping-pong replay disagrees with verify::tasks_of_words".into());
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// The shape of a task, from its model.

fn dtype_of(p: Precision) -> Result<Dtype, String> {
    Ok(match p {
        Precision::Int8 => Dtype::Int8,
        Precision::Int4 => Dtype::Int4,
        Precision::Int16 => Dtype::Int16,
        Precision::Fp16 => Dtype::Fp16,
        Precision::Bf16 => Dtype::Bf16,
        other => return Err(format!("{other} is no convolution input")),
    })
}

fn out_of(p: Precision) -> Result<OutType, String> {
    Ok(match p {
        Precision::Int8 => OutType::Int8,
        Precision::Int16 => OutType::Int16,
        Precision::Int32 => OutType::Int32,
        Precision::Fp16 => OutType::Fp16,
        Precision::Bf16 => OutType::Bf16,
        Precision::Fp32 => OutType::Fp32,
        other => return Err(format!("{other} is no matmul output type")),
    })
}

/// The matmul a task computes, read from its model alone: M from the output atomics and
/// the feature cube (W = 1, H = M for a plain A, fetched line by line with GROUP_LINE_OFF;
/// W = M, H = 1 for a native A), K from the feature channels, N from the kernels, the
/// types from the CNA and DPU precisions, C's layout from the DPU's line notch (a plain C
/// steps over the rest of a row, a native C writes surfaces of M atoms) and the post-ops
/// from the DPU stages.
///
/// The registers hold K and N padded to 32 (the vendor writes DATAIN_CHANNEL_REAL padded
/// too), so the shape is the padded one; the library's program is the same for both.
fn shape_of(t: &Task) -> Result<SingleMatmul, String> {
    let (Some(cna), Some(_), Some(dpu)) = (&t.cna, &t.core, &t.dpu) else {
        return Err("not a convolution task (CNA, CORE and DPU)".into());
    };
    if dpu.input != DpuInput::Core {
        return Err("the DPU does not take the CORE's output".into());
    }
    let f = &cna.feature;
    let m = cna.conv.out_atomics;
    let a_layout = if f.group_line_off {
        if (f.width, f.height) != (1, m) {
            return Err(format!(
                "plain A of {}x{} pixels for {m} rows",
                f.width, f.height
            ));
        }
        Layout::Plain
    } else {
        if (f.width, f.height) != (m, 1) {
            return Err(format!(
                "native A of {}x{} pixels for {m} rows",
                f.width, f.height
            ));
        }
        Layout::Native
    };
    let c_layout = if dpu.out.notch == 0 {
        Layout::Native
    } else {
        Layout::Plain
    };
    let mut post = PostOps::default();
    if !dpu.bs.bypass {
        post.bias = dpu.bs.alu.map(|a| a.operand);
        post.scale = dpu
            .bs
            .mul
            .map(|m| (m.operand, u8::try_from(m.shift).unwrap_or(u8::MAX)));
        post.relu = dpu.bs.relu;
        post.clip = dpu.bs.relux;
    }
    if let Some(ew) = &dpu.ew {
        if ew.op != Some(EwOp::Alu(AluOp::Add)) || ew.src != EwSrc::Memory {
            return Err(format!("EW stage {ew:?} is no add of a memory operand"));
        }
        post.add = true;
    }
    let c = &dpu.out_cvt;
    if !c.is_identity() {
        let narrow = |v: u32| u16::try_from(v).unwrap_or(u16::MAX);
        post.out_cvt = Some((c.offset, narrow(c.scale), narrow(c.shift)));
    }
    Ok(SingleMatmul {
        m,
        k: f.channels_real,
        n: cna.weights.kernels,
        dtype: dtype_of(cna.precision)?,
        out: out_of(dpu.out.precision)?,
        a_layout,
        c_layout,
        post,
    })
}

/// The library's program for `mm`, bound at [`bind_at`], as one task.
fn generate(mm: &SingleMatmul) -> Result<TaskState, String> {
    let words = mm
        .program()
        .and_then(|p| p.bind(|b| Some(bind_at(b.0))))
        .map_err(|e| format!("{mm:?}: {e}"))?;
    let mut t = tasks(&words)?;
    if t.len() != 1 {
        return Err(format!("{} tasks for one SingleMatmul", t.len()));
    }
    Ok(t.remove(0))
}

// ---------------------------------------------------------------------------------------
// Comparison.

/// A field whose value differs.
struct Diff {
    register: &'static RegisterInfo,
    field: &'static FieldInfo,
    vendor: u32,
    library: u32,
}

/// Every field of every register of the started blocks, walked in the register table;
/// returns the number of fields compared and the ones that differ.
fn compare(enable: BlockMask, vendor: &Snapshot, library: &Snapshot) -> (usize, Vec<Diff>) {
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
struct Judged {
    /// Differences on the allow-list, by allow-list index.
    allowed: Vec<usize>,
    /// Known deviations, by index.
    known: Vec<usize>,
    /// Everything else, as messages.
    failures: Vec<String>,
}

fn judge(what: &str, diffs: &[Diff], allow: &[Allowed], deviations: &[Deviation]) -> Judged {
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
fn check_choices(what: &str, tasks: &[TaskState], i: usize) -> Vec<String> {
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

fn fixed(a: DmaAddr) -> Option<u64> {
    match a {
        DmaAddr::Fixed(a) => Some(u64::from(a)),
        DmaAddr::Reloc(_) => None,
    }
}

/// The tiles of a multi-task capture are the row tiles of one matmul: every task reads the
/// same B, and reads A and writes C where the library's layout of the whole M puts the
/// tile's first row. Returns the whole M.
fn check_tiles(name: &str, tasks: &[TaskState], shapes: &[SingleMatmul]) -> Result<u32, String> {
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
fn check_body(what: &str, vendor: &[RegCmd], library: &[RegCmd]) -> Option<String> {
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
struct Outcome {
    name: &'static str,
    shape: String,
    tasks: usize,
    compared: usize,
    allowed: Vec<usize>,
    known: Vec<usize>,
}

fn run_capture(
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

#[test]
fn vendor_matmul_programs_match_the_generator_field_by_field() {
    let Some(root) = captures_dir() else {
        eprintln!("note: ../shared/captures is absent (a fresh clone); nothing to compare");
        return;
    };
    let allow = allow_list();
    let deviations = known_deviations();
    let mut failures = Vec::new();
    let mut outcomes = Vec::new();
    for name in CAPTURES {
        let dir = root.join(name);
        if !dir.is_dir() {
            eprintln!("note: {name} is absent; not compared");
            continue;
        }
        if let Some(o) = run_capture(name, &dir, &allow, &deviations, &mut failures) {
            outcomes.push(o);
        }
    }
    let mut report = String::new();
    for o in &outcomes {
        let _ = writeln!(
            report,
            "{}: {}; {} task(s), {} fields compared, {} differ on the allow-list, {} known deviation(s)",
            o.name,
            o.shape,
            o.tasks,
            o.compared,
            o.allowed.len(),
            o.known.len()
        );
        for (i, a) in allow.iter().enumerate() {
            let c = o.allowed.iter().filter(|&&x| x == i).count();
            if c > 0 {
                let _ = writeln!(
                    report,
                    "    allowed  {}.{} x{c}: {}",
                    a.field.register, a.field.info.name, a.why
                );
            }
        }
        for (i, d) in deviations.iter().enumerate() {
            let c = o.known.iter().filter(|&&x| x == i).count();
            if c > 0 {
                let _ = writeln!(
                    report,
                    "    DEVIATES {}.{} vendor {} library {} x{c}: {}",
                    d.field.register, d.field.info.name, d.vendor, d.library, d.note
                );
            }
        }
    }
    eprint!("{report}");
    // Every known deviation is still there: one that is gone has been settled in the
    // generator, and its entry (and docs/conformance.md) must go too.
    if outcomes.len() == CAPTURES.len() {
        for (i, d) in deviations.iter().enumerate() {
            if !outcomes.iter().any(|o| o.known.contains(&i)) {
                failures.push(format!(
                    "known deviation {}.{} (vendor {}, library {}) no longer occurs: remove it from known_deviations and docs/conformance.md",
                    d.field.register, d.field.info.name, d.vendor, d.library
                ));
            }
        }
        for (i, a) in allow.iter().enumerate() {
            if !outcomes.iter().any(|o| o.allowed.contains(&i)) {
                failures.push(format!(
                    "allow-list entry {}.{} is never needed: remove it",
                    a.field.register, a.field.info.name
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} difference(s) outside the allow-list:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// The comparison itself, without captures.

/// `snap` with field `f` of register `R` set to `v`.
fn poke<R: Register>(snap: &mut Snapshot, f: Field<R>, v: u32) {
    let raw = snap.clone().value(R::OFFSET);
    let reg = f.set(R::from_raw(raw), v).unwrap();
    snap.set(R::OFFSET, reg.raw());
}

#[test]
fn a_changed_field_fails_unless_allowed_or_a_known_deviation() {
    let mm = SingleMatmul::new(5, 64, 32, Dtype::Fp16);
    let ours = generate(&mm).unwrap();
    let allow = allow_list();
    // A deviation of this test's own, to exercise the mechanism (the real list is empty).
    let deviations = vec![Deviation {
        field: field(core::MiscCfg::QD_EN),
        vendor: 0,
        library: 1,
        note: "test",
    }];

    let (n, diffs) = compare(ours.enable, &ours.regs, &ours.regs);
    assert!(n > 200, "{n} fields compared");
    assert!(diffs.is_empty());

    let mut vendor = ours.regs.clone();
    poke(&mut vendor, dpu::DataCubeNotchAddr::NOTCH_ADDR_0, 5);
    poke(
        &mut vendor,
        cna::FeatureDataAddr::FEATURE_BASE_ADDR,
        0xfff1_4000,
    );
    poke(&mut vendor, core::MiscCfg::QD_EN, 0);
    let (_, diffs) = compare(ours.enable, &vendor, &ours.regs);
    assert_eq!(diffs.len(), 3);
    let j = judge("test", &diffs, &allow, &deviations);
    assert_eq!(j.allowed.len(), 1);
    assert_eq!(j.known.len(), 1);
    assert_eq!(j.failures.len(), 1, "{:?}", j.failures);
    assert!(
        j.failures[0].contains("DPU.DATA_CUBE_NOTCH_ADDR.notch_addr_0 is 5 (0x5)"),
        "{}",
        j.failures[0]
    );

    // A known deviation with other values is a failure.
    let mut vendor = ours.regs.clone();
    poke(&mut vendor, core::MiscCfg::QD_EN, 1);
    let mut other = ours.regs.clone();
    poke(&mut other, core::MiscCfg::QD_EN, 0);
    let (_, diffs) = compare(ours.enable, &vendor, &other);
    let j = judge("test", &diffs, &allow, &deviations);
    assert_eq!(j.failures.len(), 1, "{:?}", j.failures);
    assert!(j.failures[0].contains("qd_en is 1"), "{}", j.failures[0]);
}

#[test]
fn the_shape_derivation_reads_generated_tasks_back() {
    let mut cases = Vec::new();
    for dtype in [
        Dtype::Int8,
        Dtype::Int4,
        Dtype::Int16,
        Dtype::Fp16,
        Dtype::Bf16,
    ] {
        for (m, k, n) in [(1, 32, 32), (4, 64, 32), (37, 100, 70), (130, 256, 96)] {
            for layouts in [
                (Layout::Plain, Layout::Plain),
                (Layout::Plain, Layout::Native),
                (Layout::Native, Layout::Native),
            ] {
                let mut mm = SingleMatmul::new(m, k, n, dtype);
                (mm.a_layout, mm.c_layout) = layouts;
                // The registers hold K and N padded.
                mm.k = mm.padded_k();
                mm.n = mm.padded_n();
                cases.push(mm);
            }
        }
    }
    let mut post = SingleMatmul::new(8, 64, 64, Dtype::Int8);
    post.post = PostOps {
        bias: Some(-3),
        scale: Some((3, 2)),
        relu: true,
        clip: Some(100),
        add: true,
        out_cvt: Some((1, 2, 3)),
    };
    cases.push(post);
    let mut fp16_out = SingleMatmul::new(8, 64, 64, Dtype::Fp16);
    fp16_out.out = OutType::Fp16;
    cases.push(fp16_out);
    let mut checked = 0;
    for mm in cases {
        if mm.check().is_err() {
            continue;
        }
        let g = generate(&mm).unwrap();
        assert_eq!(shape_of(&g.model), Ok(mm));
        checked += 1;
    }
    assert!(checked > 40, "{checked} shapes");
}
