//! Running a checked pooling task: its work, the inputs it may read, and the pooling
//! itself over the memory image.

use super::*;

/// Work units: the output elements times the kernel, plus the input elements.
pub(in crate::sim) fn work(p: &Pool) -> u64 {
    let elems = |c: &Cube| u64::from(c.w) * u64::from(c.h) * u64::from(c.c);
    elems(&p.out)
        .saturating_mul(u64::from(p.kernel.0) * u64::from(p.kernel.1))
        .saturating_add(elems(&p.input))
}

/// The byte range a PPU-written cube smaller than 4×4 covers, which a later pass may
/// not read (docs/hardware/pooling.md#chains).
pub(in crate::sim) fn small_output(p: &Pool) -> Option<(u64, u64)> {
    (p.out.w < MIN_INTERMEDIATE || p.out.h < MIN_INTERMEDIATE)
        .then(|| p.dma.iter().find(|r| r.access == Access::Write))
        .flatten()
        .map(|r| (r.start, r.end()))
}

/// Refuses a task whose input overlaps a cube smaller than 4×4 that an earlier PPU task
/// of the kick wrote: boards mis-read such intermediates.
pub(in crate::sim) fn check_input(p: &Pool, small: &[(u64, u64)], at: At) -> Result<(), SimError> {
    let Some(read) = p.dma.iter().find(|r| r.access == Access::Read) else {
        return Ok(());
    };
    if small.iter().any(|&(s, e)| read.start < e && s < read.end()) {
        return Err(unsupported(
            at,
            ppu_rdma::RdmaSrcBaseAddr::SRC_BASE_ADDR,
            p.input.base,
            format!(
                "reads a cube an earlier PPU task wrote at less than {MIN_INTERMEDIATE}x{MIN_INTERMEDIATE}: boards mis-read such intermediates (half the channels 0 or garbage)"
            ),
        ));
    }
    Ok(())
}

/// Runs a checked pooling task against memory: every DMA range is checked first, then
/// the input is read, pooled per channel and (when `write_output`) written.
pub(in crate::sim) fn execute(
    mem: &mut Memory,
    p: &Pool,
    at: At,
    write_output: bool,
) -> Result<(), SimError> {
    for r in &p.dma {
        let ok = match r.access {
            Access::Read => usize::try_from(r.len)
                .ok()
                .and_then(|len| mem.read(r.start, len))
                .is_some(),
            Access::Write => usize::try_from(r.len)
                .ok()
                .and_then(|len| mem.write(r.start, len))
                .is_some(),
        };
        if !ok || r.end() > 1 << 32 {
            return Err(SimError::Dma {
                at,
                addr: r.start,
                len: r.len,
                block: r.block,
                register: r.register,
                write: r.access == Access::Write,
            });
        }
    }
    let limit = crate::sim::bounds::MAX_ELEMENTS.min(
        mem.mapped_bytes()
            .saturating_add(crate::sim::bounds::SMALL_CUBE),
    );
    for cube in [&p.input, &p.out] {
        let n = u64::from(cube.w) * u64::from(cube.h) * u64::from(cube.c);
        if n > limit {
            return Err(SimError::CubeLimit {
                at,
                register: cube.register,
                elements: n,
                limit,
            });
        }
    }
    let input = read(mem, &p.input, at)?;
    let out = pool(p, &input);
    if write_output {
        write(mem, &p.out, &out, at)?;
    }
    Ok(())
}

/// The cube's elements as `[y][x][channel]` values (fp16 exactly as f32, int8 as f32).
fn read(mem: &Memory, c: &Cube, at: At) -> Result<Vec<f32>, SimError> {
    let (w, h, ch) = (c.w as usize, c.h as usize, c.c as usize);
    let epa = c.atom_elems() as usize;
    let mut v = vec![0f32; w * h * ch];
    for c1 in 0..ch.div_ceil(epa) {
        for y in 0..h {
            let addr = c.base as u64 + c1 as u64 * c.surf + y as u64 * c.line;
            let bytes = run(mem, addr as i64, w * 16, at, c.block, c.register)?;
            for x in 0..w {
                for e in 0..epa.min(ch - c1 * epa) {
                    let k = (y * w + x) * ch + c1 * epa + e;
                    v[k] = match c.prec {
                        Precision::Int8 => f32::from(bytes[x * 16 + e] as i8),
                        _ => f16_to_f32(u16::from_le_bytes([
                            bytes[x * 16 + 2 * e],
                            bytes[x * 16 + 2 * e + 1],
                        ])),
                    };
                }
            }
        }
    }
    Ok(v)
}

/// The pad value as a number.
fn pad(p: &Pool) -> f32 {
    match p.prec {
        // 19-bit two's complement.
        Precision::Int8 => f32::from((((p.pad << 13) as i32) >> 13) as i16),
        _ => f16_to_f32(p.pad as u16),
    }
}

/// Pools `[y][x][channel]` values: max and min over the window, where a padded position
/// holds the pad value; the average is `Σ · r_w · r_h · 2^−32` in fp32 with the fp16
/// reciprocals, the sum over every window position (padding included), in row order.
fn pool(p: &Pool, input: &[f32]) -> Vec<f32> {
    let (iw, ih, c) = (p.input.w as i64, p.input.h as i64, p.input.c as usize);
    let (ow, oh) = (p.out.w as usize, p.out.h as usize);
    let (kw, kh) = (p.kernel.0 as i64, p.kernel.1 as i64);
    let (sx, sy) = (p.stride.0 as i64, p.stride.1 as i64);
    let (pl, pt) = (p.padding[0] as i64, p.padding[1] as i64);
    let padv = pad(p);
    let (rw, rh) = (f16_to_f32(p.recip.0 as u16), f16_to_f32(p.recip.1 as u16));
    let mut out = vec![0f32; ow * oh * c];
    for oy in 0..oh {
        for ox in 0..ow {
            for ch in 0..c {
                let mut acc: Option<f32> = None;
                for ky in 0..kh {
                    for kx in 0..kw {
                        let (y, x) = (oy as i64 * sy + ky - pt, ox as i64 * sx + kx - pl);
                        let v = if (0..ih).contains(&y) && (0..iw).contains(&x) {
                            input[((y * iw + x) as usize) * c + ch]
                        } else {
                            padv
                        };
                        acc = Some(match (acc, p.method) {
                            (None, _) => v,
                            (Some(a), PoolMethod::Max) => a.max(v),
                            (Some(a), PoolMethod::Min) => a.min(v),
                            (Some(a), PoolMethod::Average) => a + v,
                        });
                    }
                }
                let a = acc.unwrap_or(padv);
                out[(oy * ow + ox) * c + ch] = match p.method {
                    PoolMethod::Average => a * rw * rh * (-32f32).exp2(),
                    _ => a,
                };
            }
        }
    }
    out
}

/// Writes `[y][x][channel]` values as the output cube; the padding lanes of the last
/// atom are written as 0.
fn write(mem: &mut Memory, c: &Cube, v: &[f32], at: At) -> Result<(), SimError> {
    let (w, h, ch) = (c.w as usize, c.h as usize, c.c as usize);
    let epa = c.atom_elems() as usize;
    let mut buf = vec![0u8; w * 16];
    for c1 in 0..ch.div_ceil(epa) {
        for y in 0..h {
            buf.fill(0);
            for x in 0..w {
                for e in 0..epa.min(ch - c1 * epa) {
                    let k = (y * w + x) * ch + c1 * epa + e;
                    match c.prec {
                        Precision::Int8 => buf[x * 16 + e] = v[k] as i8 as u8,
                        _ => buf[x * 16 + 2 * e..x * 16 + 2 * e + 2]
                            .copy_from_slice(&f32_to_f16(v[k]).to_le_bytes()),
                    }
                }
            }
            let addr = c.base as u64 + c1 as u64 * c.surf + y as u64 * c.line;
            let target = mem.write(addr, buf.len()).ok_or(SimError::Dma {
                at,
                addr,
                len: buf.len() as u64,
                block: c.block,
                register: c.register,
                write: true,
            })?;
            target.copy_from_slice(&buf);
        }
    }
    Ok(())
}
