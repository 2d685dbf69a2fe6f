//! Hardware limits that the generators (`kernels`) and the simulator (`sim`) both
//! enforce, defined once here, each with its source. A generator keeps to a limit; the
//! simulator refuses or flags a task that breaks it; both read the same constant.
//! (The CBUF geometry is [`super::cbuf`].)

/// The int8 K tile sizes that failed on boards for more than [`INT8_GAP_MAX_ROWS`]
/// rows: strictly between 3072 and 4096 channels (quirk 4,
/// docs/hardware/quirks.md#quirk-4).
pub const INT8_K_GAP: (u32, u32) = (3072, 4096);

/// The most rows an int8 task may have with a K tile inside [`INT8_K_GAP`].
pub const INT8_GAP_MAX_ROWS: u32 = 4;

/// Whether an int8 K tile of `channels` lies strictly inside [`INT8_K_GAP`].
pub const fn in_int8_k_gap(channels: u32) -> bool {
    channels > INT8_K_GAP.0 && channels < INT8_K_GAP.1
}

/// The fewest CBUF banks a matmul or convolution task leaves its weights: a split with
/// fewer gave wrong results on boards (quirk 3, docs/hardware/quirks.md#quirk-3).
pub const MIN_WEIGHT_BANKS: u32 = 2;

/// The most CBUF banks a task gives its data: every bank but [`MIN_WEIGHT_BANKS`].
pub const MAX_DATA_BANKS: u32 = super::cbuf::BANKS - MIN_WEIGHT_BANKS;

/// The widest 16-bit float task in output channels: wider ones made later int8 tasks
/// time out on boards (quirk 7, docs/hardware/quirks.md#quirk-7).
pub const FLOAT_MAX_CHANNELS: u32 = 4096;

/// The widest int8 N tile in output channels, as `rknpu2_matmul_open` keeps them
/// (docs/hardware/matmul-programs.md#n-tiles).
pub const INT8_MAX_N_TILE: u32 = 3072;

/// Pooling: output rows one task holds for an input `width` pixels wide,
/// ⌊8191 / width⌋ (docs/hardware/pooling.md#limits).
pub const fn pool_max_rows(width: u32) -> u32 {
    8191 / width
}

/// Pooling: the smallest width and height of a PPU-written intermediate that a later
/// pass reads correctly (docs/hardware/pooling.md#chains).
pub const POOL_MIN_INTERMEDIATE: u32 = 4;

/// Pooling: int8 −128 in the 19-bit signed pad field, the pad value of max pooling
/// (docs/hardware/pooling.md#int8).
pub const POOL_INT8_MAX_PAD: u32 = 0x7_FF80;

/// fp16 −inf: the pad value of max pooling.
pub const FP16_NEG_INF: u32 = 0xFC00;

/// fp16 +inf: the pad value of min pooling.
pub const FP16_POS_INF: u32 = 0x7C00;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_is_open_at_both_ends() {
        assert!(!in_int8_k_gap(3072));
        assert!(in_int8_k_gap(3073) && in_int8_k_gap(4095));
        assert!(!in_int8_k_gap(4096));
    }

    #[test]
    fn the_pad_values_are_what_they_say() {
        assert_eq!(
            half::f16::from_bits(FP16_NEG_INF as u16),
            half::f16::NEG_INFINITY
        );
        assert_eq!(
            half::f16::from_bits(FP16_POS_INF as u16),
            half::f16::INFINITY
        );
        // −128 sign-extended to 19 bits.
        assert_eq!(POOL_INT8_MAX_PAD, (-128i32 as u32) & 0x7_FFFF);
        assert_eq!(pool_max_rows(1), 8191);
    }
}
