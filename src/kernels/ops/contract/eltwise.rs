//! [`Op`] for the element-wise operations.

use super::values::typed;
use super::{Access, Bindings, Op, Port, Role, Sampling, Values, input};
use crate::error::Result;
use crate::kernels::ops::eltwise::{Eltwise, EwElement, Operand, reference};
use crate::task::{Precision, Task};
use half::f16;

/// The reference in the element type `T`: the NPU's own arithmetic, so exact.
fn apply<T: EwElement>(
    ew: &Eltwise,
    a: &[f64],
    b: &[f64],
    conv: fn(f64) -> T,
    back: fn(T) -> f64,
) -> Result<Vec<f64>> {
    let p = ew.cube.precision;
    let out = reference(
        ew.op,
        ew.operand,
        ew.cube.channels as usize,
        &typed(p, a, conv)?,
        &typed(p, b, conv)?,
    )?;
    Ok(out.into_iter().map(back).collect())
}

impl Op for Eltwise {
    fn describe(&self) -> String {
        let c = self.cube;
        format!(
            "{} of {}x{}x{} {} and {}",
            self.op.name(),
            c.height,
            c.width,
            c.channels,
            c.precision,
            match self.operand {
                Operand::Tensor => "a tensor of the same shape".to_string(),
                Operand::PerChannel => format!("{} per-channel values", c.channels),
            }
        )
    }

    fn ports(&self) -> Result<Vec<Port>> {
        Ok(vec![
            Port::cube(Role::Input, Access::Read, self.cube),
            Port::cube(Role::Operand, Access::Read, self.operand_cube()),
            Port::cube(Role::Output, Access::Write, self.cube),
        ])
    }

    fn tasks(&self, b: &Bindings) -> Result<Vec<Task>> {
        self.tasks_at(
            b.get(Role::Input)?,
            b.get(Role::Operand)?,
            b.get(Role::Output)?,
        )
    }

    /// The whole range of the integer types (saturation included); fp16 on the grid of
    /// 1/64 in [−16, 16], whose sums, differences and products round once.
    fn sampling(&self, _role: Role) -> Sampling {
        Sampling::of(self.cube.precision)
    }

    fn reference(&self, inputs: &Values) -> Result<Vec<f64>> {
        let a = input(inputs, Role::Input, self.cube.elems())?;
        let b = input(inputs, Role::Operand, self.operand_cube().elems())?;
        match self.cube.precision {
            Precision::Int8 => apply(self, a, b, |v| v as i8, f64::from),
            Precision::Int16 => apply(self, a, b, |v| v as i16, f64::from),
            _ => apply(self, a, b, f16::from_f64, f16::to_f64),
        }
    }
}
