//! Several weights sharing one input in one NPU job (`rknpu_batch` in C): a layer's Q, K
//! and V projections, or its gate and up projections, read the same activations, and
//! one submission runs them all (`MatmulBatch`).

use crate::{Failure, Result, RknpuWeights, Rows, elements};
use rknpu_driver::compute::matmul::{Matmul, MatmulBatch};
use std::sync::Mutex;

/// Matmuls of `m` rows against several weights of one `k`, joined into one program
/// (`rknpu_batch` in C). It has plans and buffers of its own: the weights handles it was
/// made from are not used by it, and may be freed before it (their banks stay alive
/// while the batch holds them).
#[derive(Debug)]
pub struct RknpuBatch {
    /// The joined matmuls; calls take turns on it.
    batch: Mutex<MatmulBatch>,
    /// Output channels of each member.
    pub n: Vec<u32>,
    /// Values per input row.
    pub k: u32,
    /// Rows per call.
    pub m: u32,
}

impl RknpuBatch {
    /// A batch of `m` rows against every weights handle of `ws` (at least one, all of one
    /// `k` and on one device).
    pub fn new(ws: &[&RknpuWeights], m: u32) -> Result<RknpuBatch> {
        let Some(first) = ws.first() else {
            return Err(Failure::arg("a batch needs at least one weights handle"));
        };
        let k = first.k;
        if let Some(w) = ws.iter().find(|w| w.k != k) {
            return Err(Failure::arg(format!(
                "batch members share their input: k {} differs from the first member's {k}",
                w.k
            )));
        }
        let dev = first.bank.device();
        if ws.iter().any(|w| !w.bank.device().same_device(dev)) {
            return Err(Failure::arg("batch members must be weights of one device"));
        }
        elements("x", m, k)?;
        let members = ws
            .iter()
            .map(|w| Matmul::new(&w.bank, m))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(RknpuBatch {
            batch: Mutex::new(MatmulBatch::new(members)?),
            n: ws.iter().map(|w| w.n).collect(),
            k,
            m,
        })
    }

    /// `ys[j] = x · W_jᵀ` for every member `j`, in one job: `x` as
    /// `RknpuWeights::mul_mat_rows` reads it (F16 and BF16 rows are widened to f32
    /// exactly, then rounded to the bank's type as a single product does, so the results
    /// equal the members' single products bit for bit); row `i` of `ys[j]` at float
    /// `i · y_strides[j]`.
    pub fn mul_mat_rows(
        &self,
        x: Rows<'_>,
        ys: &mut [&mut [f32]],
        y_strides: &[usize],
    ) -> Result<()> {
        let count = self.n.len();
        if ys.len() != count || y_strides.len() != count {
            return Err(Failure::arg(format!(
                "{} outputs and {} strides for a batch of {count}",
                ys.len(),
                y_strides.len()
            )));
        }
        let (m, k) = (self.m as usize, self.k as usize);
        let a = x.f32_values(m, k)?;
        let xs: Vec<&[f32]> = vec![&a; count];
        // Outputs whose rows are back to back are written in place; the others through
        // a buffer each, copied into their rows afterwards.
        let dense = |j: usize| y_strides[j] == self.n[j] as usize;
        let mut spare: Vec<Vec<f32>> = (0..count)
            .map(|j| match dense(j) {
                true => Vec::new(),
                false => vec![0f32; m * self.n[j] as usize],
            })
            .collect();
        {
            let mut batch = self.batch.lock().map_err(|_| {
                Failure::arg("the batch was poisoned by an earlier panic; free it and make another")
            })?;
            let mut outs: Vec<&mut [f32]> = Vec::with_capacity(count);
            for (j, (y, buf)) in ys.iter_mut().zip(spare.iter_mut()).enumerate() {
                outs.push(match dense(j) {
                    true => (y.get_mut(..m * self.n[j] as usize))
                        .ok_or_else(|| Failure::arg("an output is shorter than m rows"))?,
                    false => buf,
                });
            }
            batch.mul_mat(&xs, &mut outs)?;
        }
        for (j, src) in spare.iter().enumerate().filter(|&(j, _)| !dense(j)) {
            let n = self.n[j] as usize;
            for (r, row) in src.chunks_exact(n).enumerate() {
                let at = r * y_strides[j];
                ys[j]
                    .get_mut(at..at + n)
                    .ok_or_else(|| Failure::arg("an output is shorter than m rows"))?
                    .copy_from_slice(row);
            }
        }
        Ok(())
    }
}
