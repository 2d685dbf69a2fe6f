//! What the library takes, asked without allocating: ggml type codes, the weight kinds
//! of `rknpu_mul_mat_supported`, and whether a product's shapes can be planned.

use crate::{Code, Failure, Result, RknpuDevice, XType, check_plan, elements};
use rknpu_driver::gguf::{self, GgmlType};
use rknpu_driver::kernels::single::Dtype;

/// The ggml type of code `code`, or `RKNPU_ERR_UNSUPPORTED`.
pub fn ggml_type(code: u32) -> Result<GgmlType> {
    GgmlType::from_code(code).ok_or_else(|| Failure {
        code: Code::Unsupported,
        message: format!("ggml type code {code} is not one this library knows"),
    })
}

/// The `w_type` of `rknpu_mul_mat_supported` for int8 weights (`rknpu_weights_i8`),
/// beside ggml's type codes (all below 256).
pub const WEIGHTS_I8: u32 = 256;
/// The `w_type` of `rknpu_mul_mat_supported` for int4 weights (`rknpu_weights_i4`).
pub const WEIGHTS_I4: u32 = 257;

/// Whether a product of `m` rows of activations of ggml type `x_type` runs against
/// `n` × `k` weights of `w_type` on `dev`: [`WEIGHTS_I8`], [`WEIGHTS_I4`], or a ggml
/// type code as `rknpu_weights_ggml` takes it (F16 is also what `rknpu_weights_f16`
/// makes). Arithmetic only: nothing is allocated.
pub fn mul_mat_supported(
    dev: &RknpuDevice,
    w_type: u32,
    x_type: u32,
    (n, k, m): (u32, u32, u32),
) -> Result<()> {
    XType::from_code(x_type)?;
    match w_type {
        WEIGHTS_I8 => check_plan(&dev.device, Dtype::Int8, n, k, m),
        WEIGHTS_I4 => check_plan(&dev.device, Dtype::Int4, n, k, m),
        ty => {
            ggml_supported(dev, ty, n, k, m)?;
            elements("x", m, k)?;
            elements("y", m, n)?;
            Ok(())
        }
    }
}

/// A flag OR-ed into the ggml type code of `rknpu_weights_ggml` (and of
/// `rknpu_ggml_supported` and `rknpu_mul_mat_supported`): an int8 bank requantised per
/// output channel (`gguf::bank_from_raw_as`) instead of the exact fp16 or bf16 one.
pub const GGML_INT8: u32 = 1 << 16;

/// The ggml type and the bank type of a `rknpu_weights_ggml` type code: the type's own
/// bank (`gguf::raw_bank_dtype`), or int8 with [`GGML_INT8`].
pub fn ggml_bank(code: u32) -> Result<(GgmlType, Dtype)> {
    let ty = ggml_type(code & !GGML_INT8)?;
    let dtype = match code & GGML_INT8 {
        0 => gguf::raw_bank_dtype(ty)?,
        _ => Dtype::Int8,
    };
    Ok((ty, dtype))
}

/// Whether `rknpu_weights_ggml` takes an `n` × `k` tensor of type code `ty` on `dev` and
/// a product of `m` rows can be planned against it (`gguf::check_raw_as`); allocates
/// nothing on the device.
pub fn ggml_supported(dev: &RknpuDevice, ty: u32, n: u32, k: u32, m: u32) -> Result<()> {
    Ok(gguf::check_raw_as(&dev.device, ggml_bank(ty)?, n, k, m)?)
}
