//! The CNA, CORE, DPU and DPU_RDMA registers of one convolution task: the CNA and CORE
//! from the emitter the matmul tasks share ([`crate::kernels::emit`]).

use super::{Conv2d, ConvOut, Plan, Slice, requant_scale_shift, unsupported};
use crate::error::Result;
use crate::kernels::emit::{ConvRead, FeatureRead, Strides, Window};
use crate::kernels::ops::Cube;
use crate::kernels::single::preset::reads_off;
use crate::regcmd::DmaAddr;
use crate::task::{Dpu, DpuRdma, Kernel, OutCvt, Output, OwCfg, Precision, Task, Weights};

/// `a` moved on by `off` bytes; refused beyond 32-bit addresses.
fn offset(a: DmaAddr, off: u64) -> Result<DmaAddr> {
    a.checked_offset(off)
        .ok_or_else(|| unsupported(format!("address {a:?} + {off:#x} beyond 32 bits")))
}

impl Conv2d {
    /// The task of one slice: its band of output rows, from its tile of kernels.
    pub(super) fn task(
        &self,
        s: &Slice,
        plan: &Plan,
        input: DmaAddr,
        weights: DmaAddr,
        output: DmaAddr,
    ) -> Result<Task> {
        let in_cube = self.input_cube()?;
        let out_cube = self.output_cube()?;
        let ow = out_cube.width;
        let (cna, core) = self
            .task_read(s, plan, in_cube, ow, input, weights)?
            .emit()?;
        let out_ch = core.out.2;
        let (dpu, dpu_rdma) = self.task_dpu(s, out_cube, out_ch, output)?;
        Ok(Task {
            cna: Some(cna),
            core: Some(core),
            dpu: Some(dpu),
            dpu_rdma,
            ppu: None,
            ppu_rdma: None,
        })
    }

    /// What the CNA of one slice reads: the input rows its band needs and its kernels'
    /// weights.
    fn task_read(
        &self,
        s: &Slice,
        plan: &Plan,
        in_cube: Cube,
        ow: u32,
        input: DmaAddr,
        weights: DmaAddr,
    ) -> Result<ConvRead> {
        let p = self.prec();
        let (w, h) = (self.input.width, self.input.height);
        let (ey, _) = self.extent();
        let c = self.task_in_channels();
        // Input rows of the band: from oy0·sy − top to (oy0 + oh − 1)·sy − top + ey.
        let start = i64::from(s.oy0) * i64::from(self.stride.0) - i64::from(self.pad.top);
        let end = i64::from(s.oy0 + s.oh - 1) * i64::from(self.stride.0) - i64::from(self.pad.top)
            + i64::from(ey);
        let in0 = start.max(0) as u32;
        let in1 = end.min(i64::from(h)) as u32;
        let pad_top = (i64::from(in0) - start) as u32;
        let rows = in1 - in0;
        let in_c0 = if self.groups > 1 {
            s.group * self.group_in()
        } else {
            0
        };
        let in_off = u64::from(in_c0 / in_cube.atom_elems()) * in_cube.surface_bytes()
            + u64::from(in0) * u64::from(w) * 16;
        let kb = self.kernel_bytes();
        let group_kernels = if self.depthwise {
            1
        } else {
            self.group_kernels()
        };
        let w_off = (u64::from(s.group) * u64::from(group_kernels) + u64::from(s.k0)) * kb;
        let k = &self.kernel;
        Ok(ConvRead {
            precision: p,
            feature: FeatureRead {
                addr: offset(input, in_off)?,
                width: w,
                height: rows,
                channels: c,
                // The band's lines within the full tensor's surfaces.
                strides: Strides::Surfaces {
                    atoms: u64::from(w) * u64::from(h),
                },
            },
            weights: Weights {
                addr: offset(weights, w_off)?,
                kernels: s.kernels,
            },
            window: Window {
                kernel: Kernel {
                    width: k.1,
                    height: k.0,
                    pad_left: self.pad.left,
                    pad_top,
                    pad_value: if p == Precision::Int8 {
                        i32::from(self.pad_value) as u32
                    } else {
                        0
                    },
                    dilation: (self.dilation.1, self.dilation.0),
                    depthwise: self.depthwise,
                },
                stride: (self.stride.1, self.stride.0),
            },
            out: (ow, s.oh),
            data_banks: plan.data_banks,
            data_reuse: false,
            weight_reuse: false,
        })
    }

    /// The DPU of one slice writing its rows of the output cube, and for the fp16
    /// depthwise mode the DPU_RDMA that mode starts.
    fn task_dpu(
        &self,
        s: &Slice,
        out_cube: Cube,
        out_ch: u32,
        output: DmaAddr,
    ) -> Result<(Dpu, Option<DpuRdma>)> {
        let p = self.prec();
        let (ow, oh_full) = (out_cube.width, out_cube.height);
        let oc0 = if self.depthwise {
            0
        } else {
            s.group * self.group_kernels() + s.k0
        };
        let out_off = u64::from(oc0 / out_cube.atom_elems()) * out_cube.surface_bytes()
            + u64::from(s.oy0) * u64::from(ow) * 16;
        let out_p = self.out_precision();
        let surf = u32::try_from(u64::from(ow) * u64::from(oh_full))
            .map_err(|_| unsupported("output plane beyond 32 bits".into()))?;
        // An fp16 → fp16 depthwise task is written as the board-run one is
        // (docs/hardware/convolution.md#depthwise): the DPU and DPU_RDMA in depthwise
        // mode, SIZE_E 3, SURFACE_ADD 4 × the plane and the CPEND adder with 0x80.
        let dw_mode = self.depthwise && p == Precision::Fp16 && out_p == Precision::Fp16;
        let ratio = if dw_mode {
            4
        } else {
            Dpu::validated_surface_ratio(p, out_p).unwrap_or(8)
        };
        let size_e = if dw_mode {
            3
        } else {
            Dpu::validated_size_e(p, out_p).unwrap_or(1)
        };
        let (scale, shift) = match self.out {
            ConvOut::Int8 { multiplier } => requant_scale_shift(multiplier)?,
            _ => (1, 0),
        };
        let out_at = Output {
            addr: offset(output, out_off)?,
            precision: out_p,
            surf_stride: surf,
            notch: 0,
            surface_add: ratio * surf,
        };
        let fed = Dpu::core_fed((ow, s.oh, out_ch), p, out_at, size_e);
        let dpu = Dpu {
            depthwise: dw_mode,
            bs: self.bs,
            ow: OwCfg {
                od_bypass: fed.ow.od_bypass && !dw_mode,
                ow_op: if dw_mode { 0x80 } else { 0 },
                ..fed.ow
            },
            out_cvt: OutCvt {
                offset: 0,
                scale,
                shift,
                add_first: false,
                round_half_up: false,
                fp32_to_fp16: out_p == Precision::Fp16,
                minus_exp: 0,
            },
            ..fed
        };
        // The board-run depthwise program starts DPU_RDMA for its mode, every read off.
        let dpu_rdma = dw_mode.then_some(DpuRdma {
            depthwise: true,
            ..reads_off((ow, s.oh, out_ch), p, 15)
        });
        Ok((dpu, dpu_rdma))
    }
}
