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
//! use rknpu_driver::kernels::single::add_task_model;
//! use rknpu_driver::task::Precision;
//!
//! let dev = Device::open_or_emulated()?;
//! // (a + b) + a on int32 cubes of 8 pixels × 16 channels, as two chained add tasks.
//! let cube = Cube::new(8, 1, 16, Precision::Int32)?;
//! let mut b = LayerBuilder::new(&dev);
//! let a = b.input("a", cube)?;
//! let x = b.input("b", cube)?;
//! let add = |ins: &[_], out| Ok(vec![add_task_model(8, 16, ins[0], ins[1], out)?]);
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
use crate::device::{Bo, BoFlags, Device, Job, JobResult, Pending};
use crate::error::{Error, Result};
use crate::kernels::matmul::Plan;
use crate::kernels::ops::Cube;
use crate::kernels::single::OutType;
use crate::regcmd::{BufferId, DmaAddr, Program, ProgramBuilder, words_to_le_bytes};
use crate::task::{Precision, Task};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tensor of a layer: a handle its builder gave out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tensor(usize);

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
}

/// Describes a layer program: tensors and the steps between them, in execution order.
pub struct LayerBuilder {
    dev: Device,
    tensors: Vec<TensorDef>,
    steps: Vec<StepDef>,
    timeout: Duration,
}

impl std::fmt::Debug for LayerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayerBuilder")
            .field("tensors", &self.tensors)
            .field(
                "steps",
                &self.steps.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Tensors in the scratch buffer start at multiples of this (the DMA engines' 16-byte
/// alignment, rounded up to a cache line).
const ALIGN: u64 = 64;

impl LayerBuilder {
    /// An empty layer on `dev`, with a 2 s job timeout.
    pub fn new(dev: &Device) -> LayerBuilder {
        LayerBuilder {
            dev: dev.clone(),
            tensors: Vec::new(),
            steps: Vec::new(),
            timeout: Duration::from_secs(2),
        }
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
        Ok(Tensor(self.tensors.len() - 1))
    }

    fn def(&self, t: Tensor) -> Result<&TensorDef> {
        self.tensors.get(t.0).ok_or_else(|| Error::InvalidArgument {
            what: format!("tensor {} is not of this layer", t.0),
        })
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
        self.tensors[t.0].output = true;
        Ok(())
    }

    /// A step: `generate` gets the addresses of `reads` (in that order) and of the new
    /// tensor `out` it writes, and returns the tasks that compute it. Tensors are
    /// relocations; the tasks run in the chain after those of the steps before.
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
        });
        Ok(writes)
    }

    /// A matmul step: `a` (M rows of the bank's K) times the bank, written as the native
    /// cube `Cube::new(m, 1, n, out)` (C's `[N/E][M][E]` layout, which later steps read
    /// as a tensor of M pixels of N channels). One core, one M tile and one K wave: the
    /// whole product is one run of tasks whose output is one cube (a larger one is an
    /// [`Error::Unsupported`] naming the limit). `input` says whether `a` is the plan's
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
        let plan = Plan::for_layout(bank.layout(), m, out, 1)?;
        let plan = match self.dev.capabilities().cbuf_reuse {
            true => plan,
            false => plan.without_reuse(),
        };
        let unsupported = |why: String| Error::Unsupported {
            what: "layer matmul step",
            why,
        };
        if plan.layout.waves.len() != 1 || plan.m_tile < m {
            return Err(unsupported(format!(
                "{m}x{}x{}: {} K wave(s), M tiles of {} rows; a layer step takes one wave and one M tile",
                plan.spec.k,
                plan.spec.n,
                plan.layout.waves.len(),
                plan.m_tile
            )));
        }
        let c_prec = match plan.c_type() {
            OutType::Int32 => Precision::Int32,
            OutType::Fp32 => Precision::Fp32,
            OutType::Fp16 => Precision::Fp16,
            OutType::Int16 => Precision::Int16,
            other => return Err(unsupported(format!("{other:?} results"))),
        };
        let out_cube = Cube::new(m, 1, plan.spec.n.next_multiple_of(32), c_prec)?;
        if out_cube.bytes() != plan.c_bytes {
            return Err(unsupported(format!(
                "C of {} bytes is not the cube of {} bytes",
                plan.c_bytes,
                out_cube.bytes()
            )));
        }
        let a_def = self.def(a)?;
        let a_need = match input {
            MatmulInput::Packed => plan.a_bytes,
            MatmulInput::Native => {
                Cube::new(m, 1, plan.spec.k, plan.spec.dtype.precision())?.bytes()
            }
        };
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
        let generate = move |ins: &[DmaAddr], c: DmaAddr| -> Result<Vec<Task>> {
            plan.tasks
                .iter()
                .map(|t| match input {
                    MatmulInput::Packed => plan.task(t, [ins[0], ins[1], c]),
                    MatmulInput::Native => plan.task_native_a(t, [ins[0], ins[1], c]),
                })
                .collect()
        };
        self.op_bytes(
            name,
            &[a, weights],
            out_cube.bytes(),
            Some(out_cube),
            Box::new(generate),
        )
    }

    /// Places the tensors, generates and binds the program, verifies it, and allocates
    /// and fills the buffers. Errors name the step whose tasks fail.
    pub fn build(self) -> Result<Layer> {
        let LayerBuilder {
            dev,
            mut tensors,
            steps,
            timeout,
        } = self;
        if steps.is_empty() {
            return Err(Error::InvalidArgument {
                what: "a layer of no step".into(),
            });
        }
        // An intermediate nobody reads after its step and that is not an output is still
        // placed (its step writes it); the step index of each tensor's last use:
        let mut last_use = vec![0usize; tensors.len()];
        // (A step can only read tensors that existed when it was added, so every
        // intermediate it reads was written by an earlier step.)
        for (i, s) in steps.iter().enumerate() {
            for r in &s.reads {
                last_use[r.0] = i;
            }
            last_use[s.writes.0] = last_use[s.writes.0].max(i);
        }
        // Buffers: 0 the program, 1 the scratch buffer, then one per tensor that has its
        // own (inputs, outputs, constants, banks).
        const REGCMD: BufferId = BufferId(0);
        const SCRATCH: BufferId = BufferId(1);
        let mut place = vec![(SCRATCH, 0u64); tensors.len()];
        let mut own = Vec::new();
        let mut free: Vec<(u64, u64)> = Vec::new(); // (offset, bytes), sorted by offset
        let mut live: Vec<(usize, u64, u64)> = Vec::new(); // (dies after step, offset, bytes)
        let mut scratch_end = 0u64;
        let mut scratch_sum = 0u64;
        for (i, s) in steps.iter().enumerate() {
            // Tensors whose last reader ran before this step are dead now.
            live.retain(|&(dies, off, len)| {
                if dies < i {
                    free.push((off, len));
                    false
                } else {
                    true
                }
            });
            free.sort_unstable();
            free = merge(free);
            let t = s.writes.0;
            let def = &mut tensors[t];
            if def.output {
                own.push(t);
                continue;
            }
            let len = def.bytes.next_multiple_of(ALIGN);
            scratch_sum += len;
            let off = match free.iter().position(|&(_, l)| l >= len) {
                Some(j) => {
                    let (o, l) = free[j];
                    if l == len {
                        free.remove(j);
                    } else {
                        free[j] = (o + len, l - len);
                    }
                    o
                }
                None => {
                    let o = scratch_end;
                    scratch_end += len;
                    o
                }
            };
            place[t] = (SCRATCH, off);
            live.push((last_use[t], off, len));
        }
        for (t, def) in tensors.iter().enumerate() {
            if !matches!(def.kind, Kind::Intermediate) {
                own.push(t);
            }
        }
        own.sort_unstable();
        own.dedup();
        for (j, &t) in own.iter().enumerate() {
            place[t] = (BufferId(2 + j as u32), 0);
        }
        let addr = |t: Tensor| {
            let (id, off) = place[t.0];
            DmaAddr::reloc(id, off as u32)
        };
        let mut p = ProgramBuilder::new(REGCMD);
        let mut infos = Vec::with_capacity(steps.len());
        let mut first = 0;
        for s in steps {
            let ins: Vec<DmaAddr> = s.reads.iter().map(|&t| addr(t)).collect();
            let name = s.name.clone();
            let tasks = (s.generate)(&ins, addr(s.writes)).map_err(|e| Error::Unsupported {
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
            infos.push(LayerStep {
                name,
                tasks: first..first + tasks.len(),
            });
            first += tasks.len();
        }
        let program = p.build()?;
        // Buffers, then the program bound to them.
        let flags = BoFlags::default();
        let scratch = if scratch_end > 0 {
            Some(dev.alloc(scratch_end as usize, flags)?)
        } else {
            None
        };
        let mut buffers = Vec::with_capacity(own.len());
        for &t in &own {
            let def = &tensors[t];
            let held = match &def.kind {
                Kind::Bank(bank) => Held::Bank(bank.clone()),
                Kind::Constant(bytes) => {
                    let mut bo = dev.alloc(bytes.len(), flags)?;
                    bo.write(0, bytes)?;
                    Held::Own(bo)
                }
                _ => Held::Own(dev.alloc(def.bytes as usize, flags)?),
            };
            buffers.push((Tensor(t), held));
        }
        let mut regcmd = dev.alloc(program.byte_len(), flags)?;
        let regcmd_addr = regcmd.dma_addr();
        let scratch_addr = scratch.as_ref().map(|b| b.dma_addr());
        let words = program.bind(|id| {
            let a = match id {
                REGCMD => Some(regcmd_addr),
                SCRATCH => scratch_addr,
                BufferId(j) => buffers
                    .get((j as usize).checked_sub(2)?)
                    .map(|(_, h)| h.bo().dma_addr()),
            };
            a.map(u64::from)
        })?;
        regcmd.write(0, &words_to_le_bytes(&words))?;
        let tensors = tensors
            .into_iter()
            .enumerate()
            .map(|(i, d)| TensorInfo {
                name: d.name,
                bytes: d.bytes,
                cube: d.cube,
                input: matches!(d.kind, Kind::Input),
                output: d.output,
                scratch_offset: (place[i].0 == SCRATCH && !d.output).then_some(place[i].1),
            })
            .collect();
        let layer = Layer {
            dev,
            program,
            regcmd,
            scratch,
            buffers,
            tensors,
            steps: infos,
            scratch_sum,
            timeout,
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

/// Merges adjacent free ranges (sorted by offset).
fn merge(free: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(free.len());
    for (o, l) in free {
        match out.last_mut() {
            Some((po, pl)) if *po + *pl == o => *pl += l,
            _ => out.push((o, l)),
        }
    }
    out
}

#[derive(Debug)]
enum Held {
    Own(Bo),
    Bank(Arc<WeightBank>),
}

impl Held {
    fn bo(&self) -> &Bo {
        match self {
            Held::Own(bo) => bo,
            Held::Bank(bank) => bank.buffer(),
        }
    }
}

/// One step of a built layer: its name and the indices of its tasks in the program.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerStep {
    /// The name the builder was given.
    pub name: String,
    /// Its tasks, as indices into [`Program::tasks`].
    pub tasks: Range<usize>,
}

/// What a built layer knows of a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TensorInfo {
    /// The name the builder was given.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its geometry, when it is a cube.
    pub cube: Option<Cube>,
    /// Whether the host writes it ([`Layer::write`]).
    pub input: bool,
    /// Whether the host reads it ([`Layer::read`]).
    pub output: bool,
    /// Where an intermediate lives in the scratch buffer (`None` for tensors with a
    /// buffer of their own).
    pub scratch_offset: Option<u64>,
}

/// A built layer program: its buffers (owned; freed on drop) and its bound program.
#[derive(Debug)]
pub struct Layer {
    dev: Device,
    program: Program,
    regcmd: Bo,
    scratch: Option<Bo>,
    buffers: Vec<(Tensor, Held)>,
    tensors: Vec<TensorInfo>,
    steps: Vec<LayerStep>,
    scratch_sum: u64,
    timeout: Duration,
    /// The result of the last run.
    pub last: Option<JobResult>,
}

impl Layer {
    fn held(&self, t: Tensor) -> Option<&Held> {
        self.buffers.iter().find(|(x, _)| *x == t).map(|(_, h)| h)
    }

    fn info(&self, t: Tensor) -> Result<&TensorInfo> {
        self.tensors.get(t.0).ok_or_else(|| Error::InvalidArgument {
            what: format!("tensor {} is not of this layer", t.0),
        })
    }

    /// Writes an input tensor's bytes (at most its size; the rest keeps what it held).
    pub fn write(&mut self, t: Tensor, bytes: &[u8]) -> Result<()> {
        let info = self.info(t)?;
        if !info.input {
            return Err(Error::InvalidArgument {
                what: format!("{} is not an input of the layer", info.name),
            });
        }
        if bytes.len() as u64 > info.bytes {
            return Err(Error::ShapeMismatch {
                what: "layer input bytes",
                expected: info.bytes,
                actual: bytes.len() as u64,
            });
        }
        let i = self.buffers.iter().position(|(x, _)| *x == t);
        match i.map(|i| &mut self.buffers[i].1) {
            Some(Held::Own(bo)) => bo.write(0, bytes),
            _ => Err(Error::InvalidArgument {
                what: "an input without a buffer".into(),
            }),
        }
    }

    /// Reads an output tensor's bytes (exactly its size).
    pub fn read(&mut self, t: Tensor) -> Result<Vec<u8>> {
        let info = self.info(t)?;
        if !info.output {
            return Err(Error::InvalidArgument {
                what: format!("{} is not an output of the layer", info.name),
            });
        }
        let len = info.bytes as usize;
        match self.held(t) {
            Some(h) => h.bo().read_with(|b| b[..len].to_vec()),
            None => Err(Error::InvalidArgument {
                what: "an output without a buffer".into(),
            }),
        }
    }

    /// The job running `tasks` (indices into the program) with every buffer of the layer,
    /// verified on submission (what `build` checks once).
    fn job(&self, tasks: Range<usize>) -> Job<'_> {
        let mut job =
            Job::new(&self.regcmd, self.program.tasks()[tasks].to_vec()).timeout(self.timeout);
        if let Some(s) = &self.scratch {
            job = job.reads(s).writes(s);
        }
        for (t, h) in &self.buffers {
            let info = &self.tensors[t.0];
            job = if info.output {
                job.reads(h.bo()).writes(h.bo())
            } else {
                job.reads(h.bo())
            };
        }
        job
    }

    /// [`Layer::job`] without the pre-submit verifier: `build` verified the whole chain
    /// against these buffers, and neither the bound words nor the buffers change after
    /// it, so reading and decoding the program again on every run would find the same.
    fn checked_job(&self, tasks: Range<usize>) -> Job<'_> {
        self.job(tasks).unverified()
    }

    /// Runs the whole layer as one job and waits for it.
    pub fn run(&mut self) -> Result<JobResult> {
        let r = self
            .dev
            .submit(&self.checked_job(0..self.program.tasks().len()))?;
        self.last = Some(r.clone());
        Ok(r)
    }

    /// Submits the whole layer as one job and returns at once; the layer's buffers stay
    /// borrowed until [`PendingLayer::wait`].
    pub fn submit(&mut self) -> Result<PendingLayer<'_>> {
        let job = self.checked_job(0..self.program.tasks().len());
        Ok(PendingLayer {
            pending: self.dev.submit_nonblocking(job)?,
        })
    }

    /// Runs each step as a job of its own, one after another (the same tasks and
    /// buffers, a submission and a wait per step): what a backend that calls the NPU
    /// once per operation does. Returns each job's time from submission to completion.
    pub fn run_steps_separately(&mut self) -> Result<Vec<Duration>> {
        let mut times = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            let t0 = Instant::now();
            self.dev.submit(&self.checked_job(s.tasks.clone()))?;
            times.push(t0.elapsed());
        }
        Ok(times)
    }

    /// The bound program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The steps, in chain order.
    pub fn steps(&self) -> &[LayerStep] {
        &self.steps
    }

    /// What the layer knows of `t`.
    pub fn tensor(&self, t: Tensor) -> Result<&TensorInfo> {
        self.info(t)
    }

    /// Bytes of the scratch buffer holding the intermediates, and what they would take
    /// without reuse (each in bytes of its own).
    pub fn scratch_bytes(&self) -> (u64, u64) {
        (
            self.scratch.as_ref().map_or(0, |b| b.size() as u64),
            self.scratch_sum,
        )
    }
}

/// A layer submitted without blocking.
#[derive(Debug)]
pub struct PendingLayer<'l> {
    pending: Pending<'l>,
}

impl PendingLayer<'_> {
    /// Whether it finished, without waiting.
    pub fn is_done(&self) -> Result<bool> {
        self.pending.is_done()
    }

    /// Waits until it completes or `deadline` passes.
    pub fn wait(self, deadline: Instant) -> Result<JobResult> {
        self.pending.wait(deadline)
    }
}
