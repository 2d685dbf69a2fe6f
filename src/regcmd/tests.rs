//! Unit tests of entries, amounts, the builder and the decoder.

use super::*;
use crate::regs::{Register, cna, dpu, pc, values::Precision};
use proptest::prelude::*;

#[test]
fn entry_packs_target_value_offset() {
    let e = RegCmd::new(0x0201, 0xB1, 0x1040);
    assert_eq!(e.0, 0x0201_0000_00B1_1040);
    assert_eq!((e.target(), e.value(), e.offset()), (0x0201, 0xB1, 0x1040));
    assert_eq!(RegCmd::MARKER.0, 0x0041_0000_0000_0000);
    assert_eq!(RegCmd::op_enable(BlockMask::CONV).0, 0x0081_0000_000D_0008);
    assert_eq!(
        RegCmd::write(cna::CbufCon0::new().with_data_bank(1).with_weight_bank(11)).0,
        0x0201_0000_00B1_1040
    );
}

#[test]
fn amount_follows_the_kernel_formula() {
    // docs/hardware/registers.md#pc-chain: RKNN bodies 108 -> 55, 104 -> 53, 26 -> 14.
    assert_eq!(pc_data_amount(108).unwrap(), 55);
    assert_eq!(pc_data_amount(104).unwrap(), 53);
    assert_eq!(pc_data_amount(26).unwrap(), 14);
    assert_eq!(pc_data_amount(0).unwrap(), 1);
    assert_eq!(
        pc_data_amount(1).unwrap(),
        2,
        "odd totals round up to whole 16-byte units"
    );
    assert_eq!(pc_data_amount(131_068).unwrap(), u16::MAX);
    assert!(matches!(
        pc_data_amount(131_069),
        Err(Error::ProgramTooLarge { .. })
    ));
}

fn small_body(n: usize) -> TaskBuilder {
    let mut t = TaskBuilder::new();
    for i in 0..n {
        t.write(dpu::OffsetPend::new().with_offset_pend(i as u16));
    }
    t
}

#[test]
fn chained_tasks_point_at_each_other() {
    let mut p = ProgramBuilder::new(BufferId(7));
    p.push_task(small_body(3), BlockMask::CONV)
        .push_task(small_body(10), BlockMask::DPU | BlockMask::DPU_RDMA)
        .push_task(small_body(1), BlockMask::PPU | BlockMask::PPU_RDMA);
    let program = p.build().unwrap();
    let starts: Vec<u32> = program.tasks().iter().map(|t| t.offset / 8).collect();
    assert_eq!(starts, vec![0, 8, 24], "3+4 -> 8 words, 10+4 -> 16 words");
    assert_eq!(program.words().len(), 32);
    let masks: Vec<u32> = program.tasks().iter().map(|t| t.int_mask).collect();
    assert_eq!(masks, vec![0x300, 0x300, 0xC00]);
    let words = program
        .bind(|b| (b == BufferId(7)).then_some(0x1000))
        .unwrap();
    // Task 0's tail: next address 0x1000 + 64, next amount for a 10-entry body (6).
    assert_eq!(words[3], RegCmd::new(0x0101, 0x1040, 0x0010));
    assert_eq!(words[4], RegCmd::new(0x0101, 6, 0x0014));
    // Last task: no next task.
    assert_eq!(words[25], RegCmd::NOP);
    assert_eq!(words[26], RegCmd::new(0x0101, 0, 0x0014));
    let d = decode(&words);
    assert_eq!(d.tasks.len(), 3);
    assert_eq!(d.tasks[1].next_address, Some(0x1000 + 24 * 8));
    let text = d.to_text(Some(0x1000));
    assert!(text.contains("# tail: next address -> task 1"), "{text}");
    assert!(text.contains("# tail: next address -> task 2"), "{text}");
    assert!(!text.contains("(!"), "amounts match: {text}");
}

/// A body shaped like the vendor's chained GEMM tasks: the control registers it writes
/// in every task (two of them twice), the row count, and three relocated addresses.
fn gemm_like(cbuf: u32, rows: u32, a: u32, c: u32) -> TaskBuilder {
    let mut t = TaskBuilder::new();
    t.write(cna::CbufCon0::from_raw(cbuf))
        .write(cna::DcompRegnum::from_raw(0))
        .write(cna::ConvCon1::from_raw(0x120))
        .write(dpu::SPointer::from_raw(0x0E))
        .write(cna::ConvCon1::from_raw(0x120))
        .write(cna::DataSize0::from_raw(0x0001_0000 | rows))
        .write(cna::CbufCon0::from_raw(cbuf));
    t.write_addr::<cna::FeatureDataAddr>(DmaAddr::reloc(BufferId(1), a))
        .unwrap()
        .write_addr::<cna::DcompAddr0>(DmaAddr::reloc(BufferId(2), 0))
        .unwrap()
        .write_addr::<dpu::DstBaseAddr>(DmaAddr::reloc(BufferId(3), c))
        .unwrap();
    t.write(dpu::WdmaSize0::from_raw(rows - 1));
    t
}

/// (offset, value or relocation target) of each body entry of task `i`.
fn body_of(p: &Program, i: usize) -> Vec<(u16, Result<u32, Reloc>)> {
    let t = p.tasks()[i];
    let first = t.offset as usize / 8;
    (first..first + t.regcfg_amount as usize)
        .map(|e| {
            let r = p.relocations().iter().find(|r| r.entry == e);
            let w = p.words()[e];
            (w.offset(), r.map_or(Ok(w.value()), |r| Err(r.target)))
        })
        .collect()
}

#[test]
fn incremental_bodies_keep_what_differs_from_the_group_two_tasks_back() {
    let reloc = |b, offset| {
        Err(Reloc {
            buffer: BufferId(b),
            offset,
        })
    };
    let (cbuf0, conv1, sp, ds0) = (
        cna::CbufCon0::OFFSET,
        cna::ConvCon1::OFFSET,
        dpu::SPointer::OFFSET,
        cna::DataSize0::OFFSET,
    );
    let (regnum, feat, dcomp, dst, wdma) = (
        cna::DcompRegnum::OFFSET,
        cna::FeatureDataAddr::OFFSET,
        cna::DcompAddr0::OFFSET,
        dpu::DstBaseAddr::OFFSET,
        dpu::WdmaSize0::OFFSET,
    );
    let tasks = [
        gemm_like(0xB1, 39, 0, 0),
        gemm_like(0x20B1, 39, 0x100, 0x200),
        gemm_like(0x20B1, 39, 0x200, 0x400),
        gemm_like(0x20B1, 39, 0x300, 0x600),
        gemm_like(0x20B1, 4, 0x400, 0x800),
    ];
    let mut p = ProgramBuilder::new(BufferId(0)).incremental(true);
    for t in &tasks {
        p.push_task(t.clone(), BlockMask::CONV);
    }
    p.end_chain();
    // A second chain starts again with two full bodies; then another kind of task
    // (without DATA_SIZE0) is written in full, and so is the next task of the first kind
    // in its group.
    let mut other = tasks[2].clone().retain(|i| i != 5);
    other.write(cna::DataSize1::from_raw(0x0F));
    for t in [&tasks[0], &tasks[1], &other, &tasks[2], &tasks[3]] {
        p.push_task(t.clone(), BlockMask::CONV);
    }
    let program = p.build().unwrap();
    let amounts: Vec<u32> = program.tasks().iter().map(|t| t.regcfg_amount).collect();
    assert_eq!(amounts, [11, 11, 9, 8, 9, 11, 11, 11, 8, 11]);
    // Task 2: CBUF_CON0 changed (0xB1 in its group) so both its writes stay; CONV_CON1
    // once; DATA_SIZE0 unchanged and left out; the weight address unchanged but written.
    assert_eq!(
        body_of(&program, 2),
        [
            (cbuf0, Ok(0x20B1)),
            (regnum, Ok(0)),
            (conv1, Ok(0x120)),
            (sp, Ok(0x0E)),
            (cbuf0, Ok(0x20B1)),
            (feat, reloc(1, 0x200)),
            (dcomp, reloc(2, 0)),
            (dst, reloc(3, 0x400)),
            (wdma, Ok(38)),
        ]
    );
    // Task 3: CBUF_CON0 as its group holds it (task 1's): written once.
    assert_eq!(body_of(&program, 3)[0], (cbuf0, Ok(0x20B1)));
    assert_eq!(body_of(&program, 3)[4], (feat, reloc(1, 0x300)));
    // Task 4, the tail: its row count differs and is written.
    assert!(body_of(&program, 4).contains(&(ds0, Ok(0x0001_0004))));
    assert!(body_of(&program, 4).contains(&(wdma, Ok(3))));
    // Every relocation still names the entry of its register after the entries moved.
    for r in program.relocations() {
        let reg = program.words()[r.entry].offset();
        assert_eq!(r.register, crate::regs::lookup(reg).unwrap().full_name);
    }
    // Off (the default): every body in full.
    let mut off = ProgramBuilder::new(BufferId(0)).incremental(false);
    for t in &tasks {
        off.push_task(t.clone(), BlockMask::CONV);
    }
    let off = off.build().unwrap();
    assert!(off.tasks().iter().all(|t| t.regcfg_amount == 11));
}

#[test]
fn registers_patched_after_building_are_always_written() {
    let mut p = ProgramBuilder::new(BufferId(0))
        .incremental(true)
        .always_write::<cna::DataSize0>();
    for _ in 0..3 {
        p.push_task(gemm_like(0xB1, 8, 0, 0), BlockMask::CONV);
    }
    let program = p.build().unwrap();
    let third: Vec<u16> = body_of(&program, 2).iter().map(|e| e.0).collect();
    assert!(third.contains(&cna::DataSize0::OFFSET), "{third:x?}");
    assert!(!third.contains(&cna::FeatureDataAddr::OFFSET), "{third:x?}");
}

#[test]
fn decoder_flags_a_chain_amount_that_does_not_match() {
    let mut p = ProgramBuilder::new(BufferId(0));
    p.push_task(small_body(2), BlockMask::CONV)
        .push_task(small_body(5), BlockMask::CONV);
    let mut words = p.build().unwrap().bind(|_| Some(0)).unwrap();
    words[3] = RegCmd::write(pc::RegisterAmounts::new().with_pc_data_amount(9));
    let text = decode(&words).to_text(Some(0));
    assert!(
        text.contains("(! task 1 has a 5-entry body: amount 4)"),
        "{text}"
    );
}

#[test]
fn fixed_addresses_are_checked_when_written() {
    let mut t = TaskBuilder::new();
    assert_eq!(
        t.write_addr::<dpu::DstBaseAddr>(DmaAddr::Fixed(0x1004))
            .err(),
        Some(Error::Misaligned {
            register: dpu::DstBaseAddr::NAME,
            addr: 0x1004,
            align: 16
        })
    );
    t.write_addr::<cna::FeatureDataAddr>(DmaAddr::Fixed(0x1004))
        .unwrap();
    assert_eq!(t.entries(), &[RegCmd::new(0x0201, 0x1004, 0x1070)]);
}

#[test]
fn raw_entries_are_counted_and_marked() {
    let mut t = small_body(2);
    t.write_raw(0x0201, 0x1018, 0x19000);
    assert_eq!(t.raw_count(), 1);
    let mut p = ProgramBuilder::new(BufferId(0));
    p.push_task(t, BlockMask::CONV);
    let program = p.build().unwrap();
    assert_eq!(program.raw_entries(), &[2]);
    let d = program.decode();
    assert!(d.entries[2].raw && d.entries[2].is_unknown());
    assert_eq!(d.unknown(), 1);
    let text = d.to_text(None);
    assert!(
        text.contains("0002  CNA.UNKNOWN offset=0x1018 value=0x00019000  # raw"),
        "{text}"
    );
    assert!(d.to_json().contains("\"raw\":true"));
}

#[test]
fn empty_program_is_an_error() {
    assert_eq!(
        ProgramBuilder::new(BufferId(0)).build(),
        Err(Error::EmptyProgram)
    );
}

#[test]
fn decoder_names_unknown_targets_registers_and_reserved_bits() {
    let words = [
        RegCmd::new(0x0401, 0, 0x2010),
        RegCmd::new(0x0201, 5, 0x4004),
        RegCmd::new(0x0201, 0x8000_0120, 0x100C),
        RegCmd(1 << 48),
        RegCmd::op_enable(BlockMask(0x8D)),
    ];
    let d = decode(&words);
    assert_eq!(d.unknown(), 2);
    assert_eq!(
        d.entries[1].kind,
        EntryKind::UnknownRegister(Block::Cna),
        "offset of another block"
    );
    assert_eq!(d.entries[2].reserved_bits(), 0x8000_0000);
    assert_eq!(d.entries[3].kind, EntryKind::Nop);
    let text = d.to_text(None);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[1],
        "0000  UNKNOWN target=0x0401 offset=0x2010 value=0x00000000"
    );
    assert!(
        lines[3].contains("proc_precision: FP16") && lines[3].ends_with("!reserved: 0x80000000 }"),
        "{}",
        lines[3]
    );
    assert!(lines[5].contains("{ CNA|CORE|DPU|0x80 }"), "{}", lines[5]);
    assert_eq!(*lines.last().unwrap(), "summary: 5 entries, 2 unknown");
}

#[test]
fn decoder_keeps_words_without_a_tail_as_an_unterminated_task() {
    let words = [RegCmd::write(
        cna::ConvCon1::new().with_proc_precision(Precision::INT4),
    )];
    let d = decode(&words);
    assert_eq!(d.tasks.len(), 1);
    assert_eq!(d.tasks[0].enable, None);
    assert!(d.to_text(None).contains("no op-enable (unterminated)"));
}

#[test]
fn bad_byte_lengths_are_errors_naming_the_offset() {
    assert_eq!(decode_bytes(&[]), Err(Error::EmptyInput));
    assert_eq!(
        decode_bytes(&[0; 13]),
        Err(Error::InputLength { len: 13, offset: 8 })
    );
    assert_eq!(
        decode_bytes(&[0; 7]),
        Err(Error::InputLength { len: 7, offset: 0 })
    );
    let e = decode_bytes(&[0; 13]).unwrap_err().to_string();
    assert!(e.contains("byte offset 8"), "{e}");
}

#[test]
fn block_mask_names_blocks_and_completion_bits() {
    assert_eq!(BlockMask::CONV.to_string(), "CNA|CORE|DPU");
    assert_eq!(BlockMask(0).to_string(), "none");
    assert_eq!(BlockMask::CONV.completion_int_mask(), Some(0x300));
    assert_eq!(
        (BlockMask::PPU | BlockMask::PPU_RDMA).completion_int_mask(),
        Some(0xC00)
    );
    assert_eq!(BlockMask::CNA.completion_int_mask(), None);
    // The mask bits are the fields of GLOBAL.OPERATION_ENABLE.
    let g = crate::regs::global::OperationEnable::from_raw(0x7D);
    assert!(g.cna_op_en() && g.core_op_en() && g.dpu_op_en() && g.dpu_rdma_op_en());
    assert!(g.ppu_op_en() && g.ppu_rdma_op_en());
    for (block, mask) in BlockMask::BLOCKS {
        assert_eq!(BlockMask::of(block), Some(mask));
        let field = format!("{}_op_en", block.name().to_ascii_lowercase());
        let info = crate::regs::global::OperationEnable::INFO
            .field(&field)
            .unwrap();
        assert_eq!(info.mask(), mask.0, "{field}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decoding_any_words_never_panics_and_keeps_every_bit(words in prop::collection::vec(any::<u64>(), 0..200)) {
        let words: Vec<RegCmd> = words.into_iter().map(RegCmd).collect();
        let d = decode(&words);
        prop_assert_eq!(d.entries.len(), words.len());
        for e in &d.entries {
            prop_assert_eq!(e.word, words[e.index]);
            if let EntryKind::Write(_) = e.kind {
                let rebuilt = e.fields().iter().fold(e.reserved_bits(), |acc, f| acc | (f.value << f.info.lo));
                prop_assert_eq!(rebuilt, e.word.value());
            }
        }
        let covered: usize = d.tasks.iter().map(|t| t.end - t.start).sum();
        prop_assert_eq!(covered, words.len());
        let text = d.to_text(Some(0));
        let expected = format!("summary: {} entries, {} unknown", words.len(), d.unknown());
        prop_assert_eq!(text.lines().last(), Some(expected.as_str()));
    }

    #[test]
    fn decoding_any_bytes_is_ok_or_a_typed_error(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        match decode_bytes(&bytes) {
            Ok(d) => prop_assert_eq!(d.entries.len() * 8, bytes.len()),
            Err(Error::InputLength { len, offset }) => prop_assert!(len == bytes.len() && offset == len - len % 8),
            Err(Error::EmptyInput) => prop_assert!(bytes.is_empty()),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    #[test]
    fn built_programs_decode_to_what_was_written(bodies in prop::collection::vec(prop::collection::vec(any::<u16>(), 0..40), 1..6)) {
        let mut p = ProgramBuilder::new(BufferId(0));
        for b in &bodies {
            let mut t = TaskBuilder::new();
            for &v in b {
                t.write(dpu::OffsetPend::new().with_offset_pend(v));
            }
            p.push_task(t, BlockMask::CONV);
        }
        let words = p.build().unwrap().bind(|_| Some(0x4000)).unwrap();
        let d = decode(&words);
        prop_assert_eq!(d.tasks.len(), bodies.len());
        prop_assert_eq!(d.unknown(), 0);
        for (t, b) in d.tasks.iter().zip(&bodies) {
            prop_assert_eq!(t.body_len, b.len());
            prop_assert_eq!(t.start % 8, 0);
            let values: Vec<u32> = d.entries[t.start..t.start + t.body_len].iter().map(|e| e.word.value()).collect();
            prop_assert_eq!(values, b.iter().map(|&v| u32::from(v)).collect::<Vec<_>>());
        }
        prop_assert!(!d.to_text(Some(0x4000)).contains("(!"));
    }
}

#[test]
fn addresses_move_on_within_32_bits_only() {
    let fixed = DmaAddr::Fixed(0xFFFF_F000);
    assert_eq!(
        fixed.checked_offset(0xFFF),
        Some(DmaAddr::Fixed(0xFFFF_FFFF))
    );
    assert_eq!(fixed.checked_offset(0x1000), None);
    let reloc = DmaAddr::reloc(BufferId(3), 64);
    assert_eq!(
        reloc.checked_offset(16),
        Some(DmaAddr::reloc(BufferId(3), 80))
    );
    assert_eq!(reloc.checked_offset(u64::from(u32::MAX)), None);
    assert_eq!(DmaAddr::Fixed(0).checked_offset(1 << 32), None);
}
