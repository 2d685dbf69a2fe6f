//! `rknpu model-cost` as a child process, on a small GGUF file written by the library's
//! writer; the expected figures are costed here through the library's planner.

use rknpu_driver::gguf::GgmlType;
use rknpu_driver::gguf::write::Writer;
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use rknpu_driver::kernels::matmul::{Plan, WeightLayout};
use rknpu_driver::kernels::single::{Dtype, OutType};
use std::process::Output;

mod common;
use common::{Temp, run, run_ok};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The matmul tensors of the test model: name, type, GGUF dims `[k, n]`.
const MATMULS: &[(&str, GgmlType, [u64; 2])] = &[
    ("blk.0.attn_q.weight", GgmlType::F16, [256, 512]),
    ("blk.0.ffn_up.weight", GgmlType::Q8_0, [256, 512]),
    ("blk.0.ffn_down.weight", GgmlType::Q8_0, [512, 256]),
    ("blk.1.attn_q.weight", GgmlType::F16, [256, 512]),
    ("blk.1.ffn_up.weight", GgmlType::Q8_0, [256, 512]),
    ("blk.1.ffn_down.weight", GgmlType::Q8_0, [512, 256]),
    ("output.weight", GgmlType::F16, [256, 320]),
];

/// Bytes of `elements` values of `ty` (F16, F32, I8 or Q8_0: 34 bytes a block of 32).
fn data_bytes(ty: GgmlType, elements: u64) -> u64 {
    match ty {
        GgmlType::F16 => 2 * elements,
        GgmlType::F32 => 4 * elements,
        GgmlType::I8 => elements,
        GgmlType::Q8_0 => elements / 32 * 34,
        other => panic!("no size for {other}"),
    }
}

/// Adds a tensor of zeros.
fn zeros(w: &mut Writer, name: &str, ty: GgmlType, dims: &[u64]) {
    let bytes = data_bytes(ty, dims.iter().product());
    w.tensor_raw(name, ty, dims, vec![0; bytes as usize])
        .unwrap();
}

/// The matmuls, the token embedding, 1-D norms, a 3-D `.weight`, a bias and an I8
/// matrix no bank takes, written to a temporary file.
fn model(name: &str) -> Temp {
    let mut w = Writer::new();
    zeros(&mut w, "token_embd.weight", GgmlType::F16, &[256, 96]);
    for (i, (name, ty, dims)) in MATMULS.iter().enumerate() {
        if i % 3 == 0 && *name != "output.weight" {
            let layer = &name[..6];
            zeros(
                &mut w,
                &format!("{layer}attn_norm.weight"),
                GgmlType::F32,
                &[256],
            );
            zeros(
                &mut w,
                &format!("{layer}attn_q.bias"),
                GgmlType::F32,
                &[512],
            );
        }
        zeros(&mut w, name, *ty, dims);
    }
    zeros(&mut w, "blk.0.odd.weight", GgmlType::I8, &[256, 64]);
    zeros(&mut w, "blk.0.conv.weight", GgmlType::F32, &[4, 4, 4]);
    zeros(&mut w, "output_norm.weight", GgmlType::F32, &[256]);
    let t = Temp::new(name);
    w.write(&t.0).unwrap();
    t
}

/// Tensors in the file [`model`] writes.
const TENSORS: usize = 1 + 7 + 2 * 2 + 3;

/// Modelled (npu, host) seconds of one call of `m` token rows against a `k`×`n` bank of
/// `dtype`, planned here as the command is specified to: int4 on `WeightLayout::new`
/// with 2·m rows and int32 results, int8 on the decode-and-prompts layout with int32
/// results, fp16 on it with fp32 results; 3 cores.
fn call(k: u32, n: u32, dtype: Dtype, m: u32) -> (f64, f64) {
    let (layout, rows, out) = match dtype {
        Dtype::Int4 => (WeightLayout::new(k, n, dtype), 2 * m, OutType::Int32),
        Dtype::Int8 => (
            WeightLayout::decode_and_prompts(k, n, dtype, 3),
            m,
            OutType::Int32,
        ),
        _ => (
            WeightLayout::decode_and_prompts(k, n, dtype, 3),
            m,
            OutType::Fp32,
        ),
    };
    let plan = Plan::for_layout(&layout.unwrap(), rows, out, 3).unwrap();
    let c = plan.cost(&HardwareProfile::rk3588()).unwrap();
    (c.seconds, c.host.prepare_s + c.host.finish_s)
}

/// Expected (npu, host) seconds of one token (every matmul at M = 1) and of a prompt of
/// `prompt` tokens (the LM head at M = 1, the rest at M = `prompt`).
fn expected(dtype: Dtype, prompt: u32) -> ((f64, f64), (f64, f64)) {
    let (mut decode, mut pre) = ((0.0, 0.0), (0.0, 0.0));
    for (name, _, [k, n]) in MATMULS {
        let (k, n) = (*k as u32, *n as u32);
        let one = call(k, n, dtype, 1);
        let p = if *name == "output.weight" {
            one
        } else {
            call(k, n, dtype, prompt)
        };
        decode = (decode.0 + one.0, decode.1 + one.1);
        pre = (pre.0 + p.0, pre.1 + p.1);
    }
    (decode, pre)
}

/// Runs `rknpu model-cost FILE ARGS`, asserting exit 0 and nothing on standard error.
fn model_cost(file: &str, args: &[&str]) -> String {
    let mut all = vec!["model-cost", file];
    all.extend_from_slice(args);
    let o = run_ok(&all);
    assert!(o.stderr.is_empty(), "{args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

/// The line starting with `prefix`.
fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{out}"))
}

/// The number after `key` in `l` (up to the next space, `;` or `)`).
fn field(l: &str, key: &str) -> f64 {
    let at = l.find(key).unwrap_or_else(|| panic!("no {key:?} in {l}")) + key.len();
    let v: String = l[at..]
        .chars()
        .take_while(|c| !matches!(c, ' ' | ';' | ')'))
        .collect();
    v.parse()
        .unwrap_or_else(|e| panic!("{key:?} in {l}: {v:?}: {e}"))
}

/// Asserts a printed figure of three decimals is `want` rounded.
fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 0.00051,
        "{what}: printed {got}, expected {want}"
    );
}

/// Asserts the decode and prompt lines against the figures costed here.
fn check_times(out: &str, dtype: Dtype, prompt: u32) {
    let ((dn, dh), (pn, ph)) = expected(dtype, prompt);
    let d = line(out, "decode: ");
    close(field(d, "decode: "), 1.0 / (dn + dh), "decode tok/s");
    close(field(d, "total "), (dn + dh) * 1e3, "decode ms");
    close(field(d, "npu "), dn * 1e3, "decode npu ms");
    close(field(d, "host "), dh * 1e3, "decode host ms");
    let p = line(out, &format!("prompt {prompt}: "));
    let rate = f64::from(prompt) / (pn + ph);
    close(
        field(p, &format!("prompt {prompt}: ")),
        rate,
        "prompt tok/s",
    );
    close(field(p, "total "), (pn + ph) * 1e3, "prompt ms");
    close(field(p, "npu "), pn * 1e3, "prompt npu ms");
    close(field(p, "host "), ph * 1e3, "prompt host ms");
}

#[test]
fn counts_bytes_and_decode_follow_the_library_cost_model() {
    let f = model("counts.gguf");
    let out = model_cost(f.path(), &[]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 7, "{out}");
    assert!(!out.contains("NaN") && !out.contains("inf"), "{out}");
    assert_eq!(
        lines[0],
        "skipped: blk.0.odd.weight: type I8 has no conversion to a bank"
    );
    assert_eq!(
        lines[1],
        format!(
            "model: {}: 7 matmul tensors, 1 skipped, {TENSORS} tensors in the file",
            f.path()
        )
    );
    assert_eq!(lines[2], "banks: fp16 7 (the types the ggml backend packs)");
    let bank: u64 = MATMULS
        .iter()
        .map(|(_, _, [k, n])| {
            WeightLayout::decode_and_prompts(*k as u32, *n as u32, Dtype::Fp16, 3)
                .unwrap()
                .bytes
        })
        .sum();
    let file: u64 = MATMULS
        .iter()
        .map(|(_, ty, [k, n])| data_bytes(*ty, k * n))
        .sum();
    // fp16 banks of these shapes hold every weight in two bytes, no padding.
    let fp16: u64 = MATMULS.iter().map(|(_, _, [k, n])| 2 * k * n).sum();
    assert_eq!(bank, fp16);
    assert_eq!(
        lines[3],
        format!("weights: {bank} bytes in banks, {file} bytes in the file")
    );
    let read = field(lines[4], "ms; ");
    assert!((read - bank as f64 / 1e6).abs() <= 0.051, "{read} MB read");
    check_times(&out, Dtype::Fp16, 128);
    assert!(lines[5].starts_with("prompt 128: "), "{out}");
    assert!(
        lines[6].starts_with("modelled: matmuls only ")
            && lines[6].contains("rk3588")
            && lines[6].contains("cortex-a76"),
        "{out}"
    );
}

#[test]
fn the_prompt_runs_n_rows_and_the_lm_head_one() {
    let f = model("prompt.gguf");
    for n in [1u32, 32, 200] {
        let out = model_cost(f.path(), &["--prompt", &n.to_string()]);
        check_times(&out, Dtype::Fp16, n);
    }
    // A prompt of one token is a decoded token.
    let out = model_cost(f.path(), &["--prompt", "1"]);
    let d = field(line(&out, "decode: "), "total ");
    assert_eq!(d, field(line(&out, "prompt 1: "), "total "));
    // Longer prompts amortise the per-call costs: more tokens a second.
    let rate = |n: u32| {
        let out = model_cost(f.path(), &["--prompt", &n.to_string()]);
        field(
            line(&out, &format!("prompt {n}: ")),
            &format!("prompt {n}: "),
        )
    };
    assert!(rate(32) > rate(1) && rate(128) > rate(32));
}

#[test]
fn dtype_forces_the_bank_type_and_its_bytes() {
    let f = model("dtype.gguf");
    let out = model_cost(f.path(), &["--dtype", "int8", "--prompt", "64"]);
    let kn: u64 = MATMULS.iter().map(|(_, _, [k, n])| k * n).sum();
    assert!(
        line(&out, "banks: ").starts_with("banks: int8 7 (--dtype)"),
        "{out}"
    );
    assert!(
        line(&out, "weights: ").starts_with(&format!("weights: {kn} bytes in banks,")),
        "{out}"
    );
    check_times(&out, Dtype::Int8, 64);

    let out = model_cost(f.path(), &["--dtype", "int4"]);
    assert!(
        line(&out, "banks: ").starts_with("banks: int4 7 (--dtype; "),
        "{out}"
    );
    assert!(
        line(&out, "weights: ").starts_with(&format!("weights: {} bytes in banks,", kn / 2)),
        "{out}"
    );
    check_times(&out, Dtype::Int4, 128);

    let out = model_cost(f.path(), &["--dtype", "fp16"]);
    check_times(&out, Dtype::Fp16, 128);
}

/// Asserts `args` exit `code` with nothing on standard output and a message containing
/// `says` on standard error.
fn fails(args: &[&str], code: i32, says: &str) {
    let o: Output = run(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(o.stdout.is_empty(), "{args:?}: {}", text(&o.stdout));
    assert!(err.contains(says), "{args:?}: {err}");
}

#[test]
fn bad_input_exits_1_and_usage_errors_exit_2() {
    let f = model("bad.gguf");
    let not_gguf = Temp::new("not.gguf");
    std::fs::write(&not_gguf.0, b"this is not a GGUF file").unwrap();
    fails(&["model-cost", not_gguf.path()], 1, "GGUF");
    let missing = Temp::new("missing.gguf");
    fails(&["model-cost", missing.path()], 1, "rknpu: ");
    // Rows beyond what one submission counts: the planner's error, with the tensor.
    fails(
        &["model-cost", f.path(), "--prompt", "4294967295"],
        1,
        "rknpu: blk.0.attn_q.weight: ",
    );
    fails(
        &[
            "model-cost",
            f.path(),
            "--prompt",
            "4294967295",
            "--dtype",
            "int4",
        ],
        1,
        "rknpu: blk.0.attn_q.weight: 4294967295 rows of int4 products",
    );
    // A file without matmul weights.
    let empty = Temp::new("norms.gguf");
    let mut w = Writer::new();
    zeros(&mut w, "token_embd.weight", GgmlType::F16, &[64, 32]);
    zeros(&mut w, "output_norm.weight", GgmlType::F32, &[64]);
    w.write(&empty.0).unwrap();
    fails(&["model-cost", empty.path()], 1, "no matmul weights");

    fails(&["model-cost", f.path(), "--prompt", "0"], 2, "--prompt");
    fails(&["model-cost", f.path(), "--prompt", "x"], 2, "--prompt");
    fails(&["model-cost", f.path(), "--dtype", "bf16"], 2, "--dtype");
    fails(&["model-cost"], 2, "FILE");
    fails(&["model-cost", f.path(), "--m", "1"], 2, "--m");
}

#[test]
fn help_names_the_options() {
    let o = run(&["model-cost", "--help"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0));
    for word in [
        "Usage: rknpu model-cost",
        "FILE",
        "--prompt",
        "--dtype",
        "int4",
    ] {
        assert!(out.contains(word), "help lacks {word}:\n{out}");
    }
}
