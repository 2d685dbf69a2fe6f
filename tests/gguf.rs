//! GGUF files: round trips through the writer and the reader, dequantisation against
//! blocks written by hand, hostile files (every one an error, never a panic), weight
//! banks loaded from a file and run on the emulated kernel against a CPU reference, and
//! (in tests/gguf_py.rs) a file written by llama.cpp's gguf-py.

mod common;

use half::f16;
use proptest::prelude::*;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::device::Device;
use rknpu_driver::gguf::write::{Writer, quantize_q4_0, quantize_q8_0};
use rknpu_driver::gguf::{
    Array, GgmlType, Gguf, GgufError as Error, Value, bank_values, load_weights,
};
use rknpu_driver::kernels::matmul::quant;
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::seeded::Rng;
use std::sync::Arc;

/// `len` values in [-scale, scale).
fn values(rng: &mut Rng, len: usize, scale: f32) -> Vec<f32> {
    (0..len).map(|_| rng.unit() * scale).collect()
}

fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(1.5)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::String("héllo".into())),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(-0.25)),
        ("t.empty", Value::Array(Array::U32(vec![]))),
        ("t.bytes", Value::Array(Array::U8(vec![1, 2, 3]))),
        ("t.bools", Value::Array(Array::Bool(vec![true, false]))),
        (
            "t.strings",
            Value::Array(Array::String(vec!["a".into(), "".into(), "ccc".into()])),
        ),
        (
            "t.nested",
            Value::Array(Array::Array(vec![
                Array::I16(vec![-1, 2]),
                Array::F64(vec![0.5]),
                Array::Array(vec![Array::I64(vec![7])]),
            ])),
        ),
    ]
}

/// A small file: every metadata type and an F32, F16, Q8_0 and Q4_0 tensor.
fn small_file(rng: &mut Rng) -> (Vec<u8>, Vec<f32>) {
    let w = values(rng, 2 * 64, 2.0);
    let mut out = Writer::new();
    for (k, v) in every_value() {
        out.metadata(k, v).unwrap();
    }
    out.tensor_f32("a.f32", &[64, 2], &w).unwrap();
    let h: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
    out.tensor_f16("b.f16", &[64, 2], &h).unwrap();
    out.tensor_q8_0("c.q8_0", &[64, 2], &w).unwrap();
    out.tensor_q4_0("d.q4_0", &[64, 2], &w).unwrap();
    (out.to_bytes(), w)
}

#[path = "gguf/banks.rs"]
mod banks;
#[path = "gguf/blocks.rs"]
mod blocks;
#[path = "gguf/format.rs"]
mod format;
#[path = "gguf/hostile.rs"]
mod hostile;
