//! Single-task matmul programs, `C[M×N] = A[M×K] × B[K×N]`, for every precision the
//! NPU's convolution path takes, with the host-side packers that lay operands out the way
//! the task reads them.
//!
//! One task is one 1×1 convolution (matmul-recipe.md section 2.1): the M rows of A are
//! pixels, K is the channel count, the N columns of B are kernels. The register values
//! follow matmul-recipe.md section 5 (the full-body habit of section 4.6: every register of
//! every started block is written, zeros included, so nothing depends on earlier
//! programs). The shape must fit one task: the whole A tile in the CBUF data banks and one
//! kernel group of B in the weight banks (section 4.2). Tiling larger shapes across tasks
//! and cores is the planner's job.
//!
//! Layouts (section 3; `ai` = K padded to 32, `ao` = N padded to 32, or 64 for int4):
//!
//! | operand | [`Layout::Plain`] | [`Layout::Native`] |
//! |---|---|---|
//! | A | row-major `m·ai + k` | `[ai/E][M][E]`, E elements per 16 bytes |
//! | C | row-major `m·ao + n` | `[ao/E][M][E]` |
//!
//! B is always in the weight-atom layout: 1024-byte atoms of 32 input channels × G kernels
//! (G = 32 int8, 64 int4, 16 for 16-bit types), `[ao/G][ai/32][G][32]`. int4 packs two
//! values per byte, the even index in the high nibble (section 8.1).
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

use crate::error::{Error, Result};
use crate::float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use crate::regcmd::{BlockMask, BufferId, DmaAddr, Program, ProgramBuilder, TaskBuilder};
use crate::regs::{cna, core, dpu, dpu_rdma};

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

const BANK: u64 = 32 * 1024;

/// Input element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 8-bit two's complement.
    Int8,
    /// 4-bit two's complement, two per byte.
    Int4,
    /// 16-bit two's complement.
    Int16,
    /// IEEE half precision.
    Fp16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// The precision code of CNA/CORE/DPU registers (matmul-recipe.md 5.1).
    pub const fn code(self) -> u32 {
        match self {
            Dtype::Int8 => 0,
            Dtype::Int16 => 1,
            Dtype::Fp16 => 2,
            Dtype::Bf16 => 3,
            Dtype::Int4 => 6,
        }
    }

    /// Bits per element.
    pub const fn bits(self) -> u32 {
        match self {
            Dtype::Int4 => 4,
            Dtype::Int8 => 8,
            _ => 16,
        }
    }

    /// Elements per 16-byte feature atom.
    pub const fn atom_elems(self) -> u32 {
        128 / self.bits()
    }

    /// Kernels per 1024-byte weight atom.
    pub const fn kernels_per_atom(self) -> u32 {
        8 * 1024 / (32 * self.bits())
    }

    /// Whether the type is floating point.
    pub const fn is_float(self) -> bool {
        matches!(self, Dtype::Fp16 | Dtype::Bf16)
    }

    /// The range of an integer type.
    pub const fn int_range(self) -> (i32, i32) {
        match self {
            Dtype::Int4 => (-8, 7),
            Dtype::Int8 => (-128, 127),
            Dtype::Int16 => (-32768, 32767),
            _ => (0, 0),
        }
    }

    /// The output the hardware natively gives for this input.
    pub const fn default_out(self) -> OutType {
        match self {
            Dtype::Int8 | Dtype::Int16 => OutType::Int32,
            Dtype::Int4 => OutType::Int16,
            Dtype::Fp16 | Dtype::Bf16 => OutType::Fp32,
        }
    }
}

/// Output element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutType {
    /// 8-bit integers (with the output converter's scale and shift).
    Int8,
    /// 16-bit integers.
    Int16,
    /// 32-bit integers.
    Int32,
    /// IEEE half precision.
    Fp16,
    /// bfloat16.
    Bf16,
    /// IEEE single precision.
    Fp32,
}

impl OutType {
    /// The DPU output precision code.
    pub const fn code(self) -> u32 {
        match self {
            OutType::Int8 => 0,
            OutType::Int16 => 1,
            OutType::Fp16 => 2,
            OutType::Bf16 => 3,
            OutType::Int32 => 4,
            OutType::Fp32 => 5,
        }
    }

    /// Bytes per element.
    pub const fn bytes(self) -> u32 {
        match self {
            OutType::Int8 => 1,
            OutType::Int16 | OutType::Fp16 | OutType::Bf16 => 2,
            OutType::Int32 | OutType::Fp32 => 4,
        }
    }

    /// Elements per 16-byte atom.
    pub const fn atom_elems(self) -> u32 {
        16 / self.bytes()
    }

    /// Whether the type is floating point.
    pub const fn is_float(self) -> bool {
        matches!(self, OutType::Fp16 | OutType::Bf16 | OutType::Fp32)
    }
}

/// Operand layouts (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Row-major with rows padded to whole atoms.
    Plain,
    /// NC1HWC2: `[channels/E][M][E]`.
    Native,
}

/// DPU post-processing, in pipeline order: bias, scale, ReLU, clip (the BS stage), then
/// the element-wise add of E, then the output converter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PostOps {
    /// Adds this to every sum (BS ALU, register operand). Integer inputs only.
    pub bias: Option<i32>,
    /// Multiplies by the operand, then shifts right rounding half up (BS MUL). Integer
    /// inputs only.
    pub scale: Option<(i16, u8)>,
    /// Clamps below at 0 (BS ReLU). Integer inputs only.
    pub relu: bool,
    /// Clamps above at this value (BS ReLUX). Integer inputs only.
    pub clip: Option<i32>,
    /// Adds E, an operand shaped and laid out like C with 32-bit elements (int32 for
    /// integer inputs, fp32 for float inputs), read by DPU_RDMA.
    pub add: bool,
    /// Output converter `((x × scale) + offset) >> shift`, integer outputs only.
    pub out_cvt: Option<(i32, u16, u16)>,
}

/// The two inputs of a matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operand {
    A,
    B,
}

impl Operand {
    fn name(self) -> &'static str {
        match self {
            Operand::A => "A",
            Operand::B => "B",
        }
    }
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

    /// Bytes of packed A.
    pub fn a_bytes(&self) -> usize {
        self.m as usize * self.padded_k() as usize * self.dtype.bits() as usize / 8
    }

    /// Bytes of packed B.
    pub fn b_bytes(&self) -> usize {
        self.padded_n() as usize * self.padded_k() as usize * self.dtype.bits() as usize / 8
    }

    /// Bytes of C as the task writes it (also the size of E).
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
                "M = {} rows; CNA DATA_SIZE0 holds at most 2047",
                self.m
            )));
        }
        if ao > 8192 {
            return Err(unsupported(format!(
                "N = {} pads to {ao}; the DPU's 13-bit channel field holds 8192",
                self.n
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
        if data > 11 * BANK {
            return Err(unsupported(format!(
                "A is {data} bytes; one task holds at most 11 CBUF banks ({} bytes)",
                11 * BANK
            )));
        }
        let db = data.div_ceil(BANK).clamp(1, 11);
        let group = (self.dtype.kernels_per_atom().max(32) as u64).min(ao);
        let weights = group * ai * b / 8;
        if weights > (12 - db) * BANK {
            return Err(unsupported(format!(
                "one group of {group} kernels is {weights} bytes but only {} weight banks remain",
                12 - db
            )));
        }
        Ok(())
    }

    /// CBUF data banks: the A tile, at least 1, at most 11.
    fn data_banks(&self) -> u32 {
        let data = self.m as u64 * self.padded_k() as u64 * self.dtype.bits() as u64 / 8;
        data.div_ceil(BANK).clamp(1, 11) as u32
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
        self.check()?;
        let (m, ai, ao) = (self.m, self.padded_k(), self.padded_n());
        let p = self.dtype.code();
        let bits = self.dtype.bits();
        let native_a = self.a_layout == Layout::Native;
        let (w, h) = if native_a { (m, 1) } else { (1, m) };
        let db = self.data_banks();
        let row_bytes = w * ai * bits / 8;
        let mut t = TaskBuilder::with_capacity(130);

        // Preamble of the vendor's bodies: CBUF split, decompression off, precisions.
        let cbuf = [("data_bank", db), ("weight_bank", 12 - db)];
        let con1 = [
            ("in_precision", p),
            ("proc_precision", p),
            ("group_line_off", u32::from(!native_a)),
        ];
        t.write_fields::<cna::CbufCon0>(&cbuf)?
            .write_fields::<cna::DcompRegnum>(&[])?
            .write_fields::<cna::DcompCtrl>(&[])?
            .write_fields::<cna::ConvCon1>(&con1)?;
        let ping_pong = [
            ("pointer_pp_en", 1),
            ("executer_pp_en", 1),
            ("pointer_pp_mode", 1),
        ];
        t.write_fields::<dpu::SPointer>(&ping_pong)?;
        if self.post.add {
            t.write_fields::<dpu_rdma::SPointer>(&ping_pong)?;
        }

        // CNA, in ascending offsets.
        let grains = if native_a { 2 } else { (m + 1).min(1023) };
        let (line, surf) = if native_a {
            // Group line fetch over one line of M atoms: surface stride 4·W + SURF = M atoms.
            (4 * m, (m.wrapping_mul(3)).wrapping_neg() & 0x0FFF_FFFF)
        } else {
            (ai * bits / 128, 0)
        };
        t.write_fields::<cna::ConvCon1>(&con1)?
            .write_fields::<cna::ConvCon2>(&[("feature_grains", grains)])?
            .write_fields::<cna::ConvCon3>(&[("conv_x_stride", 1), ("conv_y_stride", 1)])?
            .write_fields::<cna::DataSize0>(&[("datain_width", w), ("datain_height", h)])?
            .write_fields::<cna::DataSize1>(&[
                ("datain_channel", ai),
                ("datain_channel_real", ai - 1),
            ])?
            .write_fields::<cna::DataSize2>(&[("dataout_width", w)])?
            .write_fields::<cna::DataSize3>(&[("dataout_atomics", m)])?
            .write_fields::<cna::WeightSize0>(&[("weight_bytes", ao * ai * bits / 8)])?
            .write_fields::<cna::WeightSize1>(&[("weight_bytes_per_kernel", ai * bits / 8)])?
            .write_fields::<cna::WeightSize2>(&[
                ("weight_kernels", ao),
                ("weight_height", 1),
                ("weight_width", 1),
            ])?
            .write_fields::<cna::CbufCon0>(&cbuf)?
            .write_fields::<cna::CbufCon1>(&[("data_entries", row_bytes.div_ceil(64))])?
            .write_fields::<cna::CvtCon0>(&[
                ("cvt_bypass", 1),
                ("cvt_type", 1),
                ("data_sign", 1),
            ])?;
        // CVT_CON1..4: scale 1, offset 0 (unused while the converter is bypassed).
        t.write_fields::<cna::CvtCon1>(&[("cvt_scale0", 1)])?
            .write_fields::<cna::CvtCon2>(&[("cvt_scale1", 1)])?
            .write_fields::<cna::CvtCon3>(&[("cvt_scale2", 1)])?
            .write_fields::<cna::CvtCon4>(&[("cvt_scale3", 1)])?
            .write_fields::<cna::FcCon0>(&[])?
            .write_fields::<cna::FcCon1>(&[])?
            .write_fields::<cna::PadCon0>(&[])?
            .write_addr::<cna::FeatureDataAddr>(a)?
            .write_fields::<cna::FcCon2>(&[])?
            .write_fields::<cna::DmaCon0>(&[("data_burst_len", 15), ("weight_burst_len", 15)])?
            .write_fields::<cna::DmaCon1>(&[("line_stride", line)])?
            .write_fields::<cna::DmaCon2>(&[("surf_stride", surf)])?
            .write_fields::<cna::FcDataSize0>(&[("dma_width", w), ("dma_height", h)])?
            .write_fields::<cna::FcDataSize1>(&[("dma_channel", ai)])?
            .write_fields::<cna::DcompCtrl>(&[])?
            .write_fields::<cna::DcompRegnum>(&[])?
            .write_addr::<cna::DcompAddr0>(b)?;
        t.write_fields::<cna::DcompAmount0>(&[])?
            .write_fields::<cna::DcompAmount1>(&[])?
            .write_fields::<cna::DcompAmount2>(&[])?
            .write_fields::<cna::DcompAmount3>(&[])?
            .write_fields::<cna::DcompAmount4>(&[])?
            .write_fields::<cna::DcompAmount5>(&[])?
            .write_fields::<cna::DcompAmount6>(&[])?
            .write_fields::<cna::DcompAmount7>(&[])?
            .write_fields::<cna::DcompAmount8>(&[])?
            .write_fields::<cna::DcompAmount9>(&[])?
            .write_fields::<cna::DcompAmount10>(&[])?
            .write_fields::<cna::DcompAmount11>(&[])?
            .write_fields::<cna::DcompAmount12>(&[])?
            .write_fields::<cna::DcompAmount13>(&[])?
            .write_fields::<cna::DcompAmount14>(&[])?
            .write_fields::<cna::DcompAmount15>(&[])?
            .write_fields::<cna::CvtCon5>(&[])?
            .write_fields::<cna::PadCon1>(&[])?;

        // CORE.
        let qd = u32::from(!self.dtype.is_float());
        t.write_fields::<core::MiscCfg>(&[("qd_en", qd), ("proc_precision", p)])?
            .write_fields::<core::DataoutSize0>(&[
                ("dataout_width", w - 1),
                ("dataout_height", h - 1),
            ])?
            .write_fields::<core::DataoutSize1>(&[("dataout_channel", ao - 1)])?
            .write_fields::<core::ClipTruncate>(&[])?
            .write_fields::<core::Unk3030>(&[])?;

        // DPU.
        let out = self.out;
        let epa = out.atom_elems();
        let (dst_surf, notch) = match self.c_layout {
            Layout::Plain => (16, ao / epa - 1),
            Layout::Native => (16 * m, 0),
        };
        let post = self.post;
        let (mul, shift) = post.scale.unwrap_or((0, 0));
        let bs_cfg = [
            (
                "bs_bypass",
                u32::from(
                    post.bias.is_none()
                        && post.scale.is_none()
                        && !post.relu
                        && post.clip.is_none(),
                ),
            ),
            ("bs_alu_bypass", u32::from(post.bias.is_none())),
            ("bs_mul_bypass", u32::from(post.scale.is_none())),
            ("bs_relu_bypass", u32::from(!post.relu)),
            ("bs_relux_en", u32::from(post.clip.is_some())),
            ("bs_alu_algo", if post.bias.is_some() { 2 } else { 0 }),
        ];
        // Float outputs from 16-bit inputs: fp32 → fp16 conversion on the way out.
        let fp16_out = u32::from(out == OutType::Fp16);
        let (cvt_offset, cvt_scale, cvt_shift) = post.out_cvt.unwrap_or((0, 1, 0));
        let surface_add = match (self.c_layout, self.dtype.is_float()) {
            (Layout::Plain, false) => 0x80,
            (Layout::Plain, true) => bits / 8 * 16,
            (Layout::Native, false) => m << 7,
            (Layout::Native, true) => m * bits / 8 * 16,
        };
        t.write_fields::<dpu::FeatureModeCfg>(&[("output_mode", 2), ("burst_len", 15)])?
            .write_fields::<dpu::DataFormat>(&[
                ("out_precision", out.code()),
                ("in_precision", p),
                ("proc_precision", p),
                // The TRM gives negative values their own multiplier shift: the same here.
                ("bs_mul_shift_value_neg", shift as u32),
            ])?
            .write_fields::<dpu::OffsetPend>(&[])?
            .write_addr::<dpu::DstBaseAddr>(c)?
            .write_fields::<dpu::DstSurfStride>(&[("dst_surf_stride", dst_surf / 16)])?
            .write_fields::<dpu::DataCubeWidth>(&[("width", w - 1)])?
            .write_fields::<dpu::DataCubeHeight>(&[("height", h - 1)])?
            .write_fields::<dpu::DataCubeNotchAddr>(&[
                ("notch_addr_0", notch),
                ("notch_addr_1", notch),
            ])?
            .write_fields::<dpu::DataCubeChannel>(&[("channel", ao - 1), ("orig_channel", ao - 1)])?
            .write_fields::<dpu::BsCfg>(&bs_cfg)?
            .write_fields::<dpu::BsAluCfg>(&[("bs_alu_operand", post.bias.unwrap_or(0) as u32)])?
            .write_fields::<dpu::BsMulCfg>(&[
                ("bs_mul_operand", mul as u16 as u32),
                ("bs_mul_shift_value", shift as u32),
            ])?
            .write_fields::<dpu::BsReluxCmpValue>(&[(
                "bs_relux_cmp_dat",
                post.clip.unwrap_or(0) as u32,
            )])?
            .write_fields::<dpu::BsOwCfg>(&[
                ("od_bypass", 1),
                ("size_e_0", 7),
                ("size_e_1", 7),
                ("size_e_2", 7),
            ])?
            .write_fields::<dpu::BsOwOp>(&[])?
            .write_fields::<dpu::WdmaSize0>(&[("channel_wdma", ao - 1)])?
            .write_fields::<dpu::WdmaSize1>(&[("width_wdma", w - 1), ("height_wdma", h - 1)])?;
        write_bn_bypassed(&mut t)?;
        if post.add {
            // ADD of a memory operand; the float path keeps the operand converter on with
            // the identity (with it bypassed the hardware drops the operand, quirk 15).
            let float = self.dtype.is_float();
            write_ew_add(&mut t, !float)?;
        } else {
            t.write_fields::<dpu::EwCfg>(&[
                ("ew_bypass", 1),
                ("ew_op_bypass", 1),
                ("ew_lut_bypass", 1),
                ("ew_op_cvt_bypass", 1),
                ("ew_relu_bypass", 1),
            ])?;
        }
        t.write_fields::<dpu::EwCvtOffsetValue>(&[])?
            .write_fields::<dpu::EwCvtScaleValue>(&[("ew_op_cvt_scale", 1)])?
            .write_fields::<dpu::EwReluxCmpValue>(&[])?
            .write_fields::<dpu::OutCvtOffset>(&[("out_cvt_offset", cvt_offset as u32)])?
            .write_fields::<dpu::OutCvtScale>(&[
                ("out_cvt_scale", cvt_scale as u32),
                ("fp32tofp16_en", fp16_out),
            ])?
            .write_fields::<dpu::OutCvtShift>(&[("out_cvt_shift", cvt_shift as u32)])?
            .write_fields::<dpu::EwOpValue0>(&[])?
            .write_fields::<dpu::EwOpValue1>(&[])?
            .write_fields::<dpu::EwOpValue2>(&[])?
            .write_fields::<dpu::EwOpValue3>(&[])?
            .write_fields::<dpu::EwOpValue4>(&[])?
            .write_fields::<dpu::EwOpValue5>(&[])?
            .write_fields::<dpu::EwOpValue6>(&[])?
            .write_fields::<dpu::EwOpValue7>(&[])?
            .write_fields::<dpu::SurfaceAdd>(&[("surf_add", surface_add / 16)])?
            .write_fields::<dpu::Unk40c4>(&[])?
            .write_fields::<dpu::LutAccessCfg>(&[])?
            .write_fields::<dpu::LutAccessData>(&[])?
            .write_fields::<dpu::LutCfg>(&[])?
            .write_fields::<dpu::LutInfo>(&[])?
            .write_fields::<dpu::LutLeStart>(&[])?
            .write_fields::<dpu::LutLeEnd>(&[])?
            .write_fields::<dpu::LutLoStart>(&[])?
            .write_fields::<dpu::LutLoEnd>(&[])?
            .write_fields::<dpu::LutLeSlopeScale>(&[])?
            .write_fields::<dpu::LutLeSlopeShift>(&[])?
            .write_fields::<dpu::LutLoSlopeScale>(&[])?
            .write_fields::<dpu::LutLoSlopeShift>(&[])?;

        if post.add {
            // DPU_RDMA: the operand E through ERDMA, laid out like C; MRDMA off (the main
            // data comes from the CORE).
            let dprec = if self.dtype.is_float() { 5 } else { 4 };
            t.write_fields::<dpu_rdma::RdmaDataCubeWidth>(&[("width", w - 1)])?
                .write_fields::<dpu_rdma::RdmaDataCubeHeight>(&[
                    ("height", h - 1),
                    ("ew_line_notch_addr", notch),
                ])?
                .write_fields::<dpu_rdma::RdmaDataCubeChannel>(&[("channel", ao - 1)])?
                .write_fields::<dpu_rdma::RdmaSrcBaseAddr>(&[])?
                .write_fields::<dpu_rdma::RdmaBrdmaCfg>(&[])?
                .write_fields::<dpu_rdma::RdmaBsBaseAddr>(&[])?
                .write_fields::<dpu_rdma::RdmaNrdmaCfg>(&[])?
                .write_fields::<dpu_rdma::RdmaBnBaseAddr>(&[])?
                .write_fields::<dpu_rdma::RdmaErdmaCfg>(&[
                    ("erdma_data_size", 3),
                    ("erdma_data_mode", 1),
                ])?
                .write_addr::<dpu_rdma::RdmaEwBaseAddr>(e)?
                .write_fields::<dpu_rdma::RdmaEwSurfStride>(&[("ew_surf_stride", dst_surf / 16)])?
                .write_fields::<dpu_rdma::RdmaFeatureModeCfg>(&[
                    ("mrdma_disable", 1),
                    ("proc_precision", dprec),
                    ("in_precision", dprec),
                    ("burst_len", 15),
                ])?
                .write_fields::<dpu_rdma::RdmaSrcDmaCfg>(&[])?
                .write_fields::<dpu_rdma::RdmaSurfNotch>(&[])?
                .write_fields::<dpu_rdma::RdmaPadCfg>(&[])?
                .write_fields::<dpu_rdma::RdmaWeight>(&RDMA_WEIGHTS)?
                .write_fields::<dpu_rdma::RdmaEwSurfNotch>(&[])?;
        }
        Ok(t)
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

    fn check_len(&self, what: &'static str, got: usize, want: usize) -> Result<()> {
        if got != want {
            return Err(unsupported(format!(
                "{what} has {got} elements, the shape needs {want}"
            )));
        }
        Ok(())
    }

    /// Byte offset of element `(m, k)` of A (for int4: of the byte holding it).
    pub fn a_offset(&self, m: u32, k: u32) -> usize {
        let (m, k) = (m as usize, k as usize);
        let bits = self.dtype.bits() as usize;
        let elem = match self.a_layout {
            Layout::Plain => m * self.padded_k() as usize + k,
            Layout::Native => {
                let e = self.dtype.atom_elems() as usize;
                ((k / e) * self.m as usize + m) * e + k % e
            }
        };
        elem * bits / 8
    }

    /// Byte offset of element `(k, n)` of B (for int4: of the byte holding it).
    pub fn b_offset(&self, k: u32, n: u32) -> usize {
        let (k, n) = (k as usize, n as usize);
        let g = self.dtype.kernels_per_atom() as usize;
        let bytes_row = 32 * self.dtype.bits() as usize / 8;
        let kb = self.padded_k() as usize / 32;
        ((n / g) * kb + k / 32) * 1024
            + (n % g) * bytes_row
            + (k % 32) * self.dtype.bits() as usize / 8
    }

    /// Byte offset of element `(m, n)` of C (and of E).
    pub fn c_offset(&self, m: u32, n: u32) -> usize {
        let (m, n) = (m as usize, n as usize);
        let elem = match self.c_layout {
            Layout::Plain => m * self.padded_n() as usize + n,
            Layout::Native => {
                let e = self.out.atom_elems() as usize;
                ((n / e) * self.m as usize + m) * e + n % e
            }
        };
        elem * self.out.bytes() as usize
    }

    fn put(&self, buf: &mut [u8], off: usize, index: u32, v: i32) {
        match self.dtype {
            Dtype::Int4 => {
                let nib = (v as u8) & 0xF;
                buf[off] = if index.is_multiple_of(2) {
                    (buf[off] & 0x0F) | (nib << 4)
                } else {
                    (buf[off] & 0xF0) | nib
                };
            }
            Dtype::Int8 => buf[off] = v as i8 as u8,
            _ => buf[off..off + 2].copy_from_slice(&(v as i16).to_le_bytes()),
        }
    }

    fn check_int(&self, what: &'static str, values: &[i32]) -> Result<()> {
        if self.dtype.is_float() {
            return Err(unsupported(format!(
                "{what}: integer values for a {:?} matmul",
                self.dtype
            )));
        }
        let (lo, hi) = self.dtype.int_range();
        if let Some(v) = values.iter().find(|v| !(lo..=hi).contains(*v)) {
            return Err(unsupported(format!(
                "{what}: {v} is outside the {:?} range {lo}..={hi}",
                self.dtype
            )));
        }
        Ok(())
    }

    fn float_bits(&self, v: f32) -> i32 {
        match self.dtype {
            Dtype::Fp16 => f32_to_f16(v) as i16 as i32,
            _ => f32_to_bf16(v) as i16 as i32,
        }
    }

    /// Packs A (row-major M×K integers) into the task's layout.
    pub fn pack_a_int(&self, a: &[i32]) -> Result<Vec<u8>> {
        self.pack_int(Operand::A, a)
    }

    /// Packs A (row-major M×K) into the task's layout, rounding to fp16/bf16.
    pub fn pack_a_f32(&self, a: &[f32]) -> Result<Vec<u8>> {
        self.pack_f32(Operand::A, a)
    }

    /// Packs B (row-major K×N integers) into the weight-atom layout.
    pub fn pack_b_int(&self, b: &[i32]) -> Result<Vec<u8>> {
        self.pack_int(Operand::B, b)
    }

    /// Packs B (row-major K×N) into the weight-atom layout, rounding to fp16/bf16.
    pub fn pack_b_f32(&self, b: &[f32]) -> Result<Vec<u8>> {
        self.pack_f32(Operand::B, b)
    }

    /// Rows and columns of a row-major operand.
    fn dims(&self, op: Operand) -> (u32, u32) {
        match op {
            Operand::A => (self.m, self.k),
            Operand::B => (self.k, self.n),
        }
    }

    fn pack_int(&self, op: Operand, values: &[i32]) -> Result<Vec<u8>> {
        let (rows, cols) = self.dims(op);
        self.check_len(op.name(), values.len(), (rows * cols) as usize)?;
        self.check_int(op.name(), values)?;
        Ok(self.pack_with(op, |i| values[i]))
    }

    fn pack_f32(&self, op: Operand, values: &[f32]) -> Result<Vec<u8>> {
        let (rows, cols) = self.dims(op);
        self.check_len(op.name(), values.len(), (rows * cols) as usize)?;
        if !self.dtype.is_float() {
            return Err(unsupported(format!(
                "{}: float values for a {:?} matmul",
                op.name(),
                self.dtype
            )));
        }
        Ok(self.pack_with(op, |i| self.float_bits(values[i])))
    }

    /// Lays out a row-major operand; `value(i)` is its i-th element's bits.
    fn pack_with(&self, op: Operand, value: impl Fn(usize) -> i32) -> Vec<u8> {
        let (rows, cols) = self.dims(op);
        let mut buf = vec![
            0u8;
            if op == Operand::A {
                self.a_bytes()
            } else {
                self.b_bytes()
            }
        ];
        for r in 0..rows {
            for c in 0..cols {
                // The K index decides the nibble of int4 values.
                let (offset, k) = match op {
                    Operand::A => (self.a_offset(r, c), c),
                    Operand::B => (self.b_offset(r, c), r),
                };
                self.put(&mut buf, offset, k, value((r * cols + c) as usize));
            }
        }
        buf
    }

    /// Packs E (row-major M×N, int32) into C's layout, for [`PostOps::add`].
    pub fn pack_e_int(&self, e: &[i32]) -> Result<Vec<u8>> {
        self.check_len("E", e.len(), (self.m * self.n) as usize)?;
        Ok(self.pack_e_with(|v: usize| e[v].to_le_bytes()))
    }

    /// Packs E (row-major M×N, fp32) into C's layout, for [`PostOps::add`].
    pub fn pack_e_f32(&self, e: &[f32]) -> Result<Vec<u8>> {
        self.check_len("E", e.len(), (self.m * self.n) as usize)?;
        Ok(self.pack_e_with(|v: usize| e[v].to_bits().to_le_bytes()))
    }

    fn pack_e_with(&self, value: impl Fn(usize) -> [u8; 4]) -> Vec<u8> {
        // E always has 32-bit elements; lay it out as if C were 32-bit.
        let e = SingleMatmul {
            out: if self.dtype.is_float() {
                OutType::Fp32
            } else {
                OutType::Int32
            },
            ..*self
        };
        let mut buf = vec![0u8; e.c_bytes()];
        for m in 0..self.m {
            for n in 0..self.n {
                let o = e.c_offset(m, n);
                buf[o..o + 4].copy_from_slice(&value((m * self.n + n) as usize));
            }
        }
        buf
    }

    /// Bytes of E.
    pub fn e_bytes(&self) -> usize {
        self.m as usize * self.padded_n() as usize * 4
    }

    /// Reads C (integer outputs) back as row-major M×N.
    pub fn unpack_c_int(&self, c: &[u8]) -> Result<Vec<i64>> {
        if self.out.is_float() {
            return Err(unsupported(format!(
                "C: integer read of a {:?} output",
                self.out
            )));
        }
        self.unpack_c(c, |e| match self.out {
            OutType::Int8 => e[0] as i8 as i64,
            OutType::Int16 => i16::from_le_bytes([e[0], e[1]]) as i64,
            _ => i32::from_le_bytes([e[0], e[1], e[2], e[3]]) as i64,
        })
    }

    /// Reads C (float outputs) back as row-major M×N.
    pub fn unpack_c_f32(&self, c: &[u8]) -> Result<Vec<f32>> {
        if !self.out.is_float() {
            return Err(unsupported(format!(
                "C: float read of a {:?} output",
                self.out
            )));
        }
        self.unpack_c(c, |e| match self.out {
            OutType::Fp16 => f16_to_f32(u16::from_le_bytes([e[0], e[1]])),
            OutType::Bf16 => bf16_to_f32(u16::from_le_bytes([e[0], e[1]])),
            _ => f32::from_bits(u32::from_le_bytes([e[0], e[1], e[2], e[3]])),
        })
    }

    /// Every element of C in row-major order, each read by `read` from its bytes.
    fn unpack_c<T>(&self, c: &[u8], read: impl Fn(&[u8]) -> T) -> Result<Vec<T>> {
        self.check_len("C bytes", c.len(), self.c_bytes())?;
        let size = self.out.bytes() as usize;
        let mut out = Vec::with_capacity((self.m * self.n) as usize);
        for m in 0..self.m {
            for n in 0..self.n {
                let o = self.c_offset(m, n);
                out.push(read(&c[o..o + size]));
            }
        }
        Ok(out)
    }
}

/// DPU_RDMA arbiter weights: 1 for each read engine, as every known program writes.
const RDMA_WEIGHTS: [(&str, u32); 4] = [
    ("m_weight", 1),
    ("b_weight", 1),
    ("n_weight", 1),
    ("e_weight", 1),
];

/// The BN stage, bypassed, with its operands zeroed.
fn write_bn_bypassed(t: &mut TaskBuilder) -> Result<()> {
    t.write_fields::<dpu::BnCfg>(&[
        ("bn_bypass", 1),
        ("bn_alu_bypass", 1),
        ("bn_mul_bypass", 1),
        ("bn_relu_bypass", 1),
    ])?
    .write_fields::<dpu::BnAluCfg>(&[])?
    .write_fields::<dpu::BnMulCfg>(&[])?
    .write_fields::<dpu::BnReluxCmpValue>(&[])?;
    Ok(())
}

/// EW_CFG for the ADD of a 32-bit per-pixel ERDMA operand.
fn write_ew_add(t: &mut TaskBuilder, op_cvt_bypass: bool) -> Result<()> {
    t.write_fields::<dpu::EwCfg>(&[
        ("ew_op_src", 1),
        ("ew_lut_bypass", 1),
        ("ew_op_cvt_bypass", u32::from(op_cvt_bypass)),
        ("ew_relu_bypass", 1),
        ("ew_alu_algo", 2),
        ("edata_size", 3),
        ("ew_data_mode", 1),
    ])?;
    Ok(())
}

/// The DPU-only task that adds two int32 partial results in the native layout
/// `[channels/4][rows][4]` — the split-K accumulate of matmul-recipe.md 5.7: MRDMA reads
/// `acc`, ERDMA reads `partial`, the EW ALU adds, the write DMA stores to `out`. Limits are
/// the board-validated ones (rows ≤ 128, channels ≤ 1024, channels a multiple of 4).
pub fn add_task(
    rows: u32,
    channels: u32,
    acc: DmaAddr,
    partial: DmaAddr,
    out: DmaAddr,
) -> Result<TaskBuilder> {
    if rows == 0 || rows > 128 || channels == 0 || channels > 1024 || !channels.is_multiple_of(4) {
        return Err(Error::Unsupported {
            what: "split-K add task",
            why: format!(
                "{rows} rows x {channels} channels; the recipe covers 1..=128 rows and 4..=1024 channels in steps of 4"
            ),
        });
    }
    let ping_pong = [
        ("pointer_pp_en", 1),
        ("executer_pp_en", 1),
        ("pointer_pp_mode", 1),
    ];
    let stride = rows; // 16-byte units: one surface is `rows` atoms.
    let mut t = TaskBuilder::with_capacity(40);
    t.write_fields::<dpu::SPointer>(&ping_pong)?
        .write_fields::<dpu_rdma::SPointer>(&ping_pong)?
        .write_fields::<dpu::FeatureModeCfg>(&[
            ("flying_mode", 1),
            ("output_mode", 2),
            ("burst_len", 15),
        ])?
        .write_fields::<dpu::DataFormat>(&[
            ("out_precision", 4),
            ("in_precision", 4),
            ("proc_precision", 4),
        ])?
        .write_fields::<dpu::OffsetPend>(&[])?
        .write_addr::<dpu::DstBaseAddr>(out)?
        .write_fields::<dpu::DstSurfStride>(&[("dst_surf_stride", stride)])?
        .write_fields::<dpu::DataCubeWidth>(&[("width", rows - 1)])?
        .write_fields::<dpu::DataCubeHeight>(&[])?
        .write_fields::<dpu::DataCubeNotchAddr>(&[])?
        .write_fields::<dpu::DataCubeChannel>(&[
            ("channel", channels - 1),
            ("orig_channel", channels - 1),
        ])?
        .write_fields::<dpu::BsCfg>(&[
            ("bs_bypass", 1),
            ("bs_alu_bypass", 1),
            ("bs_mul_bypass", 1),
            ("bs_relu_bypass", 1),
        ])?
        .write_fields::<dpu::BsAluCfg>(&[])?
        .write_fields::<dpu::BsMulCfg>(&[])?
        .write_fields::<dpu::BsReluxCmpValue>(&[])?
        .write_fields::<dpu::BsOwCfg>(&[("od_bypass", 1)])?
        .write_fields::<dpu::BsOwOp>(&[])?
        .write_fields::<dpu::WdmaSize0>(&[("channel_wdma", channels - 1)])?
        .write_fields::<dpu::WdmaSize1>(&[("width_wdma", rows - 1)])?;
    write_bn_bypassed(&mut t)?;
    write_ew_add(&mut t, true)?;
    t.write_fields::<dpu::EwCvtOffsetValue>(&[])?
        .write_fields::<dpu::EwCvtScaleValue>(&[("ew_op_cvt_scale", 1)])?
        .write_fields::<dpu::EwReluxCmpValue>(&[])?
        .write_fields::<dpu::OutCvtOffset>(&[])?
        .write_fields::<dpu::OutCvtScale>(&[("out_cvt_scale", 1)])?
        .write_fields::<dpu::OutCvtShift>(&[])?
        .write_fields::<dpu::SurfaceAdd>(&[("surf_add", stride)])?
        .write_fields::<dpu::Unk40c4>(&[])?
        .write_fields::<dpu_rdma::RdmaDataCubeWidth>(&[("width", rows - 1)])?
        .write_fields::<dpu_rdma::RdmaDataCubeHeight>(&[])?
        .write_fields::<dpu_rdma::RdmaDataCubeChannel>(&[("channel", channels - 1)])?
        .write_addr::<dpu_rdma::RdmaSrcBaseAddr>(acc)?
        .write_fields::<dpu_rdma::RdmaBrdmaCfg>(&[])?
        .write_fields::<dpu_rdma::RdmaNrdmaCfg>(&[])?
        .write_fields::<dpu_rdma::RdmaErdmaCfg>(&[("erdma_data_size", 3), ("erdma_data_mode", 1)])?
        .write_addr::<dpu_rdma::RdmaEwBaseAddr>(partial)?
        .write_fields::<dpu_rdma::RdmaEwSurfStride>(&[("ew_surf_stride", stride)])?
        .write_fields::<dpu_rdma::RdmaFeatureModeCfg>(&[
            ("flying_mode", 1),
            ("proc_precision", 4),
            ("in_precision", 4),
            ("burst_len", 15),
        ])?
        .write_fields::<dpu_rdma::RdmaSrcDmaCfg>(&[])?
        .write_fields::<dpu_rdma::RdmaSurfNotch>(&[])?
        .write_fields::<dpu_rdma::RdmaWeight>(&RDMA_WEIGHTS)?
        .write_fields::<dpu_rdma::RdmaEwSurfNotch>(&[])?;
    Ok(t)
}
