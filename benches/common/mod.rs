//! Helpers shared by the benchmarks (each benchmark uses a part of them).
#![allow(dead_code)]

/// A deterministic xorshift64 generator of int8 values, so every run uses the same data.
pub struct XorShift(pub u64);

impl XorShift {
    /// The next value in `-128..=127`.
    pub fn next_i8(&mut self) -> i8 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 56) as u8 as i8
    }

    /// `len` values.
    pub fn vec(&mut self, len: usize) -> Vec<i8> {
        (0..len).map(|_| self.next_i8()).collect()
    }
}
