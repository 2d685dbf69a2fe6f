//! One product spread over several open devices, a share of the columns on each: how
//! the mainline rocket driver gets more than one core to work on one product. Rocket
//! runs the jobs of one open device on one core, one at a time, and cannot import
//! another device's buffers, so each device holds its own columns' weights, its own copy
//! of A and its own results (docs/matmul.md, "Several cores on rocket").

use super::{Input, Matmul, MatmulOptions, Output, WeightBank, Weights, shape};
use crate::device::Device;
use crate::error::{Error, Result};
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

/// Columns of the weight layout's granule: every share but the last is a multiple.
const GRANULE: u32 = 32;

/// A product `C[M×N] = A[M×K] · Wᵀ` whose N columns are shared out over several
/// devices, each running its share as a [`Matmul`] of its own on one core, all at once.
///
/// ```
/// use rknpu_driver::compute::matmul::{SpreadMatmul, Weights};
/// use rknpu_driver::device::Device;
/// use rknpu_driver::emu::{EmuKernel, Flavour};
/// use std::sync::Arc;
///
/// // Three open devices of one (emulated) rocket kernel: one per core.
/// let kernel = Arc::new(EmuKernel::new(Flavour::Rocket));
/// let devices: Vec<Device> = (0..3)
///     .map(|_| Device::open_emulator(kernel.clone()))
///     .collect::<Result<_, _>>()?;
/// let (n, k) = (96, 64);
/// let w: Vec<i8> = (0..n * k).map(|i| (i % 7) as i8 - 3).collect();
/// let mut mm = SpreadMatmul::new(&devices, Weights::I8(&w), (n as u32, k as u32), 2)?;
/// assert_eq!(mm.columns().len(), 3);
/// let a = vec![1i8; 2 * k];
/// let mut c = vec![0i32; 2 * n];
/// mm.run_into(&a, &mut c)?;
/// let row0: i32 = w[..k].iter().map(|&v| v as i32).sum();
/// assert_eq!(c[0], row0);
/// # Ok::<(), rknpu_driver::Error>(())
/// ```
#[derive(Debug)]
pub struct SpreadMatmul {
    /// Each device's matmul and the columns it computes.
    parts: Vec<(Matmul, Range<u32>)>,
    m: u32,
    n: u32,
}

/// The number of values in `w`; int4 is refused.
fn values(w: &Weights<'_>) -> Result<usize> {
    match w {
        Weights::I8(v) => Ok(v.len()),
        Weights::F16(v) => Ok(v.len()),
        Weights::Bf16(v) => Ok(v.len()),
        Weights::F32(v) => Ok(v.len()),
        _ => Err(int4_refused()),
    }
}

fn int4_refused() -> Error {
    Error::NotOffered {
        what: "int4 or layout-typed integer weights in a spread matmul (int8, fp16, bf16 and f32 only)".into(),
    }
}

/// The bank of the rows `cols` of `w` (`[out][in]`, `k` values a row) on `dev`.
fn share_bank(dev: &Device, w: &Weights<'_>, (cols, k): (Range<u32>, u32)) -> Result<WeightBank> {
    let rows = cols.start as usize * k as usize..cols.end as usize * k as usize;
    let width = cols.end - cols.start;
    match w {
        Weights::I8(v) => WeightBank::new(dev, (width, k), Weights::I8(&v[rows])),
        Weights::F16(v) => WeightBank::new(dev, (width, k), Weights::F16(&v[rows])),
        Weights::Bf16(v) => WeightBank::new(dev, (width, k), Weights::Bf16(&v[rows])),
        Weights::F32(v) => WeightBank::new(dev, (width, k), Weights::F32(&v[rows])),
        _ => Err(int4_refused()),
    }
}

/// `n` columns cut into at most `parts` shares of whole granules, as even as can be.
fn shares(n: u32, parts: usize) -> Vec<Range<u32>> {
    let granules = n.div_ceil(GRANULE);
    let parts = (parts as u32).clamp(1, granules.max(1));
    let mut out = Vec::with_capacity(parts as usize);
    let mut g = 0;
    for i in 0..parts {
        let count = granules / parts + u32::from(i < granules % parts);
        let (n0, n1) = (g * GRANULE, ((g + count) * GRANULE).min(n));
        out.push(n0..n1);
        g += count;
    }
    out
}

impl SpreadMatmul {
    /// `n × k` weights (`[out][in]`, int8, fp16 or bf16) for products of `m` rows,
    /// their columns shared out over `devices` (at most one share per 32 columns): each
    /// device packs its share into a [`WeightBank`] and runs it as a [`Matmul`] on one
    /// core. No device is [`Error::InvalidArgument`]; weights of another length
    /// [`Error::ShapeMismatch`]; int4 weights [`Error::NotOffered`].
    pub fn new(
        devices: &[Device],
        w: Weights<'_>,
        (n, k): (u32, u32),
        m: u32,
    ) -> Result<SpreadMatmul> {
        if devices.is_empty() {
            return Err(Error::InvalidArgument {
                what: "a spread matmul over no device".into(),
            });
        }
        shape("weight values", n as usize * k as usize, values(&w)?)?;
        let mut parts = Vec::new();
        for (dev, cols) in devices.iter().zip(shares(n, devices.len())) {
            let bank = share_bank(dev, &w, (cols.clone(), k))?;
            let mm = Matmul::with_options(&Arc::new(bank), m, MatmulOptions::default().cores(1))?;
            parts.push((mm, cols));
        }
        Ok(SpreadMatmul { parts, m, n })
    }

    /// The columns each device computes, in device order.
    pub fn columns(&self) -> Vec<Range<u32>> {
        self.parts.iter().map(|(_, c)| c.clone()).collect()
    }

    /// Each device's matmul, in device order.
    pub fn parts(&self) -> impl Iterator<Item = &Matmul> {
        self.parts.iter().map(|(mm, _)| mm)
    }

    /// `C = A · Wᵀ` into `out` (M×N, row-major), of any element types the shares'
    /// matmuls take ([`Matmul::run_into`]): every device's share submitted at once,
    /// then each waited for and its columns written into `out`; the first error, after
    /// every share was waited for.
    pub fn run_into<A: Input, C: Output>(&mut self, a: &[A], out: &mut [C]) -> Result<()> {
        shape(
            "result values",
            self.m as usize * self.n as usize,
            out.len(),
        )?;
        let mut pending = Vec::with_capacity(self.parts.len());
        for (mm, cols) in &mut self.parts {
            let deadline = Instant::now() + mm.timeout;
            pending.push((mm.submit(a)?, cols.clone(), deadline));
        }
        let mut first = Ok(());
        for (p, cols, deadline) in pending {
            let width = (cols.end - cols.start) as usize;
            let mut part = vec![C::default(); self.m as usize * width];
            match p.wait(deadline, &mut part) {
                Ok(()) => scatter(&part, out, (self.n as usize, cols)),
                Err(e) => {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        first
    }
}

/// Writes `part` (rows of `cols.len()` values) into the columns `cols` of `out` (rows of
/// `n` values).
fn scatter<T: Copy>(part: &[T], out: &mut [T], (n, cols): (usize, Range<u32>)) {
    let width = (cols.end - cols.start) as usize;
    if width == 0 {
        return;
    }
    for (row, src) in part.chunks_exact(width).enumerate() {
        let at = row * n + cols.start as usize;
        out[at..at + width].copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_whole_granules_as_even_as_can_be() {
        assert_eq!(shares(4096, 3), vec![0..1376, 1376..2752, 2752..4096]);
        assert_eq!(shares(100, 3), vec![0..64, 64..96, 96..100]);
        // Fewer granules than devices: one share per granule.
        assert_eq!(shares(40, 3), vec![0..32, 32..40]);
        assert_eq!(shares(8, 3), vec![0..8]);
        for n in [1, 31, 32, 33, 4095, 11008] {
            for parts in 1..=4 {
                let s = shares(n, parts);
                assert_eq!(s.first().unwrap().start, 0);
                assert_eq!(s.last().unwrap().end, n);
                assert!(s.windows(2).all(|w| w[0].end == w[1].start));
                assert!(s[..s.len() - 1].iter().all(|r| r.end % GRANULE == 0));
            }
        }
    }
}
