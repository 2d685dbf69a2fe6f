//! The host's side of a plan: the general packers of A and B (any values, checked) and
//! the reduction of the partial results the tasks write into row-major results.

use super::{Plan, TaskTile, WeightLayout, unsupported};
use crate::error::{Error, Result};
use crate::float::f16_to_f32;
use crate::kernels::single::{OutType, SingleMatmul, check_float};
use std::collections::HashSet;

impl Plan {
    /// Packs A (row-major M×K integers) into the A buffer.
    pub fn pack_a_int(&self, a: &[i32]) -> Result<Vec<u8>> {
        self.pack_a(
            a.len(),
            |m, k| a[m * self.spec.k as usize + k],
            |mm, vals| mm.pack_a_int(vals),
        )
    }

    /// Packs A (row-major M×K) into the A buffer, rounding to the plan's type (fp16 or
    /// bf16; by [`activations_float_into`](super::pack::activations_float_into)).
    /// Values that are not finite, or that round to infinity in the plan's type, are
    /// refused ([`Error::OutOfRange`], index into `a`).
    pub fn pack_a_f32(&self, a: &[f32]) -> Result<Vec<u8>> {
        if self.spec.dtype.is_float() {
            let mut out = self.a_buffer(a.len())?;
            super::pack::activations_float_into(self, a, &mut out)?;
            return Ok(out);
        }
        self.pack_a(
            a.len(),
            |m, k| a[m * self.spec.k as usize + k],
            |mm, vals| mm.pack_a_f32(vals),
        )
    }

    /// A zeroed A buffer for an A of `len` elements, refused unless `len` is M×K.
    pub(super) fn a_buffer(&self, len: usize) -> Result<Vec<u8>> {
        let mk = self.spec.m as usize * self.spec.k as usize;
        if len != mk {
            return Err(unsupported(format!(
                "A has {len} elements, the shape needs {mk}"
            )));
        }
        Ok(vec![0u8; self.a_bytes as usize])
    }

    /// The tasks that name each A block once: one block per (wave, M tile), named by the
    /// first of the column tiles that share it.
    pub(super) fn a_blocks(&self) -> impl Iterator<Item = &TaskTile> {
        let mut seen = HashSet::new();
        self.tasks.iter().filter(move |t| seen.insert(t.a_offset))
    }

    fn pack_a<T: Copy>(
        &self,
        len: usize,
        get: impl Fn(usize, usize) -> T,
        pack: impl Fn(&SingleMatmul, &[T]) -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let mut out = self.a_buffer(len)?;
        for t in self.a_blocks() {
            let w = self.layout.waves[t.wave as usize];
            let mm = self.task_matmul(t);
            let mut vals = Vec::with_capacity(t.rows as usize * w.kw as usize);
            for r in 0..t.rows as usize {
                for c in 0..w.kw as usize {
                    vals.push(get(t.m0 as usize + r, w.k0 as usize + c));
                }
            }
            let block = pack(&mm, &vals)?;
            out[t.a_offset as usize..t.a_offset as usize + block.len()].copy_from_slice(&block);
        }
        Ok(out)
    }

    /// Sums the partial blocks of the C buffer into row-major M×N integers, exactly:
    /// int32 and int16 partials are added in i64, which holds every sum a plan can make
    /// (at most 4095 waves of values within ±2³¹). An int32 result is the exact sum even
    /// where it leaves the int32 range (a caller that narrows must check); an int16
    /// result (int4 with `OutType::Int16`) saturates to the int16 range, as the NPU's own
    /// int16 output does. Nothing is wrapped.
    pub fn reduce_int(&self, c: &[u8]) -> Result<Vec<i64>> {
        if self.c_type().is_float() {
            return Err(unsupported(format!(
                "integer reduction of {:?} results",
                self.c_type()
            )));
        }
        self.check_c(c)?;
        let n = self.spec.n as usize;
        let mut acc = vec![0i64; self.spec.m as usize * n];
        let int16 = self.c_type() == OutType::Int16;
        self.for_each_partial(c, |m, col, e| {
            let v = if int16 {
                i16::from_le_bytes([e[0], e[1]]) as i64
            } else {
                i32::from_le_bytes([e[0], e[1], e[2], e[3]]) as i64
            };
            acc[m * n + col] += v;
        });
        if self.spec.out == OutType::Int16 {
            for v in &mut acc {
                *v = (*v).clamp(i16::MIN as i64, i16::MAX as i64);
            }
        }
        Ok(acc)
    }

    /// Sums fp32 partial blocks in f64 and rounds once to fp32 — or, for fp16 results
    /// of several waves, once to fp16 (to nearest even), widened to f32 exactly; an fp16
    /// result of one wave (converted by the DPU) is read as the NPU wrote it, widened.
    pub fn reduce_f32(&self, c: &[u8]) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.spec.m as usize * self.spec.n as usize];
        self.reduce_f32_into(c, &mut out)?;
        Ok(out)
    }

    /// [`Plan::reduce_f32`] into `out` (row-major M×N).
    pub fn reduce_f32_into(&self, c: &[u8], out: &mut [f32]) -> Result<()> {
        if !self.c_type().is_float() {
            return Err(unsupported("float reduction of integer results".into()));
        }
        self.check_c(c)?;
        let n = self.spec.n as usize;
        Error::check_len("results", self.spec.m as usize * n, out.len())?;
        let mut acc = vec![0f64; out.len()];
        let fp16 = self.c_type() == OutType::Fp16;
        self.for_each_partial(c, |m, col, e| {
            acc[m * n + col] += if fp16 {
                f16_to_f32(u16::from_le_bytes([e[0], e[1]])) as f64
            } else {
                f32::from_le_bytes([e[0], e[1], e[2], e[3]]) as f64
            }
        });
        if self.spec.out == OutType::Fp16 && !fp16 {
            // Several waves of fp32 partials: the fp16 result is the host's rounding.
            for (o, v) in out.iter_mut().zip(acc) {
                *o = half::f16::from_f64(v).to_f32();
            }
        } else {
            for (o, v) in out.iter_mut().zip(acc) {
                *o = v as f32;
            }
        }
        Ok(())
    }

    fn check_c(&self, c: &[u8]) -> Result<()> {
        if (c.len() as u64) < self.c_bytes {
            return Err(unsupported(format!(
                "C has {} bytes, the plan writes {}",
                c.len(),
                self.c_bytes
            )));
        }
        Ok(())
    }

    /// Visits every partial `(row, column, element bytes)` inside the real N columns;
    /// blocks are `[nt/E][rows][E]` of the plan's partial type.
    fn for_each_partial(&self, c: &[u8], mut f: impl FnMut(usize, usize, &[u8])) {
        let part = self.c_type();
        let (size, epa) = (part.bytes() as usize, part.atom_elems() as usize);
        for t in &self.tasks {
            let base = t.c_offset as usize;
            let cols = (self.spec.n.saturating_sub(t.n0)).min(t.nt) as usize;
            for r in 0..t.rows as usize {
                for j in 0..cols {
                    let o = base + ((j / epa) * t.rows as usize + r) * 16 + (j % epa) * size;
                    f(t.m0 as usize + r, t.n0 as usize + j, &c[o..o + size]);
                }
            }
        }
    }
}

/// Packs B for a plan: each wave's rows `k0 .. k0 + kw` over the padded N in the weight
/// atom layout, waves back to back (the weight bank's bytes).
pub fn pack_weights_int(layout: &WeightLayout, b: &[i32]) -> Result<Vec<u8>> {
    pack_weights(layout, b, false, |mm, vals| mm.pack_b_int(vals), 0)
}

/// Packs B (row-major K×N) for a plan, rounding to fp16 or bf16. Values that are not
/// finite, or that round to infinity, are refused ([`Error::OutOfRange`]).
pub fn pack_weights_f32(layout: &WeightLayout, b: &[f32]) -> Result<Vec<u8>> {
    pack_weights_float(layout, b, false)
}

/// Packs integer B given as N×K (each output's K weights contiguous, the layout of an
/// `[out_features][in_features]` matrix).
pub fn pack_weights_int_nk(layout: &WeightLayout, bt: &[i32]) -> Result<Vec<u8>> {
    pack_weights(layout, bt, true, |mm, vals| mm.pack_b_int(vals), 0)
}

/// Packs B given as N×K, rounding to fp16 or bf16 (refusing what
/// [`pack_weights_f32`] refuses).
pub fn pack_weights_f32_nk(layout: &WeightLayout, bt: &[f32]) -> Result<Vec<u8>> {
    pack_weights_float(layout, bt, true)
}

/// Applies per-token (row) and per-channel (column) scales on the host to an integer
/// product, as quantised LLM layers do: `C'[m][n] = C[m][n] · row[m] · col[n]` (an empty
/// slice means scale 1). The scales must cover every row and column.
pub fn dequantize(c: &[i64], m: usize, n: usize, row: &[f32], col: &[f32]) -> Result<Vec<f32>> {
    if c.len() != m * n
        || !(row.is_empty() || row.len() == m)
        || !(col.is_empty() || col.len() == n)
    {
        return Err(unsupported(format!(
            "{} results of {m}x{n} with {} row and {} column scales",
            c.len(),
            row.len(),
            col.len()
        )));
    }
    Ok(c.iter()
        .enumerate()
        .map(|(i, &v)| {
            let r = row.get(i / n).copied().unwrap_or(1.0);
            let s = col.get(i % n).copied().unwrap_or(1.0);
            (v as f64 * r as f64 * s as f64) as f32
        })
        .collect())
}

/// [`pack_weights`] of float values, refusing those the plan's float type cannot hold.
fn pack_weights_float(layout: &WeightLayout, b: &[f32], nk: bool) -> Result<Vec<u8>> {
    if layout.dtype.is_float() {
        check_float(layout.dtype, "weights", b)?;
    }
    pack_weights(layout, b, nk, |mm, vals| mm.pack_b_f32(vals), 0.0)
}

/// Packs `b`, K×N row-major, or N×K where `nk` (element `(k, n)` at `n·K + k`), the
/// padding columns `zero`.
fn pack_weights<T: Copy>(
    layout: &WeightLayout,
    b: &[T],
    nk: bool,
    pack: impl Fn(&SingleMatmul, &[T]) -> Result<Vec<u8>>,
    zero: T,
) -> Result<Vec<u8>> {
    let (k_all, n_all) = (layout.k as usize, layout.n as usize);
    let want = k_all * n_all;
    if b.len() != want {
        return Err(Error::ShapeMismatch {
            what: "weight values",
            expected: want as u64,
            actual: b.len() as u64,
        });
    }
    let get = |k: usize, n: usize| {
        if nk {
            b[n * k_all + k]
        } else {
            b[k * n_all + n]
        }
    };
    let mut out = Vec::with_capacity(layout.bytes as usize);
    for w in &layout.waves {
        let mm = SingleMatmul::new(1, w.kw, layout.n_pad, layout.dtype);
        let mut vals = Vec::with_capacity(w.kw as usize * layout.n_pad as usize);
        for k in 0..w.kw as usize {
            for n in 0..layout.n_pad as usize {
                vals.push(if n < n_all {
                    get(w.k0 as usize + k, n)
                } else {
                    zero
                });
            }
        }
        out.extend_from_slice(&pack(&mm, &vals)?);
    }
    Ok(out)
}
