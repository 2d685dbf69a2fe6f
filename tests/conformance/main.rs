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

#[path = "../common/mod.rs"]
mod common;
mod compare;
mod decode;
mod fields;

use compare::*;
use decode::*;
use fields::*;

/// The vendor matmul captures, by their folder under `../shared/captures/`.
pub(crate) const CAPTURES: [&str; 6] = [
    "allbilly-rk3588/rknn-gemm-fp16-385",
    "allbilly-rk3588/rknn-gemm-fp16-394-pcchain",
    "allbilly-rk3588/rknn-gemm-fp16-424",
    "wtwver-npu/rknn-matmul-api-demo-fp16-4x64x32",
    "wtwver-npu/rknn-matmul-api-demo-int8-4x64x32",
    "wtwver-npu/rknn-matmul-int8-4x32x32",
];

/// Where the generated programs' buffers are bound: A, B and C each at its own 16 MiB,
/// so no address can equal a capture's by accident.
pub(crate) fn bind_at(buffer: u32) -> u64 {
    0x1000_0000 + 0x0100_0000 * u64::from(buffer)
}

#[test]
fn vendor_matmul_programs_match_the_generator_field_by_field() {
    let Some(root) = common::captures_or_skip("nothing to compare") else {
        return;
    };
    let allow = allow_list();
    let deviations = known_deviations();
    let mut failures = Vec::new();
    let mut outcomes = Vec::new();
    for name in CAPTURES {
        let dir = root.join(name);
        if !dir.is_dir() {
            common::absent_capture(name);
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

/// The vendor's chained GEMM (`394-pcchain`: two full bodies, then nine short ones) is
/// what `ProgramBuilder::incremental` copies (docs/conformance.md, "Incremental bodies"):
/// each task's full body rebuilt (task 1's registers in task 1's order, with the values
/// of the task's register file) and reduced by the builder is the capture's body, entry
/// for entry, and its chain amounts are the capture's.
#[test]
fn the_incremental_builder_reproduces_the_vendor_chain() {
    let name = "allbilly-rk3588/rknn-gemm-fp16-394-pcchain";
    let Some(dir) = common::capture_or_skip(name, "nothing to check") else {
        return;
    };
    let words = load(&dir);
    let states = tasks(&words).unwrap();
    assert_eq!(states.len(), 11);
    use rknpu_driver::regs::{CommandRegister, pc};
    let order = states[1].body.clone();
    let mut p = regcmd::ProgramBuilder::new(regcmd::BufferId(0)).incremental(true);
    for s in &states {
        let mut full = regcmd::TaskBuilder::new();
        let mut regs = s.regs.clone();
        for w in &order {
            full.write_raw(w.target(), w.offset(), regs.value(w.offset()));
        }
        p.push_task(full, s.enable);
    }
    let program = p.build().unwrap();
    let bodies: Vec<Vec<RegCmd>> = program
        .tasks()
        .iter()
        .map(|t| {
            let first = t.offset as usize / 8;
            program.words()[first..first + t.regcfg_amount as usize].to_vec()
        })
        .collect();
    let lens: Vec<usize> = bodies.iter().map(Vec::len).collect();
    assert_eq!(lens, [108, 108, 13, 12, 12, 12, 12, 12, 12, 12, 17]);
    for (i, (built, s)) in bodies.iter().zip(&states).enumerate() {
        assert!(built == &s.body, "task {i}: {built:?}\nvs {:?}", s.body);
    }
    // The chain amounts: the capture's tails against the built program's.
    let amounts = |w: &[RegCmd]| -> Vec<u32> {
        w.iter()
            .filter(|e| {
                e.target() == <pc::RegisterAmounts as CommandRegister>::TARGET
                    && e.offset() == pc::RegisterAmounts::OFFSET
            })
            .map(|e| e.value())
            .collect()
    };
    assert_eq!(amounts(program.words()), amounts(&words));
}
