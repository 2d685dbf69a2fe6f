//! Kernel generators: shapes in, [`crate::regcmd::Program`]s out. Pure code: no buffers,
//! no device; every DMA address is a relocation.

pub(crate) mod emit;
pub mod matmul;
pub mod ops;
pub mod single;
pub mod worked_example;
