//! `rknpu sim run` as a child process: the golden example program runs from its file with
//! operands loaded from files and the product dumped to a file; errors exit 1 naming the
//! register, field and value; usage errors exit 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{RKNPU, expect, run};

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/regcmd/worked-int8-4x32x32.bin")
}

/// A file under the temporary directory, removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(test: &str, label: &str, bytes: &[u8]) -> Temp {
        let p = std::env::temp_dir().join(format!(
            "rknpu-cli-sim-{}-{test}-{label}",
            std::process::id()
        ));
        std::fs::write(&p, bytes).unwrap();
        Temp(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A = 4×32 int8 in the native layout with A[m][k] = m + 1; B[k][n] = n - 16 in the weight
/// atom (byte n·32 + k). C[m][n] = 32·(m + 1)·(n − 16).
fn operands(test: &str) -> (Temp, Temp) {
    let mut a = vec![0u8; 128];
    for m in 0..4 {
        for k in 0..32 {
            a[((k / 16) * 4 + m) * 16 + k % 16] = (m + 1) as u8;
        }
    }
    let b: Vec<u8> = (0..32).flat_map(|n| [(n as i8 - 16) as u8; 32]).collect();
    (Temp::new(test, "a", &a), Temp::new(test, "b", &b))
}

fn golden_args<'a>(a: &'a Temp, b: &'a Temp, dump: &'a str) -> Vec<String> {
    vec![
        "sim".into(),
        "run".into(),
        "--regcmd".into(),
        golden().to_str().unwrap().into(),
        "--regcmd-addr".into(),
        "0x100000".into(),
        "--load".into(),
        format!("0x200000={}", a.path()),
        "--load".into(),
        format!("0x300000={}", b.path()),
        "--dump".into(),
        format!("0x400000:512={dump}"),
    ]
}

fn check_product(path: &Path) {
    let c = std::fs::read(path).unwrap();
    assert_eq!(c.len(), 512);
    for m in 0..4 {
        for n in 0..32 {
            let o = ((n / 4) * 4 + m) * 16 + (n % 4) * 4;
            let got = i32::from_le_bytes(c[o..o + 4].try_into().unwrap());
            assert_eq!(got, 32 * (m as i32 + 1) * (n as i32 - 16), "C[{m}][{n}]");
        }
    }
}

#[test]
fn golden_program_runs_from_its_file_and_dumps_the_product() {
    let (a, b) = operands("golden");
    let dump = Temp::new("golden", "c", b"");
    let args = golden_args(&a, &b, dump.path());
    let o = Command::new(RKNPU).args(&args).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    let text = out(&o);
    assert!(text.contains("tasks: 1\n"), "{text}");
    assert!(
        text.contains("int_status: 0x100 (int_mask 0x300)"),
        "{text}"
    );
    assert!(text.ends_with("completed\n"), "{text}");
    assert!(!text.contains("warning"), "{text}");
    check_product(&dump.0);

    // The same with the first task's word count given and the program at address 0.
    let mut args = golden_args(&a, &b, dump.path());
    args[5] = "0".into();
    args.extend(["--task-words".into(), "104".into()]);
    let o = Command::new(RKNPU).args(&args).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    check_product(&dump.0);
}

#[test]
fn missing_operand_exits_1_naming_the_dma() {
    let (_, b) = operands("missing");
    let o = run(&[
        "sim",
        "run",
        "--regcmd",
        golden().to_str().unwrap(),
        "--load",
        &format!("0x300000={}", b.path()),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = err(&o);
    assert!(
        e.contains("CNA DMA read") && e.contains("0x200000") && e.contains("CNA.FEATURE_DATA_ADDR"),
        "{e}"
    );
}

#[test]
fn unsupported_field_exits_1_naming_register_field_and_value() {
    let mut words = std::fs::read(golden()).unwrap();
    // Entry 1 is CNA.CONV_CON1 = 0: give it the reserved conv_mode 1 (0 direct and 3
    // depthwise are modelled).
    words[8 + 2] = 1;
    let prog = Temp::new("unsupported", "prog", &words);
    let o = run(&["sim", "run", "--regcmd", prog.path()]);
    expect(&o, 1);
    let e = err(&o);
    assert!(e.contains("CNA.CONV_CON1.conv_mode = 1"), "{e}");
}

#[test]
fn interrupt_masks_decide_completion_and_are_linted() {
    let (a, b) = operands("mask");
    let dump = Temp::new("mask", "c", b"");
    let with_mask = |mask: &str| {
        let mut args = golden_args(&a, &b, dump.path());
        args.extend(["--int-mask".into(), mask.into()]);
        Command::new(RKNPU).args(&args).output().unwrap()
    };
    let o = with_mask("0xC00");
    expect(&o, 1);
    let e = err(&o);
    assert!(e.contains("not completed"), "{e}");

    let text = expect(&with_mask("0x3"), 0);
    assert!(
        text.contains("warning: core 0 task 0: early-int-mask"),
        "{text}"
    );
}

#[test]
fn a_program_with_no_task_tail_exits_1() {
    let words: Vec<u8> = [0x1001_0000_000E_4004u64, 0]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let prog = Temp::new("notail", "prog", &words);
    let o = run(&["sim", "run", "--regcmd", prog.path()]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn usage_errors_exit_2() {
    let (a, _) = operands("usage");
    let g = golden();
    let g = g.to_str().unwrap();
    let overlap = format!("0x8={}", a.path());
    let bare: [&[&str]; 4] = [
        &["sim"],
        &["sim", "walk"],
        &["sim", "run"],
        &["sim", "run", "--regcmd"],
    ];
    // Each after `sim run --regcmd GOLDEN`; the last a load that overlaps the program.
    let on_golden: [&[&str]; 6] = [
        &["--core", "3"],
        &["--load", "0x10"],
        &["--dump", "0x10=x"],
        &["--frobnicate"],
        &["--int-mask", "lots"],
        &["--load", &overlap],
    ];
    let cases = bare.iter().map(|c| c.to_vec()).chain(
        on_golden
            .iter()
            .map(|extra| [&["sim", "run", "--regcmd", g][..], extra].concat()),
    );
    for args in cases {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        // The usage line of `sim` or `sim run` follows the message.
        assert!(
            err(&o).contains("Usage: rknpu sim"),
            "{args:?}: {}",
            err(&o)
        );
    }
}
