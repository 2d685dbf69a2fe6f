//! The hot loops: feature and weight fetch, multiply-accumulate, DPU post-processing and
//! the write DMA. Registers are decoded before this point ([`super::config`]); nothing
//! here looks at a register.

mod conv;
mod post;

use conv::conv;
use post::{StageOperands, post};

use super::dma::DmaCounters;
use super::error::{At, SimError};
use super::exec::{Cube, EwSrc, Main, Stage, Task};
pub(super) use super::memory::run;
use super::memory::{Memory, dma_err};
use crate::float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
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
