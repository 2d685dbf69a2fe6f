//! LUT activations: ReLU, ReLU6, SiLU, GELU, sigmoid, tanh and exp over a [`Cube`] of
//! fp16, as flying DPU tasks (op-enable 0x18) — the DPU LUT for the smooth functions, the
//! EW stage for the rest (docs/ops.md, "LUT activations"; docs/hardware/lut.md).
//!
//! | Activation | Tasks | Recipe |
//! |---|---|---|
//! | sigmoid | LUT | "unit": Q0.15 table of f on ±6.31 (index scale 2596), decode `(q + 1)·2^−15` |
//! | tanh | LUT | "affine": Q0.15 table of `(f + 1)/2` on ±3.14 (scale 5216), decode `(q − 16384)·2^−14` |
//! | exp | LUT | "shifted": one table of f on [−16, 0] (scale 1024, bias 16384), decode `q·2^−15` |
//! | SiLU | LUT | "affine": Q0.15 table of `(f + 0.5)/32` on ±16 (scale 1024), decode `(q − 512)·2^−10` |
//! | GELU | LUT | as SiLU (boards are known to mis-decode this single-pass GELU, docs/ops.md) |
//! | ReLU | EW max | `max(x, 0)` against a constant operand of zeros |
//! | ReLU6 | BN ReLU + EW min | `min(max(x, 0), 6)`: BN clamps at 0, EW takes the minimum with sixes |
//!
//! The element-wise ops do not depend on the layout, so the cube's bytes are cut into
//! tasks of at most 4096 atoms per line (boards corrupt outputs of wider DPU cubes),
//! each a one-surface cube of 8 fp16 lanes; padding lanes of the last atoms hold `f(0)`.
//! The tables are uploaded by the first LUT task; later tasks use the core's LUT RAM.
//!
//! ```
//! use rknpu_driver::kernels::ops::{Cube, lut::{Activation, ActivationOp}};
//! use rknpu_driver::kernels::ops::contract::{Bindings, Op};
//! use rknpu_driver::task::Precision;
//!
//! let cube = Cube::new(64, 2, 16, Precision::Fp16)?;
//! let op = ActivationOp::new(Activation::Silu, cube)?;
//! let tasks = op.tasks(&Bindings::slots(&op.ports()?))?;
//! // 64 × 2 × 2 atoms, one tile: the sigmoid gate on the LUT, then x · gate.
//! assert_eq!(tasks.len(), 2);
//! assert!(tasks[0].dpu.unwrap().ew.unwrap().lut.unwrap().upload.is_some());
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

use super::Cube;
use crate::error::{Error, Result};
use crate::float::f32_to_f16;
use crate::regcmd::DmaAddr;
use crate::task::{
    AluOp, EwOp, LUT_ENTRIES, Lut, LutSlope, LutTables, OutCvt, Precision, Stage, Task,
};
use half::f16;

mod fp32;
mod tasks;

pub use fp32::{FP32_SILU_CARRIER, fp32_silu_recipe, fp32_silu_tasks};
use tasks::ew_task;
pub use tasks::lut_task;

/// Atoms per line of one task: the widest DPU cube boards compute cleanly
/// (docs/hardware/lut.md#width).
pub const MAX_TASK_WIDTH: u32 = 4096;

/// An activation function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Activation {
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, 0), 6)`.
    Relu6,
    /// `x · sigmoid(x)`.
    Silu,
    /// `x · Φ(x)` (the erf form).
    Gelu,
    /// `1 / (1 + e^−x)`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `e^x`.
    Exp,
}

impl Activation {
    /// Every activation.
    pub const ALL: [Activation; 7] = [
        Activation::Relu,
        Activation::Relu6,
        Activation::Silu,
        Activation::Gelu,
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Exp,
    ];

    /// Its lower-case name (`relu`, `relu6`, `silu`, `gelu`, `sigmoid`, `tanh`, `exp`).
    pub const fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Relu6 => "relu6",
            Activation::Silu => "silu",
            Activation::Gelu => "gelu",
            Activation::Sigmoid => "sigmoid",
            Activation::Tanh => "tanh",
            Activation::Exp => "exp",
        }
    }

    /// Its definition, as a formula (`max(x, 0)`, `x · sigmoid(x)`, ...).
    pub const fn formula(self) -> &'static str {
        match self {
            Activation::Relu => "max(x, 0)",
            Activation::Relu6 => "min(max(x, 0), 6)",
            Activation::Silu => "x · sigmoid(x)",
            Activation::Gelu => "x · Φ(x), the erf form",
            Activation::Sigmoid => "1 / (1 + e^−x)",
            Activation::Tanh => "tanh(x)",
            Activation::Exp => "e^x",
        }
    }

    /// The activation of a name.
    pub fn from_name(name: &str) -> Option<Activation> {
        Activation::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The exact function, in f64.
    pub fn exact(self, x: f64) -> f64 {
        match self {
            Activation::Relu => x.max(0.0),
            Activation::Relu6 => x.clamp(0.0, 6.0),
            Activation::Silu => x * sigmoid(x),
            Activation::Gelu => x * phi(x),
            Activation::Sigmoid => sigmoid(x),
            Activation::Tanh => x.tanh(),
            Activation::Exp => x.exp(),
        }
    }

    /// The input range the errors are measured and bounded over (docs/ops.md): the
    /// tables' range and a little beyond for the LUT functions; outside it the LUT
    /// extrapolates linearly and the error grows.
    pub const fn input_range(self) -> (f64, f64) {
        match self {
            Activation::Relu | Activation::Relu6 => (-16.0, 16.0),
            Activation::Sigmoid => (-8.0, 8.0),
            Activation::Silu | Activation::Gelu => (-16.0, 16.0),
            Activation::Tanh => (-4.0, 4.0),
            Activation::Exp => (-16.0, 0.0),
        }
    }

    /// The documented bound on the absolute error of [`ActivationOp`]'s result against
    /// [`Activation::exact`] of every fp16 input in [`Activation::input_range`], about
    /// twice the error measured on the simulator (docs/ops.md, "LUT activations"; the
    /// tests hold every activation to it).
    pub const fn error_bound(self) -> f64 {
        match self {
            Activation::Relu | Activation::Relu6 => 0.0,
            Activation::Sigmoid => 2.5e-3,
            Activation::Tanh => 5e-3,
            Activation::Exp => 7.5e-4,
            // Two passes, x · gate(x): the gate's error times |x| up to 16 (the sigmoid
            // table ends at ±6.31, where it holds sigmoid(6.31) = 0.9982 for every
            // larger x).
            Activation::Silu => 7.5e-2,
            Activation::Gelu => 3.5e-3,
        }
    }

    /// Whether it uses the LUT.
    pub const fn uses_lut(self) -> bool {
        !matches!(self, Activation::Relu | Activation::Relu6)
    }
}

impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The standard normal CDF `Φ(x) = (1 + erf(x/√2)) / 2`.
fn phi(x: f64) -> f64 {
    0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// erf to about 1e-15: the Maclaurin series for |x| < 3, the continued fraction of erfc
/// beyond.
fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 3.0 {
        let (mut term, mut sum, x2) = (a, a, a * a);
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -x2 / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(a) = e^{-a²}/√π · 1/(a + 1/2/(a + 1/(a + 3/2/(a + ...))))
        let mut f = a;
        for k in (1..60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * f)
    };
    if x < 0.0 { -r } else { r }
}

/// The table-driven function of a LUT task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Gate {
    /// sigmoid.
    Sigmoid,
    /// Φ, the standard normal CDF (a `[0, 1]` gate for a two-pass GELU).
    Phi,
    /// tanh.
    Tanh,
    /// exp on [−16, 0].
    Exp,
    /// SiLU on ±16.
    Silu,
    /// GELU on ±16.
    Gelu,
}

impl Gate {
    fn f(self, x: f64) -> f64 {
        match self {
            Gate::Sigmoid => sigmoid(x),
            Gate::Phi => phi(x),
            Gate::Tanh => x.tanh(),
            Gate::Exp => x.exp(),
            Gate::Silu => x * sigmoid(x),
            Gate::Gelu => x * phi(x),
        }
    }
}

/// One LUT program: the tables, the LUT configuration, the BN index pre-scale and the
/// output decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LutRecipe {
    /// The tables to upload.
    pub tables: LutTables,
    /// The LUT configuration (without the upload).
    pub lut: Lut,
    /// `BN_MUL_OPERAND`: fp16 bits of the index scale.
    pub bn_mul: u16,
    /// `BN_ALU_OPERAND`: fp32 bits of the index bias.
    pub bn_alu: u32,
    /// The output converter decoding the table's fixed-point code.
    pub out_cvt: OutCvt,
}

/// Q0.15 code of `y`, floored at 1 (a zero entry decodes to about 4.0 on boards) and
/// capped at 32767.
fn q15(y: f64) -> i16 {
    (y * 32768.0).round().clamp(1.0, 32767.0) as i16
}

/// What a table stores of the gate's value at an input.
type Stored = fn(Gate, f64) -> f64;

/// The recipe of a gate (docs/ops.md, "LUT activations", for the values and their
/// sources).
pub fn recipe(gate: Gate) -> LutRecipe {
    let mut lut = Lut::hybrid(5).expect("select 5 fits");
    let (scale, g, offset, minus_exp): (f64, Stored, i32, u32) = match gate {
        // "unit": q = 32768 f, decode (q + 1) 2^-15.
        Gate::Sigmoid | Gate::Phi => (2596.0, |g, x| g.f(x), 1, 15),
        // "affine": q = 32768 (f + 1) / 2, decode (q - 16384) 2^-14.
        Gate::Tanh => (5216.0, |g, x| (g.f(x) + 1.0) / 2.0, -16384, 14),
        // "shifted": one table over [-16, 0], decode q 2^-15.
        Gate::Exp => (1024.0, |g, x| g.f(x), 0, 15),
        // "affine": q = 32768 (f + 0.5) / 32, decode (q - 512) 2^-10.
        Gate::Silu | Gate::Gelu => (1024.0, |g, x| (g.f(x) + 0.5) / 32.0, -512, 10),
    };
    let mut tables = LutTables {
        le: [0; LUT_ENTRIES],
        lo: [0; LUT_ENTRIES],
    };
    let step = 32.0 / scale;
    let mut bn_alu = 0x8000_0000; // -0.0: no bias
    if gate == Gate::Exp {
        // X = x·1024 + 16384 maps [-16, 0] onto the LO table; LE repeats LO[0].
        for j in 0..LUT_ENTRIES {
            tables.lo[j] = q15(g(gate, -16.0 + j as f64 * step));
        }
        tables.le = [tables.lo[0]; LUT_ENTRIES];
        bn_alu = 16384f32.to_bits();
    } else {
        for i in 0..LUT_ENTRIES {
            tables.le[i] = q15(g(gate, -((512 - i) as f64) * step));
            tables.lo[i] = q15(g(gate, i as f64 * step));
        }
    }
    // Below the LE table: the board-run underflow slope 23107 / 2^22 of the sigmoid and
    // tanh programs; Φ and exp are flat there (slope 0).
    if matches!(gate, Gate::Sigmoid | Gate::Tanh) {
        lut.le.slope = LutSlope {
            uflow_scale: 23107,
            uflow_shift: 22,
            ..LutSlope::default()
        };
    }
    // Above the LO table SiLU and GELU continue as x: one code per index unit
    // (8192 / 2^13, the slope of the published fp32 SiLU program).
    if matches!(gate, Gate::Silu | Gate::Gelu) {
        lut.lo.slope = LutSlope {
            oflow_scale: 8192,
            oflow_shift: 13,
            ..LutSlope::default()
        };
    }
    LutRecipe {
        tables,
        lut,
        bn_mul: f32_to_f16(scale as f32),
        bn_alu,
        out_cvt: OutCvt {
            offset,
            scale: 1,
            shift: 0,
            add_first: true,
            round_half_up: false,
            fp32_to_fp16: true,
            minus_exp,
        },
    }
}

/// A one-surface fp16 tile of `w × h` atoms at byte `offset` of each tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tile {
    w: u32,
    h: u32,
    offset: u32,
}

/// Cuts `atoms` consecutive atoms into tiles of at most [`MAX_TASK_WIDTH`] atoms a line
/// and 8192 lines.
fn tiles(atoms: u64) -> Result<Vec<Tile>> {
    let w = MAX_TASK_WIDTH as u64;
    let mut out = Vec::new();
    let mut done = 0u64;
    while done < atoms {
        let left = atoms - done;
        let (tw, th) = if left >= w {
            (w, (left / w).min(8192))
        } else {
            (left, 1)
        };
        let offset = u32::try_from(done * 16).map_err(|_| Error::Unsupported {
            what: "LUT activation",
            why: "the tensor does not fit 32-bit device addresses".into(),
        })?;
        out.push(Tile {
            w: tw as u32,
            h: th as u32,
            offset,
        });
        done += tw * th;
    }
    Ok(out)
}

fn plus(a: DmaAddr, bytes: u32) -> Result<DmaAddr> {
    a.checked_offset(bytes.into())
        .ok_or_else(|| Error::Unsupported {
            what: "LUT activation",
            why: "a tile's address does not fit 32 bits".into(),
        })
}

/// One activation over one cube: its tasks and the constant operand they read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActivationOp {
    /// The function.
    pub activation: Activation,
    /// The tensor (input and output have this geometry).
    pub cube: Cube,
    /// Whether the first LUT task uploads the tables (default); without, the tasks use
    /// what the core's LUT RAM holds from an earlier task of the same recipe.
    pub upload: bool,
}

impl ActivationOp {
    /// The activation of `cube`, which must be fp16. int8 is refused: no program run on
    /// a board drives the LUT in an integer pipeline (docs/ops.md, "LUT activations").
    pub fn new(activation: Activation, cube: Cube) -> Result<ActivationOp> {
        match cube.precision {
            Precision::Fp16 => {}
            Precision::Int8 => {
                return Err(Error::Unsupported {
                    what: "LUT activation",
                    why: "int8: no board-run program uses the LUT in an integer pipeline (the index pre-scale, the interpolation width and the requantising decode are all unknown there); dequantise to fp16 first".into(),
                });
            }
            p => {
                return Err(Error::Unsupported {
                    what: "LUT activation",
                    why: format!("{p}: the activations run on fp16 tensors"),
                });
            }
        }
        Ok(ActivationOp {
            activation,
            cube,
            upload: true,
        })
    }

    /// Whether the first LUT task uploads the tables.
    pub fn with_upload(mut self, upload: bool) -> ActivationOp {
        self.upload = upload;
        self
    }

    /// The gate the LUT computes, if any.
    pub fn gate(&self) -> Option<Gate> {
        Some(match self.activation {
            Activation::Relu | Activation::Relu6 => return None,
            Activation::Sigmoid | Activation::Silu => Gate::Sigmoid,
            Activation::Gelu => Gate::Phi,
            Activation::Tanh => Gate::Tanh,
            Activation::Exp => Gate::Exp,
        })
    }

    fn tiles(&self) -> Result<Vec<Tile>> {
        tiles(self.cube.bytes() / 16)
    }

    /// Whether the tasks read a constant operand ([`ActivationOp::operand`]): ReLU and
    /// ReLU6, which run on the EW stage against zeros and sixes.
    pub const fn reads_operand(&self) -> bool {
        !self.activation.uses_lut()
    }

    /// The bytes the `operand` buffer of [`Op::tasks`](super::contract::Op::tasks) must hold, `None` when
    /// the tasks read none: fp16 zeros for ReLU, sixes for ReLU6 (one tile's worth;
    /// every tile reads the same constants).
    pub fn operand(&self) -> Result<Option<Vec<u8>>> {
        if !self.reads_operand() {
            return Ok(None);
        }
        let first = self.tiles()?[0];
        let n = first.w as usize * first.h as usize * 16;
        Ok(match self.activation {
            Activation::Relu => Some(vec![0; n]),
            Activation::Relu6 => Some(f16::from_f32(6.0).to_le_bytes().repeat(n / 2)),
            _ => None,
        })
    }

    /// The tasks: `input` and `output` hold the cube; `operand` holds
    /// [`ActivationOp::operand`] (unused when that is `None`). One task per tile; SiLU and
    /// GELU are two passes, `x · gate(x)`: the LUT writes the gate (sigmoid, Φ) to
    /// `output`, then an element-wise multiply of every tile by `input` overwrites it in
    /// place (the board-validated form; the single-pass tables of [`Gate::Silu`] and
    /// [`Gate::Gelu`] mis-decode near 0 on boards, docs/hardware/lut.md#quirks).
    pub(crate) fn tasks_at(
        &self,
        input: DmaAddr,
        output: DmaAddr,
        operand: DmaAddr,
    ) -> Result<Vec<Task>> {
        let tiles = self.tiles()?;
        let mut out = Vec::new();
        let at = |a: DmaAddr, t: &Tile| plus(a, t.offset);
        match self.activation {
            Activation::Relu => {
                for t in &tiles {
                    out.push(ew_task(
                        EwOp::Alu(AluOp::Max),
                        *t,
                        at(input, t)?,
                        operand,
                        at(output, t)?,
                        Stage::BYPASSED,
                    ));
                }
            }
            Activation::Relu6 => {
                // BN clamps at 0 (BN_CFG with ALU and multiplier bypassed, ReLU on), then
                // the EW stage takes the minimum with the sixes.
                let relu = Stage {
                    bypass: false,
                    alu: None,
                    mul: None,
                    relu: true,
                    relux: None,
                };
                for t in &tiles {
                    out.push(ew_task(
                        EwOp::Alu(AluOp::Min),
                        *t,
                        at(input, t)?,
                        operand,
                        at(output, t)?,
                        relu,
                    ));
                }
            }
            _ => {
                let r = recipe(self.gate().expect("LUT activations have a gate"));
                for (i, t) in tiles.iter().enumerate() {
                    out.push(lut_task(
                        &r,
                        t.w,
                        t.h,
                        at(input, t)?,
                        at(output, t)?,
                        self.upload && i == 0,
                    ));
                }
                if matches!(self.activation, Activation::Silu | Activation::Gelu) {
                    for t in &tiles {
                        let o = at(output, t)?;
                        out.push(ew_task(
                            EwOp::Mul(0, 0),
                            *t,
                            o,
                            at(input, t)?,
                            o,
                            Stage::BYPASSED,
                        ));
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The CPU reference: the exact function of every element of row-major `[h][w][c]` data,
/// in f64 (the mathematical definition the simulator's results are measured against).
pub fn reference(activation: Activation, hwc: &[f16]) -> Vec<f64> {
    let mut out = Vec::with_capacity(hwc.len());
    for &x in hwc {
        out.push(activation.exact(f64::from(x.to_f32())));
    }
    out
}

#[cfg(test)]
#[path = "lut_tests.rs"]
mod tests;
