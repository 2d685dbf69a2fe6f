//! Helpers of the tests that run the lower layers (task, regcmd, sim, verify) on
//! programs a generator builds: those layers may not import the kernels, so these tests
//! live here and reach both through the public API.

use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
use rknpu_driver::kernels::single::{self, SingleMatmul};
use rknpu_driver::regcmd::{BlockMask, BufferId, DmaAddr, Program, ProgramBuilder, TaskBuilder};
use rknpu_driver::task::{Cbuf, DecodeError, Precision, Snapshot, Task};

/// Two tasks of `mm` over the same A and B, each with one spare data bank (2 data + 10
/// weight banks), in one chain or (`two_chains`) in two, the second with `reuse` applied
/// to its CBUF split: the programs the simulator's and the verifier's reuse tests run.
pub fn reusing_pair(mm: &SingleMatmul, two_chains: bool, reuse: impl Fn(&mut Cbuf)) -> Program {
    let mut p = ProgramBuilder::new(single::REGCMD);
    for second in [false, true] {
        let mut task = mm.task().unwrap();
        let cbuf = &mut task.cna.as_mut().unwrap().cbuf;
        (cbuf.data_banks, cbuf.weight_banks) = (2, 10);
        if second {
            reuse(cbuf);
        }
        p.push_task(task.body().unwrap(), mm.enable());
        if two_chains {
            p.end_chain();
        }
    }
    p.build().unwrap()
}

/// The register file a task's list leaves behind.
pub fn snapshot(task: &Task) -> Snapshot {
    let mut t = TaskBuilder::new();
    task.emit(&mut t)
        .expect("the generated value fits its fields");
    Snapshot::from_writes(t.entries().iter().map(|e| (e.offset(), e.value())))
}

/// The task decoded from the register file its own list leaves behind.
pub fn round_trip(task: &Task) -> Result<Task, DecodeError> {
    Task::decode(&mut snapshot(task), task.enable())
}

/// `mm`'s task at A 0x1000, B 0x2000, C 0x3000 and E 0x4000.
pub fn matmul_task_at_0x1000(mm: &SingleMatmul) -> Task {
    let f = DmaAddr::Fixed;
    mm.task_at(f(0x1000), f(0x2000), f(0x3000), f(0x4000))
        .unwrap()
}

/// The tasks of `op` with its input at 0x10_0000, its second operand (weights, operand or
/// parameters) at 0x20_0000 and its output at 0x30_0000.
pub fn tasks_of(op: &dyn Op, second: Role) -> Vec<Task> {
    let b = Bindings::new()
        .bind(Role::Input, DmaAddr::Fixed(0x10_0000))
        .bind(second, DmaAddr::Fixed(0x20_0000))
        .bind(Role::Output, DmaAddr::Fixed(0x30_0000));
    op.tasks(&b).unwrap()
}

/// The one task of a `width` × `height` × 16 fp16 element-wise add of `operand`, as [`tasks_of`] binds.
pub fn fp16_add(width: u32, height: u32, operand: Operand) -> Task {
    let cube = Cube::new(width, height, 16, Precision::Fp16).unwrap();
    let op = Eltwise::new(EltwiseOp::Add, cube, operand).unwrap();
    tasks_of(&op, Role::Operand).remove(0)
}

/// Pushes the two K waves of a split-K int8 product onto `p`, both the task `half`
/// (native A and C): wave `i` reads `a[i]` and `b[i]` and writes its int32 partials to
/// `partials[i]`, with `spare` as its unused DMA operand; the add task that sums them
/// is the caller's.
pub fn push_k_waves(
    p: &mut ProgramBuilder,
    half: &SingleMatmul,
    (a, b, partials): ([BufferId; 2], [BufferId; 2], [BufferId; 2]),
    spare: BufferId,
) {
    let r = |id| DmaAddr::reloc(id, 0);
    for i in 0..2 {
        let body = half.body_at(r(a[i]), r(b[i]), r(partials[i]), r(spare));
        p.push_task(body.unwrap(), BlockMask::CONV);
    }
}
