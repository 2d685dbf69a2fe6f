//! GGUF tensors of one scale per 32 values (Q8_0, Q4_0, Q5_0) as grouped int8 banks:
//! the file's own integers and block scales, no requantisation
//! ([`WeightBank::from_i8_nk_grouped`] with groups of 32).

use super::load::matrix_shape;
use super::{Error, GgmlType, Gguf, Result};
use crate::compute::matmul::WeightBank;
use crate::device::Device;

/// Values per block of the types [`load_grouped`] takes.
const BLOCK: usize = 32;

/// Whether [`load_grouped`] takes `ty`: a block of 32 values whose weights are an integer
/// times the block's fp16 scale, stored first in the block.
pub fn groups_exactly(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0)
}

/// Loads the `[out][in]` matrix `name` (a Q8_0, Q4_0 or Q5_0 tensor) into a grouped int8
/// bank holding the file's integers (Q4_0 and Q5_0 ones centred: −8..=7, −16..=15) and
/// each block's scale: the bank's weights are the file's dequantised weights exactly. A
/// matmul against it quantises activations per row and group of 32 and dequantises
/// every group on the NPU (docs/gguf.md, "Grouped banks").
///
/// Errors: no such tensor [`Error::NoSuchTensor`]; another type, or not a matrix,
/// [`Error::Unsupported`]; a non-finite block scale [`Error::NotRepresentable`]; the
/// bank constructor's refusals [`Error::Bank`].
pub fn load_grouped(dev: &Device, gguf: &Gguf, name: &str) -> Result<WeightBank> {
    let info = gguf.tensor(name).ok_or_else(|| Error::NoSuchTensor {
        name: name.to_string(),
    })?;
    let ty = info.ggml_type;
    if !groups_exactly(ty) {
        return Err(Error::Unsupported {
            tensor: name.to_string(),
            what: format!("a grouped int8 bank of {ty:?} (Q8_0, Q4_0 and Q5_0 are one)"),
        });
    }
    let (n, k) = matrix_shape(name, info.dims)?;
    let (n_us, k_us) = (n as usize, k as usize);
    let type_size = ty.type_size() as usize;
    let row_bytes = k_us / BLOCK * type_size;
    let groups = k_us / BLOCK;
    let mut q = vec![0i8; n_us * k_us];
    let mut scales = vec![0f32; n_us * groups];
    let mut bytes = vec![0u8; row_bytes];
    let mut values = vec![0f32; k_us];
    for row in 0..n_us {
        gguf.read_tensor(name, (row * row_bytes) as u64, &mut bytes)?;
        super::dequantize_into(ty, &bytes, &mut values)?;
        let qrow = &mut q[row * k_us..(row + 1) * k_us];
        for (g, ((block, vals), qs)) in bytes
            .chunks_exact(type_size)
            .zip(values.chunks_exact(BLOCK))
            .zip(qrow.chunks_exact_mut(BLOCK))
            .enumerate()
        {
            let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
            if !d.is_finite() {
                return Err(Error::NotRepresentable {
                    tensor: name.to_string(),
                    row: row as u64,
                    column: (g * BLOCK) as u64,
                    value: d,
                    bank: crate::kernels::single::Dtype::Int8,
                });
            }
            scales[row * groups + g] = d;
            if d != 0.0 {
                // Each value is d · q exactly (an 11-bit d times a q of at most 8 bits),
                // so the quotient is q exactly.
                for (o, &v) in qs.iter_mut().zip(vals) {
                    *o = (v / d) as i8;
                }
            }
        }
    }
    WeightBank::from_i8_nk_grouped(dev, (n, k, BLOCK as u32), &q, &scales).map_err(Error::Bank)
}
