//! DMA byte counters: each engine's count for small tasks, computed by hand from the
//! geometry (16-byte atoms, whole lines, padded channels).

use super::*;

/// Bytes the PC fetches for a list of `body` entries: the fetch amount is
/// `ceil((body + 4) / 2) − 1` (the tail adds 4 entries) and a fetch reads
/// `(amount + 1) × 16` bytes.
fn pc_bytes(body: u32) -> u64 {
    u64::from((body + 4).div_ceil(2)) * 16
}

/// The counters of PC regcmd, CNA feature and weight, DPU MRDMA, ERDMA and write bytes.
fn counters(bytes: [u64; 6]) -> DmaCounters {
    let mut c = DmaCounters::default();
    [
        c.pc_regcmd,
        c.cna_feature,
        c.cna_weight,
        c.dpu_mrdma,
        c.dpu_erdma,
        c.dpu_write,
    ] = bytes;
    c
}

#[test]
fn dma_counts_an_int8_matmul_per_engine() {
    // 4×64×32 int8, plain A (W = 1, H = 4), int32 C row-major.
    let s = Setup::int8(4, 64, 32);
    let r = s.run().unwrap();
    assert!(r.completed);
    let want = counters([
        pc_bytes(s.body),
        // 64 channels / 16 per atom = 4 surfaces × 4 lines × 1 atom of 16 bytes.
        4 * 4 * 16,
        // 32 kernels × 64 channels × 1 byte: two 1024-byte weight atoms.
        2 * 1024,
        0,
        0,
        // 32 int32 channels / 4 per atom = 8 surfaces × 4 lines × 16 bytes.
        8 * 4 * 16,
    ]);
    assert_eq!(r.dma, want);
    assert_eq!(r.dma.read(), pc_bytes(s.body) + 256 + 2048);
    assert_eq!(r.dma.written(), 512);
    assert_eq!(r.dma.dpu_rdma(), 0);
}

#[test]
fn dma_counts_padding_lanes_as_fetched() {
    // 4×40×40 int8: K pads to 64 channels, N to 64 kernels. Logically A is 160 bytes,
    // B 1600 and C 640, but the engines move whole atoms of the padded cube.
    let s = Setup::int8(4, 40, 40);
    let r = s.run().unwrap();
    // 64 / 16 = 4 surfaces × 4 lines × 16 bytes.
    assert_eq!(r.dma.cna_feature, 256);
    // 64 kernels × 64 channels × 1 byte.
    assert_eq!(r.dma.cna_weight, 4096);
    // 64 channels / 4 = 16 surfaces × 4 lines × 16 bytes.
    assert_eq!(r.dma.dpu_write, 1024);
}

#[test]
fn dma_counts_int4_at_half_a_byte() {
    // 4×64×64 int4 → int16.
    let s = Setup::new(SingleMatmul::new(4, 64, 64, Dtype::Int4));
    let r = s.run().unwrap();
    assert!(r.completed);
    // 64 channels / 32 per atom = 2 surfaces × 4 lines × 16 bytes.
    assert_eq!(r.dma.cna_feature, 2 * 4 * 16);
    // 64 kernels × 64 channels / 2: two 1024-byte atoms of 32 channels × 64 kernels.
    assert_eq!(r.dma.cna_weight, 2048);
    // 64 int16 channels / 8 per atom = 8 surfaces × 4 lines × 16 bytes.
    assert_eq!(r.dma.dpu_write, 8 * 4 * 16);
}

#[test]
fn dma_counts_the_erdma_operand_of_a_matmul_with_an_add() {
    // 4×64×32 int8 with E added: E is shaped like C with 32-bit elements.
    let mut mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    mm.post.add = true;
    let s = Setup::new(mm);
    let r = s.run().unwrap();
    assert!(r.completed);
    // 32 channels / 4 per atom = 8 surfaces × 4 lines × 16 bytes.
    assert_eq!(r.dma.dpu_erdma, 8 * 4 * 16);
    assert_eq!(r.dma.dpu_mrdma, 0);
    assert_eq!(r.dma.dpu_write, 512);
    assert_eq!(r.dma.read(), pc_bytes(s.body) + 256 + 2048 + 512);
}

#[test]
fn dma_counts_mrdma_erdma_and_write_of_the_split_k_add() {
    // 4 rows × 32 int32 channels in the native layout [32/4][4][4]: W = 4, H = 1.
    let mut p = ProgramBuilder::new(single::REGCMD);
    let r = |b: u32| DmaAddr::reloc(BufferId(b), 0);
    p.push_task(
        add_task(4, 32, r(1), r(2), r(3)).unwrap().body().unwrap(),
        BlockMask::ELEMENTWISE,
    );
    let program = p.build().unwrap();
    let mut sim = sim_with(&program);
    let m = sim.memory_mut();
    for b in 1..=3 {
        m.map_zeroed(at(BufferId(b)), 4 * 32 * 4).unwrap();
    }
    let body = program.tasks()[0].regcfg_amount;
    let run = sim.kick(&Kick::new(at(single::REGCMD), body)).unwrap();
    assert!(run.completed);
    // Each cube: 8 surfaces × 1 line × 4 atoms of 16 bytes = 512.
    let want = counters([pc_bytes(body), 0, 0, 8 * 4 * 16, 8 * 4 * 16, 8 * 4 * 16]);
    assert_eq!(run.dma, want);
}

#[test]
fn a_suppressed_output_writes_nothing_and_kicks_add_up() {
    let s = Setup::int8(4, 64, 32);
    let mut sim = s.sim();
    sim.set_faults(Faults {
        dma_write_error: Some(At { core: 0, task: 0 }),
        ..Faults::default()
    });
    let faulty = sim.kick(&s.kick()).unwrap();
    assert_eq!(faulty.dma.dpu_write, 0);
    assert_eq!(faulty.dma.cna_feature, 256);
    sim.set_faults(Faults::default());
    let clean = sim.kick(&s.kick()).unwrap();
    assert_eq!(clean.dma.dpu_write, 512);
    let both = faulty.dma + clean.dma;
    assert_eq!(both.cna_weight, 2 * 2048);
    assert_eq!(both.written(), 512);
    let mut sum = DmaCounters::default();
    sum += faulty.dma;
    sum += clean.dma;
    assert_eq!(sum, both);
    assert_eq!(
        [faulty.dma, clean.dma].into_iter().sum::<DmaCounters>(),
        both
    );
}

#[test]
fn a_range_run_sums_its_kicks() {
    let s = Setup::int8(4, 64, 32);
    let mut sim = s.sim();
    let one = s.sim().kick(&s.kick()).unwrap().dma;
    let body = s.body;
    let range = sim.run_range(0, 1, |_| {
        Some(TaskDesc {
            offset: at(single::REGCMD),
            regcfg_amount: body,
            int_mask: irq::DPU,
            enable: 0x0D,
        })
    });
    assert!(range.failure.is_none(), "{:?}", range.failure);
    assert_eq!(range.dma, one);
}

/// Two chained `m`×`k`×`n` int8 tasks over the same A and B, each with one spare data
/// bank, the second with `reuse` applied to its CBUF split.
fn reusing_program(
    (m, k, n): (u32, u32, u32),
    reuse: impl Fn(&mut rknpu_driver::task::Cbuf),
) -> rknpu_driver::regcmd::Program {
    crate::common::lowered::reusing_pair(&SingleMatmul::new(m, k, n, Dtype::Int8), false, reuse)
}

#[test]
fn operands_reused_from_the_cbuf_are_not_fetched_again() {
    // The second task keeps both operands in the CBUF (DATA_REUSE, WEIGHT_REUSE), so
    // only the first fetches them.
    let program = reusing_program((4, 64, 32), |c| {
        (c.data_reuse, c.weight_reuse) = (true, true)
    });
    let s = Setup::int8(4, 64, 32);
    let mut sim = s.sim();
    sim.memory_mut()
        .map(
            at(single::REGCMD) + 0x10_0000,
            words_to_le_bytes(
                &program
                    .bind(|b| {
                        addr(b).map(|a| {
                            if b == single::REGCMD {
                                a + 0x10_0000
                            } else {
                                a
                            }
                        })
                    })
                    .unwrap(),
            ),
        )
        .unwrap();
    let run = sim
        .kick(&Kick::new(
            at(single::REGCMD) + 0x10_0000,
            program.tasks()[0].regcfg_amount,
        ))
        .unwrap();
    assert!(run.completed && run.tasks_run == 2, "{run:?}");
    // A (4 lines × 4 atoms of 16 bytes) and B (2 weight atoms) once, C (512 bytes) twice.
    assert_eq!(run.dma.cna_feature, 256);
    assert_eq!(run.dma.cna_weight, 2048);
    assert_eq!(run.dma.dpu_write, 2 * 512);
}

#[test]
fn reuse_needs_a_spare_int8_bank_and_weights_that_fit() {
    let run = |(m, k, n), reuse: &dyn Fn(&mut rknpu_driver::task::Cbuf)| {
        let program = reusing_program((m, k, n), reuse);
        let mut sim = Setup::int8(m, k, n).sim();
        let base = at(single::REGCMD) + 0x10_0000;
        let words = program
            .bind(|b| {
                addr(b).map(|a| {
                    if b == single::REGCMD {
                        u64::from(base)
                    } else {
                        a
                    }
                })
            })
            .unwrap();
        sim.memory_mut()
            .map(base, words_to_le_bytes(&words))
            .unwrap();
        sim.kick(&Kick::new(base, program.tasks()[0].regcfg_amount))
    };
    // int8 feature data filling its one data bank: the reuse bit is refused, named.
    let full = |c: &mut rknpu_driver::task::Cbuf| {
        (c.data_banks, c.weight_banks) = (1, 11);
        c.data_reuse = true;
    };
    let err = run((4, 64, 32), &full).unwrap_err().to_string();
    assert!(err.contains(cna::CbufCon0::DATA_REUSE.name()), "{err}");
    assert!(err.contains("spare"), "{err}");
    // 512 kernels of 1024 bytes (512 KiB) do not fit 10 weight banks (320 KiB): the CBUF
    // streams them, so none are kept for the next task.
    let keep = |c: &mut rknpu_driver::task::Cbuf| c.weight_reuse = true;
    let err = run((4, 1024, 512), &keep).unwrap_err().to_string();
    assert!(err.contains(cna::CbufCon0::WEIGHT_REUSE.name()), "{err}");
    assert!(err.contains("do not fit"), "{err}");
    // 32 kernels of 64 bytes fit: the same bit is accepted.
    assert!(run((4, 64, 32), &keep).unwrap().completed);
}
