//! Layer programs: several operations chained into one submission, their intermediate
//! tensors kept in device buffers (docs/ops.md, "Layer programs").
//!
//! A backend describes a layer once with a [`LayerBuilder`]: its inputs, its constants
//! (weight banks, per-channel parameters), and its steps — matmuls against weight banks
//! and any operation of `kernels::ops` as a generator of tasks — each reading tensors
//! earlier steps wrote. [`LayerBuilder::build`] places every tensor (inputs and outputs
//! in buffers of their own, intermediates in one scratch buffer whose bytes are reused
//! once a tensor is dead), generates every task with its relocations, resolves them
//! once, writes the program, and runs the pre-submit verifier over the whole chain. Each
//! call then only writes the inputs, submits one job and reads the outputs: no host
//! round trip between the operations.
//!
//! ```
//! use rknpu_driver::device::Device;
//! use rknpu_driver::compute::layer::LayerBuilder;
//! use rknpu_driver::kernels::ops::Cube;
//! use rknpu_driver::kernels::single::add_task;
//! use rknpu_driver::task::Precision;
//!
//! let dev = Device::open_or_emulated()?;
//! // (a + b) + a on int32 cubes of 8 pixels × 16 channels, as two chained add tasks.
//! let cube = Cube::new(8, 1, 16, Precision::Int32)?;
//! let mut b = LayerBuilder::new(&dev);
//! let a = b.input("a", cube)?;
//! let x = b.input("b", cube)?;
//! let add = |ins: &[_], out| Ok(vec![add_task(8, 16, ins[0], ins[1], out)?]);
//! let s = b.op("a+b", &[a, x], cube, add)?;
//! let y = b.op("(a+b)+a", &[s, a], cube, add)?;
//! b.output(y)?;
//! let mut layer = b.build()?;
//! let va: Vec<i32> = (0..128).collect();
//! let vb: Vec<i32> = (0..128).map(|i| 1000 * i).collect();
//! layer.write(a, &cube.pack(&va)?)?;
//! layer.write(x, &cube.pack(&vb)?)?;
//! layer.run()?;
//! let out: Vec<i32> = cube.unpack(&layer.read(y)?)?;
//! assert_eq!(out[3], 3 + 3000 + 3);
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

use super::matmul::WeightBank;
use crate::device::{BoFlags, Device};
use crate::error::{Error, Result};
use crate::kernels::ops::Cube;
use crate::kernels::ops::contract::{MatmulOp, Op, Role};
use crate::kernels::single::OutType;
use crate::regcmd::{BufferId, DmaAddr, ProgramBuilder, words_to_le_bytes};
use crate::task::Task;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod built;
mod check;
mod operand;
mod place;
mod spread;
mod step;

use built::Held;
pub use built::{Layer, LayerStep, PendingLayer, TensorInfo};
use check::StepTensors;
use place::{REGCMD, SCRATCH};

/// A tensor of a layer: a handle its builder gave out. It carries the identity of that
/// builder (and of the layer it builds): used with another builder or layer it is an
/// [`Error::Foreign`], never another layer's tensor of the same index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tensor {
    layer: u64,
    index: usize,
}

/// The identity of the next builder: unique in the process.
static NEXT_LAYER: AtomicU64 = AtomicU64::new(1);

/// What a step's generator gets: the addresses of the tensors it reads, in the order
/// they were named, and of the tensor it writes.
type Generator = Box<dyn FnOnce(&[DmaAddr], DmaAddr) -> Result<Vec<Task>> + Send>;

/// How a matmul step reads its activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MatmulInput {
    /// The plan's own A buffer (row-major, packed by `kernels::matmul::pack`): a layer
    /// input the host writes.
    Packed,
    /// The native NC1HWC2 cube `Cube::new(m, 1, k, ..)` that an earlier step wrote.
    Native,
}

#[derive(Debug)]
enum Kind {
    /// The host writes it before each run.
    Input,
    /// A step writes it; later steps read it.
    Intermediate,
    /// Constant bytes, written once at build.
    Constant(Vec<u8>),
    /// A weight bank's buffer.
    Bank(Arc<WeightBank>),
}

#[derive(Debug)]
struct TensorDef {
    name: String,
    bytes: u64,
    cube: Option<Cube>,
    kind: Kind,
    output: bool,
}

struct StepDef {
    name: String,
    reads: Vec<Tensor>,
    writes: Tensor,
    generate: Generator,
    /// For a matmul step spread over cores: how many of its first tasks each core runs.
    spread: Option<Vec<usize>>,
}

/// Describes a layer program: tensors and the steps between them, in execution order.
pub struct LayerBuilder {
    id: u64,
    dev: Device,
    tensors: Vec<TensorDef>,
    steps: Vec<StepDef>,
    timeout: Duration,
    cores: u32,
}

impl std::fmt::Debug for LayerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayerBuilder")
            .field("id", &self.id)
            .field("tensors", &self.tensors)
            .field(
                "steps",
                &self.steps.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl LayerBuilder {
    /// An empty layer on `dev`, with a 2 s job timeout, its matmul steps free to use
    /// every core of the device.
    pub fn new(dev: &Device) -> LayerBuilder {
        LayerBuilder {
            id: NEXT_LAYER.fetch_add(1, Ordering::Relaxed),
            dev: dev.clone(),
            tensors: Vec::new(),
            steps: Vec::new(),
            timeout: Duration::from_secs(2),
            cores: u32::MAX,
        }
    }

    /// At most `cores` cores for each later matmul step (1 keeps the whole layer one
    /// chain on one core). A step is spread over several only where the cost model has
    /// it faster as a job of its own (docs/ops.md, "Layer programs").
    pub fn with_cores(mut self, cores: u32) -> LayerBuilder {
        self.cores = cores.max(1);
        self
    }

    /// The job timeout of every run.
    pub fn with_timeout(mut self, timeout: Duration) -> LayerBuilder {
        self.timeout = timeout;
        self
    }

    fn add(&mut self, name: &str, bytes: u64, cube: Option<Cube>, kind: Kind) -> Result<Tensor> {
        if bytes == 0 || bytes > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument {
                what: format!("tensor {name} of {bytes} bytes (1 ..= 2^32 - 1)"),
            });
        }
        self.tensors.push(TensorDef {
            name: name.to_string(),
            bytes,
            cube,
            kind,
            output: false,
        });
        Ok(Tensor {
            layer: self.id,
            index: self.tensors.len() - 1,
        })
    }

    /// [`Error::Foreign`] for a tensor another builder gave out.
    fn def(&self, t: Tensor) -> Result<&TensorDef> {
        match self.tensors.get(t.index) {
            Some(def) if t.layer == self.id => Ok(def),
            _ => Err(Error::Foreign {
                what: format!("{t:?} used with layer builder {}", self.id),
            }),
        }
    }

    /// An input cube the host writes before each run ([`Layer::write`]).
    pub fn input(&mut self, name: &str, cube: Cube) -> Result<Tensor> {
        self.add(name, cube.bytes(), Some(cube), Kind::Input)
    }

    /// An input of `bytes` raw bytes (a matmul's packed activations, for instance).
    pub fn input_bytes(&mut self, name: &str, bytes: usize) -> Result<Tensor> {
        self.add(name, bytes as u64, None, Kind::Input)
    }

    /// Constant bytes the steps read (per-channel parameters, tables), written once.
    pub fn constant(&mut self, name: &str, bytes: Vec<u8>) -> Result<Tensor> {
        let len = bytes.len() as u64;
        self.add(name, len, None, Kind::Constant(bytes))
    }

    /// Marks `t` as an output: it gets a buffer of its own, which [`Layer::read`] reads
    /// after a run.
    pub fn output(&mut self, t: Tensor) -> Result<()> {
        self.def(t)?;
        self.tensors[t.index].output = true;
        Ok(())
    }

    /// A step: `generate` gets the addresses of `reads` (in that order) and of the new
    /// tensor `out` it writes, and returns the tasks that compute it. Tensors are
    /// relocations; the tasks run in the chain after those of the steps before. The
    /// tasks may read only `reads` (and `out`) and write only `out`: [`LayerBuilder::build`]
    /// refuses a step whose tasks reach outside them ([`Error::LayerStep`]). A tensor of
    /// another builder is an [`Error::Foreign`].
    pub fn op<F>(&mut self, name: &str, reads: &[Tensor], out: Cube, generate: F) -> Result<Tensor>
    where
        F: FnOnce(&[DmaAddr], DmaAddr) -> Result<Vec<Task>> + Send + 'static,
    {
        self.op_bytes(name, reads, out.bytes(), Some(out), Box::new(generate))
    }

    /// [`LayerBuilder::op`] for an output of `bytes` bytes that is not a cube (a
    /// row-major result, for instance).
    pub fn op_raw<F>(
        &mut self,
        name: &str,
        reads: &[Tensor],
        bytes: usize,
        generate: F,
    ) -> Result<Tensor>
    where
        F: FnOnce(&[DmaAddr], DmaAddr) -> Result<Vec<Task>> + Send + 'static,
    {
        self.op_bytes(name, reads, bytes as u64, None, Box::new(generate))
    }

    fn op_bytes(
        &mut self,
        name: &str,
        reads: &[Tensor],
        bytes: u64,
        cube: Option<Cube>,
        generate: Generator,
    ) -> Result<Tensor> {
        for &t in reads {
            self.def(t)?;
        }
        let writes = self.add(name, bytes, cube, Kind::Intermediate)?;
        self.steps.push(StepDef {
            name: name.to_string(),
            reads: reads.to_vec(),
            writes,
            generate,
            spread: None,
        });
        Ok(writes)
    }

    /// A matmul step: `a` (M rows of the bank's K) times the bank, written as the native
    /// cube `Cube::new(m, 1, n', out)` (C's `[N/E][M][E]` layout, which later steps read
    /// as a tensor of M pixels of N channels; `n'` is N rounded up to the plan's column
    /// tiles, a multiple of 32). Any M and K the bank's layout plans: every M tile
    /// writes its rows of the cube in place, and the int32 partial sums of K waves after
    /// the first are added into it on the NPU
    /// ([`Plan::cube_tasks`](crate::kernels::matmul::Plan::cube_tasks)); only int32 partials
    /// are added there, so a float or int4 plan of several K waves is an
    /// [`Error::Unsupported`]. A bank of another device than the layer's is an
    /// [`Error::Foreign`]. `input` says whether `a` is the plan's
    /// packed A (a layer input the host writes, `kernels::matmul::pack::activations_i8`)
    /// or a native cube an earlier step wrote.
    pub fn matmul(
        &mut self,
        name: &str,
        bank: &Arc<WeightBank>,
        a: Tensor,
        m: u32,
        out: OutType,
        input: MatmulInput,
    ) -> Result<Tensor> {
        if !bank.device().same_device(&self.dev) {
            return Err(Error::Foreign {
                what: format!(
                    "matmul step {name}: a weight bank of another device than the layer's"
                ),
            });
        }
        let (plan, spread) = spread::choose_plan(&self.dev, bank.layout(), (m, out), self.cores)?;
        let per_core = spread.then(|| plan.per_core.clone());
        let plan = match self.dev.capabilities().cbuf_reuse {
            true => plan,
            false => plan.without_reuse(),
        };
        let op = MatmulOp::new(plan)?
            .with_native_input(input == MatmulInput::Native)
            .with_cube_output()?;
        let ports = op.ports()?;
        let port = |role| ports.iter().find(|p| p.role == role);
        let a_def = self.def(a)?;
        let a_need = port(Role::Input).map_or(0, |p| p.bytes);
        if a_def.bytes < a_need {
            return Err(Error::ShapeMismatch {
                what: "matmul step activations (bytes)",
                expected: a_need,
                actual: a_def.bytes,
            });
        }
        let weights = self.add(
            &format!("{name}.weights"),
            bank.layout().bytes,
            None,
            Kind::Bank(bank.clone()),
        )?;
        let y = self.step(name, op, &[(Role::Input, a), (Role::Weights, weights)])?;
        if let Some(step) = self.steps.last_mut() {
            step.spread = per_core;
        }
        Ok(y)
    }

    /// Places the tensors, generates and binds the program, checks every step's tasks
    /// against the tensors the step declares ([`Error::LayerStep`] naming the step whose
    /// task reads or writes outside them), verifies the whole chain, and allocates and
    /// fills the buffers. Errors name the step whose tasks fail.
    pub fn build(self) -> Result<Layer> {
        let LayerBuilder {
            id,
            dev,
            tensors,
            steps,
            timeout,
            cores: _,
        } = self;
        if steps.is_empty() {
            return Err(Error::InvalidArgument {
                what: "a layer of no step".into(),
            });
        }
        // Buffers: 0 the program, 1 the scratch buffer, then one per tensor that has its
        // own (inputs, outputs, constants, banks).
        let placed = place::place(&tensors, &steps);
        if placed.scratch_end > u64::from(u32::MAX) {
            return Err(Error::Unsupported {
                what: "layer",
                why: format!(
                    "intermediates of {} bytes at once; relocation offsets are 32-bit",
                    placed.scratch_end
                ),
            });
        }
        let addr = |t: Tensor| {
            let (id, off) = placed.at[t.index];
            DmaAddr::reloc(id, off as u32)
        };
        let (program, infos, uses, scaled, spreads) = generate(steps, &addr)?;
        // Buffers, then the program bound to them: in the IOMMU domain of the layer's
        // weight banks (the first one's; a layer of banks in two is refused at its job).
        let bank_domain = tensors.iter().find_map(|t| match &t.kind {
            Kind::Bank(bank) => Some(bank.buffer().iommu_domain()),
            _ => None,
        });
        let flags = match bank_domain {
            Some(d) => BoFlags::default().with_iommu_domain(d),
            None => BoFlags::default(),
        };
        let (scratch, buffers) = allocate(&dev, id, &tensors, &placed, flags)?;
        let mut regcmd = dev.alloc(program.byte_len(), flags)?;
        let regcmd_addr = regcmd.dma_addr();
        let scratch_addr = scratch.as_ref().map(|b| b.dma_addr());
        let base = |id: BufferId| {
            let a = match id {
                REGCMD => Some(regcmd_addr),
                SCRATCH => scratch_addr,
                BufferId(j) => buffers
                    .get((j as usize).checked_sub(2)?)
                    .map(|(_, h)| h.bo().dma_addr()),
            };
            a.map(u64::from)
        };
        let words = program.bind(base)?;
        // Each step against the tensors it declares: the verifier below sees only
        // buffers, and the intermediates share one.
        let span = |t: Tensor| {
            let (id, off) = placed.at[t.index];
            (base(id).unwrap_or(0) + off, tensors[t.index].bytes)
        };
        for (info, (reads, writes)) in infos.iter().zip(&uses) {
            let step = StepTensors {
                name: &info.name,
                tasks: info.tasks.clone(),
                reads: reads.iter().map(|&t| span(t)).collect(),
                writes: span(*writes),
            };
            check::check_step(&words, program.tasks(), &step)?;
        }
        regcmd.write(0, &words_to_le_bytes(&words))?;
        let jobs = match spreads.is_empty() {
            true => crate::compute::matmul::job_ranges(&dev, &words, &program)?
                .into_iter()
                .map(spread::LayerJob::chain)
                .collect(),
            false => spread::jobs(program.tasks().len(), &spreads),
        };
        let tensors = tensors
            .into_iter()
            .enumerate()
            .map(|(i, d)| TensorInfo {
                name: d.name,
                bytes: d.bytes,
                cube: d.cube,
                input: matches!(d.kind, Kind::Input),
                output: d.output,
                scratch_offset: (placed.at[i].0 == SCRATCH && !d.output).then_some(placed.at[i].1),
            })
            .collect();
        let multipliers = operand::multiplier_words(&words, &program, &infos, &scaled);
        let layer = Layer {
            id,
            dev,
            words,
            multipliers,
            program,
            regcmd,
            scratch,
            buffers,
            tensors,
            steps: infos,
            scratch_sum: placed.scratch_sum,
            timeout,
            jobs,
            last: None,
        };
        // The whole chain against the layer's buffers, once: every later run submits
        // exactly these words.
        layer
            .job(0..layer.program.tasks().len())
            .check(&layer.dev)?;
        Ok(layer)
    }
}

/// What generating a layer's steps gives: the program, each step's tasks, the tensors it
/// reads and writes, which of its tasks carry an fp16 register multiplier, and where the
/// spread steps start with their tasks per core.
type Generated = (
    crate::regcmd::Program,
    Vec<LayerStep>,
    Vec<(Vec<Tensor>, Tensor)>,
    Vec<Vec<bool>>,
    Vec<(usize, Vec<usize>)>,
);

/// Generates every step's tasks with its tensors at `addr`, in one chain of one program.
fn generate(steps: Vec<StepDef>, addr: &dyn Fn(Tensor) -> DmaAddr) -> Result<Generated> {
    let mut p = ProgramBuilder::new(REGCMD);
    let mut infos = Vec::with_capacity(steps.len());
    let mut uses = Vec::with_capacity(steps.len());
    let mut scaled: Vec<Vec<bool>> = Vec::with_capacity(steps.len());
    let mut spreads = Vec::new();
    let mut first = 0;
    for s in steps {
        let StepDef {
            name,
            reads,
            writes,
            generate,
            spread,
        } = s;
        let ins: Vec<DmaAddr> = reads.iter().map(|&t| addr(t)).collect();
        let tasks = generate(&ins, addr(writes)).map_err(|e| Error::Unsupported {
            what: "layer step",
            why: format!("{name}: {e}"),
        })?;
        if tasks.is_empty() {
            return Err(Error::InvalidArgument {
                what: format!("step {name} made no task"),
            });
        }
        for t in &tasks {
            p.push_task(t.body()?, t.enable());
        }
        scaled.push(tasks.iter().map(operand::fp16_multiplier).collect());
        if let Some(per_core) = spread {
            spreads.push((first, per_core));
        }
        infos.push(LayerStep {
            name,
            tasks: first..first + tasks.len(),
            output: writes,
        });
        uses.push((reads, writes));
        first += tasks.len();
    }
    Ok((p.build()?, infos, uses, scaled, spreads))
}

/// The buffers of the tensors that have their own, in placement order.
type Buffers = Vec<(Tensor, Held)>;

/// The layer's buffers: the scratch buffer of the intermediates (if any) and one per
/// tensor with a buffer of its own (constants written now, banks shared), all with
/// `flags`.
fn allocate(
    dev: &Device,
    id: u64,
    tensors: &[TensorDef],
    placed: &place::Placement,
    flags: BoFlags,
) -> Result<(Option<crate::device::Bo>, Buffers)> {
    let scratch = if placed.scratch_end > 0 {
        Some(dev.alloc(placed.scratch_end as usize, flags)?)
    } else {
        None
    };
    let mut buffers = Vec::with_capacity(placed.own.len());
    for &t in &placed.own {
        let def = &tensors[t];
        let held = match &def.kind {
            Kind::Bank(bank) => Held::Bank(bank.clone()),
            Kind::Constant(bytes) => {
                let mut bo = dev.alloc(bytes.len(), flags)?;
                bo.write(0, &bytes[..])?;
                Held::Own(bo)
            }
            _ => Held::Own(dev.alloc(def.bytes as usize, flags)?),
        };
        buffers.push((
            Tensor {
                layer: id,
                index: t,
            },
            held,
        ));
    }
    Ok((scratch, buffers))
}
