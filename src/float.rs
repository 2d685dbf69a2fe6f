//! IEEE half precision (fp16) and bfloat16 conversions on raw bits, round to nearest
//! even, as the NPU's converters round. Shared by the packers of [`crate::kernels`] and
//! the simulator, which work on the bits the hardware reads and writes; the arithmetic
//! is the `half` crate's ([`half::f16`], [`half::bf16`]), which the public API uses as
//! element types.

use half::{bf16, f16};

/// fp16 bits to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    f16::from_bits(h).to_f32()
}

/// f32 to fp16 bits, rounding to nearest even; overflow gives infinity, NaN stays NaN.
pub fn f32_to_f16(f: f32) -> u16 {
    f16::from_f32(f).to_bits()
}

/// bf16 bits to f32 (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    bf16::from_bits(h).to_f32()
}

/// f32 to bf16 bits, rounding to nearest even; NaN stays NaN.
pub fn f32_to_bf16(f: f32) -> u16 {
    bf16::from_f32(f).to_bits()
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
