//! The compute API: what a backend runs on an open [`Device`](crate::device::Device).
//!
//! * [`matmul`] — weight banks resident in NPU memory, planned matmuls over them, batches
//!   of products that share one input, and NPU dequantisation;
//! * [`layer`] — layer programs: several steps chained in one job, intermediates kept in
//!   NPU memory;
//! * [`ops`] — the runner for one operation program with named buffers.
//!
//! Everything here is built from the driver ([`crate::device`]) and the generators
//! ([`crate::kernels`]); the C API and the ggml backend use this module and the device's
//! `open`. The quick path is `Device` → [`matmul::WeightBank`] → [`matmul::Matmul`]:
//!
//! ```
//! use rknpu_driver::compute::matmul::{Matmul, WeightBank, Weights};
//! use rknpu_driver::device::Device;
//! use rknpu_driver::kernels::matmul::WeightLayout;
//! use rknpu_driver::kernels::single::Dtype;
//! use std::sync::Arc;
//!
//! let dev = Device::open_spec("emu")?;
//! let (m, k, n) = (2u32, 64u32, 32u32);
//! // B of C = A·B, k rows of n values, packed once into a layout chosen for decoding
//! // and prompts on every core.
//! let w: Vec<i8> = (0..k * n).map(|i| (i % 7) as i8 - 3).collect();
//! let layout = WeightLayout::decode_and_prompts(k, n, Dtype::Int8, dev.cores())?;
//! let bank = Arc::new(WeightBank::from_kn_in(&dev, &layout, Weights::I8(&w))?);
//! let mut mm = Matmul::new(&bank, m)?;
//! let c = mm.run::<i8, i32>(&vec![1i8; (m * k) as usize])?;
//! let column0: i32 = (0..k).map(|kk| i32::from(w[(kk * n) as usize])).sum();
//! assert_eq!(c[0], column0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod host_profile;
pub mod layer;
pub mod matmul;
pub mod ops;

#[cfg(test)]
mod incremental_tests;
#[cfg(test)]
mod layer_tests;
