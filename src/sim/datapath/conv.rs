//! The CNA and CORE: feature and weight fetch, and the multiply-accumulate of direct,
//! depthwise and windowed convolutions.

use super::run;
use super::{Values, le16, nibble};
use crate::float::{bf16_to_f32, f16_to_f32};
use crate::regs::Block;
use crate::regs::{Register, cna};
use crate::sim::error::{At, SimError};
use crate::sim::exec::{Feature, Weights, Window};
use crate::sim::memory::Memory;
use crate::task::Precision;

/// CNA feature fetch, CORE multiply-accumulate. Adds the bytes of every feature run to
/// `fetched` and of the weight read to `weighed`.
///
/// A 1×1 window is the matmul path of the board-validated programs, unchanged. A K×K
/// window gathers, for every output pixel, the input pixels under each kernel tap
/// (stride, dilation, padding with the pad value) into one row of taps × C values and
/// multiplies it with the kernels laid out the same way (docs/simulator.md,
/// "Convolution"): int8 sums in 32 bits, exactly; fp16 products are exact in f32 and
/// summed in f32.
pub(super) fn conv(
    mem: &Memory,
    f: &Feature,
    w: &Weights,
    win: &Window,
    at: At,
    fetched: &mut u64,
    weighed: &mut u64,
) -> Result<(Values, u64), SimError> {
    let pixels = f.w as usize * f.h as usize;
    let c = f.c as usize;
    let n = w.n as usize;
    let taps = win.taps() as usize;
    let out_pixels = win.out_w as usize * win.out_h as usize;
    let macs =
        out_pixels as u64 * n as u64 * taps as u64 * if win.depthwise { 1 } else { c as u64 };
    let weight_reg = cna::DcompAddr0::NAME;
    // Depthwise: one window per channel; planar: the one kernel in memory, the CORE's
    // other 15 channels come from no weights (zero).
    let kernels = if win.depthwise || f.planar { 1 } else { n };
    let wbytes = kernels * taps * c * w.prec.bits() as usize / 8;
    let wdata = run(mem, w.base as i64, wbytes, at, Block::Cna, weight_reg)?;
    *weighed += wdata.len() as u64;
    let g = w.prec.kernels_per_atom() as usize;
    let row_bytes = 32 * w.prec.bits() as usize / 8;
    let kblocks = c / 32;
    // Offset of kernel j's 32-channel block kb at tap t in the weight atoms: atoms of g
    // kernels × 32 channels, ordered [kernel group][channel block][tap]
    // (docs/hardware/convolution.md#weights; at 1×1 docs/hardware/matmul-programs.md#weights).
    let woff = |j: usize, kb: usize, t: usize| {
        (((j / g) * kblocks + kb) * taps + t) * 1024 + (j % g) * row_bytes
    };

    let unit = taps == 1 && out_pixels == pixels && win.pad == (0, 0) && !win.depthwise;

    let values = match f.prec {
        Precision::Int8 | Precision::Int4 => {
            let mut a = vec![0i16; pixels * c];
            let int4 = f.prec == Precision::Int4;
            each_atom(mem, f, at, fetched, &mut |p, ch, atom| {
                let dst = &mut a[p * c + ch..];
                if int4 {
                    for (i, &b) in atom.iter().enumerate() {
                        dst[2 * i] = nibble(b >> 4);
                        dst[2 * i + 1] = nibble(b & 0xF);
                    }
                } else {
                    for (d, &b) in dst.iter_mut().zip(atom) {
                        *d = b as i8 as i16;
                    }
                }
            })?;
            if !unit {
                let pad = win.pad_value as i16;
                return Ok((Values::Int(window(&a, wdata, f, w, win, pad)), macs));
            }
            let b = weights_int(wdata, n, c, row_bytes, int4, woff);
            let mut acc = gemm_i16(&a, &b, pixels, n, c);
            if int4 {
                // The CORE accumulates int4 products in int16 and saturates (quirk 13,
                // docs/hardware/quirks.md#quirk-13).
                for v in &mut acc {
                    *v = (*v).clamp(i16::MIN as i64, i16::MAX as i64);
                }
            }
            Values::Int(acc)
        }
        Precision::Int16 => {
            let mut a = vec![0i32; pixels * c];
            each_atom(mem, f, at, fetched, &mut |p, ch, atom| {
                for e in 0..8 {
                    a[p * c + ch + e] = le16(atom, 2 * e) as i16 as i32;
                }
            })?;
            let mut b = vec![0i32; n * c];
            for j in 0..n {
                for kb in 0..kblocks {
                    let o = woff(j, kb, 0);
                    for e in 0..32 {
                        b[j * c + kb * 32 + e] = le16(wdata, o + 2 * e) as i16 as i32;
                    }
                }
            }
            let mut acc = vec![0i64; pixels * n];
            for p in 0..pixels {
                let ar = &a[p * c..p * c + c];
                for j in 0..n {
                    let br = &b[j * c..j * c + c];
                    acc[p * n + j] = ar.iter().zip(br).map(|(&x, &y)| x as i64 * y as i64).sum();
                }
            }
            Values::Int(acc)
        }
        Precision::Int32 | Precision::Fp32 => {
            return Err(SimError::Setup {
                why: format!("{} is no CNA input precision", f.prec),
            });
        }
        Precision::Fp16 | Precision::Bf16 => {
            let conv = if f.prec == Precision::Fp16 {
                f16_to_f32
            } else {
                bf16_to_f32
            };
            let mut a = vec![0f32; pixels * c];
            each_atom(mem, f, at, fetched, &mut |p, ch, atom| {
                for e in 0..8 {
                    a[p * c + ch + e] = conv(le16(atom, 2 * e));
                }
            })?;
            if !unit {
                let pad = conv(win.pad_value as u16);
                return Ok((Values::Float(window(&a, wdata, f, w, win, pad)), macs));
            }
            let b = weights_f32(wdata, n, c, f.planar, conv, woff);
            Values::Float(gemm_f32(&a, &b, pixels, n, c))
        }
    };
    Ok((values, macs))
}

/// Visits every feature atom of `f`: (pixel, first channel, 16 bytes), adding the bytes
/// read to `fetched`.
fn each_atom(
    mem: &Memory,
    f: &Feature,
    at: At,
    fetched: &mut u64,
    visit: &mut dyn FnMut(usize, usize, &[u8]),
) -> Result<(), SimError> {
    let feature_reg = cna::FeatureDataAddr::NAME;
    let c = f.c as usize;
    let epa = f.prec.atom_elems() as usize;
    if f.planar {
        // One plane of fp16 lines; the atom of each pixel holds it in channel 0 and
        // zero in the padded channels (docs/hardware/convolution.md#planar-input).
        for y in 0..f.h as usize {
            let addr = f.base as i64 + y as i64 * f.line;
            let bytes = run(mem, addr, f.w as usize * 2, at, Block::Cna, feature_reg)?;
            *fetched += bytes.len() as u64;
            for x in 0..f.w as usize {
                let mut atom = [0u8; 16];
                atom[..2].copy_from_slice(&bytes[2 * x..2 * x + 2]);
                visit(y * f.w as usize + x, 0, &atom);
            }
        }
        return Ok(());
    }
    for c1 in 0..c / epa {
        for y in 0..f.h as usize {
            let addr = f.base as i64 + c1 as i64 * f.surf + y as i64 * f.line;
            let bytes = run(mem, addr, f.w as usize * 16, at, Block::Cna, feature_reg)?;
            *fetched += bytes.len() as u64;
            for x in 0..f.w as usize {
                visit(y * f.w as usize + x, c1 * epa, &bytes[x * 16..x * 16 + 16]);
            }
        }
    }
    Ok(())
}

/// The 1×1 integer weights of `n` kernels over `c` channels as rows of `c` values (int4
/// unpacked), each 32-channel block `row_bytes` long at `woff(kernel, block, 0)` in
/// `wdata`.
fn weights_int(
    wdata: &[u8],
    n: usize,
    c: usize,
    row_bytes: usize,
    int4: bool,
    woff: impl Fn(usize, usize, usize) -> usize,
) -> Vec<i16> {
    let kblocks = c / 32;
    let mut b = vec![0i16; n * c];
    for j in 0..n {
        for kb in 0..kblocks {
            let src = &wdata[woff(j, kb, 0)..woff(j, kb, 0) + row_bytes];
            let dst = &mut b[j * c + kb * 32..j * c + kb * 32 + 32];
            if int4 {
                for (i, &v) in src.iter().enumerate() {
                    dst[2 * i] = nibble(v >> 4);
                    dst[2 * i + 1] = nibble(v & 0xF);
                }
            } else {
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d = v as i8 as i16;
                }
            }
        }
    }
    b
}

/// The 1×1 16-bit float weights of `n` kernels over `c` channels as rows of `c` values
/// (`planar`: the one kernel over the 8 padded channels), each 32-channel block at
/// `woff(kernel, block, 0)` in `wdata`, converted by `conv`.
fn weights_f32(
    wdata: &[u8],
    n: usize,
    c: usize,
    planar: bool,
    conv: fn(u16) -> f32,
    woff: impl Fn(usize, usize, usize) -> usize,
) -> Vec<f32> {
    let kblocks = c / 32;
    let mut b = vec![0f32; n * c];
    if planar {
        // The one 1x1 kernel over the 8 padded channels: 8 halves in order.
        for (e, v) in b.iter_mut().take(c).enumerate() {
            *v = conv(le16(wdata, 2 * e));
        }
    }
    for j in 0..n {
        for kb in 0..kblocks {
            let o = woff(j, kb, 0);
            for e in 0..32 {
                b[j * c + kb * 32 + e] = conv(le16(wdata, o + 2 * e));
            }
        }
    }
    b
}

/// The input pixel under tap `(kx, ky)` of output pixel `(ox, oy)`, or `None` in the
/// padding.
fn tap_pixel(
    f: &Feature,
    win: &Window,
    ox: usize,
    oy: usize,
    kx: usize,
    ky: usize,
) -> Option<usize> {
    let x = (ox * win.stride.0 as usize + kx * win.dilation.0 as usize) as i64 - win.pad.0 as i64;
    let y = (oy * win.stride.1 as usize + ky * win.dilation.1 as usize) as i64 - win.pad.1 as i64;
    ((0..f.w as i64).contains(&x) && (0..f.h as i64).contains(&y))
        .then(|| y as usize * f.w as usize + x as usize)
}

/// For every output pixel, the feature values under each tap (`[pixel][tap][channel]`),
/// the pad value outside the feature.
fn gather<T: Copy>(a: &[T], f: &Feature, win: &Window, pad: T) -> Vec<T> {
    let c = f.c as usize;
    let (ow, oh) = (win.out_w as usize, win.out_h as usize);
    let (kw, kh) = (win.kw as usize, win.kh as usize);
    let mut out = Vec::with_capacity(ow * oh * kw * kh * c);
    for oy in 0..oh {
        for ox in 0..ow {
            for ky in 0..kh {
                for kx in 0..kw {
                    match tap_pixel(f, win, ox, oy, kx, ky) {
                        Some(p) => out.extend_from_slice(&a[p * c..(p + 1) * c]),
                        None => out.extend(std::iter::repeat_n(pad, c)),
                    }
                }
            }
        }
    }
    out
}

/// The kernels as rows of `[tap][channel]` (direct), or `[tap][channel]` once for all
/// channels (depthwise: channel group of [`crate::sim::exec::depthwise_group`] channels,
/// `[group][tap][channel in group]`, docs/hardware/convolution.md#weights).
fn kernel_rows<T: Copy + Default>(
    wdata: &[u8],
    f: &Feature,
    w: &Weights,
    win: &Window,
    elem: impl Fn(&[u8], usize) -> T,
) -> Vec<T> {
    let c = f.c as usize;
    let taps = win.taps() as usize;
    let size = w.prec.bytes() as usize;
    if win.depthwise {
        let group = crate::sim::exec::depthwise_group(w.prec) as usize;
        let mut out = vec![T::default(); taps * c];
        for ch in 0..c {
            for t in 0..taps {
                let i = ((ch / group) * taps + t) * group + ch % group;
                out[t * c + ch] = elem(wdata, i * size);
            }
        }
        return out;
    }
    let n = w.n as usize;
    let g = w.prec.kernels_per_atom() as usize;
    let kblocks = c / 32;
    let mut out = vec![T::default(); n * taps * c];
    for j in 0..n {
        for kb in 0..kblocks {
            for t in 0..taps {
                let atom = (((j / g) * kblocks + kb) * taps + t) * 1024 + (j % g) * 32 * size;
                for e in 0..32 {
                    out[(j * taps + t) * c + kb * 32 + e] = elem(wdata, atom + e * size);
                }
            }
        }
    }
    out
}

/// An element of a K×K or depthwise window: how its weights are read, how two multiply
/// in a depthwise sum and which matmul sums a direct window.
trait WindowElem: Copy + Default {
    /// The sum type.
    type Acc: Copy + Default + std::ops::Add<Output = Self::Acc>;
    /// The weight at byte `i` of `wdata`.
    fn weight(wdata: &[u8], i: usize) -> Self;
    /// One product of a depthwise sum.
    fn product(self, w: Self) -> Self::Acc;
    /// `acc[p][j] = Σ_k a[p][k] × b[j][k]`.
    fn gemm(a: &[Self], b: &[Self], pixels: usize, n: usize, c: usize) -> Vec<Self::Acc>;
}

/// int8: exact integer sums, 32-bit as the 1×1 path.
impl WindowElem for i16 {
    type Acc = i64;
    fn weight(wdata: &[u8], i: usize) -> i16 {
        wdata[i] as i8 as i16
    }
    fn product(self, w: i16) -> i64 {
        i64::from(self) * i64::from(w)
    }
    fn gemm(a: &[i16], b: &[i16], pixels: usize, n: usize, c: usize) -> Vec<i64> {
        gemm_i16(a, b, pixels, n, c)
    }
}

/// fp16: products exact in f32, summed in f32 (the lane order of [`gemm_f32`]).
impl WindowElem for f32 {
    type Acc = f32;
    fn weight(wdata: &[u8], i: usize) -> f32 {
        f16_to_f32(le16(wdata, i))
    }
    fn product(self, w: f32) -> f32 {
        self * w
    }
    fn gemm(a: &[f32], b: &[f32], pixels: usize, n: usize, c: usize) -> Vec<f32> {
        gemm_f32(a, b, pixels, n, c)
    }
}

/// A K×K or depthwise window of int8 (held as i16) or fp16 (held as f32) values.
fn window<T: WindowElem>(
    a: &[T],
    wdata: &[u8],
    f: &Feature,
    w: &Weights,
    win: &Window,
    pad: T,
) -> Vec<T::Acc> {
    let cols = gather(a, f, win, pad);
    let b = kernel_rows(wdata, f, w, win, T::weight);
    let taps = win.taps() as usize;
    let out_pixels = win.out_w as usize * win.out_h as usize;
    if win.depthwise {
        return depthwise(&cols, &b, out_pixels, taps, f.c as usize);
    }
    T::gemm(&cols, &b, out_pixels, w.n as usize, taps * f.c as usize)
}

/// Depthwise: output channel `ch` of pixel `p` sums channel `ch` over the taps.
fn depthwise<T: WindowElem>(
    cols: &[T],
    b: &[T],
    out_pixels: usize,
    taps: usize,
    c: usize,
) -> Vec<T::Acc> {
    let mut acc = vec![T::Acc::default(); out_pixels * c];
    for p in 0..out_pixels {
        for t in 0..taps {
            let row = &cols[(p * taps + t) * c..(p * taps + t + 1) * c];
            for ch in 0..c {
                acc[p * c + ch] = acc[p * c + ch] + row[ch].product(b[t * c + ch]);
            }
        }
    }
    acc
}

/// `acc[p][j] = Σ_k a[p][k] × b[j][k]` for 8- and 4-bit inputs held as i16; the sums fit
/// i32 for every channel count the registers can express.
pub(super) fn gemm_i16(a: &[i16], b: &[i16], pixels: usize, n: usize, c: usize) -> Vec<i64> {
    let mut acc = vec![0i64; pixels * n];
    let mut p = 0;
    while p + 4 <= pixels {
        let rows = [
            &a[p * c..(p + 1) * c],
            &a[(p + 1) * c..(p + 2) * c],
            &a[(p + 2) * c..(p + 3) * c],
            &a[(p + 3) * c..(p + 4) * c],
        ];
        for j in 0..n {
            let s = dot4(rows, &b[j * c..(j + 1) * c]);
            for (r, v) in s.iter().enumerate() {
                acc[(p + r) * n + j] = *v as i64;
            }
        }
        p += 4;
    }
    for p in p..pixels {
        let ar = &a[p * c..(p + 1) * c];
        for j in 0..n {
            acc[p * n + j] = dot1(ar, &b[j * c..(j + 1) * c]) as i64;
        }
    }
    acc
}

/// Four dot products against one weight row (the row stays in L1 across the four).
fn dot4(rows: [&[i16]; 4], b: &[i16]) -> [i32; 4] {
    rows.map(|r| dot1(r, b))
}

/// A plain integer reduction, which LLVM vectorises (to `pmaddwd` on x86).
fn dot1(a: &[i16], b: &[i16]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x as i32 * y as i32)
        .fold(0i32, |s, v| s.wrapping_add(v))
}

/// Float matmul: products are exact in f32 (fp16 × fp16 and bf16 × bf16 fit a 24-bit
/// mantissa); sums go into eight f32 lanes by channel index mod 8, added pairwise at the end.
pub(super) fn gemm_f32(a: &[f32], b: &[f32], pixels: usize, n: usize, c: usize) -> Vec<f32> {
    let mut acc = vec![0f32; pixels * n];
    for p in 0..pixels {
        let ar = &a[p * c..(p + 1) * c];
        for j in 0..n {
            let br = &b[j * c..(j + 1) * c];
            let mut lanes = [0f32; 8];
            for (x, y) in ar.chunks_exact(8).zip(br.chunks_exact(8)) {
                for l in 0..8 {
                    lanes[l] += x[l] * y[l];
                }
            }
            let s4 = [
                lanes[0] + lanes[4],
                lanes[1] + lanes[5],
                lanes[2] + lanes[6],
                lanes[3] + lanes[7],
            ];
            acc[p * n + j] = (s4[0] + s4[2]) + (s4[1] + s4[3]);
        }
    }
    acc
}
