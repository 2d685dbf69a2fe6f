//! CNA: the feature and weight loader, the CBUF split and the convolution geometry.
//!
//! The model covers the board-validated matmul programs (docs/hardware/matmul-programs.md,
//! docs/hardware/cbuf.md) and K×K convolutions (docs/hardware/convolution.md): a direct or
//! depthwise convolution of a feature cube in NC1HWC2 layout with kernel size, stride,
//! padding and dilation ([`Kernel`]), the input converter bypassed, no decompression.

use super::read::DecodeError;
use super::{Access, DmaRange, Precision, cbuf, fixed};
use crate::error::Result;
use crate::regcmd::DmaAddr;
use crate::regs::{Block, Register, cna};

mod decode;
mod encode;

/// `CONV_CON1.ARGB_IN` of the 1-channel planar input, the one non-zero value any capture
/// shows (docs/hardware/convolution.md#planar-input).
const PLANAR_ARGB_IN: u32 = 8;

/// The feature (activation) cube the CNA reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Feature {
    /// `FEATURE_DATA_ADDR`.
    pub addr: DmaAddr,
    /// Width in pixels (`DATA_SIZE0`, repeated in `FC_DATA_SIZE0`).
    pub width: u32,
    /// Height in lines.
    pub height: u32,
    /// Channels, a multiple of 32 (`DATA_SIZE1`, repeated in `FC_DATA_SIZE1`).
    pub channels: u32,
    /// Channels that hold data (`DATAIN_CHANNEL_REAL` + 1).
    pub channels_real: u32,
    /// `DMA_CON1.LINE_STRIDE`, in the units [`Feature::group_line_off`] selects.
    pub line_stride: u32,
    /// `DMA_CON2.SURF_STRIDE`, a signed 28-bit correction (docs/simulator.md).
    pub surf_stride: i32,
    /// `CONV_CON1.GROUP_LINE_OFF`: lines are fetched one at a time, strides in atoms.
    pub group_line_off: bool,
    /// `CONV_CON2.FEATURE_GRAINS`: lines the CNA fetches ahead.
    pub grains: u32,
    /// The 1-channel planar input of the vendor programs (`CONV_CON1.ARGB_IN` 8 with
    /// `NONALIGN_DMA` and `GROUP_LINE_OFF`; docs/hardware/convolution.md#planar-input):
    /// `Some(DATAIN_WIDTH)`, the padded line width in elements, while
    /// [`Feature::width`] is the real width `FC_DATA_SIZE0.DMA_WIDTH`. `None` for the
    /// NC1HWC2 cubes of every other program.
    pub planar_width: Option<u32>,
}

impl Feature {
    /// Bytes between lines and between surfaces (docs/simulator.md, "Feature
    /// addressing"). They may be zero or negative: the simulator refuses such a cube when
    /// it has several lines or surfaces.
    pub fn strides(&self) -> (i64, i64) {
        if self.planar_width.is_some() {
            // Planar fp16 lines: LINE_STRIDE elements of 2 bytes; the next plane starts
            // LINE_STRIDE + SURF_STRIDE elements on (docs/hardware/convolution.md#planar-input).
            let line = i64::from(self.line_stride);
            return (line * 2, (line + i64::from(self.surf_stride)) * 2);
        }
        let w = i64::from(self.width);
        let surf = i64::from(self.surf_stride);
        let (line, surf) = if self.group_line_off {
            (i64::from(self.line_stride), w + surf)
        } else {
            (i64::from(self.line_stride) / 4, 4 * w + surf)
        };
        (line * 16, surf * 16)
    }

    /// Bytes of one line of the cube in the CBUF (`W × C` elements).
    pub fn row_bytes(&self, precision: Precision) -> u64 {
        if let Some(pw) = self.planar_width {
            // One plane's line of the padded width (docs/hardware/convolution.md#planar-input).
            return u64::from(pw) * u64::from(precision.bits()) / 8;
        }
        u64::from(self.width) * u64::from(self.channels) * u64::from(precision.bits()) / 8
    }

    /// Bytes of the whole cube as the CBUF holds it.
    pub fn cube_bytes(&self, precision: Precision) -> u64 {
        self.row_bytes(precision) * u64::from(self.height)
    }
}

/// The weights the CNA reads: kernels of 1×1×C in 1024-byte atoms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Weights {
    /// `DCOMP_ADDR0`.
    pub addr: DmaAddr,
    /// `WEIGHT_SIZE2.WEIGHT_KERNELS` (output channels).
    pub kernels: u32,
}

/// The convolution's output geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv {
    /// `DATA_SIZE2.DATAOUT_WIDTH`.
    pub out_width: u32,
    /// `DATA_SIZE3.DATAOUT_ATOMICS`: output pixels (width × height).
    pub out_atomics: u32,
    /// `CONV_CON3` x and y strides.
    pub stride: (u32, u32),
}

/// The convolution window (docs/hardware/convolution.md#registers): kernel size
/// (`WEIGHT_SIZE2`), padding (`PAD_CON0`, `PAD_CON1`), dilation (`CONV_CON3` ATROUS
/// fields) and mode (`CONV_CON1.CONV_MODE`). [`Kernel::default`] is the 1×1 direct,
/// unpadded, undilated window of the matmul programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// `WEIGHT_SIZE2.WEIGHT_WIDTH`.
    pub width: u32,
    /// `WEIGHT_SIZE2.WEIGHT_HEIGHT`.
    pub height: u32,
    /// `PAD_CON0.PAD_LEFT`: columns of padding before the first input column.
    pub pad_left: u32,
    /// `PAD_CON0.PAD_TOP`: rows of padding above the first input row.
    pub pad_top: u32,
    /// `PAD_CON1.PAD_VALUE`: the padding value, raw (int8: sign-extended value; fp16:
    /// the half's bits).
    pub pad_value: u32,
    /// Dilation (x, y), 1 for none (`CONV_CON3.ATROUS_X_DILATION` /
    /// `ATROUS_Y_DILATION` hold it minus one).
    pub dilation: (u32, u32),
    /// `CONV_CON1.CONV_MODE` 3: depthwise (one kernel per channel).
    pub depthwise: bool,
}

impl Default for Kernel {
    fn default() -> Kernel {
        Kernel {
            width: 1,
            height: 1,
            pad_left: 0,
            pad_top: 0,
            pad_value: 0,
            dilation: (1, 1),
            depthwise: false,
        }
    }
}

impl Kernel {
    /// The window's extent in input pixels, `(k − 1) · dilation + 1`, along x and y.
    pub fn extent(&self) -> (u32, u32) {
        let e = |k: u32, d: u32| (k.max(1) - 1).saturating_mul(d).saturating_add(1);
        (
            e(self.width, self.dilation.0),
            e(self.height, self.dilation.1),
        )
    }
}

/// The CBUF split and reuse bits (`CBUF_CON0`, `CBUF_CON1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cbuf {
    /// Banks holding the feature cube.
    pub data_banks: u32,
    /// Banks holding weights.
    pub weight_banks: u32,
    /// `FC_DATA_BANK` (every validated program writes 0).
    pub fc_data_banks: u32,
    /// Keep the previous task's feature data.
    pub data_reuse: bool,
    /// Keep the previous task's weights.
    pub weight_reuse: bool,
    /// `CBUF_CON1.DATA_ENTRIES`: 64-byte CBUF entries per feature line.
    pub data_entries: u32,
}

/// What the CBUF holds after a convolution task, for the reuse bits of the next task of
/// the same chain: its feature data and its weights, each as (address, bytes, banks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbufHeld {
    /// The feature cube: address, bytes, data banks.
    pub data: Option<(DmaAddr, u64, u32)>,
    /// The weights: address, bytes, weight banks.
    pub weights: Option<(DmaAddr, u64, u32)>,
}

impl Cbuf {
    /// Bytes the data banks hold.
    pub fn data_bytes(&self) -> u64 {
        u64::from(self.data_banks) * cbuf::BANK_BYTES
    }

    /// Bytes the weight banks hold.
    pub fn weight_bytes(&self) -> u64 {
        u64::from(self.weight_banks) * cbuf::BANK_BYTES
    }
}

/// The CNA input converter (`CVT_CON0`..`CVT_CON4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InputCvt {
    /// `CVT_BYPASS`.
    pub bypass: bool,
    /// `CVT_TYPE`.
    pub cvt_type: bool,
    /// `DATA_SIGN`: integer input is signed.
    pub signed: bool,
    /// `CVT_SCALE0..3`.
    pub scales: [u32; 4],
    /// `CVT_CON5.PER_CHANNEL_CVT_EN`: one enable bit per channel; 0 in every program but
    /// those over the 1-channel planar input, which write 0xFFFF.
    pub per_channel: u32,
}

impl InputCvt {
    /// The converter as every validated program sets it: bypassed, scales 1.
    pub const fn bypassed(signed: bool) -> InputCvt {
        InputCvt {
            bypass: true,
            cvt_type: true,
            signed,
            scales: [1; 4],
            per_channel: 0,
        }
    }
}

/// The CNA's part of a convolution task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cna {
    /// Input and processing precision (`CONV_CON1`; they must agree).
    pub precision: Precision,
    /// The feature cube.
    pub feature: Feature,
    /// The weights.
    pub weights: Weights,
    /// Output geometry.
    pub conv: Conv,
    /// The convolution window (1×1 for a matmul).
    pub kernel: Kernel,
    /// CBUF split.
    pub cbuf: Cbuf,
    /// Input converter.
    pub cvt: InputCvt,
    /// `DMA_CON0` burst lengths for feature and weight reads.
    pub burst: (u32, u32),
    /// `CONV_CON2` bits 31:24: 0 in every single-core program; the vendor runtime's
    /// multi-core chains write one of [`CORE_SPLIT_VALUES`] (docs/hardware/convolution.md#core-split).
    /// Its meaning is not published; it is carried, and changes nothing the simulator computes.
    pub core_split: u32,
}

/// The values of `CONV_CON2` bits 31:24 that board-recorded vendor programs write: 0 (one
/// core), 0x10 and 0x20 (a split by rows over two and three cores), 0x40 and 0x50 (a split by
/// output channels over two and three cores).
pub const CORE_SPLIT_VALUES: [u32; 5] = [0, 0x10, 0x20, 0x40, 0x50];

impl Cna {
    /// The CBUF rules every validated program keeps, and the reuse rules (docs/matmul.md,
    /// "CBUF reuse"): FC_DATA_BANK 0; at least 2 weight banks; a reuse bit never on the
    /// first task of a chain (`first`: what an earlier job left is unknown), only when
    /// the task before it in the chain left the same operand at the same address in the
    /// same banks (`held`), WEIGHT_REUSE only when all the weights fit the weight banks
    /// (otherwise the CBUF streams them and keeps none), and on int8 either bit only with
    /// a spare data bank (near-full int8 banks corrupted the last rows of reusing
    /// programs on boards). Returns what this task leaves in the CBUF.
    pub fn check_cbuf(&self, first: bool, held: &CbufHeld) -> Result<CbufHeld, DecodeError> {
        use cna::CbufCon0;
        let b = &self.cbuf;
        if b.fc_data_banks != 0 {
            return Err(DecodeError::unsupported(
                CbufCon0::FC_DATA_BANK,
                b.fc_data_banks,
                "every validated program writes 0; other values corrupted outputs on boards (board-validated programs; docs/provenance.md)",
            ));
        }
        // One weight bank: only as the vendor's fp16 convolution of a 56×56 tensor keeps
        // it, all its weights in the bank (docs/hardware/convolution.md#cbuf).
        let one_bank_conv = b.weight_banks == 1
            && self.precision == Precision::Fp16
            && self.feature.width > 1
            && self.feature.height > 1
            && self.kernel_bytes() * u64::from(self.weights.kernels) <= cbuf::BANK_BYTES;
        if b.weight_banks < 2 && !one_bank_conv {
            return Err(DecodeError::unsupported(
                CbufCon0::WEIGHT_BANK,
                b.weight_banks,
                "no validated matmul program keeps fewer than 2 weight banks (the board-validated matmul programs, docs/hardware/quirks.md#quirk-3)",
            ));
        }
        let data_bytes = self.feature.cube_bytes(self.precision);
        let weights_len = self.kernel_bytes() * u64::from(self.weights.kernels);
        let now = CbufHeld {
            data: Some((self.feature.addr, data_bytes, b.data_banks)),
            weights: Some((self.weights.addr, weights_len, b.weight_banks)),
        };
        if !(b.data_reuse || b.weight_reuse) {
            return Ok(now);
        }
        // The reuse bit a refusal names: DATA_REUSE when set, else WEIGHT_REUSE.
        let bit = if b.data_reuse {
            CbufCon0::DATA_REUSE
        } else {
            CbufCon0::WEIGHT_REUSE
        };
        let refuse = |field, why: String| Err(DecodeError::unsupported(field, 1, why));
        if first {
            return refuse(
                bit,
                "reuse on the first task of a chain keeps whatever an earlier job left in the CBUF"
                    .into(),
            );
        }
        if b.weight_reuse && weights_len > b.weight_bytes() {
            return refuse(
                CbufCon0::WEIGHT_REUSE,
                format!(
                    "the task's {weights_len} bytes of weights do not fit its {} weight banks, so the CBUF streams them and keeps none",
                    b.weight_banks
                ),
            );
        }
        if self.precision == Precision::Int8
            && data_bytes > u64::from(b.data_banks.saturating_sub(1)) * cbuf::BANK_BYTES
        {
            return refuse(
                bit,
                format!(
                    "int8 feature data of {data_bytes} bytes leaves no spare bank of its {} data banks; near-full int8 banks corrupted the last rows of reusing programs on boards",
                    b.data_banks
                ),
            );
        }
        if b.data_reuse && held.data != now.data {
            return refuse(
                CbufCon0::DATA_REUSE,
                "the previous task did not load the same feature data into the same banks".into(),
            );
        }
        if b.weight_reuse && held.weights != now.weights {
            return refuse(
                CbufCon0::WEIGHT_REUSE,
                "the previous task did not load the same weights into the same banks".into(),
            );
        }
        Ok(now)
    }

    /// Bytes of one kernel (`WEIGHT_SIZE1`): width × height × channels elements; a
    /// depthwise task's one "kernel" holds every channel's window.
    pub fn kernel_bytes(&self) -> u64 {
        u64::from(self.kernel.width)
            * u64::from(self.kernel.height)
            * u64::from(self.feature.channels)
            * u64::from(self.precision.bits())
            / 8
    }

    /// The feature and weight reads.
    pub(super) fn dma(&self, out: &mut Vec<DmaRange>) {
        let f = &self.feature;
        if let Some(base) = fixed(f.addr) {
            // Lines and surfaces may step backwards (negative strides): the range runs
            // from the lowest atom read to one past the highest.
            let (line, surf) = f.strides();
            let l = (i64::from(f.height.max(1)) - 1) * line;
            let (lo, hi) = if f.planar_width.is_some() {
                // One plane of `height` lines of `width` elements is read.
                let bytes = i64::from(self.precision.bits() / 8);
                (l.min(0), l.max(0) + i64::from(f.width) * bytes)
            } else {
                let surfaces = i64::from(f.channels.div_ceil(self.precision.atom_elems()).max(1));
                let s = (surfaces - 1) * surf;
                (
                    s.min(0) + l.min(0),
                    s.max(0) + l.max(0) + i64::from(f.width) * 16,
                )
            };
            out.push(DmaRange {
                block: Block::Cna,
                register: cna::FeatureDataAddr::NAME,
                what: "feature",
                start: base.saturating_add_signed(lo),
                len: (hi - lo) as u64,
                access: Access::Read,
            });
        }
        if let Some(start) = fixed(self.weights.addr) {
            out.push(DmaRange {
                block: Block::Cna,
                register: cna::DcompAddr0::NAME,
                what: "weights",
                start,
                len: self.kernel_bytes() * u64::from(self.weights.kernels),
                access: Access::Read,
            });
        }
    }
}
