//! The flying DPU tasks of an activation: the LUT task of a recipe and the element-wise
//! tasks of the ALU and multiply passes.

use super::{LutRecipe, Tile};
use crate::regcmd::DmaAddr;
use crate::task::{
    Alu, AluOp, Dpu, DpuRdma, Erdma, Ew, EwOp, EwSrc, Mrdma, Mul, OpCvt, OutCvt, Output, Precision,
    Stage, Task,
};

/// The flying fp16 DPU task over one tile: MRDMA reads `input`, the write DMA stores
/// `output`; `erdma` is the EW operand's address, if any.
fn flying(
    t: Tile,
    input: DmaAddr,
    output: DmaAddr,
    erdma: Option<DmaAddr>,
    bn: Stage,
    ew: Ew,
    out_cvt: OutCvt,
) -> Task {
    let cube = (t.w, t.h, 8);
    let surf = t.w * t.h; // 16-byte units: one surface
    let dpu = Dpu {
        bn,
        ew: Some(ew),
        out_cvt,
        ..Dpu::flying(
            cube,
            Precision::Fp16,
            Output::at(output, Precision::Fp16, surf, 0),
        )
    };
    let dpu_rdma = DpuRdma {
        // MRDMA_FP16TOFP32_EN, as every board-run fp16 LUT program (FEATURE_MODE_CFG
        // 0x17849).
        fp16_to_fp32: true,
        erdma: erdma.map(|addr| Erdma {
            addr,
            data_size: 2,
            data_mode: 1,
            surf_stride: surf,
            line_notch: 0,
            surf_notch: 0,
        }),
        ..DpuRdma::flying(cube, Precision::Fp16, Mrdma::at(input, 0, 0))
    };
    Task::dpu_only(dpu, dpu_rdma)
}

/// The LUT task of `recipe` over a one-surface fp16 cube of `w × h` atoms (8 lanes),
/// uploading the tables first when `upload` is set: BN multiplies by the index scale and
/// adds the bias (BN_CFG 0x20040), the EW stage holds only the LUT (EW_CFG 0x302), the
/// output converter decodes the code to fp16.
pub fn lut_task(
    recipe: &LutRecipe,
    w: u32,
    h: u32,
    input: DmaAddr,
    output: DmaAddr,
    upload: bool,
) -> Task {
    let mut lut = recipe.lut;
    if upload {
        lut = lut.with_upload(recipe.tables);
    }
    let bn = Stage {
        bypass: false,
        alu: Some(Alu {
            op: AluOp::Add,
            operand: recipe.bn_alu as i32,
            from_memory: false,
        }),
        mul: Some(Mul::fp16(recipe.bn_mul)),
        relu: false,
        relux: None,
    };
    let ew = Ew {
        op: None,
        src: EwSrc::Register,
        cvt: None,
        relu: false,
        relux: None,
        data_size: 0,
        data_mode: 0,
        values: [0; 8],
        lut: Some(lut),
    };
    flying(
        Tile { w, h, offset: 0 },
        input,
        output,
        None,
        bn,
        ew,
        recipe.out_cvt,
    )
}

/// The flying fp16 EW task `out = bn(a) <op> b` over one tile (EW_CFG 0x108002C0 max,
/// 0x108102C0 min, 0x108003C4 multiply; ERDMA_CFG 0x40000008).
pub(super) fn ew_task(op: EwOp, t: Tile, a: DmaAddr, b: DmaAddr, out: DmaAddr, bn: Stage) -> Task {
    let cvt = match op {
        // ALU operations keep the operand converter on with the identity (bypassed, an
        // fp16 add drops its operand on boards); the multiply bypasses it.
        EwOp::Alu(_) => Some(OpCvt::IDENTITY),
        EwOp::Mul(..) => None,
    };
    let ew = Ew {
        op: Some(op),
        src: EwSrc::Memory,
        cvt,
        relu: false,
        relux: None,
        data_size: 2,
        data_mode: 1,
        values: [0; 8],
        lut: None,
    };
    let mut cvt_out = OutCvt::IDENTITY;
    cvt_out.fp32_to_fp16 = true;
    flying(t, a, out, Some(b), bn, ew, cvt_out)
}
