//! [`Op`] for convolution.

use super::values::typed;
use super::{Access, Bindings, Op, Port, Role, Sampling, Tolerance, Values, input};
use crate::error::{Error, Result};
use crate::kernels::ops::conv::{Conv2d, ConvOut, reference};
use crate::task::{Precision, Stage, Task};
use half::f16;

impl Conv2d {
    /// Weights in `[oc][kh][kw][c / groups]` (depthwise `[c][kh][kw]`).
    fn weight_values(&self) -> usize {
        let per_kernel = if self.depthwise {
            1
        } else {
            self.input.channels / self.groups.max(1)
        };
        self.out_channels as usize * (self.kernel.0 * self.kernel.1) as usize * per_kernel as usize
    }

    fn sums(&self, inputs: &Values, abs: bool) -> Result<Vec<f64>> {
        let x = input(inputs, Role::Input, self.input.elems())?;
        let w = input(inputs, Role::Weights, self.weight_values())?;
        let pad = match self.input.precision {
            Precision::Int8 => f64::from(self.pad_value),
            _ => 0.0,
        };
        if abs {
            let a = |v: &[f64]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
            reference(self, &a(x), &a(w), pad.abs())
        } else {
            reference(self, x, w, pad)
        }
    }
}

impl Op for Conv2d {
    fn describe(&self) -> String {
        let c = self.input;
        format!(
            "{}x{}x{} {} * {} kernel(s) of {}x{}{} stride {} pad {} dilation {}{}",
            c.height,
            c.width,
            c.channels,
            c.precision,
            self.out_channels,
            self.kernel.0,
            self.kernel.1,
            if self.depthwise { " (depthwise)" } else { "" },
            self.stride.0,
            self.pad.top,
            self.dilation.0,
            match self.output_size() {
                Ok((ow, oh)) => format!(" -> {oh}x{ow}x{}", self.out_channels),
                Err(_) => String::new(),
            }
        )
    }

    /// The input cube (its channels padded as the tasks read them), the packed weights
    /// and the output cube.
    fn ports(&self) -> Result<Vec<Port>> {
        self.check()?;
        let prec = self.input.precision;
        let (ow, oh) = self.output_size()?;
        let out = self.output_cube()?;
        Ok(vec![
            Port {
                values: self.input.elems(),
                ..Port::cube(Role::Input, Access::Read, self.input_cube()?)
            },
            Port::raw(
                Role::Weights,
                Access::Read,
                self.weight_bytes()?,
                self.weight_values(),
                prec,
            ),
            Port {
                values: ow as usize * oh as usize * self.out_channels as usize,
                ..Port::cube(Role::Output, Access::Write, out)
            },
        ])
    }

    fn tasks(&self, b: &Bindings) -> Result<Vec<Task>> {
        self.tasks_at(
            b.get(Role::Input)?,
            b.get(Role::Weights)?,
            b.get(Role::Output)?,
        )
    }

    fn pack(&self, role: Role, values: &[f64]) -> Result<Vec<u8>> {
        let prec = self.input.precision;
        match (role, prec) {
            (Role::Input, Precision::Int8) => self.pack_input(&typed(prec, values, |v| v as i8)?),
            (Role::Input, _) => self.pack_input(&typed(prec, values, f16::from_f64)?),
            (Role::Weights, Precision::Int8) => {
                self.pack_weights(&typed(prec, values, |v| v as i8)?)
            }
            (Role::Weights, _) => self.pack_weights(&typed(prec, values, f16::from_f64)?),
            _ => Err(Error::InvalidArgument {
                what: format!("a convolution does not read a {role}"),
            }),
        }
    }

    fn unpack(&self, role: Role, bytes: &[u8]) -> Result<Vec<f64>> {
        if role != Role::Output {
            return Err(Error::InvalidArgument {
                what: format!("a convolution does not write a {role}"),
            });
        }
        Ok(match self.out_precision() {
            Precision::Int32 => self
                .unpack_output::<i32>(bytes)?
                .into_iter()
                .map(f64::from)
                .collect(),
            Precision::Int8 => self
                .unpack_output::<i8>(bytes)?
                .into_iter()
                .map(f64::from)
                .collect(),
            _ => self
                .unpack_output::<f16>(bytes)?
                .into_iter()
                .map(f16::to_f64)
                .collect(),
        })
    }

    /// int8: the whole input range, weights in −127..=127; fp16: a grid of 1/1000 on
    /// [−1, 1], rounded to fp16.
    fn sampling(&self, role: Role) -> Sampling {
        match (self.input.precision, role) {
            (Precision::Int8, Role::Weights) => Sampling::integers(-127, 127),
            (Precision::Int8, _) => Sampling::integers(-128, 127),
            _ => Sampling {
                lo: -1.0,
                hi: 1.0,
                step: 1e-3,
            },
        }
    }

    /// The direct convolution in f64: the int32 sums exactly, the fp16 result before
    /// its rounding. A requantising output or a BS epilogue is not covered
    /// ([`Error::Unsupported`]): their references are the epilogues' own.
    fn reference(&self, inputs: &Values) -> Result<Vec<f64>> {
        if !matches!(self.out, ConvOut::Int32 | ConvOut::Fp16) || self.bs != Stage::BYPASSED {
            return Err(Error::Unsupported {
                what: "convolution reference",
                why: "a requantising output or a BS epilogue (the epilogues define their own)"
                    .into(),
            });
        }
        self.sums(inputs, false)
    }

    /// int32 sums are exact. fp16: fp32 summation in any order of a window's K products
    /// keeps `|error| <= (K + 1)·2^-24·Σ|x·w|`, and the fp16 result adds at most half an
    /// ulp: `2^-11·(|exact| + that)` for normal values, 2^-25 below them.
    fn tolerance(&self, inputs: &Values, want: &[f64]) -> Result<Tolerance> {
        if self.out == ConvOut::Int32 {
            return Ok(Tolerance::exact(want.len()));
        }
        let k = self.weight_values() as f64 / f64::from(self.out_channels);
        let abs = self.sums(inputs, true)?;
        Ok(Tolerance {
            allowed: want
                .iter()
                .zip(&abs)
                .map(|(e, s)| {
                    let sum = (k + 1.0) * 2f64.powi(-24) * s;
                    sum + 2f64.powi(-11) * (e.abs() + sum) + 2f64.powi(-25)
                })
                .collect(),
            basis: "fp32 summation and fp16 rounding bound".into(),
        })
    }
}
