//! Helpers shared by the integration tests (each test binary uses a part of them).
#![allow(dead_code)]

/// Describes where two texts first differ: the 1-based line number and both lines
/// (`None` where one text has ended). Returns `None` when they are equal.
pub fn first_difference(expected: &[u8], actual: &[u8]) -> Option<String> {
    if expected == actual {
        return None;
    }
    let (e, a) = (
        String::from_utf8_lossy(expected),
        String::from_utf8_lossy(actual),
    );
    let line = e
        .lines()
        .zip(a.lines())
        .position(|(x, y)| x != y)
        .unwrap_or(e.lines().count().min(a.lines().count()));
    Some(format!(
        "first difference at line {} (lengths {} vs {} bytes):\n  expected: {:?}\n  actual:   {:?}",
        line + 1,
        expected.len(),
        actual.len(),
        e.lines().nth(line),
        a.lines().nth(line)
    ))
}

/// A small deterministic generator (xorshift64*) for test data.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `lo..=hi`.
    pub fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + ((self.next() >> 11) % (hi - lo + 1) as u64) as i32
    }

    /// A value in [-1, 1], in steps of 1/1000.
    pub fn float(&mut self) -> f32 {
        self.int(-1000, 1000) as f32 / 1000.0
    }
}
