//! Dequantisation on the NPU: after each int8 matmul task (its int32 sums cast to fp32
//! by the DPU), one DPU-only task per row and 1024-channel chunk multiplies by the row's
//! scale and each channel's scale and writes the row into a row-major fp32 result
//! (`kernels::single::dequant_task`; docs/simulator.md has its register values and their
//! public source). The row scales are register operands: each call writes them into
//! the bound program's words in place (one entry per dequantisation task).
//!
//! With K in several waves each wave's tasks dequantise their own partial sums into a
//! block of their own (the result holds one `rows × n_pad` fp32 block per wave) and the
//! host adds the blocks, in wave order, when it reads the result: the scales distribute
//! over the sum, and every register value stays one that board-run programs use (an
//! int32 running sum across tasks would need an int32 DPU input no public program shows).
//!
//! A grouped bank (scales per group of K, each group one wave) gives each wave's tasks
//! that group's channel scales (one coefficient block per wave) and each row's scale of
//! that group: grouped W8A8, every group dequantised on the NPU with its own weight and
//! activation scales (docs/matmul.md, "Grouped int8").

use crate::device::{Bo, BoFlags};
use crate::error::{Error, Result};
use crate::kernels::matmul::{A, B, C, MAX_TASKS, Plan, REGCMD};
use crate::kernels::single::{dequant_task, pack_dequant_coefficients};
use crate::regcmd::{BlockMask, BufferId, DmaAddr, Program, ProgramBuilder, RegCmd};
use crate::regs::{CommandRegister, Register, dpu};

/// The coefficient buffer (one `u32` per channel, fp16 bits in the low half; a grouped
/// bank's, one block of `n_pad` per wave).
pub(super) const COEFFS: BufferId = BufferId(4);
/// The row-major fp32 result, one `rows × n_pad` block per K wave.
pub(super) const OUT: BufferId = BufferId(5);

/// Channels one dequantisation task covers at most.
const CHUNK: u32 = 1024;

/// The buffers of the NPU dequantisation of one matmul.
#[derive(Debug)]
pub(super) struct NpuDequant {
    pub(super) coeffs: Bo,
    pub(super) out: Bo,
    /// Tasks per core: the matmul's and the dequantisation's.
    pub(super) per_core: Vec<usize>,
    /// The bound program, its row scales 1 until a call sets them.
    pub(super) words: Vec<RegCmd>,
    /// Where each row's scale is written: (index of a dequantisation task's BS_MUL_CFG
    /// entry in `words`, the row, the wave).
    scale_entries: Vec<(usize, u32, u32)>,
    /// K waves of the plan.
    pub(super) waves: usize,
    /// Whether scales are per group (wave): channel scales `waves × n`, row scales
    /// `rows × waves`.
    pub(super) grouped: bool,
    /// The activations' passes: the plan's rows are this many copies of the caller's
    /// rows (one a pass), and each result row is the sum of its copies (1: the rows).
    pub(super) passes: u32,
}

/// Whether `s` can be a dequantisation scale without losing more than fp16's relative
/// precision: zero, or a normal fp16 number (subnormals keep too few bits).
pub(super) fn fp16_normal(s: f32) -> bool {
    s == 0.0 || (s.is_finite() && s.abs() >= 2f32.powi(-14) && s.abs() < 65504.0)
}

/// Tasks per core of `plan` with the dequantisation tasks added.
fn counts(plan: &Plan) -> Result<Vec<usize>> {
    let mut first = 0;
    let mut v = Vec::with_capacity(plan.per_core.len());
    for (core, &count) in plan.per_core.iter().enumerate() {
        let extra: usize = plan.tasks[first..first + count]
            .iter()
            .map(|t| t.rows as usize * t.nt.div_ceil(CHUNK) as usize)
            .sum();
        first += count;
        let total = count + extra;
        if total > MAX_TASKS {
            return Err(Error::Unsupported {
                what: "NPU dequantisation",
                why: format!(
                    "core {core} would run {total} tasks (one dequantisation task per row and 1024 channels); one submission counts at most {MAX_TASKS}"
                ),
            });
        }
        v.push(total);
    }
    Ok(v)
}

impl NpuDequant {
    /// The buffers for `plan` (fp32 results, one block per K wave) and the bank's channel
    /// scales: `n`, or with `grouped` one block of `n` per wave; allocated beside the
    /// bank's buffer `bank` (in its IOMMU domain: the matmul's job names them all).
    pub(super) fn new(bank: &Bo, plan: &Plan, scales: &[f32], grouped: bool) -> Result<NpuDequant> {
        if let Some(i) = scales.iter().position(|&s| !fp16_normal(s)) {
            return Err(Error::OutOfRange {
                what: "weight scales (NPU dequantisation reads them as fp16)",
                index: i,
                value: format!("{:e}", scales[i]),
                range: "0 or a normal fp16 magnitude, 2^-14 ..= 65504",
            });
        }
        let per_core = counts(plan)?;
        let waves = plan.layout.waves.len();
        let (n, block) = (plan.layout.n as usize, plan.layout.n_pad as usize * 4);
        let blocks = if grouped { waves } else { 1 };
        let dev = bank.device();
        let mut coeffs = dev.alloc_beside(bank, blocks * block, BoFlags::default())?;
        for (w, s) in scales.chunks(n.max(1)).take(blocks).enumerate() {
            let bytes = pack_dequant_coefficients(s)?;
            coeffs.write(w * block, &bytes[..bytes.len().min(block)])?;
        }
        let out_bytes = (plan.spec.m as usize)
            .checked_mul(plan.layout.n_pad as usize * 4)
            .and_then(|b| b.checked_mul(plan.layout.waves.len()))
            .filter(|&b| u32::try_from(b).is_ok())
            .ok_or(Error::Unsupported {
                what: "NPU dequantisation",
                why: "the result blocks of every K wave exceed the 4 GiB a relocation addresses"
                    .into(),
            })?;
        let out = dev.alloc_beside(bank, out_bytes, BoFlags::default())?;
        Ok(NpuDequant {
            coeffs,
            out,
            per_core,
            words: Vec::new(),
            scale_entries: Vec::new(),
            waves,
            grouped,
            passes: 1,
        })
    }

    /// Keeps the bound `words` of `program` (built by [`NpuDequant::program`] for `plan`)
    /// and finds the entry of each dequantisation task that carries its row's scale.
    pub(super) fn keep(&mut self, plan: &Plan, program: &Program, words: Vec<RegCmd>) {
        let rows = dequant_rows(plan);
        let dequant = program
            .tasks()
            .iter()
            .filter(|t| t.enable == BlockMask::ELEMENTWISE.0);
        self.scale_entries = dequant
            .zip(rows)
            .filter_map(|(t, row)| {
                let first = t.offset as usize / 8;
                let body = &words[first..first + t.regcfg_amount as usize];
                let at = body.iter().position(|w| {
                    w.target() == dpu::BsMulCfg::TARGET && w.offset() == dpu::BsMulCfg::OFFSET
                })?;
                Some((first + at, row.0, row.1))
            })
            .collect();
        self.words = words;
    }

    /// Writes each row's scale (grouped: each row's scale of each group, row-major) into
    /// its tasks' BS multiplier operand (a scale fp16 cannot hold to its precision gets
    /// 1: the host scales it), in place: the program is not encoded or bound again.
    pub(super) fn set_row_scales(&mut self, row_scales: &[f32]) -> Result<&[RegCmd]> {
        for &(i, row, wave) in &self.scale_entries {
            let s = row_scales[self.scale_index(row as usize, wave as usize)];
            let bits = half::f16::from_f32(if fp16_normal(s) { s } else { 1.0 }).to_bits();
            let reg = dpu::BsMulCfg::from_raw(self.words[i].value());
            let reg = dpu::BsMulCfg::BS_MUL_OPERAND.set(reg, u32::from(bits))?;
            self.words[i] = RegCmd::write(reg);
        }
        Ok(&self.words)
    }

    /// Where the scale of `row` for `wave` is in the row scales.
    pub(super) fn scale_index(&self, row: usize, wave: usize) -> usize {
        if self.grouped {
            row * self.waves + wave
        } else {
            row
        }
    }

    /// The program: on each core the plan's matmul tasks, then one dequantisation task
    /// per row and chunk of each of them (in the order of [`dequant_rows`]), with these
    /// row scales, each writing into its wave's block of the result; with incremental
    /// bodies when `incremental` (the row scale always written, since each call patches
    /// it). With `grouped`, each wave's tasks read that wave's block of coefficients.
    pub(super) fn program(plan: &Plan, incremental: bool, grouped: bool) -> Result<Program> {
        let n_pad = plan.layout.n_pad;
        let coeff_block = if grouped { n_pad } else { 0 };
        let block = plan.spec.m * n_pad;
        let mut p = ProgramBuilder::new(REGCMD)
            .incremental(incremental)
            .always_write::<dpu::BsMulCfg>();
        let mut first = 0;
        for (core, &count) in plan.per_core.iter().enumerate() {
            plan.push_core(&mut p, core, [A, B, C])?;
            for t in &plan.tasks[first..first + count] {
                for r in 0..t.rows {
                    let at = t.wave * block + (t.m0 + r) * n_pad + t.n0;
                    let mut j = 0;
                    while j < t.nt {
                        let ch = (t.nt - j).min(CHUNK);
                        let body = dequant_task(
                            t.rows,
                            r,
                            ch,
                            1.0,
                            DmaAddr::reloc(C, t.c_offset as u32 + j * t.rows * 4),
                            DmaAddr::reloc(COEFFS, (t.wave * coeff_block + t.n0 + j) * 4),
                            DmaAddr::reloc(OUT, (at + j) * 4),
                        )?
                        .body()?;
                        p.push_task(body, BlockMask::ELEMENTWISE);
                        j += ch;
                    }
                }
            }
            p.end_chain();
            first += count;
        }
        p.build()
    }
}

/// The row and wave of each dequantisation task, in program order: per core, per matmul
/// task, per row, one task per chunk of 1024 channels.
fn dequant_rows(plan: &Plan) -> impl Iterator<Item = (u32, u32)> + '_ {
    plan.tasks.iter().flat_map(|t| {
        (0..t.rows).flat_map(move |r| {
            std::iter::repeat_n((t.m0 + r, t.wave), t.nt.div_ceil(CHUNK) as usize)
        })
    })
}
