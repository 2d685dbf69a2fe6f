//! Integer matmuls, exact: int8, int4 and int16 inputs, every layout, the DPU
//! post-processing stages and saturation.

use super::*;

#[test]
fn int8_to_int32_in_every_layout() {
    for (a, c) in [
        (Layout::Plain, Layout::Plain),
        (Layout::Plain, Layout::Native),
        (Layout::Native, Layout::Native),
    ] {
        for (m, k, n) in [(1, 32, 32), (5, 70, 40), (16, 96, 64), (33, 31, 97)] {
            check_int(
                with(SingleMatmul::new(m, k, n, Dtype::Int8), |mm| {
                    mm.a_layout = a;
                    mm.c_layout = c;
                }),
                (m * k * n) as u64,
            );
        }
    }
}

#[test]
fn int8_to_fp32_and_int8() {
    check_int(
        with(SingleMatmul::new(7, 64, 32, Dtype::Int8), |mm| {
            mm.out = OutType::Fp32
        }),
        1,
    );
    check_int(
        with(SingleMatmul::new(7, 64, 32, Dtype::Int8), |mm| {
            mm.out = OutType::Int8;
            mm.post.out_cvt = Some((-3, 3, 9));
        }),
        2,
    );
    // Saturation at the int8 output.
    check_int(
        with(SingleMatmul::new(3, 64, 64, Dtype::Int8), |mm| {
            mm.out = OutType::Int8
        }),
        3,
    );
}

#[test]
fn int8_post_processing_stages() {
    let posts = [
        PostOps {
            bias: Some(-5000),
            ..PostOps::default()
        },
        PostOps {
            scale: Some((-3, 4)),
            ..PostOps::default()
        },
        PostOps {
            relu: true,
            ..PostOps::default()
        },
        PostOps {
            clip: Some(1000),
            relu: true,
            ..PostOps::default()
        },
        PostOps {
            add: true,
            ..PostOps::default()
        },
        PostOps {
            bias: Some(77),
            scale: Some((5, 2)),
            relu: true,
            clip: Some(20_000),
            add: true,
            out_cvt: None,
        },
    ];
    for (i, post) in posts.into_iter().enumerate() {
        for c in [Layout::Plain, Layout::Native] {
            check_int(
                with(SingleMatmul::new(6, 64, 64, Dtype::Int8), |mm| {
                    mm.post = post;
                    mm.c_layout = c;
                }),
                10 + i as u64,
            );
        }
    }
}

#[test]
fn int4_to_int16_including_saturation() {
    for (a, c) in [
        (Layout::Plain, Layout::Native),
        (Layout::Native, Layout::Native),
        (Layout::Plain, Layout::Plain),
    ] {
        check_int(
            with(SingleMatmul::new(9, 96, 128, Dtype::Int4), |mm| {
                mm.a_layout = a;
                mm.c_layout = c;
            }),
            5,
        );
    }
    // 1024 × (−8) × (−8) = 65536 overflows int16: the CORE saturates at 32767.
    let mm = SingleMatmul::new(2, 1024, 64, Dtype::Int4);
    let a = vec![-8; 2 * 1024];
    let b = vec![-8; 1024 * 64];
    check_int_values(mm, &a, &b, &[]);
    let (_, c) = run(
        &mm,
        mm.pack_a_int(&a).unwrap(),
        mm.pack_b_int(&b).unwrap(),
        None,
    );
    assert!(mm.unpack_c_int(&c).unwrap().iter().all(|&v| v == 32767));
}

#[test]
fn int4_nibble_order_is_even_index_high() {
    // An asymmetric vector (docs/hardware/matmul-programs.md#int4-nibble-order): A = [1, 0, 0, ...], B column j = [j - 8, 3, ...].
    let mm = SingleMatmul::new(1, 32, 64, Dtype::Int4);
    let mut a = vec![0; 32];
    a[0] = 1;
    let b: Vec<i32> = (0..32 * 64)
        .map(|i| if i < 64 { (i % 16) - 8 } else { 3 })
        .collect();
    let packed_a = mm.pack_a_int(&a).unwrap();
    assert_eq!(packed_a[0], 0x10, "k = 0 in the high nibble");
    check_int_values(mm, &a, &b, &[]);
}

#[test]
fn int16_to_int32() {
    for c in [Layout::Plain, Layout::Native] {
        check_int(
            with(SingleMatmul::new(5, 64, 32, Dtype::Int16), |mm| {
                mm.c_layout = c
            }),
            6,
        );
    }
}
