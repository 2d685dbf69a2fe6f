//! The bounds of one task, checked before the data path allocates or works: its work
//! units (charged to the simulator's budget) and the element counts and DMA ranges of
//! its cubes (docs/simulator.md, "Bounds").

use super::error::{At, SimError};
use super::exec::{Cube, EwSrc, Main, Task};
use super::memory::Memory;
use super::memory::run;
use crate::regs::{Block, Register, cna};

/// Elements one cube of a task may have: the model holds each as an i64 or f32 at once
/// (at most 512 MiB per cube). docs/simulator.md, "Bounds".
pub(super) const MAX_ELEMENTS: u64 = 1 << 26;

/// Elements a cube may have beyond the bytes of the memory image: a cube whose lines
/// overlap can name more elements than memory holds, but only this many more.
pub(super) const SMALL_CUBE: u64 = 1 << 16;

/// The work units of a task's data path: multiply-accumulates, elements DPU_RDMA reads,
/// and output elements (saturating; charged before anything runs).
pub(super) fn work(t: &Task) -> u64 {
    let elems = |c: &Cube| {
        (c.w as u64)
            .saturating_mul(c.h as u64)
            .saturating_mul(c.c as u64)
    };
    let main = match &t.main {
        Main::Conv {
            feature,
            weights,
            window,
        } => (window.out_w as u64)
            .saturating_mul(window.out_h as u64)
            .saturating_mul(weights.n as u64)
            .saturating_mul(if window.depthwise {
                1
            } else {
                feature.c as u64
            })
            .saturating_mul(window.taps()),
        Main::Flying(cube) => elems(cube),
    };
    let operand = match t.ew.as_ref().map(|e| &e.src) {
        Some(EwSrc::Memory(cube)) => elems(cube),
        _ => 0,
    };
    main.saturating_add(operand).saturating_add(elems(&t.out))
}

/// The element counts and DMA ranges of `t`, checked before anything is allocated.
pub(super) fn check_first(mem: &Memory, t: &Task, at: At) -> Result<(), SimError> {
    let limit = MAX_ELEMENTS.min(mem.mapped_bytes().saturating_add(SMALL_CUBE));
    let elems = |c: &Cube| c.w as u64 * c.h as u64 * c.c as u64;
    let mut counts = vec![(elems(&t.out), t.out.register)];
    match &t.main {
        Main::Conv {
            feature,
            weights,
            window,
        } => {
            counts.push((
                window.out_w as u64 * window.out_h as u64 * weights.n as u64,
                cna::DcompAddr0::NAME,
            ));
            let epa = feature.prec.atom_elems() as u64;
            // A planar input reads one plane of 2-byte elements.
            let (surfaces, elem) = if feature.planar {
                (1, 2)
            } else {
                (feature.c as u64 / epa.max(1), 16)
            };
            let runs = (0..surfaces).flat_map(|c1| (0..feature.h as u64).map(move |y| (c1, y)));
            for (c1, y) in runs {
                let addr = feature.base as i64 + c1 as i64 * feature.surf + y as i64 * feature.line;
                run(
                    mem,
                    addr,
                    feature.w as usize * elem,
                    at,
                    Block::Cna,
                    cna::FeatureDataAddr::NAME,
                )?;
            }
        }
        Main::Flying(cube) => {
            counts.push((elems(cube), cube.register));
            check_cube(mem, cube, at, false)?;
        }
    }
    if let Some(EwSrc::Memory(cube)) = t.ew.as_ref().map(|e| &e.src) {
        counts.push((elems(cube), cube.register));
        check_cube(mem, cube, at, false)?;
    }
    for s in [t.bs.as_ref(), t.bn.as_ref()].into_iter().flatten() {
        for cube in [s.alu_mem.as_ref(), s.mul_mem.as_ref()]
            .into_iter()
            .flatten()
        {
            counts.push((elems(cube), cube.register));
            check_cube(mem, cube, at, false)?;
        }
    }
    if let Some(&(elements, register)) = counts.iter().find(|(n, _)| *n > limit) {
        return Err(SimError::CubeLimit {
            at,
            register,
            elements,
            limit,
        });
    }
    check_cube(mem, &t.out, at, true)
}

/// Whether every (surface, line) run of `cube` lies in one memory region.
fn check_cube(mem: &Memory, cube: &Cube, at: At, write: bool) -> Result<(), SimError> {
    let len = cube.w as u64 * 16;
    let epa = cube.atom_elems().max(1) as u64;
    for c1 in 0..cube.c as u64 / epa {
        for y in 0..cube.h as u64 {
            let addr = (cube.base as u64)
                .checked_add(c1.saturating_mul(cube.surf))
                .and_then(|a| a.checked_add(y.saturating_mul(cube.line)))
                .filter(|&a| a < 1 << 32);
            if addr.and_then(|a| mem.read(a, len as usize)).is_none() {
                return Err(SimError::Dma {
                    at,
                    addr: addr.unwrap_or(u64::MAX),
                    len,
                    block: cube.block,
                    register: cube.register,
                    write,
                });
            }
        }
    }
    Ok(())
}
