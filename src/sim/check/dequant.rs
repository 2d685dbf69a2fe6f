//! The fp32 pipeline: the dequantisation task of a published program, its values as
//! tables.

use super::Allowed::{Is, Range, Test, When};
use super::Why::{Text, With};
use super::{Envelope, Why, check};
use crate::regs::{Register, dpu, dpu_rdma};
use crate::sim::error::unsupported;
use crate::sim::error::{At, SimError};
use crate::task::{self, DpuInput, EwSrc, Precision};

/// Why the task's fp32 processing is refused where the published task writes otherwise.
const WHY: &str = "fp32 processing is modelled for the published dequantisation task only";

/// The published envelope's shape: one pixel of 32..=1024 channels in steps of 32.
fn published_shape(d: &task::Dpu) -> bool {
    let (w, h, c) = d.cube;
    w == 1 && h == 1 && c <= 1024 && c.is_multiple_of(32)
}

/// What the published dequantisation task writes into the DPU, in the order the fields
/// are checked: BS multiplying by a finite fp16 register operand (BS_CFG 0x42), BN
/// bypassed (0x53), EW multiplying by a 32-bit per-channel ERDMA operand (EW_CFG
/// 0x10C0_03C4), a compact fp32 output with CPEND bypassed (BS_OW_CFG 2).
const DPU: &[Envelope<task::Dpu>] = {
    use dpu::{
        BnCfg, BsCfg, BsMulCfg, BsOwCfg, BsOwOp, DataCubeNotchAddr, DataFormat, DstSurfStride,
        EwCfg, EwOpValue0, FeatureModeCfg, SurfaceAdd,
    };
    const BS: Why<task::Dpu> = Why::published::<BsCfg>("multiplies in BS", 0x42);
    const BN: Why<task::Dpu> = Why::published::<BnCfg>("bypasses BN", 0x53);
    const NO_SHIFT: Why<task::Dpu> = Text("float multiply has no shift");
    &[
        Envelope::new(
            FeatureModeCfg::BURST_LEN,
            |d| Some(d.burst_len),
            Is(15),
            Text("the published task writes 15"),
        ),
        // BS: multiplier only, register operand, no shifts.
        Envelope::new(BsCfg::BS_BYPASS, |d| Some(d.bs.bypass.into()), Is(0), BS),
        Envelope::new(
            BsCfg::BS_ALU_BYPASS,
            |d| Some(d.bs.alu.is_none().into()),
            Is(1),
            With(|d| {
                format!(
                    "the published task bypasses the BS ALU ({:?} given)",
                    d.bs.alu.map(|a| a.op).unwrap_or(task::AluOp::Add)
                )
            }),
        ),
        Envelope::new(
            BsCfg::BS_RELU_BYPASS,
            |d| Some((!d.bs.relu).into()),
            Is(1),
            Text("the published task bypasses the BS ReLU"),
        ),
        Envelope::new(
            BsCfg::BS_RELUX_EN,
            |d| Some(d.bs.relux.is_some().into()),
            Is(0),
            Text("the published task bypasses the BS ReLUX"),
        ),
        Envelope::new(
            BsCfg::BS_MUL_BYPASS,
            |d| Some(d.bs.mul.is_none().into()),
            Is(0),
            BS,
        ),
        Envelope::new(
            BsCfg::BS_MUL_PRELU,
            |d| d.bs.mul.map(|m| m.prelu.into()),
            Is(0),
            Text(WHY),
        ),
        Envelope::new(
            BsMulCfg::BS_MUL_SRC,
            |d| d.bs.mul.map(|m| m.from_memory.into()),
            Is(0),
            Text("the published task's BS operand is a register"),
        ),
        Envelope::new(
            BsMulCfg::BS_TRUNCATE_SRC,
            |d| d.bs.mul.map(|m| m.shift_from_memory.into()),
            Is(0),
            Text(WHY),
        ),
        Envelope::new(
            BsMulCfg::BS_MUL_SHIFT_VALUE,
            |d| d.bs.mul.map(|m| m.shift),
            Is(0),
            NO_SHIFT,
        ),
        Envelope::new(
            DataFormat::BS_MUL_SHIFT_VALUE_NEG,
            |d| d.bs.mul.map(|m| m.shift_neg),
            Is(0),
            NO_SHIFT,
        ),
        Envelope::new(
            BsMulCfg::BS_MUL_OPERAND,
            |d| d.bs.mul.map(|m| m.fp16_bits().into()),
            Test(|bits| crate::float::f16_to_f32(bits as u16).is_finite()),
            Text("the published task writes a finite fp16 operand"),
        ),
        // BN bypassed (0x53).
        Envelope::new(BnCfg::BN_BYPASS, |d| Some(d.bn.bypass.into()), Is(1), BN),
        Envelope::new(
            BnCfg::BN_ALU_BYPASS,
            |d| Some(d.bn.alu.is_none().into()),
            Is(1),
            BN,
        ),
        Envelope::new(
            BnCfg::BN_MUL_BYPASS,
            |d| Some(d.bn.mul.is_none().into()),
            Is(1),
            BN,
        ),
        Envelope::new(
            BnCfg::BN_RELU_BYPASS,
            |d| Some((!d.bn.relu).into()),
            Is(1),
            BN,
        ),
        Envelope::new(
            BnCfg::BN_RELUX_EN,
            |d| Some(d.bn.relux.is_some().into()),
            Is(0),
            BN,
        ),
        // EW: multiply by a 32-bit per-channel operand from ERDMA, converter and ReLU
        // bypassed. Shifts other than 0 are refused by `ew_stage`.
        Envelope::new(
            EwCfg::EW_BYPASS,
            |d| Some(d.ew.is_none().into()),
            Is(0),
            Why::published::<EwCfg>("multiplies in EW", 0x10C0_03C4),
        ),
        Envelope::new(
            EwCfg::EW_OP_TYPE,
            |d| {
                d.ew.and_then(|e| e.op)
                    .map(|op| matches!(op, task::EwOp::Mul(..)).into())
            },
            Is(1),
            Text("the published task multiplies in EW (1)"),
        ),
        Envelope::new(
            EwCfg::EW_OP_BYPASS,
            |d| d.ew.map(|e| e.op.is_none().into()),
            Is(0),
            Text("the published task multiplies in EW (0)"),
        ),
        Envelope::new(
            EwCfg::EW_OP_SRC,
            |d| d.ew.map(|e| (e.src == EwSrc::Memory).into()),
            Is(1),
            Text("the published task reads the EW operand through ERDMA (1)"),
        ),
        Envelope::new(
            EwCfg::EW_OP_CVT_BYPASS,
            |d| d.ew.map(|e| e.cvt.is_none().into()),
            Is(1),
            Text("the published task bypasses the EW operand converter (1)"),
        ),
        Envelope::new(
            EwCfg::EW_RELU_BYPASS,
            |d| d.ew.map(|e| (!e.relu).into()),
            Is(1),
            Text("the published task bypasses the EW ReLU (1)"),
        ),
        Envelope::new(
            EwCfg::EDATA_SIZE,
            |d| d.ew.map(|e| e.data_size),
            Is(3),
            Text("the published task reads 32-bit operand elements (3)"),
        ),
        Envelope::new(
            EwOpValue0::EW_OPERAND_0,
            |d| {
                d.ew.map(|e| e.values.iter().copied().find(|&v| v != 0).unwrap_or(0))
            },
            Is(0),
            With(|d| {
                let i =
                    d.ew.and_then(|e| e.values.iter().position(|&v| v != 0))
                        .unwrap_or(0);
                format!(
                    "the published task writes 0 to every EW operand register (operand {i} is not)"
                )
            }),
        ),
        // Output: one compact row of fp32, CPEND bypassed.
        Envelope::new(
            DstSurfStride::DST_SURF_STRIDE,
            |d| published_shape(d).then_some(d.out.surf_stride),
            Is(1),
            Text("the published task writes 1 (16 bytes)"),
        ),
        Envelope::new(
            DataCubeNotchAddr::NOTCH_ADDR_0,
            |d| published_shape(d).then_some(d.out.notch),
            Is(0),
            Text("the published task writes 0"),
        ),
        Envelope::new(
            SurfaceAdd::SURF_ADD,
            |d| Some(d.out.surface_add),
            When(|d| d.out.surface_add == d.out.surf_stride),
            Why::published::<DstSurfStride>("writes a surface stride of 16 bytes", 1),
        ),
        Envelope::new(
            BsOwCfg::OD_BYPASS,
            |d| Some(d.ow.od_bypass.into()),
            Is(1),
            With(|_| {
                let what = format!("writes {} 1", BsOwCfg::OD_BYPASS.name());
                format!("the published task {what} ({} {:#x})", BsOwCfg::NAME, 2)
            }),
        ),
        Envelope::new(
            BsOwOp::OW_OP,
            |d| Some(d.ow.ow_op),
            When(|d| d.ow.ow_op == 0 && d.ow.ow_src == 0),
            Text("the published task writes 0"),
        ),
    ]
};

/// The DPU_RDMA of a dequantisation task and whether its DPU cube has the published
/// shape (the notches and the ERDMA stride are checked only then).
struct Rdma {
    r: task::DpuRdma,
    shape: bool,
}

/// What the published dequantisation task writes into DPU_RDMA: burst 15, MRDMA
/// SURF_NOTCH up to 127 atoms (128 rows), EW_SURF_STRIDE 16 bytes, arbiter weights 1.
const RDMA: &[Envelope<Rdma>] = {
    use dpu_rdma::{
        RdmaDataCubeHeight, RdmaEwSurfStride, RdmaFeatureModeCfg, RdmaSrcDmaCfg, RdmaSurfNotch,
        RdmaWeight,
    };
    const WRITES_0: Why<Rdma> = Text("the published task writes 0");
    const WEIGHT: Why<Rdma> = Text("the published task writes 1 to each arbiter weight");
    &[
        Envelope::new(
            RdmaFeatureModeCfg::BURST_LEN,
            |c| Some(c.r.burst_len),
            Is(15),
            Text("the published task writes 15"),
        ),
        Envelope::new(
            RdmaSrcDmaCfg::LINE_NOTCH_ADDR,
            |c| c.r.mrdma.filter(|_| c.shape).map(|m| m.line_notch),
            Is(0),
            WRITES_0,
        ),
        Envelope::new(
            RdmaSurfNotch::SURF_NOTCH_ADDR,
            |c| c.r.mrdma.filter(|_| c.shape).map(|m| m.surf_notch),
            Range(0, 127),
            Text("the published task reads one pixel of a cube of at most 128 rows (0..=127)"),
        ),
        Envelope::new(
            RdmaEwSurfStride::EW_SURF_STRIDE,
            |c| c.r.erdma.filter(|_| c.shape).map(|e| e.surf_stride),
            Is(1),
            Text("the published task writes 1 (16 bytes)"),
        ),
        Envelope::new(
            RdmaDataCubeHeight::EW_LINE_NOTCH_ADDR,
            |c| c.r.erdma.filter(|_| c.shape).map(|e| e.line_notch),
            Is(0),
            WRITES_0,
        ),
        Envelope::new(
            RdmaWeight::M_WEIGHT,
            |c| Some(c.r.arbiter[0]),
            Is(1),
            WEIGHT,
        ),
        Envelope::new(
            RdmaWeight::B_WEIGHT,
            |c| Some(c.r.arbiter[1]),
            Is(1),
            WEIGHT,
        ),
        Envelope::new(
            RdmaWeight::N_WEIGHT,
            |c| Some(c.r.arbiter[2]),
            Is(1),
            WEIGHT,
        ),
        Envelope::new(
            RdmaWeight::E_WEIGHT,
            |c| Some(c.r.arbiter[3]),
            Is(1),
            WEIGHT,
        ),
    ]
};

/// The fp32 pipeline as the dequantisation task of the public program
/// happyme531/rknpu2_matmul_open writes it (commit 601269cfb7f5aa2c0d7fa96314e87ffdef996744,
/// `middle_body(gate = false)` in `src/rk_npu_moe_regs.h`, run per row by
/// `src/rk_npu_i8_dpu_chain.cpp` and checked on boards by `tests/test_i8_dpu_chain.cpp`):
/// a DPU-only task over one pixel of at most 1024 channels (multiples of 32), BS
/// multiplying by an fp16 register operand (BS_CFG 0x42), BN bypassed (0x53), EW
/// multiplying by a 32-bit ERDMA operand per channel (EW_CFG 0x10C0_03C4, ERDMA_CFG
/// 0x4000_000C, EW_SURF_STRIDE 16 bytes), output fp32 with DST_SURF_STRIDE = SURFACE_ADD =
/// 16 bytes, BS_OW_CFG 2, burst 15, MRDMA SURF_NOTCH up to 127 atoms (128 rows). Any
/// other value of these fields is refused by name ([`DPU`], [`RDMA`]). Returns the BS
/// operand's fp16 bits.
///
/// Generalised, with the same stage values (derived, raising `unvalidated`;
/// docs/hardware/dpu-ops.md#dequantisation-over-a-cube): a whole `W × H × C` cube (C a
/// multiple of 4) with the EW operand one value per channel (`ERDMA_DATA_MODE` 0), and an
/// fp16 output through `FP32TOFP16_EN`.
pub(super) fn fp32_dequant(
    t: &task::Task,
    d: &task::Dpu,
    at: At,
    unvalidated: &mut Vec<String>,
) -> Result<u16, SimError> {
    use dpu::{DataCubeChannel, DataCubeHeight, DataCubeWidth, DataFormat, FeatureModeCfg};
    if d.input != DpuInput::Flying {
        return Err(unsupported(at, FeatureModeCfg::FLYING_MODE, 0, WHY));
    }
    let (w, h, c) = d.cube;
    let shape = published_shape(d);
    if !shape {
        unvalidated.push(format!(
            "{} {}, {} {}, {} {}: fp32 dequantisation over a {w}x{h}x{c} cube; the published task reads one pixel of 32..=1024 channels in steps of 32 (docs/hardware/dpu-ops.md#dequantisation-over-a-cube)",
            DataCubeWidth::WIDTH,
            w - 1,
            DataCubeHeight::HEIGHT,
            h - 1,
            DataCubeChannel::CHANNEL,
            c - 1
        ));
    }
    match d.out.precision {
        Precision::Fp32 => {}
        Precision::Fp16 if d.out_cvt.fp32_to_fp16 => unvalidated.push(format!(
            "{} 1: fp16 output of the fp32 dequantisation is derived from the fp16 pipelines' use of the same converter (docs/hardware/dpu-ops.md#dequantisation-over-a-cube)",
            dpu::OutCvtScale::FP32TOFP16_EN
        )),
        p => {
            return Err(unsupported(
                at,
                DataFormat::OUT_PRECISION,
                p.code(),
                format!(
                    "fp32 processing writes fp32, or fp16 with {} 1",
                    dpu::OutCvtScale::FP32TOFP16_EN
                ),
            ));
        }
    }
    check(at, d, DPU)?;
    // DPU_RDMA (absent: the task stalls before anything is read).
    if let Some(r) = t.dpu_rdma {
        check(at, &Rdma { r, shape }, RDMA)?;
    }
    // `DPU` refused a BS stage without its multiplier.
    Ok(d.bs.mul.map_or(0, |m| m.fp16_bits()))
}
