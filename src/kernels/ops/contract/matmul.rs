//! [`Op`] for a matmul plan: `C = A · B` with A the activations, B the weight bank.

use super::values::typed;
use super::{Access, Bindings, Op, Port, Role, Sampling, Tolerance, Values, input};
use crate::error::{Error, Result};
use crate::kernels::matmul::{Plan, pack_weights_f32, pack_weights_int};
use crate::kernels::ops::Cube;
use crate::kernels::single::OutType;
use crate::task::{Precision, Task};

/// A matmul plan as an operation: the input is A (row-major `M × K`), the weights B
/// (row-major `K × N`, packed into the plan's weight layout), the output C (row-major
/// `M × N`, the host's sum of the plan's K waves, or with [`MatmulOp::cube_output`] the
/// cube the NPU wrote whole). Every plan emits and reads back; host
/// values (packing, sampling) exist for int8, int16, fp16 and bf16 operands, so an int4
/// plan's [`Op::pack`] is an [`Error::Unsupported`] (a layer binds its bank instead).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MatmulOp {
    /// The plan.
    pub plan: Plan,
    /// Whether the tasks read A as the native cube `Cube::new(m, 1, k, ..)` an earlier
    /// operation wrote ([`Plan::task_native_a`]; one K wave, one M tile) rather than the
    /// plan's own packed A. With [`MatmulOp::cube_output`] any plan reads it so;
    /// otherwise only one of one K wave and one M tile.
    pub native_input: bool,
    /// Whether C is written as the one cube `Cube::new(m, 1, n', ..)` ([`Plan::cube_tasks`]:
    /// every block in place, later K waves added on the NPU through scratch), which a
    /// chained operation reads, rather than the plan's partial blocks.
    pub cube_output: bool,
}

impl MatmulOp {
    /// The operation of `plan`.
    pub fn new(plan: Plan) -> Result<MatmulOp> {
        Ok(MatmulOp {
            plan,
            native_input: false,
            cube_output: false,
        })
    }

    /// Writing C as one cube ([`MatmulOp::cube_output`]); an error when the plan cannot
    /// ([`Plan::cube_form`]: several K waves of other than int32 partials).
    pub fn with_cube_output(mut self) -> Result<MatmulOp> {
        self.plan.cube_form()?;
        self.cube_output = true;
        Ok(self)
    }

    /// Reading A as a native cube ([`MatmulOp::native_input`]).
    pub fn with_native_input(mut self, native: bool) -> MatmulOp {
        self.native_input = native;
        self
    }

    fn dims(&self) -> (usize, usize, usize) {
        let s = &self.plan.spec;
        (s.m as usize, s.k as usize, s.n as usize)
    }

    /// The cube C is written as, when it is one (as [`MatmulOp::cube_output`] asks, or a
    /// plan of one K wave and one M tile whose blocks make one).
    fn out_cube(&self) -> Result<Option<Cube>> {
        let p = &self.plan;
        let prec = match p.c_type() {
            OutType::Int32 => Precision::Int32,
            OutType::Fp32 => Precision::Fp32,
            OutType::Fp16 => Precision::Fp16,
            OutType::Int16 => Precision::Int16,
            _ => return Ok(None),
        };
        if self.cube_output {
            let form = p.cube_form()?;
            return Ok(Some(Cube::new(p.spec.m, 1, form.channels, prec)?));
        }
        if p.layout.waves.len() != 1 || p.m_tile < p.spec.m {
            return Ok(None);
        }
        let cube = Cube::new(p.spec.m, 1, p.spec.n.next_multiple_of(32), prec)?;
        Ok((cube.bytes() == p.c_bytes).then_some(cube))
    }

    fn float(&self) -> bool {
        self.plan.spec.dtype.is_float()
    }
}

impl Op for MatmulOp {
    fn describe(&self) -> String {
        let s = &self.plan.spec;
        format!(
            "matmul {}x{}x{} {} ({} K wave(s), {} task(s))",
            s.m,
            s.k,
            s.n,
            s.dtype.name(),
            self.plan.layout.waves.len(),
            self.plan.tasks.len()
        )
    }

    /// A (the plan's packed buffer, or the native cube), the weight bank, and C (a cube
    /// when the plan writes one, else the plan's partial blocks).
    fn ports(&self) -> Result<Vec<Port>> {
        let (m, k, n) = self.dims();
        let p = &self.plan;
        let prec = p.spec.dtype.precision();
        let a = if self.native_input {
            Port::cube(
                Role::Input,
                Access::Read,
                Cube::new(p.spec.m, 1, p.spec.k, prec)?,
            )
        } else {
            Port::raw(Role::Input, Access::Read, p.a_bytes, m * k, prec)
        };
        let out_prec = match self.float() {
            true => Precision::Fp32,
            false => Precision::Int32,
        };
        let c = match self.out_cube()? {
            Some(cube) => Port {
                values: m * n,
                ..Port::cube(Role::Output, Access::Write, cube)
            },
            None => Port::raw(Role::Output, Access::Write, p.c_bytes, m * n, out_prec),
        };
        let mut ports = vec![
            a,
            Port::raw(Role::Weights, Access::Read, p.layout.bytes, k * n, prec),
            c,
        ];
        if self.cube_output {
            let scratch = p.cube_form()?.scratch;
            if scratch > 0 {
                ports.push(Port::raw(
                    Role::Scratch,
                    Access::Scratch,
                    scratch,
                    0,
                    out_prec,
                ));
            }
        }
        Ok(ports)
    }

    fn tasks(&self, b: &Bindings) -> Result<Vec<Task>> {
        let addrs = [
            b.get(Role::Input)?,
            b.get(Role::Weights)?,
            b.get(Role::Output)?,
        ];
        if self.cube_output {
            let scratch = match self.plan.cube_form()?.scratch {
                0 => addrs[2],
                _ => b.get(Role::Scratch)?,
            };
            let [a, w, c] = addrs;
            return self.plan.cube_tasks([a, w, c, scratch], self.native_input);
        }
        self.plan
            .tasks
            .iter()
            .map(|t| match self.native_input {
                true => self.plan.task_native_a(t, addrs),
                false => self.plan.task(t, addrs),
            })
            .collect()
    }

    fn pack(&self, role: Role, values: &[f64]) -> Result<Vec<u8>> {
        let p = &self.plan;
        let prec = p.spec.dtype.precision();
        match (role, self.float()) {
            (Role::Input, _) if self.native_input => {
                let cube = Cube::new(p.spec.m, 1, p.spec.k, prec)?;
                super::pack_values(&cube, values)
            }
            (Role::Input, true) => p.pack_a_f32(&typed(prec, values, |v| v as f32)?),
            (Role::Input, false) => p.pack_a_int(&typed(prec, values, |v| v as i32)?),
            (Role::Weights, true) => {
                pack_weights_f32(&p.layout, &typed(prec, values, |v| v as f32)?)
            }
            (Role::Weights, false) => {
                pack_weights_int(&p.layout, &typed(prec, values, |v| v as i32)?)
            }
            _ => Err(Error::InvalidArgument {
                what: format!("a matmul does not read a {role}"),
            }),
        }
    }

    /// C summed over the plan's K waves on the host ([`Plan::reduce_int`],
    /// [`Plan::reduce_f32`]).
    fn unpack(&self, role: Role, bytes: &[u8]) -> Result<Vec<f64>> {
        if role != Role::Output {
            return Err(Error::InvalidArgument {
                what: format!("a matmul does not write a {role}"),
            });
        }
        if self.cube_output
            && let Some(cube) = self.out_cube()?
        {
            let (m, _, n) = self.dims();
            let all =
                super::unpack_values(&cube, bytes.get(..cube.bytes() as usize).unwrap_or(bytes))?;
            let width = cube.channels as usize;
            return Ok((0..m * n).map(|i| all[i / n * width + i % n]).collect());
        }
        let c = bytes.get(..self.plan.c_bytes as usize).unwrap_or(bytes);
        Ok(match self.float() {
            true => self
                .plan
                .reduce_f32(c)?
                .into_iter()
                .map(f64::from)
                .collect(),
            false => self
                .plan
                .reduce_int(c)?
                .into_iter()
                .map(|v| v as f64)
                .collect(),
        })
    }

    /// int8: the whole range; fp16 and bf16: a grid of 1/256 on [−1, 1].
    fn sampling(&self, _role: Role) -> Sampling {
        match self.float() {
            true => Sampling {
                lo: -1.0,
                hi: 1.0,
                step: 1.0 / 256.0,
            },
            false => Sampling::of(Precision::Int8),
        }
    }

    /// The f64 product of the (rounded) operands.
    fn reference(&self, inputs: &Values) -> Result<Vec<f64>> {
        Ok(self.products(inputs, false)?.0)
    }

    /// int8: exact. Float: fp32 sums in any order keep `|error| <= (K + 1)·2^-24·Σ|a·b|`
    /// and the result's rounding (fp32, or fp16 for an fp16 C) adds half an ulp.
    fn tolerance(&self, inputs: &Values, want: &[f64]) -> Result<Tolerance> {
        if !self.float() {
            return Ok(Tolerance::exact(want.len()));
        }
        let (_, mags) = self.products(inputs, true)?;
        let k = self.plan.spec.k as f64;
        let round = match self.plan.spec.out {
            OutType::Fp16 => 2f64.powi(-11),
            _ => 2f64.powi(-24),
        };
        Ok(Tolerance {
            allowed: want
                .iter()
                .zip(&mags)
                .map(|(e, s)| {
                    let sum = (k + 1.0) * 2f64.powi(-24) * s;
                    sum + round * (e.abs() + sum) + 2f64.powi(-25)
                })
                .collect(),
            basis: "fp32 summation and output rounding bound".into(),
        })
    }
}

impl MatmulOp {
    /// The products and (when `mags`) the sums of magnitudes, row-major `M × N`.
    fn products(&self, inputs: &Values, mags: bool) -> Result<(Vec<f64>, Vec<f64>)> {
        let (m, k, n) = self.dims();
        let a = input(inputs, Role::Input, m * k)?;
        let b = input(inputs, Role::Weights, k * n)?;
        let mut c = vec![0f64; m * n];
        let mut s = vec![0f64; if mags { m * n } else { 0 }];
        for i in 0..m {
            for kk in 0..k {
                let x = a[i * k + kk];
                for j in 0..n {
                    c[i * n + j] += x * b[kk * n + j];
                    if mags {
                        s[i * n + j] += (x * b[kk * n + j]).abs();
                    }
                }
            }
        }
        Ok((c, s))
    }
}
