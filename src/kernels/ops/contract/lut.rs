//! [`Op`] for the LUT activations.

use super::{Access, Bindings, Op, Port, Role, Sampling, Tolerance, Values, input};
use crate::error::Result;
use crate::kernels::ops::lut::ActivationOp;
use crate::task::{Precision, Task};

impl Op for ActivationOp {
    fn describe(&self) -> String {
        let c = self.cube;
        let (lo, hi) = self.activation.input_range();
        format!(
            "{} of {}x{}x{} {}, inputs in [{lo}, {hi}]",
            self.activation, c.height, c.width, c.channels, c.precision
        )
    }

    /// The input, the constant operand ReLU and ReLU6 read (zeros, sixes), the output.
    fn ports(&self) -> Result<Vec<Port>> {
        let mut ports = vec![Port::cube(Role::Input, Access::Read, self.cube)];
        if let Some(bytes) = self.operand()? {
            let n = bytes.len() as u64;
            ports.push(Port::raw(
                Role::Operand,
                Access::Constant(bytes),
                n,
                0,
                Precision::Fp16,
            ));
        }
        ports.push(Port::cube(Role::Output, Access::Write, self.cube));
        Ok(ports)
    }

    fn tasks(&self, b: &Bindings) -> Result<Vec<Task>> {
        // Functions without a constant operand never read it: any address serves.
        let operand = match self.reads_operand() {
            true => b.get(Role::Operand)?,
            false => b.get(Role::Input)?,
        };
        self.tasks_at(b.get(Role::Input)?, b.get(Role::Output)?, operand)
    }

    /// The range the error bound is stated for, on a grid of 2^-20 of it.
    fn sampling(&self, _role: Role) -> Sampling {
        let (lo, hi) = self.activation.input_range();
        Sampling {
            lo,
            hi,
            step: (hi - lo) / f64::from(1 << 20),
        }
    }

    /// The exact function of each (fp16) input.
    fn reference(&self, inputs: &Values) -> Result<Vec<f64>> {
        let x = input(inputs, Role::Input, self.cube.elems())?;
        Ok(x.iter().map(|&v| self.activation.exact(v)).collect())
    }

    /// [`Activation::error_bound`](crate::kernels::ops::lut::Activation::error_bound).
    fn tolerance(&self, _inputs: &Values, reference: &[f64]) -> Result<Tolerance> {
        let bound = self.activation.error_bound();
        Ok(Tolerance::uniform(
            reference.len(),
            bound,
            format!("bound {bound:.1e} against the exact function (docs/ops.md)"),
        ))
    }
}
