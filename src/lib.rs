//! Userspace driver library for the Rockchip RK3588 NPU.
#![deny(unsafe_code)]

pub mod error;
pub mod kernels;
pub mod regcmd;
pub mod regs;

pub use error::{Error, Result};
