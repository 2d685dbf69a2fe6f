//! Fewer rows than a matmul was made for: one `Matmul` serves every M up to its own, so
//! a caller whose row count varies (a prompt, then single tokens) plans once.

use super::Matmul;
use crate::error::{Error, Result};

impl Matmul {
    /// [`Matmul::mul_mat`] of `rows` rows (`1..=`[`Matmul::rows`]): `x` holds
    /// `rows × K` values and `y` receives `rows × N`. The NPU runs the matmul's own M,
    /// the rows past `rows` zero (a zero row quantises to zeros and adds nothing), so a
    /// call costs what a call of the full M costs; make a matmul per size class where
    /// that matters (the C API keeps a few per weights, docs/capi.md).
    ///
    /// ```
    /// use rknpu_driver::compute::matmul::{Matmul, WeightBank};
    /// use rknpu_driver::device::Device;
    /// use std::sync::Arc;
    ///
    /// let dev = Device::open_spec("emu")?;
    /// let bank = Arc::new(WeightBank::from_i8_nk(&dev, 32, 64, &vec![1; 32 * 64])?);
    /// let mut mm = Matmul::new(&bank, 16)?;
    /// let mut y = vec![0f32; 3 * 32];
    /// mm.mul_mat_rows(&vec![0.5; 3 * 64], 3, &mut y)?; // 3 of its 16 rows
    /// assert!(y.iter().all(|&v| (v - 32.0).abs() < 0.5));
    /// # Ok::<(), rknpu_driver::Error>(())
    /// ```
    pub fn mul_mat_rows(&mut self, x: &[f32], rows: u32, y: &mut [f32]) -> Result<()> {
        let (k, n) = (self.k(), self.n());
        if rows == 0 || rows > self.rows() {
            return Err(Error::ShapeMismatch {
                what: "rows of a matmul (1 up to the rows it was made for)",
                expected: u64::from(self.rows()),
                actual: u64::from(rows),
            });
        }
        let used = rows as usize;
        Error::check_len("activation values", used * k, x.len())?;
        Error::check_len("result values", used * n, y.len())?;
        if rows == self.rows() {
            return self.mul_mat(x, y);
        }
        let mut padded = vec![0f32; self.rows() as usize * k];
        padded[..x.len()].copy_from_slice(x);
        let mut full = vec![0f32; self.rows() as usize * n];
        self.mul_mat(&padded, &mut full)?;
        y.copy_from_slice(&full[..y.len()]);
        Ok(())
    }
}
