//! CNA: the feature and weight loader, the CBUF split and the convolution geometry.
//!
//! The model covers the board-validated matmul programs (docs/hardware/matmul-programs.md,
//! docs/hardware/cbuf.md) and K×K convolutions (docs/hardware/convolution.md): a direct or
//! depthwise convolution of a feature cube in NC1HWC2 layout with kernel size, stride,
//! padding and dilation ([`Kernel`]), the input converter bypassed, no decompression.

use super::read::{DecodeError, Decoded, Reader};
use super::{Access, DmaRange, Precision, cbuf, fixed};
use crate::error::Result;
use crate::regcmd::{DmaAddr, TaskBuilder};
use crate::regs::{Block, Register, cna};

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

    fn cbuf0(&self) -> Result<cna::CbufCon0> {
        let c = &self.cbuf;
        let r = cna::CbufCon0::new();
        let r = cna::CbufCon0::DATA_BANK.set(r, c.data_banks)?;
        let r = cna::CbufCon0::WEIGHT_BANK.set(r, c.weight_banks)?;
        let r = cna::CbufCon0::FC_DATA_BANK.set(r, c.fc_data_banks)?;
        let r = cna::CbufCon0::DATA_REUSE.set(r, c.data_reuse.into())?;
        cna::CbufCon0::WEIGHT_REUSE.set(r, c.weight_reuse.into())
    }

    fn con1(&self) -> Result<cna::ConvCon1> {
        let p = self.precision.code();
        let mode = if self.kernel.depthwise { 3 } else { 0 };
        let r = cna::ConvCon1::CONV_MODE.set(cna::ConvCon1::new(), mode)?;
        let r = cna::ConvCon1::IN_PRECISION.set(r, p)?;
        let r = cna::ConvCon1::PROC_PRECISION.set(r, p)?;
        let r = cna::ConvCon1::GROUP_LINE_OFF.set(r, self.feature.group_line_off.into())?;
        let planar = self.feature.planar_width.is_some();
        let r = cna::ConvCon1::ARGB_IN.set(r, if planar { PLANAR_ARGB_IN } else { 0 })?;
        cna::ConvCon1::NONALIGN_DMA.set(r, planar.into())
    }

    /// The vendor bodies' preamble: CBUF split, decompression off, precisions.
    pub(super) fn emit_preamble(&self, t: &mut TaskBuilder) -> Result<()> {
        t.write(self.cbuf0()?)
            .write(cna::DcompRegnum::new())
            .write(cna::DcompCtrl::new())
            .write(self.con1()?);
        Ok(())
    }

    /// The CNA registers in ascending offsets (every one written, zeros included).
    pub(super) fn emit(&self, t: &mut TaskBuilder) -> Result<()> {
        use cna::*;
        let f = &self.feature;
        let k = &self.kernel;
        // Saturated: a size beyond 32 bits then fails its field's range check.
        let kernel_bytes = u32::try_from(self.kernel_bytes()).unwrap_or(u32::MAX);
        let weight_bytes = u32::try_from(self.kernel_bytes() * u64::from(self.weights.kernels))
            .unwrap_or(u32::MAX);
        t.write(self.con1()?)
            .write_fields(&[
                (ConvCon2::FEATURE_GRAINS, f.grains),
                (ConvCon2::UNK_31_24, self.core_split),
            ])?
            .write_fields(&[
                (ConvCon3::CONV_X_STRIDE, self.conv.stride.0),
                (ConvCon3::CONV_Y_STRIDE, self.conv.stride.1),
                (ConvCon3::ATROUS_X_DILATION, k.dilation.0.wrapping_sub(1)),
                (ConvCon3::ATROUS_Y_DILATION, k.dilation.1.wrapping_sub(1)),
            ])?
            .write_fields(&[
                (DataSize0::DATAIN_WIDTH, f.planar_width.unwrap_or(f.width)),
                (DataSize0::DATAIN_HEIGHT, f.height),
            ])?
            .write_fields(&[
                (DataSize1::DATAIN_CHANNEL, f.channels),
                (
                    DataSize1::DATAIN_CHANNEL_REAL,
                    f.channels_real.wrapping_sub(1),
                ),
            ])?
            .write_fields(&[(DataSize2::DATAOUT_WIDTH, self.conv.out_width)])?
            .write_fields(&[(DataSize3::DATAOUT_ATOMICS, self.conv.out_atomics)])?
            .write_fields(&[(WeightSize0::WEIGHT_BYTES, weight_bytes)])?
            .write_fields(&[(WeightSize1::WEIGHT_BYTES_PER_KERNEL, kernel_bytes)])?
            .write_fields(&[
                (WeightSize2::WEIGHT_KERNELS, self.weights.kernels),
                (WeightSize2::WEIGHT_HEIGHT, k.height),
                (WeightSize2::WEIGHT_WIDTH, k.width),
            ])?
            .write(self.cbuf0()?)
            .write_fields(&[(CbufCon1::DATA_ENTRIES, self.cbuf.data_entries)])?
            .write_fields(&[
                (CvtCon0::CVT_BYPASS, self.cvt.bypass.into()),
                (CvtCon0::CVT_TYPE, self.cvt.cvt_type.into()),
                (CvtCon0::DATA_SIGN, self.cvt.signed.into()),
            ])?
            .write_fields(&[(CvtCon1::CVT_SCALE0, self.cvt.scales[0])])?
            .write_fields(&[(CvtCon2::CVT_SCALE1, self.cvt.scales[1])])?
            .write_fields(&[(CvtCon3::CVT_SCALE2, self.cvt.scales[2])])?
            .write_fields(&[(CvtCon4::CVT_SCALE3, self.cvt.scales[3])])?
            .write(FcCon0::new())
            .write(FcCon1::new())
            .write_fields(&[
                (PadCon0::PAD_TOP, k.pad_top),
                (PadCon0::PAD_LEFT, k.pad_left),
            ])?
            .write_addr::<FeatureDataAddr>(f.addr)?
            .write(FcCon2::new())
            .write_fields(&[
                (DmaCon0::DATA_BURST_LEN, self.burst.0),
                (DmaCon0::WEIGHT_BURST_LEN, self.burst.1),
            ])?
            .write_fields(&[(DmaCon1::LINE_STRIDE, f.line_stride)])?
            .write_fields(&[(DmaCon2::SURF_STRIDE, (f.surf_stride as u32) & 0x0FFF_FFFF)])?
            .write_fields(&[
                (FcDataSize0::DMA_WIDTH, f.width),
                (FcDataSize0::DMA_HEIGHT, f.height),
            ])?
            .write_fields(&[(FcDataSize1::DMA_CHANNEL, f.channels)])?
            .write(DcompCtrl::new())
            .write(DcompRegnum::new())
            .write_addr::<DcompAddr0>(self.weights.addr)?;
        for i in 0..DCOMP_AMOUNT.len() {
            t.write_at(&DCOMP_AMOUNT, i, DcompAmount::new())?;
        }
        t.write_fields(&[(CvtCon5::PER_CHANNEL_CVT_EN, self.cvt.per_channel)])?
            .write_fields(&[(PadCon1::PAD_VALUE, k.pad_value)])?;
        Ok(())
    }

    /// Reads the CNA registers.
    pub(super) fn decode(r: &mut Reader<'_>) -> Decoded<Cna> {
        use super::read::DecodeError as E;
        use cna::*;
        let mode = r.get(ConvCon1::CONV_MODE);
        if mode != 0 && mode != 3 {
            return Err(E::unsupported(
                ConvCon1::CONV_MODE,
                mode,
                "direct (0) and depthwise (3) convolutions are modelled",
            ));
        }
        r.expect(ConvCon1::DECONV, 0, "deconvolution is not modelled")?;
        let argb = r.get(ConvCon1::ARGB_IN);
        if argb != 0 && argb != PLANAR_ARGB_IN {
            return Err(E::unsupported(
                ConvCon1::ARGB_IN,
                argb,
                "only 0 (NC1HWC2 cube) and 8 (1-channel planar input, the vendor programs) are modelled",
            ));
        }
        let planar = argb == PLANAR_ARGB_IN;
        r.agree(ConvCon1::NONALIGN_DMA, planar.into(), || {
            if planar {
                format!("every program with {} {argb} sets it", ConvCon1::ARGB_IN)
            } else {
                "non-aligned feature DMA is modelled only for the 1-channel planar input".into()
            }
        })?;
        if planar {
            r.agree(ConvCon1::GROUP_LINE_OFF, 1, || {
                format!("every program with {} {argb} sets it", ConvCon1::ARGB_IN)
            })?;
        }
        let in_code = r.get(ConvCon1::IN_PRECISION);
        let precision = Precision::from_code(in_code)
            .filter(|p| p.is_conv_input())
            .ok_or_else(|| {
                E::unsupported(
                    ConvCon1::IN_PRECISION,
                    in_code,
                    "int8, int16, fp16, bf16 and int4 are modelled",
                )
            })?;
        r.agree(ConvCon1::PROC_PRECISION, in_code, || {
            format!(
                "differs from {} {in_code} (input conversion is not modelled)",
                ConvCon1::IN_PRECISION
            )
        })?;
        let kernel = Kernel {
            width: r.get(WeightSize2::WEIGHT_WIDTH),
            height: r.get(WeightSize2::WEIGHT_HEIGHT),
            pad_left: r.get(PadCon0::PAD_LEFT),
            pad_top: r.get(PadCon0::PAD_TOP),
            pad_value: r.get(PadCon1::PAD_VALUE),
            dilation: (
                r.get(ConvCon3::ATROUS_X_DILATION) + 1,
                r.get(ConvCon3::ATROUS_Y_DILATION) + 1,
            ),
            depthwise: mode == 3,
        };
        let (kw, kh) = (kernel.width, kernel.height);

        let feature = decode_feature(r, planar)?;
        let channels = feature.channels;
        let kernels = r.get(WeightSize2::WEIGHT_KERNELS);
        let kernel_bytes =
            u64::from(kw) * u64::from(kh) * u64::from(channels) * u64::from(precision.bits()) / 8;
        let bpk = r.get(WeightSize1::WEIGHT_BYTES_PER_KERNEL);
        if u64::from(bpk) != kernel_bytes {
            return Err(E::inconsistent(
                WeightSize1::WEIGHT_BYTES_PER_KERNEL,
                bpk,
                format!(
                    "a {kw}x{kh} kernel of {channels} {precision} channels holds {kernel_bytes} bytes"
                ),
            ));
        }
        let total = r.get(WeightSize0::WEIGHT_BYTES);
        if u64::from(total) != kernel_bytes * u64::from(kernels) {
            return Err(E::inconsistent(
                WeightSize0::WEIGHT_BYTES,
                total,
                format!(
                    "{kernels} kernels of {kernel_bytes} bytes hold {}",
                    kernel_bytes * u64::from(kernels)
                ),
            ));
        }
        let scales = [
            r.get(CvtCon1::CVT_SCALE0),
            r.get(CvtCon2::CVT_SCALE1),
            r.get(CvtCon3::CVT_SCALE2),
            r.get(CvtCon4::CVT_SCALE3),
        ];
        let core_split = r.get(ConvCon2::UNK_31_24);
        if !CORE_SPLIT_VALUES.contains(&core_split) {
            return Err(E::unsupported(
                ConvCon2::UNK_31_24,
                core_split,
                "only the values board-recorded multi-core programs write (0, 0x10, 0x20, 0x40, 0x50) are known",
            ));
        }
        Ok(Cna {
            core_split,
            precision,
            feature,
            weights: Weights {
                addr: DmaAddr::Fixed(r.address::<DcompAddr0>()),
                kernels,
            },
            conv: Conv {
                out_width: r.get(DataSize2::DATAOUT_WIDTH),
                out_atomics: r.get(DataSize3::DATAOUT_ATOMICS),
                stride: (
                    r.get(ConvCon3::CONV_X_STRIDE),
                    r.get(ConvCon3::CONV_Y_STRIDE),
                ),
            },
            kernel,
            cbuf: Cbuf {
                data_banks: r.get(CbufCon0::DATA_BANK),
                weight_banks: r.get(CbufCon0::WEIGHT_BANK),
                fc_data_banks: r.get(CbufCon0::FC_DATA_BANK),
                data_reuse: r.flag(CbufCon0::DATA_REUSE),
                weight_reuse: r.flag(CbufCon0::WEIGHT_REUSE),
                data_entries: r.get(CbufCon1::DATA_ENTRIES),
            },
            cvt: InputCvt {
                bypass: r.flag(CvtCon0::CVT_BYPASS),
                cvt_type: r.flag(CvtCon0::CVT_TYPE),
                signed: r.flag(CvtCon0::DATA_SIGN),
                scales,
                per_channel: r.get(CvtCon5::PER_CHANNEL_CVT_EN),
            },
            burst: (
                r.get(DmaCon0::DATA_BURST_LEN),
                r.get(DmaCon0::WEIGHT_BURST_LEN),
            ),
        })
    }

    /// The feature and weight reads.
    pub(super) fn dma(&self, out: &mut Vec<DmaRange>) {
        let f = &self.feature;
        if let Some(base) = fixed(f.addr) {
            // Lines and surfaces may step backwards (negative strides): the range runs
            // from the lowest atom read to one past the highest.
            let (line, surf) = f.strides();
            if f.planar_width.is_some() {
                // One plane of `height` lines of `width` elements is read.
                let bytes = i64::from(self.precision.bits() / 8);
                let l = (i64::from(f.height.max(1)) - 1) * line;
                let lo = l.min(0);
                let hi = l.max(0) + i64::from(f.width) * bytes;
                out.push(DmaRange {
                    block: Block::Cna,
                    register: cna::FeatureDataAddr::NAME,
                    what: "feature",
                    start: base.saturating_add_signed(lo),
                    len: (hi - lo) as u64,
                    access: Access::Read,
                });
            } else {
                let surfaces = i64::from(f.channels.div_ceil(self.precision.atom_elems()).max(1));
                let lines = i64::from(f.height.max(1));
                let (s, l) = ((surfaces - 1) * surf, (lines - 1) * line);
                let lo = s.min(0) + l.min(0);
                let hi = s.max(0) + l.max(0) + i64::from(f.width) * 16;
                out.push(DmaRange {
                    block: Block::Cna,
                    register: cna::FeatureDataAddr::NAME,
                    what: "feature",
                    start: base.saturating_add_signed(lo),
                    len: (hi - lo) as u64,
                    access: Access::Read,
                });
            }
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

/// The feature cube's registers; the sizes that `FC_DATA_SIZE*` repeat must agree.
/// A planar input's lines are `DATAIN_WIDTH` elements, of which `DMA_WIDTH` hold data.
fn decode_feature(r: &mut Reader<'_>, planar: bool) -> Decoded<Feature> {
    use super::read::DecodeError as E;
    use cna::*;
    let padded_width = r.get(DataSize0::DATAIN_WIDTH);
    let height = r.get(DataSize0::DATAIN_HEIGHT);
    let channels = r.get(DataSize1::DATAIN_CHANNEL);
    let channels_real = r.get(DataSize1::DATAIN_CHANNEL_REAL) + 1;
    let (width, planar_width) = if planar {
        let width = r.get(FcDataSize0::DMA_WIDTH);
        if width > padded_width {
            return Err(E::inconsistent(
                FcDataSize0::DMA_WIDTH,
                width,
                format!(
                    "a planar line holds {} {padded_width} elements",
                    DataSize0::DATAIN_WIDTH
                ),
            ));
        }
        (width, Some(padded_width))
    } else {
        let width = padded_width;
        r.agree(FcDataSize0::DMA_WIDTH, width, || {
            format!("{} is {width}", DataSize0::DATAIN_WIDTH)
        })?;
        (width, None)
    };
    r.agree(FcDataSize0::DMA_HEIGHT, height, || {
        format!("{} is {height}", DataSize0::DATAIN_HEIGHT)
    })?;
    r.agree(FcDataSize1::DMA_CHANNEL, channels, || {
        format!("{} is {channels}", DataSize1::DATAIN_CHANNEL)
    })?;
    Ok(Feature {
        addr: DmaAddr::Fixed(r.address::<FeatureDataAddr>()),
        width,
        height,
        channels,
        channels_real,
        line_stride: r.get(DmaCon1::LINE_STRIDE),
        surf_stride: r.signed(DmaCon2::SURF_STRIDE) as i32,
        group_line_off: r.flag(ConvCon1::GROUP_LINE_OFF),
        grains: r.get(ConvCon2::FEATURE_GRAINS),
        planar_width,
    })
}
