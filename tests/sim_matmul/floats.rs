//! fp16 and bf16 matmuls within the fp32 summation bound, and property tests over
//! shapes, values and precisions.

use super::*;

#[test]
fn fp16_and_bf16_within_the_fp32_summation_bound() {
    for dtype in [Dtype::Fp16, Dtype::Bf16] {
        let outs = if dtype == Dtype::Fp16 {
            [OutType::Fp32, OutType::Fp16]
        } else {
            [OutType::Fp32, OutType::Bf16]
        };
        for out in outs {
            for (a, c) in [
                (Layout::Plain, Layout::Plain),
                (Layout::Native, Layout::Native),
            ] {
                check_float(
                    with(SingleMatmul::new(6, 200, 48, dtype), |mm| {
                        mm.out = out;
                        mm.a_layout = a;
                        mm.c_layout = c;
                    }),
                    7,
                );
            }
        }
    }
    check_float(
        with(SingleMatmul::new(4, 64, 32, Dtype::Fp16), |mm| {
            mm.post.add = true
        }),
        8,
    );
}

fn dtype_strategy() -> impl Strategy<Value = Dtype> {
    prop_oneof![
        Just(Dtype::Int8),
        Just(Dtype::Int4),
        Just(Dtype::Int16),
        Just(Dtype::Fp16),
        Just(Dtype::Bf16)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any shape that fits one task, any layout pair the registers can express, any values:
    /// the simulated result equals the reference.
    #[test]
    fn simulated_matmul_equals_the_reference(
        dtype in dtype_strategy(),
        m in 1u32..40,
        k in 1u32..300,
        n in 1u32..130,
        native_a in any::<bool>(),
        native_c in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mm = with(SingleMatmul::new(m, k, n, dtype), |mm| {
            mm.a_layout = if native_a { Layout::Native } else { Layout::Plain };
            mm.c_layout = if native_a || native_c { Layout::Native } else { Layout::Plain };
        });
        if dtype.is_float() {
            check_float(mm, seed);
        } else {
            check_int(mm, seed);
        }
    }
}
