//! The fp32 dequantisation over a whole cube.

use super::{bands, flying};
use crate::error::{Error, Result};
use crate::float::{f16_to_f32, f32_to_f16};
use crate::kernels::ops::Cube;
use crate::kernels::single::dequant_scale_bits;
use crate::regcmd::DmaAddr;
use crate::task::{EW_PER_CHANNEL, Erdma, Ew, EwOp, EwSrc, Mul, Precision, Stage, Task};

/// An fp32 dequantisation over a whole cube: `y[p][c] = (x[p][c] · fp16(scale)) ·
/// fp16(w[c])` in fp32, written as fp32 or rounded to fp16.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Dequant {
    /// The per-tensor (activation) scale, carried as fp16 by the BS multiplier.
    pub scale: f32,
    /// The output element type: fp32 or fp16.
    pub out: Precision,
}

impl Dequant {
    /// The epilogue, refused for a scale fp16 cannot carry (`Error::OutOfRange`) or an
    /// output other than fp32 and fp16 (`Error::Unsupported`).
    pub fn new(scale: f32, out: Precision) -> Result<Dequant> {
        dequant_scale_bits("dequant tensor scale", 0, scale)?;
        if !matches!(out, Precision::Fp32 | Precision::Fp16) {
            return Err(Error::Unsupported {
                what: "dequantisation",
                why: format!("{out} output; the task writes fp32 or fp16"),
            });
        }
        Ok(Dequant { scale, out })
    }

    /// The per-channel scale buffer: one `u32` per channel with the fp16 bits of
    /// `w[c]` in its low half (`kernels::single::pack_dequant_coefficients`).
    pub fn coefficients(scales: &[f32]) -> Result<Vec<u8>> {
        crate::kernels::single::pack_dequant_coefficients(scales)
    }

    /// The tasks over the fp32 cube at `input` (for a matmul result of M rows and N
    /// columns in the native layout `[N/4][M][4]`: `Cube::new(m, 1, n, Fp32)`), one per
    /// band of at most [`MAX_TASK_WIDTH`](crate::kernels::ops::eltwise::MAX_TASK_WIDTH) columns, with the per-channel scales
    /// ([`Dequant::coefficients`]) at `coeffs`, writing `cube.with_precision(out)` at
    /// `output`. An fp16 output needs a multiple of 8 channels (whole fp16 atoms from
    /// whole fp32 surfaces); other cubes are `Error::Unsupported`.
    pub(crate) fn tasks_at(
        &self,
        cube: Cube,
        input: DmaAddr,
        coeffs: DmaAddr,
        output: DmaAddr,
    ) -> Result<Vec<Task>> {
        if cube.precision != Precision::Fp32
            || (self.out == Precision::Fp16 && !cube.channels.is_multiple_of(8))
        {
            return Err(Error::Unsupported {
                what: "dequantisation task",
                why: format!(
                    "a {} cube of {} channels to {}; the task reads fp32 cubes, and an fp16 output needs a multiple of 8 channels",
                    cube.precision, cube.channels, self.out
                ),
            });
        }
        let bits = dequant_scale_bits("dequant tensor scale", 0, self.scale)?;
        bands(cube, |x0, wt| {
            let mut t = flying(cube, x0, wt, Precision::Fp32, input, output, self.out)?;
            let (d, r) = (t.dpu.as_mut(), t.dpu_rdma.as_mut());
            let (Some(d), Some(r)) = (d, r) else {
                unreachable!("flying() builds both blocks")
            };
            d.bs = Stage {
                bypass: false,
                alu: None,
                mul: Some(Mul::fp16(bits)),
                relu: false,
                relux: None,
            };
            d.ew = Some(Ew {
                op: Some(EwOp::Mul(0, 0)),
                src: EwSrc::Memory,
                cvt: None,
                relu: false,
                relux: None,
                data_size: 3,
                data_mode: EW_PER_CHANNEL,
                values: [0; 8],
                lut: None,
            });
            d.out_cvt.fp32_to_fp16 = self.out == Precision::Fp16;
            r.erdma = Some(Erdma {
                addr: coeffs,
                data_size: 3,
                data_mode: EW_PER_CHANNEL,
                surf_stride: 1,
                line_notch: 0,
                surf_notch: 0,
            });
            Ok(t)
        })
    }

    /// The tasks for an int32 cube at `input` (a matmul's int32 accumulators): first one
    /// flying task per band converting it to fp32 at `scratch` (which holds
    /// `cube.with_precision(Fp32)`, as many bytes as the int32 cube; the conversion
    /// rounds to nearest even), then the fp32 tasks from `scratch`. The cast task is
    /// the split-K add's int32 → fp32 output without the add (derived, raising
    /// `unvalidated` in the simulator; docs/hardware/dpu-ops.md#dequantisation-over-a-cube).
    /// Cubes other than int32 are `Error::Unsupported`.
    pub(crate) fn int32_tasks_at(
        &self,
        cube: Cube,
        input: DmaAddr,
        scratch: DmaAddr,
        coeffs: DmaAddr,
        output: DmaAddr,
    ) -> Result<Vec<Task>> {
        if cube.precision != Precision::Int32 {
            return Err(Error::Unsupported {
                what: "dequantisation task",
                why: format!("a {} cube; int32_tasks reads int32 cubes", cube.precision),
            });
        }
        let f = cube.with_precision(Precision::Fp32)?;
        let mut tasks = bands(cube, |x0, wt| {
            flying(
                cube,
                x0,
                wt,
                Precision::Int32,
                input,
                scratch,
                Precision::Fp32,
            )
        })?;
        tasks.extend(self.tasks_at(f, scratch, coeffs, output)?);
        Ok(tasks)
    }

    /// The CPU definition on row-major `[pixel][channel]` fp32 data: `(x · fp16(scale)) ·
    /// fp16(w[c])`, each product rounded to fp32, the result rounded to the output type
    /// (nearest even). Returns fp32 values (exactly fp16 values for an fp16 output).
    pub fn reference(&self, x: &[f32], w: &[f32]) -> Result<Vec<f32>> {
        let c = w.len();
        if c == 0 || !x.len().is_multiple_of(c) {
            return Err(Error::InvalidArgument {
                what: format!("{} values for {c} channel scales", x.len()),
            });
        }
        let s = f16_to_f32(dequant_scale_bits("dequant tensor scale", 0, self.scale)?);
        let ws = w
            .iter()
            .enumerate()
            .map(|(i, &v)| dequant_scale_bits("dequant channel scale", i, v).map(f16_to_f32))
            .collect::<Result<Vec<f32>>>()?;
        Ok(x.iter()
            .enumerate()
            .map(|(i, &v)| {
                let y = (v * s) * ws[i % c];
                if self.out == Precision::Fp16 {
                    f16_to_f32(f32_to_f16(y))
                } else {
                    y
                }
            })
            .collect())
    }
}
