//! Explicit vector kernels for the host's per-call work (finishing C, packing int8 weights
//! from K×N, W4A8 activations in [`w4a8`]), chosen at run time: on x86-64 the AVX2 forms
//! (for W4A8 also an AVX-512 one) run when the processor has the feature
//! (`is_x86_feature_detected!`, which std caches), since the library itself is built for
//! baseline x86-64 (SSE2). Every function here is safe and
//! takes slices; each checks that every access its vector form makes lies inside them
//! and otherwise, or without the feature, runs a plain scalar form computing the same
//! values. On other architectures (aarch64, where NEON is baseline) only the scalar
//! forms exist; the compiler vectorises some of them there and not others
//! (docs/matmul.md, "Host work").
//!
//! Beside them, helpers on baseline SSE/SSE2 (no detection): a cache prefetch, and a
//! fixed-size copy by non-temporal stores with its fence, which the GGUF packing pass
//! writes bank rows with.
//!
//! The callers in `kernels::matmul` keep their own scalar paths for machines without
//! the feature and test these kernels bit for bit against them. Every `unsafe` block is
//! listed in docs/unsafe-audit.md.

mod f16;
mod w4a8;
pub(crate) use f16::f32_to_f16_bytes;
pub(crate) use w4a8::{HalfOut, w4a8_halves};

/// Whether the AVX2 kernels run on this machine.
pub(crate) fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Hints that the cache line holding `data[at]` will be read soon, so that a pass
/// reading many rows at once finds them in the cache (the hint changes no value; it does
/// nothing when `at` lies outside `data`, or off x86-64).
#[inline(always)]
pub(crate) fn prefetch(data: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if at < data.len() {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is baseline on x86-64; `at < data.len()` (checked just above), so
        // the pointer lies inside `data`, and a prefetch reads nothing the program sees.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(data.as_ptr().add(at).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, at);
}

/// Copies the `N` bytes of `src` into `dst` with non-temporal stores when `dst` is
/// 16-byte aligned (on x86-64, where SSE2 is baseline): the lines go to memory without
/// first being read into the cache, which halves the traffic of writing a buffer the
/// processor will not read again soon. Otherwise (and for the last `N % 16` bytes) a
/// plain copy. Call [`stream_fence`] once the streamed writes are done.
#[inline(always)]
pub(crate) fn stream_copy<const N: usize>(dst: &mut [u8; N], src: &[u8; N]) {
    #[cfg(target_arch = "x86_64")]
    if (dst.as_ptr() as usize).is_multiple_of(16) {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let whole = N / 16 * 16;
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        for i in (0..whole).step_by(16) {
            // SAFETY: SSE2 is baseline on x86-64; bytes i..i + 16 (i + 16 <= whole <= N)
            // lie inside both N-byte arrays, and `d + i` is 16-byte aligned (`d` is,
            // checked above, and i is a multiple of 16), as the streaming store requires.
            unsafe {
                let v = _mm_loadu_si128(s.add(i).cast::<__m128i>());
                _mm_stream_si128(d.add(i).cast::<__m128i>(), v);
            }
        }
        dst[whole..].copy_from_slice(&src[whole..]);
        return;
    }
    dst.copy_from_slice(src);
}

/// Orders every store [`stream_copy`] made before the stores that follow (an `sfence`
/// on x86-64; nothing elsewhere), so a buffer filled by streaming is complete for
/// whoever reads it next.
pub(crate) fn stream_fence() {
    // SAFETY: SSE is baseline on x86-64; a fence touches no memory.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Where the int32 partials of one output tile lie in C: wave `w`'s atom of column group
/// `g` (4 partials, little-endian) and tile row `i` starts at byte `offsets[w] + g ·
/// stride + 16 · i` of `c` (a tile's rows of one group are contiguous).
pub(crate) struct Partials<'a> {
    /// The C buffer.
    pub c: &'a [u8],
    /// Each wave's byte offset of the tile's first atom.
    pub offsets: &'a [usize],
    /// Bytes from one column group's atoms to the next (the tile's rows · 16).
    pub stride: usize,
    /// Whether to return the OR of every partial's magnitude bits.
    pub check: bool,
}

/// The scales of one tile's products: row `i` (of `rows.len()`) and column `j` (of
/// `width`) scale by `rows[i] · cols[j]` (no column scales: by `rows[i]` alone).
#[derive(Clone, Copy)]
pub(crate) struct Scales<'a> {
    /// One scale per tile row.
    pub rows: &'a [f32],
    /// One scale per column, at least `width` of them, or none.
    pub cols: Option<&'a [f32]>,
    /// The tile's columns.
    pub width: usize,
}

/// Sums one tile's K waves of int32 partials (wrapping `i32`) and scales them into
/// `dst`: row `i` (of `s.rows.len()`) and column `j` (of `s.width`) go to `dst[i ·
/// dst_stride + j]` as `(sum as f32 · s.rows[i]) · s.cols[j]` (no column scales: `sum
/// as f32 · s.rows[i]`). With `p.check`, returns the OR of `x ^ (x >> 31)` over every
/// partial read (all 4 of each atom, the last group's padding too); otherwise 0. The
/// caller uses the results only when that OR shows the sums cannot have wrapped.
///
/// The vector form takes 4 rows by 16 columns at a time: for each wave, one 64-byte
/// line of C per column group, and 4 whole 64-byte lines of `dst` written.
pub(crate) fn sum_scale_tile(
    p: &Partials<'_>,
    s: Scales<'_>,
    dst: &mut [f32],
    dst_stride: usize,
) -> u32 {
    let Scales { rows, cols, width } = s;
    let groups = width.div_ceil(4);
    let fits = groups == 0
        || rows.is_empty()
        || p.offsets.iter().all(|&o| {
            (groups - 1)
                .checked_mul(p.stride)
                .and_then(|s| s.checked_add(o)?.checked_add(16 * rows.len()))
                .is_some_and(|end| end <= p.c.len())
        });
    let dst_fits = rows.is_empty()
        || (rows.len() - 1)
            .checked_mul(dst_stride)
            .and_then(|s| s.checked_add(width))
            .is_some_and(|end| end <= dst.len());
    let cols_fit = cols.is_none_or(|cs| cs.len() >= width);
    let mut seen = 0;
    // The rows the vector form did (it never runs off x86-64).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if fits && dst_fits && cols_fit && rows.len() >= 4 && width >= 16 && avx2() {
        // SAFETY: the processor has AVX2 (checked just above). The kernel reads the atoms
        // of rows below `4 · (rows.len() / 4)` and groups below `4 · (width / 16)`, each
        // inside `c` (`fits`: the last group's last row ends within `c` for every
        // wave); the first `width` column scales (`cols_fit`); and writes columns below
        // `width` of rows below `rows.len()`, inside `dst` (`dst_fits`).
        seen = unsafe { x86::sum_scale_quads(p, s, dst, dst_stride) };
        done = rows.len() / 4 * 4;
    }
    let _ = (fits, dst_fits, cols_fit);
    // The rest (all of it without the vector form): the columns the quads left, then the
    // rows.
    let vector_cols = if done > 0 { width / 16 * 4 } else { 0 };
    for (i, &row) in rows.iter().enumerate() {
        let first = if i < done { vector_cols } else { 0 };
        for g in first..groups {
            seen |= scalar_atom(p, (i, g, row), s, &mut dst[i * dst_stride..]);
        }
    }
    seen
}

/// The scalar form of one atom of [`sum_scale_tile`]: tile row `i` (whose scale is
/// `row`), column group `g`, written to `dst_row[4g..]` (the real columns below
/// `s.width`).
fn scalar_atom(
    p: &Partials<'_>,
    (i, g, row): (usize, usize, f32),
    s: Scales<'_>,
    dst_row: &mut [f32],
) -> u32 {
    let Scales { cols, width, .. } = s;
    let mut seen = 0u32;
    let mut sum = [0i32; 4];
    for &o in p.offsets {
        let atom = &p.c[o + g * p.stride + 16 * i..][..16];
        for (s, v) in sum.iter_mut().zip(atom.chunks_exact(4)) {
            let x = i32::from_le_bytes([v[0], v[1], v[2], v[3]]);
            if p.check {
                seen |= (x ^ (x >> 31)) as u32;
            }
            *s = s.wrapping_add(x);
        }
    }
    for (j, &s) in sum.iter().enumerate().take(width - g * 4) {
        let col = g * 4 + j;
        dst_row[col] = match cols {
            Some(cs) => s as f32 * row * cs[col],
            None => s as f32 * row,
        };
    }
    seen
}

/// One whole int8 weight atom from K×N bytes, a 32×32 byte transpose: `atom[n · 32 +
/// k] = b[first + k · stride + n]` for `k, n` in `0..32` (32 channels of 32 kernels,
/// each kernel's channels contiguous).
pub(crate) fn transpose_i8_atom(b: &[u8], first: usize, stride: usize, atom: &mut [u8; 1024]) {
    let fits = stride
        .checked_mul(31)
        .and_then(|s| s.checked_add(first)?.checked_add(32))
        .is_some_and(|end| end <= b.len());
    #[cfg(target_arch = "x86_64")]
    if fits && avx2() {
        // SAFETY: the processor has AVX2 (checked just above); the kernel reads 32 bytes
        // at `first + k · stride` for k in 0..32, the last ending at `first + 31 · stride
        // + 32 <= b.len()` (`fits`), and writes the 1024 bytes of `atom`.
        unsafe { x86::transpose_i8_atom(b, first, stride, atom) };
        return;
    }
    let _ = fits;
    for k in 0..32 {
        let src = &b[first + k * stride..][..32];
        for (n, &v) in src.iter().enumerate() {
            atom[n * 32 + k] = v;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The AVX2 forms. Each is an `unsafe fn` whose contract is the one its safe wrapper
    //! checks: the feature is present and every access is in bounds.

    use std::arch::x86_64::*;

    /// Row quads finished together by [`sum_scale_quads`]: 8 rows, whose 8 output lines
    /// of a step share one set of an 8-way L1 when the rows are a power of two apart
    /// (16 rows thrash it: 0.23 of memcpy for one wave against 0.55, measured).
    const QUADS: usize = 2;

    /// [`super::sum_scale_tile`] over whole quads: 4 rows by 4 column groups (16
    /// columns) at a time. Returns the OR of the magnitude bits of the partials it read
    /// (`p.check`; otherwise 0).
    ///
    /// # Safety
    /// AVX2 is present; for every wave, the atoms of rows below `rows.len()` and groups
    /// below `width.div_ceil(4)` lie in `p.c`; `cols`, when given, holds at least
    /// `width` scales; row `i < rows.len()` of `dst` holds `width` values from `i ·
    /// dst_stride` on.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sum_scale_quads(
        p: &super::Partials<'_>,
        s: super::Scales<'_>,
        dst: &mut [f32],
        dst_stride: usize,
    ) -> u32 {
        let super::Scales { rows, cols, width } = s;
        let base = p.c.as_ptr();
        let out = dst.as_mut_ptr();
        let mut seen = _mm256_setzero_si256();
        let quads = rows.len() / 4;
        // Blocks of up to QUADS quads: each group's atoms of them are adjacent lines of
        // C, and each step writes one line of each of the block's rows.
        for b0 in (0..quads).step_by(QUADS) {
            for g0 in (0..width / 16).map(|q| 4 * q) {
                for i0 in (b0..(b0 + QUADS).min(quads)).map(|q| 4 * q) {
                    let scale: [__m256; 4] = std::array::from_fn(|r| _mm256_set1_ps(rows[i0 + r]));
                    // acc[2q + h]: group g0 + q, rows i0 + 2h and i0 + 2h + 1.
                    let mut acc = [_mm256_setzero_si256(); 8];
                    for &o in p.offsets {
                        for (k, a) in acc.iter_mut().enumerate() {
                            let at = o + (g0 + k / 2) * p.stride + 16 * (i0 + 2 * (k % 2));
                            // SAFETY: group g0 + k/2 < 4 · (width / 16) <= width.div_ceil(4)
                            // and rows i0 + 2(k % 2) + 1 < rows.len(): both atoms lie in `p.c`.
                            let v = unsafe { _mm256_loadu_si256(base.add(at).cast()) };
                            if p.check {
                                let mag = _mm256_xor_si256(v, _mm256_srai_epi32::<31>(v));
                                seen = _mm256_or_si256(seen, mag);
                            }
                            *a = _mm256_add_epi32(*a, v);
                        }
                    }
                    let col = 4 * g0;
                    // SAFETY: columns col..col + 16 lie below `width`.
                    let cs = cols.map(|cs| unsafe {
                        let p = cs.as_ptr().add(col);
                        [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]
                    });
                    for (r, &scale) in scale.iter().enumerate() {
                        // Row i0 + r: lane (r % 2) of groups g0..g0 + 4, from the registers
                        // of its row pair.
                        let h = r / 2;
                        let (a, b, c, d) = (acc[h], acc[2 + h], acc[4 + h], acc[6 + h]);
                        let (left, right) = if r % 2 == 0 {
                            (
                                _mm256_permute2x128_si256::<0x20>(a, b),
                                _mm256_permute2x128_si256::<0x20>(c, d),
                            )
                        } else {
                            (
                                _mm256_permute2x128_si256::<0x31>(a, b),
                                _mm256_permute2x128_si256::<0x31>(c, d),
                            )
                        };
                        let mut f = [
                            _mm256_mul_ps(_mm256_cvtepi32_ps(left), scale),
                            _mm256_mul_ps(_mm256_cvtepi32_ps(right), scale),
                        ];
                        if let Some(cs) = cs {
                            f = [_mm256_mul_ps(f[0], cs[0]), _mm256_mul_ps(f[1], cs[1])];
                        }
                        // SAFETY: row i0 + r < rows.len() holds columns col..col + 16 < width
                        // from (i0 + r) · dst_stride on.
                        unsafe {
                            let q = out.add((i0 + r) * dst_stride + col);
                            _mm256_storeu_ps(q, f[0]);
                            _mm256_storeu_ps(q.add(8), f[1]);
                        }
                    }
                }
            }
        }
        let mut lanes = [0u32; 8];
        // SAFETY: `lanes` is 32 bytes, the width of the store.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), seen) };
        lanes.iter().fold(0, |a, &l| a | l)
    }

    /// [`super::transpose_i8_atom`]: rows 0-15 and 16-31 of the atom each transposed as
    /// two 16×16 byte blocks at once (one per 128-bit lane) by four rounds of byte
    /// interleaves, then the halves of each kernel joined.
    ///
    /// # Safety
    /// AVX2 is present; `first + 31 · stride + 32 <= b.len()`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose_i8_atom(
        b: &[u8],
        first: usize,
        stride: usize,
        atom: &mut [u8; 1024],
    ) {
        let p = b.as_ptr();
        let mut half = [[_mm256_setzero_si256(); 16]; 2];
        for (h, regs) in half.iter_mut().enumerate() {
            for (i, r) in regs.iter_mut().enumerate() {
                // SAFETY: row 16h + i of 32 starts at `first + (16h + i) · stride`, and
                // its 32 bytes end at or before `first + 31 · stride + 32 <= b.len()`.
                *r = unsafe { _mm256_loadu_si256(p.add(first + (16 * h + i) * stride).cast()) };
            }
            // Each round sends (register i, byte j) to (register 2i + j/8 mod 16, byte
            // 2(j mod 8) + i/8): four rounds make register n hold byte n of every row.
            for _ in 0..4 {
                let r = *regs;
                for i in 0..8 {
                    regs[2 * i] = _mm256_unpacklo_epi8(r[i], r[i + 8]);
                    regs[2 * i + 1] = _mm256_unpackhi_epi8(r[i], r[i + 8]);
                }
            }
        }
        let out = atom.as_mut_ptr();
        for (n, (&top, &bottom)) in half[0].iter().zip(&half[1]).enumerate() {
            // Lane 0 of register n holds kernel n, lane 1 kernel n + 16; rows 0-15 come
            // from the first half, 16-31 from the second.
            let low = _mm256_permute2x128_si256::<0x20>(top, bottom);
            let high = _mm256_permute2x128_si256::<0x31>(top, bottom);
            // SAFETY: kernels n and n + 16 (n < 16) are bytes 32n..32n + 32 and
            // 32(n + 16)..32(n + 16) + 32 of the 1024-byte atom.
            unsafe {
                _mm256_storeu_si256(out.add(32 * n).cast(), low);
                _mm256_storeu_si256(out.add(32 * (n + 16)).cast(), high);
            }
        }
    }
}

#[cfg(test)]
#[path = "simd_tests.rs"]
mod tests;
