//! The contract every operation implements ([`Op`]): its buffers by role, its tasks with
//! the buffers bound by role, and its CPU definition with the error it is held to.
//!
//! An operation names its tensors by [`Role`] (input, operand, weights, parameters,
//! scratch, output), never by position: the tasks read the addresses a [`Bindings`]
//! gives each role, so swapping two tensors of the same type is an error naming the
//! missing role, not a program that reads the wrong buffer. The host side of every
//! tensor is a list of `f64` values in the operation's natural order (row-major
//! `[height][width][channels]` for a cube); [`Op::pack`] lays them out as the NPU reads
//! them, [`Op::unpack`] reads a result back, and [`Op::reference`] computes what the
//! NPU must return, within [`Op::tolerance`].
//!
//! Everything generic runs through this trait: `compute::ops::run_op` and
//! `compute::ops::check_op` run any operation on a device,
//! `compute::layer::LayerBuilder::step` chains it into a layer program, the CLI's `op`
//! command checks it on seeded data, and the operations' test harness holds every one to
//! its reference on the emulated kernels (docs/architecture.md, "Adding an operation").
//!
//! ```
//! use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
//! use rknpu_driver::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
//! use rknpu_driver::kernels::ops::{self, Cube};
//! use rknpu_driver::task::Precision;
//!
//! let cube = Cube::new(4, 2, 16, Precision::Int8)?;
//! let add = Eltwise::new(EltwiseOp::Add, cube, Operand::Tensor)?;
//! // Each role at offset 0 of a buffer of its own.
//! let tasks = add.tasks(&Bindings::slots(&add.ports()?))?;
//! let program = ops::chain(&tasks)?;
//! assert_eq!(program.tasks().len(), 1);
//! // Without an operand bound, the error names the role.
//! let unbound = Bindings::new()
//!     .bind(Role::Input, ops::at(ops::INPUT, 0))
//!     .bind(Role::Output, ops::at(ops::OUTPUT, 0));
//! assert!(add.tasks(&unbound).unwrap_err().to_string().contains("operand"));
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

mod conv;
mod eltwise;
mod epilogue;
mod lut;
mod matmul;
mod pool;
mod values;

pub use epilogue::{DequantOp, RequantOp};
pub use matmul::MatmulOp;
pub use values::{pack_values, round_to, unpack_values};

use super::Cube;
use crate::error::{Error, Result};
use crate::regcmd::{BufferId, DmaAddr};
use crate::seeded::Rng;
use crate::task::{Precision, Task};
use std::collections::BTreeMap;

/// What a tensor is to an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Role {
    /// The tensor the operation reads first.
    Input,
    /// The second tensor of a two-operand operation (or a constant table it reads).
    Operand,
    /// Convolution weights.
    Weights,
    /// Per-channel parameters (bias, multipliers, scales).
    Params,
    /// Bytes the operation writes and reads back itself (a multi-pass pool's
    /// intermediates).
    Scratch,
    /// The result.
    Output,
}

impl Role {
    /// Every role, in order.
    pub const ALL: [Role; 6] = [
        Role::Input,
        Role::Operand,
        Role::Weights,
        Role::Params,
        Role::Scratch,
        Role::Output,
    ];

    /// Its lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Operand => "operand",
            Role::Weights => "weights",
            Role::Params => "params",
            Role::Scratch => "scratch",
            Role::Output => "output",
        }
    }

    /// The buffer a single operation's program keeps it in ([`Bindings::slots`]): the
    /// ids of `kernels::ops` ([`INPUT`](super::INPUT), [`OPERAND`](super::OPERAND),
    /// [`WEIGHTS`](super::WEIGHTS), [`PARAMS`](super::PARAMS),
    /// [`OUTPUT`](super::OUTPUT)) and the pool's [`SCRATCH`](super::pool::SCRATCH).
    pub const fn buffer(self) -> BufferId {
        match self {
            Role::Input => super::INPUT,
            Role::Operand => super::OPERAND,
            Role::Weights => super::WEIGHTS,
            Role::Params => super::PARAMS,
            Role::Scratch => super::pool::SCRATCH,
            Role::Output => super::OUTPUT,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How an operation uses one of its buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// The caller fills it ([`Op::pack`] of its values).
    Read,
    /// The operation's own constant bytes (a table, packed parameters), which the caller
    /// places as they are.
    Constant(Vec<u8>),
    /// The operation writes it and reads it back; nobody else looks at it.
    Scratch,
    /// The result ([`Op::unpack`] reads it).
    Write,
}

/// One buffer of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Port {
    /// Its role.
    pub role: Role,
    /// How the operation uses it.
    pub access: Access,
    /// Bytes the buffer must hold.
    pub bytes: u64,
    /// The cube it holds, when it is one in the native layout.
    pub cube: Option<Cube>,
    /// Host values it holds (elements in the operation's natural order).
    pub values: usize,
    /// The element type of those values.
    pub precision: Precision,
}

impl Port {
    /// A port holding `cube`.
    pub fn cube(role: Role, access: Access, cube: Cube) -> Port {
        Port {
            role,
            access,
            bytes: cube.bytes(),
            cube: Some(cube),
            values: cube.elems(),
            precision: cube.precision,
        }
    }

    /// A port of `bytes` bytes in a layout of the operation's own, holding `values`
    /// host values of `precision` (none for constants and scratch).
    pub fn raw(
        role: Role,
        access: Access,
        bytes: u64,
        values: usize,
        precision: Precision,
    ) -> Port {
        Port {
            role,
            access,
            bytes,
            cube: None,
            values,
            precision,
        }
    }
}

/// The addresses an operation's tasks use, by role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bindings {
    map: BTreeMap<Role, DmaAddr>,
}

impl Bindings {
    /// No role bound.
    pub fn new() -> Bindings {
        Bindings::default()
    }

    /// Every port at offset 0 of its role's buffer ([`Role::buffer`]): the layout of a
    /// single operation's program.
    pub fn slots(ports: &[Port]) -> Bindings {
        ports.iter().fold(Bindings::new(), |b, p| {
            b.bind(p.role, super::at(p.role.buffer(), 0))
        })
    }

    /// With `role` at `addr` (replacing an earlier binding of it).
    pub fn bind(mut self, role: Role, addr: DmaAddr) -> Bindings {
        self.map.insert(role, addr);
        self
    }

    /// The address of `role`: [`Error::InvalidArgument`] naming the role when it is not
    /// bound.
    pub fn get(&self, role: Role) -> Result<DmaAddr> {
        self.map
            .get(&role)
            .copied()
            .ok_or_else(|| Error::InvalidArgument {
                what: format!("no buffer bound to the operation's {role}"),
            })
    }

    /// The bound roles and their addresses, in role order.
    pub fn iter(&self) -> impl Iterator<Item = (Role, DmaAddr)> + '_ {
        self.map.iter().map(|(r, a)| (*r, *a))
    }
}

/// Host values by role: the inputs of [`Op::reference`].
pub type Values = BTreeMap<Role, Vec<f64>>;

/// The values an input is checked over: `lo + step · i` for whole `i`, up to `hi`
/// (inclusive), rounded to the port's element type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// The smallest value.
    pub lo: f64,
    /// The largest value.
    pub hi: f64,
    /// The grid.
    pub step: f64,
}

impl Sampling {
    /// Every integer of `lo..=hi`.
    pub fn integers(lo: i32, hi: i32) -> Sampling {
        Sampling {
            lo: f64::from(lo),
            hi: f64::from(hi),
            step: 1.0,
        }
    }

    /// The whole range of an integer element type (int8, int16; int32 is limited to
    /// ±2^20 so sums stay exact in f64 and fp32), else the grid of 1/64 on [−16, 16].
    pub fn of(precision: Precision) -> Sampling {
        match precision {
            Precision::Int8 => Sampling::integers(-128, 127),
            Precision::Int16 => Sampling::integers(-32768, 32767),
            Precision::Int32 => Sampling::integers(-(1 << 20), 1 << 20),
            _ => Sampling {
                lo: -16.0,
                hi: 16.0,
                step: 1.0 / 64.0,
            },
        }
    }

    fn draw(&self, rng: &mut Rng) -> f64 {
        let steps = ((self.hi - self.lo) / self.step).floor().clamp(0.0, 1e9) as i32;
        self.lo + self.step * f64::from(rng.int(0, steps))
    }
}

/// The error an operation's result may have against its reference, per element, and
/// what the bound is.
#[derive(Clone, Debug, PartialEq)]
pub struct Tolerance {
    /// The largest allowed `|result − reference|` of each element.
    pub allowed: Vec<f64>,
    /// What the bound is ("exact", "fp16 rounding of the fp32 sum", ...).
    pub basis: String,
}

impl Tolerance {
    /// The same bound for `n` elements.
    pub fn uniform(n: usize, bound: f64, basis: impl Into<String>) -> Tolerance {
        Tolerance {
            allowed: vec![bound; n],
            basis: basis.into(),
        }
    }

    /// No error allowed.
    pub fn exact(n: usize) -> Tolerance {
        Tolerance::uniform(n, 0.0, "exact")
    }
}

/// An operation: a generator of tasks over buffers named by role, with its CPU
/// definition. Implemented by element-wise operations, LUT activations, pooling,
/// convolution and the requantisation and dequantisation epilogues.
pub trait Op: std::fmt::Debug + Send + Sync {
    /// One line saying what it computes.
    fn describe(&self) -> String;

    /// Its buffers: every input it reads, its constants and scratch, and exactly one
    /// output.
    fn ports(&self) -> Result<Vec<Port>>;

    /// Its tasks, with each port at the address `bindings` gives its role.
    fn tasks(&self, bindings: &Bindings) -> Result<Vec<Task>>;

    /// Lays out the host values of an input port as the tasks read them. By default the
    /// port's cube in the native layout ([`pack_values`]).
    fn pack(&self, role: Role, values: &[f64]) -> Result<Vec<u8>> {
        pack_values(&cube_of(self, role)?, values)
    }

    /// Reads the output port's bytes back as host values. By default the port's cube
    /// ([`unpack_values`]).
    fn unpack(&self, role: Role, bytes: &[u8]) -> Result<Vec<f64>> {
        unpack_values(&cube_of(self, role)?, bytes)
    }

    /// The values an input is checked over. By default [`Sampling::of`] its element
    /// type.
    fn sampling(&self, role: Role) -> Sampling {
        let precision = self
            .ports()
            .ok()
            .and_then(|ports| ports.into_iter().find(|p| p.role == role))
            .map_or(Precision::Fp16, |p| p.precision);
        Sampling::of(precision)
    }

    /// The CPU definition: the output's host values from the input ports' values.
    fn reference(&self, inputs: &Values) -> Result<Vec<f64>>;

    /// How far the NPU's result may be from `reference` (of `inputs`). By default exact.
    fn tolerance(&self, inputs: &Values, reference: &[f64]) -> Result<Tolerance> {
        let _ = inputs;
        Ok(Tolerance::exact(reference.len()))
    }
}

/// The port of `role`, [`Error::InvalidArgument`] when the operation has none.
pub fn port<O: Op + ?Sized>(op: &O, role: Role) -> Result<Port> {
    op.ports()?
        .into_iter()
        .find(|p| p.role == role)
        .ok_or_else(|| Error::InvalidArgument {
            what: format!("{} has no {role}", op.describe()),
        })
}

/// The single output among an operation's `ports` ([`Op::ports`]).
pub fn output(ports: &[Port]) -> Result<&Port> {
    let mut outs = ports.iter().filter(|p| p.access == Access::Write);
    match (outs.next(), outs.next()) {
        (Some(p), None) => Ok(p),
        _ => Err(Error::Unsupported {
            what: "operation",
            why: "ports without exactly one output".into(),
        }),
    }
}

fn cube_of<O: Op + ?Sized>(op: &O, role: Role) -> Result<Cube> {
    port(op, role)?.cube.ok_or_else(|| Error::InvalidArgument {
        what: format!("the {role} of {} is not a cube", op.describe()),
    })
}

/// The input value `values[role]` of a reference, checked to hold `n` values.
pub fn input(values: &Values, role: Role, n: usize) -> Result<&[f64]> {
    match values.get(&role) {
        Some(v) if v.len() == n => Ok(v),
        Some(v) => Err(Error::InvalidArgument {
            what: format!("{} values for the {role}, which holds {n}", v.len()),
        }),
        None => Err(Error::InvalidArgument {
            what: format!("no values for the {role}"),
        }),
    }
}

/// Seeded values for every input port ([`Access::Read`]) of `op`, drawn from its
/// [`Op::sampling`] and rounded to each port's element type.
pub fn sample<O: Op + ?Sized>(op: &O, seed: u64) -> Result<Values> {
    let mut rng = Rng::from_seed(seed);
    let mut values = Values::new();
    for p in op.ports()? {
        if p.access != Access::Read {
            continue;
        }
        let s = op.sampling(p.role);
        let v = (0..p.values)
            .map(|_| round_to(p.precision, s.draw(&mut rng)))
            .collect::<Result<Vec<f64>>>()?;
        values.insert(p.role, v);
    }
    Ok(values)
}

/// The program of `op` alone: its tasks with every port at offset 0 of its role's buffer
/// ([`Bindings::slots`]), chained, its list in [`REGCMD`](super::REGCMD).
pub fn program<O: Op + ?Sized>(op: &O) -> Result<crate::regcmd::Program> {
    super::chain(&op.tasks(&Bindings::slots(&op.ports()?))?)
}
