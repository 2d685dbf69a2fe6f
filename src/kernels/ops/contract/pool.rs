//! [`Op`] for pooling.

use super::{Access, Bindings, Op, Port, Role, Sampling, Tolerance, Values, input};
use crate::error::Result;
use crate::kernels::ops::pool::{Pool2d, PoolKind, reference};
use crate::task::{Precision, Task};
use half::f16;

impl Op for Pool2d {
    fn describe(&self) -> String {
        let c = self.input;
        let kind = match self.kind {
            PoolKind::Max => "max",
            PoolKind::Avg => "avg",
            PoolKind::Min => "min",
        };
        let pad = match self.padding {
            [0, 0, 0, 0] => String::new(),
            [l, t, r, b] if l == t && t == r && r == b => format!(" pad {l}"),
            [l, t, r, b] => format!(" pad {l},{t},{r},{b} (left, top, right, bottom)"),
        };
        let out = match self.output() {
            Ok(o) => format!(" -> {}x{}x{}", o.height, o.width, o.channels),
            Err(_) => String::new(),
        };
        format!(
            "{kind} {}x{} stride {}x{}{pad} of {}x{}x{} {}{out}",
            self.kernel.0,
            self.kernel.1,
            self.stride.0,
            self.stride.1,
            c.height,
            c.width,
            c.channels,
            c.precision
        )
    }

    /// The input, the intermediates of a multi-pass pool (scratch), the output.
    fn ports(&self) -> Result<Vec<Port>> {
        let mut ports = vec![Port::cube(Role::Input, Access::Read, self.input)];
        let scratch = self.scratch_bytes()?;
        if scratch > 0 {
            let p = self.input.precision;
            ports.push(Port::raw(Role::Scratch, Access::Scratch, scratch, 0, p));
        }
        ports.push(Port::cube(Role::Output, Access::Write, self.output()?));
        Ok(ports)
    }

    fn tasks(&self, b: &Bindings) -> Result<Vec<Task>> {
        let scratch = match self.scratch_bytes()? {
            0 => b.get(Role::Output)?,
            _ => b.get(Role::Scratch)?,
        };
        self.tasks_at(b.get(Role::Input)?, b.get(Role::Output)?, scratch)
    }

    /// The whole int8 range; fp16 on a grid of 1/16 in [−8, 8]: exact in either type, so
    /// only the average's reciprocals and rounding can differ.
    fn sampling(&self, _role: Role) -> Sampling {
        match self.input.precision {
            Precision::Int8 => Sampling::of(Precision::Int8),
            _ => Sampling {
                lo: -8.0,
                hi: 8.0,
                step: 1.0 / 16.0,
            },
        }
    }

    fn reference(&self, inputs: &Values) -> Result<Vec<f64>> {
        let x = input(inputs, Role::Input, self.input.elems())?;
        let x: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        Ok(reference(self, &x)?.into_iter().map(f64::from).collect())
    }

    /// Max and min are exact. Each pass of an average multiplies by the fp16 reciprocal
    /// of each kernel side (off by `e = |fp16(65536/k)·k/65536 − 1|`) and rounds to fp16
    /// (2^-11 relative): errors relative to the window's values, so bounded by the
    /// passes' sum of those times the mean of the window's magnitudes (cancellation
    /// makes `|mean|` itself no bound).
    fn tolerance(&self, inputs: &Values, want: &[f64]) -> Result<Tolerance> {
        if self.kind != PoolKind::Avg {
            return Ok(Tolerance::exact(want.len()));
        }
        let e = |k: u32| {
            let recip = f16::from_f64(65536.0 / f64::from(k)).to_f64();
            (recip * f64::from(k) / 65536.0 - 1.0).abs()
        };
        let passes = self.pass_kernels()?;
        let rel = passes
            .iter()
            .map(|&(kw, kh)| e(kw) + e(kh) + 2f64.powi(-11))
            .sum::<f64>()
            + 1e-6;
        let x = input(inputs, Role::Input, self.input.elems())?;
        let mags: Vec<f32> = x.iter().map(|&v| v.abs() as f32).collect();
        let mags = reference(self, &mags)?;
        Ok(Tolerance {
            allowed: mags.iter().map(|&m| rel * f64::from(m) + 1e-7).collect(),
            basis: format!(
                "bound {rel:.1e} x the mean magnitude, from the fp16 reciprocals and roundings of {} pass(es)",
                passes.len()
            ),
        })
    }
}
