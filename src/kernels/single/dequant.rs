//! The DPU-only dequantisation task: one row of a quantised matmul's fp32 results scaled
//! by a per-row and a per-channel factor, `y[n] = (x[n] · row_scale) · w_scale[n]`.
//!
//! The register values are those of the public program happyme531/rknpu2_matmul_open
//! (commit 601269cfb7f5aa2c0d7fa96314e87ffdef996744): `middle_body` with `gate = false`
//! in `src/rk_npu_moe_regs.h`, called once per row and 1024-channel chunk by
//! `I8DpuChain::prepare` in `src/rk_npu_i8_dpu_chain.cpp` and checked on boards by
//! `tests/test_i8_dpu_chain.cpp` against `(float(acc) · fp16(row_scale)) · fp16(w_scale)`
//! (docs/simulator.md, "Dequantisation task").
//!
//! The task processes fp32 throughout (`DATA_FORMAT` 0xB400_0005): its input is the
//! matmul result already converted to fp32 by the task that produced it — the matmul
//! itself with an fp32 output type, or, for split-K, the last add task — and read one
//! pixel at a time from the native `[channels/4][rows][4]` layout.

use crate::error::{Error, Result};
use crate::float::{f16_to_f32, f32_to_f16};
use crate::regcmd::DmaAddr;
use crate::task::{Dpu, DpuRdma, Erdma, Ew, EwOp, Mrdma, Mul, Output, Precision, Stage, Task};

/// Channels one dequantisation task covers at most (the public program's guard).
pub const DEQUANT_MAX_CHANNELS: u32 = 1024;

/// The channel granule of a dequantisation task (the public program's guard: multiples of 32).
pub const DEQUANT_CHANNEL_STEP: u32 = 32;

/// Rows of the matmul result cube a dequantisation task can index (the public program's guard).
pub const DEQUANT_MAX_ROWS: u32 = 128;

/// Bytes per channel in the coefficient buffer of [`pack_dequant_coefficients`].
pub const DEQUANT_COEFFICIENT_BYTES: usize = 4;

/// The fp16 bits of a scale factor, or the typed error for one that fp16 cannot carry:
/// not finite, rounding to infinity, or a non-zero value rounding to zero. (Sub-normal fp16
/// values are kept: the public program accepts them and its board test uses 2⁻²⁴.)
pub fn dequant_scale_bits(what: &'static str, index: usize, scale: f32) -> Result<u16> {
    let bits = f32_to_f16(scale);
    let back = f16_to_f32(bits);
    if !scale.is_finite() || !back.is_finite() || (scale != 0.0 && back == 0.0) {
        return Err(Error::OutOfRange {
            what,
            index,
            value: format!("{scale:e}"),
            range: "finite and representable in fp16 (|x| < 65520, non-zero values not rounding to 0)",
        });
    }
    Ok(bits)
}

/// The per-channel coefficient buffer of the dequantisation task: one little-endian
/// `u32` per channel holding the fp16 bits of `scales[n]` in its low half (high half 0),
/// padded with zero entries to a multiple of 32 channels so that a task over the last
/// chunk stays inside the buffer. Errors name the first scale fp16 cannot carry.
///
/// The layout is the public program's (`I8DpuChain::run`, happyme531/rknpu2_matmul_open
/// `src/rk_npu_i8_dpu_chain.cpp`); that the EW multiplier takes the low half as its fp16
/// operand is this project's reading of it (docs/simulator.md, "Dequantisation task").
pub fn pack_dequant_coefficients(scales: &[f32]) -> Result<Vec<u8>> {
    let padded =
        scales.len().div_ceil(DEQUANT_CHANNEL_STEP as usize) * DEQUANT_CHANNEL_STEP as usize;
    let mut out = vec![0u8; padded * DEQUANT_COEFFICIENT_BYTES];
    for (n, &s) in scales.iter().enumerate() {
        let bits = u32::from(dequant_scale_bits("dequant channel scale", n, s)?);
        out[n * 4..n * 4 + 4].copy_from_slice(&bits.to_le_bytes());
    }
    Ok(out)
}

/// The split-K add task `add` (from [`super::add_task`]) writing its int32 sum as fp32:
/// the last add of a K-split matmul whose rows go on to the dequantisation task. Only
/// the output precision differs (DPU `DATA_FORMAT` (5 << 29) | (4 << 26) | 4: int32 in
/// and processing, fp32 out), as in `add_body(.., fp32 = true)` of
/// happyme531/rknpu2_matmul_open `src/rk_npu_i8_dpu_chain.cpp` (commit
/// 601269cfb7f5aa2c0d7fa96314e87ffdef996744). The conversion rounds to nearest even
/// (docs/simulator.md, "Arithmetic").
pub fn add_to_fp32_task(mut add: Task) -> Task {
    if let Some(d) = add.dpu.as_mut() {
        d.out.precision = Precision::Fp32;
    }
    add
}

fn offset(a: DmaAddr, by: u32) -> Result<DmaAddr> {
    a.checked_offset(by.into())
        .ok_or_else(|| Error::Unsupported {
            what: "dequant task",
            why: format!("address {a:?} + {by} overflows 32 bits"),
        })
}

/// The dequantisation task for pixel `row` of an fp32 cube laid out
/// `[channels/4][rows][4]` at `acc` (the native layout of a matmul result with `rows`
/// rows, starting at the task's first channel):
/// `out[n] = (acc[n/4][row][n%4] · fp16(row_scale)) · w[n]` for `n < channels`, in fp32,
/// where `w[n]` is the fp16 value in the low half of the `u32` at `coeffs + 4n`
/// ([`pack_dequant_coefficients`]; pass the coefficient buffer offset by 4 × the first
/// channel). `out` receives `channels` contiguous fp32 values (one row of a row-major
/// result).
///
/// Envelope (the guards of the public program, `middle_body` in happyme531/rknpu2_matmul_open
/// `src/rk_npu_moe_regs.h`): `rows` 1..=128, `row < rows`, `channels` 32..=1024 in steps
/// of 32, `row_scale` representable in fp16 ([`dequant_scale_bits`]). Errors are
/// `Error::Unsupported` for the geometry and `Error::OutOfRange` for the scale.
///
/// Register values (DPU / DPU_RDMA offsets): `0x400C` FEATURE_MODE_CFG 0x1E5 (flying,
/// burst 15), `0x4010` DATA_FORMAT 0xB400_0005 (fp32 in, process, out), `0x4024`
/// DST_SURF_STRIDE 16 bytes, cube 1 × 1 × channels, `0x4040` BS_CFG 0x42 (multiplier on,
/// ALU and ReLU bypassed), `0x4048` BS_MUL_CFG fp16(row_scale) << 16, `0x4050` BS_OW_CFG 2,
/// `0x4060` BN_CFG 0x53 (bypassed), `0x4070` EW_CFG 0x10C0_03C4 (multiply, operand from
/// ERDMA, 32-bit elements, converter and ReLU bypassed), `0x4078` EW_CVT_SCALE 1,
/// `0x4084` OUT_CVT_SCALE 1, `0x40C0` SURFACE_ADD 16 bytes, `0x5034` ERDMA_CFG
/// 0x4000_000C, `0x5040` EW_SURF_STRIDE 16 bytes, `0x5044` FEATURE_MODE_CFG 0x2_F8A1
/// (flying, fp32, burst 15), `0x504C` SURF_NOTCH (rows − 1) × 16 bytes, `0x5068` weights
/// 0x0101_0101; every other register of both blocks 0. [`Task::body`] gives the register
/// list (op-enable `BlockMask::ELEMENTWISE`).
pub fn dequant_task(
    rows: u32,
    row: u32,
    channels: u32,
    row_scale: f32,
    acc: DmaAddr,
    coeffs: DmaAddr,
    out: DmaAddr,
) -> Result<Task> {
    if rows == 0
        || rows > DEQUANT_MAX_ROWS
        || row >= rows
        || channels == 0
        || channels > DEQUANT_MAX_CHANNELS
        || !channels.is_multiple_of(DEQUANT_CHANNEL_STEP)
    {
        return Err(Error::Unsupported {
            what: "dequant task",
            why: format!(
                "row {row} of {rows} rows x {channels} channels; the task covers 1..={DEQUANT_MAX_ROWS} rows, a row below that count, and {DEQUANT_CHANNEL_STEP}..={DEQUANT_MAX_CHANNELS} channels in steps of {DEQUANT_CHANNEL_STEP}"
            ),
        });
    }
    let bits = dequant_scale_bits("dequant row scale", row as usize, row_scale)?;
    // One pixel per surface: the next surface of `acc` is `rows` atoms further on.
    let cube = (1, 1, channels);
    let out = Output::at(out, Precision::Fp32, 1, 0);
    let dpu = Dpu {
        bs: Stage {
            bypass: false,
            alu: None,
            mul: Some(Mul::fp16(bits)),
            relu: false,
            relux: None,
        },
        ew: Some(Ew::from_memory(EwOp::Mul(0, 0), 3)),
        ..Dpu::flying(cube, Precision::Fp32, out)
    };
    let read = Mrdma::at(offset(acc, row * 16)?, 0, rows - 1);
    let dpu_rdma = DpuRdma {
        erdma: Some(Erdma {
            addr: coeffs,
            data_size: 3,
            data_mode: 1,
            surf_stride: 1,
            line_notch: 0,
            surf_notch: 0,
        }),
        ..DpuRdma::flying(cube, Precision::Fp32, read)
    };
    Ok(Task::dpu_only(dpu, dpu_rdma))
}
