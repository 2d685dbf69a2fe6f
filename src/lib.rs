//! Userspace driver library for the Rockchip RK3588 NPU.
//!
//! The NPU's three cores run register-command ("regcmd") programs: lists of 64-bit
//! entries that each core's program controller fetches from memory, one register write
//! per entry, grouped into chained tasks. This crate builds, checks and decodes them:
//!
//! * [`regs`] — the register model, generated from `regs/*.toml`: one typed value per
//!   register and a static table of every register and field;
//! * [`regcmd`] — entries, a task/program builder with symbolic DMA-address relocations,
//!   and a lossless decoder to text and JSON;
//! * [`kernels`] — program generators: the worked int8 example, single-task matmuls
//!   for every precision, and matmul plans of any shape with their packers;
//! * [`sim`] — a strict functional simulator that executes programs against a memory
//!   image, so programs can be tested without a board (docs/simulator.md);
//! * [`task`] — the typed task model, one file per block: what kernels emit, what the
//!   simulator executes and what the verifier checks;
//! * [`submit`] — the vocabulary every layer describes submissions in: task descriptors,
//!   core masks and ranges, interrupt bits;
//! * [`seeded`] — the seeded operand generator of the CLI, the doctor and the benchmarks;
//! * [`float`] — fp16/bf16 conversions shared by packers and simulator;
//! * `sys` (private) — the kernels' structures and request codes, and the one seam every
//!   request goes through (the only module where the `unsafe_code` lint is allowed);
//! * [`device`] — open the NPU (vendor `rknpu`, `rocket`, or the emulated kernel),
//!   allocate buffers, submit jobs and wait for them (docs/device.md); run planned
//!   matmuls on resident weight banks ([`device::matmul`]);
//! * [`doctor`] — the board bring-up ladder behind `rknpu doctor`: probe, buffers, then
//!   programs from the smallest to the largest, with a diagnosis at the first failure;
//! * [`verify`] — every DMA range of a program inside the buffers of its job;
//! * [`trace`] — the trace file format (docs/trace-format.md): reading, writing,
//!   recording, import and the text dump;
//! * [`replay`] — replaying traces: the static check, on the simulator, on a device;
//! * [`gguf`] — GGUF model files: a bounded reader, dequantisation, loading weight
//!   matrices into weight banks, and a writer (docs/gguf.md).
//!
//! Layers import only downward (`regs` ← `regcmd` ← `kernels`, `sim`); see
//! `docs/architecture.md`. The crate denies the `unsafe_code` lint; only `src/sys/` opts
//! out of it.
//!
//! ```
//! use rknpu_driver::kernels::worked_example;
//! use rknpu_driver::regcmd;
//!
//! let program = worked_example::program()?;
//! let words = program.bind(worked_example::fixture_address)?;
//! let decoded = regcmd::decode(&words);
//! assert_eq!(decoded.unknown(), 0);
//! assert_eq!(program.tasks()[0].int_mask, 0x300);
//! # Ok::<(), rknpu_driver::Error>(())
//! ```
#![deny(unsafe_code)]

pub mod device;
pub mod doctor;
pub mod error;
pub mod float;
pub mod gguf;
pub mod kernels;
pub mod regcmd;
pub mod regs;
pub mod replay;
pub mod seeded;
pub mod sim;
pub mod submit;
pub(crate) mod sys;
pub mod task;
pub mod trace;
pub mod verify;

pub use error::{Error, OsError, Result};

/// The examples of README.md, compiled and run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;
