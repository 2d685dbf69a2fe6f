//! The board-run forms of operations the general generators also express: where the
//! hardware offers a form that computes the same result, the generators emit it where
//! the general one cannot run, or where [`HardwareProfile::serial_job_seconds`] models
//! it as faster.
//!
//! * A grouped convolution with one input and one output channel per group (`groups ==
//!   channels == out_channels`) is the CNA's depthwise mode, which board-run programs use
//!   (`gregordinary/rocket-userspace`, docs/hardware/convolution.md#depthwise); the
//!   grouped path needs whole 32-channel group windows, so such a convolution runs only
//!   in that mode ([`Conv2d::lowered`]).
//! * A convolution followed by a tensor add can add the tensor in the convolution's own
//!   DPU (`COMB_USE` 5, the board-run fp16 add of the same project,
//!   docs/hardware/dpu-ops.md#conv-fed-ew), saving the element-wise task and the
//!   output's write and read in between; where that geometry does not apply, the
//!   element-wise task runs after the convolution ([`Conv2d::tasks_adding`]).
//!
//! The forms give the same values at every element the caller reads (the packed layouts
//! differ, so the caller packs and unpacks through the Conv2d the choice returns).

use super::contract::{Bindings, Op, Role};
use super::conv::Conv2d;
use super::eltwise::{Eltwise, EltwiseOp, Operand};
use crate::error::Result;
use crate::kernels::matmul::cost::HardwareProfile;
use crate::task::Task;

/// How [`Conv2d::tasks_adding`] adds the tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddForm {
    /// In the convolution's own DPU (`COMB_USE` 5): one pass.
    Fused,
    /// An element-wise add task after the convolution, reading its output and the tensor
    /// and writing the output in place.
    Separate,
}

impl Conv2d {
    /// Whether this is a grouped convolution of one channel per group, the case the
    /// depthwise mode computes.
    fn one_channel_groups(&self) -> bool {
        !self.depthwise
            && self.groups > 1
            && self.groups == self.input.channels
            && self.groups == self.out_channels
    }

    /// The form of this convolution the hardware runs: a grouped convolution of one
    /// channel per group, which the grouped path cannot take (its group windows fill
    /// whole 32-channel blocks), becomes the depthwise mode where that checks; anything
    /// else is returned as it is. Pack the input and weights and unpack the output
    /// through the returned value (its cubes differ; the weights' host layout,
    /// `[c][kh][kw]`, does not). A convolution neither form takes is the error
    /// [`Conv2d::check`] gives for it.
    pub fn lowered(&self) -> Result<Conv2d> {
        if self.one_channel_groups() {
            let depthwise = self.with_groups(1).with_depthwise(true);
            if depthwise.check().is_ok() {
                return Ok(depthwise);
            }
        }
        self.check()?;
        Ok(*self)
    }

    /// The tasks of `output = conv(input) + operand` (the operand laid out as
    /// [`Conv2d::output_cube`]), in the form `profile` models as faster of those that
    /// apply: the add fused into each convolution task's DPU
    /// ([`Conv2d::tasks_with_add`], fp16 whole-plane tasks only) or an element-wise add
    /// after the convolution tasks, in place on the output ([`Eltwise`], fp16 and int8
    /// results). A result type neither form adds is the error of the element-wise path.
    /// The input, weights, operand and output are bound by role.
    pub fn tasks_adding(
        &self,
        b: &Bindings,
        profile: &HardwareProfile,
    ) -> Result<(Vec<Task>, AddForm)> {
        // The cost reads sizes, not places: both forms are costed as they will run.
        let (operand, output) = (b.get(Role::Operand)?, b.get(Role::Output)?);
        let mut apart = self.tasks(b)?;
        let add = Eltwise::new(EltwiseOp::Add, self.output_cube()?, Operand::Tensor)?;
        apart.extend(add.tasks_at(output, operand, output)?);
        match self.tasks_with_add(b) {
            Ok(fused)
                if profile.serial_job_seconds(&fused) <= profile.serial_job_seconds(&apart) =>
            {
                Ok((fused, AddForm::Fused))
            }
            _ => Ok((apart, AddForm::Separate)),
        }
    }
}
