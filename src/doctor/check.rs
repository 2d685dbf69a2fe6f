//! The ladder's data: seeded operands, the CPU's product, and the comparison that finds
//! the first differing element.

use super::diagnosis::Mismatch;
use crate::float::{f16_to_f32, f32_to_f16};
use crate::kernels::single::Dtype;
use crate::seeded::Rng;

/// Bytes for a buffer round trip, different for each `seed`.
pub(super) fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng::from_seed(seed);
    (0..len).map(|_| (r.next_u64() >> 24) as u8).collect()
}

/// The operands of `C[M×N] = A[M×K] × B[K×N]`, row-major.
#[derive(Clone, Debug)]
pub(super) enum Operands {
    /// int8 or int4 values.
    Int {
        a: Vec<i32>,
        b: Vec<i32>,
        dtype: Dtype,
    },
    /// fp16 values (exactly representable, so the CPU's sums are exact in f32).
    Float { a: Vec<f32>, b: Vec<f32> },
}

/// A result, row-major M×N.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Values {
    Int(Vec<i64>),
    Float(Vec<f32>),
}

impl Operands {
    /// Seeded operands of `dtype` for an M×K by K×N product.
    pub(super) fn new(dtype: Dtype, m: u32, k: u32, n: u32, seed: u64) -> Operands {
        let mut r = Rng::from_seed(seed);
        let (la, lb) = ((m * k) as usize, (k * n) as usize);
        if dtype.is_float() {
            // Multiples of 1/32 in [-2, 2): exact in fp16, products exact in f32.
            let mut f = |len| -> Vec<f32> {
                (0..len)
                    .map(|_| f16_to_f32(f32_to_f16(r.int(-64, 63) as f32 / 32.0)))
                    .collect()
            };
            let a = f(la);
            Operands::Float { a, b: f(lb) }
        } else {
            let (lo, hi) = dtype.int_range();
            let a = (0..la).map(|_| r.int(lo, hi)).collect();
            let b = (0..lb).map(|_| r.int(lo, hi)).collect();
            Operands::Int { a, b, dtype }
        }
    }

    /// The CPU's product.
    pub(super) fn product(&self, m: usize, k: usize, n: usize) -> Values {
        match self {
            Operands::Int { a, b, .. } => {
                let mut c = vec![0i64; m * n];
                for i in 0..m {
                    for kk in 0..k {
                        let x = i64::from(a[i * k + kk]);
                        for j in 0..n {
                            c[i * n + j] += x * i64::from(b[kk * n + j]);
                        }
                    }
                }
                Values::Int(c)
            }
            Operands::Float { a, b } => {
                let mut c = vec![0f32; m * n];
                for i in 0..m {
                    for kk in 0..k {
                        let x = a[i * k + kk];
                        for j in 0..n {
                            c[i * n + j] += x * b[kk * n + j];
                        }
                    }
                }
                Values::Float(c)
            }
        }
    }

    /// Changes A[0][0] to a value far from it (after the product was computed): what
    /// [`super::Options::corrupt`] does to a rung's input.
    pub(super) fn corrupt(&mut self) {
        match self {
            Operands::Int { a, dtype, .. } => {
                let (lo, hi) = dtype.int_range();
                a[0] = if a[0] >= 0 { lo } else { hi };
            }
            Operands::Float { a, .. } => a[0] = 1000.0,
        }
    }
}

/// Compares a device result with the CPU's (`n` columns; fp values within a relative
/// 1e-3 of the row's magnitude). `before`: what the output held before the job, to tell
/// a result that was never written.
pub(super) fn compare(
    what: &str,
    want: &Values,
    got: &Values,
    n: usize,
    before: Option<&Values>,
) -> Option<Mismatch> {
    let len = len_of(want);
    let same_kind = matches!(
        (want, got),
        (Values::Int(_), Values::Int(_)) | (Values::Float(_), Values::Float(_))
    );
    if !same_kind || len != len_of(got) {
        return Some(Mismatch {
            what: what.into(),
            index: 0,
            row: 0,
            col: 0,
            expected: format!("{len} elements"),
            got: format!("{} elements", len_of(got)),
            differing: len,
            total: len,
            unwritten: false,
        });
    }
    let scale = match want {
        Values::Float(w) => w.iter().fold(1f32, |acc, x| acc.max(x.abs())),
        Values::Int(_) => 0.0,
    };
    let differs = |i: usize| match (want, got) {
        (Values::Int(w), Values::Int(g)) => w[i] != g[i],
        // NaN differs from everything.
        (Values::Float(w), Values::Float(g)) => (w[i] - g[i])
            .abs()
            .partial_cmp(&(1e-3 * scale))
            .is_none_or(|o| o == std::cmp::Ordering::Greater),
        _ => true,
    };
    let first = (0..len).find(|&i| differs(i))?;
    let differing = (first..len).filter(|&i| differs(i)).count();
    let n = n.max(1);
    Some(Mismatch {
        what: what.into(),
        index: first,
        row: first / n,
        col: first % n,
        expected: element(want, first),
        got: element(got, first),
        differing,
        total: len,
        unwritten: before.is_some_and(|b| b == got),
    })
}

fn element(v: &Values, i: usize) -> String {
    match v {
        Values::Int(x) => x[i].to_string(),
        Values::Float(x) => format!("{:?}", x[i]),
    }
}

fn len_of(v: &Values) -> usize {
    match v {
        Values::Int(x) => x.len(),
        Values::Float(x) => x.len(),
    }
}

/// Compares bytes read back with those written.
pub(super) fn compare_bytes(what: &str, want: &[u8], got: &[u8]) -> Option<Mismatch> {
    let w = Values::Int(want.iter().map(|&b| i64::from(b)).collect());
    let g = Values::Int(got.iter().take(want.len()).map(|&b| i64::from(b)).collect());
    compare(what, &w, &g, want.len(), None)
}
