//! Fuzzes matmul planning: `Plan::new` on a shape, dtype, result type and core count from
//! the input refuses with a typed error or gives a plan within the submission limits,
//! quickly and without a large allocation, whatever the shape (any `u32`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rknpu_driver::kernels::matmul::{MAX_TASKS, MatmulSpec, Plan};
use rknpu_driver::kernels::single::{Dtype, OutType};

const DTYPES: [Dtype; 5] = [
    Dtype::Int8,
    Dtype::Int4,
    Dtype::Int16,
    Dtype::Fp16,
    Dtype::Bf16,
];
const OUTS: [OutType; 6] = [
    OutType::Int8,
    OutType::Int16,
    OutType::Int32,
    OutType::Fp16,
    OutType::Bf16,
    OutType::Fp32,
];

fuzz_target!(|data: &[u8]| {
    let Some((dims, rest)) = data.split_first_chunk::<12>() else {
        return;
    };
    let word = |i: usize| u32::from_le_bytes([dims[i], dims[i + 1], dims[i + 2], dims[i + 3]]);
    let (m, k, n) = (word(0), word(4), word(8));
    let [d, o, c, ..] = rest else { return };
    let spec = MatmulSpec {
        out: OUTS[*o as usize % OUTS.len()],
        cores: *c as u32 % 5,
        ..MatmulSpec::new(m, k, n, DTYPES[*d as usize % DTYPES.len()])
    };
    let Ok(plan) = Plan::new(spec) else {
        return;
    };
    assert!(plan.per_core.iter().all(|&t| t <= MAX_TASKS));
    assert_eq!(plan.per_core.iter().sum::<usize>(), plan.tasks.len());
    assert!(plan.a_bytes + plan.layout.bytes + plan.c_bytes <= u32::MAX as u64);
    // Small plans also build their program.
    if plan.tasks.len() <= 16 {
        let program = plan.program().expect("a plan's program builds");
        assert_eq!(program.tasks().len(), plan.tasks.len());
    }
});
