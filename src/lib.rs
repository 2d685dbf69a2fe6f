//! Userspace driver library for the Rockchip RK3588 NPU.
//!
//! Most users want the compute API: open the NPU, pack weights once into a resident
//! [`compute::matmul::WeightBank`], run [`compute::matmul::Matmul`]s of any row count
//! against it (README.md, "Using the library", has the same path in f32):
//!
//! ```
//! use rknpu_driver::compute::matmul::{Matmul, WeightBank, Weights};
//! use rknpu_driver::device::Device;
//! use std::sync::Arc;
//!
//! let dev = Device::open_or_emulated()?; // a board if there is one, else the emulator
//! let (n, k) = (32u32, 64u32);
//! // n output channels of k inputs, `[out][in]` as a model stores them.
//! let w: Vec<i8> = (0..n * k).map(|i| (i % 7) as i8 - 3).collect();
//! let bank = Arc::new(WeightBank::new(&dev, (n, k), Weights::I8(&w))?);
//! let mut c = vec![0i32; 2 * n as usize];
//! Matmul::new(&bank, 2)?.run_into(&vec![1i8; 2 * k as usize], &mut c)?; // C = A · Wᵀ
//! assert_eq!(c[0], w[..k as usize].iter().map(|&v| i32::from(v)).sum::<i32>());
//! # Ok::<(), rknpu_driver::Error>(())
//! ```
//!
//! The layers beneath, from the bottom:
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
//!   for every precision, matmul plans of any shape with their packers, and the
//!   operations beyond matmul, each under one contract
//!   ([`kernels::ops::contract::Op`]: buffers bound by role, a CPU reference and its
//!   tolerance; `compute::ops::run_op` runs any of them);
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
//! * [`device`] — the driver: open the NPU (vendor `rknpu`, `rocket`, or the emulated
//!   kernel), allocate buffers, submit jobs and wait for them (docs/device.md);
//! * [`emu`] — the emulated vendor and rocket kernels, in-process on the simulator,
//!   behind the same seam as the real ones (`RKNPU_DEVICE=emu`; docs/hw-testing.md);
//! * [`compute`] — what runs on a device: weight banks, planned matmuls, batches,
//!   layer programs and the operation runner (docs/matmul.md, docs/ops.md);
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

pub mod compute;
pub mod device;
pub mod doctor;
pub mod emu;
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
