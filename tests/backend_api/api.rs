//! The API contract: typed errors for bad input, owned handles that free their
//! buffers, packed bytes that round-trip, and matmuls that outlive their device handle.

use super::*;

/// Bad weights are typed errors, never panics: wrong lengths and scale counts are
/// `ShapeMismatch` with the expected and given counts; an int4 weight of 9 and a NaN
/// scale are `OutOfRange`; a packed int4 bank of odd K is an error.
#[test]
fn bad_weights_are_typed_errors() {
    let dev = open("emu");
    let (k, n) = (64u32, 32u32);
    let w = vec![1i8; (n * k) as usize];
    // Weights of the wrong length.
    match WeightBank::new(&dev, (n, k), Weights::I8(&w[1..])) {
        Err(Error::ShapeMismatch {
            expected, actual, ..
        }) => assert_eq!((expected, actual), ((n * k) as u64, (n * k - 1) as u64)),
        r => panic!("short weights: {r:?}"),
    }
    match WeightBank::new(
        &dev,
        (n, k),
        Weights::I4Packed(&vec![0u8; (n * k / 2 + 3) as usize]),
    ) {
        Err(Error::ShapeMismatch {
            expected, actual, ..
        }) => assert_eq!(
            (expected, actual),
            ((n * k / 2) as u64, (n * k / 2 + 3) as u64)
        ),
        r => panic!("long packed weights: {r:?}"),
    }
    // An odd K with packed nibbles.
    assert!(matches!(
        WeightBank::new(&dev, (4, 5), Weights::I4Packed(&[0u8; 10])),
        Err(Error::ShapeMismatch { .. })
    ));
    // An int4 weight of 9.
    let mut w4 = vec![0i8; (n * k) as usize];
    w4[37] = 9;
    match WeightBank::new(&dev, (n, k), Weights::I4(&w4)) {
        Err(Error::OutOfRange { index, value, .. }) => {
            assert_eq!((index, value.as_str()), (37, "9"))
        }
        r => panic!("int4 weight 9: {r:?}"),
    }
    // A NaN scale, and scales of the wrong length.
    let mut scales = vec![1f32; n as usize];
    scales[3] = f32::NAN;
    let b2 = WeightBank::new(&dev, (n, k), Weights::I8(&w)).unwrap();
    match b2.with_scales(&scales) {
        Err(Error::OutOfRange { index, .. }) => assert_eq!(index, 3),
        r => panic!("NaN scale: {r:?}"),
    }
    let b3 = WeightBank::new(&dev, (n, k), Weights::I8(&w)).unwrap();
    assert!(matches!(
        b3.with_scales(&[1.0; 3]),
        Err(Error::ShapeMismatch {
            expected: 32,
            actual: 3,
            ..
        })
    ));
}

/// One `Weights` value per element type: `[in][out]` weights (`from_kn_in`) pack into
/// the same bytes as their transpose given `[out][in]` (`from_nk_in`), for every
/// element form that has an order; integers and f32 in a chosen layout equal the native
/// forms; packed nibbles in K×N order and layout-less integers are refused.
#[test]
fn weights_in_either_order_make_the_same_bank() {
    let dev = open("emu");
    let (k, n) = (96u32, 40u32);
    let mut rng = Rng(0x5eed_0b4c);
    let nk = ints(&mut rng, (n * k) as usize, -8, 7);
    let kn = transpose(&nk, n as usize, k as usize);
    let packed = |b: WeightBank| b.packed().unwrap();
    let layout = |d| WeightLayout::decode_and_prompts(k, n, d, dev.cores()).unwrap();
    let (l8, l4, lh) = (
        layout(Dtype::Int8),
        layout(Dtype::Int4),
        layout(Dtype::Fp16),
    );
    let by_nk = packed(WeightBank::from_nk_in(&dev, &l8, Weights::I8(&nk)).unwrap());
    let by_kn = packed(WeightBank::from_kn_in(&dev, &l8, Weights::I8(&kn)).unwrap());
    assert_eq!(by_nk, by_kn, "int8");
    let kn32: Vec<i32> = kn.iter().map(|&v| i32::from(v)).collect();
    let ints_kn = packed(WeightBank::from_kn_in(&dev, &l8, Weights::Int(&kn32)).unwrap());
    assert_eq!(by_nk, ints_kn, "int8 as i32");
    let i4_nk = packed(WeightBank::from_nk_in(&dev, &l4, Weights::I4(&nk)).unwrap());
    let i4_kn = packed(WeightBank::from_kn_in(&dev, &l4, Weights::I4(&kn)).unwrap());
    assert_eq!(i4_nk, i4_kn, "int4");
    let h_nk: Vec<f16> = nk
        .iter()
        .map(|&v| f16::from_f32(f32::from(v) / 4.0))
        .collect();
    let h_kn = transpose(&h_nk, n as usize, k as usize);
    let f_kn: Vec<f32> = h_kn.iter().map(|v| v.to_f32()).collect();
    let fp16 = packed(WeightBank::from_nk_in(&dev, &lh, Weights::F16(&h_nk)).unwrap());
    let fp16_kn = packed(WeightBank::from_kn_in(&dev, &lh, Weights::F16(&h_kn)).unwrap());
    let f32_kn = packed(WeightBank::from_kn_in(&dev, &lh, Weights::F32(&f_kn)).unwrap());
    assert_eq!(fp16, fp16_kn, "fp16");
    assert_eq!(fp16, f32_kn, "f32 rounded to fp16");
    // Without a layout, f32 weights are an fp16 bank of the same bytes.
    let f_nk: Vec<f32> = h_nk.iter().map(|v| v.to_f32()).collect();
    let bank = WeightBank::new(&dev, (n, k), Weights::F32(&f_nk)).unwrap();
    assert_eq!(bank.layout(), &lh);
    assert_eq!(packed(bank), fp16);
    let nibbles = vec![0u8; (n * k / 2) as usize];
    assert!(matches!(
        WeightBank::from_kn_in(&dev, &l4, Weights::I4Packed(&nibbles)),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        WeightBank::new(&dev, (n, k), Weights::Int(&kn32)),
        Err(Error::InvalidArgument { .. })
    ));
    // Integers out of the layout's range are refused as before.
    let mut wide = kn32.clone();
    wide[3] = 9;
    assert!(WeightBank::from_kn_in(&dev, &l4, Weights::Int(&wide)).is_err());
}

/// Activations, results and options a matmul cannot take: wrong lengths are
/// `ShapeMismatch`, NaN activations in `mul_mat` are `OutOfRange`, `run` of `f16` on an int8
/// bank is `Precision`, `cores(0)` is refused; the matmul still works after them.
#[test]
fn bad_activations_are_typed_errors() {
    let dev = open("emu");
    let (m, k, n) = (2u32, 64u32, 32u32);
    let w = vec![1i8; (n * k) as usize];
    let bank = Arc::new(WeightBank::new(&dev, (n, k), Weights::I8(&w)).unwrap());
    let mut mm = Matmul::new(&bank, m).unwrap();
    // Activations and results of the wrong length.
    match mm.run::<i8, i32>(&vec![0i8; (m * k + 1) as usize]) {
        Err(Error::ShapeMismatch {
            expected, actual, ..
        }) => assert_eq!((expected, actual), ((m * k) as u64, (m * k + 1) as u64)),
        r => panic!("long activations: {r:?}"),
    }
    let mut short = vec![0i32; (m * n - 1) as usize];
    match mm.run_into(&vec![0i8; (m * k) as usize], &mut short) {
        Err(Error::ShapeMismatch {
            expected, actual, ..
        }) => assert_eq!((expected, actual), ((m * n) as u64, (m * n - 1) as u64)),
        r => panic!("short results: {r:?}"),
    }
    let mut y = vec![0f32; (m * n) as usize];
    match mm.mul_mat(&vec![0f32; (m * k - 2) as usize], &mut y) {
        Err(Error::ShapeMismatch {
            expected, actual, ..
        }) => assert_eq!((expected, actual), ((m * k) as u64, (m * k - 2) as u64)),
        r => panic!("short f32 activations: {r:?}"),
    }
    // NaN activations.
    let mut x = vec![0.5f32; (m * k) as usize];
    x[70] = f32::NAN;
    match mm.mul_mat(&x, &mut y) {
        Err(Error::OutOfRange { index, .. }) => assert_eq!(index, 70),
        r => panic!("NaN activations: {r:?}"),
    }
    // fp16 activations on an int8 bank.
    let h = vec![f16::ONE; (m * k) as usize];
    assert!(matches!(mm.run::<_, f32>(&h), Err(Error::Precision { .. })));
    // No cores.
    assert!(Matmul::with_options(&bank, m, MatmulOptions::default().cores(0)).is_err());
    // The bank still works after all of that.
    let ok = mm.run::<i8, i32>(&vec![1i8; (m * k) as usize]).unwrap();
    assert!(ok.iter().all(|&v| v == k as i32));
}

/// The element types in and out: one int8 product read as `i32`, `i64` and `f32`
/// gives the same values, blocking and submitted; `i32` integers of the activation type
/// give the same product; integer results of float activations are refused before
/// anything runs (the device runs no job), blocking and on wait.
#[test]
fn element_types_in_and_out_agree() {
    let dev = open("emu");
    let (m, k, n) = (3usize, 64usize, 32usize);
    let mut rng = Rng(0x5eed_0e1e);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let wide_want = cpu_nk(&wide(&a), &wide(&w), m, k, n);
    let want = as_i32(&wide_want);
    let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w)).unwrap());
    let mut mm = Matmul::new(&bank, m as u32).unwrap();
    assert_eq!(mm.run::<i8, i32>(&a).unwrap(), want);
    assert_eq!(mm.run::<i8, i64>(&a).unwrap(), wide_want);
    let as_int: Vec<i32> = a.iter().map(|&v| i32::from(v)).collect();
    assert_eq!(mm.run::<i32, i64>(&as_int).unwrap(), wide_want);
    let floats: Vec<f32> = want.iter().map(|&v| v as f32).collect();
    assert_eq!(mm.run::<i8, f32>(&a).unwrap(), floats);
    let mut got = vec![0f32; m * n];
    let deadline = Instant::now() + Duration::from_secs(5);
    mm.submit(&a).unwrap().wait(deadline, &mut got).unwrap();
    assert_eq!(got, floats);
    // Integer results of a float product: refused before anything is submitted.
    let x = vec![0.5f32; m * k];
    let ran = submissions(&dev, || {
        assert!(matches!(
            mm.run::<f32, i32>(&x),
            Err(Error::Precision { .. })
        ));
    });
    assert_eq!(ran, 0, "a refused call submitted a job");
    let mut ints_out = vec![0i32; m * n];
    let pending = mm.submit(&x).unwrap();
    assert!(matches!(
        pending.wait(deadline, &mut ints_out),
        Err(Error::Precision { .. })
    ));
    // An int8 activation out of range, given as i32, is refused by its index.
    let mut bad = as_int.clone();
    bad[5] = 200;
    match mm.run::<i32, i64>(&bad) {
        Err(Error::OutOfRange { index, .. }) => assert_eq!(index, 5),
        r => panic!("int8 activation 200: {r:?}"),
    }
}

/// Plans of another layout, and batches empty, of another device or given the wrong
/// number of inputs or outputs: refused before anything runs.
#[test]
fn foreign_plans_and_batches_are_refused() {
    let dev = open("emu");
    let (m, k, n) = (2u32, 64u32, 32u32);
    let w = vec![1i8; (n * k) as usize];
    let bank = Arc::new(WeightBank::new(&dev, (n, k), Weights::I8(&w)).unwrap());
    // A plan of another layout: other K, and the same shape as int4.
    for other in [
        WeightLayout::new(k + 32, n, Dtype::Int8).unwrap(),
        WeightLayout::new(k, n, Dtype::Int4).unwrap(),
    ] {
        let plan = Plan::for_layout(&other, m, OutType::Int32, 1).unwrap();
        assert!(
            Matmul::for_plan(&bank, plan).is_err(),
            "a plan for {other:?}"
        );
    }
    // Activations the bank's type has no kernel for.
    for acts in [Activations::Fp16, Activations::Int4] {
        let opts = MatmulOptions::default().activations(acts);
        assert!(
            matches!(
                Matmul::with_options(&bank, m, opts),
                Err(Error::Precision { .. })
            ),
            "{acts:?} on an int8 bank"
        );
    }
    // A plan of a layout with the same byte count but transposed shape.
    let transposed = WeightLayout::new(n, k, Dtype::Int8).unwrap();
    assert_eq!(transposed.bytes, bank.layout().bytes);
    let plan = Plan::for_layout(&transposed, m, OutType::Int32, 1).unwrap();
    assert!(Matmul::for_plan(&bank, plan).is_err());
    // An empty batch, and a batch given the wrong number of inputs or outputs.
    assert!(matches!(
        MatmulBatch::new(Vec::new()),
        Err(Error::ShapeMismatch {
            expected: 1,
            actual: 0,
            ..
        })
    ));
    // Members of another open of the (emulated) NPU: refused before anything runs.
    let other = open("emu");
    let foreign = Arc::new(WeightBank::new(&other, (n, k), Weights::I8(&w)).unwrap());
    assert!(!other.same_device(&dev) && dev.same_device(&dev.clone()));
    assert!(matches!(
        MatmulBatch::new(vec![
            Matmul::new(&bank, m).unwrap(),
            Matmul::new(&foreign, m).unwrap()
        ]),
        Err(Error::InvalidArgument { .. })
    ));
    let mut batch = MatmulBatch::new(vec![Matmul::new(&bank, m).unwrap()]).unwrap();
    let x = vec![0.25f32; (m * k) as usize];
    let mut y1 = vec![0f32; (m * n) as usize];
    assert!(matches!(
        batch.mul_mat(&[&x, &x], &mut [&mut y1]),
        Err(Error::ShapeMismatch {
            expected: 1,
            actual: 2,
            ..
        })
    ));
    assert!(matches!(
        batch.mul_mat(&[&x], &mut []),
        Err(Error::ShapeMismatch {
            expected: 1,
            actual: 0,
            ..
        })
    ));
    batch.mul_mat(&[&x], &mut [&mut y1]).unwrap();
}

/// Compiles only if `T` can be held by a backend: owned, shareable across threads.
fn assert_owned<T: Send + Sync + 'static>() {}

/// A layer as a backend holds it.
struct Layer {
    bank: Arc<WeightBank>,
    mm: Matmul,
}

/// `WeightBank`, `Matmul`, `MatmulBatch` and `Device` are `Send + Sync + 'static`; a bank
/// and matmul moved into a struct and to another thread still run there (exactly); and
/// dropping the matmul and the bank frees every buffer they allocated.
#[test]
fn handles_are_owned_and_free_their_buffers() {
    assert_owned::<WeightBank>();
    assert_owned::<Matmul>();
    assert_owned::<MatmulBatch>();
    assert_owned::<Device>();
    let (m, k, n) = (3usize, 40usize, 50usize);
    let mut rng = Rng(0x5eed_0008);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
    for spec in SPECS {
        let dev = open(spec);
        let before = dev.live_buffers();
        let layer = {
            let bank =
                Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w)).unwrap());
            let mm = Matmul::new(&bank, m as u32).unwrap();
            Layer { bank, mm }
        };
        assert!(dev.live_buffers() > before);
        let a2 = a.clone();
        let mut layer = std::thread::spawn(move || {
            let mut layer = layer;
            let got = layer.mm.run::<i8, i32>(&a2).unwrap();
            (layer, got)
        })
        .join()
        .map(|(layer, got)| {
            assert_eq!(got, want, "{spec} on another thread");
            layer
        })
        .unwrap();
        // Back on this thread, it still runs.
        assert_eq!(layer.mm.run::<i8, i32>(&a).unwrap(), want, "{spec} back");
        assert_eq!(Arc::strong_count(&layer.bank), 2);
        drop(layer);
        assert_eq!(
            dev.live_buffers(),
            before,
            "{spec}: buffers left after drop"
        );
    }
}

/// A bank's packed bytes (`packed`) loaded again with `from_packed` give the same
/// results: int8, fp16, and int4 through W4A8 (whose correction needs each channel's
/// weight sum, recomputed from the packed bytes) and int4 × int4, all exact or equal.
#[test]
fn packed_bytes_round_trip_through_from_packed() {
    let mut rng = Rng(0x5eed_000f);
    let (m, k, n) = (5usize, 150usize, 90usize);
    let dev = open("emu");
    let w8 = ints(&mut rng, n * k, -128, 127);
    let w4 = ints(&mut rng, n * k, -8, 7);
    let a = ints(&mut rng, m * k, -128, 127);
    let a4: Vec<i32> = (0..m * k).map(|_| rng.int(-8, 7)).collect();
    for (w, bank) in [
        (
            &w8,
            WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w8)).unwrap(),
        ),
        (
            &w4,
            WeightBank::new(&dev, (n as u32, k as u32), Weights::I4(&w4)).unwrap(),
        ),
    ] {
        let bytes = bank.packed().unwrap();
        assert_eq!(bytes.len() as u64, bank.layout().bytes);
        let again = Arc::new(WeightBank::from_packed(&dev, bank.layout(), &bytes).unwrap());
        let want = as_i32(&cpu_nk(&wide(&a), &wide(w), m, k, n));
        let dtype = again.layout().dtype;
        let got = Matmul::new(&again, m as u32)
            .unwrap()
            .run::<i8, i32>(&a)
            .unwrap();
        assert_eq!(got, want, "{dtype:?} from_packed");
        if dtype == Dtype::Int4 {
            let opts = MatmulOptions::default().activations(Activations::Int4);
            let got = Matmul::with_options(&again, m as u32, opts)
                .unwrap()
                .run::<i32, i64>(&a4)
                .unwrap();
            assert_eq!(got, cpu_nk(&wide(&a4), &wide(w), m, k, n));
        }
    }
    let wf: Vec<f16> = (0..n * k).map(|_| f16::from_f32(rng.float())).collect();
    let af: Vec<f16> = (0..m * k).map(|_| f16::from_f32(rng.float())).collect();
    let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::F16(&wf)).unwrap());
    let again =
        Arc::new(WeightBank::from_packed(&dev, bank.layout(), &bank.packed().unwrap()).unwrap());
    let x = Matmul::new(&bank, m as u32)
        .unwrap()
        .run::<_, f32>(&af)
        .unwrap();
    let y = Matmul::new(&again, m as u32)
        .unwrap()
        .run::<_, f32>(&af)
        .unwrap();
    assert_eq!(x, y);
}

/// A bank and matmul keep the device open: with every other `Device` handle dropped,
/// the matmul still runs exactly.
#[test]
fn a_matmul_outlives_the_device_handle() {
    let (m, k, n) = (2usize, 33usize, 17usize);
    let mut rng = Rng(0x5eed_0011);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    for spec in SPECS {
        let mut mm = {
            let dev = open(spec);
            let bank =
                Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w)).unwrap());
            Matmul::new(&bank, m as u32).unwrap()
        };
        let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
        assert_eq!(mm.run::<i8, i32>(&a).unwrap(), want, "{spec}");
    }
}
