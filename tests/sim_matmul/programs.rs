//! Programs of several tasks: split-K waves chained with an add, three cores and the
//! worked example.

use super::*;

/// K split in two waves of native int32 partials, then the DPU-only add task
/// (docs/hardware/matmul-programs.md#npu-k-reduction) sums them: three chained tasks in one kick.
#[test]
fn split_k_waves_chained_with_an_add_task() {
    let (m, k, n) = (8u32, 128u32, 64u32);
    // Both waves are the same task: K / 2 channels each.
    let half = with(SingleMatmul::new(m, k / 2, n, Dtype::Int8), |mm| {
        mm.a_layout = Layout::Native;
        mm.c_layout = Layout::Native;
    });
    let ids = |i: u32| BufferId(10 + i);
    let (a0, a1, b0, b1, p0, p1, out) = (ids(0), ids(1), ids(2), ids(3), ids(4), ids(5), ids(6));
    let r = |b| DmaAddr::reloc(b, 0);
    let mut p = ProgramBuilder::new(single::REGCMD);
    push_k_waves(&mut p, &half, ([a0, a1], [b0, b1], [p0, p1]), ids(7));
    p.push_task(
        add_task(m, n, r(p0), r(p1), r(out))
            .unwrap()
            .body()
            .unwrap(),
        BlockMask::ELEMENTWISE,
    );
    let program = p.build().unwrap();
    let place = |b: BufferId| Some(0x0100_0000 * (b.0 as u64 + 1));
    let words = program.bind(place).unwrap();

    let mut rng = Rng(99);
    let a: Vec<i32> = (0..m * k).map(|_| rng.int(-128, 127)).collect();
    let b: Vec<i32> = (0..k * n).map(|_| rng.int(-128, 127)).collect();
    let slice_a = |lo: u32| -> Vec<i32> {
        (0..m)
            .flat_map(|i| (lo..lo + 64).map(move |kk| (i, kk)))
            .map(|(i, kk)| a[(i * k + kk) as usize])
            .collect()
    };
    let slice_b = |lo: u32| -> Vec<i32> { b[(lo * n) as usize..((lo + 64) * n) as usize].to_vec() };
    let mut sim = Simulator::new();
    let at = |b: BufferId| place(b).unwrap() as u32;
    let mem = sim.memory_mut();
    mem.map(at(single::REGCMD), words_to_le_bytes(&words))
        .unwrap();
    mem.map(at(a0), half.pack_a_int(&slice_a(0)).unwrap())
        .unwrap();
    mem.map(at(a1), half.pack_a_int(&slice_a(64)).unwrap())
        .unwrap();
    mem.map(at(b0), half.pack_b_int(&slice_b(0)).unwrap())
        .unwrap();
    mem.map(at(b1), half.pack_b_int(&slice_b(64)).unwrap())
        .unwrap();
    for buf in [p0, p1, out] {
        mem.map_zeroed(at(buf), half.c_bytes()).unwrap();
    }
    let run = sim
        .kick(&Kick {
            task_number: Some(3),
            ..Kick::new(at(single::REGCMD), program.tasks()[0].regcfg_amount)
        })
        .unwrap();
    assert!(run.completed && run.tasks_run == 3, "{run:?}");
    assert_eq!(
        run.raw_status & 0x300,
        0x300,
        "tasks alternate ping-pong groups"
    );
    let got = half
        .unpack_c_int(&sim.memory().read_vec(at(out), half.c_bytes()).unwrap())
        .unwrap();
    let full = SingleMatmul::new(m, k, n, Dtype::Int8);
    assert_eq!(got, int_reference(&full, &a, &b, &[]));
}

/// N split across three cores, one kick each: each core computes its own columns.
#[test]
fn three_cores_split_n() {
    let (m, k) = (4u32, 64u32);
    let mut rng = Rng(3);
    let a: Vec<i32> = (0..m * k).map(|_| rng.int(-128, 127)).collect();
    let mut sim = Simulator::new();
    let mut kicks = Vec::new();
    let mut expected = Vec::new();
    for core in 0..3u32 {
        let n = 32 * (core + 1);
        let mm = SingleMatmul::new(m, k, n, Dtype::Int8);
        let b: Vec<i32> = (0..k * n).map(|_| rng.int(-128, 127)).collect();
        let base = 0x1000_0000 * (core + 1);
        let program = mm.program().unwrap();
        let words = program
            .bind(|buf| Some(base as u64 + 0x100_0000 * buf.0 as u64))
            .unwrap();
        let mem = sim.memory_mut();
        mem.map(base, words_to_le_bytes(&words)).unwrap();
        mem.map(base + 0x100_0000, mm.pack_a_int(&a).unwrap())
            .unwrap();
        mem.map(base + 0x200_0000, mm.pack_b_int(&b).unwrap())
            .unwrap();
        mem.map_zeroed(base + 0x300_0000, mm.c_bytes()).unwrap();
        kicks.push(Kick {
            core: core as usize,
            ..Kick::new(base, program.tasks()[0].regcfg_amount)
        });
        expected.push((mm, base + 0x300_0000, int_reference(&mm, &a, &b, &[])));
    }
    let runs = sim.kick_all(&kicks).unwrap();
    for (core, run) in runs.iter().enumerate() {
        assert_eq!(run.core, core);
        assert!(run.completed);
        assert!(run.lints.is_empty(), "{:?}", run.lints);
    }
    for (mm, at, want) in expected {
        let got = mm
            .unpack_c_int(&sim.memory().read_vec(at, mm.c_bytes()).unwrap())
            .unwrap();
        assert_eq!(got, want);
    }
    assert!(
        sim.kick_all(&[kicks[0], kicks[0]]).is_err(),
        "one core twice"
    );
}

/// The worked example (mtx512's int8 matmul; docs/provenance.md) (the golden fixture program) with
/// random operands in its layouts: A native [K/16][M][16], C native [N/4][M][4].
#[test]
fn worked_example_gives_the_product() {
    use rknpu_driver::kernels::worked_example as we;
    let program = we::program().unwrap();
    let words = program.bind(we::fixture_address).unwrap();
    let mut rng = Rng(42);
    let a: Vec<i32> = (0..4 * 32).map(|_| rng.int(-128, 127)).collect();
    let b: Vec<i32> = (0..32 * 32).map(|_| rng.int(-128, 127)).collect();
    let mut a_bytes = vec![0u8; 128];
    for m in 0..4 {
        for kk in 0..32 {
            a_bytes[((kk / 16) * 4 + m) * 16 + kk % 16] = a[m * 32 + kk] as i8 as u8;
        }
    }
    let mut b_bytes = vec![0u8; 1024];
    for kk in 0..32 {
        for n in 0..32 {
            b_bytes[n * 32 + kk] = b[kk * 32 + n] as i8 as u8;
        }
    }
    let at = |b| we::fixture_address(b).unwrap() as u32;
    let mut sim = Simulator::new();
    let mem = sim.memory_mut();
    mem.map(at(we::REGCMD), words_to_le_bytes(&words)).unwrap();
    mem.map(at(we::INPUT), a_bytes).unwrap();
    mem.map(at(we::WEIGHTS), b_bytes).unwrap();
    mem.map_zeroed(at(we::OUTPUT), 512).unwrap();
    let run = sim
        .kick(&Kick::new(at(we::REGCMD), program.tasks()[0].regcfg_amount))
        .unwrap();
    assert!(run.completed);
    assert!(run.lints.is_empty(), "{:?}", run.lints);
    let out = sim.memory().read_vec(at(we::OUTPUT), 512).unwrap();
    for m in 0..4 {
        for n in 0..32 {
            let o = ((n / 4) * 4 + m) * 16 + (n % 4) * 4;
            let got = i32::from_le_bytes(out[o..o + 4].try_into().unwrap());
            let want: i32 = (0..32).map(|kk| a[m * 32 + kk] * b[kk * 32 + n]).sum();
            assert_eq!(got, want, "C[{m}][{n}]");
        }
    }
}

/// A task on a band of rows of taller native cubes (`a_cube_rows`, `c_cube_rows`): rows
/// 5..9 of an A cube of 12 rows into the same rows of a C cube of 12, as a layer step's
/// M tile reads and writes the cubes its neighbours share. The band's result is the
/// product of its rows; the other rows of C stay untouched.
#[test]
fn a_band_of_taller_cubes_reads_and_writes_only_its_rows() {
    let (rows, m0, m, k, n) = (12u32, 5u32, 4u32, 64u32, 32u32);
    let mm = with(SingleMatmul::new(m, k, n, Dtype::Int8), |mm| {
        mm.a_layout = Layout::Native;
        mm.c_layout = Layout::Native;
        mm.a_cube_rows = Some(rows);
        mm.c_cube_rows = Some(rows);
    });
    let mut rng = Rng(12);
    let a: Vec<i32> = (0..rows * k).map(|_| rng.int(-128, 127)).collect();
    let b: Vec<i32> = (0..k * n).map(|_| rng.int(-128, 127)).collect();
    // A as [K/16][rows][16] int8, C as [N/4][rows][4] int32.
    let mut a_cube = vec![0u8; (rows * k) as usize];
    for r in 0..rows {
        for kk in 0..k {
            a_cube[((kk / 16 * rows + r) * 16 + kk % 16) as usize] =
                a[(r * k + kk) as usize] as i8 as u8;
        }
    }
    let c_len = (rows * n * 4) as usize;
    let ids = |i: u32| BufferId(10 + i);
    let (ab, bb, cb) = (ids(0), ids(1), ids(2));
    let band = m0 * 16;
    let mut p = ProgramBuilder::new(single::REGCMD);
    p.push_task(
        mm.body_at(
            DmaAddr::reloc(ab, band),
            DmaAddr::reloc(bb, 0),
            DmaAddr::reloc(cb, band),
            DmaAddr::reloc(ids(3), 0),
        )
        .unwrap(),
        BlockMask::CONV,
    );
    let program = p.build().unwrap();
    let place = |b: BufferId| Some(0x0100_0000 * (b.0 as u64 + 1));
    let at = |b: BufferId| place(b).unwrap() as u32;
    let mut sim = Simulator::new();
    let mem = sim.memory_mut();
    mem.map(
        at(single::REGCMD),
        words_to_le_bytes(&program.bind(place).unwrap()),
    )
    .unwrap();
    mem.map(at(ab), a_cube).unwrap();
    mem.map(at(bb), mm.pack_b_int(&b).unwrap()).unwrap();
    mem.map_zeroed(at(cb), c_len).unwrap();
    let run = sim
        .kick(&Kick::new(
            at(single::REGCMD),
            program.tasks()[0].regcfg_amount,
        ))
        .unwrap();
    assert!(run.completed && run.lints.is_empty(), "{run:?}");
    let c = sim.memory().read_vec(at(cb), c_len).unwrap();
    for r in 0..rows {
        for j in 0..n {
            let o = ((j / 4 * rows + r) * 16 + j % 4 * 4) as usize;
            let got = i32::from_le_bytes(c[o..o + 4].try_into().unwrap());
            let want: i32 = if (m0..m0 + m).contains(&r) {
                (0..k)
                    .map(|kk| a[(r * k + kk) as usize] * b[(kk * n + j) as usize])
                    .sum()
            } else {
                0
            };
            assert_eq!(got, want, "C[{r}][{j}]");
        }
    }
}

/// Cube rows are refused where they mean nothing: for a plain layout, or fewer than M.
#[test]
fn cube_rows_are_checked() {
    let base = SingleMatmul {
        a_layout: Layout::Native,
        c_layout: Layout::Native,
        ..SingleMatmul::new(8, 64, 32, Dtype::Int8)
    };
    for mm in [
        SingleMatmul {
            a_cube_rows: Some(7),
            ..base
        },
        SingleMatmul {
            c_cube_rows: Some(4),
            ..base
        },
        SingleMatmul {
            a_layout: Layout::Plain,
            c_layout: Layout::Plain,
            a_cube_rows: Some(16),
            ..base
        },
        SingleMatmul {
            c_layout: Layout::Plain,
            a_layout: Layout::Plain,
            c_cube_rows: Some(16),
            ..base
        },
    ] {
        assert!(mm.task().is_err(), "{mm:?}");
    }
    let ok = SingleMatmul {
        a_cube_rows: Some(8),
        c_cube_rows: Some(20),
        ..base
    };
    let t = ok.task().unwrap();
    let (cna, dpu) = (t.cna.unwrap(), t.dpu.unwrap());
    // 4·W + SURF_STRIDE atoms between A's surfaces; C's surfaces 20 atoms apart.
    assert_eq!(4 * 8 + cna.feature.surf_stride, 8);
    assert_eq!(dpu.out.surf_stride, 20);
}
