//! Work and memory bounded by the input: inputs that made the dump, the import or the
//! relocation search quadratic (or the dump's text quadratic in size) stay linear.

use super::*;
use crate::regcmd::{RegCmd, words_to_le_bytes};
use crate::submit::{BufferTask, TaskDesc};

/// A list of `body` NOP entries and an op-enable, as bytes.
fn list(body: usize) -> Vec<u8> {
    let mut w = vec![RegCmd(0); body + 3];
    w.push(RegCmd::new(0x0081, 0x0d, 0x0008));
    words_to_le_bytes(&w)
}

fn task(offset: u32, amount: u32) -> BufferTask {
    BufferTask {
        buffer: 0,
        task: TaskDesc {
            offset,
            regcfg_amount: amount,
            int_mask: 0x300,
            enable: 0x0d,
        },
    }
}

fn trace(chunks: Vec<Chunk>) -> Trace {
    Trace {
        header: Header::new("RK3588", 0, "test", false),
        chunks,
    }
}

#[test]
fn a_dump_of_many_tasks_naming_one_large_list_stays_linear() {
    // 100 000 tasks (2 MB of SUBM) each naming the same 8192-entry list (64 KiB): the
    // dump printed the list once per task, 8 x 10^8 lines.
    let bytes = list(8188);
    let tasks: Vec<BufferTask> = (0..100_000).map(|_| task(0, 8188)).collect();
    let t = trace(vec![
        Chunk::Buffer {
            id: 0,
            flags: 0,
            size: bytes.len() as u64,
            dma_addr: 0x1000_0000,
        },
        Chunk::Data {
            id: 0,
            offset: 0,
            contents: Contents::Bytes(bytes),
        },
        Chunk::Submit(Submission::one_core(1, 1, tasks)),
    ]);
    let text = dump(&t);
    let decoded = text.matches("# task 0:").count();
    let refused = text.matches("not decoded").count();
    // The budget (4 x 8192 + 65536 units) pays 11 decodes of 8192 entries + 1 lookup.
    assert_eq!(decoded, 11, "{}", &text[..2000]);
    assert_eq!(decoded + refused, 100_000);
    assert!(text.len() < 64 << 20, "{} bytes of text", text.len());
    let mut streamed = Vec::new();
    write_dump(&t, &mut streamed).unwrap();
    assert_eq!(streamed, text.as_bytes());
}

#[test]
fn a_dump_of_many_contents_chunks_and_tasks_stays_linear() {
    // 50 000 contents chunks of one buffer and 50 000 tasks whose list is in none of
    // them: each task searched every chunk, 2.5 x 10^9 comparisons.
    let mut chunks = vec![Chunk::Buffer {
        id: 0,
        flags: 0,
        size: 1 << 20,
        dma_addr: 0x1000_0000,
    }];
    chunks.extend((0..50_000u64).map(|i| Chunk::Data {
        id: 0,
        offset: i * 8,
        contents: Contents::Bytes(vec![0; 8]),
    }));
    let tasks = (0..50_000).map(|_| task(0x8_0000, 4)).collect();
    chunks.push(Chunk::Submit(Submission::one_core(1, 1, tasks)));
    let text = dump(&trace(chunks));
    let missing = text.matches("its list is not in the trace").count();
    let refused = text.matches("not decoded").count();
    assert_eq!(missing + refused, 50_000);
    // 4 x 50 000 + 65 536 lookups cover five tasks' searches, then the budget is spent.
    assert_eq!(missing, 5);
}
