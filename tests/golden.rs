//! Golden fixtures: the worked int8 example of register-map.md section 8, built with the
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
