//! The one CNA/CORE emitter of the convolution-shaped tasks: a matmul task (a 1×1
//! window over a feature cube of M pixels, docs/hardware/matmul-programs.md#mapping) and a
//! convolution task (docs/hardware/convolution.md#registers) both describe what they read
//! as a [`ConvRead`], and [`ConvRead::emit`] fills the two blocks. The DPU side of those
//! tasks starts from [`crate::task::Dpu::core_fed`].

use crate::error::{Error, Result};
use crate::regcmd::DmaAddr;
use crate::regs::cna::ConvCon2;
use crate::task::{Cbuf, Cna, Conv, Core, Feature, InputCvt, Kernel, Precision, Weights, cbuf};

/// How the CNA steps through the feature cube in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strides {
    /// NC1HWC2 surfaces fetched in groups of lines (`GROUP_LINE_OFF` clear): lines one
    /// width apart (`LINE_STRIDE` 4·W, 4-byte units) and surfaces `atoms` atoms apart
    /// (`SURF_STRIDE` atoms − 4·W, so 4·W + `SURF_STRIDE` = `atoms`, the vendor's
    /// values). `atoms` is W times the whole tensor's height, which a task reading a band
    /// of it exceeds.
    Surfaces {
        /// Atoms (16-byte units) from one surface to the next in memory.
        atoms: u64,
    },
    /// Lines fetched one at a time (`GROUP_LINE_OFF` set), both strides in 16-byte
    /// atoms: the row-major A of a plain matmul, one pixel per line.
    Lines {
        /// `LINE_STRIDE`: atoms from one line to the next.
        line: u32,
        /// `SURF_STRIDE`: the signed correction between surfaces.
        surf: i32,
    },
}

/// The feature cube a task reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FeatureRead {
    /// Where the task's first line starts.
    pub addr: DmaAddr,
    /// Pixels per line.
    pub width: u32,
    /// Lines the task reads.
    pub height: u32,
    /// Channels, padded to what the task reads (every one holds data).
    pub channels: u32,
    /// How lines and surfaces are laid out.
    pub strides: Strides,
}

/// The convolution window and its stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    /// Kernel size, padding, dilation and the depthwise mode.
    pub kernel: Kernel,
    /// Stride (x, y).
    pub stride: (u32, u32),
}

impl Window {
    /// The 1×1 direct, unpadded, unit-stride window of a matmul.
    pub(crate) fn point() -> Window {
        Window {
            kernel: Kernel::default(),
            stride: (1, 1),
        }
    }
}

/// What one convolution-shaped task reads and how the CBUF holds it; the output's
/// width and height. Everything else the CNA and CORE write follows from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConvRead {
    /// Input and processing precision.
    pub precision: Precision,
    /// The feature cube.
    pub feature: FeatureRead,
    /// The weights: address and kernels (output channels; 1 for a depthwise task).
    pub weights: Weights,
    /// The window.
    pub window: Window,
    /// Output width and height in pixels.
    pub out: (u32, u32),
    /// CBUF banks for the feature data; the rest hold weights.
    pub data_banks: u32,
    /// `DATA_REUSE`: the previous task of the chain left this feature data.
    pub data_reuse: bool,
    /// `WEIGHT_REUSE`: the previous task of the chain left these weights.
    pub weight_reuse: bool,
}

fn unsupported(why: String) -> Error {
    Error::Unsupported {
        what: "convolution-shaped task",
        why,
    }
}

impl ConvRead {
    /// The CNA and CORE of the task, with the values every validated matmul and
    /// convolution program uses (docs/hardware/matmul-programs.md#validated-values,
    /// docs/hardware/convolution.md#registers): one core, the input converter bypassed,
    /// bursts of 15, `FC_DATA_BANK` 0, `FEATURE_GRAINS` one more line than the task
    /// reads (at most the field's 1023, docs/hardware/quirks.md#quirk-5), and the CORE's
    /// `QD_EN` set for every precision as the vendor runtime's programs do
    /// (docs/conformance.md).
    pub(crate) fn emit(&self) -> Result<(Cna, Core)> {
        let p = self.precision;
        let f = &self.feature;
        let (line_stride, surf_stride, group_line_off) = match f.strides {
            Strides::Surfaces { atoms } => {
                let surf = i64::try_from(atoms)
                    .ok()
                    .and_then(|a| a.checked_sub(4 * i64::from(f.width)))
                    .and_then(|s| i32::try_from(s).ok())
                    .ok_or_else(|| {
                        unsupported(format!(
                            "surfaces {atoms} atoms apart with {}-pixel lines: the stride is beyond 32 bits",
                            f.width
                        ))
                    })?;
                let line = f.width.checked_mul(4).ok_or_else(|| {
                    unsupported(format!("line stride of {} pixels beyond 32 bits", f.width))
                })?;
                (line, surf, false)
            }
            Strides::Lines { line, surf } => (line, surf, true),
        };
        let (ow, oh) = self.out;
        let weight_banks = cbuf::BANKS.checked_sub(self.data_banks).ok_or_else(|| {
            unsupported(format!(
                "{} data banks of a {}-bank CBUF",
                self.data_banks,
                cbuf::BANKS
            ))
        })?;
        let cna = Cna {
            core_split: 0,
            precision: p,
            feature: Feature {
                addr: f.addr,
                width: f.width,
                height: f.height,
                channels: f.channels,
                channels_real: f.channels,
                line_stride,
                surf_stride,
                group_line_off,
                grains: f
                    .height
                    .saturating_add(1)
                    .min(ConvCon2::FEATURE_GRAINS.max()),
                planar_width: None,
            },
            weights: self.weights,
            conv: Conv {
                out_width: ow,
                out_atomics: ow.saturating_mul(oh),
                stride: self.window.stride,
            },
            kernel: self.window.kernel,
            cbuf: Cbuf {
                data_banks: self.data_banks,
                weight_banks,
                fc_data_banks: 0,
                data_reuse: self.data_reuse,
                weight_reuse: self.weight_reuse,
                data_entries: self.data_entries()?,
            },
            cvt: InputCvt::bypassed(true),
            burst: (15, 15),
        };
        // A depthwise task writes one output channel per input channel.
        let out_channels = if self.window.kernel.depthwise {
            f.channels
        } else {
            self.weights.kernels
        };
        let core = Core {
            precision: p,
            qd_en: true,
            depthwise: self.window.kernel.depthwise,
            out: (ow, oh, out_channels),
        };
        Ok((cna, core))
    }

    /// `DATA_ENTRIES`: 64-byte CBUF entries of one feature line. int4 rounds each pixel
    /// up to whole entries, as every validated int4 program does; the other precisions
    /// round the whole line.
    fn data_entries(&self) -> Result<u32> {
        let f = &self.feature;
        let bits = u64::from(self.precision.bits());
        let entries = if self.precision == Precision::Int4 {
            u64::from(f.width) * (u64::from(f.channels) * bits / 8).div_ceil(cbuf::ENTRY_BYTES)
        } else {
            (u64::from(f.width) * u64::from(f.channels) * bits / 8).div_ceil(cbuf::ENTRY_BYTES)
        };
        u32::try_from(entries)
            .map_err(|_| unsupported(format!("{entries} CBUF entries per line beyond 32 bits")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read of `width` × `height` pixels of 32 channels from a tensor `lines` lines
    /// high, 8 kernels of a 3×3 window.
    fn read(p: Precision, width: u32, height: u32, lines: u32) -> ConvRead {
        ConvRead {
            precision: p,
            feature: FeatureRead {
                addr: DmaAddr::Fixed(0x1000),
                width,
                height,
                channels: 32,
                strides: Strides::Surfaces {
                    atoms: u64::from(width) * u64::from(lines),
                },
            },
            weights: Weights {
                addr: DmaAddr::Fixed(0x8000),
                kernels: 8,
            },
            window: Window {
                kernel: Kernel {
                    width: 3,
                    height: 3,
                    ..Kernel::default()
                },
                stride: (1, 1),
            },
            out: (width.saturating_sub(2), height.saturating_sub(2)),
            data_banks: 4,
            data_reuse: false,
            weight_reuse: false,
        }
    }

    #[test]
    fn surfaces_step_over_the_whole_tensor_not_the_band() {
        // NC1HWC2: a line is W atoms, a surface W × (tensor lines) atoms.
        let (cna, _) = read(Precision::Fp16, 7, 3, 10).emit().unwrap();
        assert_eq!(cna.feature.strides(), (7 * 16, 7 * 10 * 16));
        assert!(!cna.feature.group_line_off);
        assert_eq!(cna.feature.grains, 4);
        assert_eq!(cna.conv.out_atomics, 5);
    }

    #[test]
    fn explicit_line_strides_are_kept_in_atoms() {
        let mut r = read(Precision::Int8, 1, 9, 9);
        r.feature.strides = Strides::Lines { line: 2, surf: 0 };
        let (cna, _) = r.emit().unwrap();
        assert!(cna.feature.group_line_off);
        // Two atoms from one pixel's line to the next; a surface one width on.
        assert_eq!(cna.feature.strides(), (32, 16));
    }

    #[test]
    fn int4_rounds_each_pixel_to_whole_entries() {
        // 3 pixels of 32 channels: int4 16 bytes a pixel, int8 32, fp16 64.
        let entries = |p| read(p, 3, 3, 3).emit().unwrap().0.cbuf.data_entries;
        assert_eq!(entries(Precision::Int4), 3);
        assert_eq!(entries(Precision::Int8), 2);
        assert_eq!(entries(Precision::Fp16), 3);
    }

    #[test]
    fn the_banks_split_and_the_core_follows_the_window() {
        let (cna, core) = read(Precision::Int8, 6, 6, 6).emit().unwrap();
        assert_eq!((cna.cbuf.data_banks, cna.cbuf.weight_banks), (4, 8));
        assert_eq!(core.out, (4, 4, 8));
        let mut dw = read(Precision::Int8, 6, 6, 6);
        dw.window.kernel.depthwise = true;
        dw.weights.kernels = 1;
        let (_, core) = dw.emit().unwrap();
        assert!(core.depthwise);
        assert_eq!(core.out, (4, 4, 32));
    }

    #[test]
    fn impossible_geometry_is_refused() {
        let mut r = read(Precision::Int8, 6, 6, 6);
        r.data_banks = cbuf::BANKS + 1;
        assert!(matches!(r.emit(), Err(Error::Unsupported { .. })));
        let wide = read(Precision::Int8, u32::MAX / 2, 6, u32::MAX);
        assert!(matches!(wide.emit(), Err(Error::Unsupported { .. })));
    }
}
