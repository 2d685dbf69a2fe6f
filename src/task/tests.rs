//! Round trips of every block (`decode(emit(x)) == x`) and the sweep over fields the
//! model does not represent. Tests of generated tasks (their round trips, DMA ranges,
//! published values and inert fields) are in `tests/task_lowered.rs` and
//! `tests/task_inert.rs`: the task layer does not import the kernels.

use super::*;
use crate::regcmd::{DmaAddr, TaskBuilder};
use crate::regs::{Field, Register, cna, core as core_regs, dpu, dpu_rdma, ppu, ppu_rdma};
use proptest::prelude::*;

/// The register file a task's list leaves behind.
fn snapshot(task: &Task) -> Snapshot {
    let mut t = TaskBuilder::new();
    task.emit(&mut t)
        .expect("the generated value fits its fields");
    Snapshot::from_writes(t.entries().iter().map(|e| (e.offset(), e.value())))
}

fn round_trip(task: &Task) -> std::result::Result<Task, DecodeError> {
    Task::decode(&mut snapshot(task), task.enable())
}

fn max<R: Register>(f: Field<R>) -> u32 {
    f.max()
}

fn upto<R: Register>(f: Field<R>) -> std::ops::RangeInclusive<u32> {
    0..=max(f)
}

fn addr() -> impl Strategy<Value = DmaAddr> {
    (0u32..=u32::MAX / 16).prop_map(|a| DmaAddr::Fixed(a * 16))
}

fn conv_precision() -> impl Strategy<Value = Precision> {
    prop::sample::select(vec![
        Precision::Int8,
        Precision::Int16,
        Precision::Fp16,
        Precision::Bf16,
        Precision::Int4,
    ])
}

fn any_precision() -> impl Strategy<Value = Precision> {
    prop::sample::select(Precision::ALL.to_vec())
}

prop_compose! {
    fn feature()(
        addr in addr(),
        width in upto(cna::DataSize0::DATAIN_WIDTH),
        height in upto(cna::DataSize0::DATAIN_HEIGHT),
        channels in 0u32..=8192,
        channels_real in 1u32..=8192,
        line_stride in upto(cna::DmaCon1::LINE_STRIDE),
        surf_stride in -(1i32 << 27)..(1i32 << 27),
        group_line_off in any::<bool>(),
        grains in upto(cna::ConvCon2::FEATURE_GRAINS),
        planar_width in prop::option::of(upto(cna::DataSize0::DATAIN_WIDTH)),
    ) -> Feature {
        // A planar input fetches line by line and reads at most its padded width.
        let group_line_off = group_line_off || planar_width.is_some();
        let width = planar_width.map_or(width, |pw| width.min(pw));
        Feature { addr, width, height, channels, channels_real, line_stride, surf_stride, group_line_off, grains, planar_width }
    }
}

prop_compose! {
    fn kernel()(
        width in upto(cna::WeightSize2::WEIGHT_WIDTH),
        height in upto(cna::WeightSize2::WEIGHT_HEIGHT),
        pad_left in upto(cna::PadCon0::PAD_LEFT),
        pad_top in upto(cna::PadCon0::PAD_TOP),
        pad_value in any::<u32>(),
        dilation in (1..=max(cna::ConvCon3::ATROUS_X_DILATION) + 1, 1..=max(cna::ConvCon3::ATROUS_Y_DILATION) + 1),
        depthwise in any::<bool>(),
    ) -> Kernel {
        Kernel { width, height, pad_left, pad_top, pad_value, dilation, depthwise }
    }
}

prop_compose! {
    fn cna_block()(
        precision in conv_precision(),
        feature in feature(),
        waddr in addr(),
        kernels in upto(cna::WeightSize2::WEIGHT_KERNELS),
        out_width in upto(cna::DataSize2::DATAOUT_WIDTH),
        out_atomics in upto(cna::DataSize3::DATAOUT_ATOMICS),
        stride in (upto(cna::ConvCon3::CONV_X_STRIDE), upto(cna::ConvCon3::CONV_Y_STRIDE)),
        banks in (upto(cna::CbufCon0::DATA_BANK), upto(cna::CbufCon0::WEIGHT_BANK), upto(cna::CbufCon0::FC_DATA_BANK)),
        reuse in (any::<bool>(), any::<bool>()),
        data_entries in upto(cna::CbufCon1::DATA_ENTRIES),
        cvt in (any::<bool>(), any::<bool>(), any::<bool>()),
        scales in prop::array::uniform4(upto(cna::CvtCon1::CVT_SCALE0)),
        per_channel in any::<u32>(),
        burst in (upto(cna::DmaCon0::DATA_BURST_LEN), upto(cna::DmaCon0::WEIGHT_BURST_LEN)),
        kernel in kernel(),
    ) -> Cna {
        Cna {
            core_split: 0,
            precision,
            feature,
            weights: Weights { addr: waddr, kernels },
            conv: Conv { out_width, out_atomics, stride },
            kernel,
            cbuf: Cbuf {
                data_banks: banks.0,
                weight_banks: banks.1,
                fc_data_banks: banks.2,
                data_reuse: reuse.0,
                weight_reuse: reuse.1,
                data_entries,
            },
            cvt: InputCvt { bypass: cvt.0, cvt_type: cvt.1, signed: cvt.2, scales, per_channel },
            burst,
        }
    }
}

fn alu_op() -> impl Strategy<Value = AluOp> {
    prop::sample::select(vec![AluOp::Max, AluOp::Min, AluOp::Add, AluOp::Minus])
}

prop_compose! {
    fn alu()(op in alu_op(), operand in any::<i32>(), from_memory in any::<bool>()) -> Alu {
        Alu { op, operand, from_memory }
    }
}

prop_compose! {
    fn mul()(
        operand in any::<i16>(),
        shift in upto(dpu::BsMulCfg::BS_MUL_SHIFT_VALUE),
        shift_neg in upto(dpu::DataFormat::BS_MUL_SHIFT_VALUE_NEG),
        (prelu, from_memory, shift_from_memory) in any::<(bool, bool, bool)>(),
    ) -> Mul {
        Mul { operand, shift, shift_neg, prelu, from_memory, shift_from_memory }
    }
}

prop_compose! {
    fn stage()(
        bypass in any::<bool>(),
        alu in prop::option::of(alu()),
        mul in prop::option::of(mul()),
        relu in any::<bool>(),
        relux in prop::option::of(any::<i32>()),
    ) -> Stage {
        Stage {
            bypass,
            alu,
            mul,
            relu,
            relux,
        }
    }
}

fn ew_op() -> impl Strategy<Value = EwOp> {
    prop_oneof![
        alu_op().prop_map(EwOp::Alu),
        (
            upto(dpu::EwCvtScaleValue::EW_TRUNCATE),
            upto(dpu::DataFormat::EW_TRUNCATE_NEG)
        )
            .prop_map(|(t, n)| EwOp::Mul(t, n)),
    ]
}

prop_compose! {
    fn ew()(
        op in prop::option::of(ew_op()),
        memory in any::<bool>(),
        cvt in prop::option::of((any::<i32>(), any::<i16>(), upto(dpu::EwCvtScaleValue::EW_OP_CVT_SHIFT), any::<bool>())),
        relu in any::<bool>(),
        relux in prop::option::of(any::<i32>()),
        data_size in upto(dpu::EwCfg::EDATA_SIZE),
        data_mode in upto(dpu::EwCfg::EW_DATA_MODE),
        values in prop::array::uniform8(any::<u32>()),
        lut in prop::option::of(lut_block()),
    ) -> Ew {
        Ew {
            op,
            src: if memory { EwSrc::Memory } else { EwSrc::Register },
            cvt: cvt.map(|(offset, scale, shift, add_first)| OpCvt { offset, scale, shift, add_first }),
            relu,
            relux,
            data_size,
            data_mode,
            values,
            lut,
        }
    }
}

prop_compose! {
    fn dpu_block()(
        ping_pong in any::<bool>(),
        flying in any::<bool>(),
        burst_len in upto(dpu::FeatureModeCfg::BURST_LEN),
        precision in any_precision(),
        out_precision in any_precision(),
        w in 1..=max(dpu::DataCubeWidth::WIDTH).min(max(dpu::WdmaSize1::WIDTH_WDMA)) + 1,
        h in 1..=max(dpu::DataCubeHeight::HEIGHT).min(max(dpu::WdmaSize1::HEIGHT_WDMA)) + 1,
        c in 1..=max(dpu::DataCubeChannel::CHANNEL).min(max(dpu::WdmaSize0::CHANNEL_WDMA)) + 1,
        orig in 1..=max(dpu::DataCubeChannel::ORIG_CHANNEL) + 1,
        bs in stage(),
        bn in stage(),
        ew in prop::option::of(ew()),
        ow in (any::<bool>(), prop::array::uniform3(upto(dpu::BsOwCfg::SIZE_E_0)), upto(dpu::BsOwCfg::OW_SRC), upto(dpu::BsOwOp::OW_OP)),
        cvt in (any::<i32>(), upto(dpu::OutCvtScale::OUT_CVT_SCALE), upto(dpu::OutCvtShift::OUT_CVT_SHIFT), any::<bool>(), any::<bool>(), any::<bool>(), upto(dpu::OutCvtShift::MINUS_EXP)),
        out in (addr(), upto(dpu::DstSurfStride::DST_SURF_STRIDE), upto(dpu::DataCubeNotchAddr::NOTCH_ADDR_0), upto(dpu::SurfaceAdd::SURF_ADD)),
    ) -> Dpu {
        Dpu {
            depthwise: false,
            ping_pong,
            input: if flying { DpuInput::Flying } else { DpuInput::Core },
            burst_len,
            precision,
            cube: (w, h, c),
            orig_channels: orig,
            bs,
            bn,
            ew,
            ow: OwCfg { od_bypass: ow.0, size_e: ow.1, ow_src: ow.2, ow_op: ow.3 },
            out_cvt: OutCvt {
                offset: cvt.0,
                scale: cvt.1,
                shift: cvt.2,
                add_first: cvt.3,
                round_half_up: cvt.4,
                fp32_to_fp16: cvt.5,
                minus_exp: cvt.6,
            },
            out: Output {
                addr: out.0,
                precision: out_precision,
                surf_stride: out.1,
                notch: out.2,
                surface_add: out.3,
            },
        }
    }
}

prop_compose! {
    fn mrdma()(
        addr in addr(),
        line_notch in upto(dpu_rdma::RdmaSrcDmaCfg::LINE_NOTCH_ADDR),
        surf_notch in upto(dpu_rdma::RdmaSurfNotch::SURF_NOTCH_ADDR),
    ) -> Mrdma {
        Mrdma { addr, line_notch, surf_notch }
    }
}

prop_compose! {
    fn erdma()(
        addr in addr(),
        data_size in upto(dpu_rdma::RdmaErdmaCfg::ERDMA_DATA_SIZE),
        data_mode in upto(dpu_rdma::RdmaErdmaCfg::ERDMA_DATA_MODE),
        surf_stride in upto(dpu_rdma::RdmaEwSurfStride::EW_SURF_STRIDE),
        line_notch in upto(dpu_rdma::RdmaDataCubeHeight::EW_LINE_NOTCH_ADDR),
        surf_notch in upto(dpu_rdma::RdmaEwSurfNotch::EW_SURF_NOTCH),
    ) -> Erdma {
        Erdma { addr, data_size, data_mode, surf_stride, line_notch, surf_notch }
    }
}

prop_compose! {
    fn rdma_block()(
        ping_pong in any::<bool>(),
        w in 1..=max(dpu_rdma::RdmaDataCubeWidth::WIDTH) + 1,
        h in 1..=max(dpu_rdma::RdmaDataCubeHeight::HEIGHT) + 1,
        c in 1..=max(dpu_rdma::RdmaDataCubeChannel::CHANNEL) + 1,
        precision in any_precision(),
        flying in any::<bool>(),
        burst_len in upto(dpu_rdma::RdmaFeatureModeCfg::BURST_LEN),
        mrdma in prop::option::of(mrdma()),
        erdma in prop::option::of(erdma()),
        arbiter in prop::array::uniform4(upto(dpu_rdma::RdmaWeight::M_WEIGHT)),
        fp16_to_fp32 in any::<bool>(),
        brdma in prop::option::of((addr(), 1..=max(dpu_rdma::RdmaBrdmaCfg::BRDMA_DATA_USE))),
        nrdma in prop::option::of((addr(), 1..=max(dpu_rdma::RdmaNrdmaCfg::NRDMA_DATA_USE))),
    ) -> DpuRdma {
        DpuRdma {
            depthwise: false,
            comb_use: 0,
            ping_pong,
            cube: (w, h, c),
            precision,
            flying,
            burst_len,
            mrdma,
            erdma,
            arbiter,
            fp16_to_fp32,
            brdma: brdma.map(|(addr, data_use)| OperandRead { addr, data_use }),
            nrdma: nrdma.map(|(addr, data_use)| OperandRead { addr, data_use }),
        }
    }
}

prop_compose! {
    fn core_block()(
        precision in conv_precision(),
        qd_en in any::<bool>(),
        depthwise in any::<bool>(),
        w in 1..=max(core_regs::DataoutSize0::DATAOUT_WIDTH) + 1,
        h in 1..=max(core_regs::DataoutSize0::DATAOUT_HEIGHT) + 1,
        c in 1..=max(core_regs::DataoutSize1::DATAOUT_CHANNEL) + 1,
    ) -> Core {
        Core { precision, qd_en, depthwise, out: (w, h, c) }
    }
}

fn only(cna: Option<Cna>, core: Option<Core>, dpu: Option<Dpu>, dpu_rdma: Option<DpuRdma>) -> Task {
    Task {
        cna,
        core,
        dpu,
        dpu_rdma,
        ppu: None,
        ppu_rdma: None,
    }
}

fn pool_method() -> impl Strategy<Value = PoolMethod> {
    prop::sample::select(vec![PoolMethod::Average, PoolMethod::Max, PoolMethod::Min])
}

/// Sizes stored minus one in three fields.
fn dims3<R1: Register, R2: Register, R3: Register>(
    a: Field<R1>,
    b: Field<R2>,
    c: Field<R3>,
) -> impl Strategy<Value = (u32, u32, u32)> {
    (1..=max(a) + 1, 1..=max(b) + 1, 1..=max(c) + 1)
}

prop_compose! {
    fn ppu_block()(
        ping_pong in any::<bool>(),
        cube_in in dims3(ppu::DataCubeInWidth::CUBE_IN_WIDTH, ppu::DataCubeInHeight::CUBE_IN_HEIGHT, ppu::DataCubeInChannel::CUBE_IN_CHANNEL),
        cube_out in dims3(ppu::DataCubeOutWidth::CUBE_OUT_WIDTH, ppu::DataCubeOutHeight::CUBE_OUT_HEIGHT, ppu::DataCubeOutChannel::CUBE_OUT_CHANNEL),
        method in pool_method(),
        from_memory in any::<bool>(),
        kernel in (1..=max(ppu::PoolingKernelCfg::KERNEL_WIDTH) + 1, 1..=max(ppu::PoolingKernelCfg::KERNEL_HEIGHT) + 1),
        stride in (1..=max(ppu::PoolingKernelCfg::KERNEL_STRIDE_WIDTH) + 1, 1..=max(ppu::PoolingKernelCfg::KERNEL_STRIDE_HEIGHT) + 1),
        recip in (upto(ppu::RecipKernelWidth::RECIP_KERNEL_WIDTH), upto(ppu::RecipKernelHeight::RECIP_KERNEL_HEIGHT)),
        padding in prop::array::uniform4(upto(ppu::PoolingPaddingCfg::PAD_LEFT)),
        pad_values in (upto(ppu::PaddingValue1Cfg::PAD_VALUE_0), upto(ppu::PaddingValue2Cfg::PAD_VALUE_1)),
        out in addr(),
        surf_stride in upto(ppu::DstSurfStride::DST_SURF_STRIDE),
        precision in any_precision(),
        index_add in upto(ppu::DataFormat::INDEX_ADD),
        burst_len in upto(ppu::MiscCtrl::BURST_LEN),
    ) -> Ppu {
        Ppu { ping_pong, cube_in, cube_out, method, from_memory, kernel, stride, recip, padding, pad_values, out, surf_stride, precision, index_add, burst_len }
    }
}

prop_compose! {
    fn ppu_rdma_block()(
        ping_pong in any::<bool>(),
        cube_in in dims3(ppu_rdma::RdmaCubeInWidth::CUBE_IN_WIDTH, ppu_rdma::RdmaCubeInHeight::CUBE_IN_HEIGHT, ppu_rdma::RdmaCubeInChannel::CUBE_IN_CHANNEL),
        size_code in upto(ppu_rdma::RdmaDataFormat::IN_PRECISION),
        src in addr(),
        line_stride in upto(ppu_rdma::RdmaSrcLineStride::SRC_LINE_STRIDE),
        surf_stride in upto(ppu_rdma::RdmaSrcSurfStride::SRC_SURF_STRIDE),
    ) -> PpuRdma {
        PpuRdma { ping_pong, cube_in, size_code, src, line_stride, surf_stride }
    }
}

/// CNA values whose derived registers (weight bytes) fit their fields.
fn fits(c: &Cna) -> bool {
    let kernel = c.kernel_bytes();
    kernel <= u64::from(max(cna::WeightSize1::WEIGHT_BYTES_PER_KERNEL))
        && kernel * u64::from(c.weights.kernels) <= u64::from(max(cna::WeightSize0::WEIGHT_BYTES))
        && c.feature.channels <= max(cna::DataSize1::DATAIN_CHANNEL)
        && c.feature.channels_real - 1 <= max(cna::DataSize1::DATAIN_CHANNEL_REAL)
        && c.feature.width <= max(cna::FcDataSize0::DMA_WIDTH)
        && c.feature.height <= max(cna::FcDataSize0::DMA_HEIGHT)
        && c.feature.channels <= max(cna::FcDataSize1::DMA_CHANNEL)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cna_round_trips(c in cna_block().prop_filter("derived sizes fit", fits)) {
        let t = only(Some(c), None, None, None);
        prop_assert_eq!(round_trip(&t), Ok(t));
    }

    #[test]
    fn core_round_trips(c in core_block()) {
        let t = only(None, Some(c), None, None);
        prop_assert_eq!(round_trip(&t), Ok(t));
    }

    #[test]
    fn dpu_round_trips(d in dpu_block()) {
        let t = only(None, None, Some(d), None);
        prop_assert_eq!(round_trip(&t), Ok(t));
    }

    #[test]
    fn dpu_rdma_round_trips(r in rdma_block()) {
        let t = only(None, None, None, Some(r));
        prop_assert_eq!(round_trip(&t), Ok(t));
    }

    #[test]
    fn ppu_round_trips(p in ppu_block(), r in ppu_rdma_block()) {
        let t = Task::pooling(p, r);
        prop_assert_eq!(round_trip(&t), Ok(t));
    }
}

// The LUT configuration (every field of LUT_CFG, LUT_INFO, the ranges and the slopes)
// round-trips through the DPU block above (`ew()` draws it); the upload is written by
// the body but is no register-file state.

prop_compose! {
    fn lut_slope()(
        us in any::<i16>(),
        ush in upto(dpu::LutLeSlopeShift::LUT_LE_SLOPE_UFLOW_SHIFT),
        os in any::<i16>(),
        osh in upto(dpu::LutLeSlopeShift::LUT_LE_SLOPE_OFLOW_SHIFT),
    ) -> LutSlope {
        LutSlope { uflow_scale: us, uflow_shift: ush, oflow_scale: os, oflow_shift: osh }
    }
}

prop_compose! {
    fn lut_range()(
        start in any::<i32>(),
        end in any::<i32>(),
        index_select in upto(dpu::LutInfo::LUT_LE_INDEX_SELECT),
        slope in lut_slope(),
    ) -> LutRange {
        LutRange { start, end, index_select, slope }
    }
}

prop_compose! {
    fn lut_block()(
        flags in prop::array::uniform6(any::<bool>()),
        mux in upto(dpu::LutCfg::LUT_LO_LE_MUX),
        le in lut_range(),
        lo in lut_range(),
    ) -> Lut {
        Lut {
            road_sel: flags[0],
            expand: flags[1],
            lo_le_mux: mux,
            uflow_lo: flags[2],
            oflow_lo: flags[3],
            hybrid_lo: flags[4],
            cal_sel: flags[5],
            le,
            lo,
            upload: None,
        }
    }
}

mod decode;
mod published;
