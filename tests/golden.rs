//! Golden fixtures: the worked int8 example (mtx512's int8 matmul; docs/provenance.md), built with the
//! typed builder, as bound words (`.bin`) and decoded text (`.txt`).
//!
//! The fixtures are reviewed text. `UPDATE_FIXTURES=1 cargo test --test golden` rewrites
//! them on purpose; review the diff before committing it.

mod common;

use rknpu_driver::kernels::worked_example;
use rknpu_driver::regcmd::{self, words_to_le_bytes};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/regcmd")
        .join(name)
}

/// Compares `actual` with the fixture, or rewrites it under `UPDATE_FIXTURES=1`.
fn check(name: &str, actual: &[u8]) {
    let path = fixture(name);
    if std::env::var_os("UPDATE_FIXTURES").is_some() {
        std::fs::write(&path, actual).expect("write fixture");
        return;
    }
    let expected = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_FIXTURES=1 creates it)", path.display()));
    if let Some(diff) = common::first_difference(&expected, actual) {
        panic!(
            "{name} differs from the fixture: {diff}\n(UPDATE_FIXTURES=1 rewrites it on purpose)"
        );
    }
}

#[test]
fn worked_example_matches_golden_words_and_text() {
    let program = worked_example::program().unwrap();
    let base = worked_example::fixture_address(worked_example::REGCMD).map(|a| a as u32);
    let words = program.bind(worked_example::fixture_address).unwrap();
    check("worked-int8-4x32x32.bin", &words_to_le_bytes(&words));
    // The text is what `rknpu decode FILE.bin --addr 0x100000` prints for the bound words.
    let bound = regcmd::decode(&words);
    check("worked-int8-4x32x32.txt", bound.to_text(base).as_bytes());
    assert_eq!(bound.unknown(), 0);
    assert_eq!(bound.tasks.len(), 1);
    // The unbound program decodes to the same lines, with its relocations named.
    let unbound = program.decode().to_text(base);
    let relocs: Vec<&str> = unbound
        .lines()
        .filter(|l| l.contains("# reloc buffer"))
        .collect();
    assert_eq!(relocs.len(), 3, "{relocs:?}");
    assert!(
        relocs[2].starts_with("0057  DPU.DST_BASE_ADDR")
            && relocs[2].ends_with("# reloc buffer 3 + 0x0")
    );
}

/// A of the worked example: `A[m][k] = (m·32 + k)·37 mod 255 − 127`.
fn worked_a(m: usize, k: usize) -> i32 {
    ((m * 32 + k) * 37 % 255) as i32 - 127
}

/// B of the worked example: `B[k][n] = (k·32 + n)·53 mod 255 − 127`.
fn worked_b(k: usize, n: usize) -> i32 {
    ((k * 32 + n) * 53 % 255) as i32 - 127
}

/// Operand fixtures for `rknpu sim run` on the worked example (README's main job): A in
/// the native layout `[K/16][M][16]`, B in the weight atom (`n·32 + k`), and the expected
/// C, computed here on the CPU (not by the simulator), in the native int32 layout
/// `[N/4][M][4]`. The simulator must reproduce C from A and B.
#[test]
fn worked_example_operands_and_product() {
    let mut a = vec![0u8; 128];
    let mut b = vec![0u8; 1024];
    let mut c = vec![0u8; 512];
    for m in 0..4 {
        for k in 0..32 {
            a[((k / 16) * 4 + m) * 16 + k % 16] = worked_a(m, k) as i8 as u8;
        }
    }
    for k in 0..32 {
        for n in 0..32 {
            b[n * 32 + k] = worked_b(k, n) as i8 as u8;
        }
    }
    for m in 0..4 {
        for n in 0..32 {
            let sum: i32 = (0..32).map(|k| worked_a(m, k) * worked_b(k, n)).sum();
            let o = ((n / 4) * 4 + m) * 16 + (n % 4) * 4;
            c[o..o + 4].copy_from_slice(&sum.to_le_bytes());
        }
    }
    check("worked-int8-4x32x32.a.bin", &a);
    check("worked-int8-4x32x32.b.bin", &b);
    check("worked-int8-4x32x32.c.bin", &c);

    use rknpu_driver::sim::{Kick, Simulator};
    let program = worked_example::program().unwrap();
    let words = program.bind(worked_example::fixture_address).unwrap();
    let at = |buf| worked_example::fixture_address(buf).unwrap() as u32;
    let mut sim = Simulator::new();
    let mem = sim.memory_mut();
    mem.map(at(worked_example::REGCMD), words_to_le_bytes(&words))
        .unwrap();
    mem.map(at(worked_example::INPUT), a).unwrap();
    mem.map(at(worked_example::WEIGHTS), b).unwrap();
    mem.map_zeroed(at(worked_example::OUTPUT), 512).unwrap();
    let run = sim
        .kick(&Kick::new(at(worked_example::REGCMD), 104))
        .unwrap();
    assert!(run.completed);
    assert_eq!(
        sim.memory()
            .read_vec(at(worked_example::OUTPUT), 512)
            .unwrap(),
        c
    );
}
