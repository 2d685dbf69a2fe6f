//! Requantisation epilogues: what the DPU applies to int32 accumulators (or their fp32
//! conversion) so that one operation's output feeds the next on the NPU (docs/ops.md,
//! "Requantisation epilogues").
//!
//! * [`Requant`]: int32 → int8, `sat8(round_even(((acc + bias[c]) · m[c] ⟫ s₁) · SCALE
//!   ⟫ SHIFT) + zero_point)` — the bias through the BS ALU from memory (BRDMA, Mesa's int8
//!   convolution bias), a per-channel multiplier through the BN multiplier from memory
//!   (NRDMA, derived) and the per-tensor output converter of Mesa's int8 convolution.
//!   [`RequantOp`](super::contract::RequantOp) runs it as flying tasks over an int32 cube; [`Requant::apply`]
//!   puts it on a convolution or matmul task's DPU.
//! * [`Dequant`]: fp32 → fp32 or fp16, `y = (x · s) · w[c]` with a per-tensor scale `s`
//!   and a per-channel scale `w[c]`, over a whole cube: the board-tested dequantisation
//!   task of `kernels::single::dequant_task` generalised to `W × H × C` cubes with
//!   the per-channel operand read once per channel, and an fp16 output.
//!
//! The register paths that no board program runs are marked **derived** in
//! docs/hardware/dpu-ops.md; the simulator runs them and raises the `unvalidated` lint.

use super::Cube;
use super::eltwise::{MAX_TASK_WIDTH, offset};
use crate::error::{Error, Result};
use crate::kernels::single::preset::reads_off;
use crate::regcmd::DmaAddr;
use crate::task::{
    Alu, AluOp, Dpu, DpuInput, DpuRdma, Mrdma, Mul, OperandRead, OutCvt, Output, Precision, Stage,
    Task,
};

mod dequant;

pub use dequant::Dequant;

/// The per-tensor output converter of an int8 requantisation: `round_even((x · scale)
/// ⟫ shift) + offset`, then saturation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct OutScale {
    /// `OUT_CVT_SCALE` (16 bits).
    pub scale: u16,
    /// `OUT_CVT_SHIFT` (0..=63).
    pub shift: u32,
    /// `OUT_CVT_OFFSET`, added after the rounding shift.
    pub offset: i32,
}

impl OutScale {
    /// The converter Mesa's int8 convolution computes for a real scale `s = in_scale ·
    /// w_scale / out_scale` and an output offset (bminor/mesa-mesa
    /// `src/gallium/drivers/rocket/rkt_regcmd.c`): with `b` the fp32 bits of `s`, `scale =
    /// ((b >> 9) & 0x7FFF) + 1`, with bit 14 set when below 2¹⁴ (a Q14 mantissa), and
    /// `shift = 141 − (b >> 23)` (14 − the exponent of `s`). `s` must be positive and
    /// give a shift in 0..=63 (`Error::OutOfRange` otherwise).
    pub fn from_scale(s: f32, offset: i32) -> Result<OutScale> {
        let bits = s.to_bits();
        let exp = (bits >> 23) as i64;
        let shift = 141 - exp;
        if !(s > 0.0 && s.is_normal() && (0..=63).contains(&shift)) {
            return Err(Error::OutOfRange {
                what: "requantisation scale",
                index: 0,
                value: format!("{s:e}"),
                range: "positive normal fp32 values from 2^-49 to 2^14",
            });
        }
        let mut scale = ((bits >> 9) & 0x7FFF) + 1;
        if scale < 1 << 14 {
            scale |= 1 << 14;
        }
        Ok(OutScale {
            scale: scale as u16,
            shift: shift as u32,
            offset,
        })
    }

    /// The converter with these fields as given.
    pub const fn new(scale: u16, shift: u32, offset: i32) -> OutScale {
        OutScale {
            scale,
            shift,
            offset,
        }
    }
}

/// An int32 → int8 requantisation epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Requant {
    /// Add one int32 bias per channel from memory first (BS ALU, BRDMA).
    pub bias: bool,
    /// Multiply by one int16 per channel from memory and shift right (rounding half up)
    /// by this value (BN multiplier, NRDMA), `None` for no per-channel multiplier.
    pub channel_shift: Option<u32>,
    /// The per-tensor output converter.
    pub out: OutScale,
}

/// The largest BN multiplier shift (`BN_MUL_SHIFT_VALUE`, 6 bits).
pub const MAX_CHANNEL_SHIFT: u32 = 63;

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

impl Requant {
    /// A per-tensor requantisation with the output converter `out` (no bias, no
    /// per-channel multiplier).
    pub const fn per_tensor(out: OutScale) -> Requant {
        Requant {
            bias: false,
            channel_shift: None,
            out,
        }
    }

    /// With one int32 bias per channel.
    pub const fn with_bias(mut self) -> Requant {
        self.bias = true;
        self
    }

    /// With one int16 multiplier per channel and the shift after it (0..=63).
    pub fn with_channel_multipliers(mut self, shift: u32) -> Result<Requant> {
        if shift > MAX_CHANNEL_SHIFT {
            return Err(Error::OutOfRange {
                what: "per-channel multiplier shift",
                index: 0,
                value: shift.to_string(),
                range: "0..=63",
            });
        }
        self.channel_shift = Some(shift);
        Ok(self)
    }

    /// Per-channel real scales `scales[c]` as int16 multipliers with shift 14 and the
    /// output converter of the largest scale: `m[c] = round(scales[c] / max · 2¹⁴)`
    /// (≤ 16384). Returns the epilogue and the multipliers. Scales must be positive and
    /// finite (`Error::OutOfRange`); small ratios lose precision (docs/ops.md,
    /// "Requantisation epilogues").
    pub fn per_channel(scales: &[f32], zero_point: i32) -> Result<(Requant, Vec<i16>)> {
        if let Some(i) = scales.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(Error::OutOfRange {
                what: "per-channel requantisation scale",
                index: i,
                value: format!("{:e}", scales[i]),
                range: "positive and finite",
            });
        }
        let max = scales.iter().copied().fold(0f32, f32::max);
        let out = OutScale::from_scale(max, zero_point)?;
        let m = scales
            .iter()
            .map(|&s| ((f64::from(s) / f64::from(max)) * 16384.0).round() as i16)
            .collect();
        Ok((Requant::per_tensor(out).with_channel_multipliers(14)?, m))
    }

    /// Whether the epilogue reads a parameter buffer ([`Requant::params`]): with a bias or
    /// per-channel multipliers.
    pub const fn reads_params(&self) -> bool {
        self.bias || self.channel_shift.is_some()
    }

    /// Byte offset of the multipliers in the parameter buffer of `channels` channels.
    pub fn multipliers_offset(&self, channels: u32) -> u32 {
        if self.bias {
            round_up(channels as usize * 4, 16) as u32
        } else {
            0
        }
    }

    /// The parameter buffer: the biases (int32 per channel, zero-padded to 16 bytes),
    /// then the multipliers (int16 per channel, zero-padded to 16 bytes), each present
    /// only when the epilogue uses it. Lengths other than `channels` are
    /// `Error::InvalidArgument`.
    pub fn params(&self, channels: u32, bias: &[i32], multipliers: &[i16]) -> Result<Vec<u8>> {
        let c = channels as usize;
        let want = (
            if self.bias { c } else { 0 },
            if self.channel_shift.is_some() { c } else { 0 },
        );
        if (bias.len(), multipliers.len()) != want {
            return Err(Error::InvalidArgument {
                what: format!(
                    "{} biases and {} multipliers for {c} channels; the epilogue takes {} and {}",
                    bias.len(),
                    multipliers.len(),
                    want.0,
                    want.1
                ),
            });
        }
        let mut out = Vec::new();
        if self.bias {
            out.extend(bias.iter().flat_map(|b| b.to_le_bytes()));
            out.resize(round_up(out.len(), 16), 0);
        }
        let at = out.len();
        out.extend(multipliers.iter().flat_map(|m| m.to_le_bytes()));
        out.resize(at + round_up(out.len() - at, 16), 0);
        Ok(out)
    }

    /// The BS and BN stages, the output converter and the operand reads of this
    /// epilogue for `channels` channels with parameters at `params`.
    fn stages(&self, channels: u32, params: DmaAddr) -> Result<(Stage, Stage, OutCvt, Reads)> {
        let bs = if self.bias {
            Stage {
                bypass: false,
                alu: Some(Alu {
                    op: AluOp::Add,
                    operand: 0,
                    from_memory: true,
                }),
                mul: None,
                relu: false,
                relux: None,
            }
        } else {
            Stage::BYPASSED
        };
        let bn = match self.channel_shift {
            Some(shift) => Stage {
                bypass: false,
                alu: None,
                mul: Some(Mul {
                    operand: 0,
                    shift,
                    shift_neg: shift,
                    prelu: false,
                    from_memory: true,
                    shift_from_memory: false,
                }),
                relu: false,
                relux: None,
            },
            None => Stage::BYPASSED,
        };
        let cvt = OutCvt {
            offset: self.out.offset,
            scale: u32::from(self.out.scale),
            shift: self.out.shift,
            add_first: false,
            round_half_up: false,
            fp32_to_fp16: false,
            minus_exp: 0,
        };
        let reads = (
            self.bias.then_some(OperandRead {
                addr: params,
                data_use: OperandRead::ALU,
            }),
            match self.channel_shift {
                Some(_) => Some(OperandRead {
                    addr: offset(params, self.multipliers_offset(channels))?,
                    data_use: OperandRead::MUL,
                }),
                None => None,
            },
        );
        Ok((bs, bn, cvt, reads))
    }

    /// Puts the epilogue on the DPU of a task whose accumulators are int32 (an int8
    /// convolution or matmul, or a flying int32 task): BS, BN and the output converter
    /// are replaced, the output becomes int8 (on a convolution task with the int8 writer's
    /// SIZE_E; its surface strides, in atoms, stay), and the BRDMA/NRDMA reads are added to its
    /// DPU_RDMA (which is created, MRDMA and ERDMA off, when the task has none; the
    /// task's op-enable then includes DPU_RDMA). A task without a DPU is
    /// `Error::InvalidArgument`.
    pub fn apply(&self, task: &mut Task, params: DmaAddr) -> Result<()> {
        let Some(d) = task.dpu.as_mut() else {
            return Err(Error::InvalidArgument {
                what: "a requantisation epilogue on a task without a DPU".into(),
            });
        };
        let (bs, bn, cvt, (brdma, nrdma)) = self.stages(d.cube.2, params)?;
        d.bs = bs;
        d.bn = bn;
        d.out_cvt = cvt;
        d.out.precision = Precision::Int8;
        // A convolution's writer writes int8 lines as the validated int8 programs do.
        if d.input == DpuInput::Core
            && let Some(size_e) = Dpu::validated_size_e(d.precision, Precision::Int8)
        {
            d.ow.size_e = [size_e; 3];
        }
        if brdma.is_none() && nrdma.is_none() {
            return Ok(());
        }
        let r = task
            .dpu_rdma
            .get_or_insert(reads_off(d.cube, d.precision, d.burst_len));
        r.brdma = brdma;
        r.nrdma = nrdma;
        Ok(())
    }

    /// Flying tasks applying the epilogue to an int32 cube at `input` (one per band of at
    /// most [`MAX_TASK_WIDTH`] columns), writing `cube.with_precision(Int8)` at `output`,
    /// parameters ([`Requant::params`]) at `params`. The channel count must be a
    /// multiple of 16 (whole int8 output atoms read from whole int32 input surfaces);
    /// other cubes are `Error::Unsupported`.
    pub(crate) fn tasks_at(
        &self,
        cube: Cube,
        input: DmaAddr,
        params: DmaAddr,
        output: DmaAddr,
    ) -> Result<Vec<Task>> {
        if cube.precision != Precision::Int32 || !cube.channels.is_multiple_of(16) {
            return Err(Error::Unsupported {
                what: "requantisation task",
                why: format!(
                    "a {} cube of {} channels; the task reads int32 cubes of a multiple of 16 channels",
                    cube.precision, cube.channels
                ),
            });
        }
        bands(cube, |x0, wt| {
            let mut t = flying(
                cube,
                x0,
                wt,
                Precision::Int32,
                input,
                output,
                Precision::Int8,
            )?;
            self.apply(&mut t, params)?;
            Ok(t)
        })
    }

    /// The CPU definition on row-major `[pixel][channel]` accumulators: per element,
    /// `v = acc + bias[c]` (saturated to 64 bits), `v = round_half_up((v · m[c]) ⟫ s₁)`,
    /// `v = round_half_even((v · SCALE) ⟫ SHIFT) + OFFSET`, saturated to int8. `bias`
    /// and `multipliers` as for [`Requant::params`].
    pub fn reference(
        &self,
        acc: &[i32],
        channels: usize,
        bias: &[i32],
        multipliers: &[i16],
    ) -> Result<Vec<i8>> {
        self.params(channels as u32, bias, multipliers)?;
        if channels == 0 || !acc.len().is_multiple_of(channels) {
            return Err(Error::InvalidArgument {
                what: format!("{} accumulators for {channels} channels", acc.len()),
            });
        }
        Ok(acc
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let c = i % channels;
                let mut v = i64::from(a);
                if self.bias {
                    v += i64::from(bias[c]);
                }
                if let Some(s) = self.channel_shift {
                    v = shift_round(v * i64::from(multipliers[c]), s, true);
                }
                v = shift_round(v * i64::from(self.out.scale), self.out.shift, false)
                    + i64::from(self.out.offset);
                v.clamp(-128, 127) as i8
            })
            .collect())
    }
}

/// BRDMA and NRDMA reads.
type Reads = (Option<OperandRead>, Option<OperandRead>);

/// `v ⟫ s` rounded to nearest, ties up (towards +∞) or to even.
fn shift_round(v: i64, s: u32, half_up: bool) -> i64 {
    if s == 0 {
        return v;
    }
    let q = v.div_euclid(1 << s);
    let r = v.rem_euclid(1 << s);
    let half = 1i64 << (s - 1);
    if r > half || (r == half && (half_up || q % 2 != 0)) {
        q + 1
    } else {
        q
    }
}

/// One task per band of at most [`MAX_TASK_WIDTH`] columns.
fn bands(cube: Cube, mut band: impl FnMut(u32, u32) -> Result<Task>) -> Result<Vec<Task>> {
    let mut tasks = Vec::new();
    let mut x0 = 0;
    while x0 < cube.width {
        let wt = (cube.width - x0).min(MAX_TASK_WIDTH);
        tasks.push(band(x0, wt)?);
        x0 += wt;
    }
    Ok(tasks)
}

/// A flying task over columns `x0 .. x0 + wt` of `cube` (the input's geometry) reading
/// `proc` data at `input` and writing `out` data in the same geometry at `output`, every
/// stage bypassed.
fn flying(
    cube: Cube,
    x0: u32,
    wt: u32,
    proc: Precision,
    input: DmaAddr,
    output: DmaAddr,
    out: Precision,
) -> Result<Task> {
    let surface = u32::try_from(cube.pixels()).map_err(|_| Error::Unsupported {
        what: "epilogue task",
        why: format!("a {}x{} cube", cube.width, cube.height),
    })?;
    let notch = cube.width - wt;
    let dims = (wt, cube.height, cube.padded_channels());
    let out = Output::at(offset(output, x0 * 16)?, out, surface, notch);
    let dpu = Dpu::flying(dims, proc, out);
    let read = Mrdma::at(offset(input, x0 * 16)?, notch, 0);
    let dpu_rdma = DpuRdma::flying(dims, proc, read);
    Ok(Task::dpu_only(dpu, dpu_rdma))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mesa_scale_formula_matches_the_recorded_program() {
        // Mesa's int8 convolution on a board: OUT_CVT_SCALE 0x7754, OUT_CVT_SHIFT 23 (the
        // capture gregordinary-rockchip-npu-notes/mesa-teflon-conv-int8-c8-4x4). A scale
        // with those fields: 30548 / 2^23 · (1 − ε) lies in the same fp32 binade.
        let s = 30547.5f32 / (1u32 << 23) as f32;
        let o = OutScale::from_scale(s, 0x74).unwrap();
        assert_eq!((o.scale, o.shift), (0x7754, 23));
        // 0.5: exponent 126, shift 15; mantissa 0 gives 2^14 + 1.
        let o = OutScale::from_scale(0.5, 0).unwrap();
        assert_eq!((o.scale, o.shift), (16385, 15));
        assert!(OutScale::from_scale(0.0, 0).is_err());
        assert!(OutScale::from_scale(f32::NAN, 0).is_err());
        assert!(OutScale::from_scale(1e6, 0).is_err());
    }

    #[test]
    fn shift_rounding_is_half_even_or_half_up() {
        assert_eq!(shift_round(5, 1, false), 2);
        assert_eq!(shift_round(7, 1, false), 4);
        assert_eq!(shift_round(-5, 1, false), -2);
        assert_eq!(shift_round(-3, 1, false), -2);
        assert_eq!(shift_round(5, 1, true), 3);
        assert_eq!(shift_round(-5, 1, true), -2);
        assert_eq!(shift_round(6, 2, false), 2);
    }
}
