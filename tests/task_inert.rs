//! Inert fields (docs/simulator.md, "Inert fields") of generated tasks: what a disabled
//! engine or a bypassed stage would read is recorded but held to nothing, while the same
//! value in an enabled engine is still refused by name. (The task layer may not import
//! the kernels that build these tasks, so this is an integration test.)

mod common;

use common::lowered::{fp16_add, tasks_of};
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::Role;
use rknpu_driver::kernels::ops::conv::Conv2d;
use rknpu_driver::kernels::ops::eltwise::Operand;
use rknpu_driver::regcmd::{BlockMask, TaskBuilder};
use rknpu_driver::regs::{Block, Field, Register, dpu, dpu_rdma};
use rknpu_driver::task::{Precision, RegisterFile, Snapshot, Task};

/// The register file a task's list leaves behind, with `extra` written over it.
fn with(task: &Task, extra: &[(u16, u32)]) -> Snapshot {
    let mut t = TaskBuilder::new();
    task.emit(&mut t).unwrap();
    let mut regs: Vec<(u16, u32)> = t
        .entries()
        .iter()
        .map(|e| (e.offset(), e.value()))
        .collect();
    regs.extend_from_slice(extra);
    Snapshot::from_writes(regs)
}

/// A register value with the given fields set.
fn raw<R: Register>(fields: &[(Field<R>, u32)]) -> u32 {
    fields
        .iter()
        .fold(R::from_raw(0), |r, &(f, v)| f.set(r, v).unwrap())
        .raw()
}

/// A 1×1 fp16 convolution task: MRDMA and ERDMA disabled, the EW stage bypassed.
fn conv() -> Task {
    let op = Conv2d::new(Cube::new(4, 4, 32, Precision::Fp16).unwrap(), 16, (1, 1));
    tasks_of(&op, Role::Weights).remove(0)
}

#[test]
fn a_disabled_read_engine_may_hold_anything() {
    // The crate's convolutions leave DPU_RDMA off (0x0D); rocket-userspace's start it
    // (0x1D) with every read engine disabled.
    let t = conv();
    assert!(t.dpu_rdma.is_none());
    let rdma = BlockMask::of(Block::DpuRdma).unwrap();
    let enable = BlockMask(t.enable().0 | rdma.0);
    // What rocket-userspace's board-run convolutions leave in the disabled MRDMA (the
    // fp16 widening over an int8 DPU_RDMA precision), plus addresses and notches.
    use dpu_rdma::RdmaFeatureModeCfg as M;
    let mode = raw(&[
        (M::MRDMA_DISABLE, 1),
        (M::MRDMA_FP16TOFP32_EN, 1),
        (M::BURST_LEN, 15),
    ]);
    use dpu_rdma::RdmaErdmaCfg as C;
    let erdma = raw(&[
        (C::ERDMA_DISABLE, 1),
        (C::ERDMA_DATA_SIZE, 2),
        (C::ERDMA_DATA_MODE, 1),
    ]);
    let extra = [
        (dpu_rdma::RdmaFeatureModeCfg::OFFSET, mode),
        (C::OFFSET, erdma),
        (dpu_rdma::RdmaSrcBaseAddr::OFFSET, 0x4000_0000),
        (dpu_rdma::RdmaSurfNotch::OFFSET, 0xC0),
        (dpu_rdma::RdmaEwBaseAddr::OFFSET, 0x5000_0000),
        (dpu_rdma::RdmaEwSurfStride::OFFSET, 0xC0),
        (dpu_rdma::RdmaEwSurfNotch::OFFSET, 0xC0),
        (dpu_rdma::RdmaBsBaseAddr::OFFSET, 0x6000_0000),
    ];
    let got = Task::decode(&mut with(&t, &extra), enable).expect("inert fields decode");
    let r = got.dpu_rdma.unwrap();
    assert!(r.mrdma.is_none() && r.erdma.is_none() && r.brdma.is_none());
    // The value is recorded as written.
    assert!(r.fp16_to_fp32);
}

#[test]
fn a_bypassed_ew_stage_may_hold_anything() {
    let t = conv();
    assert!(t.dpu.unwrap().ew.is_none());
    let extra = [
        (dpu::EwOpValue0::OFFSET, 0x1234_5678),
        (dpu::EwCvtScaleValue::OFFSET, 0x7),
        (dpu::LutCfg::OFFSET, 0x68),
        (dpu::LutLoEnd::OFFSET, 0x4000),
    ];
    let got = Task::decode(&mut with(&t, &extra), t.enable()).expect("inert fields decode");
    assert!(got.dpu.unwrap().ew.is_none());
}

#[test]
fn the_same_fields_are_checked_when_their_engine_runs() {
    // A flying add reads through MRDMA and ERDMA: a two-surface ERDMA mode is refused.
    let t = fp16_add(4, 2, Operand::Tensor);
    use dpu_rdma::RdmaErdmaCfg as C;
    let cfg = raw(&[
        (C::ERDMA_DATA_MODE, 1),
        (C::ERDMA_DATA_SIZE, 2),
        (C::ERDMA_SURF_MODE, 1),
    ]);
    let e = Task::decode(
        &mut with(&t, &[(dpu_rdma::RdmaErdmaCfg::OFFSET, cfg)]),
        t.enable(),
    )
    .unwrap_err();
    assert_eq!(
        (e.register, e.field),
        (
            dpu_rdma::RdmaErdmaCfg::NAME,
            dpu_rdma::RdmaErdmaCfg::ERDMA_SURF_MODE.name()
        ),
        "{e}"
    );
    // With the EW stage running, a set EW_BINARY_EN is still named.
    assert!(t.dpu.unwrap().ew.is_some());
    let ew = dpu::EwCfg::EW_BINARY_EN;
    let mut regs = with(&t, &[]);
    let now = regs.peek(dpu::EwCfg::OFFSET);
    regs.set(dpu::EwCfg::OFFSET, now | raw(&[(ew, 1)]));
    let e = Task::decode(&mut regs, t.enable()).unwrap_err();
    assert_eq!((e.register, e.field), (dpu::EwCfg::NAME, ew.name()), "{e}");
}
