//! The requantisation and dequantisation epilogues as operations: each with its
//! per-channel parameters, which it places as a constant.

use super::{Access, Bindings, Op, Port, Role, Values, input};
use crate::error::Result;
use crate::kernels::ops::Cube;
use crate::kernels::ops::epilogue::{Dequant, Requant};
use crate::task::{Precision, Task};

/// [`Requant`] over an int32 cube with its per-channel biases and multipliers (empty when
/// the epilogue takes none).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RequantOp {
    /// The epilogue.
    pub requant: Requant,
    /// The int32 accumulators' geometry (the output is its int8 twin).
    pub cube: Cube,
    /// One bias per channel when [`Requant::bias`].
    pub bias: Vec<i32>,
    /// One multiplier per channel when [`Requant::channel_shift`] is set.
    pub multipliers: Vec<i16>,
}

impl RequantOp {
    /// The operation, its parameters checked now ([`Requant::params`]).
    pub fn new(
        requant: Requant,
        cube: Cube,
        bias: &[i32],
        multipliers: &[i16],
    ) -> Result<RequantOp> {
        requant.params(cube.channels, bias, multipliers)?;
        Ok(RequantOp {
            requant,
            cube,
            bias: bias.to_vec(),
            multipliers: multipliers.to_vec(),
        })
    }

    fn params(&self) -> Result<Vec<u8>> {
        self.requant
            .params(self.cube.channels, &self.bias, &self.multipliers)
    }
}

impl Op for RequantOp {
    fn describe(&self) -> String {
        let c = self.cube;
        format!(
            "requantisation of {}x{}x{} int32 to int8{}{}",
            c.height,
            c.width,
            c.channels,
            if self.requant.bias { ", bias" } else { "" },
            match self.requant.channel_shift {
                Some(s) => format!(", per-channel multipliers >> {s}"),
                None => String::new(),
            }
        )
    }

    fn ports(&self) -> Result<Vec<Port>> {
        let mut ports = vec![Port::cube(Role::Input, Access::Read, self.cube)];
        if self.requant.reads_params() {
            let params = self.params()?;
            let n = params.len() as u64;
            let p = Precision::Int32;
            ports.push(Port::raw(Role::Params, Access::Constant(params), n, 0, p));
        }
        let out = self.cube.with_precision(Precision::Int8)?;
        ports.push(Port::cube(Role::Output, Access::Write, out));
        Ok(ports)
    }

    fn tasks(&self, b: &Bindings) -> Result<Vec<Task>> {
        let params = match self.requant.reads_params() {
            true => b.get(Role::Params)?,
            false => b.get(Role::Input)?,
        };
        let (i, o) = (b.get(Role::Input)?, b.get(Role::Output)?);
        self.requant.tasks_at(self.cube, i, params, o)
    }

    fn reference(&self, inputs: &Values) -> Result<Vec<f64>> {
        let acc = input(inputs, Role::Input, self.cube.elems())?;
        let acc: Vec<i32> = super::values::typed(Precision::Int32, acc, |v| v as i32)?;
        let c = self.cube.channels as usize;
        let out = self
            .requant
            .reference(&acc, c, &self.bias, &self.multipliers)?;
        Ok(out.into_iter().map(f64::from).collect())
    }
}

/// [`Dequant`] over an fp32 cube, or an int32 one (cast to fp32 first, through a scratch
/// cube), with one scale per channel.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct DequantOp {
    /// The epilogue.
    pub dequant: Dequant,
    /// The input's geometry: fp32, or int32 accumulators.
    pub cube: Cube,
    /// One scale per channel.
    pub scales: Vec<f32>,
}

impl DequantOp {
    /// The operation; its coefficients are checked now ([`Dequant::coefficients`]).
    pub fn new(dequant: Dequant, cube: Cube, scales: &[f32]) -> Result<DequantOp> {
        if scales.len() != cube.channels as usize {
            return Err(crate::error::Error::InvalidArgument {
                what: format!("{} scales for {} channels", scales.len(), cube.channels),
            });
        }
        Dequant::coefficients(scales)?;
        Ok(DequantOp {
            dequant,
            cube,
            scales: scales.to_vec(),
        })
    }
}

impl Op for DequantOp {
    fn describe(&self) -> String {
        let c = self.cube;
        format!(
            "dequantisation of {}x{}x{} {} to {} (tensor scale {})",
            c.height, c.width, c.channels, c.precision, self.dequant.out, self.dequant.scale
        )
    }

    fn ports(&self) -> Result<Vec<Port>> {
        let coeffs = Dequant::coefficients(&self.scales)?;
        let n = coeffs.len() as u64;
        let mut ports = vec![
            Port::cube(Role::Input, Access::Read, self.cube),
            Port::raw(
                Role::Params,
                Access::Constant(coeffs),
                n,
                0,
                Precision::Fp16,
            ),
        ];
        if self.cube.precision == Precision::Int32 {
            let bytes = self.cube.bytes();
            ports.push(Port::raw(
                Role::Scratch,
                Access::Scratch,
                bytes,
                0,
                Precision::Fp32,
            ));
        }
        let out = self.cube.with_precision(self.dequant.out)?;
        ports.push(Port::cube(Role::Output, Access::Write, out));
        Ok(ports)
    }

    fn tasks(&self, b: &Bindings) -> Result<Vec<Task>> {
        let (i, p, o) = (
            b.get(Role::Input)?,
            b.get(Role::Params)?,
            b.get(Role::Output)?,
        );
        match self.cube.precision {
            Precision::Int32 => {
                let s = b.get(Role::Scratch)?;
                self.dequant.int32_tasks_at(self.cube, i, s, p, o)
            }
            _ => self.dequant.tasks_at(self.cube, i, p, o),
        }
    }

    /// [`Dequant::reference`] of the input as fp32 (int32 rounded to nearest even, as
    /// the cast task does).
    fn reference(&self, inputs: &Values) -> Result<Vec<f64>> {
        let x = input(inputs, Role::Input, self.cube.elems())?;
        let x: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let y = self.dequant.reference(&x, &self.scales)?;
        Ok(y.into_iter().map(f64::from).collect())
    }
}
