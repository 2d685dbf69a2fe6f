//! The hot loops: feature and weight fetch, multiply-accumulate, DPU post-processing and
//! the write DMA. Registers are decoded before this point ([`super::config`]); nothing
//! here looks at a register.

use super::dma::DmaCounters;
use super::error::{At, SimError};
use super::exec::{Alu, Cube, EwOp, EwSrc, Feature, Main, OutCvt, Stage, Task, Weights, Window};
use super::memory::Memory;
use crate::float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use crate::regs::{Register, cna};
use crate::task::Precision;

/// Accumulators or DPU values, `[pixel][channel]` with pixel = y × width + x.
enum Values {
    Int(Vec<i64>),
    Float(Vec<f32>),
}

/// Runs a checked task against memory. Returns the multiply-accumulates performed; adds
/// the bytes each DMA engine reads and writes to `dma`, counted at the reads and writes
/// themselves (a feature or weight operand the task reuses from the CBUF is read from
/// memory again, which gives the same values, but is not counted: the CNA does not fetch
/// it).
///
/// Before allocating anything, every cube's element count is checked against
/// [`super::bounds::MAX_ELEMENTS`] and the memory image, and every DMA run the task makes is checked to
/// lie in memory, so a giant or misplaced cube is refused without a large allocation.
pub(super) fn execute(
    mem: &mut Memory,
    t: &Task,
    at: At,
    write_output: bool,
    dma: &mut DmaCounters,
) -> Result<u64, SimError> {
    super::bounds::check_first(mem, t, at)?;
    let (main, macs) = match &t.main {
        Main::Conv {
            feature,
            weights,
            window,
        } => {
            let (mut fetched, mut weighed) = (0, 0);
            let r = conv(
                mem,
                feature,
                weights,
                window,
                at,
                &mut fetched,
                &mut weighed,
            )?;
            if !t.data_reuse {
                dma.cna_feature += fetched;
            }
            if !t.weight_reuse {
                dma.cna_weight += weighed;
            }
            r
        }
        Main::Flying(cube) => (read_cube(mem, cube, at, &mut dma.dpu_mrdma)?, 0),
    };
    let operand = match t.ew.as_ref() {
        Some(
            e @ super::exec::Ew {
                src: EwSrc::Memory(cube),
                ..
            },
        ) => Some(match read_cube(mem, cube, at, &mut dma.dpu_erdma)? {
            // The low 16 bits of each 32-bit element are the fp16 operand.
            Values::Float(v) if e.f16_low_half => Values::Float(
                v.into_iter()
                    .map(|x| f16_to_f32(x.to_bits() as u16))
                    .collect(),
            ),
            v => v,
        }),
        _ => None,
    };
    // BRDMA/NRDMA reads have no DMA counter of their own (docs/simulator.md, "DMA
    // counters"): they are not counted.
    let mut uncounted = 0;
    let mut per_channel =
        |s: Option<&Stage>, pick: fn(&Stage) -> Option<&Cube>| match s.and_then(pick) {
            Some(cube) => match read_cube(mem, cube, at, &mut uncounted)? {
                Values::Int(v) => Ok(Some(v)),
                Values::Float(_) => Err(SimError::Setup {
                    why: "per-channel float operands are refused by the configuration check".into(),
                }),
            },
            None => Ok(None),
        };
    let ops = StageOperands {
        bs_alu: per_channel(t.bs.as_ref(), |s| s.alu_mem.as_ref())?,
        bs_mul: per_channel(t.bs.as_ref(), |s| s.mul_mem.as_ref())?,
        bn_alu: per_channel(t.bn.as_ref(), |s| s.alu_mem.as_ref())?,
        bn_mul: per_channel(t.bn.as_ref(), |s| s.mul_mem.as_ref())?,
    };
    let mut out = post(t, main, operand, &ops);
    // Channels beyond DATA_CUBE_CHANNEL.ORIG_CHANNEL come out zero.
    let (c, real) = (t.out.c as usize, t.real_channels as usize);
    if real < c {
        match &mut out {
            Values::Int(v) => v.iter_mut().enumerate().for_each(|(i, x)| {
                if i % c >= real {
                    *x = 0
                }
            }),
            Values::Float(v) => v.iter_mut().enumerate().for_each(|(i, x)| {
                if i % c >= real {
                    *x = 0.0
                }
            }),
        }
    }
    if write_output {
        write_cube(mem, &t.out, &out, at, &mut dma.dpu_write)?;
    }
    Ok(macs)
}

fn dma_err(
    at: At,
    addr: i64,
    len: usize,
    block: &'static str,
    register: &'static str,
    write: bool,
) -> SimError {
    SimError::Dma {
        at,
        addr: addr.max(0) as u64,
        len: len as u64,
        block,
        register,
        write,
    }
}

/// Bytes of one (surface, line) run, bounds-checked.
pub(super) fn run<'m>(
    mem: &'m Memory,
    addr: i64,
    len: usize,
    at: At,
    block: &'static str,
    register: &'static str,
) -> Result<&'m [u8], SimError> {
    if !(0..1 << 32).contains(&addr) {
        return Err(dma_err(at, addr, len, block, register, false));
    }
    mem.read(addr as u64, len)
        .ok_or_else(|| dma_err(at, addr, len, block, register, false))
}

fn le16(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn le32(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// A signed 4-bit value.
fn nibble(v: u8) -> i16 {
    ((v << 4) as i8 >> 4) as i16
}

/// CNA feature fetch, CORE multiply-accumulate. Adds the bytes of every feature run to
/// `fetched` and of the weight read to `weighed`.
///
/// A 1×1 window is the matmul path of the board-validated programs, unchanged. A K×K
/// window gathers, for every output pixel, the input pixels under each kernel tap
/// (stride, dilation, padding with the pad value) into one row of taps × C values and
/// multiplies it with the kernels laid out the same way (docs/simulator.md,
/// "Convolution"): int8 sums in 32 bits, exactly; fp16 products are exact in f32 and
/// summed in f32.
fn conv(
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
    let feature_reg = cna::FeatureDataAddr::NAME;
    let weight_reg = cna::DcompAddr0::NAME;
    // Depthwise: one window per channel; planar: the one kernel in memory, the CORE's
    // other 15 channels come from no weights (zero).
    let kernels = if win.depthwise || f.planar { 1 } else { n };
    let wbytes = kernels * taps * c * w.prec.bits() as usize / 8;
    let wdata = run(mem, w.base as i64, wbytes, at, "CNA", weight_reg)?;
    *weighed += wdata.len() as u64;
    let epa = f.prec.atom_elems() as usize;
    let g = w.prec.kernels_per_atom() as usize;
    let row_bytes = 32 * w.prec.bits() as usize / 8;
    let kblocks = c / 32;
    // Offset of kernel j's 32-channel block kb at tap t in the weight atoms: atoms of g
    // kernels × 32 channels, ordered [kernel group][channel block][tap]
    // (docs/hardware/convolution.md#weights; at 1×1 docs/hardware/matmul-programs.md#weights).
    let woff = |j: usize, kb: usize, t: usize| {
        (((j / g) * kblocks + kb) * taps + t) * 1024 + (j % g) * row_bytes
    };

    // Visits every feature atom: (pixel, first channel, 16 bytes).
    let mut each_atom = |visit: &mut dyn FnMut(usize, usize, &[u8])| -> Result<(), SimError> {
        if f.planar {
            // One plane of fp16 lines; the atom of each pixel holds it in channel 0 and
            // zero in the padded channels (docs/hardware/convolution.md#planar-input).
            for y in 0..f.h as usize {
                let addr = f.base as i64 + y as i64 * f.line;
                let bytes = run(mem, addr, f.w as usize * 2, at, "CNA", feature_reg)?;
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
                let bytes = run(mem, addr, f.w as usize * 16, at, "CNA", feature_reg)?;
                *fetched += bytes.len() as u64;
                for x in 0..f.w as usize {
                    visit(y * f.w as usize + x, c1 * epa, &bytes[x * 16..x * 16 + 16]);
                }
            }
        }
        Ok(())
    };
    let unit = taps == 1 && out_pixels == pixels && win.pad == (0, 0) && !win.depthwise;

    let values = match f.prec {
        Precision::Int8 | Precision::Int4 => {
            let mut a = vec![0i16; pixels * c];
            let int4 = f.prec == Precision::Int4;
            each_atom(&mut |p, ch, atom| {
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
                return Ok((Values::Int(window_int(&a, wdata, f, w, win, pad)), macs));
            }
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
            each_atom(&mut |p, ch, atom| {
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
            each_atom(&mut |p, ch, atom| {
                for e in 0..8 {
                    a[p * c + ch + e] = conv(le16(atom, 2 * e));
                }
            })?;
            if !unit {
                let pad = conv(win.pad_value as u16);
                return Ok((Values::Float(window_f32(&a, wdata, f, w, win, pad)), macs));
            }
            let mut b = vec![0f32; n * c];
            if f.planar {
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
            Values::Float(gemm_f32(&a, &b, pixels, n, c))
        }
    };
    Ok((values, macs))
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
/// channels (depthwise: channel group of [`super::config::depthwise_group`] channels,
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
        let group = super::config::depthwise_group(w.prec) as usize;
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

/// An int8 K×K or depthwise window: exact integer sums.
fn window_int(
    a: &[i16],
    wdata: &[u8],
    f: &Feature,
    w: &Weights,
    win: &Window,
    pad: i16,
) -> Vec<i64> {
    let cols = gather(a, f, win, pad);
    let b = kernel_rows(wdata, f, w, win, |d, i| d[i] as i8 as i16);
    let k = win.taps() as usize * f.c as usize;
    let out_pixels = win.out_w as usize * win.out_h as usize;
    if win.depthwise {
        return depthwise(
            &cols,
            &b,
            out_pixels,
            win.taps() as usize,
            f.c as usize,
            |x, y| i64::from(x) * i64::from(y),
            0i64,
            |s, v| s + v,
        );
    }
    // 32-bit sums, as the 1×1 path.
    gemm_i16(&cols, &b, out_pixels, w.n as usize, k)
}

/// An fp16 K×K or depthwise window: products exact in f32, summed in f32 (the lane
/// order of [`gemm_f32`]).
fn window_f32(
    a: &[f32],
    wdata: &[u8],
    f: &Feature,
    w: &Weights,
    win: &Window,
    pad: f32,
) -> Vec<f32> {
    let cols = gather(a, f, win, pad);
    let b = kernel_rows(wdata, f, w, win, |d, i| f16_to_f32(le16(d, i)));
    let out_pixels = win.out_w as usize * win.out_h as usize;
    if win.depthwise {
        return depthwise(
            &cols,
            &b,
            out_pixels,
            win.taps() as usize,
            f.c as usize,
            |x, y| x * y,
            0f32,
            |s, v| s + v,
        );
    }
    gemm_f32(
        &cols,
        &b,
        out_pixels,
        w.n as usize,
        win.taps() as usize * f.c as usize,
    )
}

/// Depthwise: output channel `ch` of pixel `p` sums channel `ch` over the taps.
#[allow(clippy::too_many_arguments)]
fn depthwise<T: Copy, A: Copy>(
    cols: &[T],
    b: &[T],
    out_pixels: usize,
    taps: usize,
    c: usize,
    mul: impl Fn(T, T) -> A,
    zero: A,
    add: impl Fn(A, A) -> A,
) -> Vec<A> {
    let mut acc = vec![zero; out_pixels * c];
    for p in 0..out_pixels {
        for t in 0..taps {
            let row = &cols[(p * taps + t) * c..(p * taps + t + 1) * c];
            for ch in 0..c {
                acc[p * c + ch] = add(acc[p * c + ch], mul(row[ch], b[t * c + ch]));
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

/// Reads an NC1HWC2 cube (DPU_RDMA's MRDMA or ERDMA), adding the bytes of every run to
/// `count`.
fn read_cube(mem: &Memory, cube: &Cube, at: At, count: &mut u64) -> Result<Values, SimError> {
    let (w, h, c) = (cube.w as usize, cube.h as usize, cube.c as usize);
    let epa = cube.atom_elems() as usize;
    let size = cube.prec.bytes() as usize;
    let float = cube.prec.is_float();
    let mut ints = if float {
        Vec::new()
    } else {
        vec![0i64; w * h * c]
    };
    let mut floats = if float {
        vec![0f32; w * h * c]
    } else {
        Vec::new()
    };
    for c1 in 0..c / epa {
        for y in 0..h {
            let addr = cube.base as i64 + (c1 as u64 * cube.surf + y as u64 * cube.line) as i64;
            let bytes = run(mem, addr, w * 16, at, cube.block, cube.register)?;
            *count += bytes.len() as u64;
            for x in 0..w {
                let p = y * w + x;
                for e in 0..epa {
                    let i = x * 16 + e * size;
                    let k = p * c + c1 * epa + e;
                    match cube.prec {
                        Precision::Int8 => ints[k] = bytes[i] as i8 as i64,
                        Precision::Int16 => ints[k] = le16(bytes, i) as i16 as i64,
                        Precision::Int32 => ints[k] = le32(bytes, i) as i32 as i64,
                        Precision::Fp16 => floats[k] = f16_to_f32(le16(bytes, i)),
                        Precision::Bf16 => floats[k] = bf16_to_f32(le16(bytes, i)),
                        Precision::Fp32 => floats[k] = f32::from_bits(le32(bytes, i)),
                        // Rejected by the configuration check.
                        Precision::Int4 => {}
                    }
                }
            }
        }
    }
    Ok(if float {
        Values::Float(floats)
    } else {
        Values::Int(ints)
    })
}

/// Shift right with rounding: half up (towards +∞) or half to even.
fn shr_round(v: i64, s: u32, half_up: bool) -> i64 {
    if s == 0 {
        return v;
    }
    if s >= 63 {
        return if v < 0 { -1 } else { 0 };
    }
    let q = v >> s;
    let rem = v - (q << s);
    let half = 1i64 << (s - 1);
    if rem > half || (rem == half && (half_up || q & 1 == 1)) {
        q + 1
    } else {
        q
    }
}

fn alu_int(op: Alu, x: i64, o: i64) -> i64 {
    match op {
        Alu::Add => x.saturating_add(o),
        Alu::Minus => x.saturating_sub(o),
        Alu::Max => x.max(o),
        Alu::Min => x.min(o),
    }
}

/// The per-channel operands the BS and BN stages read from memory (BRDMA, NRDMA).
struct StageOperands {
    bs_alu: Option<Vec<i64>>,
    bs_mul: Option<Vec<i64>>,
    bn_alu: Option<Vec<i64>>,
    bn_mul: Option<Vec<i64>>,
}

/// One integer BS/BN stage; `alu` and `mul` replace the register operands when the stage
/// reads them per channel from memory.
fn stage_int(s: &Stage, mut x: i64, alu: Option<i64>, mul: Option<i64>) -> i64 {
    if let Some((op, o)) = s.alu {
        x = alu_int(op, x, alu.unwrap_or(o));
    }
    if let Some((m, sp, sn, prelu)) = s.mul
        && (!prelu || x < 0)
    {
        let m = mul.unwrap_or(m);
        let shift = if x >= 0 { sp } else { sn };
        x = shr_round(x.saturating_mul(m), shift, true);
    }
    if s.relu {
        x = x.max(0);
    }
    if let Some(cap) = s.relux {
        x = x.min(cap);
    }
    x
}

/// A float BS or BN stage: multiply by the fp16 operand, then add or subtract the fp32
/// operand, then ReLU, each rounded to fp32 (docs/simulator.md, "Float BS and BN").
fn stage_float(s: &Stage, mut x: f32) -> f32 {
    if let Some((m, ..)) = s.mul {
        x *= f16_to_f32(m as u16);
    }
    if let Some((op, o)) = s.alu {
        let a = f32::from_bits(o as u32);
        x = match op {
            Alu::Minus => x - a,
            _ => x + a,
        };
    }
    if s.relu {
        x = x.max(0.0);
    }
    x
}

fn saturate(x: i64, prec: Precision) -> i64 {
    match prec {
        Precision::Int8 => x.clamp(i8::MIN as i64, i8::MAX as i64),
        Precision::Int16 => x.clamp(i16::MIN as i64, i16::MAX as i64),
        Precision::Int4 => x.clamp(-8, 7),
        _ => x.clamp(i32::MIN as i64, i32::MAX as i64),
    }
}

/// The integer output converter. Multiply first (`CVT_TYPE` 0): `round((x × scale) >>
/// shift) + offset`, the offset added after the rounding shift, as measured on an RK3588
/// (gregordinary/rocket-userspace `tests/requant_model.h`, probe
/// `tests/requant_round_probe`: ties to even, offset after rounding, saturation after the
/// offset). Add first (`CVT_TYPE` 1): `round(((x + offset) × scale) >> shift)`.
fn out_cvt_int(c: &OutCvt, x: i64) -> i64 {
    if c.add_first {
        shr_round(
            x.saturating_add(c.offset).saturating_mul(c.scale),
            c.shift,
            c.half_up,
        )
    } else {
        shr_round(x.saturating_mul(c.scale), c.shift, c.half_up).saturating_add(c.offset)
    }
}

/// BS → BN → EW → output converter, element by element (float data: the fp32 BS
/// multiplier, then EW).
fn post(t: &Task, main: Values, operand: Option<Values>, so: &StageOperands) -> Values {
    let ew = t.ew.as_ref();
    let channels = t.out.c as usize;
    // The operand index of element `i` (`[pixel][channel]`): per channel or per element.
    let at_op = |i: usize| {
        if ew.is_some_and(|e| e.per_channel) {
            i % channels
        } else {
            i
        }
    };
    let pick = |v: &Option<Vec<i64>>, ch: usize| v.as_ref().map(|v| v[ch]);
    match main {
        Values::Int(mut xs) => {
            let ops = match &operand {
                Some(Values::Int(o)) => Some(o.as_slice()),
                _ => None,
            };
            for (i, x) in xs.iter_mut().enumerate() {
                let mut v = *x;
                let ch = i % channels;
                if let Some(s) = &t.bs {
                    v = stage_int(s, v, pick(&so.bs_alu, ch), pick(&so.bs_mul, ch));
                }
                if let Some(s) = &t.bn {
                    v = stage_int(s, v, pick(&so.bn_alu, ch), pick(&so.bn_mul, ch));
                }
                if let Some(e) = ew {
                    let mut o = match (&e.src, ops) {
                        (EwSrc::Register(r), _) => *r as i32 as i64,
                        (EwSrc::Memory(_), Some(o)) => o[at_op(i)],
                        (EwSrc::Memory(_), None) => 0,
                    };
                    if let Some((off, scale, shift, add_first)) = e.cvt {
                        let c = if add_first {
                            o.saturating_add(off).saturating_mul(scale)
                        } else {
                            o.saturating_mul(scale).saturating_add(off)
                        };
                        o = shr_round(c, shift, true);
                    }
                    match e.op {
                        Some(EwOp::Alu(op)) => v = alu_int(op, v, o),
                        Some(EwOp::Mul(tp, tn)) => {
                            let p = v.saturating_mul(o);
                            v = shr_round(p, if p >= 0 { tp } else { tn }, true);
                        }
                        None => {}
                    }
                    if e.relu {
                        v = v.max(0);
                    }
                    if let Some(cap) = e.relux {
                        v = v.min(cap);
                    }
                }
                *x = out_cvt_int(&t.out_cvt, v);
                if !t.out.prec.is_float() {
                    *x = saturate(*x, t.out.prec);
                }
            }
            if t.out.prec.is_float() {
                Values::Float(xs.into_iter().map(|v| v as f32).collect())
            } else {
                Values::Int(xs)
            }
        }
        Values::Float(mut xs) => {
            let ops = match &operand {
                Some(Values::Float(o)) => Some(o.as_slice()),
                _ => None,
            };
            // The fp32 BS multiplier: one f32 product with the fp16 operand, rounded to
            // nearest even, before the EW stage ((x · row) · w).
            if let Some(bits) = t.bs_f16_mul {
                let m = f16_to_f32(bits);
                for x in xs.iter_mut() {
                    *x *= m;
                }
            }
            for s in [&t.bs_float, &t.bn_float].into_iter().flatten() {
                for x in xs.iter_mut() {
                    *x = stage_float(s, *x);
                }
            }
            if let Some(e) = ew {
                for (i, x) in xs.iter_mut().enumerate() {
                    let o = ops.map_or(0.0, |o| o[at_op(i)]);
                    match e.op {
                        _ if e.dropped => {}
                        Some(EwOp::Alu(Alu::Add)) => *x += o,
                        Some(EwOp::Alu(Alu::Minus)) => *x -= o,
                        Some(EwOp::Alu(Alu::Max)) => *x = x.max(o),
                        Some(EwOp::Alu(Alu::Min)) => *x = x.min(o),
                        Some(EwOp::Mul(..)) => *x *= o,
                        None => {}
                    }
                    if e.relu {
                        *x = x.max(0.0);
                    }
                }
            }
            // The LUT (the EW stage's only unit when it is on) and its output decode.
            if let Some(l) = &t.lut {
                for x in xs.iter_mut() {
                    *x = super::lut::decode_out(l, super::lut::lookup(l, *x));
                }
            }
            Values::Float(xs)
        }
    }
}

/// The DPU write DMA: values `[pixel][channel]` into the output cube, adding the bytes of
/// every run to `count`.
fn write_cube(
    mem: &mut Memory,
    cube: &Cube,
    values: &Values,
    at: At,
    count: &mut u64,
) -> Result<(), SimError> {
    let (w, h, c) = (cube.w as usize, cube.h as usize, cube.c as usize);
    let epa = cube.atom_elems() as usize;
    let size = cube.prec.bytes() as usize;
    let mut buf = vec![0u8; w * 16];
    for c1 in 0..c / epa {
        for y in 0..h {
            for x in 0..w {
                let p = y * w + x;
                for e in 0..epa {
                    let k = p * c + c1 * epa + e;
                    let i = x * 16 + e * size;
                    let dst = &mut buf[i..i + size];
                    match (values, cube.prec) {
                        (Values::Int(v), Precision::Int8) => dst[0] = v[k] as i8 as u8,
                        (Values::Int(v), Precision::Int16) => {
                            dst.copy_from_slice(&(v[k] as i16).to_le_bytes())
                        }
                        (Values::Int(v), _) => dst.copy_from_slice(&(v[k] as i32).to_le_bytes()),
                        (Values::Float(v), Precision::Fp16) => {
                            dst.copy_from_slice(&f32_to_f16(v[k]).to_le_bytes())
                        }
                        (Values::Float(v), Precision::Bf16) => {
                            dst.copy_from_slice(&f32_to_bf16(v[k]).to_le_bytes())
                        }
                        (Values::Float(v), _) => dst.copy_from_slice(&v[k].to_bits().to_le_bytes()),
                    }
                }
            }
            let addr = cube.base as u64 + c1 as u64 * cube.surf + y as u64 * cube.line;
            let target = (addr < 1 << 32)
                .then(|| mem.write(addr, buf.len()))
                .flatten()
                .ok_or_else(|| {
                    dma_err(at, addr as i64, buf.len(), cube.block, cube.register, true)
                })?;
            target.copy_from_slice(&buf);
            *count += buf.len() as u64;
        }
    }
    Ok(())
}
