//! The worked example (mtx512's int8 matmul; docs/provenance.md): the int8 matmul
//! `C[4×32] = A[4×32] × B[32×32]ᵀ` as a single 1×1-convolution task, built entry by
//! entry with the typed builder.
//!
//! The values are those of mtx512's published program (its `gen_matmul_int8()` formulas evaluated for
//! M = 4, K = 32, N = 32), in the same order; the program is the repository's golden
//! example (`fixtures/regcmd/worked-int8-4x32x32.*`).

use crate::error::Result;
use crate::regcmd::{BlockMask, BufferId, DmaAddr, Program, ProgramBuilder, TaskBuilder};
use crate::regs::values::{BurstLen, DpuPrecision, OutputMode};
use crate::regs::{cna, core, dpu};

/// The buffer holding the program itself.
pub const REGCMD: BufferId = BufferId(0);
/// Input A: 4 rows × 32 int8 channels in the NC1HWC2 feature layout (128 bytes).
pub const INPUT: BufferId = BufferId(1);
/// Weights B: 32 kernels × 32 int8 in the weight layout (1024 bytes).
pub const WEIGHTS: BufferId = BufferId(2);
/// Output C: 4 × 32 int32 (512 bytes).
pub const OUTPUT: BufferId = BufferId(3);

/// Device addresses the bundled fixture binds the buffers to.
pub const FIXTURE_ADDRESSES: [(BufferId, u32); 4] = [
    (REGCMD, 0x0010_0000),
    (INPUT, 0x0020_0000),
    (WEIGHTS, 0x0030_0000),
    (OUTPUT, 0x0040_0000),
];

/// The device address of `buffer` in the bundled fixture.
pub fn fixture_address(buffer: BufferId) -> Option<u64> {
    FIXTURE_ADDRESSES
        .iter()
        .find(|(b, _)| *b == buffer)
        .map(|(_, a)| u64::from(*a))
}

/// The shape: M × K × N.
const M: u16 = 4;
const K: u16 = 32;
const N: u16 = 32;

/// The task body: the 104 register writes of the worked example's published program, rows 0-103.
pub fn body() -> Result<TaskBuilder> {
    let mut t = TaskBuilder::with_capacity(104);
    cna_part(&mut t)?;
    core_part(&mut t);
    dpu_part(&mut t)?;
    Ok(t)
}

/// The DPU ping-pong pointer, then the CNA rows.
fn cna_part(t: &mut TaskBuilder) -> Result<()> {
    let (m, k, n) = (M, K, N);
    t.write(
        dpu::SPointer::new()
            .with_pointer_pp_en(true)
            .with_executer_pp_en(true)
            .with_pointer_pp_mode(true),
    );
    // CNA: direct conv, int8 in and processing (all zero), then shapes.
    t.write(cna::ConvCon1::new())
        .write(cna::ConvCon2::new().with_feature_grains(m + 1))
        .write(
            cna::ConvCon3::new()
                .with_conv_x_stride(1)
                .with_conv_y_stride(1),
        )
        .write(
            cna::DataSize0::new()
                .with_datain_width(1)
                .with_datain_height(m),
        )
        .write(
            cna::DataSize1::new()
                .with_datain_channel_real(k - 1)
                .with_datain_channel(k),
        )
        .write(cna::DataSize2::new().with_dataout_width(1))
        .write(cna::DataSize3::new().with_dataout_atomics(u32::from(m)))
        .write(cna::WeightSize0::new().with_weight_bytes(u32::from(k) * u32::from(n)))
        .write(cna::WeightSize1::new().with_weight_bytes_per_kernel(u32::from(k)))
        .write(
            cna::WeightSize2::new()
                .with_weight_width(1)
                .with_weight_height(1)
                .with_weight_kernels(n),
        )
        .write(cna::CbufCon0::new().with_data_bank(1).with_weight_bank(11))
        .write(cna::CbufCon1::new().with_data_entries(1))
        .write(
            cna::CvtCon0::new()
                .with_cvt_bypass(true)
                .with_cvt_type(true)
                .with_data_sign(true),
        )
        .write(cna::CvtCon1::new().with_cvt_scale0(1))
        .write(cna::CvtCon2::new().with_cvt_scale1(1))
        .write(cna::CvtCon3::new().with_cvt_scale2(1))
        .write(cna::CvtCon4::new().with_cvt_scale3(1))
        .write(cna::FcCon0::new())
        .write(cna::FcCon1::new())
        .write(cna::PadCon0::new());
    t.write_addr::<cna::FeatureDataAddr>(DmaAddr::reloc(INPUT, 0))?;
    t.write(cna::FcCon2::new())
        .write(
            cna::DmaCon0::new()
                .with_weight_burst_len(BurstLen::BURST16)
                .with_data_burst_len(BurstLen::BURST16),
        )
        .write(cna::DmaCon1::new().with_line_stride(4))
        .write(cna::DmaCon2::new())
        .write(cna::FcDataSize0::new().with_dma_width(1).with_dma_height(m))
        .write(cna::FcDataSize1::new().with_dma_channel(k))
        .write(cna::DcompCtrl::new())
        .write(cna::DcompRegnum::new());
    t.write_addr::<cna::DcompAddr0>(DmaAddr::reloc(WEIGHTS, 0))?;
    t.write(cna::DcompAmount0::new())
        .write(cna::DcompAmount1::new())
        .write(cna::DcompAmount2::new())
        .write(cna::DcompAmount3::new())
        .write(cna::DcompAmount4::new())
        .write(cna::DcompAmount5::new())
        .write(cna::DcompAmount6::new())
        .write(cna::DcompAmount7::new())
        .write(cna::DcompAmount8::new())
        .write(cna::DcompAmount9::new())
        .write(cna::DcompAmount10::new())
        .write(cna::DcompAmount11::new())
        .write(cna::DcompAmount12::new())
        .write(cna::DcompAmount13::new())
        .write(cna::DcompAmount14::new())
        .write(cna::DcompAmount15::new())
        .write(cna::CvtCon5::new())
        .write(cna::PadCon1::new());
    // CORE: int8, output cube M × 1 × N (minus one each), full int32, undocumented 0x3030.
    Ok(())
}

/// The CORE rows.
fn core_part(t: &mut TaskBuilder) {
    let (m, n) = (M, N);
    t.write(core::MiscCfg::new())
        .write(core::DataoutSize0::new().with_dataout_height(m - 1))
        .write(core::DataoutSize1::new().with_dataout_channel(n - 1))
        .write(core::ClipTruncate::new())
        .write(core::Unk3030::new());
    // DPU: int32 to memory, every stage bypassed.
}

/// The DPU rows.
fn dpu_part(t: &mut TaskBuilder) -> Result<()> {
    let (m, n) = (M, N);
    t.write(
        dpu::FeatureModeCfg::new()
            .with_burst_len(BurstLen::BURST16)
            .with_output_mode(OutputMode::MEMORY),
    )
    .write(dpu::DataFormat::new().with_out_precision(DpuPrecision::INT32))
    .write(dpu::OffsetPend::new());
    t.write_addr::<dpu::DstBaseAddr>(DmaAddr::reloc(OUTPUT, 0))?;
    let bypass_bs = dpu::BsCfg::new()
        .with_bs_bypass(true)
        .with_bs_alu_bypass(true)
        .with_bs_mul_bypass(true)
        .with_bs_relu_bypass(true);
    let bypass_bn = dpu::BnCfg::new()
        .with_bn_bypass(true)
        .with_bn_alu_bypass(true)
        .with_bn_mul_bypass(true)
        .with_bn_relu_bypass(true);
    t.write(dpu::DstSurfStride::new().with_dst_surf_stride(4))
        .write(dpu::DataCubeWidth::new())
        .write(dpu::DataCubeHeight::new().with_height(m - 1))
        .write(dpu::DataCubeNotchAddr::new())
        .write(
            dpu::DataCubeChannel::new()
                .with_orig_channel(n - 1)
                .with_channel(n - 1),
        )
        .write(bypass_bs)
        .write(dpu::BsAluCfg::new())
        .write(dpu::BsMulCfg::new())
        .write(dpu::BsReluxCmpValue::new())
        .write(
            dpu::BsOwCfg::new()
                .with_size_e_2(7)
                .with_size_e_1(7)
                .with_size_e_0(7)
                .with_od_bypass(true),
        )
        .write(dpu::BsOwOp::new())
        .write(dpu::WdmaSize0::new().with_channel_wdma(n - 1))
        .write(dpu::WdmaSize1::new().with_height_wdma(m - 1))
        .write(bypass_bn)
        .write(dpu::BnAluCfg::new())
        .write(dpu::BnMulCfg::new())
        .write(dpu::BnReluxCmpValue::new())
        .write(
            dpu::EwCfg::new()
                .with_ew_bypass(true)
                .with_ew_op_bypass(true)
                .with_ew_lut_bypass(true)
                .with_ew_op_cvt_bypass(true)
                .with_ew_relu_bypass(true),
        )
        .write(dpu::EwCvtOffsetValue::new())
        .write(dpu::EwCvtScaleValue::new().with_ew_op_cvt_scale(1))
        .write(dpu::EwReluxCmpValue::new())
        .write(dpu::OutCvtOffset::new())
        .write(dpu::OutCvtScale::new().with_out_cvt_scale(1))
        .write(dpu::OutCvtShift::new())
        .write(dpu::EwOpValue0::new())
        .write(dpu::EwOpValue1::new())
        .write(dpu::EwOpValue2::new())
        .write(dpu::EwOpValue3::new())
        .write(dpu::EwOpValue4::new())
        .write(dpu::EwOpValue5::new())
        .write(dpu::EwOpValue6::new())
        .write(dpu::EwOpValue7::new())
        .write(dpu::SurfaceAdd::new().with_surf_add(0x20))
        .write(dpu::Unk40c4::new())
        .write(dpu::LutAccessCfg::new())
        .write(dpu::LutAccessData::new())
        .write(dpu::LutCfg::new())
        .write(dpu::LutInfo::new())
        .write(dpu::LutLeStart::new())
        .write(dpu::LutLeEnd::new())
        .write(dpu::LutLoStart::new())
        .write(dpu::LutLoEnd::new())
        .write(dpu::LutLeSlopeScale::new())
        .write(dpu::LutLeSlopeShift::new())
        .write(dpu::LutLoSlopeScale::new())
        .write(dpu::LutLoSlopeShift::new());
    Ok(())
}

/// The whole program: one task started with CNA + CORE + DPU, completing on the DPU
/// interrupt pair (0x300).
pub fn program() -> Result<Program> {
    let mut p = ProgramBuilder::new(REGCMD);
    p.push_task(body()?, BlockMask::CONV);
    p.build()
}
