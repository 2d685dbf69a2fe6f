//! Placeholder replaced by the backend benchmark.
fn main() {}
