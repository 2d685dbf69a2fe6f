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
//! use rknpu_driver::kernels::ops::{self, Cube};
//! use rknpu_driver::kernels::ops::conv::{Conv2d, ConvOut};
//! use rknpu_driver::task::Precision;
//!
//! let conv = Conv2d::new(Cube::new(6, 5, 16, Precision::Fp16)?, 16, (3, 3))
//!     .with_pad_symmetric(1)
//!     .with_out(ConvOut::Fp16);
//! assert_eq!(conv.output_size()?, (6, 5));
//! let tasks = conv.tasks(ops::at(ops::INPUT, 0), ops::at(ops::WEIGHTS, 0), ops::at(ops::OUTPUT, 0))?;
//! assert_eq!(tasks.len(), 1);
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

use super::{Cube, Element};
use crate::error::{Error, Result};
use crate::regcmd::DmaAddr;
use crate::regs::cna as cna_regs;
use crate::task::{
    Cbuf, Cna, Conv, Core, Dpu, DpuInput, DpuRdma, Feature, InputCvt, Kernel, OutCvt, Output,
    OwCfg, Precision, Stage, Task, Weights, cbuf,
};
use half::f16;

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

    /// Every limit of the registers and of the modelled hardware, as typed errors.
    pub fn check(&self) -> Result<()> {
        let p = self.prec();
        if !matches!(p, Precision::Int8 | Precision::Fp16) {
            return Err(unsupported(format!(
                "{p} input: int8 and fp16 convolutions are supported"
            )));
        }
        let out_ok = matches!(
            (p, self.out),
            (Precision::Int8, ConvOut::Int32 | ConvOut::Int8 { .. })
                | (Precision::Fp16, ConvOut::Fp16)
        );
        if !out_ok {
            return Err(unsupported(format!("{p} input with {:?} output", self.out)));
        }
        let (kh, kw) = self.kernel;
        let kmax = cna_regs::WeightSize2::WEIGHT_WIDTH.max();
        for (name, v, max) in [
            ("kernel height", kh, kmax),
            ("kernel width", kw, kmax),
            (
                "stride y",
                self.stride.0,
                cna_regs::ConvCon3::CONV_Y_STRIDE.max(),
            ),
            (
                "stride x",
                self.stride.1,
                cna_regs::ConvCon3::CONV_X_STRIDE.max(),
            ),
            (
                "dilation y",
                self.dilation.0,
                cna_regs::ConvCon3::ATROUS_Y_DILATION.max() + 1,
            ),
            (
                "dilation x",
                self.dilation.1,
                cna_regs::ConvCon3::ATROUS_X_DILATION.max() + 1,
            ),
        ] {
            if v == 0 || v > max {
                return Err(unsupported(format!(
                    "{name} {v}; the registers hold 1..={max}"
                )));
            }
        }
        let (ey, ex) = self.extent();
        let pad = self.pad;
        for (name, v, e) in [
            ("top", pad.top, ey),
            ("bottom", pad.bottom, ey),
            ("left", pad.left, ex),
            ("right", pad.right, ex),
        ] {
            if v >= e || v > cna_regs::PadCon0::PAD_TOP.max() {
                return Err(unsupported(format!(
                    "{name} padding {v}: at most the window's extent {e} − 1 and 15"
                )));
            }
        }
        let (h, w) = (self.input.height, self.input.width);
        if h + pad.top + pad.bottom < ey || w + pad.left + pad.right < ex {
            return Err(invalid(format!(
                "a {ey}x{ex} window does not fit a padded {h}x{w} input"
            )));
        }
        if self.out_channels == 0 {
            return Err(invalid("0 output channels".into()));
        }
        if self.out_channels > super::MAX_CUBE_DIM {
            return Err(unsupported(format!(
                "{} output channels; the output cube holds at most {}",
                self.out_channels,
                super::MAX_CUBE_DIM
            )));
        }
        if self.groups == 0 {
            return Err(invalid("0 groups".into()));
        }
        if self.depthwise {
            if self.groups != 1 {
                return Err(invalid(
                    "depthwise with groups: depthwise is the one-channel-per-group case".into(),
                ));
            }
            if self.out_channels != self.input.channels {
                return Err(unsupported(format!(
                    "depthwise with {} output channels of {} input channels (channel multipliers are not supported)",
                    self.out_channels, self.input.channels
                )));
            }
        }
        if self.groups > 1 {
            let (ci, co) = (self.input.channels, self.out_channels);
            if !ci.is_multiple_of(self.groups) || !co.is_multiple_of(self.groups) {
                return Err(invalid(format!(
                    "{ci} input and {co} output channels in {} groups",
                    self.groups
                )));
            }
            if !self.group_in().is_multiple_of(32) {
                return Err(unsupported(format!(
                    "{} input channels per group: a group's channel window must fill whole 32-channel blocks",
                    self.group_in()
                )));
            }
            let kpa = p.kernels_per_atom();
            if !self.group_out().is_multiple_of(kpa) {
                return Err(unsupported(format!(
                    "{} output channels per group: a group's output window must fill whole {kpa}-kernel atoms",
                    self.group_out()
                )));
            }
        }
        if let ConvOut::Int8 { multiplier } = self.out {
            requant_scale_shift(multiplier)?;
        }
        let c = self.task_in_channels();
        if c > cna_regs::DataSize1::DATAIN_CHANNEL.max() {
            return Err(unsupported(format!("{c} channels per task")));
        }
        if w > cna_regs::DataSize0::DATAIN_WIDTH.max() || h > super::MAX_CUBE_DIM {
            return Err(unsupported(format!("a {w}-wide, {h}-high input")));
        }
        Ok(())
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
    pub fn tasks(&self, input: DmaAddr, weights: DmaAddr, output: DmaAddr) -> Result<Vec<Task>> {
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

    fn task(
        &self,
        s: &Slice,
        plan: &Plan,
        input: DmaAddr,
        weights: DmaAddr,
        output: DmaAddr,
    ) -> Result<Task> {
        let p = self.prec();
        let in_cube = self.input_cube()?;
        let out_cube = self.output_cube()?;
        let (ow, oh_full) = (out_cube.width, out_cube.height);
        let (w, h) = (self.input.width, self.input.height);
        let (ey, _) = self.extent();
        let c = self.task_in_channels();
        // Input rows of the band: from oy0·sy − top to (oy0 + oh − 1)·sy − top + ey.
        let start = i64::from(s.oy0) * i64::from(self.stride.0) - i64::from(self.pad.top);
        let end = i64::from(s.oy0 + s.oh - 1) * i64::from(self.stride.0) - i64::from(self.pad.top)
            + i64::from(ey);
        let in0 = start.max(0) as u32;
        let in1 = end.min(i64::from(h)) as u32;
        let pad_top = (i64::from(in0) - start) as u32;
        let rows = in1 - in0;
        let in_c0 = if self.groups > 1 {
            s.group * self.group_in()
        } else {
            0
        };
        let in_off = u64::from(in_c0 / in_cube.atom_elems()) * in_cube.surface_bytes()
            + u64::from(in0) * u64::from(w) * 16;
        let kb = self.kernel_bytes();
        let group_kernels = if self.depthwise {
            1
        } else {
            self.group_kernels()
        };
        let w_off = (u64::from(s.group) * u64::from(group_kernels) + u64::from(s.k0)) * kb;
        let oc0 = if self.depthwise {
            0
        } else {
            s.group * self.group_kernels() + s.k0
        };
        let out_ch = if self.depthwise { c } else { s.kernels };
        let out_off = u64::from(oc0 / out_cube.atom_elems()) * out_cube.surface_bytes()
            + u64::from(s.oy0) * u64::from(ow) * 16;
        let offset = |a: DmaAddr, off: u64| -> Result<DmaAddr> {
            let off = u32::try_from(off)
                .map_err(|_| unsupported(format!("offset {off} beyond 32-bit addresses")))?;
            let beyond = |x: u32| unsupported(format!("address {x:#x} + {off:#x} beyond 32 bits"));
            Ok(match a {
                DmaAddr::Fixed(x) => DmaAddr::Fixed(x.checked_add(off).ok_or_else(|| beyond(x))?),
                DmaAddr::Reloc(r) => DmaAddr::reloc(
                    r.buffer,
                    r.offset.checked_add(off).ok_or_else(|| beyond(r.offset))?,
                ),
            })
        };
        let k = &self.kernel;
        let cna = Cna {
            core_split: 0,
            precision: p,
            feature: Feature {
                addr: offset(input, in_off)?,
                width: w,
                height: rows,
                channels: c,
                channels_real: c,
                // Line by line in 4-byte units (4·W) and the full tensor's surfaces:
                // 4·W + SURF_STRIDE = W·H atoms (the vendor's values).
                line_stride: 4 * w,
                surf_stride: (i64::from(w) * (i64::from(h) - 4)) as i32,
                group_line_off: false,
                grains: (rows + 1).min(cna_regs::ConvCon2::FEATURE_GRAINS.max()),
                planar_width: None,
            },
            weights: Weights {
                addr: offset(weights, w_off)?,
                kernels: s.kernels,
            },
            conv: Conv {
                out_width: ow,
                out_atomics: ow * s.oh,
                stride: (self.stride.1, self.stride.0),
            },
            kernel: Kernel {
                width: k.1,
                height: k.0,
                pad_left: self.pad.left,
                pad_top,
                pad_value: if p == Precision::Int8 {
                    i32::from(self.pad_value) as u32
                } else {
                    0
                },
                dilation: (self.dilation.1, self.dilation.0),
                depthwise: self.depthwise,
            },
            cbuf: Cbuf {
                data_banks: plan.data_banks,
                weight_banks: plan.weight_banks,
                fc_data_banks: 0,
                data_reuse: false,
                weight_reuse: false,
                data_entries: self.entries() as u32,
            },
            cvt: InputCvt::bypassed(true),
            burst: (15, 15),
        };
        let core = Core {
            precision: p,
            qd_en: true,
            depthwise: self.depthwise,
            out: (ow, s.oh, out_ch),
        };
        let out_p = self.out_precision();
        let surf = u32::try_from(u64::from(ow) * u64::from(oh_full))
            .map_err(|_| unsupported("output plane beyond 32 bits".into()))?;
        // An fp16 → fp16 depthwise task is written as the board-run one is
        // (docs/hardware/convolution.md#depthwise): the DPU and DPU_RDMA in depthwise
        // mode, SIZE_E 3, SURFACE_ADD 4 × the plane and the CPEND adder with 0x80.
        let dw_mode = self.depthwise && p == Precision::Fp16 && out_p == Precision::Fp16;
        let ratio = if dw_mode {
            4
        } else {
            Dpu::validated_surface_ratio(p, out_p).unwrap_or(8)
        };
        let size_e = if dw_mode {
            3
        } else {
            Dpu::validated_size_e(p, out_p).unwrap_or(1)
        };
        let (scale, shift) = match self.out {
            ConvOut::Int8 { multiplier } => requant_scale_shift(multiplier)?,
            _ => (1, 0),
        };
        let dpu = Dpu {
            depthwise: dw_mode,
            ping_pong: true,
            input: DpuInput::Core,
            burst_len: 15,
            precision: p,
            cube: (ow, s.oh, out_ch),
            orig_channels: out_ch,
            bs: self.bs,
            bn: Stage::BYPASSED,
            ew: None,
            ow: OwCfg {
                od_bypass: p != Precision::Int8 && !dw_mode,
                size_e: [size_e; 3],
                ow_src: 0,
                ow_op: if dw_mode { 0x80 } else { 0 },
            },
            out_cvt: OutCvt {
                offset: 0,
                scale,
                shift,
                add_first: false,
                round_half_up: false,
                fp32_to_fp16: out_p == Precision::Fp16,
                minus_exp: 0,
            },
            out: Output {
                addr: offset(output, out_off)?,
                precision: out_p,
                surf_stride: surf,
                notch: 0,
                surface_add: ratio * surf,
            },
        };
        // The board-run depthwise program starts DPU_RDMA for its mode, every read off.
        let dpu_rdma = dw_mode.then_some(DpuRdma {
            depthwise: true,
            comb_use: 0,
            ping_pong: true,
            cube: (ow, s.oh, out_ch),
            precision: p,
            flying: false,
            burst_len: 15,
            mrdma: None,
            erdma: None,
            arbiter: [1, 1, 1, 1],
            fp16_to_fp32: false,
            brdma: None,
            nrdma: None,
        });
        Ok(Task {
            cna: Some(cna),
            core: Some(core),
            dpu: Some(dpu),
            dpu_rdma,
            ppu: None,
            ppu_rdma: None,
        })
    }

    /// Lays out `hwc` (row-major `[h][w][c]`, the real C) as [`Conv2d::input_cube`].
    pub fn pack_input<T: Element>(&self, hwc: &[T]) -> Result<Vec<u8>> {
        let cube = self.input_cube()?;
        let (c, cp) = (self.input.channels as usize, cube.channels as usize);
        if hwc.len() != self.input.elems() {
            return Err(invalid(format!(
                "{} input values for a {}x{}x{c} tensor",
                hwc.len(),
                self.input.height,
                self.input.width
            )));
        }
        if cp == c {
            return cube.pack(hwc);
        }
        let zero = T::read_le(&[0; 4]);
        let mut padded = Vec::with_capacity(cube.elems());
        for px in hwc.chunks_exact(c) {
            padded.extend_from_slice(px);
            padded.extend(std::iter::repeat_n(zero, cp - c));
        }
        cube.pack(&padded)
    }

    /// Reads the output cube back into row-major `[oh][ow][oc]` (the real output
    /// channels).
    pub fn unpack_output<T: Element>(&self, bytes: &[u8]) -> Result<Vec<T>> {
        let cube = self.output_cube()?;
        let all: Vec<T> = cube.unpack(bytes)?;
        let cp = cube.channels as usize;
        let gk = if self.depthwise {
            cp
        } else {
            self.group_kernels() as usize
        };
        let go = if self.depthwise {
            self.out_channels as usize
        } else {
            self.group_out() as usize
        };
        let mut out = Vec::with_capacity(cube.pixels() as usize * self.out_channels as usize);
        for px in all.chunks_exact(cp) {
            for g in 0..self.groups as usize {
                out.extend_from_slice(&px[g * gk..g * gk + go]);
            }
        }
        Ok(out)
    }

    /// Bytes of the packed weights.
    pub fn weight_bytes(&self) -> Result<u64> {
        self.check()?;
        let kernels = if self.depthwise {
            1
        } else {
            self.group_kernels()
        };
        Ok(self.kernel_bytes() * u64::from(kernels) * u64::from(self.groups))
    }

    /// Packs weights given as `[oc][kh][kw][c / groups]` (depthwise: `[c][kh][kw]`)
    /// into the native layout (docs/hardware/convolution.md#weights): direct kernels in
    /// 1024-byte atoms of (16 fp16 | 32 int8) kernels × 32 channels, ordered `[kernel
    /// atom][channel block][kh][kw]`; depthwise windows in groups of (32 fp16 | 64 int8)
    /// channels, ordered `[channel group][kh][kw][channel]`. Padding kernels and channels
    /// are 0. Each group's kernels follow the previous group's.
    pub fn pack_weights<T: Element>(&self, w: &[T]) -> Result<Vec<u8>> {
        self.check()?;
        if T::PRECISION != self.prec() {
            return Err(invalid(format!(
                "{} weights for a {} convolution",
                T::PRECISION,
                self.prec()
            )));
        }
        let (kh, kw) = (self.kernel.0 as usize, self.kernel.1 as usize);
        let taps = kh * kw;
        let cg = if self.depthwise {
            1
        } else {
            self.group_in() as usize
        };
        let want = self.out_channels as usize * taps * cg;
        if w.len() != want {
            return Err(invalid(format!(
                "{} weights for {} kernels of {kh}x{kw}x{cg}",
                w.len(),
                self.out_channels
            )));
        }
        let size = self.prec().bytes() as usize;
        let mut out = vec![0u8; self.weight_bytes()? as usize];
        let c = self.task_in_channels() as usize;
        if self.depthwise {
            let g = self.dw_group() as usize;
            for ch in 0..self.input.channels as usize {
                for t in 0..taps {
                    let i = ((ch / g) * taps + t) * g + ch % g;
                    w[ch * taps + t].write_le(&mut out[i * size..(i + 1) * size]);
                }
            }
            return Ok(out);
        }
        let kpa = self.prec().kernels_per_atom() as usize;
        let blocks = c / 32;
        let gk = self.group_kernels() as usize;
        let group_bytes = gk * taps * c * size;
        for g in 0..self.groups as usize {
            for j in 0..self.group_out() as usize {
                let oc = g * self.group_out() as usize + j;
                for t in 0..taps {
                    for ic in 0..cg {
                        let atom = ((j / kpa) * blocks + ic / 32) * taps + t;
                        let i = (atom * kpa + j % kpa) * 32 + ic % 32;
                        let at = g * group_bytes + i * size;
                        w[(oc * taps + t) * cg + ic].write_le(&mut out[at..at + size]);
                    }
                }
            }
        }
        Ok(out)
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
