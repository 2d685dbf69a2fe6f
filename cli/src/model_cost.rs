//! `rknpu model-cost`: the modelled matmul throughput of a GGUF model on the RK3588's
//! NPU, from the library's planner and cost model alone. Only the file's header is read
//! (the tensors' names, types and shapes); no device is opened and no tensor data is read.

use crate::Failure;
use crate::element::{ElementArg, only};
use crate::matmul::MATMUL_TYPES;
use rknpu_driver::gguf::{Gguf, TensorInfo, escape_name, raw_bank_dtype};
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use rknpu_driver::kernels::matmul::{Plan, WeightLayout};
use rknpu_driver::kernels::single::{Dtype, OutType};
use std::collections::HashMap;

/// The LM head: the one matmul a prompt runs for its last token only.
const LM_HEAD: &str = "output.weight";
/// The token embedding: a lookup, not a matmul.
const TOKEN_EMBEDDING: &str = "token_embd.weight";

/// The arguments of `rknpu model-cost`.
#[derive(clap::Args)]
pub(crate) struct ModelCostArgs {
    /// The GGUF file (only its header is read).
    #[arg(value_name = "FILE")]
    file: String,
    /// Tokens of the modelled prompt: every matmul runs N rows, the LM head
    /// (output.weight) one.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    prompt: u32,
    /// The bank type of every matmul tensor (int4 costed on the conservative layouts of
    /// `WeightLayout::new`). Default: the type the ggml backend packs (bf16 for BF16
    /// tensors, fp16 for every other type it converts).
    #[arg(long, value_parser = only(MATMUL_TYPES), value_name = "TYPE")]
    dtype: Option<ElementArg>,
}

/// One matmul weight of the model: `n` output channels of `k` inputs in a bank of
/// `dtype` laid out as `layout`.
struct Weight {
    /// The tensor's name.
    name: String,
    /// The bank's type.
    dtype: Dtype,
    /// The bank's layout.
    layout: WeightLayout,
    /// The bytes of the tensor in the file.
    file_bytes: u64,
    /// Whether it is the LM head.
    head: bool,
}

/// Modelled time of a set of calls, in seconds: the NPU jobs and the host's work around
/// them (preparing A, finishing C).
#[derive(Clone, Copy, Default)]
struct Time {
    /// The NPU jobs.
    npu_s: f64,
    /// The host's work per call.
    host_s: f64,
}

impl Time {
    /// NPU and host.
    fn total_s(self) -> f64 {
        self.npu_s + self.host_s
    }
}

/// The model's matmul weights and what was skipped.
struct Model {
    /// The weights, in the file's order.
    weights: Vec<Weight>,
    /// `name: reason` of each 2-D weight whose type no bank takes.
    skipped: Vec<String>,
    /// Every tensor of the file.
    tensors_in_file: usize,
}

/// Costs plans on the RK3588 profile, once per distinct (layout, rows) pair.
struct Coster {
    /// The RK3588's profile.
    profile: HardwareProfile,
    /// Times already costed, by (k, n, bank type, rows).
    cache: HashMap<(u32, u32, Dtype, u32), Time>,
    /// The NPU profile's and the host profile's names, from the first cost.
    names: Option<(&'static str, &'static str)>,
}

impl Coster {
    fn new() -> Coster {
        Coster {
            profile: HardwareProfile::rk3588(),
            cache: HashMap::new(),
            names: None,
        }
    }

    /// The modelled time of one call of `m` token rows against `w`: int4 banks run 2·m
    /// int8 rows (W4A8); results are int32 for integer banks, fp32 for float ones.
    fn call(&mut self, w: &Weight, m: u32) -> Result<Time, Failure> {
        let refused = |e: &dyn std::fmt::Display| Failure(1, format!("{}: {e}", w.name));
        let (out, rows) = match w.dtype {
            Dtype::Int4 => (OutType::Int32, m.checked_mul(2)),
            Dtype::Int8 => (OutType::Int32, Some(m)),
            _ => (OutType::Fp32, Some(m)),
        };
        let rows = rows
            .ok_or_else(|| refused(&format!("{m} rows of int4 products (W4A8 runs 2·m rows)")))?;
        let key = (w.layout.k, w.layout.n, w.dtype, rows);
        if let Some(t) = self.cache.get(&key) {
            return Ok(*t);
        }
        let plan =
            Plan::for_layout(&w.layout, rows, out, self.profile.cores).map_err(|e| refused(&e))?;
        let cost = plan.cost(&self.profile).map_err(|e| refused(&e))?;
        self.names.get_or_insert((cost.profile, cost.host.profile));
        let t = Time {
            npu_s: cost.seconds,
            host_s: cost.host.total_s(),
        };
        self.cache.insert(key, t);
        Ok(t)
    }
}

/// A tensor's name as one line shows it (control characters escaped).
fn shown(name: &str) -> String {
    let mut s = String::new();
    escape_name(name, &mut s);
    s
}

/// The weight of tensor `t` if it is a matmul (two dims, a name ending in `.weight`,
/// not the token embedding): `Ok(None)` when it is not one, `Err` with the reason when
/// no bank takes its type, `Failure` when the layout refuses its shape.
fn weight(
    t: &TensorInfo<'_>,
    forced: Option<Dtype>,
    cores: u32,
) -> Result<Option<Result<Weight, String>>, Failure> {
    if t.dims.len() != 2 || !t.name.ends_with(".weight") || t.name == TOKEN_EMBEDDING {
        return Ok(None);
    }
    let name = shown(t.name);
    let converted = match raw_bank_dtype(t.ggml_type) {
        Ok(d) => d,
        Err(_) => {
            let why = format!("{name}: type {} has no conversion to a bank", t.ggml_type);
            return Ok(Some(Err(why)));
        }
    };
    let dtype = forced.unwrap_or(converted);
    let dim = |d: u64| {
        u32::try_from(d).map_err(|_| Failure(1, format!("{name}: dimension {d} beyond 32 bits")))
    };
    let (k, n) = (dim(t.dims[0])?, dim(t.dims[1])?);
    let layout = WeightLayout::decode_and_prompts(k, n, dtype, cores)
        .map_err(|e| Failure(1, format!("{name}: {e}")))?;
    Ok(Some(Ok(Weight {
        name,
        dtype,
        layout,
        file_bytes: t.bytes(),
        head: t.name == LM_HEAD,
    })))
}

/// The matmul weights of `g`, with the layouts their banks take.
fn model(g: &Gguf, forced: Option<Dtype>, cores: u32) -> Result<Model, Failure> {
    let mut weights = Vec::new();
    let mut skipped = Vec::new();
    for t in g.tensors() {
        match weight(&t, forced, cores)? {
            None => {}
            Some(Err(why)) => skipped.push(why),
            Some(Ok(w)) => weights.push(w),
        }
    }
    Ok(Model {
        weights,
        skipped,
        tensors_in_file: g.tensor_count(),
    })
}

/// Milliseconds with three decimals.
fn ms(s: f64) -> String {
    format!("{:.3}", s * 1e3)
}

/// The bank types and how many tensors each, `fp16 14, bf16 2`, in the order met.
fn bank_counts(weights: &[Weight]) -> String {
    let mut counts: Vec<(Dtype, usize)> = Vec::new();
    for w in weights {
        match counts.iter_mut().find(|(d, _)| *d == w.dtype) {
            Some((_, c)) => *c += 1,
            None => counts.push((w.dtype, 1)),
        }
    }
    let parts: Vec<String> = counts
        .iter()
        .map(|(d, c)| format!("{} {c}", d.name()))
        .collect();
    parts.join(", ")
}

/// Prints the modelled decode and prompt throughput of the file's matmuls.
pub(crate) fn run(a: ModelCostArgs) -> Result<(), Failure> {
    let g = crate::gguf::open(&a.file)?;
    let mut coster = Coster::new();
    let forced = a.dtype.map(ElementArg::dtype);
    let m = model(&g, forced, coster.profile.cores)?;
    if m.weights.is_empty() {
        return Err(Failure(
            1,
            format!(
                "{}: no matmul weights to model ({} skipped)",
                a.file,
                m.skipped.len()
            ),
        ));
    }
    let (mut decode, mut prompt) = (Time::default(), Time::default());
    for w in &m.weights {
        let one = coster.call(w, 1)?;
        decode.npu_s += one.npu_s;
        decode.host_s += one.host_s;
        let p = if w.head {
            one
        } else {
            coster.call(w, a.prompt)?
        };
        prompt.npu_s += p.npu_s;
        prompt.host_s += p.host_s;
    }
    let bank_bytes: u64 = m.weights.iter().map(|w| w.layout.bytes).sum();
    let file_bytes: u64 = m.weights.iter().map(|w| w.file_bytes).sum();
    for why in &m.skipped {
        outln!("skipped: {why}");
    }
    outln!(
        "model: {}: {} matmul tensors, {} skipped, {} tensors in the file",
        a.file,
        m.weights.len(),
        m.skipped.len(),
        m.tensors_in_file
    );
    let source = match a.dtype {
        Some(ElementArg::Int4) => {
            "--dtype; int4 layouts of WeightLayout::new, the conservative ones"
        }
        Some(_) => "--dtype",
        None => "the types the ggml backend packs",
    };
    outln!("banks: {} ({source})", bank_counts(&m.weights));
    outln!("weights: {bank_bytes} bytes in banks, {file_bytes} bytes in the file");
    outln!(
        "decode: {:.3} tok/s (per token: total {} ms = npu {} ms + host {} ms; {:.1} MB of weights read)",
        1.0 / decode.total_s(),
        ms(decode.total_s()),
        ms(decode.npu_s),
        ms(decode.host_s),
        bank_bytes as f64 / 1e6
    );
    outln!(
        "prompt {}: {:.3} tok/s (per prompt: total {} ms = npu {} ms + host {} ms)",
        a.prompt,
        f64::from(a.prompt) / prompt.total_s(),
        ms(prompt.total_s()),
        ms(prompt.npu_s),
        ms(prompt.host_s)
    );
    let (npu, host) = coster.names.unwrap_or(("rk3588", "cortex-a76"));
    outln!(
        "modelled: matmuls only (no attention scores, softmax, norms, element-wise ops or \
         graph work on the host), on the {npu} profile with the {host} host; estimates \
         (docs/matmul.md)"
    );
    Ok(())
}
