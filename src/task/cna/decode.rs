//! The CNA's registers read back into the model.

use super::{
    CORE_SPLIT_VALUES, Cbuf, Cna, Conv, Feature, InputCvt, Kernel, PLANAR_ARGB_IN, Weights,
};
use crate::regcmd::DmaAddr;
use crate::regs::cna;
use crate::task::Precision;
use crate::task::read::{Decoded, Reader};

impl Cna {
    /// Reads the CNA registers.
    pub(in crate::task) fn decode(r: &mut Reader<'_>) -> Decoded<Cna> {
        use crate::task::read::DecodeError as E;
        use cna::*;
        let (mode, planar, precision) = decode_con1(r)?;
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
}

/// `CONV_CON1`: the convolution mode (direct or depthwise), whether the input is the
/// 1-channel planar one, and the input precision (which the processing precision repeats).
fn decode_con1(r: &mut Reader<'_>) -> Decoded<(u32, bool, Precision)> {
    use crate::task::read::DecodeError as E;
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
    Ok((mode, planar, precision))
}

/// The feature cube's registers; the sizes that `FC_DATA_SIZE*` repeat must agree.
/// A planar input's lines are `DATAIN_WIDTH` elements, of which `DMA_WIDTH` hold data.
fn decode_feature(r: &mut Reader<'_>, planar: bool) -> Decoded<Feature> {
    use crate::task::read::DecodeError as E;
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
