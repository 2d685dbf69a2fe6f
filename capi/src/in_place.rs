//! Products whose activations the caller writes straight into the NPU's input buffer
//! (`rknpu_mul_mat_write`): fp16 rows on an fp16 bank, bf16 rows on a bf16 bank, where
//! the plan reads them as plain rows (`Matmul::input_rows`).

use crate::{Code, Failure, Result, RknpuWeights, XType};
use rknpu_driver::compute::matmul::InputRows;

impl RknpuWeights {
    /// `y = x · wᵀ` for `m` rows of `ty` that `write` puts into the matmul's A buffer
    /// (`Matmul::run_written_into`), into rows of `y` `y_stride` floats apart. Refused
    /// before `write` is called: a type other than the bank's own 16-bit one, and an `m`
    /// whose plan does not read plain rows (`RKNPU_ERR_UNSUPPORTED`, so that the caller
    /// falls back to `rknpu_mul_mat_ex`).
    pub fn mul_mat_written(
        &self,
        ty: XType,
        m: u32,
        write: impl FnOnce(&mut InputRows<'_>) -> rknpu_driver::Result<()>,
        y: &mut [f32],
        y_stride: usize,
    ) -> Result<()> {
        if !self.native(ty) {
            return Err(Failure {
                code: Code::Unsupported,
                message: format!(
                    "{ty:?} rows written in place on a {} bank (F16 rows on fp16 weights, \
                     BF16 rows on bf16 weights)",
                    self.bank.layout().dtype.name()
                ),
            });
        }
        self.prepare(m)?;
        self.with_plan(m, |mm| Ok(mm.input_rows().map(|_| ())?))?;
        self.with_output_rows(m, y, y_stride, |target| {
            self.with_plan(m, |mm| Ok(mm.run_written_into(write, target)?))
        })
    }
}
