//! The captured flying element-wise tasks (`../shared/captures/`, beside a development
//! checkout, absent from a fresh clone) against `kernels::ops::eltwise` and the simulator.
//!
//! * `allbilly-rk3588/rknn-add-gemdump` (vendor runtime, fp16): every DPU-only task
//!   (02, 06, 11, 16, 21, 26) must decode to exactly the task the element-wise generator
//!   builds for the same cube and addresses, and must run on the simulator without a
//!   lint. The capture's buffers were dumped before the run (its internal feature GEM is
//!   all zero), so no board output exists to compare with: each task is run once more
//!   on seeded operands placed at its MRDMA and ERDMA addresses and its output is checked
//!   against a CPU fp16 add.
//! * `wtwver-npu/rknn-ew-9task-gemdump` (vendor, int8 data movement, EW bypassed) and
//!   `wtwver-npu/own-ew-1task-gemdump` (the author's own fp16 divide, no published
//!   result): each task must decode or be refused with a named error.

mod common;
use common::captures_or_skip;
use half::f16;
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
use rknpu_driver::regcmd::{BlockMask, DmaAddr, RegCmd, words_from_le_bytes};
use rknpu_driver::sim::{Kick, Simulator};
use rknpu_driver::task::{Precision, Snapshot, Task};
use std::path::{Path, PathBuf};

fn words(file: &Path) -> Vec<RegCmd> {
    words_from_le_bytes(&std::fs::read(file).unwrap()).unwrap()
}

/// The op-enable mask of a task list and its decoded task.
fn decode(words: &[RegCmd]) -> (BlockMask, Result<Task, String>) {
    let enable = words
        .iter()
        .find(|w| w.target() == 0x0081)
        .map_or(0, |w| w.value());
    let regs = words
        .iter()
        .filter(|w| w.offset() >= 0x1000 && w.target() != 0x0081 && w.target() != 0x0041)
        .map(|w| (w.offset(), w.value()));
    let mut snap = Snapshot::from_writes(regs);
    let mask = BlockMask(enable & 0x7F);
    (
        mask,
        Task::decode(&mut snap, mask).map_err(|e| e.to_string()),
    )
}

fn fixed(a: DmaAddr) -> u32 {
    match a {
        DmaAddr::Fixed(x) => x,
        DmaAddr::Reloc(_) => panic!("a decoded task holds fixed addresses"),
    }
}

#[test]
fn vendor_flying_fp16_adds_are_what_the_generator_builds_and_run_clean() {
    let Some(dir) = captures_or_skip("nothing to check") else {
        return;
    };
    let case = dir.join("allbilly-rk3588/rknn-add-gemdump");
    let mut checked = 0;
    for n in 0..28 {
        let file = case.join(format!("task-{n:02}.regcmd.bin"));
        let ws = words(&file);
        let (mask, task) = decode(&ws);
        if mask != BlockMask::ELEMENTWISE {
            continue;
        }
        let task = task.unwrap_or_else(|e| panic!("task {n}: {e}"));
        let (d, r) = (task.dpu.unwrap(), task.dpu_rdma.unwrap());
        let (w, h, c) = d.cube;
        let cube = Cube::new(w, h, c, Precision::Fp16).unwrap();
        let (a, b, out) = (r.mrdma.unwrap().addr, r.erdma.unwrap().addr, d.out.addr);
        let mine = Eltwise::new(EltwiseOp::Add, cube, Operand::Tensor)
            .unwrap()
            .tasks(
                &Bindings::new()
                    .bind(Role::Input, a)
                    .bind(Role::Operand, b)
                    .bind(Role::Output, out),
            )
            .unwrap();
        assert_eq!(mine.len(), 1);
        let (md, mr) = (mine[0].dpu.unwrap(), mine[0].dpu_rdma.unwrap());
        if (h, n) == (16, 2) {
            // The whole 16 x 16 tensor: every field equal.
            assert_eq!(
                mine[0], task,
                "task {n}: the generator differs from the vendor"
            );
        } else {
            // Later adds cover rows of a taller tensor and keep its strides (SURF_NOTCH,
            // EW_SURF_STRIDE/NOTCH, DST_SURF_STRIDE): every other field is the generator's.
            let strip = |mut d: rknpu_driver::task::Dpu, mut r: rknpu_driver::task::DpuRdma| {
                d.out.surf_stride = 0;
                d.out.surface_add = 0;
                r.mrdma.as_mut().unwrap().surf_notch = 0;
                let e = r.erdma.as_mut().unwrap();
                e.surf_stride = 0;
                e.surf_notch = 0;
                (d, r)
            };
            assert_eq!(strip(md, mr), strip(d, r), "task {n}");
            assert_eq!(d.out.surf_stride, d.out.surface_add);
        }

        // Run the captured list alone on seeded operands.
        let elems = cube.elems();
        let va: Vec<f16> = (0..elems)
            .map(|i| f16::from_f32((i % 97) as f32 * 0.25 - 12.0))
            .collect();
        let vb: Vec<f16> = (0..elems)
            .map(|i| f16::from_f32((i % 31) as f32 * -0.5 + 3.0))
            .collect();
        let mut sim = Simulator::new();
        let m = sim.memory_mut();
        let base = 0x4000_0000;
        let mut bytes: Vec<u8> = ws.iter().flat_map(|w| w.0.to_le_bytes()).collect();
        // The PC fetches whole 16-byte units.
        bytes.resize(bytes.len().div_ceil(16) * 16 + 16, 0);
        m.map(base, bytes).unwrap();
        m.map(fixed(a), cube.pack(&va).unwrap()).unwrap();
        m.map(fixed(b), cube.pack(&vb).unwrap()).unwrap();
        m.map_zeroed(fixed(out), cube.bytes() as usize).unwrap();
        let run = sim
            .kick(&Kick {
                task_number: Some(1),
                ..Kick::new(base, ws.len() as u32 - 4)
            })
            .unwrap();
        assert!(run.completed && run.lints.is_empty(), "task {n}: {run:?}");
        let got: Vec<f16> = cube
            .unpack(
                &sim.memory()
                    .read_vec(fixed(out), cube.bytes() as usize)
                    .unwrap(),
            )
            .unwrap();
        for i in 0..elems {
            assert_eq!(
                got[i],
                f16::from_f32(va[i].to_f32() + vb[i].to_f32()),
                "task {n} element {i}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 6, "the capture has six flying add tasks");
}

#[test]
fn other_flying_ew_captures_decode_or_are_refused_by_name() {
    let Some(dir) = captures_or_skip("nothing to check") else {
        return;
    };
    for case in [
        "wtwver-npu/rknn-ew-9task-gemdump",
        "wtwver-npu/own-ew-1task-gemdump",
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(case))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with("regcmd.bin"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{case}");
        for f in files {
            let (mask, task) = decode(&words(&f));
            match task {
                Ok(_) => eprintln!("{case} {}: decodes ({mask:?})", f.display()),
                Err(e) => {
                    // A refusal names a register and field.
                    assert!(e.contains('.'), "{case}: {e}");
                    eprintln!("{case} {}: refused: {e}", f.display());
                }
            }
        }
    }
}
