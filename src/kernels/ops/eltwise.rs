//! Element-wise operations of two tensors: add, sub, mul, max and min of a tensor A and a
//! tensor B of the same [`Cube`] shape, or of A and a per-channel operand (one value per
//! channel, broadcast over every pixel), for int8, int16 and fp16 (docs/ops.md,
//! "Element-wise").
//!
//! Each task is a DPU-only "flying" task (op-enable `BlockMask::ELEMENTWISE`, 0x18):
//! DPU_RDMA's MRDMA reads A, its ERDMA reads B, the DPU's EW stage computes and the write
//! DMA stores the result in A's layout. The fp16 values are those of the vendor's
//! board-recorded fp16 add (capture `allbilly-rk3588/rknn-add-gemdump`, task 02, public in
//! allbilly/rk3588) with the EW word of each operation from the board-tested programs of
//! gregordinary/rockchip-npu-notes and allbilly/rk3588
//! (docs/hardware/dpu-ops.md#flying-ew). The int8 and int16 arithmetic and the
//! per-channel operand over more than one pixel are **derived**
//! (docs/hardware/dpu-ops.md#integer-ew, #per-channel-operand); the simulator runs them
//! and raises the `unvalidated` lint.
//!
//! A cube wider than [`MAX_TASK_WIDTH`] columns becomes one task per column band
//! (docs/hardware/dpu-ops.md#limits).
//!
//! ```
//! use rknpu_driver::device::Device;
//! use rknpu_driver::compute::ops::run_op;
//! use rknpu_driver::kernels::ops::contract::{Role, Values};
//! use rknpu_driver::kernels::ops::{Cube, eltwise};
//! use rknpu_driver::task::Precision;
//!
//! let dev = Device::open_spec("emu")?;
//! let cube = Cube::new(4, 2, 8, Precision::Fp16)?;
//! let op = eltwise::Eltwise::new(eltwise::EltwiseOp::Add, cube, eltwise::Operand::Tensor)?;
//! // The tensors by role, as row-major [h][w][c] values; one job on the device.
//! let a: Vec<f64> = (0..64).map(f64::from).collect();
//! let inputs = Values::from([(Role::Input, a), (Role::Operand, vec![0.5; 64])]);
//! let sum = run_op(&dev, &op, &inputs)?;
//! assert_eq!(sum[3], 3.5);
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

use super::Cube;
use crate::error::{Error, Result};
use crate::regcmd::DmaAddr;
use crate::task::{
    AluOp, Dpu, DpuRdma, EW_PER_CHANNEL, EW_PER_PIXEL, Erdma, Ew, EwOp, Mrdma, OpCvt, OutCvt,
    Output, Precision, Task,
};
use half::f16;

/// Columns (pixels per line) one element-wise task covers at most: wider cubes are split
/// into column bands. The cube registers hold 8192, but a width of 8191 corrupts data on
/// boards and 4096 is the measured safe bound (gregordinary/rockchip-npu-notes
/// `encodings/dpu-lut-activation.md`, "QUIRK 3").
pub const MAX_TASK_WIDTH: u32 = 4096;

/// An element-wise operation `out = A ∘ B`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EltwiseOp {
    /// `A + B`.
    Add,
    /// `A − B`.
    Sub,
    /// `A × B`.
    Mul,
    /// `max(A, B)`.
    Max,
    /// `min(A, B)`.
    Min,
}

impl EltwiseOp {
    /// Every operation.
    pub const ALL: [EltwiseOp; 5] = [
        EltwiseOp::Add,
        EltwiseOp::Sub,
        EltwiseOp::Mul,
        EltwiseOp::Max,
        EltwiseOp::Min,
    ];

    /// The operation's name (`add`, `sub`, `mul`, `max`, `min`).
    pub const fn name(self) -> &'static str {
        match self {
            EltwiseOp::Add => "add",
            EltwiseOp::Sub => "sub",
            EltwiseOp::Mul => "mul",
            EltwiseOp::Max => "max",
            EltwiseOp::Min => "min",
        }
    }

    /// The EW stage's operation.
    const fn ew_op(self) -> EwOp {
        match self {
            EltwiseOp::Add => EwOp::Alu(AluOp::Add),
            EltwiseOp::Sub => EwOp::Alu(AluOp::Minus),
            EltwiseOp::Max => EwOp::Alu(AluOp::Max),
            EltwiseOp::Min => EwOp::Alu(AluOp::Min),
            EltwiseOp::Mul => EwOp::Mul(0, 0),
        }
    }
}

/// The shape of the second operand B.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operand {
    /// A tensor of A's shape, one value per element.
    Tensor,
    /// One value per channel, the same for every pixel: stored as a `1 × 1 × channels`
    /// cube ([`Eltwise::operand_cube`]).
    PerChannel,
}

/// An element-wise operation over one cube.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Eltwise {
    /// The operation.
    pub op: EltwiseOp,
    /// A's (and the output's) geometry and element type.
    pub cube: Cube,
    /// B's shape.
    pub operand: Operand,
}

/// The 16-byte-unit field widths the tasks' strides and notches must fit.
const NOTCH_MAX: u32 = (1 << 13) - 1;

impl Eltwise {
    /// The operation, refused (`Error::Unsupported`) for element types other than int8,
    /// int16 and fp16.
    pub fn new(op: EltwiseOp, cube: Cube, operand: Operand) -> Result<Eltwise> {
        if !matches!(
            cube.precision,
            Precision::Int8 | Precision::Int16 | Precision::Fp16
        ) {
            return Err(Error::Unsupported {
                what: "element-wise operation",
                why: format!(
                    "{} tensors; the element-wise tasks take int8, int16 and fp16",
                    cube.precision
                ),
            });
        }
        Ok(Eltwise { op, cube, operand })
    }

    /// The geometry of B: A's cube, or `1 × 1 × channels` for a per-channel operand.
    pub fn operand_cube(&self) -> Cube {
        match self.operand {
            Operand::Tensor => self.cube,
            Operand::PerChannel => Cube {
                width: 1,
                height: 1,
                ..self.cube
            },
        }
    }

    /// The tasks: one per band of at most [`MAX_TASK_WIDTH`] columns, reading A at `a`,
    /// B at `b` (laid out as [`Eltwise::operand_cube`]) and writing the result in A's
    /// layout at `out`. The channels are processed up to whole atoms: the padding lanes
    /// of the output are computed from the padding lanes of A and B (zeros when packed by
    /// [`Cube::pack`]).
    pub(crate) fn tasks_at(&self, a: DmaAddr, b: DmaAddr, out: DmaAddr) -> Result<Vec<Task>> {
        let c = self.cube;
        let mut tasks = Vec::new();
        let mut x0 = 0;
        while x0 < c.width {
            let wt = (c.width - x0).min(MAX_TASK_WIDTH);
            tasks.push(self.band(x0, wt, a, b, out)?);
            x0 += wt;
        }
        Ok(tasks)
    }

    /// The task over columns `x0 .. x0 + wt`.
    fn band(&self, x0: u32, wt: u32, a: DmaAddr, b: DmaAddr, out: DmaAddr) -> Result<Task> {
        let c = self.cube;
        let p = c.precision;
        let surface = u32::try_from(c.pixels()).map_err(|_| too_big(c))?;
        let notch = c.width - wt;
        if notch > NOTCH_MAX {
            return Err(too_big(c));
        }
        let shift = x0 * 16;
        let cube = (wt, c.height, c.padded_channels());
        let per_channel = self.operand == Operand::PerChannel;
        let data_size = match p {
            Precision::Int8 => 1,
            _ => 2,
        };
        let data_mode = if per_channel {
            EW_PER_CHANNEL
        } else {
            EW_PER_PIXEL
        };
        // The vendor and peer words keep the operand converter on (identity) for the ALU
        // operations and bypass it for the multiply.
        let cvt = (self.op != EltwiseOp::Mul).then_some(OpCvt::IDENTITY);
        let out = Output::at(offset(out, shift)?, p, surface, notch);
        let dpu = Dpu {
            ew: Some(Ew {
                cvt,
                data_mode,
                ..Ew::from_memory(self.op.ew_op(), data_size)
            }),
            out_cvt: OutCvt {
                fp32_to_fp16: p == Precision::Fp16,
                ..OutCvt::IDENTITY
            },
            ..Dpu::flying(cube, p, out)
        };
        let erdma = if per_channel {
            Erdma {
                addr: b,
                data_size,
                data_mode,
                surf_stride: 1,
                line_notch: 0,
                surf_notch: 0,
            }
        } else {
            Erdma {
                addr: offset(b, shift)?,
                data_size,
                data_mode,
                surf_stride: surface,
                line_notch: notch,
                surf_notch: 0,
            }
        };
        let read = Mrdma::at(offset(a, shift)?, notch, 0);
        let dpu_rdma = DpuRdma {
            erdma: Some(erdma),
            fp16_to_fp32: p == Precision::Fp16,
            ..DpuRdma::flying(cube, p, read)
        };
        Ok(Task::dpu_only(dpu, dpu_rdma))
    }
}

fn too_big(c: Cube) -> Error {
    Error::Unsupported {
        what: "element-wise operation",
        why: format!(
            "a {}x{} cube: its surface stride or line notch does not fit the 16-byte-unit fields",
            c.width, c.height
        ),
    }
}

/// `a` moved on by `by` bytes.
pub(crate) fn offset(a: DmaAddr, by: u32) -> Result<DmaAddr> {
    a.checked_offset(by.into())
        .ok_or_else(|| Error::Unsupported {
            what: "element-wise operation",
            why: format!("address {a:?} + {by} overflows 32 bits"),
        })
}

/// An element type of the element-wise operations, with the arithmetic the NPU applies
/// (docs/ops.md, "Element-wise").
pub trait EwElement: Copy {
    /// The operation on one pair: integers in 64 bits, saturated to the type; fp16 in
    /// fp32, rounded to nearest even on the way back to fp16.
    fn apply(op: EltwiseOp, a: Self, b: Self) -> Self;
}

fn int_op(op: EltwiseOp, a: i64, b: i64) -> i64 {
    match op {
        EltwiseOp::Add => a + b,
        EltwiseOp::Sub => a - b,
        EltwiseOp::Mul => a * b,
        EltwiseOp::Max => a.max(b),
        EltwiseOp::Min => a.min(b),
    }
}

impl EwElement for i8 {
    fn apply(op: EltwiseOp, a: i8, b: i8) -> i8 {
        int_op(op, a.into(), b.into()).clamp(i8::MIN.into(), i8::MAX.into()) as i8
    }
}

impl EwElement for i16 {
    fn apply(op: EltwiseOp, a: i16, b: i16) -> i16 {
        int_op(op, a.into(), b.into()).clamp(i16::MIN.into(), i16::MAX.into()) as i16
    }
}

impl EwElement for f16 {
    fn apply(op: EltwiseOp, a: f16, b: f16) -> f16 {
        let (x, y) = (a.to_f32(), b.to_f32());
        f16::from_f32(match op {
            EltwiseOp::Add => x + y,
            EltwiseOp::Sub => x - y,
            EltwiseOp::Mul => x * y,
            EltwiseOp::Max => x.max(y),
            EltwiseOp::Min => x.min(y),
        })
    }
}

/// The CPU definition of the operation on row-major `[height][width][channels]` data:
/// `out[i] = a[i] ∘ b[i]` for a tensor operand, `out[p][c] = a[p][c] ∘ b[c]` for a
/// per-channel one. `a` must hold a multiple of `channels` values and `b` as many as
/// `a` (tensor) or `channels` (per channel); anything else is `Error::InvalidArgument`.
pub fn reference<T: EwElement>(
    op: EltwiseOp,
    operand: Operand,
    channels: usize,
    a: &[T],
    b: &[T],
) -> Result<Vec<T>> {
    let want = match operand {
        Operand::Tensor => a.len(),
        Operand::PerChannel => channels,
    };
    if channels == 0 || !a.len().is_multiple_of(channels) || b.len() != want {
        return Err(Error::InvalidArgument {
            what: format!(
                "{} values of A and {} of B for {channels} channels ({operand:?} operand)",
                a.len(),
                b.len()
            ),
        });
    }
    let mut out = Vec::with_capacity(a.len());
    for (i, &x) in a.iter().enumerate() {
        let y = match operand {
            Operand::Tensor => b[i],
            Operand::PerChannel => b[i % channels],
        };
        out.push(T::apply(op, x, y));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_matches_hand_computed_values() {
        let a = [100i8, -100, 7, -128];
        let b = [100i8, 100, -3, 1];
        let r = |op| reference(op, Operand::Tensor, 2, &a, &b).unwrap();
        assert_eq!(r(EltwiseOp::Add), [127, 0, 4, -127]);
        assert_eq!(r(EltwiseOp::Sub), [0, -128, 10, -128]);
        assert_eq!(r(EltwiseOp::Mul), [127, -128, -21, -128]);
        assert_eq!(r(EltwiseOp::Max), [100, 100, 7, 1]);
        assert_eq!(r(EltwiseOp::Min), [100, -100, -3, -128]);
        let pc = reference(EltwiseOp::Add, Operand::PerChannel, 2, &a, &[1, 2]).unwrap();
        assert_eq!(pc, [101, -98, 8, -126]);
        let h = |x: f32| f16::from_f32(x);
        // 2048 + 1 is a tie in fp16 (spacing 2 above 2048): even is 2048.
        let s = reference(
            EltwiseOp::Add,
            Operand::Tensor,
            1,
            &[h(2048.0), h(2050.0)],
            &[h(1.0), h(1.0)],
        )
        .unwrap();
        assert_eq!(s, [h(2048.0), h(2052.0)]);
        assert!(reference(EltwiseOp::Add, Operand::PerChannel, 3, &a, &[1, 2, 3]).is_err());
    }

    #[test]
    fn wide_cubes_become_column_bands() {
        let cube = Cube::new(MAX_TASK_WIDTH + 10, 2, 8, Precision::Fp16).unwrap();
        let op = Eltwise::new(EltwiseOp::Add, cube, Operand::Tensor).unwrap();
        let t = op
            .tasks_at(
                DmaAddr::Fixed(0x1000),
                DmaAddr::Fixed(0x10_0000),
                DmaAddr::Fixed(0x20_0000),
            )
            .unwrap();
        assert_eq!(t.len(), 2);
        let d = t[1].dpu.unwrap();
        assert_eq!(d.cube, (10, 2, 8));
        assert_eq!(d.out.addr, DmaAddr::Fixed(0x20_0000 + MAX_TASK_WIDTH * 16));
        assert_eq!(d.out.notch, MAX_TASK_WIDTH);
        assert!(
            Eltwise::new(
                EltwiseOp::Add,
                cube.with_precision(Precision::Fp32).unwrap(),
                Operand::Tensor
            )
            .is_err()
        );
    }
}
