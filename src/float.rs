//! IEEE half precision (fp16) and bfloat16 conversions, round to nearest even. Shared by
//! the packers of [`crate::kernels`] and the simulator; imports nothing.

/// fp16 bits to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1F) as u32;
    let man = (h & 0x3FF) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: value = m × 2^-24.
            let v = m as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        (0x1F, 0) => sign | 0x7F80_0000,
        (0x1F, m) => sign | 0x7FC0_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// f32 to fp16 bits, rounding to nearest even; overflow gives infinity, NaN stays NaN.
pub fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xFF) as i32;
    let man = x & 0x7F_FFFF;
    if exp == 0xFF {
        return if man == 0 {
            sign | 0x7C00
        } else {
            sign | 0x7E00 | (man >> 13) as u16
        };
    }
    let e = exp - 127 + 15;
    if e >= 0x1F {
        return sign | 0x7C00;
    }
    if e <= 0 {
        // Subnormal or zero in fp16.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1 << shift) - 1);
        let mut r = m >> shift;
        if rest > half || (rest == half && r & 1 == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1FFF;
    if rest > 0x1000 || (rest == 0x1000 && r & 1 == 1) {
        r += 1; // May carry into the exponent, up to infinity: still correct.
    }
    sign | r as u16
}

/// bf16 bits to f32 (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 to bf16 bits, rounding to nearest even; NaN stays NaN.
pub fn f32_to_bf16(f: f32) -> u16 {
    let x = f.to_bits();
    if f.is_nan() {
        return ((x >> 16) | 0x40) as u16;
    }
    let round = 0x7FFF + ((x >> 16) & 1);
    ((x + round) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_f16_round_trips_through_f32() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "{h:#06x} -> {f}");
            }
        }
    }

    #[test]
    fn f16_known_values() {
        assert_eq!(f16_to_f32(0x3C00), 1.0);
        assert_eq!(f16_to_f32(0xC000), -2.0);
        assert_eq!(f16_to_f32(0x7BFF), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f32_to_f16(65520.0), 0x7C00, "rounds up to infinity");
        assert_eq!(f32_to_f16(65519.0), 0x7BFF);
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3C00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3C02);
        assert_eq!(
            f32_to_f16(2f32.powi(-25)),
            0,
            "halfway to the smallest subnormal: even"
        );
        assert_eq!(f32_to_f16(3.0 * 2f32.powi(-26)), 1);
    }

    #[test]
    fn f16_rounding_matches_f64_nearest() {
        // Every f32 that is the midpoint or near-midpoint of two fp16 neighbours.
        for h in 0x0000u16..0x7BFF {
            let lo = f16_to_f32(h) as f64;
            let hi = f16_to_f32(h + 1) as f64;
            let mid = ((lo + hi) / 2.0) as f32;
            let expect = if h & 1 == 0 { h } else { h + 1 };
            assert_eq!(f32_to_f16(mid), expect, "midpoint after {h:#06x}");
        }
    }

    #[test]
    fn bf16_conversions() {
        assert_eq!(bf16_to_f32(0x3F80), 1.0);
        assert_eq!(f32_to_bf16(1.0), 0x3F80);
        assert_eq!(
            f32_to_bf16(f32::from_bits(0x3F80_8000)),
            0x3F80,
            "tie to even"
        );
        assert_eq!(
            f32_to_bf16(f32::from_bits(0x3F81_8000)),
            0x3F82,
            "tie to even"
        );
        assert_eq!(f32_to_bf16(f32::from_bits(0x3F80_8001)), 0x3F81);
        for h in 0..=u16::MAX {
            let f = bf16_to_f32(h);
            if !f.is_nan() {
                assert_eq!(f32_to_bf16(f), h);
            }
        }
    }
}
