//! Where the work runs: the split across cores, batches in one job, asynchronous
//! submissions, the emulator fallback, single-token layouts, the cost model against the
//! simulator's counters, and banks in a chosen layout.

use super::*;

/// Distinct column tiles `(n0, nt)` of each core of `plan`.
fn columns_per_core(plan: &Plan) -> Vec<u32> {
    let mut tiles: Vec<BTreeSet<(u32, u32)>> = vec![BTreeSet::new(); plan.per_core.len()];
    for t in &plan.tasks {
        tiles[t.core as usize].insert((t.n0, t.nt));
    }
    tiles
        .iter()
        .map(|s| s.iter().map(|&(_, nt)| nt).sum())
        .collect()
}

/// N = 4096 on 3 cores: three chains with 1376, 1376 and 1344 columns (contiguous, all
/// of N), and the product is exact.
#[test]
fn wide_n_splits_columns_evenly_over_three_cores() {
    let (m, k, n) = (2usize, 64usize, 4096usize);
    let mut rng = Rng(0x5eed_0009);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
    for spec in SPECS {
        let dev = open(spec);
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w)).unwrap());
        let opts = MatmulOptions::default().cores(3);
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        assert_eq!(mm.plan().per_core.len(), 3);
        assert_eq!(columns_per_core(mm.plan()), [1376, 1376, 1344]);
        // Contiguous: core c starts where core c - 1 ends.
        let starts: Vec<u32> = (0..3)
            .map(|c| {
                let p = mm.plan();
                p.tasks
                    .iter()
                    .filter(|t| t.core == c)
                    .map(|t| t.n0)
                    .min()
                    .unwrap()
            })
            .collect();
        assert_eq!(starts, [0, 1376, 2752]);
        assert_eq!(mm.run::<i8, i32>(&a).unwrap(), want, "{spec}");
    }
}

/// N = 32 (one column granule) with M = 300 on 3 cores: the M tiles are split, every
/// core is used, and the product is exact.
#[test]
fn small_n_splits_m_over_cores() {
    let (m, k, n) = (300usize, 64usize, 32usize);
    let mut rng = Rng(0x5eed_000a);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
    for spec in SPECS {
        let dev = open(spec);
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w)).unwrap());
        let opts = MatmulOptions::default().cores(3);
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        let plan = mm.plan();
        assert_eq!(plan.per_core.len(), 3);
        assert!(plan.per_core.iter().all(|&c| c > 0));
        // Every core covers all columns of its own rows; together, every row once.
        let mut rows: Vec<(u32, u32)> = plan.tasks.iter().map(|t| (t.m0, t.rows)).collect();
        rows.sort();
        rows.dedup();
        assert_eq!(rows.iter().map(|&(_, r)| r).sum::<u32>(), m as u32);
        let cores_of_rows: BTreeSet<u32> = plan.tasks.iter().map(|t| t.core).collect();
        assert_eq!(cores_of_rows.len(), 3);
        assert_eq!(mm.run::<i8, i32>(&a).unwrap(), want, "{spec}");
    }
}

/// `cores(3)` is a maximum: a 2×64×32 product (one M tile, one column granule) runs on
/// one core, without error, exactly.
#[test]
fn tiny_product_runs_on_one_core() {
    let (m, k, n) = (2usize, 64usize, 32usize);
    let mut rng = Rng(0x5eed_000b);
    let w = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n));
    for spec in SPECS {
        let dev = open(spec);
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w)).unwrap());
        let opts = MatmulOptions::default().cores(3);
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        assert_eq!(mm.plan().per_core.len(), 1);
        assert_eq!(mm.plan().cores_used(), 1);
        assert_eq!(mm.run::<i8, i32>(&a).unwrap(), want, "{spec}");
    }
}

/// A `MatmulBatch` of three matmuls (a quantised int8 bank, an fp16 bank and a quantised
/// int4 bank, each of its own N and M) gives bit for bit what each member gives alone,
/// in one submission (counted in a trace recorded in memory), while each member alone
/// is one submission.
#[test]
fn batch_equals_members_alone_in_one_submission() {
    let mut rng = Rng(0x5eed_000c);
    let k = 96usize;
    let shapes = [(3usize, 64usize), (5, 100), (2, 130)];
    let ws: Vec<Vec<f32>> = shapes
        .iter()
        .map(|&(_, n)| (0..n * k).map(|_| rng.float()).collect())
        .collect();
    let xs: Vec<Vec<f32>> = shapes
        .iter()
        .map(|&(m, _)| (0..m * k).map(|_| rng.float() * 3.0).collect())
        .collect();
    for spec in SPECS {
        let dev = open(spec);
        let make = |i: usize| {
            let (m, n) = shapes[i];
            let bank = match i {
                0 => WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &ws[i], Dtype::Int8),
                1 => WeightBank::new(&dev, (n as u32, k as u32), Weights::F32(&ws[i])),
                _ => WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &ws[i], Dtype::Int4),
            };
            Matmul::new(&Arc::new(bank.unwrap()), m as u32).unwrap()
        };
        let mut alone: Vec<Vec<f32>> = Vec::new();
        for (i, &(m, n)) in shapes.iter().enumerate() {
            let mut mm = make(i);
            let mut y = vec![0f32; m * n];
            let subs = submissions(&dev, || mm.mul_mat(&xs[i], &mut y).unwrap());
            assert_eq!(subs, 1, "{spec} member {i} alone");
            alone.push(y);
        }
        let mut batch = MatmulBatch::new((0..3).map(make).collect()).unwrap();
        assert_eq!(batch.members().len(), 3);
        let mut ys: Vec<Vec<f32>> = shapes.iter().map(|&(m, n)| vec![0f32; m * n]).collect();
        let subs = submissions(&dev, || {
            let inputs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(Vec::as_mut_slice).collect();
            batch.mul_mat(&inputs, &mut outs).unwrap();
        });
        assert_eq!(subs, 1, "{spec}: the batch is one submission");
        for (i, (y, a)) in ys.iter().zip(&alone).enumerate() {
            let bits = |v: &[f32]| v.iter().map(|t| t.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(y), bits(a), "{spec} member {i}");
        }
    }
}

/// A batch of two int8 matmuls of different N: each member's result equals the exact
/// integer product (through `mul_mat` with a row maximum of 127, so the row scale is 1
/// and the results are the integers themselves).
#[test]
fn batch_of_int8_members_is_exact() {
    let mut rng = Rng(0x5eed_000d);
    let (m, k) = (4usize, 70usize);
    let mut a = ints(&mut rng, m * k, -127, 127);
    for i in 0..m {
        a[i * k] = 127;
    }
    let x: Vec<f32> = a.iter().map(|&v| v as f32).collect();
    for spec in SPECS {
        let dev = open(spec);
        let ns = [40usize, 200];
        let ws: Vec<Vec<i8>> = ns
            .iter()
            .map(|&n| ints(&mut rng, n * k, -128, 127))
            .collect();
        let members = ns
            .iter()
            .zip(&ws)
            .map(|(&n, w)| {
                let bank = WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(w)).unwrap();
                Matmul::new(&Arc::new(bank), m as u32).unwrap()
            })
            .collect();
        let mut batch = MatmulBatch::new(members).unwrap();
        let (mut y0, mut y1) = (vec![0f32; m * ns[0]], vec![0f32; m * ns[1]]);
        batch.mul_mat(&[&x, &x], &mut [&mut y0, &mut y1]).unwrap();
        for (y, (&n, w)) in [y0, y1].iter().zip(ns.iter().zip(&ws)) {
            let want: Vec<f32> = cpu_nk(&wide(&a), &wide(w), m, k, n)
                .iter()
                .map(|&v| v as f32)
                .collect();
            assert_eq!(y, &want, "{spec} N={n}");
        }
    }
}

/// Checks the asynchronous calls on `spec` against the blocking ones: `submit` of int8 then
/// `wait` into int32 equals `run` (and the CPU product); `submit` of f32 then
/// `wait` into f32 equals `mul_mat` bit for bit, on an int8 quantised bank and on an
/// fp16 bank; each on at most 1 and at most 3 cores.
fn check_async(spec: &str) {
    let mut rng = Rng(0x5eed_000e);
    let (m, k, n) = (6usize, 120usize, 72usize);
    let w8 = ints(&mut rng, n * k, -128, 127);
    let a = ints(&mut rng, m * k, -128, 127);
    let wf: Vec<f32> = (0..n * k).map(|_| rng.float()).collect();
    let x: Vec<f32> = (0..m * k).map(|_| rng.float()).collect();
    let deadline = || Instant::now() + Duration::from_secs(10);
    let dev = open(spec);
    for cores in [1, 3] {
        let opts = MatmulOptions::default().cores(cores);
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w8)).unwrap());
        let mut mm = Matmul::with_options(&bank, m as u32, opts).unwrap();
        let mut out = vec![0i32; m * n];
        let pending: PendingMatmul<'_> = mm
            .submit::<i8>(&a)
            .unwrap_or_else(|e| panic!("{spec} submit of int8 on {cores} core(s): {e:?}"));
        pending.wait(deadline(), &mut out).unwrap();
        assert_eq!(out, as_i32(&cpu_nk(&wide(&a), &wide(&w8), m, k, n)));
        assert_eq!(out, mm.run::<i8, i32>(&a).unwrap(), "{spec} submit of int8");

        let banks = [
            WeightBank::quantize_f32_nk(&dev, n as u32, k as u32, &wf, Dtype::Int8).unwrap(),
            WeightBank::new(&dev, (n as u32, k as u32), Weights::F32(&wf)).unwrap(),
        ];
        for bank in banks {
            let dtype = bank.layout().dtype;
            let mut mm = Matmul::with_options(&Arc::new(bank), m as u32, opts).unwrap();
            let (mut y1, mut y2) = (vec![0f32; m * n], vec![0f32; m * n]);
            mm.submit::<f32>(&x)
                .unwrap_or_else(|e| panic!("{spec} submit of f32 on {cores} core(s): {e:?}"))
                .wait(deadline(), &mut y1)
                .unwrap();
            mm.mul_mat(&x, &mut y2).unwrap();
            let bits = |v: &[f32]| v.iter().map(|t| t.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&y1), bits(&y2), "{spec} {dtype:?} submit of f32");
        }
    }
}

/// Asynchronous calls on the rocket kernel equal the blocking calls ([`check_async`]).
#[test]
fn async_submissions_equal_blocking_calls_on_rocket() {
    check_async("emu:rocket");
}

/// Asynchronous calls on the vendor kernel equal the blocking calls ([`check_async`]).
#[test]
fn async_submissions_equal_blocking_calls_on_vendor() {
    check_async("emu");
}

/// With no `RKNPU_DEVICE` and no NPU, `Device::open_or_emulated` opens the emulated
/// kernel, which says so in its info (skipped when `RKNPU_DEVICE` is set).
#[test]
fn open_or_emulated_falls_back_to_the_emulator() {
    if std::env::var_os("RKNPU_DEVICE").is_some_and(|v| !v.is_empty()) {
        eprintln!("RKNPU_DEVICE is set: skipped");
        return;
    }
    let dev = Device::open_or_emulated().unwrap();
    assert!(dev.info().emulated, "{}", dev.info());
    assert!(dev.emulator().is_some());
}

/// int8 K = 3500 (a K tile in (3072, 4096)): the default bank layout serves M = 5 (it
/// takes two waves) exactly; a single-token layout (`for_max_rows(.., 1)`, one wave)
/// serves M = 1..=4 exactly and refuses M = 5 with an error. Also on vendor 0.9.6.
#[test]
fn single_token_layouts_serve_few_rows_only() {
    let (k, n) = (3500usize, 40usize);
    let mut rng = Rng(0x5eed_0012);
    let w = ints(&mut rng, n * k, -128, 127);
    let w32: Vec<i32> = w.iter().map(|&v| v as i32).collect();
    let a = ints(&mut rng, 5 * k, -128, 127);
    let want = as_i32(&cpu_nk(&wide(&a), &wide(&w), 5, k, n));
    for spec in ["emu", "emu:rocket", "emu:vendor-0.9.6"] {
        let dev = open(spec);
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w)).unwrap());
        assert!(bank.layout().waves.len() >= 2);
        let got = Matmul::new(&bank, 5).unwrap().run::<i8, i32>(&a).unwrap();
        assert_eq!(got, want, "{spec} default layout");

        let layout = WeightLayout::for_max_rows(k as u32, n as u32, Dtype::Int8, 1).unwrap();
        assert_eq!(layout.waves.len(), 1);
        let single = Arc::new(WeightBank::from_nk_in(&dev, &layout, Weights::Int(&w32)).unwrap());
        for m in 1..=4usize {
            let got = Matmul::new(&single, m as u32)
                .unwrap()
                .run::<i8, i32>(&a[..m * k])
                .unwrap();
            assert_eq!(got, want[..m * n], "{spec} single-token layout, M={m}");
        }
        assert!(Matmul::new(&single, 5).is_err(), "{spec} M=5");
    }
}

/// On the asynchronous emulated kernels a submitted matmul (and batch) is not done while
/// the kernel's worker is held, the CPU goes on meanwhile, and once released the results
/// equal the CPU product; on the vendor kernel a 3-core matmul is one job per core's chain.
#[test]
fn pending_matmuls_report_is_done_and_overlap_the_cpu() {
    for spec in ["emu:async", "emu:rocket:async"] {
        let dev = open(spec);
        let emu = dev.emulator().expect("an emulated kernel");
        let (m, k, n) = (5usize, 200usize, 300usize);
        let mut rng = Rng(77);
        let w: Vec<i8> = (0..n * k).map(|_| rng.int(-128, 127) as i8).collect();
        let a: Vec<i8> = (0..m * k).map(|_| rng.int(-128, 127) as i8).collect();
        let want = cpu_nk(&wide(&a), &wide(&w), m, k, n);
        let bank = Arc::new(WeightBank::new(&dev, (n as u32, k as u32), Weights::I8(&w)).unwrap());
        let mut mm =
            Matmul::with_options(&bank, m as u32, MatmulOptions::default().cores(3)).unwrap();
        let hold = emu.hold_worker();
        let pending = mm.submit::<i8>(&a).unwrap();
        assert!(
            !pending.is_done().unwrap(),
            "{spec}: done while the worker is held"
        );
        // The CPU is free meanwhile.
        let busy: i64 = (0..1000i64).sum();
        assert_eq!(busy, 499_500);
        drop(hold);
        let mut out = vec![0i32; m * n];
        pending
            .wait(Instant::now() + Duration::from_secs(10), &mut out)
            .unwrap();
        let got: Vec<i64> = out.iter().map(|&v| v as i64).collect();
        assert_eq!(got, want, "{spec}");

        let mut batch = MatmulBatch::new(vec![Matmul::new(&bank, 1).unwrap()]).unwrap();
        let x = vec![1.0f32; k];
        let hold = emu.hold_worker();
        let pending = batch.submit(&[&x]).unwrap();
        assert!(!pending.is_done().unwrap(), "{spec}: batch done while held");
        drop(hold);
        let mut y = vec![0f32; n];
        pending
            .wait(Instant::now() + Duration::from_secs(10), &mut [&mut y])
            .unwrap();
        // x is all ones: quantised to 127 with scale 1/127, so y[j] = Σ w[j][·] exactly.
        for (j, &v) in y.iter().enumerate() {
            let s: i64 = w[j * k..(j + 1) * k].iter().map(|&v| v as i64).sum();
            assert!(
                (v as f64 - s as f64).abs() <= 1e-3 * (s.abs() as f64 + 1.0),
                "{spec} col {j}: {v} vs {s}"
            );
        }
    }
}

/// The cost model's bytes (from each task's DMA ranges) are the bytes the simulator's DMA
/// engines move when the plan runs on the emulated vendor kernel: feature reads, weight
/// reads and output writes, engine by engine, for int8, int4 and fp16 plans on 1-3 cores.
#[test]
fn the_cost_model_counts_what_the_simulator_moves() {
    use rknpu_driver::kernels::matmul::MatmulSpec;
    use rknpu_driver::kernels::matmul::cost::HardwareProfile;
    let dev = open("emu:vendor-0.9.6");
    let emu = dev.emulator().unwrap();
    for (m, k, n, dtype, cores) in [
        (1, 4096, 4096, Dtype::Int8, 3),
        (130, 300, 200, Dtype::Int8, 2),
        (9, 1000, 130, Dtype::Int4, 3),
        (20, 200, 96, Dtype::Fp16, 1),
    ] {
        let plan = Plan::new(MatmulSpec::new(m, k, n, dtype).on_cores(cores)).unwrap();
        let cost = plan.cost(&HardwareProfile::rk3588()).unwrap();
        let bank = if dtype == Dtype::Fp16 {
            WeightBank::from_kn_in(
                &dev,
                &plan.layout,
                Weights::F32(&vec![0.5; (k * n) as usize]),
            )
        } else {
            WeightBank::from_kn_in(&dev, &plan.layout, Weights::Int(&vec![1; (k * n) as usize]))
        };
        let bank = Arc::new(bank.unwrap());
        let mut mm = Matmul::for_plan(&bank, plan).unwrap();
        emu.reset_dma_counters();
        if dtype == Dtype::Fp16 {
            mm.run::<f32, f32>(&vec![1.0; (m * k) as usize]).unwrap();
        } else {
            mm.run::<i32, i64>(&vec![1; (m * k) as usize]).unwrap();
        }
        let what = format!("{m}x{k}x{n} {dtype:?} on {cores}");
        common::assert_dma_is_the_cost(&what, &emu.dma_counters(), &cost, 0);
    }
}

/// A bank packed in the layout the cost model prefers for prompts of 128 rows (narrower
/// K waves) serves every M exactly, as the layout for any M does; a bank's weights of
/// another type than its layout's are a typed error.
#[test]
fn a_bank_in_a_chosen_layout_serves_any_m() {
    use rknpu_driver::compute::matmul::Weights;
    use rknpu_driver::kernels::matmul::cost::HardwareProfile;
    let (k, n) = (4096usize, 96usize);
    let mut rng = Rng(0x5eed_1a70);
    let w = ints(&mut rng, n * k, -128, 127);
    let dev = open("emu");
    let layout = WeightLayout::cheapest_for(
        k as u32,
        n as u32,
        Dtype::Int8,
        (128, OutType::Int32, 3),
        &HardwareProfile::rk3588(),
    )
    .unwrap();
    assert!(
        layout.waves.len() > 1,
        "prompts take narrower waves: {layout:?}"
    );
    let bank = Arc::new(WeightBank::from_nk_in(&dev, &layout, Weights::I8(&w)).unwrap());
    for m in [1usize, 128] {
        let a = ints(&mut rng, m * k, -128, 127);
        let got = Matmul::new(&bank, m as u32)
            .unwrap()
            .run::<i8, i32>(&a)
            .unwrap();
        assert_eq!(got, as_i32(&cpu_nk(&wide(&a), &wide(&w), m, k, n)), "M={m}");
    }
    assert!(matches!(
        WeightBank::from_nk_in(&dev, &layout, Weights::F16(&[])),
        Err(Error::Precision { .. })
    ));
}
