//! The command line's help, version and usage errors: every command and subcommand
//! answers `--help` and `rknpu help ...` with its options and exit 0, `--version` names
//! the package version, and an unknown option is a usage error (exit 2, nothing on
//! standard output).

use std::process::{Command, Output};

const RKNPU: &str = env!("CARGO_BIN_EXE_rknpu");

fn run(args: &[&str]) -> Output {
    Command::new(RKNPU)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {RKNPU}: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every command path with the options docs/cli.md gives it.
const COMMANDS: &[(&[&str], &[&str])] = &[
    (&["decode"], &["FILE", "--json", "--addr", "--strict"]),
    (
        &["sim", "run"],
        &[
            "--regcmd",
            "--regcmd-addr",
            "--task-words",
            "--core",
            "--load",
            "--dump",
            "--int-mask",
        ],
    ),
    (
        &["matmul"],
        &[
            "--m",
            "--k",
            "--n",
            "--dtype",
            "--out",
            "--cores",
            "--device",
            "--seed",
            "--trace",
            "--emit",
            "--plan-only",
            "--incremental",
            "--gguf",
            "--tensor",
        ],
    ),
    (
        &["verify"],
        &["--regcmd", "--regcmd-addr", "--task-words", "--buffer"],
    ),
    (&["bench", "pack"], &[]),
    (
        &["trace", "import"],
        &[
            "--regcmd",
            "--regcmd-addr",
            "--task-words",
            "--load",
            "--expect",
            "--capture",
            "--out",
        ],
    ),
    (&["trace", "dump"], &["FILE"]),
    (&["trace", "replay"], &["FILE", "--mode", "--ulps"]),
    (&["gguf"], &["FILE", "--json"]),
    (&["model-cost"], &["FILE", "--prompt", "--dtype"]),
    (&["info"], &[]),
    (&["doctor"], &["--device", "--bundle", "--timeout"]),
    (
        &["op", "conv"],
        &[
            "--h",
            "--w",
            "--c",
            "--oc",
            "--kh",
            "--kw",
            "--stride",
            "--pad",
            "--dilation",
            "--depthwise",
            "--dtype",
            "--device",
            "--seed",
        ],
    ),
    (
        &["op", "ew"],
        &[
            "--op",
            "--h",
            "--w",
            "--c",
            "--dtype",
            "--per-channel",
            "--device",
            "--seed",
        ],
    ),
    (
        &["op", "lut"],
        &["--fn", "--h", "--w", "--c", "--dtype", "--device", "--seed"],
    ),
    (
        &["op", "pool"],
        &[
            "--kind", "--h", "--w", "--c", "--k", "--stride", "--pad", "--dtype", "--device",
            "--seed",
        ],
    ),
];

/// Asserts a help text: exit 0, on standard output, naming the command's usage and each
/// option, nothing on standard error.
fn check_help(args: &[&str], path: &[&str], options: &[&str]) {
    let o = run(args);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
    assert!(o.stderr.is_empty(), "{args:?}: {}", text(&o.stderr));
    let usage = format!("Usage: rknpu {}", path.join(" "));
    assert!(out.contains(&usage), "{args:?} lacks {usage:?}:\n{out}");
    for option in options {
        assert!(
            out.contains(option),
            "{args:?} does not mention {option}:\n{out}"
        );
    }
}

#[test]
fn every_command_answers_help_with_its_options() {
    for (path, options) in COMMANDS {
        let mut args = path.to_vec();
        args.push("--help");
        check_help(&args, path, options);
        args.pop();
        args.push("-h");
        check_help(&args, path, options);
        let mut help = vec!["help"];
        help.extend_from_slice(path);
        check_help(&help, path, options);
    }
}

#[test]
fn the_top_level_help_lists_every_command_and_the_exit_codes() {
    for args in [&["--help"][..], &["-h"], &["help"]] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        let out = text(&o.stdout);
        for (path, _) in COMMANDS {
            assert!(
                out.lines().any(|l| l.trim_start().starts_with(path[0])),
                "{args:?} does not list {}:\n{out}",
                path[0]
            );
        }
        assert!(out.contains("Exit codes: 0"), "{args:?}:\n{out}");
    }
    // A command with subcommands lists them.
    for (parent, children) in [
        ("sim", &["run"][..]),
        ("bench", &["pack"]),
        ("trace", &["import", "dump", "replay"]),
    ] {
        let o = run(&[parent, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{parent}");
        let out = text(&o.stdout);
        for child in children {
            assert!(
                out.lines().any(|l| l.trim_start().starts_with(child)),
                "{parent} --help does not list {child}:\n{out}"
            );
        }
    }
}

#[test]
fn version_names_the_package_version() {
    for flag in ["--version", "-V"] {
        let o = run(&[flag]);
        assert_eq!(o.status.code(), Some(0), "{flag}");
        assert_eq!(
            text(&o.stdout),
            format!("rknpu {}\n", env!("CARGO_PKG_VERSION")),
            "{flag}"
        );
    }
}

#[test]
fn an_unknown_option_is_a_usage_error_everywhere() {
    for (path, _) in COMMANDS {
        let mut args = path.to_vec();
        args.push("--no-such-option");
        let o = run(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: {}", text(&o.stdout));
        assert!(err.contains("--no-such-option"), "{args:?}: {err}");
        assert!(
            err.contains(&format!("Usage: rknpu {}", path[0])),
            "{args:?}: {err}"
        );
    }
    for args in [
        &["--no-such-option"][..],
        &["sim", "walk"],
        &["help", "walk"],
    ] {
        assert_eq!(run(args).status.code(), Some(2), "{args:?}");
    }
}
