//! Finishing a call on the host in one pass over C: every K wave's partial block of a
//! tile is read once, the waves are summed 8 rows by 128 columns at a time in a stack
//! buffer, and the row-major result (an integer, or a float scaled by its row's and its
//! column's scale) is written once. No intermediate buffer: a [`Reduction`], made once
//! per plan, lists which blocks of C hold the waves of each tile, and a call allocates
//! nothing.
//!
//! Int32 partials are summed in `i32` when no partial exceeds `2³¹ / waves` in
//! magnitude (for scaled results: the largest power of two not above it), so that no
//! sum can overflow: int8 products of a wave of 4096 channels stay within ±2²⁶, so
//! the waves plans make always qualify. C is memory any caller can fill, so that is checked, not
//! assumed: otherwise the sums are made again in `i64`, and a result that leaves the
//! int32 range is an error naming it. Fp32 partials are summed in `f32`, one more step
//! of fp32 summation in another order (the error bound of docs/matmul.md holds for any
//! order).

use super::{Plan, unsupported};
use crate::error::{Error, Result};
use crate::kernels::single::OutType;
use crate::sys::simd;
use std::ops::Range;

/// Rows finished together: their atoms are contiguous in each partial block, and their
/// output rows are that many write streams.
const ROW_BLOCK: usize = 8;

/// Columns summed together in the stack buffer (a multiple of the 4 elements of an
/// int32 or fp32 atom).
const CHUNK: usize = 128;

/// Rows summed together by the int32 path of [`Reduction::scale_i32_into`].
const NARROW_ROWS: usize = 16;

/// Columns summed together by the int32 path of [`Reduction::scale_i32_into`] (a
/// multiple of 4).
const NARROW_CHUNK: usize = 128;

/// One output tile of a plan and the C blocks of its K waves.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Tile {
    m0: usize,
    rows: usize,
    n0: usize,
    /// Real columns (the tile's padding beyond N left out).
    cols: usize,
    /// Into [`Reduction::offsets`]: the byte offset of each wave's block.
    waves: Range<usize>,
}

/// Where the K waves of each output tile of a [`Plan`] sit in its C buffer, for
/// finishing a call in one pass ([`Plan::reduction`]). Made once per plan; the
/// finishing calls allocate nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reduction {
    tiles: Vec<Tile>,
    offsets: Vec<usize>,
    m: usize,
    n: usize,
    part: OutType,
    c_bytes: usize,
}

impl Plan {
    /// The [`Reduction`] of this plan's C buffer.
    pub fn reduction(&self) -> Reduction {
        let mut tiles: Vec<Tile> = Vec::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for t in &self.tasks {
            let key = (t.m0, t.n0);
            let i = *index.entry(key).or_insert_with(|| {
                tiles.push(Tile {
                    m0: t.m0 as usize,
                    rows: t.rows as usize,
                    n0: t.n0 as usize,
                    cols: self.spec.n.saturating_sub(t.n0).min(t.nt) as usize,
                    waves: 0..0,
                });
                groups.push(Vec::new());
                tiles.len() - 1
            });
            // Every core that splits K tiles the columns and rows alike (tiling.rs), so
            // the waves of one place share its tile's geometry.
            let cols = self.spec.n.saturating_sub(t.n0).min(t.nt) as usize;
            debug_assert_eq!((tiles[i].rows, tiles[i].cols), (t.rows as usize, cols));
            groups[i].push(t.c_offset as usize);
        }
        let mut offsets = Vec::with_capacity(self.tasks.len());
        for (tile, group) in tiles.iter_mut().zip(groups) {
            tile.waves = offsets.len()..offsets.len() + group.len();
            offsets.extend(group);
        }
        Reduction {
            tiles,
            offsets,
            m: self.spec.m as usize,
            n: self.spec.n as usize,
            part: self.c_type(),
            c_bytes: self.c_bytes as usize,
        }
    }
}

impl Reduction {
    /// Checks the partial type, C's length and the output's length.
    fn check(&self, part: OutType, c: &[u8], out: usize) -> Result<()> {
        debug_assert_eq!(part.atom_elems(), 4, "the finishers read 4-byte elements");
        if self.part != part {
            return Err(unsupported(format!(
                "{:?} partials finished as {part:?}",
                self.part
            )));
        }
        if c.len() < self.c_bytes {
            return Err(unsupported(format!(
                "C has {} bytes, the plan writes {}",
                c.len(),
                self.c_bytes
            )));
        }
        Error::check_len("results", self.m * self.n, out)
    }

    /// Sums every tile's waves, [`ROW_BLOCK`] rows by [`CHUNK`] columns at a time, in
    /// a stack buffer of `T` (each element decoded from its 4 bytes by `decode`), and
    /// hands each summed row piece to `f(row, first column, sums of its real columns)`.
    /// Reads stream (each wave's atoms of a row block are contiguous) and `f` gets
    /// contiguous runs to write.
    fn for_each_sum<T: Lane>(
        &self,
        c: &[u8],
        mut decode: impl FnMut([u8; 4]) -> T,
        mut f: impl FnMut(usize, usize, &[T]),
    ) {
        let mut stage = [[T::default(); CHUNK]; ROW_BLOCK];
        for t in &self.tiles {
            let offsets = &self.offsets[t.waves.clone()];
            for r0 in (0..t.rows).step_by(ROW_BLOCK) {
                let block = (t.rows - r0).min(ROW_BLOCK);
                for c0 in (0..t.cols).step_by(CHUNK) {
                    let cols = (t.cols - c0).min(CHUNK);
                    let groups = cols.div_ceil(4);
                    for row in &mut stage[..block] {
                        row[..groups * 4].fill(T::default());
                    }
                    for &o in offsets {
                        for gi in 0..groups {
                            let g = c0 / 4 + gi;
                            let src = &c[o + (g * t.rows + r0) * 16..][..block * 16];
                            for (row, atom) in stage.iter_mut().zip(src.chunks_exact(16)) {
                                let dst = &mut row[gi * 4..gi * 4 + 4];
                                for (d, v) in dst.iter_mut().zip(atom.chunks_exact(4)) {
                                    *d = d.add(decode([v[0], v[1], v[2], v[3]]));
                                }
                            }
                        }
                    }
                    for (r, row) in stage[..block].iter().enumerate() {
                        f(t.m0 + r0 + r, t.n0 + c0, &row[..cols]);
                    }
                }
            }
        }
    }

    /// Int32 partials (int8 plans) summed into row-major M×N `i32`. A sum that leaves
    /// the int32 range is [`Error::OutOfRange`] naming it (`out` is then unspecified).
    pub fn sum_i32_into(&self, c: &[u8], out: &mut [i32]) -> Result<()> {
        self.check(OutType::Int32, c, out.len())?;
        let mut bad = None;
        let n = self.n;
        self.for_int_sums(c, |row, col, sums| match sums {
            Sums::Narrow(sums) => out[row * n + col..][..sums.len()].copy_from_slice(sums),
            Sums::Wide(sums) => {
                let dst = &mut out[row * n + col..][..sums.len()];
                for (j, (d, &s)) in dst.iter_mut().zip(sums).enumerate() {
                    match i32::try_from(s) {
                        Ok(v) => *d = v,
                        Err(_) => bad = bad.or(Some((row * n + col + j, s))),
                    }
                }
            }
        });
        match bad {
            None => Ok(()),
            Some((index, v)) => Err(Error::OutOfRange {
                what: "results",
                index,
                value: v.to_string(),
                range: "the int32 range (Plan::reduce_int returns it exactly)",
            }),
        }
    }

    /// Int32 partials summed and scaled into row-major M×N `f32`:
    /// `sum · row_scales[row] · col_scales[col]` (no column scales: 1).
    pub fn scale_i32_into(
        &self,
        c: &[u8],
        row_scales: &[f32],
        col_scales: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<()> {
        self.check(OutType::Int32, c, out.len())?;
        Error::check_len("row scales", self.m, row_scales.len())?;
        if let Some(s) = col_scales {
            Error::check_len("column scales", self.n, s.len())?;
        }
        if self.scale_i32_narrow(c, row_scales, col_scales, out, simd::avx2()) {
            return Ok(());
        }
        // A partial too large for i32 sums: every place again from exact i64 sums.
        let n = self.n;
        self.for_each_sum(
            c,
            |v| i64::from(i32::from_le_bytes(v)),
            |row, col, sums| {
                let dst = &mut out[row * n + col..][..sums.len()];
                scale_into(
                    dst,
                    sums,
                    |v| v as f32,
                    row_scales[row],
                    col_scales.map(|cs| &cs[col..]),
                );
            },
        );
        Ok(())
    }

    /// [`Reduction::scale_i32_into`] summing in `i32`: for each [`ROW_BLOCK`] rows and
    /// [`CHUNK`] columns of a tile, every wave's atoms are added into a stack buffer
    /// (the first wave stored), then each row's piece is written once, scaled. Returns
    /// false, with `out` unspecified, when a partial is too large for `i32` sums to be
    /// safe ([`narrow_bound`]).
    fn scale_i32_narrow(
        &self,
        c: &[u8],
        row_scales: &[f32],
        col_scales: Option<&[f32]>,
        out: &mut [f32],
        vector: bool,
    ) -> bool {
        let waves = self.tiles.iter().map(|t| t.waves.len()).max().unwrap_or(1);
        if vector {
            let seen = self.scale_i32_tiles(c, waves > 1, row_scales, col_scales, out);
            return seen < narrow_bound(waves);
        }
        let n = self.n;
        // The OR of every partial's magnitude bits (`x ^ (x >> 31)`).
        let mut seen = 0u32;
        let mut stage = [[[0i32; 4]; NARROW_CHUNK / 4]; NARROW_ROWS];
        for t in &self.tiles {
            let offsets = &self.offsets[t.waves.clone()];
            for r0 in (0..t.rows).step_by(NARROW_ROWS) {
                let block = (t.rows - r0).min(NARROW_ROWS);
                for c0 in (0..t.cols).step_by(NARROW_CHUNK) {
                    let cols = (t.cols - c0).min(NARROW_CHUNK);
                    let groups = cols.div_ceil(4);
                    for (w, &o) in offsets.iter().enumerate() {
                        for gi in 0..groups {
                            let at = o + ((c0 / 4 + gi) * t.rows + r0) * 16;
                            let src = &c[at..at + block * 16];
                            // One wave cannot overflow: nothing to look for.
                            seen |= match (waves, w) {
                                (1, _) => add_atoms::<false, true>(&mut stage, gi, src),
                                (_, 0) => add_atoms::<true, true>(&mut stage, gi, src),
                                _ => add_atoms::<true, false>(&mut stage, gi, src),
                            };
                        }
                    }
                    for (r, piece) in stage[..block].iter().enumerate() {
                        let row = t.m0 + r0 + r;
                        let col = t.n0 + c0;
                        let dst = &mut out[row * n + col..][..cols];
                        let sums = &piece.as_flattened()[..cols];
                        let cs = col_scales.map(|cs| &cs[col..col + cols]);
                        scale_into(dst, sums, |v| v as f32, row_scales[row], cs);
                    }
                }
            }
        }
        seen < narrow_bound(waves)
    }

    /// The vector form of [`Reduction::scale_i32_narrow`]: each tile summed over its
    /// waves and scaled straight from C into `out` by [`simd::sum_scale_tile`], with no
    /// stack buffer. Returns the OR of every partial's magnitude bits (`check`;
    /// otherwise 0).
    fn scale_i32_tiles(
        &self,
        c: &[u8],
        check: bool,
        row_scales: &[f32],
        col_scales: Option<&[f32]>,
        out: &mut [f32],
    ) -> u32 {
        let n = self.n;
        let mut seen = 0u32;
        for t in &self.tiles {
            let partials = simd::Partials {
                c,
                offsets: &self.offsets[t.waves.clone()],
                stride: t.rows * 16,
                check,
            };
            let scales = simd::Scales {
                rows: &row_scales[t.m0..t.m0 + t.rows],
                cols: col_scales.map(|cs| &cs[t.n0..t.n0 + t.cols]),
                width: t.cols,
            };
            let dst = &mut out[t.m0 * n + t.n0..];
            seen |= simd::sum_scale_tile(&partials, scales, dst, n);
        }
        seen
    }

    /// Fp32 partials (fp16 and bf16 plans with fp32 results) summed in `f32` into
    /// row-major M×N.
    pub fn sum_f32_into(&self, c: &[u8], out: &mut [f32]) -> Result<()> {
        self.check(OutType::Fp32, c, out.len())?;
        let n = self.n;
        self.for_each_sum(c, f32::from_le_bytes, |row, col, sums| {
            out[row * n + col..][..sums.len()].copy_from_slice(sums);
        });
        Ok(())
    }

    /// Int32 partials summed exactly: `f(row, first column, sums)` for every place.
    /// Summed in `i32` when no partial exceeds `2³¹ / waves` in magnitude (then no sum
    /// can overflow; int8 products always qualify below 131 072 channels); C that no
    /// int8 product could have written is summed again in `i64`, and `f` sees every
    /// place a second time, with the exact sums.
    fn for_int_sums(&self, c: &[u8], mut f: impl FnMut(usize, usize, Sums<'_>)) {
        let waves = self.tiles.iter().map(|t| t.waves.len()).max().unwrap_or(1);
        let limit = i32::MAX as u32 / waves.max(1) as u32;
        let large = std::cell::Cell::new(false);
        self.for_each_sum(
            c,
            |v| {
                let x = i32::from_le_bytes(v);
                if x.unsigned_abs() > limit {
                    large.set(true);
                }
                x
            },
            |row, col, sums| f(row, col, Sums::Narrow(sums)),
        );
        if large.get() {
            self.for_each_sum(
                c,
                |v| i64::from(i32::from_le_bytes(v)),
                |row, col, sums| f(row, col, Sums::Wide(sums)),
            );
        }
    }
}

/// Adds (or, `FIRST`, stores) the atoms of `src`, one 16-byte atom of 4
/// int32 partials per row of a block (at most [`NARROW_ROWS`] rows), into column group
/// `gi` of each row of `stage`, wrapping; returns the OR of every partial's magnitude
/// bits `x ^ (x >> 31)` (`CHECK`; otherwise 0). A whole block goes through fixed sizes, which LLVM keeps in
/// vector registers.
#[inline]
fn add_atoms<const CHECK: bool, const FIRST: bool>(
    stage: &mut [[[i32; 4]; NARROW_CHUNK / 4]; NARROW_ROWS],
    gi: usize,
    src: &[u8],
) -> u32 {
    let mut seen = [0u32; 4];
    let mut add = |acc: &mut [i32; 4], atom: &[u8; 16]| {
        for ((a, v), seen) in acc.iter_mut().zip(atom.as_chunks::<4>().0).zip(&mut seen) {
            let x = i32::from_le_bytes(*v);
            if CHECK {
                *seen |= (x ^ (x >> 31)) as u32;
            }
            *a = if FIRST { x } else { a.wrapping_add(x) };
        }
    };
    if let Ok(whole) = <&[u8; 16 * NARROW_ROWS]>::try_from(src) {
        for (row, atom) in stage.iter_mut().zip(whole.as_chunks::<16>().0) {
            add(&mut row[gi], atom);
        }
    } else {
        for (row, atom) in stage.iter_mut().zip(src.as_chunks::<16>().0) {
            add(&mut row[gi], atom);
        }
    }
    seen[0] | seen[1] | seen[2] | seen[3]
}

/// The bound on partial magnitude bits below which `waves` partials sum in `i32`
/// without overflow: the largest power of two `2^b` with `waves · 2^b ≤ 2³¹`. A partial
/// whose `x ^ (x >> 31)` is below it lies in `-2^b..2^b`, so `waves` of them sum within
/// `-2³¹..2³¹`. Int8 products (at most 2¹⁴ a channel) of a wave of at most 4096
/// channels stay below 2²⁶, far under it for the waves a plan makes.
fn narrow_bound(waves: usize) -> u32 {
    let waves = waves.max(1) as u64;
    let b = (1u64 << 31) / waves;
    // The largest power of two not above b.
    (1u64 << (63 - b.leading_zeros())) as u32
}

/// A piece of a row of integer sums, as [`Reduction::for_int_sums`] made them.
enum Sums<'a> {
    Narrow(&'a [i32]),
    Wide(&'a [i64]),
}

/// An element of the sum buffer: `add` wraps for `i32` (whose sums are used only when
/// they cannot have wrapped) and is exact for `i64` and `f32`.
trait Lane: Copy + Default {
    fn add(self, other: Self) -> Self;
}

impl Lane for i32 {
    fn add(self, other: i32) -> i32 {
        self.wrapping_add(other)
    }
}

impl Lane for i64 {
    fn add(self, other: i64) -> i64 {
        self + other
    }
}

impl Lane for f32 {
    fn add(self, other: f32) -> f32 {
        self + other
    }
}

/// `dst[j] = sums[j] · row · cols[j]` (no column scales: 1).
fn scale_into<T: Copy>(
    dst: &mut [f32],
    sums: &[T],
    to_f32: impl Fn(T) -> f32,
    row: f32,
    cols: Option<&[f32]>,
) {
    match cols {
        Some(cs) => {
            for ((d, &s), &k) in dst.iter_mut().zip(sums).zip(cs) {
                *d = to_f32(s) * row * k;
            }
        }
        None => {
            for (d, &s) in dst.iter_mut().zip(sums) {
                *d = to_f32(s) * row;
            }
        }
    }
}

#[cfg(test)]
#[path = "finish_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "finish_vector_tests.rs"]
mod vector_tests;
