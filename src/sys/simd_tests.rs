//! The vector kernels against CPU references written here, on seeded random data and the
//! edge sizes of each: tails that are not a multiple of the vector width, one row, odd
//! widths. On a machine without AVX2 these check the scalar forms.

use super::*;

/// Deterministic bytes.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    crate::seeded::Rng::new(seed).bytes(len)
}

/// The i32 at byte `at` of `c`.
fn word(c: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(c[at..at + 4].try_into().unwrap())
}

#[test]
fn tile_sums_match_a_reference_for_every_shape() {
    for (rows_n, width, waves, scaled) in [
        (1, 5, 1, true),
        (4, 16, 1, false),
        (5, 17, 2, true),
        (13, 70, 3, true),
        (16, 128, 6, false),
        (33, 47, 4, true),
        (8, 3, 2, true),
    ] {
        let groups = usize::div_ceil(width, 4);
        // Tile rows beyond the ones finished, as a plan's padding would leave.
        let tile_rows = rows_n + 3;
        let stride = tile_rows * 16;
        let wave_bytes = groups * stride + 40;
        let offsets: Vec<usize> = (0..waves).map(|w| 24 + w * wave_bytes).collect();
        let c = noise(24 + waves * wave_bytes, (rows_n * 131 + width) as u64);
        let rows: Vec<f32> = (0..rows_n).map(|i| 0.25 + i as f32 / 7.0).collect();
        let cols: Vec<f32> = (0..width).map(|j| 1.0 / (3 + j) as f32).collect();
        let cols = scaled.then_some(cols.as_slice());
        let dst_stride = width + 9;
        let mut dst = vec![-1f32; rows_n * dst_stride];
        let p = Partials {
            c: &c,
            offsets: &offsets,
            stride,
            check: true,
        };
        let scales = Scales {
            rows: &rows,
            cols,
            width,
        };
        let seen = sum_scale_tile(&p, scales, &mut dst, dst_stride);
        let mut want_seen = 0u32;
        for i in 0..rows_n {
            for g in 0..groups {
                for lane in 0..4 {
                    let mut sum = 0i32;
                    for &o in &offsets {
                        let x = word(&c, o + g * stride + 16 * i + 4 * lane);
                        want_seen |= (x ^ (x >> 31)) as u32;
                        sum = sum.wrapping_add(x);
                    }
                    let j = 4 * g + lane;
                    if j < width {
                        let scale = cols.map_or(1.0, |cs| cs[j]);
                        let want = if cols.is_some() {
                            sum as f32 * rows[i] * scale
                        } else {
                            sum as f32 * rows[i]
                        };
                        let got = dst[i * dst_stride + j];
                        assert_eq!(got.to_bits(), want.to_bits(), "{rows_n}x{width} ({i}, {j})");
                    }
                }
            }
            // The columns between rows are not written.
            assert!(
                dst[i * dst_stride + width..]
                    [..(dst_stride - width).min(dst.len() - i * dst_stride - width)]
                    .iter()
                    .all(|&v| v == -1.0)
            );
        }
        assert_eq!(seen, want_seen, "{rows_n}x{width}");
        let unchecked = Partials { check: false, ..p };
        assert_eq!(sum_scale_tile(&unchecked, scales, &mut dst, dst_stride), 0);
    }
}

#[test]
fn atoms_transpose_any_stride() {
    for (stride, first) in [(32, 0), (33, 5), (4096, 64), (96, 7)] {
        let b = noise(first + 31 * stride + 32 + 11, stride as u64);
        let mut atom = [0u8; 1024];
        transpose_i8_atom(&b, first, stride, &mut atom);
        for k in 0..32 {
            for n in 0..32 {
                assert_eq!(atom[n * 32 + k], b[first + k * stride + n], "({k}, {n})");
            }
        }
    }
}

/// `stream_copy::<N>` into a buffer at every offset of a 64-byte line: the aligned
/// destinations take the streaming stores (and a plain copy of the last `N % 16`
/// bytes), the others the plain copy; both leave the bytes around the copy alone.
fn streamed_copies_at_every_offset<const N: usize>(seed: u64) {
    let src: [u8; N] = noise(N, seed).try_into().unwrap();
    let mut buf = vec![0x5Au8; N + 3 * 64];
    for offset in 64..128 {
        buf.fill(0x5A);
        let dst: &mut [u8; N] = (&mut buf[offset..offset + N]).try_into().unwrap();
        stream_copy(dst, &src);
        stream_fence();
        assert_eq!(&buf[offset..offset + N], &src[..], "{N} at offset {offset}");
        assert!(buf[..offset].iter().all(|&v| v == 0x5A), "{N} at {offset}");
        assert!(
            buf[offset + N..].iter().all(|&v| v == 0x5A),
            "{N} at {offset}"
        );
    }
}

#[test]
fn streamed_copies_equal_their_source_at_every_alignment() {
    streamed_copies_at_every_offset::<32>(3);
    streamed_copies_at_every_offset::<1024>(4);
    // Lengths with a tail of plain stores, and one shorter than a store.
    streamed_copies_at_every_offset::<47>(5);
    streamed_copies_at_every_offset::<9>(6);
}
