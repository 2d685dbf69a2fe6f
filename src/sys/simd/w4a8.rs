//! The int4 halves of W4A8 activations: each int8 value `v` becomes a high half `v >>
//! 4` and a low half `(v & 15) − 8`, two values of a half to a byte (the even channel
//! in the high nibble), 32 values of a row to 16 bytes. The nibble of the high half is
//! `v`'s high nibble, that of the low half `v`'s low nibble with its top bit flipped.
//!
//! [`w4a8_halves`] writes both halves of each value from one read of it (on x86-64 with
//! AVX2; otherwise by [`w4a8_rows`] once per half, whose scalar form the compiler
//! vectorises).

#[cfg(target_arch = "x86_64")]
use super::avx2;

/// Where one half of each value goes: group `g` of row `i` to the 16 bytes at `at + g ·
/// stride + 16 · i` of the output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HalfOut {
    /// Byte of row 0, group 0.
    pub at: usize,
    /// Bytes from one group of 32 channels to the next.
    pub stride: usize,
}

impl HalfOut {
    /// Whether group `groups − 1` of row `rows − 1` ends within `len` bytes.
    fn fits(self, rows: usize, groups: usize, len: usize) -> bool {
        (groups - 1)
            .checked_mul(self.stride)
            .and_then(|s| s.checked_add(self.at)?.checked_add(rows.checked_mul(16)?))
            .is_some_and(|end| end <= len)
    }
}

/// Whether the 32 · `groups` values of row `rows − 1` end within `len` values.
fn src_fits((src_stride, rows, groups): (usize, usize, usize), len: usize) -> bool {
    (rows - 1)
        .checked_mul(src_stride)
        .and_then(|s| s.checked_add(groups.checked_mul(32)?))
        .is_some_and(|end| end <= len)
}

/// Both int4 halves of `rows` rows of int8 values, row `i` the `32 · groups` values
/// from `src[i · src_stride..]`: the high halves where `high` says, the low halves
/// where `low` says (each as [`w4a8_rows`] writes one).
pub(crate) fn w4a8_halves(
    src: &[i8],
    shape: (usize, usize, usize),
    dst: &mut [u8],
    high: HalfOut,
    low: HalfOut,
) {
    let (_, rows, groups) = shape;
    if rows == 0 || groups == 0 {
        return;
    }
    let fits = src_fits(shape, src.len())
        && high.fits(rows, groups, dst.len())
        && low.fits(rows, groups, dst.len());
    #[cfg(target_arch = "x86_64")]
    if fits && avx2() {
        // SAFETY: the processor has AVX2 (checked just above); the kernel reads the `32
        // · groups` values of each row `i < rows` from `i · src_stride`, the last ending
        // within `src` (`src_fits`), and writes the 16 bytes of row `i`, group `g` at
        // `at + g · stride + 16 · i` of each `HalfOut`, the last ending within `dst`
        // (`fits`).
        unsafe { x86::halves_avx2(src, shape, dst, [high, low]) };
        return;
    }
    let _ = fits;
    w4a8_rows(src, shape, false, &mut dst[high.at..], high.stride);
    w4a8_rows(src, shape, true, &mut dst[low.at..], low.stride);
}

/// One int4 half of W4A8 activations for `rows` rows of int8 values, row `i` the `32 ·
/// groups` values from `src[i · src_stride..]`: each 32 values to 16 bytes, row `i`'s
/// group `g` written to `dst[g · dst_stride + 16 · i..][..16]`; `low`: the low halves,
/// else the high ones. The AVX2 form takes 4 rows at a time, so each group's 64 output
/// bytes are one store pair.
pub(crate) fn w4a8_rows(
    src: &[i8],
    (src_stride, rows, groups): (usize, usize, usize),
    low: bool,
    dst: &mut [u8],
    dst_stride: usize,
) {
    if rows == 0 || groups == 0 {
        return;
    }
    let out = HalfOut {
        at: 0,
        stride: dst_stride,
    };
    let fits = src_fits((src_stride, rows, groups), src.len()) && out.fits(rows, groups, dst.len());
    #[cfg(target_arch = "x86_64")]
    if fits && avx2() {
        // SAFETY: the processor has AVX2 (checked just above); the kernel reads the
        // `32 · groups` bytes of each row `i < rows` from `i · src_stride`, the last
        // ending within `src` (`src_fits`), and writes the 16 bytes of row `i`, group `g`
        // at `g · dst_stride + 16 · i`, the last ending within `dst` (`fits`).
        unsafe { x86::w4a8_rows(src, (src_stride, rows, groups), low, dst, dst_stride) };
        return;
    }
    let _ = fits;
    for i in 0..rows {
        let row = &src[i * src_stride..][..32 * groups];
        for (g, chunk) in row.chunks_exact(32).enumerate() {
            let out = &mut dst[g * dst_stride + 16 * i..][..16];
            for (j, d) in out.iter_mut().enumerate() {
                let (e, o) = (chunk[2 * j] as u8, chunk[2 * j + 1] as u8);
                *d = if low {
                    (((e & 0xF) ^ 8) << 4) | ((o & 0xF) ^ 8)
                } else {
                    (e & 0xF0) | (o >> 4)
                };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The vector forms. Each is an `unsafe fn` whose contract is the one its safe
    //! wrapper checks: the features are present and every access is in bounds.

    use super::HalfOut;
    use std::arch::x86_64::*;

    /// The halves of 32 values, each pair's byte (even value's nibble high) in the low
    /// byte of its 16-bit lane: every value's nibble (`low`: its low nibble with the top
    /// bit flipped; else its high nibble), then each pair as `16 · even + odd` by one
    /// multiply-add of unsigned bytes.
    #[target_feature(enable = "avx2")]
    fn halves(v: __m256i, low: bool) -> __m256i {
        let nib = _mm256_set1_epi8(0x0F);
        let nibbles = if low {
            _mm256_xor_si256(_mm256_and_si256(v, nib), _mm256_set1_epi8(8))
        } else {
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), nib)
        };
        _mm256_maddubs_epi16(nibbles, _mm256_set1_epi16(0x0110))
    }

    /// [`super::w4a8_rows`]: 4 rows of a group at a time (the pairs of rows packed
    /// together), then the rows left one at a time.
    ///
    /// # Safety
    /// AVX2 is present; `rows` and `groups` are positive; `(rows − 1) · src_stride + 32
    /// · groups <= src.len()` and `(groups − 1) · dst_stride + 16 · rows <= dst.len()`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn w4a8_rows(
        src: &[i8],
        (src_stride, rows, groups): (usize, usize, usize),
        low: bool,
        dst: &mut [u8],
        dst_stride: usize,
    ) {
        let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
        // SAFETY: for row i < rows and group g < groups, the 32 source bytes at i ·
        // src_stride + 32g end within `src`, and the 16 (or, for rows 4q..4q + 4, 64)
        // output bytes at g · dst_stride + 16i end within `dst` (the contract).
        let load = |i: usize, g: usize| unsafe {
            halves(
                _mm256_loadu_si256(sp.add(i * src_stride + 32 * g).cast()),
                low,
            )
        };
        for q in 0..rows / 4 {
            for g in 0..groups {
                let (a, b, c, d) = (
                    load(4 * q, g),
                    load(4 * q + 1, g),
                    load(4 * q + 2, g),
                    load(4 * q + 3, g),
                );
                // Per lane: 8 bytes of one row, 8 of the next; reordered to all of the
                // first row, then all of the second.
                let ab = _mm256_permute4x64_epi64::<0xD8>(_mm256_packus_epi16(a, b));
                let cd = _mm256_permute4x64_epi64::<0xD8>(_mm256_packus_epi16(c, d));
                // SAFETY: rows 4q..4q + 4 of group g: 64 bytes from g · dst_stride + 64q.
                unsafe {
                    let o = dp.add(g * dst_stride + 64 * q);
                    _mm256_storeu_si256(o.cast(), ab);
                    _mm256_storeu_si256(o.add(32).cast(), cd);
                }
            }
        }
        for i in rows / 4 * 4..rows {
            for g in 0..groups {
                let a = load(i, g);
                let packed = _mm256_permute4x64_epi64::<0xD8>(_mm256_packus_epi16(a, a));
                // SAFETY: row i of group g: 16 bytes from g · dst_stride + 16i.
                unsafe {
                    let o = dp.add(g * dst_stride + 16 * i);
                    _mm_storeu_si128(o.cast(), _mm256_castsi256_si128(packed));
                }
            }
        }
    }

    /// [`super::w4a8_halves`] by AVX2: 4 rows of a group at a time as [`w4a8_rows`]
    /// makes one half, each load serving both halves; the rows left by [`w4a8_rows`]
    /// once per half.
    ///
    /// The order: two groups (one cache line of each source row) down all the rows,
    /// then the next two. Its four output streams each advance 64 bytes a step. Taken
    /// row quad by row quad across every group instead, the pass wrote both halves'
    /// lines of every group at once; in a block of 128 rows those lines are 2 KiB apart,
    /// in 2 of the L1's 64 sets, and the pass made 12.6 GiB/s where one half at a time
    /// made 19.0 and this order 22.0 (the bench of docs/matmul.md, "Host work"; memcpy
    /// 36-37 GiB/s in the same session).
    ///
    /// # Safety
    /// AVX2 is present; `rows` and `groups` are positive; `(rows − 1) · src_stride + 32
    /// · groups <= src.len()`; for each of `outs`, `at + (groups − 1) · stride + 16 ·
    /// rows <= dst.len()`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn halves_avx2(
        src: &[i8],
        (src_stride, rows, groups): (usize, usize, usize),
        dst: &mut [u8],
        outs: [HalfOut; 2],
    ) {
        let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
        let quads = rows / 4;
        for g0 in (0..groups).step_by(2) {
            for q in 0..quads {
                for g in g0..groups.min(g0 + 2) {
                    // SAFETY: rows 4q..4q + 4 <= rows of group g < groups: 32 bytes
                    // each, ending within `src` by the contract.
                    let v: [__m256i; 4] = std::array::from_fn(|r| unsafe {
                        _mm256_loadu_si256(sp.add((4 * q + r) * src_stride + 32 * g).cast())
                    });
                    for (out, low) in outs.into_iter().zip([false, true]) {
                        let [a, b, c, d] = v.map(|v| halves(v, low));
                        let ab = _mm256_permute4x64_epi64::<0xD8>(_mm256_packus_epi16(a, b));
                        let cd = _mm256_permute4x64_epi64::<0xD8>(_mm256_packus_epi16(c, d));
                        // SAFETY: rows 4q..4q + 4 of group g: 64 bytes from at + g ·
                        // stride + 64q, ending within `dst` by the contract.
                        unsafe {
                            let o = dp.add(out.at + g * out.stride + 64 * q);
                            _mm256_storeu_si256(o.cast(), ab);
                            _mm256_storeu_si256(o.add(32).cast(), cd);
                        }
                    }
                }
            }
        }
        let (first, left) = (4 * quads, rows - 4 * quads);
        if left > 0 {
            for (out, low) in outs.into_iter().zip([false, true]) {
                let dst = &mut dst[out.at + 16 * first..];
                let src = &src[first * src_stride..];
                // SAFETY: AVX2 is present; rows `first..rows` of the contract, from
                // the slices' starts: the bounds of the contract hold for them.
                unsafe { w4a8_rows(src, (src_stride, left, groups), low, dst, out.stride) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Both kernels against the format's rule for each value, on seeded rows with the
    //! edge shapes of each vector form: one row, an odd row, an odd group, strides with
    //! gaps. On a machine without the features these check the scalar forms.

    use super::*;

    /// The nibble of value `v`'s half.
    fn nibble(v: i8, low: bool) -> u8 {
        let v = i32::from(v);
        let half = if low { (v & 15) - 8 } else { v >> 4 };
        (half & 15) as u8
    }

    /// Seeded values for `rows` rows of `groups` groups, each row `extra` values longer.
    fn rows_of(rows: usize, groups: usize, extra: usize) -> (Vec<i8>, usize) {
        let stride = 32 * groups + extra;
        let values = crate::seeded::Rng::new((rows * 7 + groups) as u64).bytes(rows * stride);
        (values.into_iter().map(|v| v as i8).collect(), stride)
    }

    /// Checks that `dst` holds the `low` half of every value of `src` where `out`
    /// says, and `untouched` everywhere `written` leaves false.
    fn check(src: &[i8], shape: (usize, usize, usize), dst: &[u8], out: HalfOut, low: bool) {
        let (src_stride, rows, groups) = shape;
        for i in 0..rows {
            for g in 0..groups {
                for j in 0..16 {
                    let at = i * src_stride + 32 * g + 2 * j;
                    let want = (nibble(src[at], low) << 4) | nibble(src[at + 1], low);
                    let got = dst[out.at + g * out.stride + 16 * i + j];
                    assert_eq!(got, want, "{shape:?}: row {i} group {g} byte {j} low {low}");
                }
            }
        }
    }

    /// The bytes of `dst` no half of `outs` covers all still hold 0xA5.
    fn gaps_untouched(dst: &[u8], (rows, groups): (usize, usize), outs: &[HalfOut]) {
        for (b, &v) in dst.iter().enumerate() {
            let covered = outs.iter().any(|o| {
                let rel = b.checked_sub(o.at);
                rel.is_some_and(|r| r / o.stride < groups && r % o.stride < 16 * rows)
            });
            assert!(
                covered || v == 0xA5,
                "byte {b} outside every half was written"
            );
        }
    }

    const SHAPES: [(usize, usize, usize); 7] = [
        (1, 1, 0),
        (1, 2, 5),
        (2, 1, 0),
        (4, 2, 16),
        (5, 3, 0),
        (7, 15, 8),
        (128, 4, 3),
    ];

    #[test]
    fn each_half_has_the_nibbles_of_each_value() {
        for (rows, groups, extra) in SHAPES {
            let (src, src_stride) = rows_of(rows, groups, extra);
            let shape = (src_stride, rows, groups);
            let out = HalfOut {
                at: 0,
                stride: 16 * rows + 2 * extra,
            };
            for low in [false, true] {
                let mut dst = vec![0xA5u8; (groups - 1) * out.stride + 16 * rows];
                w4a8_rows(&src, shape, low, &mut dst, out.stride);
                check(&src, shape, &dst, out, low);
                gaps_untouched(&dst, (rows, groups), &[out]);
            }
        }
    }

    #[test]
    fn both_halves_from_one_pass_match_each_half() {
        for (rows, groups, extra) in SHAPES {
            let (src, src_stride) = rows_of(rows, groups, extra);
            let shape = (src_stride, rows, groups);
            // The high halves after a gap, the low ones interleaved with them group by
            // group (as two blocks of one W4A8 buffer are not, but the kernel may not
            // assume they are apart).
            let stride = 32 * rows + 16;
            let high = HalfOut { at: 48, stride };
            let low = HalfOut {
                at: 48 + 16 * rows,
                stride,
            };
            let mut dst = vec![0xA5u8; 48 + groups * stride + 32];
            w4a8_halves(&src, shape, &mut dst, high, low);
            check(&src, shape, &dst, high, false);
            check(&src, shape, &dst, low, true);
            gaps_untouched(&dst, (rows, groups), &[high, low]);
        }
    }
}
