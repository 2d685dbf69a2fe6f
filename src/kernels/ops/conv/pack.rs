//! The host side of a convolution: its input, output and weights laid out as the tasks
//! read and write them.

use super::{Conv2d, invalid};
use crate::error::Result;
use crate::kernels::ops::Element;

impl Conv2d {
    /// Lays out `hwc` (row-major `[h][w][c]`, the real C) as [`Conv2d::input_cube`].
    pub fn pack_input<T: Element>(&self, hwc: &[T]) -> Result<Vec<u8>> {
        let cube = self.input_cube()?;
        let (c, cp) = (self.input.channels as usize, cube.channels as usize);
        if hwc.len() != self.input.elems() {
            return Err(invalid(format!(
                "{} input values for a {}x{}x{c} tensor",
                hwc.len(),
                self.input.height,
                self.input.width
            )));
        }
        if cp == c {
            return cube.pack(hwc);
        }
        let zero = T::read_le(&[0; 4]);
        let mut padded = Vec::with_capacity(cube.elems());
        for px in hwc.chunks_exact(c) {
            padded.extend_from_slice(px);
            padded.extend(std::iter::repeat_n(zero, cp - c));
        }
        cube.pack(&padded)
    }

    /// Reads the output cube back into row-major `[oh][ow][oc]` (the real output
    /// channels).
    pub fn unpack_output<T: Element>(&self, bytes: &[u8]) -> Result<Vec<T>> {
        let cube = self.output_cube()?;
        let all: Vec<T> = cube.unpack(bytes)?;
        let cp = cube.channels as usize;
        let gk = if self.depthwise {
            cp
        } else {
            self.group_kernels() as usize
        };
        let go = if self.depthwise {
            self.out_channels as usize
        } else {
            self.group_out() as usize
        };
        let mut out = Vec::with_capacity(cube.pixels() as usize * self.out_channels as usize);
        for px in all.chunks_exact(cp) {
            for g in 0..self.groups as usize {
                out.extend_from_slice(&px[g * gk..g * gk + go]);
            }
        }
        Ok(out)
    }

    /// Bytes of the packed weights.
    pub fn weight_bytes(&self) -> Result<u64> {
        self.check()?;
        let kernels = if self.depthwise {
            1
        } else {
            self.group_kernels()
        };
        Ok(self.kernel_bytes() * u64::from(kernels) * u64::from(self.groups))
    }

    /// Packs weights given as `[oc][kh][kw][c / groups]` (depthwise: `[c][kh][kw]`)
    /// into the native layout (docs/hardware/convolution.md#weights): direct kernels in
    /// 1024-byte atoms of (16 fp16 | 32 int8) kernels × 32 channels, ordered `[kernel
    /// atom][channel block][kh][kw]`; depthwise windows in groups of (32 fp16 | 64 int8)
    /// channels, ordered `[channel group][kh][kw][channel]`. Padding kernels and channels
    /// are 0. Each group's kernels follow the previous group's.
    pub fn pack_weights<T: Element>(&self, w: &[T]) -> Result<Vec<u8>> {
        self.check()?;
        if T::PRECISION != self.prec() {
            return Err(invalid(format!(
                "{} weights for a {} convolution",
                T::PRECISION,
                self.prec()
            )));
        }
        let (kh, kw) = (self.kernel.0 as usize, self.kernel.1 as usize);
        let taps = kh * kw;
        let cg = if self.depthwise {
            1
        } else {
            self.group_in() as usize
        };
        let want = self.out_channels as usize * taps * cg;
        if w.len() != want {
            return Err(invalid(format!(
                "{} weights for {} kernels of {kh}x{kw}x{cg}",
                w.len(),
                self.out_channels
            )));
        }
        let size = self.prec().bytes() as usize;
        let mut out = vec![0u8; self.weight_bytes()? as usize];
        let c = self.task_in_channels() as usize;
        if self.depthwise {
            let g = self.dw_group() as usize;
            for ch in 0..self.input.channels as usize {
                for t in 0..taps {
                    let i = ((ch / g) * taps + t) * g + ch % g;
                    w[ch * taps + t].write_le(&mut out[i * size..(i + 1) * size]);
                }
            }
            return Ok(out);
        }
        let kpa = self.prec().kernels_per_atom() as usize;
        let blocks = c / 32;
        let gk = self.group_kernels() as usize;
        let group_bytes = gk * taps * c * size;
        for g in 0..self.groups as usize {
            for j in 0..self.group_out() as usize {
                let oc = g * self.group_out() as usize + j;
                for t in 0..taps {
                    for ic in 0..cg {
                        let atom = ((j / kpa) * blocks + ic / 32) * taps + t;
                        let i = (atom * kpa + j % kpa) * 32 + ic % 32;
                        let at = g * group_bytes + i * size;
                        w[(oc * taps + t) * cg + ic].write_le(&mut out[at..at + size]);
                    }
                }
            }
        }
        Ok(out)
    }
}
