//! Weight banks: weights packed once, in the layout of their [`WeightLayout`], resident in
//! a device buffer, with the per-output-channel scales of a quantised layer.

use super::shape;
use crate::device::{Bo, BoFlags, Device};
use crate::error::{Error, Result};
use crate::kernels::matmul::{self, WeightLayout, pack, quant};
use crate::kernels::single::Dtype;
use half::{bf16, f16};

/// Weights in one of the element types a bank takes ([`WeightBank::new`],
/// [`WeightBank::from_nk_in`], [`WeightBank::from_kn_in`]).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Weights<'a> {
    /// int8: an int8 bank.
    I8(&'a [i8]),
    /// int4, one value (−8..=7) per byte: an int4 bank.
    I4(&'a [i8]),
    /// int4 as packed nibbles, `k / 2` bytes a row (`k` even), weight `2i` of a row in
    /// the low nibble and `2i + 1` in the high nibble of byte `i`, two's complement
    /// ([`quant::pack_nibbles`]; GGUF Q4_0 blocks convert with
    /// [`quant::q4_0_to_nibbles`]): an int4 bank.
    I4Packed(&'a [u8]),
    /// fp16: an fp16 bank.
    F16(&'a [f16]),
    /// bf16: a bf16 bank (bf16 activations).
    Bf16(&'a [bf16]),
    /// Integers of the layout's type (int8 or int4), each checked against it; only
    /// with a layout, which says the type.
    Int(&'a [i32]),
    /// f32 rounded to the layout's float type (fp16 or bf16; fp16 where no layout is
    /// given).
    F32(&'a [f32]),
}

impl Weights<'_> {
    /// Values given (bytes for packed nibbles).
    fn len(&self) -> usize {
        match self {
            Weights::I8(w) | Weights::I4(w) => w.len(),
            Weights::I4Packed(w) => w.len(),
            Weights::F16(w) => w.len(),
            Weights::Bf16(w) => w.len(),
            Weights::Int(w) => w.len(),
            Weights::F32(w) => w.len(),
        }
    }
}

/// Packed weights resident on the NPU, keyed by their layout: any M runs against them
/// ([`super::Matmul::new`]). Owns its buffer (and a handle to the device): `'static`,
/// `Send + Sync`, freed on drop; share it between matmuls with an `Arc`.
///
/// ```
/// use rknpu_driver::device::Device;
/// use rknpu_driver::compute::matmul::{Matmul, WeightBank, Weights};
/// use std::sync::Arc;
///
/// let dev = Device::open_spec("emu")?;
/// // 64 output channels of 96 inputs, `[out][in]` as a model stores them.
/// let w: Vec<i8> = (0..64 * 96).map(|i| (i % 11) as i8 - 5).collect();
/// let bank = Arc::new(WeightBank::new(&dev, (64, 96), Weights::I8(&w))?);
/// for m in [1, 7, 40] {
///     let mut mm = Matmul::new(&bank, m)?; // the same bank for every M
///     let y = mm.run::<i8, i32>(&vec![1; m as usize * 96])?;
///     assert_eq!(y[0], w[..96].iter().map(|&v| v as i32).sum::<i32>());
/// }
/// # Ok::<(), rknpu_driver::Error>(())
/// ```
#[derive(Debug)]
pub struct WeightBank {
    pub(super) bo: Bo,
    pub(super) layout: WeightLayout,
    /// Per-output-channel scales (quantised banks), `n` of them.
    pub(super) scales: Option<Vec<f32>>,
    /// Int4 banks: each output channel's sum of weights (the W4A8 correction).
    pub(super) col_sums: Vec<i64>,
    /// Grouped int8 banks: a scale per group of K (each group one wave of the layout)
    /// and output channel, group-major (`waves × n`), in fp16: the precision the NPU's
    /// dequantisation reads them in.
    pub(super) group_scales: Option<Vec<f16>>,
    /// Grouped banks of weights `s · q + c`: the offset `c` per group and output channel,
    /// group-major (`waves × n`), in fp16; a matmul adds `Σ_g c · (the row's sum over
    /// group g)`.
    pub(super) group_offsets: Option<Vec<f16>>,
}

/// The layout of a bank whose caller declares no M: the one that serves decoding and
/// prompts up to 512 rows nearest their best ([`WeightLayout::decode_and_prompts`]) on
/// the device's cores. Any M plans against it.
fn layout(dev: &Device, k: u32, n: u32, dtype: Dtype) -> Result<WeightLayout> {
    WeightLayout::decode_and_prompts(k, n, dtype, dev.cores())
}

fn dims(n: u32, k: u32) -> Result<usize> {
    (n as usize)
        .checked_mul(k as usize)
        .ok_or(Error::ShapeMismatch {
            what: "weight values (n × k overflows)",
            expected: u64::MAX,
            actual: 0,
        })
}

/// Refuses int4 weights whose Σ|w| over a wave of `layout` could saturate int16 sums.
fn check_i4(layout: &WeightLayout, magnitudes: &[u16]) -> Result<()> {
    match layout.i4_unsafe_wave(magnitudes) {
        None => Ok(()),
        Some((_, channel, sum)) => Err(Error::OutOfRange {
            what: "Σ|w| of an int4 output channel over a K wave wider than 480 channels (int16 sums could saturate)",
            index: channel,
            value: sum.to_string(),
            range: "0..=4095",
        }),
    }
}

/// `v` of `rows` rows of `cols` values, transposed (`cols` rows of `rows`).
fn transpose<T: Copy + Default>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
    let mut t = vec![T::default(); v.len()];
    for (r, row) in v.chunks_exact(cols.max(1)).enumerate() {
        for (c, &x) in row.iter().enumerate() {
            t[c * rows + r] = x;
        }
    }
    t
}

/// Each output channel's sum of int4 weights given as `n` rows of `k` values.
fn sums_nk(w: &[i8], k: usize) -> Vec<i64> {
    w.chunks_exact(k.max(1))
        .map(|r| r.iter().map(|&v| v as i64).sum())
        .collect()
}

impl WeightBank {
    /// Allocates the bank's buffer and lets `fill` write every byte of it (through the
    /// CPU mapping: packing straight into device memory, no intermediate copy).
    fn create(
        dev: &Device,
        layout: WeightLayout,
        fill: impl FnOnce(&WeightLayout, &mut [u8]) -> Result<()>,
    ) -> Result<WeightBank> {
        WeightBank::create_with(dev, layout, fill)
    }

    /// [`WeightBank::create`] with a `fill` of another error type.
    pub(super) fn create_with<E: From<Error>>(
        dev: &Device,
        layout: WeightLayout,
        fill: impl FnOnce(&WeightLayout, &mut [u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<WeightBank, E> {
        let mut bo = dev.alloc(layout.bytes as usize, BoFlags::default())?;
        {
            let mut map = bo.map()?;
            let len = layout.bytes as usize;
            fill(&layout, &mut map[..len])?;
            map.finish()?;
        }
        Ok(WeightBank {
            bo,
            layout,
            scales: None,
            col_sums: Vec::new(),
            group_scales: None,
            group_offsets: None,
        })
    }

    /// Weights given as `layout.n` rows (output channels) of `layout.k` values — the
    /// `[out][in]` layout of a model's weight matrix (ggml's `src0`) — packed in
    /// `layout`, whose type they must have: the constructor for a bank whose layout the
    /// caller chose ([`WeightLayout::cheapest_for`] the M it expects most, say).
    ///
    /// An int4 layout with waves wider than 480 channels
    /// ([`WeightLayout::certified_i4`]) takes only weights it was certified for: weights
    /// whose Σ|w| over such a wave exceeds 4095 for some output channel, so that int16
    /// sums could saturate, are refused with [`Error::OutOfRange`].
    pub fn from_nk_in(dev: &Device, layout: &WeightLayout, w: Weights<'_>) -> Result<WeightBank> {
        let (k, n) = (layout.k as usize, layout.n as usize);
        match w {
            Weights::I4(w) if layout.is_certified_i4() => {
                check_i4(layout, &quant::i4_magnitudes(w, n, k)?)?;
            }
            Weights::I4Packed(w) if layout.is_certified_i4() => {
                check_i4(layout, &quant::i4_magnitudes_packed(w, n, k)?)?;
            }
            _ => {}
        }
        WeightBank::pack_nk(dev, layout, w)
    }

    /// [`WeightBank::from_nk_in`] without the int4 certification (the caller made the
    /// layout from these weights).
    fn pack_nk(dev: &Device, layout: &WeightLayout, w: Weights<'_>) -> Result<WeightBank> {
        let (k, n) = (layout.k, layout.n);
        let dtype = match w {
            Weights::I8(_) => Dtype::Int8,
            Weights::I4(_) | Weights::I4Packed(_) => Dtype::Int4,
            Weights::F16(_) => Dtype::Fp16,
            Weights::Bf16(_) => Dtype::Bf16,
            Weights::Int(_) | Weights::F32(_) => layout.dtype,
        };
        if dtype != layout.dtype {
            return Err(Error::Precision {
                input: "-",
                weights: dtype.name(),
                output: "a bank of another type's layout",
            });
        }
        let l = layout.clone();
        match w {
            Weights::I8(w) => {
                shape("weight values", dims(n, k)?, w.len())?;
                WeightBank::create(dev, l, |l, out| pack::weights_i8_nk_into(l, w, out))
            }
            Weights::I4(w) => {
                shape("weight values", dims(n, k)?, w.len())?;
                let mut bank =
                    WeightBank::create(dev, l, |l, out| pack::weights_nk_into(l, w, out))?;
                bank.col_sums = sums_nk(w, k as usize);
                Ok(bank)
            }
            Weights::I4Packed(w) => {
                if !k.is_multiple_of(2) {
                    return Err(Error::ShapeMismatch {
                        what: "input features of packed int4 weights (even)",
                        expected: k as u64 + 1,
                        actual: k as u64,
                    });
                }
                shape("packed int4 weight bytes", dims(n, k / 2)?, w.len())?;
                let mut sums = Vec::new();
                let mut bank = WeightBank::create(dev, l, |l, out| {
                    sums = pack::weights_i4_packed_nk_sums_into(l, w, out)?;
                    Ok(())
                })?;
                bank.col_sums = sums;
                Ok(bank)
            }
            Weights::F16(w) => {
                shape("weight values", dims(n, k)?, w.len())?;
                let bits: &[u16] = zerocopy::transmute_ref!(w);
                WeightBank::create(dev, l, |l, out| pack::weights_f16_nk_into(l, bits, out))
            }
            Weights::Bf16(w) => {
                shape("weight values", dims(n, k)?, w.len())?;
                let bits: &[u16] = zerocopy::transmute_ref!(w);
                WeightBank::create(dev, l, |l, out| pack::weights_f16_nk_into(l, bits, out))
            }
            // The general packers check every value against the layout's type; a
            // certified int4 layout is checked as `from_packed` checks any bytes.
            Weights::Int(w) => {
                let bytes = matmul::pack_weights_int_nk(layout, w)?;
                WeightBank::from_packed(dev, layout, &bytes)
            }
            Weights::F32(w) => {
                let bytes = matmul::pack_weights_f32_nk(layout, w)?;
                WeightBank::from_packed(dev, layout, &bytes)
            }
        }
    }

    /// Weights given as `n` rows (output channels) of `k` values — the `[out][in]`
    /// layout of a model's weight matrix (ggml's `src0`) — in the layout their element
    /// type serves best when the caller declares no M:
    ///
    /// - int8, fp16 and bf16 (and f32, rounded to fp16): the layout for decoding and
    ///   prompts (any M runs against it; [`WeightLayout::decode_and_prompts`] on the
    ///   device's cores);
    /// - int4 (values or packed nibbles): the widest K waves these weights allow
    ///   ([`WeightLayout::certified_i4`]), fewer int16 partial blocks for the host to sum
    ///   than the 480-channel waves any weights allow.
    ///
    /// [`Weights::Int`] needs a layout to say its type: [`WeightBank::from_nk_in`].
    pub fn new(dev: &Device, (n, k): (u32, u32), w: Weights<'_>) -> Result<WeightBank> {
        match w {
            Weights::I8(_) => WeightBank::from_nk_in(dev, &layout(dev, k, n, Dtype::Int8)?, w),
            Weights::F16(_) | Weights::F32(_) => {
                WeightBank::from_nk_in(dev, &layout(dev, k, n, Dtype::Fp16)?, w)
            }
            Weights::Bf16(_) => WeightBank::from_nk_in(dev, &layout(dev, k, n, Dtype::Bf16)?, w),
            Weights::I4(v) => {
                let mags = quant::i4_magnitudes(v, n as usize, k as usize)?;
                let layout = WeightLayout::certified_i4(k, n, &mags)?;
                WeightBank::pack_nk(dev, &layout, w)
            }
            Weights::I4Packed(v) => {
                if !k.is_multiple_of(2) {
                    return WeightBank::from_nk_in(dev, &layout(dev, k, n, Dtype::Int4)?, w);
                }
                let mags = quant::i4_magnitudes_packed(v, n as usize, k as usize)?;
                let layout = WeightLayout::certified_i4(k, n, &mags)?;
                WeightBank::pack_nk(dev, &layout, w)
            }
            Weights::Int(_) => Err(Error::InvalidArgument {
                what: "integer weights without a layout (their type is the layout's: use \
                       WeightBank::from_nk_in)"
                    .into(),
            }),
        }
    }

    /// Weights given as `layout.k` rows of `layout.n` values (B of `C = A·B`,
    /// row-major), packed in `layout`, whose type they must have (int8, integers and f32
    /// packed as they are; int4 and 16-bit floats transposed on the host first; packed
    /// nibbles are `[out][in]` only). Errors as [`WeightBank::from_nk_in`].
    pub fn from_kn_in(dev: &Device, layout: &WeightLayout, w: Weights<'_>) -> Result<WeightBank> {
        let (k, n) = (layout.k as usize, layout.n as usize);
        if !matches!(w, Weights::I4Packed(_)) {
            shape("weight values", dims(layout.n, layout.k)?, w.len())?;
        }
        match w {
            Weights::I8(v) if layout.dtype == Dtype::Int8 => {
                WeightBank::create(dev, layout.clone(), |l, out| {
                    pack::weights_i8_kn_into(l, v, out)
                })
            }
            Weights::Int(v) => {
                let bytes = matmul::pack_weights_int(layout, v)?;
                WeightBank::from_packed(dev, layout, &bytes)
            }
            Weights::F32(v) => {
                let bytes = matmul::pack_weights_f32(layout, v)?;
                WeightBank::from_packed(dev, layout, &bytes)
            }
            Weights::I8(v) => WeightBank::from_nk_in(dev, layout, Weights::I8(&transpose(v, k, n))),
            Weights::I4(v) => WeightBank::from_nk_in(dev, layout, Weights::I4(&transpose(v, k, n))),
            Weights::F16(v) => {
                WeightBank::from_nk_in(dev, layout, Weights::F16(&transpose(v, k, n)))
            }
            Weights::Bf16(v) => {
                WeightBank::from_nk_in(dev, layout, Weights::Bf16(&transpose(v, k, n)))
            }
            Weights::I4Packed(_) => Err(Error::Unsupported {
                what: "packed int4 weights in K×N order",
                why: "packed nibbles pair neighbouring inputs of one output channel: give them \
                      [out][in] (WeightBank::from_nk_in)"
                    .into(),
            }),
        }
    }

    /// f32 weights given as `n` rows of `k` values, quantised per output channel to
    /// `dtype` (int8: ±127, int4: ±7, symmetric; [`quant::quantize_weights_i8`]) with
    /// their scales: a W8A8 or W4A8 layer.
    pub fn quantize_f32_nk(
        dev: &Device,
        n: u32,
        k: u32,
        w: &[f32],
        dtype: Dtype,
    ) -> Result<WeightBank> {
        let (q, s) = match dtype {
            Dtype::Int8 => quant::quantize_weights_i8(w, n as usize, k as usize)?,
            Dtype::Int4 => quant::quantize_weights_i4(w, n as usize, k as usize)?,
            d => {
                return Err(Error::Precision {
                    input: "f32",
                    weights: d.name(),
                    output: "a quantised bank",
                });
            }
        };
        let bank = match dtype {
            Dtype::Int8 => WeightBank::new(dev, (n, k), Weights::I8(&q))?,
            _ => WeightBank::new(dev, (n, k), Weights::I4(&q))?,
        };
        bank.with_scales(&s)
    }

    /// Already-packed bank bytes (what [`WeightBank::packed`] returned, from a cache),
    /// for `layout`. The bytes are taken as they are: only their length is checked.
    /// An int4 layout wider than 480 channels is checked as [`WeightBank::from_nk_in`]
    /// checks it.
    pub fn from_packed(dev: &Device, layout: &WeightLayout, bytes: &[u8]) -> Result<WeightBank> {
        shape("packed bank bytes", layout.bytes as usize, bytes.len())?;
        if layout.is_certified_i4() {
            check_i4(layout, &pack::i4_bank_magnitudes(layout, bytes)?)?;
        }
        let mut bank = WeightBank::create(dev, layout.clone(), |_, out| {
            out.copy_from_slice(bytes);
            Ok(())
        })?;
        if layout.dtype == Dtype::Int4 {
            bank.col_sums = pack::i4_column_sums(layout, bytes)?;
        }
        Ok(bank)
    }

    /// The same bank with per-output-channel scales (`n` finite values): results of
    /// [`super::Matmul::mul_mat`] are multiplied by them.
    pub fn with_scales(mut self, scales: &[f32]) -> Result<WeightBank> {
        shape("weight scales", self.layout.n as usize, scales.len())?;
        if let Some(i) = scales.iter().position(|s| !s.is_finite()) {
            return Err(Error::OutOfRange {
                what: "weight scales",
                index: i,
                value: scales[i].to_string(),
                range: "finite",
            });
        }
        self.scales = Some(scales.to_vec());
        Ok(self)
    }

    /// The layout every plan against this bank follows.
    pub fn layout(&self) -> &WeightLayout {
        &self.layout
    }

    /// The per-output-channel scales, if the bank is quantised.
    pub fn scales(&self) -> Option<&[f32]> {
        self.scales.as_deref()
    }

    /// The device the bank lives on.
    pub fn device(&self) -> &Device {
        self.bo.device()
    }

    /// The device buffer.
    pub fn buffer(&self) -> &Bo {
        &self.bo
    }

    /// The packed bytes, read back (to cache them; [`WeightBank::from_packed`] loads
    /// them again).
    pub fn packed(&self) -> Result<Vec<u8>> {
        self.bo
            .read_with(|b| b[..self.layout.bytes as usize].to_vec())
    }
}
