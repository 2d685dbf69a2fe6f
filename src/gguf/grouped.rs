//! GGUF tensors of one scale per 32 values (Q8_0, Q4_0, Q5_0) as grouped int8 banks:
//! the file's own integers and block scales, no requantisation
//! ([`WeightBank::from_i8_nk_grouped`] with groups of 32).

use super::load::matrix_shape;
use super::{GgmlType, Gguf, GgufError, Result};
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
/// Errors: no such tensor [`GgufError::NoSuchTensor`]; another type, or not a matrix,
/// [`GgufError::Unsupported`]; a non-finite block scale [`GgufError::NotRepresentable`]; the
/// bank constructor's refusals [`GgufError::Bank`].
pub fn load_grouped(dev: &Device, gguf: &Gguf, name: &str) -> Result<WeightBank> {
    let info = gguf.tensor(name).ok_or_else(|| GgufError::NoSuchTensor {
        name: name.to_string(),
    })?;
    let ty = info.ggml_type;
    if !groups_exactly(ty) {
        return Err(GgufError::Unsupported {
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
    // Whole rows at a time, about 64 KiB of the file.
    let rows_per_piece = ((64 << 10) / row_bytes.max(1)).clamp(1, n_us.max(1));
    let mut bytes = vec![0u8; rows_per_piece * row_bytes];
    for first in (0..n_us).step_by(rows_per_piece) {
        let rows = rows_per_piece.min(n_us - first);
        let bytes = &mut bytes[..rows * row_bytes];
        gguf.read_tensor(name, (first * row_bytes) as u64, bytes)?;
        let at = first * k_us;
        let blocks = bytes
            .chunks_exact(type_size)
            .zip(q[at..at + rows * k_us].chunks_exact_mut(BLOCK))
            .zip(&mut scales[first * groups..(first + rows) * groups]);
        for (i, ((block, qs), scale)) in blocks.enumerate() {
            let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
            if !d.is_finite() {
                return Err(GgufError::NotRepresentable {
                    tensor: name.to_string(),
                    row: (first + i / groups) as u64,
                    column: (i % groups * BLOCK) as u64,
                    value: d,
                    bank: crate::kernels::single::Dtype::Int8,
                });
            }
            *scale = d;
            integers(ty, block, qs.try_into().expect("a block of 32"));
        }
    }
    WeightBank::from_i8_nk_grouped(dev, (n, k, BLOCK as u32), &q, &scales).map_err(GgufError::Bank)
}

/// The 32 integers of one block of `ty` (its scale, the first two bytes, aside): Q8_0
/// stores them as they are; Q4_0 as nibbles, value j low and j + 16 high in byte j,
/// offset by 8; Q5_0 likewise with a fifth bit each in a 32-bit word, offset by 16
/// (ggml's block layouts, docs/gguf.md "Dequantisation").
fn integers(ty: GgmlType, block: &[u8], q: &mut [i8; BLOCK]) {
    match ty {
        GgmlType::Q8_0 => {
            for (o, &b) in q.iter_mut().zip(&block[2..2 + BLOCK]) {
                *o = b as i8;
            }
        }
        GgmlType::Q4_0 => {
            let (lo, hi) = q.split_at_mut(BLOCK / 2);
            for ((l, h), &b) in lo.iter_mut().zip(hi).zip(&block[2..2 + BLOCK / 2]) {
                *l = (b & 0xF) as i8 - 8;
                *h = (b >> 4) as i8 - 8;
            }
        }
        _ => {
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            let (lo, hi) = q.split_at_mut(BLOCK / 2);
            for (j, ((l, h), &b)) in lo
                .iter_mut()
                .zip(hi)
                .zip(&block[6..6 + BLOCK / 2])
                .enumerate()
            {
                let (bl, bh) = ((qh >> j) & 1, (qh >> (j + 16)) & 1);
                *l = ((b & 0xF) as u32 | (bl << 4)) as i8 - 16;
                *h = ((b >> 4) as u32 | (bh << 4)) as i8 - 16;
            }
        }
    }
}
