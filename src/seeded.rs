//! Seeded operands: the xorshift64* generator that `rknpu matmul`, `rknpu doctor` and
//! the benchmarks use, so the same seed gives the same matrices on every machine and a
//! board's run can be compared with the simulator's.
//!
//! ```
//! use rknpu_driver::seeded::Rng;
//!
//! let mut r = Rng::from_seed(1);
//! let v = r.int(-8, 7);
//! assert!((-8..=7).contains(&v));
//! assert_eq!(Rng::from_seed(1).int(-8, 7), v);
//! ```

/// xorshift64* (Marsaglia; Vigna's multiplier). Not for cryptography.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose state is exactly `state` (never 0: a zero state stays zero).
    pub const fn new(state: u64) -> Rng {
        Rng(if state == 0 { 1 } else { state })
    }

    /// A generator for a user's seed: the seed spread by a Fibonacci multiplier, odd.
    pub const fn from_seed(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// An integer in `lo..=hi` (`lo <= hi`; a reversed range gives `lo`).
    pub fn int(&mut self, lo: i32, hi: i32) -> i32 {
        let span = (i64::from(hi) - i64::from(lo) + 1).max(1) as u64;
        (i64::from(lo) + ((self.next_u64() >> 11) % span) as i64) as i32
    }

    /// `len` random bytes (the top byte of each draw).
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| (self.next_u64() >> 56) as u8).collect()
    }

    /// A float in `[-1, 1)`.
    pub fn unit(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}
