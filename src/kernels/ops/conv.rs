//! K×K convolution: a [`Conv2d`] spec becomes CNA + CORE + DPU tasks (docs/ops.md,
//! "Convolution"; the register facts in docs/hardware/convolution.md).
//!
//! The input is an NC1HWC2 [`Cube`] whose channels are padded to the CNA's 32-channel
//! weight atom ([`Conv2d::input_cube`]); the output is a cube of the output size whose
//! channels are padded to whole kernel atoms ([`Conv2d::output_cube`]). Weights are
//! given as a plain `[oc][kh][kw][c / groups]` host array and packed into the native
//! layout by [`Conv2d::pack_weights`].
//!
//! Tiling follows the vendor runtime's programs: when the input rows do not fit the CBUF
//! data banks, the output is split into bands of rows, each task reading the input rows
//! its band needs (the halo rows of the window included) through full-tensor strides and
//! a moved base address, padded on top only in the first band and at the bottom only in
//! the last; when one kernel group does not fit the weight banks, the kernels are split
//! into tiles of whole kernel atoms. Grouped convolutions are one set of tasks per group,
//! each a direct convolution of the group's channel window.
//!
//! ```
//! use half::f16;
//! use rknpu_driver::kernels::ops::Cube;
//! use rknpu_driver::kernels::ops::contract::{Bindings, Op};
//! use rknpu_driver::kernels::ops::conv::{Conv2d, ConvOut};
//! use rknpu_driver::task::Precision;
//!
//! let conv = Conv2d::new(Cube::new(6, 5, 16, Precision::Fp16)?, 16, (3, 3))
//!     .with_pad_symmetric(1)
//!     .with_out(ConvOut::Fp16);
//! assert_eq!(conv.output_size()?, (6, 5));
//! let tasks = conv.tasks(&Bindings::slots(&conv.ports()?))?;
//! assert_eq!(tasks.len(), 1);
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

use super::Cube;
use crate::error::{Error, Result};
use crate::regcmd::DmaAddr;
use crate::regs::cna as cna_regs;
use crate::task::{Precision, Stage, Task, cbuf};
use half::f16;

mod check;
mod pack;
mod task;

/// What the convolution writes.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum ConvOut {
    /// int8 input: the int32 accumulators.
    Int32,
    /// int8 input: the accumulators requantised per tensor to int8 by the DPU's output
    /// converter, `sat8(round_half_even(acc × multiplier))`, with the converter's scale
    /// and shift derived from `multiplier` as Mesa does ([`requant_scale_shift`]).
    Int8 {
        /// The real multiplier `in_scale × weight_scale / out_scale`.
        multiplier: f32,
    },
    /// fp16 input: fp16 output (fp32 accumulation).
    Fp16,
}

/// Padding in pixels on each side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Padding {
    /// Rows above the input.
    pub top: u32,
    /// Columns left of the input.
    pub left: u32,
    /// Rows below the input.
    pub bottom: u32,
    /// Columns right of the input.
    pub right: u32,
}

/// A 2-D convolution of an `H × W × C` tensor with `OC` kernels of `KH × KW × C / groups`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Conv2d {
    /// The input geometry and element type (int8 or fp16); `channels` is the real C.
    pub input: Cube,
    /// Output channels (depthwise: must be C).
    pub out_channels: u32,
    /// Kernel height and width.
    pub kernel: (u32, u32),
    /// Stride (y, x).
    pub stride: (u32, u32),
    /// Padding.
    pub pad: Padding,
    /// Dilation (y, x), 1 for none.
    pub dilation: (u32, u32),
    /// One kernel per channel (`groups` must then be 1; the hardware's depthwise mode).
    pub depthwise: bool,
    /// Channel groups of a grouped convolution (1: a plain convolution).
    pub groups: u32,
    /// The output type.
    pub out: ConvOut,
    /// The DPU's BS stage: the seam for a per-channel bias or scale epilogue; bypassed
    /// by default.
    pub bs: Stage,
    /// The int8 padding value (a zero-point): what padding pixels hold. fp16 pads with 0.
    pub pad_value: i8,
}

/// Rows and kernels of one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slice {
    group: u32,
    /// First kernel (within the group) and number of kernels.
    k0: u32,
    kernels: u32,
    /// First output row and output rows.
    oy0: u32,
    oh: u32,
}

/// The CBUF plan shared by every task of a convolution.
#[derive(Clone, Copy, Debug)]
struct Plan {
    data_banks: u32,
    weight_banks: u32,
    /// Output rows per band.
    band: u32,
    /// Kernels per tile.
    tile: u32,
}

fn unsupported(why: String) -> Error {
    Error::Unsupported {
        what: "convolution",
        why,
    }
}

fn invalid(what: String) -> Error {
    Error::InvalidArgument { what }
}

/// The output converter's scale and shift for a real multiplier `m`, as Mesa derives them
/// (`rkt_regcmd.c`, per-tensor int8 convolutions): from the fp32 bits `b` of `m`, the
/// scale is the top 15 mantissa bits plus one, with bit 14 set when below 2^14, and the
/// shift is `(142 − exponent) − 1` (docs/hardware/convolution.md#requant). Refused for
/// multipliers whose shift falls outside 0..=63 and for non-finite or non-positive `m`.
pub fn requant_scale_shift(m: f32) -> Result<(u32, u32)> {
    if !(m.is_finite() && m > 0.0) {
        return Err(invalid(format!("requantisation multiplier {m}")));
    }
    let b = m.to_bits();
    let mut scale = ((b >> 9) & 0x7FFF) + 1;
    if scale < 1 << 14 {
        scale |= 1 << 14;
    }
    let exp = (b >> 23) as i64;
    let shift = 142 - exp - 1;
    if !(0..=63).contains(&shift) {
        return Err(unsupported(format!(
            "requantisation multiplier {m}: the converter's shift would be {shift}"
        )));
    }
    Ok((scale, shift as u32))
}

impl Conv2d {
    /// A convolution of `input` with `out_channels` kernels of `kernel` = (KH, KW):
    /// stride 1, no padding, no dilation, one group; int8 input writes int32, fp16 input
    /// fp16.
    pub fn new(input: Cube, out_channels: u32, kernel: (u32, u32)) -> Conv2d {
        Conv2d {
            input,
            out_channels,
            kernel,
            stride: (1, 1),
            pad: Padding::default(),
            dilation: (1, 1),
            depthwise: false,
            groups: 1,
            out: if input.precision == Precision::Fp16 {
                ConvOut::Fp16
            } else {
                ConvOut::Int32
            },
            bs: Stage::BYPASSED,
            pad_value: 0,
        }
    }

    /// Stride (y, x).
    pub fn with_stride(mut self, y: u32, x: u32) -> Conv2d {
        self.stride = (y, x);
        self
    }

    /// Padding on each side.
    pub fn with_pad(mut self, pad: Padding) -> Conv2d {
        self.pad = pad;
        self
    }

    /// The same padding on every side.
    pub fn with_pad_symmetric(mut self, p: u32) -> Conv2d {
        self.pad = Padding {
            top: p,
            left: p,
            bottom: p,
            right: p,
        };
        self
    }

    /// Dilation (y, x).
    pub fn with_dilation(mut self, y: u32, x: u32) -> Conv2d {
        self.dilation = (y, x);
        self
    }

    /// Depthwise (one kernel per channel; `out_channels` must be C).
    pub fn with_depthwise(mut self, depthwise: bool) -> Conv2d {
        self.depthwise = depthwise;
        self
    }

    /// Channel groups.
    pub fn with_groups(mut self, groups: u32) -> Conv2d {
        self.groups = groups;
        self
    }

    /// The output type.
    pub fn with_out(mut self, out: ConvOut) -> Conv2d {
        self.out = out;
        self
    }

    /// The DPU BS stage (a bias or scale epilogue built elsewhere); bypassed by default.
    pub fn with_bs(mut self, bs: Stage) -> Conv2d {
        self.bs = bs;
        self
    }

    /// The int8 padding value.
    pub fn with_pad_value(mut self, v: i8) -> Conv2d {
        self.pad_value = v;
        self
    }

    fn prec(&self) -> Precision {
        self.input.precision
    }

    /// The element type of the output.
    pub fn out_precision(&self) -> Precision {
        match self.out {
            ConvOut::Int32 => Precision::Int32,
            ConvOut::Int8 { .. } => Precision::Int8,
            ConvOut::Fp16 => Precision::Fp16,
        }
    }

    /// Kernel extent in input pixels, (y, x).
    fn extent(&self) -> (u32, u32) {
        (
            (self.kernel.0 - 1) * self.dilation.0 + 1,
            (self.kernel.1 - 1) * self.dilation.1 + 1,
        )
    }

    /// Channels a depthwise weight group holds: 32 fp16, 64 int8.
    fn dw_group(&self) -> u32 {
        if self.prec() == Precision::Int8 {
            64
        } else {
            32
        }
    }

    /// Channels per group on the input side (real).
    fn group_in(&self) -> u32 {
        self.input.channels / self.groups.max(1)
    }

    /// Output channels per group (real).
    fn group_out(&self) -> u32 {
        self.out_channels / self.groups.max(1)
    }

    /// Input channels of one task, padded to what the CNA reads (32-channel weight
    /// blocks; a depthwise task to its weight group).
    fn task_in_channels(&self) -> u32 {
        if self.depthwise {
            self.input.channels.next_multiple_of(self.dw_group())
        } else {
            self.group_in().next_multiple_of(32)
        }
    }

    /// Kernels of one group, padded to whole weight atoms (16 fp16, 32 int8 kernels).
    fn group_kernels(&self) -> u32 {
        self.group_out()
            .next_multiple_of(self.prec().kernels_per_atom())
    }

    /// The cube the tasks read: the input with its channels padded to the CNA's
    /// 32-channel blocks (depthwise int8: 64), the padding channels 0.
    pub fn input_cube(&self) -> Result<Cube> {
        let c = if self.groups > 1 {
            self.input.channels
        } else {
            self.task_in_channels()
        };
        Cube::new(self.input.width, self.input.height, c, self.prec())
    }

    /// The cube the tasks write: the output size, channels padded to whole kernel atoms
    /// (depthwise: the padded input channels). Its padding channels hold zeros of zero
    /// kernels.
    pub fn output_cube(&self) -> Result<Cube> {
        let (ow, oh) = self.output_size()?;
        let c = if self.depthwise {
            self.task_in_channels()
        } else {
            self.groups * self.group_kernels()
        };
        Cube::new(ow, oh, c, self.out_precision())
    }

    /// Output width and height: `(in + pad − extent) / stride + 1` on each axis.
    pub fn output_size(&self) -> Result<(u32, u32)> {
        self.check()?;
        let (ey, ex) = self.extent();
        let (h, w) = (self.input.height, self.input.width);
        let p = self.pad;
        let oh = (h + p.top + p.bottom - ey) / self.stride.0 + 1;
        let ow = (w + p.left + p.right - ex) / self.stride.1 + 1;
        Ok((ow, oh))
    }

    /// Bytes of one kernel of a task (`WEIGHT_SIZE1`).
    fn kernel_bytes(&self) -> u64 {
        u64::from(self.kernel.0)
            * u64::from(self.kernel.1)
            * u64::from(self.task_in_channels())
            * u64::from(self.prec().bits())
            / 8
    }

    /// Bytes of one input row in the CBUF, in whole 64-byte entries.
    fn entries(&self) -> u64 {
        (u64::from(self.input.width)
            * u64::from(self.task_in_channels())
            * u64::from(self.prec().bits())
            / 8)
        .div_ceil(cbuf::ENTRY_BYTES)
    }

    /// The CBUF split, the band of output rows and the kernel tile
    /// (docs/hardware/convolution.md#cbuf).
    fn plan(&self) -> Result<Plan> {
        let (_, oh) = self.output_size()?;
        let row = self.entries() * cbuf::ENTRY_BYTES;
        let kb = self.kernel_bytes();
        let kernels = if self.depthwise {
            1
        } else {
            self.group_kernels()
        };
        let kpa = self.prec().kernels_per_atom();
        // int8 features keep a spare data bank (docs/hardware/cbuf.md).
        let slack = u32::from(self.prec() == Precision::Int8);
        let banks = |bytes: u64| bytes.div_ceil(cbuf::BANK_BYTES) as u32;
        // Kernel tile: the largest multiple of the atom whose one group (32 kernels, or
        // the tile when smaller) fits the weight banks left beside one input window.
        let (ey, _) = self.extent();
        let min_data = banks(u64::from(ey) * row) + slack;
        let max_weight = cbuf::BANKS.saturating_sub(min_data);
        let mut tile = kernels;
        while tile > 0 && banks(u64::from(tile.min(32)) * kb).max(2) > max_weight {
            tile = tile.saturating_sub(kpa);
        }
        if tile == 0 || max_weight < 2 {
            return Err(unsupported(format!(
                "one kernel of {kb} bytes beside one {ey}-row input window of {row} bytes per row does not fit the {} CBUF banks",
                cbuf::BANKS
            )));
        }
        let group_banks = banks(u64::from(tile.min(32)) * kb).max(2);
        let whole = banks(u64::from(self.input.height) * row) + slack;
        // The whole input fits beside one kernel group: it gets the banks it needs and
        // the weights the rest (streamed when they do not all fit); otherwise the
        // weights get one group and the input is cut into bands of rows.
        let (data_banks, weight_banks) = if whole + group_banks <= cbuf::BANKS {
            (whole, cbuf::BANKS - whole)
        } else {
            (cbuf::BANKS - group_banks, group_banks)
        };
        // At most FEATURE_GRAINS' 1023 − 1 rows a task, so that rows + 1 lines can be
        // fetched ahead (docs/hardware/quirks.md#quirk-5).
        let max_rows = u64::from(cna_regs::ConvCon2::FEATURE_GRAINS.max() - 1);
        let rows_fit =
            (u64::from(data_banks - slack) * cbuf::BANK_BYTES / row).min(max_rows) as u32;
        let (sy, ey) = (self.stride.0, self.extent().0);
        if rows_fit < ey {
            return Err(unsupported(format!(
                "the {ey} input rows of one output row ({row} bytes each) do not fit {data_banks} data banks"
            )));
        }
        let band = ((rows_fit - ey) / sy + 1).min(oh);
        Ok(Plan {
            data_banks,
            weight_banks,
            band,
            tile,
        })
    }

    fn slices(&self, plan: &Plan) -> Result<Vec<Slice>> {
        let (_, oh) = self.output_size()?;
        let kernels = if self.depthwise {
            1
        } else {
            self.group_kernels()
        };
        let mut out = Vec::new();
        for group in 0..self.groups {
            let mut k0 = 0;
            while k0 < kernels {
                let n = plan.tile.min(kernels - k0);
                let mut oy0 = 0;
                while oy0 < oh {
                    let rows = plan.band.min(oh - oy0);
                    out.push(Slice {
                        group,
                        k0,
                        kernels: n,
                        oy0,
                        oh: rows,
                    });
                    oy0 += rows;
                }
                k0 += n;
            }
        }
        Ok(out)
    }

    /// The tasks reading the input cube at `input`, the packed weights at `weights` and
    /// writing the output cube at `output`: one per (group, kernel tile, band of output
    /// rows), in that order.
    pub(crate) fn tasks_at(
        &self,
        input: DmaAddr,
        weights: DmaAddr,
        output: DmaAddr,
    ) -> Result<Vec<Task>> {
        self.check()?;
        let plan = self.plan()?;
        let slices = self.slices(&plan)?;
        let mut tasks = slices
            .iter()
            .map(|s| self.task(s, &plan, input, weights, output))
            .collect::<Result<Vec<_>>>()?;
        // A later band of the same kernels keeps the weights the band before it loaded
        // when they all fit the weight banks, as the vendor's banded programs do
        // (docs/hardware/cbuf.md#reuse).
        let tile_fits = |s: &Slice| {
            self.kernel_bytes() * u64::from(s.kernels)
                <= u64::from(plan.weight_banks) * cbuf::BANK_BYTES
        };
        for i in 1..tasks.len() {
            let (a, b) = (&slices[i - 1], &slices[i]);
            if a.group == b.group
                && a.k0 == b.k0
                && tile_fits(b)
                && let Some(cna) = tasks[i].cna.as_mut()
            {
                cna.cbuf.weight_reuse = true;
            }
        }
        Ok(tasks)
    }
}

/// The mathematical definition (plain loops on row-major data): `input` is `[h][w][c]`,
/// `weights` `[oc][kh][kw][c / groups]` (depthwise `[c][kh][kw]`), the result
/// `[oh][ow][oc]` as f64 sums of products, padding pixels holding `pad_value`.
pub fn reference(
    conv: &Conv2d,
    input: &[f64],
    weights: &[f64],
    pad_value: f64,
) -> Result<Vec<f64>> {
    let (ow, oh) = conv.output_size()?;
    let (h, w, c) = (
        conv.input.height as i64,
        conv.input.width as i64,
        conv.input.channels as usize,
    );
    let (kh, kw) = (conv.kernel.0 as usize, conv.kernel.1 as usize);
    let oc_n = conv.out_channels as usize;
    let groups = conv.groups.max(1) as usize;
    let cg = if conv.depthwise { 1 } else { c / groups };
    let og = oc_n / groups;
    if input.len() != h as usize * w as usize * c || weights.len() != oc_n * kh * kw * cg {
        return Err(invalid("reference: input or weight length".into()));
    }
    let mut out = vec![0f64; ow as usize * oh as usize * oc_n];
    for oy in 0..oh as i64 {
        for ox in 0..ow as i64 {
            for oc in 0..oc_n {
                let mut sum = 0f64;
                for ky in 0..kh as i64 {
                    for kx in 0..kw as i64 {
                        let y = oy * conv.stride.0 as i64 + ky * conv.dilation.0 as i64
                            - conv.pad.top as i64;
                        let x = ox * conv.stride.1 as i64 + kx * conv.dilation.1 as i64
                            - conv.pad.left as i64;
                        let inside = (0..h).contains(&y) && (0..w).contains(&x);
                        for ic in 0..cg {
                            let ch = if conv.depthwise {
                                oc
                            } else {
                                (oc / og) * cg + ic
                            };
                            let v = if inside {
                                input[(y * w + x) as usize * c + ch]
                            } else {
                                pad_value
                            };
                            let wi = ((oc * kh + ky as usize) * kw + kx as usize) * cg + ic;
                            sum += v * weights[wi];
                        }
                    }
                }
                out[(oy as usize * ow as usize + ox as usize) * oc_n + oc] = sum;
            }
        }
    }
    Ok(out)
}

/// fp16 values as f64 (for [`reference()`]).
pub fn f16s_to_f64(v: &[f16]) -> Vec<f64> {
    v.iter().map(|x| f64::from(x.to_f32())).collect()
}
