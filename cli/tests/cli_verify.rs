//! `rknpu matmul --emit` and `rknpu verify` as child processes: emitted programs pass
//! against the buffers `--emit` prints and fail, naming the register, when one is short;
//! `verify`'s usage errors, access errors and decode failures.

use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::{Dtype, OutType};
use rknpu_driver::regcmd::{self, RegCmd};
use rknpu_driver::regs::{Register, cna, pc};
use std::process::{Command, Output};

mod common;
use common::Temp;

const RKNPU: &str = env!("CARGO_BIN_EXE_rknpu");

/// Runs `rknpu` with a device selection that cannot be opened: a command that touched a
/// device would fail.
fn run(args: &[&str]) -> Output {
    Command::new(RKNPU)
        .args(args)
        .env("RKNPU_DEVICE", "/nonexistent/rknpu-node")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A buffer line of `--emit`: `buffer ID NAME at ADDR LEN bytes ACCESS`.
#[derive(Debug)]
struct Emitted {
    id: u32,
    name: String,
    addr: u64,
    len: u64,
    access: String,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// Emits the matmul `args` into `file`; returns the buffers it printed.
fn emit(args: &[&str], file: &Temp) -> Vec<Emitted> {
    let mut all = vec!["matmul"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--emit", file.path()]);
    let o = run(&all);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {text}{}", stderr(&o));
    assert!(
        !text.contains("device:") && !text.contains("no NPU"),
        "--emit opened a device: {text}"
    );
    let buffers: Vec<Emitted> = text
        .lines()
        .filter_map(|l| l.strip_prefix("buffer "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!((f.len(), f[2], f[5]), (7, "at", "bytes"), "{l}");
            Emitted {
                id: f[0].parse().unwrap(),
                name: f[1].to_string(),
                addr: hex(f[3]),
                len: f[4].parse().unwrap(),
                access: f[6].to_string(),
            }
        })
        .collect();
    let names: Vec<&str> = buffers.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["regcmd", "A", "weights", "C"], "{text}");
    let addrs: Vec<u64> = buffers.iter().map(|b| b.addr).collect();
    assert_eq!(addrs, [0x1000_0000, 0x2000_0000, 0x3000_0000, 0x4000_0000]);
    assert_eq!(
        buffers[0].len,
        std::fs::metadata(&file.0).unwrap().len(),
        "{text}"
    );
    // The printed command is the one the buffers make.
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("verify: "))
        .unwrap();
    assert_eq!(line, verify_command(file, &buffers).join(" "));
    buffers
}

/// `rknpu verify` of `file` with the data buffers (the program's own is implicit).
fn verify_command(file: &Temp, buffers: &[Emitted]) -> Vec<String> {
    let mut v: Vec<String> = ["rknpu", "verify", "--regcmd", file.path(), "--regcmd-addr"]
        .map(String::from)
        .into();
    v.push(format!("{:#x}", buffers[0].addr));
    for b in &buffers[1..] {
        v.push("--buffer".into());
        v.push(format!("{:#x}:{}:{}", b.addr, b.len, b.access));
    }
    v
}

fn verify(file: &Temp, buffers: &[Emitted]) -> Output {
    let v = verify_command(file, buffers);
    let args: Vec<&str> = v[1..].iter().map(String::as_str).collect();
    run(&args)
}

#[test]
fn emitted_programs_verify_and_a_short_c_is_named() {
    for args in [
        &["--m", "4", "--k", "64", "--n", "32", "--dtype", "int8"][..],
        &[
            "--m", "300", "--k", "128", "--n", "96", "--dtype", "int8", "--cores", "3",
        ],
        &["--m", "16", "--k", "1024", "--n", "64", "--dtype", "int4"],
        &[
            "--m", "7", "--k", "700", "--n", "130", "--dtype", "int4", "--cores", "2", "--out",
            "int16",
        ],
        &["--m", "32", "--k", "128", "--n", "64", "--dtype", "fp16"],
        &[
            "--m", "3", "--k", "90", "--n", "100", "--dtype", "fp16", "--cores", "3", "--out",
            "fp16",
        ],
    ] {
        let file = Temp::new("emit.bin");
        let mut buffers = emit(args, &file);
        let o = verify(&file, &buffers);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {text}{}", stderr(&o));
        assert!(text.lines().last().unwrap().starts_with("ok: "), "{text}");
        let program = text.lines().find(|l| l.ends_with("(the program)")).unwrap();
        assert!(
            program.contains(&format!(" {} bytes r", buffers[0].len)),
            "{program}"
        );
        // Every task writes C: one DPU.DST_BASE_ADDR line per task.
        let tasks = text
            .lines()
            .filter(|l| l.contains("DPU.DST_BASE_ADDR"))
            .count();
        assert!(text.contains(&format!("ok: {tasks} task(s)")), "{text}");

        buffers[3].len -= 16;
        let o = verify(&file, &buffers);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}{err}", stdout(&o));
        assert!(
            err.contains("DPU.DST_BASE_ADDR") && err.contains("outside every buffer"),
            "{args:?}: {err}"
        );
    }
}

/// The emitted words are the library's program bound at the printed addresses, and an
/// fp16 result is converted by the tasks themselves.
#[test]
fn emitted_words_are_the_bound_program() {
    let file = Temp::new("bound.bin");
    let buffers = emit(
        &[
            "--m", "9", "--k", "300", "--n", "70", "--dtype", "fp16", "--out", "fp16", "--cores",
            "2",
        ],
        &file,
    );
    let spec = MatmulSpec {
        out: OutType::Fp16,
        ..MatmulSpec::new(9, 300, 70, Dtype::Fp16).on_cores(2)
    };
    let plan = Plan::new(spec).unwrap();
    let program = plan.program().unwrap();
    let want = program
        .bind(|id| buffers.iter().find(|b| b.id == id.0).map(|b| b.addr))
        .unwrap();
    let got = regcmd::words_from_le_bytes(&std::fs::read(&file.0).unwrap()).unwrap();
    assert_eq!(got, want);
    let tasks = rknpu_driver::verify::tasks_of_words(&got).unwrap();
    assert_eq!(tasks.len(), plan.tasks.len());
    for t in &tasks {
        let dpu = t.dpu.as_ref().unwrap();
        assert_eq!(dpu.out.precision.name(), "fp16");
        assert!(dpu.out_cvt.fp32_to_fp16);
    }
}

/// A tail that sends the PC into a buffer instead of the next task's words is refused,
/// naming the task, the tail's address and what was expected.
#[test]
fn a_tail_that_leaves_the_program_is_named() {
    let file = Temp::new("tail.bin");
    let buffers = emit(
        &[
            "--m", "300", "--k", "128", "--n", "96", "--dtype", "int8", "--cores", "3",
        ],
        &file,
    );
    assert_eq!(verify(&file, &buffers).status.code(), Some(0));
    let mut words = regcmd::words_from_le_bytes(&std::fs::read(&file.0).unwrap()).unwrap();
    let tail = regcmd::decode(&words)
        .entries
        .iter()
        .position(|e| e.task == 0 && e.role == Some(regcmd::TailRole::NextAddress))
        .unwrap();
    let c = buffers.iter().find(|b| b.name == "C").unwrap().addr as u32;
    words[tail] = RegCmd::write(pc::BaseAddress::new()).with_value(c);
    std::fs::write(&file.0, regcmd::words_to_le_bytes(&words)).unwrap();
    let o = verify(&file, &buffers);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{}{err}", stdout(&o));
    assert!(
        err.contains("task 0")
            && err.contains(pc::BaseAddress::NAME)
            && err.contains(&format!("{c:#x}")),
        "{err}"
    );
}

#[test]
fn task_words_limit_the_program_to_its_first_words() {
    // The file holds the small program, then a second one whose C is twice as large: the
    // buffers of the first pass only for the first program's words.
    let (small, large) = (Temp::new("small.bin"), Temp::new("large.bin"));
    let buffers = emit(
        &[
            "--m", "4", "--k", "64", "--n", "32", "--dtype", "int8", "--cores", "1",
        ],
        &small,
    );
    emit(
        &[
            "--m", "4", "--k", "64", "--n", "64", "--dtype", "int8", "--cores", "1",
        ],
        &large,
    );
    let mut bytes = std::fs::read(&small.0).unwrap();
    let words = bytes.len() / 8;
    bytes.extend(std::fs::read(&large.0).unwrap());
    let both = Temp::new("both.bin");
    std::fs::write(&both.0, &bytes).unwrap();
    let mut v = verify_command(&both, &buffers);
    let o = run(&v.iter().skip(1).map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).starts_with("rknpu: task 1: "), "{}", stderr(&o));
    v.extend(["--task-words".into(), words.to_string()]);
    let o = run(&v.iter().skip(1).map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    // The program's own buffer is the whole file, whatever --task-words says.
    let text = stdout(&o);
    assert!(
        text.contains(&format!(" {} bytes r  (the program)", bytes.len())),
        "{text}"
    );
    assert!(text.contains("ok: 1 task(s)"), "{text}");
    let past = (bytes.len() / 8 + 1).to_string();
    let n = v.len();
    v[n - 1] = past;
    let o = run(&v.iter().skip(1).map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--task-words"), "{}", stderr(&o));
}

#[test]
fn access_the_buffer_does_not_allow_is_named() {
    let file = Temp::new("access.bin");
    let mut buffers = emit(
        &["--m", "4", "--k", "64", "--n", "32", "--dtype", "int8"],
        &file,
    );
    buffers[3].access = "r".into();
    let o = verify(&file, &buffers);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("task 0: DPU.DST_BASE_ADDR writes") && err.contains("as 'r'"),
        "{err}"
    );
    // A read-write buffer allows the write.
    buffers[3].access = "rw".into();
    assert_eq!(verify(&file, &buffers).status.code(), Some(0));
    // A listed buffer covering the program replaces the implicit one.
    let mut v = verify_command(&file, &buffers);
    v.extend(["--buffer".into(), "0x10000000:0x10000:r".into()]);
    let o = run(&v.iter().skip(1).map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(0));
    assert!(!stdout(&o).contains("(the program)"), "{}", stdout(&o));
}

#[test]
fn tasks_that_do_not_decode_and_words_without_a_task_fail() {
    let file = Temp::new("decode.bin");
    let buffers = emit(
        &["--m", "4", "--k", "64", "--n", "32", "--dtype", "int8"],
        &file,
    );
    let mut words = regcmd::words_from_le_bytes(&std::fs::read(&file.0).unwrap()).unwrap();
    let target = rknpu_driver::regs::Block::Cna.target().unwrap();
    // Every write of CNA.CONV_CON1 (the preamble writes it too), so the last one counts.
    let mut written = 0;
    for w in &mut words {
        if w.target() == target && w.offset() == cna::ConvCon1::OFFSET {
            *w = w.with_value(u32::MAX);
            written += 1;
        }
    }
    assert!(written > 0);
    std::fs::write(&file.0, regcmd::words_to_le_bytes(&words)).unwrap();
    let o = verify(&file, &buffers);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).starts_with("rknpu: task 0: "), "{}", stderr(&o));
    assert!(stderr(&o).contains("CNA.CONV_CON1"), "{}", stderr(&o));

    std::fs::write(&file.0, regcmd::words_to_le_bytes(&[RegCmd(0); 4])).unwrap();
    let o = verify(&file, &buffers);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no task"), "{}", stderr(&o));
}

#[test]
fn verify_usage_errors_exit_2_with_a_message() {
    let file = Temp::new("usage.bin");
    emit(
        &["--m", "4", "--k", "64", "--n", "32", "--dtype", "int8"],
        &file,
    );
    let ragged = Temp::new("ragged.bin");
    std::fs::write(&ragged.0, [0u8; 12]).unwrap();
    let empty = Temp::new("empty.bin");
    std::fs::write(&empty.0, []).unwrap();
    let p = file.path();
    let buf = "0x20000000:256:r";
    for (args, says) in [
        (vec!["--buffer", buf], "--regcmd <PROG.bin>"),
        (vec!["--regcmd", p], "--buffer <ADDR:LEN:r|w|rw>"),
        (
            vec!["--regcmd", p, "--regcmd", p, "--buffer", buf],
            "cannot be used multiple times",
        ),
        (
            vec![
                "--regcmd",
                p,
                "--regcmd-addr",
                "0",
                "--regcmd-addr",
                "0",
                "--buffer",
                buf,
            ],
            "cannot be used multiple times",
        ),
        (
            vec!["--regcmd", p, "--buffer", buf, "--buffer", buf],
            "twice",
        ),
        (
            vec!["--regcmd", p, "--buffer", "0x20000000:256"],
            "ADDR:LEN",
        ),
        (
            vec!["--regcmd", p, "--buffer", "0x20000000:256:x"],
            "r, w or rw",
        ),
        (
            vec!["--regcmd", p, "--buffer", "0x20000000:256:rwx"],
            "r, w or rw",
        ),
        (
            vec!["--regcmd", p, "--buffer", "0x2000000g:256:r"],
            "not a number",
        ),
        (vec!["--regcmd", p, "--buffer", "0x20000000:0:r"], "empty"),
        (
            vec!["--regcmd", p, "--buffer", "0xffffff00:0x101:r"],
            "address space",
        ),
        (
            vec!["--regcmd", p, "--buffer", "0x20000000:0xffffffffffffffff:r"],
            "address space",
        ),
        (
            vec![
                "--regcmd",
                p,
                "--regcmd-addr",
                "0xffffff00",
                "--buffer",
                buf,
            ],
            "address space",
        ),
        (
            vec!["--regcmd", p, "--regcmd-addr", "x", "--buffer", buf],
            "not a number",
        ),
        (
            vec!["--regcmd", p, "--task-words", "0", "--buffer", buf],
            "--task-words",
        ),
        (
            vec!["--regcmd", p, "--buffer", buf, "--json"],
            "unexpected argument",
        ),
        (vec!["--regcmd", p, "--buffer"], "a value is required"),
        (
            vec!["--regcmd", "/nonexistent/prog.bin", "--buffer", buf],
            "prog.bin",
        ),
        (vec!["--regcmd", ragged.path(), "--buffer", buf], "12 bytes"),
        (vec!["--regcmd", empty.path(), "--buffer", buf], "0 bytes"),
    ] {
        let mut all = vec!["verify"];
        all.extend_from_slice(&args);
        let o = run(&all);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}{err}", stdout(&o));
        // Errors of the options themselves are clap's (`error: ...`); those found after
        // parsing name the command (`rknpu: verify: ...`). Both end with the usage line.
        let first = err.lines().next().unwrap_or("");
        assert!(
            (first.starts_with("rknpu: verify: ") || first.starts_with("error: "))
                && err.contains(says)
                && err.contains("Usage: rknpu verify"),
            "{args:?}: {err}"
        );
    }
}
