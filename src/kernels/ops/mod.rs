//! Operations beyond matmul — element-wise, LUT activations, convolution, pooling and
//! requantisation epilogues — as generators of typed [`Task`] values (docs/ops.md).
//!
//! Every operation here works on tensors in the NPU's native feature layout, NC1HWC2 with
//! 16-byte atoms ([`Cube`]): the layout a convolution reads, the DPU writes and the PPU
//! pools, so the output of one operation is directly the input of the next without the
//! host (docs/ops.md, "Tensors on the device"). A generator takes its tensors as
//! [`DmaAddr`]s — relocations into buffers the caller names, or fixed addresses — and
//! returns the tasks; [`chain`] makes them one program, and a layer program chains the
//! tasks of several operations.
//!
//! ```
//! use half::f16;
//! use rknpu_driver::kernels::ops::Cube;
//! use rknpu_driver::task::Precision;
//!
//! // 2 × 3 pixels of 10 fp16 channels: two surfaces of 8-channel atoms.
//! let cube = Cube::new(3, 2, 10, Precision::Fp16)?;
//! assert_eq!(cube.surfaces(), 2);
//! assert_eq!(cube.bytes(), 2 * 2 * 3 * 16);
//! let hwc: Vec<f16> = (0..60).map(|i| f16::from_f32(i as f32)).collect();
//! let packed = cube.pack(&hwc)?;
//! assert_eq!(cube.unpack::<f16>(&packed)?, hwc);
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

pub mod contract;
pub mod conv;
pub mod eltwise;
pub mod epilogue;
pub mod lower;
pub mod lut;
pub mod pool;
pub mod residual;

use crate::error::{Error, Result};
use crate::regcmd::{BufferId, DmaAddr, Program, ProgramBuilder};
use crate::task::{Precision, Task};
use half::{bf16, f16};

/// The buffer holding an operation's program.
pub const REGCMD: BufferId = BufferId(0);
/// The first input tensor.
pub const INPUT: BufferId = BufferId(1);
/// The second input tensor of a two-operand operation (the element-wise operand).
pub const OPERAND: BufferId = BufferId(2);
/// Convolution weights.
pub const WEIGHTS: BufferId = BufferId(3);
/// Per-channel parameters (bias, scales) of an epilogue.
pub const PARAMS: BufferId = BufferId(4);
/// The output tensor.
pub const OUTPUT: BufferId = BufferId(5);

/// The geometry of a tensor in the native feature layout NC1HWC2: `height × width`
/// pixels of `channels` channels, stored as `⌈channels / E⌉` surfaces of `height × width`
/// 16-byte atoms of E = 16 / element-bytes channels each; channel `c` of pixel `(x, y)`
/// is at byte [`Cube::offset`]`(x, y, c)`. The channels past `channels` in the last atom
/// are padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cube {
    /// Pixels per line.
    pub width: u32,
    /// Lines.
    pub height: u32,
    /// Channels that hold data.
    pub channels: u32,
    /// Element type.
    pub precision: Precision,
}

/// The largest width, height or channel count a DPU, PPU or CNA cube register holds
/// (13-bit `size − 1` fields).
pub const MAX_CUBE_DIM: u32 = 8192;

impl Cube {
    /// A cube, refused when a dimension is 0 or above [`MAX_CUBE_DIM`], the element type
    /// is int4 (no feature cube of the operations holds int4), or it does not fit 32-bit
    /// device addresses.
    pub fn new(width: u32, height: u32, channels: u32, precision: Precision) -> Result<Cube> {
        let cube = Cube {
            width,
            height,
            channels,
            precision,
        };
        for (name, v) in [("width", width), ("height", height), ("channels", channels)] {
            if v == 0 || v > MAX_CUBE_DIM {
                return Err(Error::Unsupported {
                    what: "tensor cube",
                    why: format!("{name} {v}; the cube registers hold 1..={MAX_CUBE_DIM}"),
                });
            }
        }
        if precision == Precision::Int4 {
            return Err(Error::Unsupported {
                what: "tensor cube",
                why: "int4 tensors are weights only".into(),
            });
        }
        if cube.bytes() > u64::from(u32::MAX) {
            return Err(Error::Unsupported {
                what: "tensor cube",
                why: format!("{} bytes do not fit 32-bit device addresses", cube.bytes()),
            });
        }
        Ok(cube)
    }

    /// The same geometry with another element type.
    pub fn with_precision(&self, precision: Precision) -> Result<Cube> {
        Cube::new(self.width, self.height, self.channels, precision)
    }

    /// Elements in one 16-byte atom (the C2 of NC1HWC2).
    pub const fn atom_elems(&self) -> u32 {
        16 / self.precision.bytes()
    }

    /// Surfaces (the C1 of NC1HWC2): `⌈channels / atom_elems⌉`.
    pub const fn surfaces(&self) -> u32 {
        self.channels.div_ceil(self.atom_elems())
    }

    /// Channels rounded up to whole atoms.
    pub const fn padded_channels(&self) -> u32 {
        self.surfaces() * self.atom_elems()
    }

    /// Pixels (`width × height`).
    pub const fn pixels(&self) -> u64 {
        self.width as u64 * self.height as u64
    }

    /// Bytes of one surface (`width × height` atoms).
    pub const fn surface_bytes(&self) -> u64 {
        self.pixels() * 16
    }

    /// Bytes of the whole cube.
    pub const fn bytes(&self) -> u64 {
        self.surface_bytes() * self.surfaces() as u64
    }

    /// Elements in host order (`height × width × channels`).
    pub const fn elems(&self) -> usize {
        (self.pixels() * self.channels as u64) as usize
    }

    /// Byte offset of channel `c` of pixel `(x, y)`.
    pub const fn offset(&self, x: u32, y: u32, c: u32) -> u64 {
        let e = self.atom_elems();
        (c / e) as u64 * self.surface_bytes()
            + (y as u64 * self.width as u64 + x as u64) * 16
            + (c % e) as u64 * self.precision.bytes() as u64
    }

    fn check_elem<T: Element>(&self) -> Result<()> {
        if T::PRECISION != self.precision {
            return Err(Error::InvalidArgument {
                what: format!(
                    "{} values for a cube of {}",
                    T::PRECISION.name(),
                    self.precision
                ),
            });
        }
        Ok(())
    }

    /// Lays out `hwc` (row-major `[height][width][channels]`) in the native layout; the
    /// padding channels are 0.
    pub fn pack<T: Element>(&self, hwc: &[T]) -> Result<Vec<u8>> {
        self.check_elem::<T>()?;
        if hwc.len() != self.elems() {
            return Err(Error::InvalidArgument {
                what: format!(
                    "{} values for a {}x{}x{} cube of {} (height x width x channels)",
                    hwc.len(),
                    self.height,
                    self.width,
                    self.channels,
                    self.elems()
                ),
            });
        }
        let mut out = vec![0u8; self.bytes() as usize];
        let b = self.precision.bytes() as usize;
        let c = self.channels as usize;
        for (p, pixel) in hwc.chunks_exact(c).enumerate() {
            let (x, y) = (p as u32 % self.width, p as u32 / self.width);
            for (ch, v) in pixel.iter().enumerate() {
                let at = self.offset(x, y, ch as u32) as usize;
                v.write_le(&mut out[at..at + b]);
            }
        }
        Ok(out)
    }

    /// Reads `bytes` (at least [`Cube::bytes`] of them, in the native layout) back into
    /// row-major `[height][width][channels]`.
    pub fn unpack<T: Element>(&self, bytes: &[u8]) -> Result<Vec<T>> {
        self.check_elem::<T>()?;
        if (bytes.len() as u64) < self.bytes() {
            return Err(Error::InvalidArgument {
                what: format!("{} bytes for a cube of {} bytes", bytes.len(), self.bytes()),
            });
        }
        let b = self.precision.bytes() as usize;
        let mut out = Vec::with_capacity(self.elems());
        for y in 0..self.height {
            for x in 0..self.width {
                for ch in 0..self.channels {
                    let at = self.offset(x, y, ch) as usize;
                    out.push(T::read_le(&bytes[at..at + b]));
                }
            }
        }
        Ok(out)
    }
}

/// An element type a [`Cube`] holds on the host.
pub trait Element: Copy {
    /// The NPU precision it is.
    const PRECISION: Precision;
    /// Writes the little-endian bytes (`out` has the element's size).
    fn write_le(self, out: &mut [u8]);
    /// Reads it from little-endian bytes.
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $p:expr, $n:expr, $to:expr, $from:expr) => {
        impl Element for $t {
            const PRECISION: Precision = $p;
            fn write_le(self, out: &mut [u8]) {
                let f: fn($t) -> [u8; $n] = $to;
                out.copy_from_slice(&f(self));
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut a = [0u8; $n];
                a.copy_from_slice(&bytes[..$n]);
                let f: fn([u8; $n]) -> $t = $from;
                f(a)
            }
        }
    };
}

element!(i8, Precision::Int8, 1, i8::to_le_bytes, i8::from_le_bytes);
element!(
    i16,
    Precision::Int16,
    2,
    i16::to_le_bytes,
    i16::from_le_bytes
);
element!(
    i32,
    Precision::Int32,
    4,
    i32::to_le_bytes,
    i32::from_le_bytes
);
element!(
    f32,
    Precision::Fp32,
    4,
    f32::to_le_bytes,
    f32::from_le_bytes
);
element!(
    f16,
    Precision::Fp16,
    2,
    f16::to_le_bytes,
    f16::from_le_bytes
);
element!(
    bf16,
    Precision::Bf16,
    2,
    bf16::to_le_bytes,
    bf16::from_le_bytes
);

/// The relocation of byte `offset` in `buffer`.
pub const fn at(buffer: BufferId, offset: u32) -> DmaAddr {
    DmaAddr::reloc(buffer, offset)
}

/// The tasks as one chain of one program whose list lives in [`REGCMD`].
pub fn chain(tasks: &[Task]) -> Result<Program> {
    if tasks.is_empty() {
        return Err(Error::InvalidArgument {
            what: "a program of no task".into(),
        });
    }
    let mut p = ProgramBuilder::new(REGCMD);
    for t in tasks {
        p.push_task(t.body()?, t.enable());
    }
    p.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_follow_nc1hwc2() {
        let c = Cube::new(5, 3, 20, Precision::Int8).unwrap();
        assert_eq!(c.atom_elems(), 16);
        assert_eq!(c.surfaces(), 2);
        assert_eq!(c.offset(0, 0, 0), 0);
        assert_eq!(c.offset(1, 0, 0), 16);
        assert_eq!(c.offset(0, 1, 0), 5 * 16);
        assert_eq!(c.offset(0, 0, 15), 15);
        assert_eq!(c.offset(4, 2, 17), 5 * 3 * 16 + (2 * 5 + 4) * 16 + 1);
        let f = Cube::new(2, 2, 9, Precision::Fp32).unwrap();
        assert_eq!(f.surfaces(), 3);
        assert_eq!(f.offset(1, 1, 8), 2 * 4 * 16 + 3 * 16);
    }

    #[test]
    fn pack_and_unpack_round_trip_with_zero_padding() {
        let c = Cube::new(3, 2, 5, Precision::Int16).unwrap();
        let v: Vec<i16> = (0..30).map(|i| i * 1000 - 15000).collect();
        let bytes = c.pack(&v).unwrap();
        assert_eq!(bytes.len(), 3 * 2 * 16);
        assert_eq!(c.unpack::<i16>(&bytes).unwrap(), v);
        // Channels 5..8 of every atom are padding.
        for p in 0..6 {
            assert!(bytes[p * 16 + 10..p * 16 + 16].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn bad_cubes_and_values_are_refused() {
        assert!(Cube::new(0, 1, 1, Precision::Int8).is_err());
        assert!(Cube::new(1, 8193, 1, Precision::Int8).is_err());
        assert!(Cube::new(1, 1, 1, Precision::Int4).is_err());
        assert!(Cube::new(8192, 8192, 8192, Precision::Fp32).is_err());
        let c = Cube::new(2, 2, 2, Precision::Int8).unwrap();
        assert!(c.pack(&[0i8; 7]).is_err());
        assert!(c.pack(&[0i16; 8]).is_err());
        assert!(c.unpack::<i8>(&[0u8; 63]).is_err());
        assert!(chain(&[]).is_err());
    }
}
