//! `rknpu op`: one operation beyond matmul (convolution, element-wise, LUT activation,
//! pooling) on seeded data, on the NPU or the emulated kernel, checked against the
//! library's CPU reference of it (docs/cli.md, docs/ops.md): each subcommand builds the
//! operation from its arguments, and one generic path ([`check`]) runs any operation of
//! the `Op` contract.

use crate::matmul::open;
use crate::{Failure, usage};
use rknpu_driver::compute::ops::check_op;
use rknpu_driver::device::Device;
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::ops::contract::{self, Op};
use rknpu_driver::regcmd::Program;
use rknpu_driver::task::Precision;

/// The options every operation takes.
#[derive(clap::Args)]
pub(crate) struct Common {
    /// The device: auto (the NPU, else the emulated kernel), emu, emu:rocket,
    /// emu:vendor-0.9.6 or a node path. Default: auto.
    #[arg(long, value_name = "DEVICE")]
    device: Option<String>,
    /// The seed of the random data (default 1).
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
}

impl Common {
    pub(crate) fn seed(&self) -> u64 {
        self.seed.unwrap_or(1)
    }

    pub(crate) fn open(&self) -> Result<Device, Failure> {
        let dev = open(self.device.as_deref().unwrap_or("auto"))?;
        outln!("device: {}", dev.info());
        Ok(dev)
    }
}

/// The operations.
#[derive(clap::Subcommand)]
pub(crate) enum OpCommand {
    /// A K×K convolution (stride, padding, dilation, depthwise) of seeded data.
    ///
    /// Input H×W×C, OC kernels of KH×KW; int8 (int32 results) or fp16. Prints the
    /// program summary, the largest error against the CPU's direct convolution and OK.
    Conv(super::op_conv::ConvArgs),
    /// An element-wise operation of two seeded tensors of the same shape.
    ///
    /// add, sub, mul, max or min of two H×W×C tensors of int8, int16 or fp16. Prints the
    /// program summary, the largest error against the CPU and OK.
    Ew(super::op_ew::EwArgs),
    /// A LUT activation of a seeded tensor.
    ///
    /// Any activation of the library (--fn) of an H×W×C tensor. Prints the
    /// program summary, the largest error against the exact function (and the bound it
    /// is held to) and OK.
    Lut(super::op_lut::LutArgs),
    /// Pooling of a seeded tensor on the PPU.
    ///
    /// max, avg or min over K×K windows (stride, padding) of an H×W×C tensor. Prints the
    /// program summary, the largest error against the CPU and OK.
    Pool(super::op_pool::PoolArgs),
}

/// The input tensor's size, shared by every `rknpu op` command.
#[derive(clap::Args)]
pub(crate) struct Shape {
    /// Input height.
    #[arg(long, value_name = "H", value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub(crate) h: u32,
    /// Input width.
    #[arg(long, value_name = "W", value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub(crate) w: u32,
    /// Input channels.
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub(crate) c: u32,
}

impl Shape {
    /// The input cube of `precision`; a size the library refuses is a usage error
    /// naming `command`.
    pub(crate) fn cube(&self, precision: Precision, command: &str) -> Result<Cube, Failure> {
        Cube::new(self.w, self.h, self.c, precision).map_err(|e| usage(format!("{command}: {e}")))
    }
}

pub(crate) fn run(cmd: OpCommand) -> Result<(), Failure> {
    match cmd {
        OpCommand::Conv(a) => super::op_conv::run(a),
        OpCommand::Ew(a) => super::op_ew::run(a),
        OpCommand::Lut(a) => super::op_lut::run(a),
        OpCommand::Pool(a) => super::op_pool::run(a),
    }
}

/// Prints the program's summary line: tasks, regcmd entries, the op-enable of each.
pub(crate) fn summary(program: &Program) {
    let tasks = program.tasks();
    let mut enables: Vec<String> = tasks.iter().map(|t| format!("{:#x}", t.enable)).collect();
    enables.dedup();
    outln!(
        "program: {} task(s), {} regcmd entries, op-enable {}",
        tasks.len(),
        program.words().len(),
        enables.join(" ")
    );
}

/// Checks `op` on seeded data on the device `common` names: prints `NAME: ` and what
/// it computes, the program summary, the device, the time of the job and the verdict
/// against the operation's reference within its tolerance (`compute::ops::check_op`).
/// An operation that cannot be built from the arguments is a usage error.
pub(crate) fn check(name: &str, op: &dyn Op, common: &Common) -> Result<(), Failure> {
    let program = contract::program(op).map_err(|e| usage(format!("op {name}: {e}")))?;
    outln!("{name}: {}", op.describe());
    summary(&program);
    let dev = common.open()?;
    let c = check_op(&dev, op, common.seed()).map_err(|e| crate::matmul::fail(&e))?;
    outln!("time: submit+wait {:.3} ms", c.elapsed.as_secs_f64() * 1e3);
    verdict(c.worst, c.within, &c.basis)
}

/// Prints the error line and ends with OK, or fails with MISMATCH when an element is
/// outside its bound (`bound` says what the bound is).
pub(crate) fn verdict(err: f64, within: bool, bound: &str) -> Result<(), Failure> {
    outln!(
        "largest error: {err:.3e} ({bound}: {})",
        if within { "respected" } else { "EXCEEDED" }
    );
    if !within || err.is_nan() {
        return Err(Failure(
            1,
            "MISMATCH: the result differs from the CPU reference".into(),
        ));
    }
    outln!("OK");
    Ok(())
}
