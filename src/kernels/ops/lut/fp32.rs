//! The fp32-pipeline SiLU of a published program: its recipe and its tasks.

use super::{LutRecipe, lut_task, plus, sigmoid, tiles};
use crate::error::{Error, Result};
use crate::float::f32_to_f16;
use crate::kernels::ops::Cube;
use crate::regcmd::DmaAddr;
use crate::task::{Lut, LutSlope, LutTables, OutCvt, Precision, Task};

/// Multiplier of the fp32 SiLU's output code: the task writes `4096 · SiLU(x)`.
pub const FP32_SILU_CARRIER: f32 = 4096.0;

/// The recipe of the fp32-pipeline SiLU of `happyme531/rknpu2_matmul_open`
/// (`middle_lut_load`, `src/rk_npu_moe_regs.h`): index scale 4096 (`BN_MUL` 0x6C00),
/// index select 6 on ±32768 (inputs ±8), `T[i] = round(4096 · SiLU(x))` with
/// `x = (i − 512)/64` (LE) and `i/64` (LO), the LO overflow slope 8192/2^13 (`y = x`
/// beyond 8), and the raw code written as fp32: the output is `4096 · SiLU(x)`
/// ([`FP32_SILU_CARRIER`]).
pub fn fp32_silu_recipe() -> LutRecipe {
    let mut lut = Lut::hybrid(6).expect("select 6 fits");
    lut.lo.slope = LutSlope {
        oflow_scale: 8192,
        oflow_shift: 13,
        ..LutSlope::default()
    };
    let code = |x: f64| (x * sigmoid(x) * 4096.0).round().clamp(-32768.0, 32767.0) as i16;
    let tables = LutTables {
        le: std::array::from_fn(|i| code((i as f64 - 512.0) / 64.0)),
        lo: std::array::from_fn(|i| code(i as f64 / 64.0)),
    };
    LutRecipe {
        tables,
        lut,
        bn_mul: f32_to_f16(4096.0),
        bn_alu: 0x8000_0000,
        out_cvt: OutCvt::IDENTITY,
    }
}

/// The fp32-pipeline SiLU over an fp32 `cube` (fp32 in, processing and out): one flying
/// task per tile of at most 4096 atoms a line, the first uploading the tables when
/// `upload` is set. The output is the carrier `4096 · SiLU(x)` of the published program;
/// divide by [`FP32_SILU_CARRIER`] (a following EW multiply, or the host).
pub fn fp32_silu_tasks(
    cube: &Cube,
    input: DmaAddr,
    output: DmaAddr,
    upload: bool,
) -> Result<Vec<Task>> {
    if cube.precision != Precision::Fp32 {
        return Err(Error::Unsupported {
            what: "fp32 SiLU",
            why: format!(
                "{}: the published program reads and writes fp32",
                cube.precision
            ),
        });
    }
    let r = fp32_silu_recipe();
    let mut out = Vec::new();
    for (i, t) in tiles(cube.bytes() / 16)?.iter().enumerate() {
        let mut task = lut_task(
            &r,
            t.w,
            t.h,
            plus(input, t.offset)?,
            plus(output, t.offset)?,
            upload && i == 0,
        );
        retype(&mut task, Precision::Fp32);
        out.push(task);
    }
    Ok(out)
}

/// Makes a LUT task of [`lut_task`] an fp32 one: four lanes an atom, fp32 in, processing
/// and out, no fp16 narrowing.
fn retype(task: &mut Task, p: Precision) {
    if let Some(d) = task.dpu.as_mut() {
        d.precision = p;
        d.out.precision = p;
        d.cube.2 = 16 / p.bytes();
        d.orig_channels = d.cube.2;
        d.out_cvt.fp32_to_fp16 = false;
    }
    if let Some(r) = task.dpu_rdma.as_mut() {
        r.precision = p;
        r.fp16_to_fp32 = false;
        r.cube.2 = 16 / p.bytes();
    }
}
