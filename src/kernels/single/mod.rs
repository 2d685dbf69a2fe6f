//! Single-task matmul programs, `C[M×N] = A[M×K] × B[K×N]`, for every precision the
//! NPU's convolution path takes, with the host-side packers that lay operands out the way
//! the task reads them.
//!
//! One task is one 1×1 convolution (docs/hardware/matmul-programs.md#mapping): the M rows of A are
//! pixels, K is the channel count, the N columns of B are kernels. The register values
//! follow the board-validated matmul programs (docs/hardware/matmul-programs.md#validated-values; the full-body habit of docs/hardware/registers.md#ping-pong: every register of
//! every started block is written, zeros included, so nothing depends on earlier
//! programs). The shape must fit one task: the whole A tile in the CBUF data banks and one
//! kernel group of B in the weight banks (docs/hardware/cbuf.md#weight-groups). Tiling larger shapes across tasks
//! and cores is the planner's job.
//!
//! Layouts (docs/hardware/matmul-programs.md#layouts; `ai` = K padded to 32, `ao` = N padded to 32, or 64 for int4):
//!
//! | operand | [`Layout::Plain`] | [`Layout::Native`] |
//! |---|---|---|
//! | A | row-major `m·ai + k` | `[ai/E][M][E]`, E elements per 16 bytes |
//! | C | row-major `m·ao + n` | `[ao/E][M][E]` |
//!
//! B is always in the weight-atom layout: 1024-byte atoms of 32 input channels × G kernels
//! (G = 32 int8, 64 int4, 16 for 16-bit types), `[ao/G][ai/32][G][32]`. int4 packs two
//! values per byte, the even index in the high nibble (docs/hardware/matmul-programs.md#int4-nibble-order).
//!
//! ```
//! use rknpu_driver::kernels::single::{Dtype, SingleMatmul};
//!
//! let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
//! let program = mm.program()?;
//! assert_eq!(program.tasks().len(), 1);
//! let a = mm.pack_a_int(&vec![1; 4 * 64])?;
//! assert_eq!(a.len(), mm.a_bytes());
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

mod add;
mod dequant;
mod pack;
pub(crate) mod preset;
pub(crate) use pack::{check_float, check_float_bits, not_finite, special_exponent};
mod types;

pub use add::{add_task, add_task_strided};
pub use dequant::{
    DEQUANT_CHANNEL_STEP, DEQUANT_COEFFICIENT_BYTES, DEQUANT_MAX_CHANNELS, DEQUANT_MAX_ROWS,
    add_to_fp32_task, dequant_scale_bits, dequant_task, pack_dequant_coefficients,
};
pub use types::{Dtype, Layout, OutType, PostOps};

use crate::error::{Error, Result};
use crate::kernels::emit::{ConvRead, FeatureRead, Strides, Window};
use crate::regcmd::{BlockMask, BufferId, DmaAddr, Program, ProgramBuilder, TaskBuilder};
use crate::task::{
    self, Alu, AluOp, Dpu, DpuRdma, Erdma, Ew, EwOp, Mul, OpCvt, OutCvt, Output, Precision, Stage,
    Task, Weights,
};
use preset::reads_off;

/// The buffer holding the program.
pub const REGCMD: BufferId = BufferId(0);
/// Activations A.
pub const A: BufferId = BufferId(1);
/// Weights B.
pub const B: BufferId = BufferId(2);
/// Result C.
pub const C: BufferId = BufferId(3);
/// The element-wise operand E (when [`PostOps::add`] is set).
pub const E: BufferId = BufferId(4);

const BANK: u64 = task::cbuf::BANK_BYTES;

/// At most [`task::limits::MAX_DATA_BANKS`] data banks, so that at least
/// [`task::limits::MIN_WEIGHT_BANKS`] weight banks remain.
const MAX_DATA_BANKS: u64 = task::limits::MAX_DATA_BANKS as u64;
/// Every CBUF bank of a core.
const BANKS: u64 = task::cbuf::BANKS as u64;

/// CBUF data banks a task of `rows` rows of `ai` (padded) channels of `dtype` takes: its
/// A tile, at least 1, at most 10 (so that at least 2 weight banks remain).
pub(crate) fn data_banks(rows: u32, ai: u32, dtype: Dtype) -> u32 {
    let data = rows as u64 * ai as u64 * dtype.bits() as u64 / 8;
    data.div_ceil(BANK).clamp(1, MAX_DATA_BANKS) as u32
}

/// One matmul task and its packers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SingleMatmul {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Input type of A and B.
    pub dtype: Dtype,
    /// Output type of C.
    pub out: OutType,
    /// Layout of A.
    pub a_layout: Layout,
    /// Layout of C.
    pub c_layout: Layout,
    /// DPU post-processing.
    pub post: PostOps,
    /// A native A's rows per surface in memory, when the task reads M rows of a taller
    /// cube (its surfaces that many atoms apart); `None`: M, the cube is A itself.
    pub a_cube_rows: Option<u32>,
    /// A native C's rows per surface in memory, when the task writes M rows of a taller
    /// cube; `None`: M.
    pub c_cube_rows: Option<u32>,
}

fn unsupported(why: String) -> Error {
    Error::Unsupported {
        what: "single-task matmul",
        why,
    }
}

impl SingleMatmul {
    /// A plain-layout matmul with the hardware's natural output type and no post-processing.
    pub fn new(m: u32, k: u32, n: u32, dtype: Dtype) -> SingleMatmul {
        SingleMatmul {
            m,
            k,
            n,
            dtype,
            out: dtype.default_out(),
            a_layout: Layout::Plain,
            c_layout: Layout::Plain,
            post: PostOps::default(),
            a_cube_rows: None,
            c_cube_rows: None,
        }
    }

    /// K padded to whole weight atoms (32 channels).
    pub fn padded_k(&self) -> u32 {
        self.k.div_ceil(32) * 32
    }

    /// N padded to 32 (64 for int4).
    pub fn padded_n(&self) -> u32 {
        let align = if self.dtype == Dtype::Int4 { 64 } else { 32 };
        self.n.div_ceil(align) * align
    }

    /// Bytes of packed A (for an A that is its own cube, `a_cube_rows` `None`).
    pub fn a_bytes(&self) -> usize {
        self.m as usize * self.padded_k() as usize * self.dtype.bits() as usize / 8
    }

    /// Bytes of packed B.
    pub fn b_bytes(&self) -> usize {
        self.padded_n() as usize * self.padded_k() as usize * self.dtype.bits() as usize / 8
    }

    /// Bytes of C as the task writes it (also the size of E), for a C that is its own
    /// cube (`c_cube_rows` `None`).
    pub fn c_bytes(&self) -> usize {
        self.m as usize * self.padded_n() as usize * self.out.bytes() as usize
    }

    /// Checks that the shape and options fit one task.
    pub fn check(&self) -> Result<()> {
        let (m, ai, ao) = (
            self.m as u64,
            self.padded_k() as u64,
            self.padded_n() as u64,
        );
        let b = self.dtype.bits() as u64;
        if self.m == 0 || self.k == 0 || self.n == 0 {
            return Err(unsupported(format!(
                "empty shape {}x{}x{}",
                self.m, self.k, self.n
            )));
        }
        if self.m > 2047 {
            return Err(unsupported(format!(
                "M = {} rows; {} (M in the native layout, else {}) holds at most 2047",
                self.m,
                crate::regs::cna::DataSize0::DATAIN_WIDTH,
                crate::regs::cna::DataSize0::DATAIN_HEIGHT,
            )));
        }
        if ao > 8192 {
            return Err(unsupported(format!(
                "N = {} pads to {ao}; {} (channels minus one, 13 bits) holds 8192",
                self.n,
                crate::regs::dpu::DataCubeChannel::CHANNEL,
            )));
        }
        let ok_out = match self.dtype {
            Dtype::Int8 => matches!(self.out, OutType::Int8 | OutType::Int32 | OutType::Fp32),
            Dtype::Int4 => self.out == OutType::Int16,
            Dtype::Int16 => self.out == OutType::Int32,
            Dtype::Fp16 => matches!(self.out, OutType::Fp16 | OutType::Fp32),
            Dtype::Bf16 => matches!(self.out, OutType::Bf16 | OutType::Fp32),
        };
        if !ok_out {
            return Err(unsupported(format!(
                "{:?} output from {:?} input",
                self.out, self.dtype
            )));
        }
        for (name, layout, rows) in [
            ("A", self.a_layout, self.a_cube_rows),
            ("C", self.c_layout, self.c_cube_rows),
        ] {
            match (layout, rows) {
                (Layout::Plain, Some(r)) => {
                    return Err(unsupported(format!(
                        "a plain {name} has no surfaces of {r} rows"
                    )));
                }
                (Layout::Native, Some(r)) if u64::from(r) < m => {
                    return Err(unsupported(format!("{name} is {m} rows of a cube of {r}")));
                }
                _ => {}
            }
        }
        if self.a_layout == Layout::Native && self.c_layout == Layout::Plain {
            return Err(unsupported(
                "a native A (W = M) makes the output one line of M pixels, which cannot be written row-major".into(),
            ));
        }
        let p = &self.post;
        if self.dtype.is_float()
            && (p.bias.is_some() || p.scale.is_some() || p.relu || p.clip.is_some())
        {
            return Err(unsupported(
                "bias, scale, ReLU and clip are built for integer inputs only".into(),
            ));
        }
        if p.out_cvt.is_some() && self.out.is_float() {
            return Err(unsupported(
                "the output converter is built for integer outputs only".into(),
            ));
        }
        if let Some((_, shift)) = p.scale
            && shift > 63
        {
            return Err(unsupported(format!(
                "scale shift {shift} does not fit 6 bits"
            )));
        }
        let data = m * ai * b / 8;
        if data > MAX_DATA_BANKS * BANK {
            return Err(unsupported(format!(
                "A is {data} bytes; one task holds at most {MAX_DATA_BANKS} CBUF data banks ({} bytes), keeping {} for weights",
                MAX_DATA_BANKS * BANK,
                task::limits::MIN_WEIGHT_BANKS
            )));
        }
        let db = data.div_ceil(BANK).clamp(1, MAX_DATA_BANKS);
        let group = (self.dtype.kernels_per_atom().max(32) as u64).min(ao);
        let weights = group * ai * b / 8;
        if weights > (BANKS - db) * BANK {
            return Err(unsupported(format!(
                "one group of {group} kernels is {weights} bytes but only {} weight banks remain",
                BANKS - db
            )));
        }
        Ok(())
    }

    /// CBUF data banks: the A tile, at least 1, at most 10 (at least 2 weight banks remain,
    /// docs/hardware/matmul-programs.md#validated-values).
    fn data_banks(&self) -> u32 {
        data_banks(self.m, self.padded_k(), self.dtype)
    }

    /// The task model with DMA addresses relocated to [`A`], [`B`], [`C`] and [`E`].
    pub fn task(&self) -> Result<Task> {
        self.task_at(
            DmaAddr::reloc(A, 0),
            DmaAddr::reloc(B, 0),
            DmaAddr::reloc(C, 0),
            DmaAddr::reloc(E, 0),
        )
    }

    /// The task body with DMA addresses relocated to [`A`], [`B`], [`C`] and [`E`].
    pub fn body(&self) -> Result<TaskBuilder> {
        self.body_at(
            DmaAddr::reloc(A, 0),
            DmaAddr::reloc(B, 0),
            DmaAddr::reloc(C, 0),
            DmaAddr::reloc(E, 0),
        )
    }

    /// The task body reading A, B (and E) and writing C at the given addresses, so that a
    /// caller can chain several tasks over slices of larger buffers (M tiles, K waves).
    pub fn body_at(&self, a: DmaAddr, b: DmaAddr, c: DmaAddr, e: DmaAddr) -> Result<TaskBuilder> {
        self.task_at(a, b, c, e)?.body()
    }

    /// The task model reading A, B (and E) and writing C at the given addresses
    /// (the board-validated matmul programs, with the values every one of them uses:
    /// docs/hardware/matmul-programs.md#validated-values).
    pub fn task_at(&self, a: DmaAddr, b: DmaAddr, c: DmaAddr, e: DmaAddr) -> Result<Task> {
        self.check()?;
        let (cna, core) = self.conv_read(a, b).emit()?;
        Ok(Task {
            cna: Some(cna),
            core: Some(core),
            dpu: Some(self.dpu_task(c)),
            dpu_rdma: self.rdma_task(e),
            ppu: None,
            ppu_rdma: None,
        })
    }

    /// Width and height of the feature cube: `(1, M)` for a plain A, `(M, 1)` for a
    /// native one.
    fn feature_dims(&self) -> (u32, u32) {
        match self.a_layout {
            Layout::Native => (self.m, 1),
            Layout::Plain => (1, self.m),
        }
    }

    /// C's surface stride (16-byte units) and line notch (atoms).
    fn c_surfaces(&self) -> (u32, u32) {
        match self.c_layout {
            Layout::Plain => (1, self.padded_n() / self.out.atom_elems() - 1),
            Layout::Native => (self.c_cube_rows.unwrap_or(self.m), 0),
        }
    }

    /// What the CNA reads: A as a feature cube of M pixels (one line of M for a native
    /// A, M lines of one pixel for a plain one), B as N kernels of a 1×1 window, the
    /// data banks holding the A tile.
    fn conv_read(&self, a: DmaAddr, b: DmaAddr) -> ConvRead {
        let (ai, p) = (self.padded_k(), self.dtype.precision());
        let (w, h) = self.feature_dims();
        let strides = match self.a_layout {
            // Group line fetch over one line of M atoms, surfaces as many atoms apart
            // as the cube holds rows.
            Layout::Native => Strides::Surfaces {
                atoms: self.a_cube_rows.unwrap_or(self.m).into(),
            },
            // Row-major A: one pixel of K channels per line, lines that many atoms apart.
            Layout::Plain => Strides::Lines {
                line: ai * p.bits() / 128,
                surf: 0,
            },
        };
        ConvRead {
            precision: p,
            feature: FeatureRead {
                addr: a,
                width: w,
                height: h,
                channels: ai,
                strides,
            },
            weights: Weights {
                addr: b,
                kernels: self.padded_n(),
            },
            window: Window::point(),
            out: (w, h),
            data_banks: self.data_banks(),
            data_reuse: false,
            weight_reuse: false,
        }
    }

    /// The DPU side: stages, output conversion and the written cube of C.
    fn dpu_task(&self, c: DmaAddr) -> Dpu {
        let ao = self.padded_n();
        let p = self.dtype.precision();
        let out = self.out.precision();
        let (w, h) = self.feature_dims();
        let (dst_surf, notch) = self.c_surfaces();
        let ratio = task::Dpu::validated_surface_ratio(p, out).unwrap_or(8);
        let post = self.post;
        let bs = if post.bias.is_none() && post.scale.is_none() && !post.relu && post.clip.is_none()
        {
            Stage::BYPASSED
        } else {
            Stage {
                bypass: false,
                alu: post.bias.map(|operand| Alu {
                    op: AluOp::Add,
                    operand,
                    from_memory: false,
                }),
                // The TRM gives negative values their own multiplier shift: the same here.
                mul: post.scale.map(|(operand, shift)| Mul {
                    operand,
                    shift: shift.into(),
                    shift_neg: shift.into(),
                    prelu: false,
                    from_memory: false,
                    shift_from_memory: false,
                }),
                relu: post.relu,
                relux: post.clip,
            }
        };
        let ew = post.add.then(|| Ew {
            // The float path keeps the operand converter on with the identity (with it
            // bypassed the hardware drops the operand, quirk 15, docs/hardware/quirks.md#quirk-15).
            cvt: p.is_float().then_some(OpCvt::IDENTITY),
            ..Ew::from_memory(EwOp::Alu(AluOp::Add), 3)
        });
        let (cvt_offset, cvt_scale, cvt_shift) = post.out_cvt.unwrap_or((0, 1, 0));
        let size_e = task::Dpu::validated_size_e(p, out).unwrap_or(7);
        // OD_BYPASS as the validated programs set it (docs/conformance.md).
        let out_at = Output {
            addr: c,
            precision: out,
            surf_stride: dst_surf,
            notch,
            surface_add: ratio * dst_surf,
        };
        Dpu {
            bs,
            ew,
            out_cvt: OutCvt {
                offset: cvt_offset,
                scale: cvt_scale.into(),
                shift: cvt_shift.into(),
                add_first: false,
                round_half_up: false,
                fp32_to_fp16: self.out == OutType::Fp16,
                minus_exp: 0,
            },
            ..Dpu::core_fed((w, h, ao), p, out_at, size_e)
        }
    }

    /// DPU_RDMA for [`PostOps::add`]: the operand E through ERDMA, laid out like C; MRDMA
    /// off (the main data comes from the CORE).
    fn rdma_task(&self, e: DmaAddr) -> Option<DpuRdma> {
        let (w, h) = self.feature_dims();
        let (dst_surf, notch) = self.c_surfaces();
        let p = self.dtype.precision();
        let ao = self.padded_n();
        // DPU_RDMA: the operand E through ERDMA, laid out like C; MRDMA off (the main data
        // comes from the CORE).
        let sums = if p.is_float() {
            Precision::Fp32
        } else {
            Precision::Int32
        };
        self.post.add.then(|| DpuRdma {
            erdma: Some(Erdma {
                addr: e,
                data_size: 3,
                data_mode: 1,
                surf_stride: dst_surf,
                line_notch: notch,
                surf_notch: 0,
            }),
            ..reads_off((w, h, ao), sums, 15)
        })
    }

    /// The blocks the task starts: CNA, CORE and DPU, plus DPU_RDMA for [`PostOps::add`].
    pub fn enable(&self) -> BlockMask {
        if self.post.add {
            BlockMask::CONV_RDMA
        } else {
            BlockMask::CONV
        }
    }

    /// The one-task program, its list in buffer [`REGCMD`].
    pub fn program(&self) -> Result<Program> {
        let mut p = ProgramBuilder::new(REGCMD);
        p.push_task(self.body()?, self.enable());
        p.build()
    }
}
