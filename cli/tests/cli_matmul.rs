//! `rknpu matmul` and `rknpu bench pack` as child processes.

mod common;
use common::{run, run_ok, stdout_ok, stdout_text};

#[test]
fn matmul_checks_each_precision_on_the_emulated_kernels() {
    for args in [
        &[
            "--m", "5", "--k", "100", "--n", "64", "--dtype", "int8", "--device", "emu",
        ][..],
        &[
            "--m",
            "7",
            "--k",
            "700",
            "--n",
            "130",
            "--dtype",
            "int4",
            "--cores",
            "2",
            "--device",
            "emu:vendor-0.9.6",
        ],
        &[
            "--m",
            "3",
            "--k",
            "90",
            "--n",
            "100",
            "--dtype",
            "fp16",
            "--cores",
            "3",
            "--device",
            "emu:rocket",
            "--seed",
            "9",
        ],
    ] {
        let text = stdout_ok("matmul", args);
        assert!(text.lines().any(|l| l.starts_with("plan: ")), "{text}");
        assert!(text.lines().any(|l| l.starts_with("time: plan ")), "{text}");
        assert!(
            text.lines().any(|l| l.starts_with("largest error: ")),
            "{text}"
        );
        check_dma_line(args, &text);
        assert_eq!(text.lines().last(), Some("OK"), "{text}");
    }
}

/// The value after `--name` in `args`.
fn arg<'a>(args: &[&'a str], name: &str) -> Option<&'a str> {
    args.iter().position(|&a| a == name).map(|i| args[i + 1])
}

/// A and B bytes per element times 2 (int4: 1), and C bytes per element, for the
/// arguments' `--dtype` and default result type (int32, or fp32 for fp16).
fn element_sizes(args: &[&str]) -> (u64, u64) {
    match arg(args, "--dtype").unwrap() {
        "int8" => (2, 4),
        "int4" => (1, 4),
        _ => (4, 4),
    }
}

/// `dma: R bytes read, W bytes written, minimum X (ratio r)`: R covers B once, W covers
/// C once, X is A + B + C once in their types, and r is (R + W) / X to two decimals.
fn check_dma_line(args: &[&str], text: &str) {
    let line = text
        .lines()
        .find(|l| l.starts_with("dma: "))
        .unwrap_or_else(|| panic!("no dma line: {text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        (words[2], words[3], words[5], words[6], words[7], words[9]),
        ("bytes", "read,", "bytes", "written,", "minimum", "(ratio"),
        "{line}"
    );
    let num = |w: &str| -> u64 { w.parse().unwrap_or_else(|_| panic!("{line}")) };
    let (r, w, x) = (num(words[1]), num(words[4]), num(words[8]));
    let ratio: f64 = words[10].trim_end_matches(')').parse().unwrap();
    let dim = |n: &str| -> u64 { arg(args, n).unwrap().parse().unwrap() };
    let (m, k, n) = (dim("--m"), dim("--k"), dim("--n"));
    let (half_bytes, c_bytes) = element_sizes(args);
    let a = (m * k * half_bytes).div_ceil(2);
    let b = (k * n * half_bytes).div_ceil(2);
    let c = m * n * c_bytes;
    assert_eq!(x, a + b + c, "{line}");
    assert!(r >= b, "{line}: B is {b} bytes");
    assert!(w >= c, "{line}: C is {c} bytes");
    assert_eq!(
        format!("{ratio:.2}"),
        format!("{:.2}", (r + w) as f64 / x as f64),
        "{line}"
    );
}

#[test]
fn matmul_plan_only_prints_the_plan_and_the_minimum_bytes() {
    let args = [
        "matmul",
        "--m",
        "5",
        "--k",
        "100",
        "--n",
        "64",
        "--dtype",
        "int4",
        "--cores",
        "2",
        "--plan-only",
    ];
    let o = run(&args);
    let text = stdout_text(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("plan: 5x100x64 Int4"), "{text}");
    // A 5·100 int4 = 250 bytes, B 100·64 int4 = 3200, C 5·64 int32 = 1280.
    assert_eq!(lines[1], "minimum: 4730 bytes (A 250, B 3200, C 1280)");
    // The modelled cost: its minimum is the same bytes (in MB), on the board profile.
    assert!(lines[2].starts_with("cost: "), "{text}");
    assert!(lines[2].contains("minimum 0.005 MB"), "{text}");
    assert!(lines[2].contains(" on rk3588; host "), "{text}");
    // `model` is the predicted total: the NPU part plus the host part it lists.
    let ms_after = |key: &str| -> f64 {
        let rest = &lines[2][lines[2].find(key).expect(key) + key.len()..];
        rest.split(' ').next().unwrap().parse().expect(key)
    };
    let (total, npu, host) = (ms_after("model "), ms_after("(npu "), ms_after("; host "));
    assert!(npu > 0.0 && host >= 0.0, "{text}");
    // Verification is printed as a cost of binding the program, outside the total.
    assert!(ms_after("; verify ") > 0.0, "{text}");
    assert!(lines[2].contains(" once) on "), "{text}");
    assert!((total - (npu + host)).abs() <= 0.011, "{text}");
    assert!(lines[2].ends_with("on cortex-a76 (estimate))"), "{text}");
    assert!(!text.contains("device:"), "{text}");
    // Shapes and options it refuses as a run does: usage errors exit 2, plan errors 1.
    for (extra, code) in [
        (
            &["--m", "0", "--k", "64", "--n", "32", "--dtype", "int8"][..],
            2,
        ),
        (&["--m", "2", "--k", "64", "--n", "32"], 2),
        (
            &[
                "--m", "2", "--k", "64", "--n", "32", "--dtype", "int8", "--device", "emu",
            ],
            2,
        ),
        (
            &[
                "--m", "64", "--k", "32", "--n", "13000000", "--dtype", "int8", "--cores", "1",
            ],
            1,
        ),
    ] {
        let mut args = vec!["matmul", "--plan-only"];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(code), "{args:?}");
        assert!(stdout_text(&o).is_empty(), "{args:?}");
    }
}

#[test]
fn matmul_without_an_npu_says_so_and_runs_emulated() {
    let present = rknpu_driver::device::probe_candidates()
        .into_iter()
        .any(|p| std::path::Path::new(&p).exists());
    if present {
        eprintln!("note: an NPU node exists here; the no-device case cannot be shown");
        return;
    }
    let o = run(&[
        "matmul", "--m", "2", "--k", "64", "--n", "32", "--dtype", "int8",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout_text(&o);
    assert!(
        text.starts_with("no NPU found: running on the emulated kernel"),
        "{text}"
    );
    assert!(text.ends_with("OK\n"));
}

#[test]
fn matmul_usage_and_plan_errors() {
    for args in [
        &["matmul", "--m", "2", "--k", "64", "--n", "32"][..],
        &[
            "matmul", "--m", "2", "--k", "64", "--n", "32", "--dtype", "int2",
        ],
        &[
            "matmul", "--m", "2", "--k", "64", "--n", "32", "--dtype", "int8", "--cores", "4",
        ],
        &[
            "matmul", "--m", "0", "--k", "64", "--n", "32", "--dtype", "int8",
        ],
        &[
            "matmul", "--m", "2", "--k", "64", "--n", "32", "--dtype", "int8", "--speed",
        ],
    ] {
        assert_eq!(run(args).status.code(), Some(2), "{args:?}");
    }
    // `--cores` is a maximum: N = 32 has one column tile and two rows one M tile, so
    // the product runs on one core rather than failing.
    let o = run(&[
        "matmul", "--m", "2", "--k", "64", "--n", "32", "--dtype", "int8", "--cores", "3",
        "--device", "emu",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("on 1 core(s) [1]"), "{out}");
}

/// Without `--cores` a run may use every core of the device (the emulated RK3588 has
/// three) and `--plan-only` the RK3588's three; `--cores 1` keeps it to one.
#[test]
fn matmul_defaults_to_every_core() {
    let shape = [
        "matmul", "--m", "64", "--k", "4096", "--n", "4096", "--dtype", "int8",
    ];
    for (extra, cores) in [
        (&["--device", "emu"][..], "on 3 core(s) [1, 1, 1]"),
        (&["--plan-only"], "on 3 core(s) [1, 1, 1]"),
        (&["--device", "emu", "--cores", "1"], " on 1 core(s) "),
    ] {
        let args: Vec<&str> = shape.iter().chain(extra).copied().collect();
        let o = run(&args);
        let text = stdout_text(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {text}");
        let plan = text.lines().find(|l| l.starts_with("plan: ")).unwrap();
        assert!(plan.contains(cores), "{args:?}: {text}");
    }
}

/// `--out` on the emulated kernel: every result type a precision offers is checked against
/// the CPU (integers exactly, int16 saturated; fp16 within the fp32 summation bound plus
/// the fp16 rounding of the sum, docs/cli.md).
#[test]
fn matmul_result_types_on_the_emulated_kernel() {
    for (dtype, out, cores, k) in [
        ("int8", "int32", "1", "100"),
        ("int4", "int32", "2", "700"),
        ("int4", "int16", "1", "300"),
        ("int4", "int16", "2", "1000"),
        ("fp16", "fp32", "1", "5000"),
        ("fp16", "fp16", "1", "300"),
        ("fp16", "fp16", "3", "4096"),
    ] {
        let args = [
            "matmul", "--m", "9", "--k", k, "--n", "100", "--dtype", dtype, "--out", out,
            "--cores", cores, "--device", "emu",
        ];
        let text = stdout_text(&run_ok(&args));
        let plan = text.lines().find(|l| l.starts_with("plan: ")).unwrap();
        let want = match out {
            "int32" => "-> Int32",
            "int16" => "-> Int16",
            "fp32" => "-> Fp32",
            _ => "-> Fp16",
        };
        assert!(plan.contains(want), "{plan}");
        if out == "fp16" {
            assert!(
                text.contains("(fp32 summation and fp16 rounding bound respected: true)"),
                "{text}"
            );
        }
        assert_eq!(text.lines().last(), Some("OK"), "{text}");
    }
}

#[test]
fn matmul_refuses_result_types_its_precision_does_not_offer() {
    for (dtype, out) in [
        ("int8", "int16"),
        ("int8", "fp32"),
        ("int4", "fp16"),
        ("fp16", "int32"),
        ("fp16", "int16"),
        ("int8", "int8"),
        ("fp16", "bf16"),
    ] {
        let o = run(&[
            "matmul", "--m", "2", "--k", "64", "--n", "32", "--dtype", dtype, "--out", out,
            "--device", "emu",
        ]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(2), "{dtype} -> {out}: {err}");
        // A result type the precision does not offer is refused after parsing, saying
        // what it offers; a name that is no result type is refused by the parser.
        let first = err.lines().next().unwrap_or_default();
        if ["int32", "int16", "fp32", "fp16"].contains(&out) {
            assert!(
                first.starts_with(&format!("rknpu: --out {out}: {dtype} input gives ")),
                "{err}"
            );
        } else {
            assert!(
                first.starts_with(&format!("error: invalid value '{out}' for '--out")),
                "{err}"
            );
        }
    }
    // fp16 results of K beyond one wave: the host rounds the summed fp32 partials, and
    // the result is checked against the CPU like any other.
    let o = run(&[
        "matmul", "--m", "2", "--k", "5000", "--n", "32", "--dtype", "fp16", "--out", "fp16",
        "--device", "emu",
    ]);
    let text = stdout_text(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains("2 K wave(s)") && text.ends_with("OK\n"),
        "{text}"
    );
}

#[test]
fn emit_runs_nothing_and_refuses_run_options() {
    let emit = |file: &str, extra: &[&str]| {
        let program = [
            "matmul", "--m", "2", "--k", "64", "--n", "32", "--dtype", "int8", "--emit", file,
        ];
        run(&[&program[..], extra].concat())
    };
    for extra in [
        ["--device", "emu"],
        ["--seed", "3"],
        ["--trace", "t.rknputrace"],
    ] {
        let o = emit("p.bin", &extra);
        assert_eq!(o.status.code(), Some(2), "{extra:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("--emit builds the program"),
            "{extra:?}"
        );
    }
    // An unwritable file is bad input, after the plan.
    let o = emit("/nonexistent/dir/p.bin", &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/dir/p.bin"));
}

#[test]
fn bench_pack_prints_one_line_per_packer_with_its_memcpy_baseline() {
    let o = run(&["bench", "pack"]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout_text(&o);
    let names = [
        "int8 weight packing (K x N)",
        "int8 weight packing (N x K)",
        "int4 weight packing",
        "int8 activation packing",
        "int32 output unpacking",
    ];
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), names.len(), "{text}");
    for (line, name) in lines.iter().zip(names) {
        assert!(line.starts_with(name), "{line}");
        let rest = line.split_once(": ").unwrap().1;
        assert!(
            rest.contains(" GB/s (memcpy ")
                && rest.contains(" GB/s, ratio ")
                && rest.ends_with(')'),
            "{line}"
        );
    }
    assert_eq!(run(&["bench", "unpack"]).status.code(), Some(2));
}

/// The `regcmd: N bytes fetched by the PC (...)` line's N.
fn regcmd_bytes(text: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with("regcmd: "))
        .unwrap_or_else(|| panic!("no regcmd line: {text}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `--incremental` on the emulated vendor kernel: OK (the result checked against the CPU
/// as without it), with fewer regcmd bytes fetched for a plan of three tasks on a core;
/// refused on rocket; a usage error beside `--plan-only` or `--emit`.
#[test]
fn matmul_incremental_runs_on_the_vendor_kernel_and_is_refused_on_rocket() {
    let base = [
        "matmul", "--m", "601", "--k", "64", "--n", "256", "--dtype", "int8", "--cores", "1",
    ];
    let with = |extra: &[&str]| {
        let mut all = base.to_vec();
        all.extend_from_slice(extra);
        run(&all)
    };
    let full = with(&["--device", "emu"]);
    let inc = with(&["--device", "emu", "--incremental"]);
    let (full_text, inc_text) = (stdout_text(&full), stdout_text(&inc));
    assert_eq!(inc.status.code(), Some(0), "{inc_text}");
    assert_eq!(inc_text.lines().last(), Some("OK"), "{inc_text}");
    assert!(
        inc_text.contains("[3]"),
        "three tasks on the core: {inc_text}"
    );
    assert!(inc_text.contains("(incremental bodies)"), "{inc_text}");
    assert!(full_text.contains("(full bodies)"), "{full_text}");
    assert!(
        regcmd_bytes(&inc_text) < regcmd_bytes(&full_text),
        "{inc_text}{full_text}"
    );
    let rocket = with(&["--device", "emu:rocket", "--incremental"]);
    assert_eq!(rocket.status.code(), Some(1));
    let err = String::from_utf8_lossy(&rocket.stderr);
    assert!(
        err.contains("incremental") && err.contains("rocket"),
        "{err}"
    );
    assert_eq!(
        with(&["--plan-only", "--incremental"]).status.code(),
        Some(2)
    );
    assert_eq!(
        with(&["--emit", "/dev/null", "--incremental"])
            .status
            .code(),
        Some(2)
    );
}

/// Through rocket, a product the cost model puts on several cores runs as one open device
/// per core, each with a share of the columns (`spread:` and one `share:` line each, the
/// shares covering the columns in order), checked against the CPU as on one device; with
/// `--cores 1`, or an int4 product a spread does not take, it stays on one device.
#[test]
fn matmul_on_rocket_spreads_the_columns_over_one_device_per_core() {
    let base = ["matmul", "--m", "128", "--k", "1024", "--n", "3000"];
    let with = |extra: &[&str]| {
        let mut all = base.to_vec();
        all.extend_from_slice(&["--device", "emu:rocket"]);
        all.extend_from_slice(extra);
        let o = run(&all);
        let text = stdout_text(&o);
        assert_eq!(o.status.code(), Some(0), "{extra:?}: {text}");
        assert_eq!(text.lines().last(), Some("OK"), "{text}");
        text
    };
    for dtype in ["int8", "fp16"] {
        let text = with(&["--dtype", dtype]);
        assert!(text.lines().any(|l| l.starts_with("spread: ")), "{text}");
        let shares: Vec<(u32, u32)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("share: device "))
            .map(|l| {
                let cols = l.split("columns ").nth(1).unwrap();
                let range = cols.split(':').next().unwrap();
                let (a, b) = range.split_once("..").unwrap();
                (a.parse().unwrap(), b.parse().unwrap())
            })
            .collect();
        assert!(shares.len() >= 2, "{text}");
        assert_eq!(shares.first().unwrap().0, 0, "{text}");
        assert_eq!(shares.last().unwrap().1, 3000, "{text}");
        assert!(shares.windows(2).all(|w| w[0].1 == w[1].0), "{text}");
        if dtype == "int8" {
            assert!(text.contains("largest error: 0\n"), "{text}");
        }
        let one = with(&["--dtype", dtype, "--cores", "1"]);
        assert!(!one.contains("spread: "), "{one}");
    }
    let int4 = with(&["--dtype", "int4"]);
    assert!(!int4.contains("spread: "), "{int4}");
}
