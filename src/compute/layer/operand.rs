//! Per-call scales of a built layer: the fp16 register operand of the BS multiplier
//! (`BS_MUL_CFG.BS_MUL_OPERAND`), which a dequantisation step multiplies its whole
//! tensor by, rewritten in the bound words between runs. An activation scale then follows
//! each call's activations instead of being fixed when the layer is built.

use super::Tensor;
use super::built::{Layer, LayerStep};
use crate::error::{Error, Result};
use crate::kernels::single::dequant_scale_bits;
use crate::regcmd::{Program, RegCmd};
use crate::regs::{CommandRegister, Register, dpu};
use crate::task::Task;

/// Whether `task`'s DPU multiplies in its BS stage by an fp16 register operand (a float
/// pipeline, the operand from the register, not from memory).
pub(super) fn fp16_multiplier(task: &Task) -> bool {
    task.dpu.as_ref().is_some_and(|d| {
        d.precision.is_float()
            && !d.bs.bypass
            && d.bs.mul.is_some_and(|m| !m.from_memory && !m.prelu)
    })
}

/// The index in `words` of the `BS_MUL_CFG` entry of task `index` of `program`.
fn bs_mul_entry(words: &[RegCmd], program: &Program, index: usize) -> Option<usize> {
    let t = program.tasks().get(index)?;
    let first = t.offset as usize / 8;
    let body = words.get(first..first + t.regcfg_amount as usize)?;
    body.iter()
        .position(|w| w.target() == dpu::BsMulCfg::TARGET && w.offset() == dpu::BsMulCfg::OFFSET)
        .map(|at| first + at)
}

/// For each step, the word indices of the multipliers of its tasks that `scaled` marks
/// (one flag per task, in step order).
pub(super) fn multiplier_words(
    words: &[RegCmd],
    program: &Program,
    steps: &[LayerStep],
    scaled: &[Vec<bool>],
) -> Vec<Vec<usize>> {
    steps
        .iter()
        .zip(scaled)
        .map(|(s, flags)| {
            s.tasks
                .clone()
                .zip(flags)
                .filter(|(_, f)| **f)
                .filter_map(|(i, _)| bs_mul_entry(words, program, i))
                .collect()
        })
        .collect()
}

impl Layer {
    /// Sets the scale the step writing `output` multiplies its tensor by: the fp16 operand
    /// of its tasks' BS multiplier (a `Dequant` step's per-tensor scale, for instance),
    /// for every later run. Only those operands change, in the bound program in place; no
    /// address moves, so the verification `build` made still holds.
    ///
    /// Errors: a tensor of another layer is [`Error::Foreign`]; a tensor no step writes,
    /// or a step without an fp16 register multiplier, [`Error::InvalidArgument`]; a scale
    /// fp16 cannot carry (not finite, beyond 65504, or non-zero rounding to 0)
    /// [`Error::OutOfRange`].
    pub fn set_step_scale(&mut self, output: Tensor, scale: f32) -> Result<()> {
        let name = self.tensor(output)?.name.clone();
        let Some(step) = self.steps.iter().position(|s| s.output == output) else {
            return Err(Error::InvalidArgument {
                what: format!("no step of the layer writes {name}"),
            });
        };
        if self.multipliers[step].is_empty() {
            return Err(Error::InvalidArgument {
                what: format!(
                    "step {} has no fp16 register multiplier to scale",
                    self.steps[step].name
                ),
            });
        }
        let bits = dequant_scale_bits("layer step scale", 0, scale)?;
        for &i in &self.multipliers[step] {
            let reg = dpu::BsMulCfg::from_raw(self.words[i].value());
            let reg = dpu::BsMulCfg::BS_MUL_OPERAND.set(reg, u32::from(bits))?;
            self.words[i] = RegCmd::write(reg);
            self.regcmd.write(i * 8, &self.words[i].0.to_le_bytes())?;
        }
        Ok(())
    }
}
