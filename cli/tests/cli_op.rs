//! `rknpu op` as a child process: each operation on seeded data against the CPU, on the
//! emulated kernels, ending in OK; shapes the operations refuse end in a message and a
//! non-zero exit, never a panic.

mod common;
use common::{run, stdout_ok};

/// Runs `rknpu op ARGS` (words split at white space) and asserts it ends in OK with a
/// program line and an error line.
fn passes(args: &str) -> String {
    let args: Vec<&str> = args.split_whitespace().collect();
    let text = stdout_ok("op", &args);
    assert!(text.lines().any(|l| l.starts_with("program: ")), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("largest error: ")),
        "{text}"
    );
    assert_eq!(text.lines().last(), Some("OK"), "{text}");
    text
}

/// Runs `rknpu op ARGS` and asserts it fails with `code` and a message naming `what`.
fn refused(args: &str, code: i32, what: &str) {
    let all: Vec<&str> = std::iter::once("op")
        .chain(args.split_whitespace())
        .collect();
    let o = run(&all);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(what), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn pool_max_avg_and_min_pass_on_the_emulated_kernels() {
    let max = passes("pool --kind max --h 8 --w 8 --c 16 --k 2 --dtype fp16 --device emu");
    assert!(max.contains("op-enable 0x60"), "{max}");
    assert!(max.contains("(exact: respected)"), "{max}");
    passes(
        "pool --kind avg --h 9 --w 7 --c 20 --k 3 --stride 2 --pad 1 --dtype fp16 \
             --device emu:vendor-0.9.6 --seed 5",
    );
    passes("pool --kind min --h 6 --w 6 --c 32 --k 3 --stride 1 --dtype int8 --device emu:async");
}

#[test]
fn pool_refusals_name_the_reason() {
    // The int8 average has no board-confirmed arithmetic.
    refused(
        "pool --kind avg --h 6 --w 6 --c 32 --k 3 --dtype int8 --device emu",
        2,
        "int8 average",
    );
    // rocket waits for DPU interrupts only: a pooling job is refused before submission.
    refused(
        "pool --kind max --h 4 --w 4 --c 8 --k 2 --dtype fp16 --device emu:rocket",
        1,
        "rocket",
    );
    // A window larger than the padded input.
    refused(
        "pool --kind max --h 2 --w 2 --c 8 --k 3 --dtype fp16",
        2,
        "op pool",
    );
}

#[test]
fn conv_int8_and_fp16_pass_on_the_emulated_kernels() {
    let int8 = passes(
        "conv --h 9 --w 9 --c 40 --oc 24 --kh 3 --kw 3 --stride 2 --pad 1 --dtype int8 \
             --device emu",
    );
    assert!(int8.contains("-> 5x5x24"), "{int8}");
    assert!(int8.contains("(exact: respected)"), "{int8}");
    passes(
        "conv --h 6 --w 5 --c 16 --oc 16 --kh 3 --kw 3 --pad 1 --dilation 2 --dtype fp16 \
             --device emu:rocket",
    );
    passes(
        "conv --h 8 --w 8 --c 32 --oc 32 --kh 3 --kw 3 --depthwise --pad 1 --dtype fp16 \
             --device emu:vendor-0.9.6 --seed 3",
    );
}

#[test]
fn conv_refusals_name_the_reason() {
    // A depthwise convolution has one kernel per channel.
    refused(
        "conv --h 4 --w 4 --c 16 --oc 8 --kh 3 --kw 3 --depthwise --dtype fp16",
        2,
        "op conv",
    );
    // A kernel larger than the padded input.
    refused(
        "conv --h 2 --w 2 --c 8 --oc 8 --kh 5 --kw 5 --dtype int8",
        2,
        "op conv",
    );
}

#[test]
fn ew_every_operation_and_type_passes() {
    for (op, dtype) in [
        ("add", "fp16"),
        ("sub", "int8"),
        ("mul", "int16"),
        ("max", "fp16"),
        ("min", "int8"),
    ] {
        let text = passes(&format!(
            "ew --op {op} --h 3 --w 5 --c 20 --dtype {dtype} --device emu"
        ));
        assert!(text.contains("op-enable 0x18"), "{text}");
        assert!(text.contains("(exact: respected)"), "{text}");
    }
    passes(
        "ew --op mul --h 2 --w 4 --c 16 --dtype fp16 --per-channel --device emu:rocket --seed 2",
    );
}

#[test]
fn lut_every_function_passes_and_int8_is_refused() {
    for f in ["relu", "relu6", "silu", "gelu", "sigmoid", "tanh", "exp"] {
        let text = passes(&format!(
            "lut --fn {f} --h 2 --w 5 --c 16 --dtype fp16 --device emu"
        ));
        assert!(text.contains("against the exact function"), "{text}");
    }
    refused(
        "lut --fn silu --h 2 --w 2 --c 8 --dtype int8",
        2,
        "integer pipeline",
    );
}
