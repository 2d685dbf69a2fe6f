//! Round trips of every block (`decode(emit(x)) == x`), the sweep over fields the model
//! does not represent, and the DMA ranges of a task.

use super::*;
use crate::kernels::single::{Dtype, Layout, OutType, PostOps, SingleMatmul};
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
    fn stage()(
        bypass in any::<bool>(),
        alu in prop::option::of((alu_op(), any::<i32>(), any::<bool>())),
        mul in prop::option::of((any::<i16>(), upto(dpu::BsMulCfg::BS_MUL_SHIFT_VALUE), upto(dpu::DataFormat::BS_MUL_SHIFT_VALUE_NEG), any::<bool>(), any::<bool>(), any::<bool>())),
        relu in any::<bool>(),
        relux in prop::option::of(any::<i32>()),
    ) -> Stage {
        Stage {
            bypass,
            alu: alu.map(|(op, operand, from_memory)| Alu { op, operand, from_memory }),
            mul: mul.map(|(operand, shift, shift_neg, prelu, from_memory, shift_from_memory)| Mul {
                operand, shift, shift_neg, prelu, from_memory, shift_from_memory,
            }),
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
    fn rdma_block()(
        ping_pong in any::<bool>(),
        w in 1..=max(dpu_rdma::RdmaDataCubeWidth::WIDTH) + 1,
        h in 1..=max(dpu_rdma::RdmaDataCubeHeight::HEIGHT) + 1,
        c in 1..=max(dpu_rdma::RdmaDataCubeChannel::CHANNEL) + 1,
        precision in any_precision(),
        flying in any::<bool>(),
        burst_len in upto(dpu_rdma::RdmaFeatureModeCfg::BURST_LEN),
        mrdma in prop::option::of((addr(), upto(dpu_rdma::RdmaSrcDmaCfg::LINE_NOTCH_ADDR), upto(dpu_rdma::RdmaSurfNotch::SURF_NOTCH_ADDR))),
        erdma in prop::option::of((addr(), upto(dpu_rdma::RdmaErdmaCfg::ERDMA_DATA_SIZE), upto(dpu_rdma::RdmaErdmaCfg::ERDMA_DATA_MODE), upto(dpu_rdma::RdmaEwSurfStride::EW_SURF_STRIDE), upto(dpu_rdma::RdmaDataCubeHeight::EW_LINE_NOTCH_ADDR), upto(dpu_rdma::RdmaEwSurfNotch::EW_SURF_NOTCH))),
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
            mrdma: mrdma.map(|(addr, line_notch, surf_notch)| Mrdma { addr, line_notch, surf_notch }),
            erdma: erdma.map(|(addr, data_size, data_mode, surf_stride, line_notch, surf_notch)| Erdma {
                addr, data_size, data_mode, surf_stride, line_notch, surf_notch,
            }),
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
        let t = Task { ppu: Some(p), ppu_rdma: Some(r), ..only(None, None, None, None) };
        prop_assert_eq!(round_trip(&t), Ok(t));
    }

    #[test]
    fn generated_matmul_tasks_round_trip(
        m in 1u32..=64, k in 1u32..=512, n in 1u32..=256,
        dtype in prop::sample::select(vec![Dtype::Int8, Dtype::Int4, Dtype::Int16, Dtype::Fp16, Dtype::Bf16]),
        native in any::<bool>(), add in any::<bool>(),
    ) {
        let mut mm = SingleMatmul::new(m, k, n, dtype);
        if native {
            mm.a_layout = Layout::Native;
            mm.c_layout = Layout::Native;
        }
        mm.post = PostOps { add, ..PostOps::default() };
        let fixed = |a: u32| DmaAddr::Fixed(a);
        let t = mm.task_at(fixed(0x10_0000), fixed(0x20_0000), fixed(0x30_0000), fixed(0x40_0000)).unwrap();
        prop_assert_eq!(round_trip(&t), Ok(t));
    }
}

#[test]
fn a_field_the_model_does_not_represent_is_named() {
    let t = SingleMatmul::new(4, 64, 32, Dtype::Int8)
        .task_at(
            DmaAddr::Fixed(0x1000),
            DmaAddr::Fixed(0x2000),
            DmaAddr::Fixed(0x3000),
            DmaAddr::Fixed(0x4000),
        )
        .unwrap();
    let mut regs = snapshot(&t);
    // CNA.FC_CON0.fc_skip_en: zero skipping, which no decoder reads.
    let v = cna::FcCon0::FC_SKIP_EN.set(cna::FcCon0::new(), 1).unwrap();
    regs.set(cna::FcCon0::OFFSET, v.raw());
    let e = Task::decode(&mut regs, t.enable()).unwrap_err();
    assert_eq!(
        (e.register, e.field, e.value),
        (cna::FcCon0::NAME, cna::FcCon0::FC_SKIP_EN.name(), 1)
    );
    // A reserved bit of a written register.
    let mut regs = snapshot(&t);
    let reserved = !dpu::DataCubeWidth::INFO.known_mask();
    regs.set(
        dpu::DataCubeWidth::OFFSET,
        reserved & reserved.wrapping_neg(),
    );
    let e = Task::decode(&mut regs, t.enable()).unwrap_err();
    assert_eq!(
        (e.register, e.field),
        (dpu::DataCubeWidth::NAME, "reserved bits")
    );
}

#[test]
fn a_reserved_pooling_method_is_named() {
    let mut regs = Snapshot::default();
    let v = ppu::OperationModeCfg::POOLING_METHOD
        .set(ppu::OperationModeCfg::new(), 3)
        .unwrap();
    regs.set(ppu::OperationModeCfg::OFFSET, v.raw());
    let e = Task::decode(&mut regs, crate::regcmd::BlockMask(0x60)).unwrap_err();
    assert_eq!(
        (e.register, e.field, e.value),
        (
            ppu::OperationModeCfg::NAME,
            ppu::OperationModeCfg::POOLING_METHOD.name(),
            3
        )
    );
}

#[test]
fn dma_ranges_cover_what_the_layouts_say() {
    // 4 x 64 int8, plain: A is 4 lines of 64 bytes, B 32 kernels x 64 bytes, C int32.
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let t = mm
        .task_at(
            DmaAddr::Fixed(0x1000),
            DmaAddr::Fixed(0x2000),
            DmaAddr::Fixed(0x3000),
            DmaAddr::Fixed(0x4000),
        )
        .unwrap();
    let r = t.dma();
    let find = |what| r.iter().find(|d| d.what == what).copied().unwrap();
    let a = find("feature");
    assert_eq!(
        (a.start, a.len, a.access),
        (0x1000, mm.a_bytes() as u64, Access::Read)
    );
    let b = find("weights");
    assert_eq!((b.start, b.len), (0x2000, mm.b_bytes() as u64));
    let c = find("output");
    assert_eq!(
        (c.start, c.len, c.access),
        (0x3000, mm.c_bytes() as u64, Access::Write)
    );
    assert_eq!(r.len(), 3);

    // With the element-wise operand: E has C's shape with 32-bit elements.
    let mut mm = SingleMatmul::new(8, 32, 64, Dtype::Fp16);
    mm.out = OutType::Fp32;
    mm.post.add = true;
    let t = mm
        .task_at(
            DmaAddr::Fixed(0x1000),
            DmaAddr::Fixed(0x2000),
            DmaAddr::Fixed(0x3000),
            DmaAddr::Fixed(0x4000),
        )
        .unwrap();
    let e = t
        .dma()
        .into_iter()
        .find(|d| d.what == "EW operand")
        .unwrap();
    assert_eq!((e.start, e.len), (0x4000, mm.e_bytes() as u64));
}

#[test]
fn precision_codes_are_the_generated_value_set() {
    use crate::regs::values::Precision as P;
    for p in [
        Precision::Int8,
        Precision::Int16,
        Precision::Fp16,
        Precision::Bf16,
        Precision::Int4,
    ] {
        let name = P::SET.name_of(p.code()).map(str::to_lowercase);
        assert_eq!(name.as_deref(), Some(p.name()));
    }
    for p in Precision::ALL {
        assert_eq!(Precision::from_code(p.code()), Some(p));
    }
    assert_eq!(Precision::from_code(7), None);
}

#[test]
fn the_reference_worked_example_decodes_into_the_model() {
    use crate::kernels::worked_example;
    let body = worked_example::body().unwrap();
    let mut regs = Snapshot::from_writes(body.entries().iter().map(|e| (e.offset(), e.value())));
    let t = Task::decode(&mut regs, crate::regcmd::BlockMask::CONV).unwrap();
    let cna = t.cna.unwrap();
    assert_eq!(cna.precision, Precision::Int8);
    assert_eq!(
        (cna.feature.width, cna.feature.height, cna.feature.channels),
        (1, 4, 32)
    );
    assert_eq!(cna.weights.kernels, 32);
    let dpu = t.dpu.unwrap();
    assert_eq!(dpu.out.precision, Precision::Int32);
    assert_eq!(dpu.cube, (1, 4, 32));
    assert!(dpu.ew.is_none() && dpu.bs.bypass && dpu.bn.bypass);
}

/// The dequantisation task decodes back into its model, and its list writes the register
/// values of the public program it follows (happyme531/rknpu2_matmul_open, commit
/// 601269cfb7f5aa2c0d7fa96314e87ffdef996744, `middle_body(gate = false)` in
/// `src/rk_npu_moe_regs.h`).
#[test]
fn the_dequant_task_round_trips_and_writes_the_published_values() {
    use crate::kernels::single::{dequant_task, dequant_task_model};
    let (rows, row, channels, scale) = (8u32, 3u32, 96u32, 0.0137f32);
    let (acc, coeffs, out) = (0x10_0000u32, 0x20_0000u32, 0x30_0000u32);
    let task = dequant_task_model(
        rows,
        row,
        channels,
        scale,
        DmaAddr::Fixed(acc),
        DmaAddr::Fixed(coeffs),
        DmaAddr::Fixed(out),
    )
    .unwrap();
    assert_eq!(round_trip(&task).unwrap(), task);
    assert_eq!(task.enable(), crate::regcmd::BlockMask::ELEMENTWISE);
    let body = dequant_task(
        rows,
        row,
        channels,
        scale,
        DmaAddr::Fixed(acc),
        DmaAddr::Fixed(coeffs),
        DmaAddr::Fixed(out),
    )
    .unwrap();
    let writes: std::collections::BTreeMap<u16, u32> = body
        .entries()
        .iter()
        .map(|e| (e.offset(), e.value()))
        .collect();
    let c = channels - 1;
    let half = u32::from(crate::float::f32_to_f16(scale));
    let published: &[(u16, u32)] = &[
        (0x4004, 14),
        (0x400c, 0x1e5),
        (0x4010, 0xB400_0005),
        (0x4014, 0),
        (0x4020, out),
        (0x4024, 16),
        (0x4030, 0),
        (0x4034, 0),
        (0x4038, 0),
        (0x403c, (c << 16) | c),
        (0x4040, 0x42),
        (0x4044, 0),
        (0x4048, half << 16),
        (0x404c, 0),
        (0x4050, 2),
        (0x4054, 0),
        (0x4058, c),
        (0x405c, 0),
        (0x4060, 0x53),
        (0x4064, 0),
        (0x4068, 0),
        (0x406c, 0),
        (0x4070, 0x10C0_03C4),
        (0x4074, 0),
        (0x4078, 1),
        (0x407c, 0),
        (0x4080, 0),
        (0x4084, 1),
        (0x4088, 0),
        (0x40c0, 16),
        (0x40c4, 0),
        (0x5004, 14),
        (0x500c, 0),
        (0x5010, 0),
        (0x5014, c),
        (0x5018, acc + row * 16),
        (0x501c, 0),
        (0x5020, 0),
        (0x5028, 0),
        (0x502c, 0),
        (0x5034, 0x4000_000C),
        (0x5038, coeffs),
        (0x5040, 16),
        (0x5044, (5 << 15) | (15 << 11) | (5 << 5) | 1),
        (0x5048, 0),
        (0x504c, (rows - 1) * 16),
        (0x5064, 0),
        (0x5068, 0x0101_0101),
        (0x506c, 0),
    ];
    for &(offset, value) in published {
        assert_eq!(writes.get(&offset), Some(&value), "register {offset:#06x}");
    }
    for offset in (0x4090..0x40b0).step_by(4) {
        assert_eq!(writes.get(&offset), Some(&0), "EW_OP_VALUE {offset:#06x}");
    }
    // Every other register the list writes (the LUT block the program leaves alone) is 0.
    let named: std::collections::BTreeSet<u16> = published
        .iter()
        .map(|&(o, _)| o)
        .chain((0x4090..0x40b0).step_by(4))
        .collect();
    for (offset, value) in &writes {
        if !named.contains(offset) {
            assert_eq!(*value, 0, "register {offset:#06x}");
        }
    }
}

/// The fp32-output split-K add differs from the int32 one in DATA_FORMAT only, which is
/// (5 << 29) | (4 << 26) | 4 as in `add_body(.., fp32 = true)` of
/// happyme531/rknpu2_matmul_open `src/rk_npu_i8_dpu_chain.cpp`.
#[test]
fn the_fp32_add_differs_from_the_int32_add_in_data_format_only() {
    use crate::kernels::single::{add_task, add_to_fp32_task, add_to_fp32_task_model};
    let f = |a| DmaAddr::Fixed(a);
    let task = add_to_fp32_task_model(8, 64, f(0x1000), f(0x2000), f(0x3000)).unwrap();
    assert_eq!(round_trip(&task).unwrap(), task);
    let int = add_task(8, 64, f(0x1000), f(0x2000), f(0x3000)).unwrap();
    let fp = add_to_fp32_task(8, 64, f(0x1000), f(0x2000), f(0x3000)).unwrap();
    let diff: Vec<(u16, u32, u32)> = int
        .entries()
        .iter()
        .zip(fp.entries())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| (a.offset(), a.value(), b.value()))
        .collect();
    assert_eq!(
        diff,
        [(dpu::DataFormat::OFFSET, 0x9000_0004, 0xB000_0004)],
        "{diff:x?}"
    );
}

/// The dequantisation task reads pixel `row` of the fp32 cube (one atom per surface,
/// `rows` atoms apart), `channels` 32-bit coefficients, and writes `channels` fp32 values.
#[test]
fn the_dequant_task_touches_its_row_its_coefficients_and_its_output() {
    use crate::kernels::single::dequant_task_model;
    let (rows, row, channels) = (8u32, 5u32, 256u32);
    let task = dequant_task_model(
        rows,
        row,
        channels,
        1.0,
        DmaAddr::Fixed(0x10_0000),
        DmaAddr::Fixed(0x20_0000),
        DmaAddr::Fixed(0x30_0000),
    )
    .unwrap();
    let ranges: Vec<(u64, u64, Access)> = task
        .dma()
        .iter()
        .map(|r| (r.start, r.len, r.access))
        .collect();
    let surfaces = u64::from(channels / 4);
    let mut want = vec![
        (0x30_0000, surfaces * 16, Access::Write),
        (
            0x10_0000 + u64::from(row) * 16,
            (surfaces - 1) * u64::from(rows) * 16 + 16,
            Access::Read,
        ),
        (0x20_0000, u64::from(channels) * 4, Access::Read),
    ];
    let mut got = ranges;
    got.sort_by_key(|r| r.0);
    want.sort_by_key(|r| r.0);
    assert_eq!(got, want);
}

/// The vendor's dummy PPU task as `allbilly/rk3588` recorded it in the RKNN add model
/// (every multi-core program ends with one): a 1x1 int8 max over 1x1x32, all strides one
/// atom. It decodes into the model and emits back to the same register values.
#[test]
fn the_vendor_dummy_ppu_task_decodes_and_emits_back() {
    let writes: [(u16, u32); 26] = [
        (0x6004, 0xE),
        (0x7004, 0xE),
        (0x600C, 0),
        (0x6010, 0),
        (0x6014, 0x1F),
        (0x6018, 0),
        (0x601C, 0),
        (0x6020, 0x1F),
        (0x6024, 0x11),
        (0x6034, 0),
        (0x6038, 0),
        (0x603C, 0),
        (0x6040, 0),
        (0x6044, 0),
        (0x6048, 0),
        (0x6070, 0xFFD7_0080),
        (0x607C, 0x10),
        (0x6084, 0x10),
        (0x60DC, 3),
        (0x700C, 0),
        (0x7010, 0),
        (0x7014, 0x1F),
        (0x701C, 0xFFD7_0480),
        (0x7024, 0x10),
        (0x7028, 0x10),
        (0x7030, 1),
    ];
    let mut regs = Snapshot::from_writes(writes);
    let t = Task::decode(&mut regs, crate::regcmd::BlockMask(0x60)).unwrap();
    let (p, r) = (t.ppu.unwrap(), t.ppu_rdma.unwrap());
    assert_eq!((p.cube_in, p.cube_out), ((1, 1, 32), (1, 1, 32)));
    assert_eq!(
        (p.method, p.from_memory, p.precision),
        (PoolMethod::Max, true, Precision::Int8)
    );
    assert_eq!(
        (p.kernel, p.stride, p.surf_stride, p.index_add),
        ((1, 1), (1, 1), 1, 1)
    );
    assert_eq!((r.size_code, r.line_stride, r.surf_stride), (1, 1, 1));
    assert_eq!(
        (p.out, r.src),
        (DmaAddr::Fixed(0xFFD7_0080), DmaAddr::Fixed(0xFFD7_0480))
    );
    let mut b = TaskBuilder::new();
    t.emit(&mut b).unwrap();
    let emitted: Vec<(u16, u32)> = b
        .entries()
        .iter()
        .map(|e| (e.offset(), e.value()))
        .collect();
    assert_eq!(emitted, writes);
    // Two 16-byte surfaces read and written.
    let d = t.dma();
    assert_eq!(
        (d[0].start, d[0].len, d[0].access),
        (0xFFD7_0480, 32, Access::Read)
    );
    assert_eq!(
        (d[1].start, d[1].len, d[1].access),
        (0xFFD7_0080, 32, Access::Write)
    );
}

/// PPU fields the model does not represent must be 0; each is refused by name.
#[test]
fn unmodelled_ppu_fields_are_named() {
    let cases: [(u16, u32, &str, &str); 5] = [
        (
            ppu::OperationModeCfg::OFFSET,
            1 << 5,
            ppu::OperationModeCfg::NAME,
            ppu::OperationModeCfg::USE_CNT.name(),
        ),
        (
            ppu::OperationModeCfg::OFFSET,
            1 << 16,
            ppu::OperationModeCfg::NAME,
            ppu::OperationModeCfg::NOTCH_ADDR.name(),
        ),
        (
            ppu::OperationModeCfg::OFFSET,
            1 << 30,
            ppu::OperationModeCfg::NAME,
            ppu::OperationModeCfg::INDEX_EN.name(),
        ),
        (
            ppu::MiscCtrl::OFFSET,
            1 << 16,
            ppu::MiscCtrl::NAME,
            ppu::MiscCtrl::SURF_LEN.name(),
        ),
        (
            ppu::DataFormat::OFFSET,
            1 << 3,
            ppu::DataFormat::NAME,
            ppu::DataFormat::DPU_FLYIN.name(),
        ),
    ];
    for (offset, value, register, field) in cases {
        let mut regs = Snapshot::from_writes([(offset, value)]);
        let e = Task::decode(&mut regs, crate::regcmd::BlockMask(0x60)).unwrap_err();
        assert_eq!((e.register, e.field), (register, field), "{e}");
    }
}

/// A pooling task's DMA ranges follow its strides: the read spans every surface of the
/// input at the PPU_RDMA strides, the write every surface at DST_SURF_STRIDE.
#[test]
fn pooling_dma_ranges_follow_the_strides() {
    use crate::kernels::ops::Cube;
    use crate::kernels::ops::pool::{Pool2d, PoolKind};
    let c = Cube::new(6, 4, 16, Precision::Fp16).unwrap();
    let t = Pool2d::new(c, PoolKind::Max, 2)
        .tasks(
            DmaAddr::Fixed(0x1000),
            DmaAddr::Fixed(0x9000),
            DmaAddr::Fixed(0),
        )
        .unwrap()
        .remove(0);
    let d = t.dma();
    let read = d
        .iter()
        .find(|r| r.block == crate::regs::Block::PpuRdma)
        .unwrap();
    assert_eq!((read.start, read.len), (0x1000, 2 * 6 * 4 * 16));
    let write = d
        .iter()
        .find(|r| r.block == crate::regs::Block::Ppu)
        .unwrap();
    assert_eq!(
        (write.start, write.len, write.access),
        (0x9000, 2 * 3 * 2 * 16, Access::Write)
    );
}

#[test]
fn kxk_conv_dma_ranges_cover_the_band_and_the_kernels() {
    use crate::kernels::ops::Cube;
    use crate::kernels::ops::conv::Conv2d;
    // 40 × 40 × 160 fp16, 32 kernels of 3 × 3: two bands of 23 and 19 input rows
    // (rows 0..23 and 21..40), each task reading its rows of all 20 surfaces.
    let cv = Conv2d::new(Cube::new(40, 40, 160, Precision::Fp16).unwrap(), 32, (3, 3));
    let tasks = cv
        .tasks(
            DmaAddr::Fixed(0x10_0000),
            DmaAddr::Fixed(0x80_0000),
            DmaAddr::Fixed(0x100_0000),
        )
        .unwrap();
    assert_eq!(tasks.len(), 2);
    let surface = 40 * 40 * 16;
    let ranges = tasks[1].dma();
    let find = |what| ranges.iter().find(|d| d.what == what).copied().unwrap();
    let f = find("feature");
    assert_eq!(f.start, 0x10_0000 + 21 * 40 * 16);
    assert_eq!(f.len, 19 * surface + 18 * 40 * 16 + 40 * 16);
    let w = find("weights");
    // 32 kernels of 3 · 3 · 160 halves.
    assert_eq!((w.start, w.len), (0x80_0000, 32 * 3 * 3 * 160 * 2));
    let o = find("output");
    // Output rows 21..38 of a 38 × 38 plane, in four surfaces of 8 fp16 channels.
    let plane = 38 * 38 * 16;
    assert_eq!(o.start, 0x100_0000 + 21 * 38 * 16);
    assert_eq!(o.len, 3 * plane + 16 * 38 * 16 + 38 * 16);
    // Every field of both tasks survives a round trip.
    for t in &tasks {
        assert_eq!(round_trip(t).as_ref(), Ok(t));
    }
}

/// The requantisation epilogue's BRDMA and NRDMA reads and the per-channel EW operand:
/// their registers round-trip, and the DMA ranges cover one operand per channel.
#[test]
fn per_channel_operand_reads_round_trip_and_touch_one_value_per_channel() {
    use crate::kernels::ops::Cube;
    use crate::kernels::ops::eltwise::{Eltwise, EltwiseOp, Operand};
    use crate::kernels::ops::epilogue::{OutScale, Requant};
    let cube = Cube::new(4, 1, 32, Precision::Int32).unwrap();
    let rq = Requant::per_tensor(OutScale::new(1, 0, 0))
        .with_bias()
        .with_channel_multipliers(3)
        .unwrap();
    let t = rq
        .tasks(
            cube,
            DmaAddr::Fixed(0x10_0000),
            DmaAddr::Fixed(0x20_0000),
            DmaAddr::Fixed(0x30_0000),
        )
        .unwrap()
        .remove(0);
    assert_eq!(round_trip(&t), Ok(t.clone()));
    let r = t.dpu_rdma.unwrap();
    assert_eq!(
        r.brdma,
        Some(OperandRead {
            addr: DmaAddr::Fixed(0x20_0000),
            data_use: OperandRead::ALU
        })
    );
    assert_eq!(r.nrdma.unwrap().addr, DmaAddr::Fixed(0x20_0000 + 32 * 4));
    let ranges: Vec<(u64, u64)> = t
        .dma()
        .iter()
        .filter(|x| x.access == Access::Read)
        .map(|x| (x.start, x.len))
        .collect();
    assert!(ranges.contains(&(0x20_0000, 32 * 4)), "{ranges:x?}");
    assert!(
        ranges.contains(&(0x20_0000 + 32 * 4, 32 * 2)),
        "{ranges:x?}"
    );
    // A per-channel EW operand: one atom per surface, 16 bytes apart.
    let e = Eltwise::new(
        EltwiseOp::Add,
        Cube::new(3, 2, 16, Precision::Fp16).unwrap(),
        Operand::PerChannel,
    )
    .unwrap()
    .tasks(
        DmaAddr::Fixed(0x10_0000),
        DmaAddr::Fixed(0x20_0000),
        DmaAddr::Fixed(0x30_0000),
    )
    .unwrap()
    .remove(0);
    assert_eq!(round_trip(&e), Ok(e.clone()));
    assert!(e.dpu_rdma.unwrap().fp16_to_fp32);
    assert!(
        e.dma()
            .iter()
            .any(|x| x.what == "EW operand" && (x.start, x.len) == (0x20_0000, 32)),
        "{:x?}",
        e.dma()
    );
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

fn lut_task(lut: Lut) -> Task {
    use crate::kernels::ops::lut::{Gate, lut_task, recipe};
    let r = recipe(Gate::Sigmoid);
    let mut t = lut_task(
        &r,
        4,
        2,
        DmaAddr::Fixed(0x1000),
        DmaAddr::Fixed(0x2000),
        false,
    );
    t.dpu.as_mut().unwrap().ew.as_mut().unwrap().lut = Some(lut);
    t
}

fn tables(seed: i16) -> LutTables {
    let mut t = LutTables {
        le: [0; LUT_ENTRIES],
        lo: [0; LUT_ENTRIES],
    };
    for i in 0..LUT_ENTRIES {
        t.le[i] = (i as i16).wrapping_mul(37).wrapping_add(seed);
        t.lo[i] = (i as i16).wrapping_mul(-91).wrapping_sub(seed);
    }
    t
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn a_lut_task_round_trips_without_its_upload(l in lut_block(), seed in any::<i16>()) {
        let plain = lut_task(l);
        prop_assert_eq!(&round_trip(&plain).unwrap(), &plain);
        // With an upload the register file is the same: the port is not state.
        let uploading = lut_task(l.with_upload(tables(seed)));
        prop_assert_eq!(&round_trip(&uploading).unwrap(), &plain);
    }
}

#[test]
fn the_upload_is_two_runs_of_513_port_writes_in_the_body() {
    let lut = Lut::hybrid(5).unwrap().with_upload(tables(3));
    let task = lut_task(lut);
    let body = task.body().unwrap();
    let e = body.entries();
    let cfg = dpu::LutAccessCfg::OFFSET;
    let data = dpu::LutAccessData::OFFSET;
    let starts: Vec<usize> = e
        .iter()
        .enumerate()
        .filter(|(_, x)| x.offset() == cfg)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(starts.len(), 2);
    assert_eq!(e[starts[0]].value(), 0x0002_0000);
    assert_eq!(e[starts[1]].value(), 0x0003_0000);
    assert_eq!(starts[1] - starts[0], 514);
    let t = tables(3);
    for i in 0..LUT_ENTRIES {
        assert_eq!(e[starts[0] + 1 + i].offset(), data);
        assert_eq!(e[starts[0] + 1 + i].value(), u32::from(t.le[i] as u16));
        assert_eq!(e[starts[1] + 1 + i].value(), u32::from(t.lo[i] as u16));
    }
    // Without an upload the port gets its two zero words, as in every DPU body.
    let plain = lut_task(lut.without_upload()).body().unwrap();
    let port: Vec<u32> = plain
        .entries()
        .iter()
        .filter(|x| x.offset() == cfg || x.offset() == data)
        .map(|x| x.value())
        .collect();
    assert_eq!(port, vec![0, 0]);
    // LUT_CFG of the hybrid configuration is the 0x68 of every program that ran.
    let lut_cfg = plain
        .entries()
        .iter()
        .find(|x| x.offset() == dpu::LutCfg::OFFSET)
        .unwrap()
        .value();
    assert_eq!(lut_cfg, 0x68);
}
