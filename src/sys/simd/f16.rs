//! f32 to fp16 conversion of a run of values, as the float activation packer writes
//! them: on x86-64 with F16C by 8-value vector conversions (the library is built for
//! baseline x86-64, so `half`'s own conversion calls a 4-value kernel per chunk through
//! a function boundary); elsewhere, or without the feature, by `half`'s slice
//! conversion (which uses the FP16 conversions of an aarch64 processor that has them).

use half::f16;
use half::slice::HalfFloatSliceExt;
use zerocopy::IntoBytes;

/// `src` rounded to fp16 (to nearest, ties to even), little-endian into `dst`, two
/// bytes a value. Returns whether every result is finite: false when a value is not
/// finite or rounds to infinity (the converted bits' exponent all ones), in which case
/// the caller refuses the input. Panics unless `dst` is twice as long as `src`.
pub(crate) fn f32_to_f16_bytes(src: &[f32], dst: &mut [u8]) -> bool {
    assert_eq!(dst.len(), 2 * src.len(), "two bytes a value");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the processor has F16C and AVX (checked just above); the kernel reads
        // `src` and writes `dst`, which holds two bytes for each of its values (asserted
        // above).
        return unsafe { x86::f32_to_f16_bytes(src, dst) };
    }
    let mut buf = [f16::ZERO; 64];
    let mut exponents = 0u16;
    for (s, d) in src.chunks(64).zip(dst.chunks_mut(128)) {
        let buf = &mut buf[..s.len()];
        buf.convert_from_f32_slice(s);
        exponents |= buf
            .iter()
            .fold(0, |e, h| e | (!h.to_bits() & 0x7C00 == 0) as u16);
        d.copy_from_slice(buf.as_bytes());
    }
    exponents == 0
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The F16C form.

    use std::arch::x86_64::*;

    /// [`super::f32_to_f16_bytes`]: 8 values a step (one 256-bit load, one conversion,
    /// one 128-bit store, and the results' exponents compared with all ones), the last
    /// fewer than 8 one at a time.
    ///
    /// # Safety
    /// F16C and AVX are present; `dst.len() == 2 · src.len()`.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f32_to_f16_bytes(src: &[f32], dst: &mut [u8]) -> bool {
        let whole = src.len() / 8 * 8;
        let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
        let exponent = _mm_set1_epi16(0x7C00);
        let mut infinite = _mm_setzero_si128();
        for i in (0..whole).step_by(8) {
            // SAFETY: values i..i + 8 <= whole <= src.len(), bytes 2i..2i + 16 <= dst.len()
            // (the contract).
            let h = unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(sp.add(i)));
                _mm_storeu_si128(dp.add(2 * i).cast(), h);
                h
            };
            let all_ones = _mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent);
            infinite = _mm_or_si128(infinite, all_ones);
        }
        let mut finite = _mm_movemask_epi8(infinite) == 0;
        for (i, &v) in src.iter().enumerate().skip(whole) {
            let h = half::f16::from_f32(v).to_bits();
            finite &= h & 0x7C00 != 0x7C00;
            dst[2 * i..2 * i + 2].copy_from_slice(&h.to_le_bytes());
        }
        finite
    }
}

#[cfg(test)]
mod tests {
    //! The conversion against `half`'s, value by value, over lengths that leave every
    //! tail of the 8-value steps, on seeded values, both signs, subnormals and values
    //! that round to fp16's largest; and its finiteness flag, with one value that is not
    //! finite or rounds to infinity at each place of such a run.

    use super::*;

    #[test]
    fn every_length_converts_as_half_does() {
        let mut rng = crate::seeded::Rng::new(11);
        for len in (0..40).chain([255, 256, 1000]) {
            let src: Vec<f32> = (0..len)
                .map(|i| match i % 4 {
                    0 => rng.unit() * 8.0 - 4.0,
                    1 => (rng.unit() - 0.5) * 1.0e-5,
                    2 => 65519.0 - rng.unit(),
                    _ => f32::from_bits(rng.next_u64() as u32 & 0x477F_FFFF),
                })
                .collect();
            let mut dst = vec![0xA5u8; 2 * len];
            assert!(f32_to_f16_bytes(&src, &mut dst), "all finite");
            for (v, d) in src.iter().zip(dst.chunks_exact(2)) {
                let want = f16::from_f32(*v).to_bits();
                assert_eq!(u16::from_le_bytes([d[0], d[1]]), want, "{v:e} of {len}");
            }
        }
    }

    #[test]
    fn one_value_that_is_not_finite_in_fp16_anywhere_clears_the_flag() {
        for len in [1usize, 7, 8, 9, 17, 64] {
            for at in 0..len {
                for bad in [f32::NAN, f32::INFINITY, -65520.0, 1.0e6] {
                    let mut src = vec![1.5f32; len];
                    src[at] = bad;
                    let mut dst = vec![0u8; 2 * len];
                    assert!(!f32_to_f16_bytes(&src, &mut dst), "{bad} at {at} of {len}");
                }
            }
        }
    }
}
