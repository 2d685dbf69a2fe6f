//! [`MatmulOptions`]: how a [`Matmul`] is made.

use super::Activations;
#[cfg(doc)]
use super::{MAX_ACTIVATION_PASSES, Matmul, quantize_passes_i8};
#[cfg(doc)]
use crate::{Error, regcmd::ProgramBuilder};
use std::time::Duration;

/// How a [`Matmul`] is made; the default suits most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MatmulOptions {
    /// The most cores to use (1..=3); `None` for every core the device has. A maximum: a
    /// product too small to split runs on fewer.
    pub cores: Option<u32>,
    /// The activations; `None` for int8 on integer banks, fp16 on fp16 banks.
    pub activations: Option<Activations>,
    /// fp16 banks: fp16 results instead of fp32 — the DPU's conversion where K is within
    /// one wave of the bank's layout, the host's rounding of the summed fp32 partials
    /// where it takes several.
    pub fp16_out: bool,
    /// int8 banks: [`Matmul::mul_mat`] scales and converts to f32 on the NPU
    /// (docs/matmul.md, "What runs where") instead of on the host; with several K waves
    /// the host adds the waves' dequantised results.
    pub npu_dequant: bool,
    /// The passes f32 activations are quantised in (1 to [`MAX_ACTIVATION_PASSES`]; 1,
    /// the default, is the usual quantisation). More than one is residual activations
    /// (NPU dequantisation only): each pass after the first quantises the rounding
    /// residual of the passes before it ([`quantize_passes_i8`]), the NPU runs the
    /// rows once a pass and the host adds each row's results. Two passes all but take
    /// the activations' rounding out of the error; three keep an outlier in a group from
    /// raising it (docs/matmul.md, "Residual activations"). Each pass is the rows' NPU
    /// work again.
    pub activation_passes: u32,
    /// Incremental task bodies: after the first two tasks of each core's chain, a task
    /// writes only the registers whose values differ from what its ping-pong register
    /// group holds (and those the vendor runtime always writes), as the vendor runtime's
    /// chains do ([`ProgramBuilder::incremental`]). Shorter programs, the same results.
    /// Vendor driver only: refused on rocket, where it has not been validated
    /// (docs/device.md).
    pub incremental: bool,
    /// The deadline of a blocking call.
    pub timeout: Duration,
}

impl Default for MatmulOptions {
    fn default() -> MatmulOptions {
        MatmulOptions {
            cores: None,
            activations: None,
            fp16_out: false,
            npu_dequant: false,
            activation_passes: 1,
            incremental: false,
            timeout: Duration::from_secs(5),
        }
    }
}

impl MatmulOptions {
    /// At most `cores` cores.
    pub fn cores(self, cores: u32) -> MatmulOptions {
        MatmulOptions {
            cores: Some(cores),
            ..self
        }
    }

    /// These activations.
    pub fn activations(self, activations: Activations) -> MatmulOptions {
        MatmulOptions {
            activations: Some(activations),
            ..self
        }
    }

    /// fp16 results written by the DPU (fp16 banks).
    pub fn fp16_out(self) -> MatmulOptions {
        MatmulOptions {
            fp16_out: true,
            ..self
        }
    }

    /// Dequantisation on the NPU (int8 banks, int8 activations): the DPU casts each K
    /// wave's sums to fp32 and multiplies them by the row and channel scales, read
    /// as fp16 (so each scale is rounded to fp16: a relative error of at most 2⁻¹¹ each);
    /// the host adds the waves' results. Only [`Matmul::mul_mat`] and its kin are offered then.
    pub fn dequantize_on_npu(self) -> MatmulOptions {
        MatmulOptions {
            npu_dequant: true,
            ..self
        }
    }

    /// Residual activations in two passes; see
    /// [`MatmulOptions::activation_passes`](MatmulOptions#structfield.activation_passes).
    pub fn residual_activations(self) -> MatmulOptions {
        self.activation_passes(2)
    }

    /// Activations quantised in `passes` passes (1 to [`MAX_ACTIVATION_PASSES`]; a
    /// matmul refuses others with [`Error::OutOfRange`]); see
    /// [`MatmulOptions::activation_passes`](MatmulOptions#structfield.activation_passes).
    pub fn activation_passes(self, passes: u32) -> MatmulOptions {
        MatmulOptions {
            activation_passes: passes,
            ..self
        }
    }

    /// Incremental task bodies on (`true`) or off (the default); see
    /// [`MatmulOptions::incremental`](MatmulOptions#structfield.incremental). A rocket
    /// device refuses them with [`Error::NotOffered`].
    pub fn incremental(self, on: bool) -> MatmulOptions {
        MatmulOptions {
            incremental: on,
            ..self
        }
    }

    /// This deadline for blocking calls.
    pub fn timeout(self, timeout: Duration) -> MatmulOptions {
        MatmulOptions { timeout, ..self }
    }
}
