//! `rknpu gguf`: the tensors of a GGUF file, as text or one JSON document; and
//! `rknpu matmul --gguf`: a tensor of one loaded as weights and multiplied.

use crate::Failure;
use crate::matmul::fail;
use rknpu_driver::compute::matmul::{Matmul, MatmulOptions, WeightBank};
use rknpu_driver::gguf::{
    GgmlType, Gguf, LoadReport, grouped_options, groups, groups_exactly, load_grouped_report,
    load_weights, write_listing,
};
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::seeded::Rng;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

/// The arguments of `rknpu gguf`.
#[derive(clap::Args)]
pub(crate) struct GgufArgs {
    /// The GGUF file.
    #[arg(value_name = "FILE")]
    file: String,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// Reads the file `path`; a bad file is exit 1 with the reader's error.
pub(crate) fn open(path: &str) -> Result<Gguf, Failure> {
    Gguf::open(path).map_err(|e| match e {
        // The reader's I/O error names the path already.
        rknpu_driver::gguf::GgufError::Io { .. } => Failure(1, e.to_string()),
        e => Failure(1, format!("{path}: {e}")),
    })
}

/// Lists the tensors of the file (`gguf::write_listing`): a header line, one line a
/// tensor, a count; or, with `--json`, one JSON document. A reader that went away ends
/// the listing quietly, as `outln!` does.
pub(crate) fn run(a: GgufArgs) -> Result<(), Failure> {
    let g = open(&a.file)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let written = if a.json {
        write_json(&g, &mut out)
    } else {
        write_listing(&g, &mut out)
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure(1, format!("writing the listing: {e}"))),
    }
}

/// Writes the file as one JSON document: version, metadata count, alignment and the
/// tensors (name, type, shape in GGUF order, offset in the data section, bytes), keys
/// in sorted order. The tensors are written one at a time, so memory does not grow with
/// their number (a document built whole took about 65 bytes a byte of a file of many
/// tiny tensors).
fn write_json(g: &Gguf, out: &mut dyn Write) -> std::io::Result<()> {
    write!(
        out,
        "{{\"alignment\":{},\"metadata_count\":{},\"tensor_count\":{},\"tensors\":[",
        g.alignment(),
        g.metadata_count(),
        g.tensor_count()
    )?;
    for (i, t) in g.tensors().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        let one = serde_json::json!({
            "name": t.name,
            "type": t.ggml_type.name(),
            "shape": t.dims,
            "offset": t.offset,
            "bytes": t.bytes(),
        });
        serde_json::to_writer(&mut *out, &one)?;
    }
    writeln!(out, "],\"version\":{}}}", g.version())
}

/// What `rknpu matmul --gguf` runs.
pub(crate) struct GgufMatmul<'a> {
    /// The GGUF file.
    pub(crate) file: &'a str,
    /// The weight tensor.
    pub(crate) tensor: &'a str,
    /// Rows of the activations.
    pub(crate) m: u32,
    /// The bank's type; `None` for the default of the tensor's type (a grouped int8 bank
    /// of the file's own groups of 32 where the type allows it within its size bound).
    pub(crate) dtype: Option<Dtype>,
    /// The most cores (default: every core of the device).
    pub(crate) cores: Option<u32>,
    /// A grouped bank's activation passes (default: `gguf::grouped_options`').
    pub(crate) passes: Option<u32>,
    /// The device `--device` names.
    pub(crate) device: &'a str,
    /// The seed of the activations.
    pub(crate) seed: u64,
}

/// The bank type a tensor loads into by default: fp16 for the float types, int8 for
/// the quantised ones.
fn default_dtype(ty: GgmlType) -> Dtype {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => Dtype::Fp16,
        _ => Dtype::Int8,
    }
}

/// Loads the tensor as a weight bank, prints the load report, multiplies seeded
/// activations with `mul_mat` and checks the result against an f64 product with the
/// dequantised tensor, within the bound of [`error_bound`].
pub(crate) fn matmul(p: &GgufMatmul<'_>) -> Result<(), Failure> {
    let g = open(p.file)?;
    let info = g.tensor(p.tensor).ok_or_else(|| {
        Failure(
            1,
            format!(
                "{}: no tensor named {:?} ({} tensors)",
                p.file,
                p.tensor,
                g.tensor_count()
            ),
        )
    })?;
    let path = match p.dtype {
        Some(d) => Path::Host(d),
        None if grouped_fits(info.ggml_type, info.dims, info.bytes()) => Path::Grouped,
        None => Path::Host(default_dtype(info.ggml_type)),
    };
    if let (Some(_), Path::Host(d)) = (p.passes, path) {
        return Err(Failure(
            2,
            format!(
                "--passes: {} loads into a {} bank, not a grouped one, whose activations are quantised in one pass",
                p.tensor,
                d.name()
            ),
        ));
    }
    let file_bytes = info.bytes();
    let dev = crate::matmul::open(p.device)?;
    outln!("device: {}", dev.info());
    let t = Instant::now();
    let in_file = |e| Failure(1, format!("{}: {e}", p.file));
    let (bank, (max_abs, offset), k, n) = match path {
        Path::Host(dtype) => {
            let (bank, report): (_, LoadReport) =
                load_weights(&dev, &g, p.tensor, dtype).map_err(in_file)?;
            outln!("load: {report}");
            (bank, (report.max_abs, 0.0), report.k, report.n)
        }
        Path::Grouped => {
            let (bank, report) = load_grouped_report(&dev, &g, p.tensor).map_err(in_file)?;
            let (k, n) = (bank.layout().k, bank.layout().n);
            let how = match (groups_exactly(info.ggml_type), bank.group_offsets()) {
                (true, None) => "the file's integers and block scales, exactly".to_string(),
                (true, Some(_)) => {
                    "the file's integers centred, a scale and an offset per 32, exactly".to_string()
                }
                (false, _) => format!(
                    "requantised to one scale per 32, largest weight error {:.3e}",
                    report.max_abs
                ),
            };
            outln!(
                "load: {}: {} [{n} x {k}] -> grouped int8 bank ({how})",
                p.tensor,
                info.ggml_type.name()
            );
            (bank, (report.max_abs, report.max_offset), k, n)
        }
    };
    let t_load = t.elapsed();
    let held = bank.held_bytes();
    // Plan (and refuse the shape) before anything of M rows is allocated.
    let mut mm = matmul_for(Arc::new(bank), (path, info.ggml_type), p)?;
    let w = g
        .dequantize(p.tensor)
        .map_err(|e| Failure(1, format!("{}: {e}", p.file)))?;
    let (m, k, n) = (p.m as usize, k as usize, n as usize);
    let mut rng = Rng::from_seed(p.seed);
    let mut x = host_buffer(m, k, "activations")?;
    x.extend((0..m * k).map(|_| rng.unit()));
    let mut y = host_buffer(m, n, "results")?;
    y.resize(m * n, 0.0);
    let t = Instant::now();
    // In calls of the matmul's rows (fewer than M where one submission holds fewer).
    let rows = mm.rows() as usize;
    for (x, y) in x.chunks(rows * k).zip(y.chunks_mut(rows * n)) {
        mm.mul_mat(x, y).map_err(|e| fail(&e))?;
    }
    let t_run = t.elapsed();
    outln!(
        "time: load {:.3} ms, mul_mat {:.3} ms",
        t_load.as_secs_f64() * 1e3,
        t_run.as_secs_f64() * 1e3
    );
    let c = check(&x, &w, &y, (m, k, n), path, (max_abs, offset));
    outln!(
        "largest error: {:.3e}, relative rms error {:.3e}, largest error / bound {:.3}",
        c.largest,
        c.rel_rms,
        c.worst_ratio
    );
    // A ratio that is not a number (a NaN anywhere) fails too.
    if c.worst_ratio.is_nan() || c.worst_ratio > 1.0 {
        return Err(Failure(
            1,
            "MISMATCH: the result is further from the f64 reference than the load report and the activations' rounding allow".into(),
        ));
    }
    if path == Path::Grouped {
        // The yardstick of a grouped bank: what llama.cpp's CPU backend computes.
        let e_cpu = cpu_error(&x, &w, (m, k, n));
        let times = c.rel_rms / e_cpu;
        outln!(
            "cpu: relative rms error {e_cpu:.3e} (llama.cpp's CPU backend: activations as Q8_0), this run {times:.3}x it"
        );
        // A ratio that is not a number fails too.
        if !(c.rel_rms <= 0.01 && (c.rel_rms <= 1.25 * e_cpu)) {
            return Err(Failure(
                1,
                format!(
                    "TARGET MISSED: a grouped bank's relative rms error {:.3e} is not within 1.25x the CPU backend's {e_cpu:.3e} and 1 %",
                    c.rel_rms
                ),
            ));
        }
    }
    outln!(
        "bank: {held} bytes, {:.2}x the tensor's {file_bytes} bytes in the file",
        held as f64 / file_bytes.max(1) as f64
    );
    outln!("OK");
    Ok(())
}

/// The matmul `rknpu matmul --gguf` runs against `bank`, its plan printed: `p.m` rows
/// (with a grouped bank's own options, `gguf::grouped_options`), or, where a grouped
/// bank's program for them is past one submission (its dequantisation tasks grow with
/// the rows), the most rows that fit (`Matmul::fitting`), the product then run in calls
/// of that many (said on a `calls:` line).
fn matmul_for(
    bank: Arc<WeightBank>,
    (path, ty): (Path, GgmlType),
    p: &GgufMatmul<'_>,
) -> Result<Matmul, Failure> {
    let options = match (path, p.passes) {
        (Path::Grouped, None) => grouped_options(ty),
        (Path::Grouped, Some(passes)) => grouped_options(ty).activation_passes(passes),
        (Path::Host(_), _) => MatmulOptions::default(),
    };
    if path == Path::Grouped {
        outln!(
            "activations: int8 per row and group of 32, {}",
            match options.activation_passes {
                1 => "one pass".to_string(),
                p => format!("{p} passes (residual activations)"),
            }
        );
    }
    let options = p.cores.map_or(options, |cores| options.cores(cores));
    let mm = match path {
        Path::Grouped => Matmul::fitting(&bank, p.m, options),
        Path::Host(_) => Matmul::with_options(&bank, p.m, options),
    }
    .map_err(|e| fail(&e))?;
    let rows = mm.rows();
    outln!("plan: {}", mm.plan());
    if rows < p.m {
        outln!(
            "calls: {} rows in calls of {rows} (one submission holds the dequantisation tasks of no more)",
            p.m
        );
    }
    Ok(mm)
}

/// Whether a tensor of `ty` and GGUF `dims` (`[k, n]`) loads into a grouped bank of its own
/// groups of 32 within the size bound of its type: 1.15x its `bytes` in the file for
/// Q8_0, 2x for the others (`WeightBank::held_bytes`: the bank's buffer, its output
/// channels padded to whole granules, an fp16 scale a group and, for Q4_1, Q4_K and
/// Q5_K, an fp16 offset a group).
fn grouped_fits(ty: GgmlType, dims: &[u64], bytes: u64) -> bool {
    let (&[k, n], true) = (dims, groups(ty)) else {
        return false;
    };
    let (Ok(k), Ok(n)) = (u32::try_from(k), u32::try_from(n)) else {
        return false;
    };
    let Ok(layout) =
        rknpu_driver::kernels::matmul::WeightLayout::with_k_tile(k, n, Dtype::Int8, 32)
    else {
        return false;
    };
    let per_group = if matches!(ty, GgmlType::Q4_1 | GgmlType::Q4_K | GgmlType::Q5_K) {
        4
    } else {
        2
    };
    let held = layout.bytes + per_group * u64::from(n) * u64::from(k).div_ceil(32);
    let bound = if ty == GgmlType::Q8_0 { 1.15 } else { 2.0 };
    held as f64 <= bound * bytes as f64
}

/// The relative RMS error, against the f64 product of `x` (m×k) and `w` (n rows of k),
/// of what llama.cpp's CPU backend computes for a quantised tensor: `x` quantised to
/// Q8_0 (per 32 values `d = max|x| / 127` rounded to fp16, `q = round(x / d)`) times
/// the file's weights, here in f64. 0 when both products are 0.
fn cpu_error(x: &[f32], w: &[f32], (m, k, n): (usize, usize, usize)) -> f64 {
    let xq: Vec<f64> = x
        .chunks(32)
        .flat_map(|b| {
            let d = b.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let dh = f64::from(half::f16::from_f32(d).to_f32());
            b.iter().map(move |&v| f64::from((v * id).round()) * dh)
        })
        .collect();
    let (mut e2, mut r2) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let wrow = &w[j * k..(j + 1) * k];
            let (mut want, mut got) = (0f64, 0f64);
            for ((&a, &q), &b) in x[i * k..(i + 1) * k].iter().zip(&xq[i * k..]).zip(wrow) {
                want += f64::from(a) * f64::from(b);
                got += q * f64::from(b);
            }
            e2 += (got - want).powi(2);
            r2 += want * want;
        }
    }
    if e2 == 0.0 { 0.0 } else { (e2 / r2).sqrt() }
}

/// How `rknpu matmul --gguf` holds the weights and scales the products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// A bank of this type (`gguf::load_weights`); integer banks are scaled on the host.
    Host(Dtype),
    /// A grouped int8 bank of the file's groups of 32 (`gguf::load_grouped`),
    /// dequantised on the NPU group by group, offsets added on the host.
    Grouped,
}

/// An empty vector with room for `rows` × `cols` values, or exit 1 when that does not fit
/// in memory (a planned shape that is still too large for this host).
fn host_buffer(rows: usize, cols: usize, what: &str) -> Result<Vec<f32>, Failure> {
    let too_large = || Failure(1, format!("{rows} x {cols} {what} do not fit in memory"));
    let len = rows.checked_mul(cols).ok_or_else(too_large)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| too_large())?;
    Ok(v)
}

/// The largest of `a` and `b`, or NaN when either is (`f64::max` skips a NaN).
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// How far `mul_mat`'s result is from the f64 reference.
struct Checked {
    /// The largest `|y − reference|` (NaN when one is).
    largest: f64,
    /// The RMS of `y − reference` over the RMS of the reference (0 when both are 0).
    rel_rms: f64,
    /// The largest `|y − reference| / bound` (0 where both are 0).
    worst_ratio: f64,
}

/// The error of one activation the NPU sees instead of `v`: int8 per row (the step of
/// `quantize_rows_i8`, `max|row| / 127`, halved) for integer banks; half an ulp for
/// float banks (fp16: 2^-11 relative, 2^-25 below the normal range; bf16: 2^-8
/// relative, 2^-134 below it); for a grouped bank at most the per-row half step (a
/// group's is no larger) and the NPU's fp16 reading of the group's scale, 2^-11 of `v`.
fn activation_error(row: &[f32], path: Path) -> impl Fn(f32) -> f64 {
    let half_step = row
        .iter()
        .fold(0f64, |a, &v| nan_max(a, f64::from(v).abs()))
        / 127.0
        * 0.5;
    move |v| match path {
        Path::Host(Dtype::Fp16) => f64::from(v).abs() * 2f64.powi(-11) + 2f64.powi(-25),
        Path::Host(Dtype::Bf16) => f64::from(v).abs() * 2f64.powi(-8) + 2f64.powi(-134),
        Path::Host(_) => half_step,
        Path::Grouped => half_step + f64::from(v).abs() * 2f64.powi(-11),
    }
}

/// The bound on `|y[i][j] − Σ x·w|` (docs/cli.md): with `D` the report's largest weight
/// error, `O` the largest group offset (a grouped bank of weights `s·q + o` multiplies
/// the quantised activations by `s·q`, at most `|w| + O`), `e(x)` the activation error
/// ([`activation_error`]) and `c = (k + 8) 2^-24` for the f32 arithmetic (fp32 sums, the
/// scales, the last rounding),
/// `Σ |x|·D + e(x)·(|w| + D + O) + c·(|x| + e(x))·(|w| + D + O)`.
fn error_bound(
    x: &[f32],
    w: &[f32],
    e: &dyn Fn(f32) -> f64,
    (max_abs, offset): (f64, f64),
    k: usize,
) -> f64 {
    let c = (k as f64 + 8.0) * 2f64.powi(-24);
    x.iter()
        .zip(w)
        .map(|(&a, &b)| {
            let (a, ea) = (f64::from(a).abs(), e(a));
            let wb = f64::from(b).abs() + max_abs + offset;
            a * max_abs + ea * wb + c * (a + ea) * wb
        })
        .sum()
}

/// Compares `y` (m×n) with the f64 product of `x` (m×k) and `w` (n rows of k).
fn check(
    x: &[f32],
    w: &[f32],
    y: &[f32],
    (m, k, n): (usize, usize, usize),
    path: Path,
    weights: (f64, f64),
) -> Checked {
    let (mut largest, mut err2, mut ref2, mut worst_ratio) = (0f64, 0f64, 0f64, 0f64);
    for i in 0..m {
        let row = &x[i * k..(i + 1) * k];
        let e = activation_error(row, path);
        for j in 0..n {
            let wrow = &w[j * k..(j + 1) * k];
            let want: f64 = row
                .iter()
                .zip(wrow)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let err = (f64::from(y[i * n + j]) - want).abs();
            let bound = error_bound(row, wrow, &e, weights, k);
            largest = nan_max(largest, err);
            err2 += err * err;
            ref2 += want * want;
            // A result that is not a number fails the check.
            let ratio = match err {
                e if e.is_nan() => f64::INFINITY,
                0.0 => 0.0,
                e => e / bound,
            };
            worst_ratio = nan_max(worst_ratio, ratio);
        }
    }
    let rel_rms = if err2 == 0.0 {
        0.0
    } else {
        (err2 / ref2).sqrt()
    };
    Checked {
        largest,
        rel_rms,
        worst_ratio,
    }
}

#[cfg(test)]
mod tests {
    use super::{Path, check, error_bound};
    use rknpu_driver::kernels::single::Dtype;

    #[test]
    fn the_bound_adds_the_weight_and_activation_errors() {
        // One product of k = 2: x = [1, -0.5], w = [0.25, 2], D = 0.01, fp16.
        let x = [1.0f32, -0.5];
        let w = [0.25f32, 2.0];
        let e = |v: f32| f64::from(v).abs() * 2f64.powi(-11) + 2f64.powi(-25);
        let b = error_bound(&x, &w, &e, (0.01, 0.0), 2);
        let c = 10.0 * 2f64.powi(-24);
        let mut want = 0.0;
        for (a, w) in [(1.0f64, 0.25f64), (0.5, 2.0)] {
            let ea = a * 2f64.powi(-11) + 2f64.powi(-25);
            want += a * 0.01 + ea * (w + 0.01) + c * (a + ea) * (w + 0.01);
        }
        assert!((b - want).abs() <= 1e-15, "{b} vs {want}");
    }

    #[test]
    fn a_result_past_the_bound_fails_the_check() {
        let x = [1.0f32, -0.5];
        let w = [0.25f32, 2.0];
        let e = |_: f32| 0.5 / 127.0;
        let exact = (0.25 - 1.0) as f32;
        let bound = error_bound(&x, &w, &e, (0.01, 0.0), 2);
        let ok = check(
            &x,
            &w,
            &[exact],
            (1, 2, 1),
            Path::Host(Dtype::Int8),
            (0.01, 0.0),
        );
        assert_eq!((ok.largest, ok.worst_ratio), (0.0, 0.0));
        let near = check(
            &x,
            &w,
            &[exact + (bound * 0.5) as f32],
            (1, 2, 1),
            Path::Host(Dtype::Int8),
            (0.01, 0.0),
        );
        assert!(
            near.worst_ratio > 0.4 && near.worst_ratio < 0.6,
            "{}",
            near.worst_ratio
        );
        let far = check(
            &x,
            &w,
            &[exact + (bound * 2.0) as f32],
            (1, 2, 1),
            Path::Host(Dtype::Int8),
            (0.01, 0.0),
        );
        assert!(far.worst_ratio > 1.0, "{}", far.worst_ratio);
        let nan = check(
            &x,
            &w,
            &[f32::NAN],
            (1, 2, 1),
            Path::Host(Dtype::Int8),
            (0.01, 0.0),
        );
        assert!(nan.worst_ratio > 1.0);
        // The largest error of a NaN result is NaN, not the 0 f64::max would keep.
        assert!(nan.largest.is_nan(), "{}", nan.largest);
        // A NaN activation makes the reference, the error and the largest error NaN,
        // and the check fail.
        let bad_x = check(
            &[f32::NAN, 1.0],
            &w,
            &[exact],
            (1, 2, 1),
            Path::Host(Dtype::Int8),
            (0.01, 0.0),
        );
        assert!(bad_x.largest.is_nan(), "{}", bad_x.largest);
        assert!(bad_x.worst_ratio > 1.0, "{}", bad_x.worst_ratio);
    }
}
