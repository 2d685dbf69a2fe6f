//! Inputs that made the decoder, the importers and the relocation search quadratic now
//! cost linear-logarithmic work: each test uses an input of 10^4 to 10^5 pieces that took
//! 10^9 to 10^10 steps before, and checks counts, not time.

use rknpu_driver::regcmd::{self, RegCmd};
use rknpu_driver::trace::{Chunk, import_capture, import_raw};
use std::path::PathBuf;

/// A task list of `n` tasks, each `[chain address, chain amount, marker, op-enable]` and
/// padding to 64 bytes, chained one to the next, at `base`.
fn chained_tasks(n: usize, base: u32) -> Vec<RegCmd> {
    let mut w = Vec::new();
    for i in 0..n {
        let next = if i + 1 < n {
            base + 64 * (i as u32 + 1)
        } else {
            0
        };
        w.push(RegCmd::new(0x0101, next, 0x0010));
        w.push(RegCmd::new(0x0101, 1, 0x0014));
        w.push(RegCmd::new(0x0041, 0, 0));
        w.push(RegCmd::new(0x0081, 0x0d, 0x0008));
        w.extend([RegCmd(0); 4]);
    }
    w
}

#[test]
fn to_text_resolves_100k_chain_addresses_in_linear_time() {
    // Each chain address was resolved by a linear search over the tasks: 5 x 10^9 steps.
    let n = 100_000;
    let d = regcmd::decode(&chained_tasks(n, 0x1000_0000));
    assert_eq!(d.tasks.len(), n);
    let text = d.to_text(Some(0x1000_0000));
    assert_eq!(text.matches(" -> task ").count(), n - 1);
    assert!(text.contains(&format!("-> task {}", n - 1)));
}

#[test]
fn import_raw_places_100k_expected_outputs_in_linear_time() {
    // Every expected output searched every buffer, and every contents chunk was tested
    // against the list of fresh buffers: 10^10 steps for 10^5 outputs.
    let words = chained_tasks(1, 0x1000_0000);
    let program = regcmd::words_to_le_bytes(&words);
    let loads: Vec<(u32, Vec<u8>)> = (0..1000u32)
        .map(|i| (0x2000_0000 + i * 4096, vec![1; 4096]))
        .collect();
    let mut expect: Vec<(u32, Vec<u8>)> = (0..50_000u32)
        .map(|i| (0x2000_0000 + i * 64, vec![2; 64]))
        .collect();
    expect.extend((0..50_000u32).map(|i| (0x4000_0000 + i * 64, vec![3; 64])));
    let t = import_raw(&program, 0x1000_0000, 0, &loads, &expect);
    let count = |f: fn(&Chunk) -> bool| t.chunks.iter().filter(|c| f(c)).count();
    // The program, 1000 loads, 50 000 outputs outside them with a buffer each.
    assert_eq!(
        count(|c| matches!(c, Chunk::Buffer { .. })),
        1 + 1000 + 50_000
    );
    // Only the program and the loads have contents: fresh buffers start zeroed.
    assert_eq!(count(|c| matches!(c, Chunk::Data { .. })), 1 + 1000);
    assert_eq!(count(|c| matches!(c, Chunk::Output { .. })), 100_000);
    let inside = t
        .chunks
        .iter()
        .filter(|c| matches!(c, Chunk::Output { id, .. } if *id >= 1 && *id <= 1000))
        .count();
    assert_eq!(inside, 50_000);
}

struct Temp(PathBuf);

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn capture_dir(name: &str) -> Temp {
    let d = std::env::temp_dir().join(format!("rknpu-bounds-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Temp(d)
}

#[test]
fn a_capture_of_loose_lists_gets_a_buffer_and_submission_per_list() {
    // Task files at addresses 128 KiB apart: one regcmd buffer each (the gathering itself
    // is tested at 30 000 lists in src/trace/capture.rs, without files).
    let dir = capture_dir("loose");
    let n = 500u32;
    // No chain entries: each list is a submission of its own.
    let list = regcmd::words_to_le_bytes(&[
        RegCmd(0),
        RegCmd(0),
        RegCmd::new(0x0041, 0, 0),
        RegCmd::new(0x0081, 0x0d, 0x0008),
    ]);
    let mut meta = String::from("{\"task_descriptors\":[");
    for i in 0..n {
        std::fs::write(dir.0.join(format!("task-{i:05}.regcmd.bin")), &list).unwrap();
        let sep = if i > 0 { "," } else { "" };
        meta.push_str(&format!(
            "{sep}{{\"regcmd_addr\":{},\"regcfg_amount\":0}}",
            0x1000_0000 + i * 0x2_0000
        ));
    }
    meta.push_str("]}");
    std::fs::write(dir.0.join("meta.json"), meta).unwrap();
    let t = import_capture(&dir.0).unwrap();
    let buffers = t
        .chunks
        .iter()
        .filter(|c| matches!(c, Chunk::Buffer { .. }))
        .count();
    assert_eq!(buffers, n as usize);
    let submits = t
        .chunks
        .iter()
        .filter(|c| matches!(c, Chunk::Submit(_)))
        .count();
    assert_eq!(submits, n as usize);
}
