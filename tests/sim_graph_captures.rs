//! The captured vendor programs that chain several operations (`../shared/captures/`,
//! beside a development checkout, or the directory `RKNPU_CAPTURES` names; absent from a
//! fresh clone, when every test here skips with a note) on the simulator.
//!
//! Each case's buffers are mapped at the addresses its meta.json gives (inferred ones as
//! inferred), and its single-core chain (task 0 along the tails to the first zero next
//! address, as the task descriptors lay it out) runs. The chains start with a convolution
//! over the CNA's 1-channel planar input (docs/hardware/convolution.md#planar-input).
//!
//! What is checked, per case (one summary line each with `--nocapture`):
//!
//! * every case runs to its end or stops on an error that names a register, field and
//!   value (or a DMA outside the recorded memory) — never anything the model does not
//!   name;
//! * every other chain of the task table (the further single-core chains, one chain per
//!   core of each multi-core variant) does the same, each on its own;
//! * how many tasks of the chain ran is at least what the model covers today (tasks
//!   refused further on are listed in docs/ops.md, "Simulator fidelity against board
//!   captures");
//! * where a chain runs to its end and the capture holds the output of an inference of
//!   the same input, the bytes the simulator writes are compared with the captured
//!   output GEM; where it stops earlier, the tasks before the refusal are checked against
//!   a CPU computation from the captured input (the planar convolution's output cube).

mod common;
use common::{captures_or_skip, meta_hex, meta_numbers};
use rknpu_driver::sim::{Kick, SimError, Simulator};
use std::path::{Path, PathBuf};

/// The multi-operation captures: case directory and what the simulator must reach at
/// least (tasks of the single-core chain run before it stops, or all of them).
const CASES: &[(&str, u32)] = &[
    // Task 1 writes at the end of the internal GEM, whose IOVA and size are inferred.
    ("allbilly-rk3588/rknn-add-gemdump", 1),
    // Several kernels or taps over the planar input: their weight order is not
    // published and the captured input and output are zero (no order is told apart).
    ("allbilly-rk3588/rknn-conv-fp16-inline-case1", 0),
    ("allbilly-rk3588/rknn-conv-fp16-inline-case4", 0),
    // Task 2: the int16 transpose flying task (no public source explains it).
    ("phhusson-rknpu-reverse-engineering/dump-dumb", 2),
    // Regcmd buffer only; its first convolution has 12 kernels.
    ("phhusson-rknpu-reverse-engineering/dump-plus1", 0),
    ("phhusson-rknpu-reverse-engineering/dump-plus2", 2),
    ("phhusson-rknpu-reverse-engineering/dump-plus2-0x54", 2),
    ("phhusson-rknpu-reverse-engineering/dump-x2", 2),
];

/// The task index in an error's "core N task M" prefix.
fn failing_task(e: &SimError) -> Option<u32> {
    let s = e.to_string();
    let i = s.find(" task ")? + 6;
    s[i..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

struct Loaded {
    sim: Simulator,
    first: u32,
    amount: u32,
    /// (address, captured bytes) of every buffer with an address.
    buffers: Vec<(u32, Vec<u8>)>,
}

/// Maps a case's buffers (`zeroed` ones as zeros of their size) and its task files where
/// no buffer holds them.
fn load(dir: &Path, zeroed: &[u32]) -> Option<Loaded> {
    let meta = std::fs::read_to_string(dir.join("meta.json")).ok()?;
    let mut sim = Simulator::new();
    let mut buffers = Vec::new();
    let mut tasks = Vec::new();
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".regcmd.bin") {
            tasks.push(e.path());
        } else if let Some(addr) = name
            .strip_prefix("buf-")
            .and_then(|n| n.strip_suffix(".bin"))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
        {
            buffers.push((addr, std::fs::read(e.path()).ok()?));
        }
    }
    tasks.sort();
    buffers.sort();
    for (addr, bytes) in &buffers {
        if zeroed.contains(addr) {
            sim.memory_mut().map_zeroed(*addr, bytes.len()).ok()?;
        } else {
            sim.memory_mut().map(*addr, bytes.clone()).ok()?;
        }
    }
    let addrs = meta_hex(&meta, "regcmd_addr");
    for (file, addr) in tasks.iter().zip(&addrs) {
        let bytes = std::fs::read(file).ok()?;
        if sim.memory().read(*addr as u64, bytes.len()).is_none() {
            sim.memory_mut().map(*addr, bytes).ok()?;
        }
    }
    let first = *addrs.first()?;
    let amount = match meta_numbers(&meta, "regcfg_amount").first() {
        Some(&a) => a,
        None => (std::fs::read(tasks.first()?).ok()?.len() / 8 - 4) as u32,
    };
    Some(Loaded {
        sim,
        first,
        amount,
        buffers,
    })
}

/// Runs the single-core chain: `(tasks run, summary)` or the error with the tasks before it.
fn run_chain(l: &mut Loaded) -> Result<String, SimError> {
    let r = l.sim.kick(&Kick::new(l.first, l.amount))?;
    Ok(format!(
        "{} task(s) run, completed {}, {} lint(s){}",
        r.tasks_run,
        r.completed,
        r.lints.len(),
        r.stall
            .map(|s| format!(", stalls at {}: {}", s.at, s.why))
            .unwrap_or_default()
    ))
}

#[test]
fn multi_operation_captures_run_or_stop_on_a_named_refusal() {
    let Some(root) = captures_or_skip("nothing to run") else {
        return;
    };
    let mut not_named = Vec::new();
    for &(case, reached) in CASES {
        let dir = root.join(case);
        let Some(mut l) = load(&dir, &[]) else {
            common::absent_capture(case);
            continue;
        };
        match run_chain(&mut l) {
            Ok(s) => eprintln!("{case}: runs: {s}"),
            Err(e) => {
                eprintln!("{case}: stops: {e}");
                let at = failing_task(&e);
                assert!(
                    at.is_some_and(|t| t >= reached),
                    "{case}: stops before task {reached}: {e}"
                );
                match e {
                    SimError::Unsupported { .. }
                    | SimError::Inconsistent { .. }
                    | SimError::CbufOverflow { .. }
                    | SimError::Dma { .. } => {}
                    other => not_named.push(format!("{case}: {other}")),
                }
            }
        }
    }
    assert!(not_named.is_empty(), "{}", not_named.join("\n"));
}

/// The chains of a case's task table: `(first task, last task, regcmd_addr, amount)`.
/// A task whose tail has no next-task address (offset 0x0010) ends its chain; the
/// vendor's tables hold the single-core chain first, then one chain per core of each
/// multi-core variant.
fn chains(dir: &Path) -> Vec<(usize, usize, u32, u32)> {
    let meta = std::fs::read_to_string(dir.join("meta.json")).unwrap_or_default();
    let addrs = meta_hex(&meta, "regcmd_addr");
    let amounts = meta_numbers(&meta, "regcfg_amount");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.to_string_lossy().ends_with(".regcmd.bin"));
    files.sort();
    let mut out = Vec::new();
    let mut start = 0;
    for (i, f) in files.iter().enumerate() {
        let bytes = std::fs::read(f).unwrap();
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let chained = words
            .iter()
            .any(|&e| e & 0xFFFF == 0x0010 && e >> 48 != 0 && (e >> 16) & 0xFFFF_FFFF != 0);
        if !chained || i + 1 == files.len() {
            let Some(&addr) = addrs.get(start) else { break };
            let amount = amounts
                .get(start)
                .copied()
                .unwrap_or_else(|| (std::fs::read(&files[start]).unwrap().len() / 8 - 4) as u32);
            out.push((start, i, addr, amount));
            start = i + 1;
        }
    }
    out
}

/// Every chain of each task table (not only the single-core one), each on a fresh
/// simulator with the captured buffers, on core 0 (the captures do not record which
/// core ran which chain): each runs or stops on a named error; one line per chain.
#[test]
fn every_chain_of_the_task_tables_runs_or_stops_on_a_named_refusal() {
    let Some(root) = captures_or_skip("nothing to run") else {
        return;
    };
    let mut not_named = Vec::new();
    for &(case, _) in CASES {
        let dir = root.join(case);
        for (a, b, addr, amount) in chains(&dir) {
            let Some(mut l) = load(&dir, &[]) else {
                continue;
            };
            l.first = addr;
            l.amount = amount;
            match run_chain(&mut l) {
                Ok(s) => eprintln!("{case} chain of tasks {a}..={b}: runs: {s}"),
                Err(e) => {
                    eprintln!("{case} chain of tasks {a}..={b}: stops: {e}");
                    if !matches!(
                        e,
                        SimError::Unsupported { .. }
                            | SimError::Inconsistent { .. }
                            | SimError::CbufOverflow { .. }
                            | SimError::Dma { .. }
                    ) {
                        not_named.push(format!("{case} tasks {a}..={b}: {e}"));
                    }
                }
            }
        }
    }
    assert!(not_named.is_empty(), "{}", not_named.join("\n"));
}

type ToyGraph = (&'static str, usize, usize, Option<fn(f32) -> f32>);

/// The phhusson toy graphs: case, the input's width and height (its registers: the
/// convolution's `FC_DATA_SIZE0`), and the element-wise function the model's name gives
/// (`None` where the name does not say).
const TOY_GRAPHS: &[ToyGraph] = &[
    ("dump-dumb", 84, 84, None),
    ("dump-plus2", 85, 85, Some(|x| x + 2.0)),
    ("dump-plus2-0x54", 84, 84, Some(|x| x + 2.0)),
    ("dump-x2", 85, 85, Some(|x| x * 2.0)),
];

/// The buffer of a meta.json `role` that starts with `role`.
fn buffer_addr(meta: &str, role: &str) -> Option<u32> {
    let i = meta.find(&format!("\"role\": \"{role}"))?;
    let obj_start = meta[..i].rfind('{')?;
    let obj_end = i + meta[i..].find('}')?;
    meta_hex(&meta[obj_start..obj_end], "addr").first().copied()
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// The phhusson dumps hold the GEMs of a board that had run the model (its internal and
/// output GEMs are not zero), with IOVAs inferred from the programs. Their contents are
/// those of the chain's first two tasks: the planar identity convolution (1-channel fp16
/// input, lines padded to a multiple of 8, into an 8-channel cube of the internal GEM)
/// and the flying BS task after it (into the output GEM); the third task, an int16
/// transpose writing at the internal GEM's start, left nothing there, so the later tasks
/// did not run (or ran on other buffers) before the dump. With the internal and output
/// GEMs zeroed, the simulator runs those two tasks over the captured input and must
/// leave both GEMs byte for byte as the board did; where the model's name gives the
/// function (`x2`, `plus2`), the output's channel 0 must also be that function of the
/// captured input, computed here from the planar input bytes, and every other channel 0.
#[test]
fn toy_graphs_first_two_tasks_reproduce_the_captured_gems() {
    let Some(root) = captures_or_skip("nothing to compare") else {
        return;
    };
    for &(name, w, h, f) in TOY_GRAPHS {
        let dir = root.join("phhusson-rknpu-reverse-engineering").join(name);
        let Ok(meta) = std::fs::read_to_string(dir.join("meta.json")) else {
            common::absent_capture(name);
            continue;
        };
        let internal = buffer_addr(&meta, "internal feature memory").unwrap();
        let output = buffer_addr(&meta, "model output").unwrap();
        let input = buffer_addr(&meta, "model input").unwrap();
        let mut l = load(&dir, &[internal, output]).unwrap();
        let captured = |a: u32| l.buffers.iter().find(|b| b.0 == a).unwrap().1.clone();
        let (cap_internal, cap_output, cap_input) =
            (captured(internal), captured(output), captured(input));
        let kick = Kick {
            task_number: Some(2),
            ..Kick::new(l.first, l.amount)
        };
        let r = l.sim.kick(&kick).unwrap();
        assert!(r.completed && r.tasks_run == 2, "{name}: {r:?}");
        let ours = |a: u32, n: usize| l.sim.memory().read_vec(a, n).unwrap();
        let (our_internal, our_output) = (
            ours(internal, cap_internal.len()),
            ours(output, cap_output.len()),
        );
        let differing = |a: &[u8], b: &[u8]| a.iter().zip(b).filter(|(x, y)| x != y).count();
        assert_eq!(
            differing(&our_internal, &cap_internal),
            0,
            "{name}: internal GEM"
        );
        assert_eq!(differing(&our_output, &cap_output), 0, "{name}: output GEM");
        let mut checked = "both GEMs byte-exact".to_string();
        if let Some(f) = f {
            let pitch = w.next_multiple_of(8);
            for y in 0..h {
                for x in 0..w {
                    let want = half::f16::from_f32(f(f16_at(&cap_input, 2 * (y * pitch + x))));
                    let at = 16 * (y * w + x);
                    assert_eq!(f16_at(&our_output, at), want.to_f32(), "{name} ({x}, {y})");
                    for c in 1..8 {
                        assert_eq!(
                            f16_at(&our_output, at + 2 * c),
                            0.0,
                            "{name} ({x}, {y}) c{c}"
                        );
                    }
                }
            }
            checked += &format!(", output = f(input) over {w}x{h}");
        }
        let lints: Vec<String> = r.lints.iter().map(|l| format!("{:?}", l.kind)).collect();
        eprintln!(
            "phhusson-rknpu-reverse-engineering/{name}: tasks 0-1 (planar conv, flying BS): {checked}; lints {lints:?}"
        );
    }
}

/// The same two vendor tasks over a seeded input instead of the captured all-ones one:
/// every real pixel a different fp16 value, the padding columns of each planar line
/// (the real width up to `DATAIN_WIDTH`) a value that must not reach the output. The
/// output's channel 0 must be the function the model's name gives, computed here in f32
/// and rounded to fp16 (the BS stage's float arithmetic), the other channels zero.
#[test]
fn toy_graphs_first_two_tasks_over_a_seeded_input() {
    let Some(root) = captures_or_skip("nothing to run") else {
        return;
    };
    for &(name, w, h, f) in TOY_GRAPHS {
        let Some(f) = f else { continue };
        let dir = root.join("phhusson-rknpu-reverse-engineering").join(name);
        let Ok(meta) = std::fs::read_to_string(dir.join("meta.json")) else {
            common::absent_capture(name);
            continue;
        };
        let internal = buffer_addr(&meta, "internal feature memory").unwrap();
        let output = buffer_addr(&meta, "model output").unwrap();
        let input = buffer_addr(&meta, "model input").unwrap();
        let mut l = load(&dir, &[internal, output]).unwrap();
        let len = l.buffers.iter().find(|b| b.0 == input).unwrap().1.len();
        let pitch = w.next_multiple_of(8);
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut bytes = vec![0u8; len];
        let mut values = vec![0f32; w * h];
        for y in 0..h {
            for x in 0..pitch {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                // Values in [-8, 8) on a 1/64 grid; padding columns a huge 60000.
                let v = if x < w {
                    ((seed >> 40) % 1024) as f32 / 64.0 - 8.0
                } else {
                    60000.0
                };
                if x < w {
                    values[y * w + x] = v;
                }
                let b = half::f16::from_f32(v).to_bits().to_le_bytes();
                bytes[2 * (y * pitch + x)..2 * (y * pitch + x) + 2].copy_from_slice(&b);
            }
        }
        l.sim.memory_mut().unmap(input).unwrap();
        l.sim.memory_mut().map(input, bytes).unwrap();
        let kick = Kick {
            task_number: Some(2),
            ..Kick::new(l.first, l.amount)
        };
        let r = l.sim.kick(&kick).unwrap();
        assert!(r.completed && r.tasks_run == 2, "{name}: {r:?}");
        let out = l.sim.memory().read_vec(output, 16 * w * h).unwrap();
        let mut exact = 0;
        for (p, &v) in values.iter().enumerate() {
            let want = half::f16::from_f32(f(v)).to_f32();
            assert_eq!(f16_at(&out, 16 * p), want, "{name} pixel {p}: f({v})");
            for c in 1..8 {
                assert_eq!(f16_at(&out, 16 * p + 2 * c), 0.0, "{name} pixel {p} c{c}");
            }
            exact += 1;
        }
        eprintln!(
            "phhusson-rknpu-reverse-engineering/{name}: seeded input: {exact} pixels = f(input) exactly"
        );
    }
}

/// The 16-bit words of a buffer.
fn halves(b: &[u8]) -> impl Iterator<Item = u16> + '_ {
    b.chunks_exact(2).map(|h| u16::from_le_bytes([h[0], h[1]]))
}

/// Where the chains still stop, the captures hold nothing that could decide a model, as
/// the refusals say (docs/hardware/convolution.md#planar-input,
/// docs/hardware/dpu-ops.md#transpose):
///
/// * the inline cases stop at task 0 on CNA `WEIGHT_SIZE2` (several kernels or taps over
///   the planar input); their captured input, internal and output buffers are all zero,
///   which every weight order reproduces (the weights differ: see the next test), so no
///   board output tells the orders apart;
/// * the phhusson toy graphs stop at task 2 on DPU `FEATURE_MODE_CFG` TP_EN; the values of
///   the cube that task reads (the output GEM's non-zero halves: f(input) in channel 0)
///   occur nowhere in the internal GEM it writes to, so the capture holds no transposed
///   element at all.
#[test]
fn the_remaining_stops_have_no_evidence_in_the_captures() {
    use rknpu_driver::regs::{cna, dpu};
    let Some(root) = captures_or_skip("nothing to check") else {
        return;
    };
    let stop = |dir: &Path| -> (Option<u32>, &'static str) {
        let e = run_chain(&mut load(dir, &[]).unwrap()).unwrap_err();
        match e {
            SimError::Unsupported { field, .. } => (failing_task(&e), field),
            other => panic!("{}: {other}", dir.display()),
        }
    };
    for case in [
        "allbilly-rk3588/rknn-conv-fp16-inline-case1",
        "allbilly-rk3588/rknn-conv-fp16-inline-case4",
    ] {
        let dir = root.join(case);
        let Ok(meta) = std::fs::read_to_string(dir.join("meta.json")) else {
            common::absent_capture(case);
            continue;
        };
        let (task, field) = stop(&dir);
        let weight_fields = [
            cna::WeightSize2::WEIGHT_WIDTH.name(),
            cna::WeightSize2::WEIGHT_KERNELS.name(),
        ];
        assert!(
            task == Some(0) && weight_fields.contains(&field),
            "{case}: {field}"
        );
        let buffer = |role: &str| {
            let a = buffer_addr(&meta, role).unwrap();
            std::fs::read(dir.join(format!("buf-{a:08x}.bin"))).unwrap()
        };
        for role in [
            "user input buffer",
            "internal feature memory",
            "user output buffer",
        ] {
            assert!(buffer(role).iter().all(|&b| b == 0), "{case}: {role}");
        }
        eprintln!("{case}: stops at task 0 on {field}; input, internal and output all zero");
    }
    for &(name, ..) in TOY_GRAPHS {
        let dir = root.join("phhusson-rknpu-reverse-engineering").join(name);
        let Ok(meta) = std::fs::read_to_string(dir.join("meta.json")) else {
            common::absent_capture(name);
            continue;
        };
        let (task, field) = stop(&dir);
        assert_eq!(
            (task, field),
            (Some(2), dpu::FeatureModeCfg::TP_EN.name()),
            "{name}"
        );
        let gem = |role: &str| {
            let a = buffer_addr(&meta, role).unwrap();
            std::fs::read(dir.join(format!("buf-{a:08x}.bin"))).unwrap()
        };
        let (read, written) = (gem("model output"), gem("internal feature memory"));
        let read: std::collections::BTreeSet<u16> = halves(&read).filter(|&h| h != 0).collect();
        let written: std::collections::BTreeSet<u16> = halves(&written).collect();
        assert!(
            !read.is_empty() && read.is_disjoint(&written),
            "{name}: {read:x?} / {written:x?}"
        );
        eprintln!(
            "phhusson-rknpu-reverse-engineering/{name}: stops at task 2 on {field}; none of the values it reads ({read:x?}) is in the internal GEM"
        );
    }
}

/// numpy's legacy generator (`np.random.seed(s)`: MT19937, `init_genrand`) and its
/// `uniform(low, high)` (53-bit samples), with which the inline cases' source draws data.
struct NumpyRandom {
    mt: [u32; 624],
    i: usize,
}

impl NumpyRandom {
    fn new(seed: u32) -> Self {
        let mut mt = [0u32; 624];
        mt[0] = seed;
        for i in 1..624 {
            mt[i] = 1_812_433_253u32
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        NumpyRandom { mt, i: 624 }
    }

    fn next_u32(&mut self) -> u32 {
        if self.i == 624 {
            for k in 0..624 {
                let y = (self.mt[k] & 0x8000_0000) | (self.mt[(k + 1) % 624] & 0x7FFF_FFFF);
                let mag = if y & 1 == 1 { 0x9908_B0DF } else { 0 };
                self.mt[k] = self.mt[(k + 397) % 624] ^ (y >> 1) ^ mag;
            }
            self.i = 0;
        }
        let mut y = self.mt[self.i];
        self.i += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9D2C_5680;
        y ^= (y << 15) & 0xEFC6_0000;
        y ^ (y >> 18)
    }

    fn uniform(&mut self, low: f64, high: f64) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        low + (high - low) * ((a * 67_108_864.0 + b) / 9_007_199_254_740_992.0)
    }
}

/// The inline cases' weights are identified, though no output was captured: numpy's seed 0
/// draws the input (1×1×H×W, task 0's `FC_DATA_SIZE0`), then the weights (N×1×KH×KW, its
/// `WEIGHT_SIZE2`), uniform in [−2, 2), fp16. The weight buffer (at `DCOMP_ADDR0`, its
/// start) holds them one per 16-byte slot (7 padded halves zero) in the vendor's order:
/// 16-kernel groups, in each the taps row by row, in each tap the group's kernels; kernel-
/// major order does not match. The vendor's packing, not a board output
/// (docs/hardware/convolution.md#planar-input).
#[test]
fn inline_cases_weights_are_the_seeded_kernels_packed_tap_major() {
    let Some(root) = captures_or_skip("nothing to check") else {
        return;
    };
    let cases = [
        (
            "allbilly-rk3588/rknn-conv-fp16-inline-case1",
            (7, 5),
            (6, 3, 1),
        ),
        (
            "allbilly-rk3588/rknn-conv-fp16-inline-case4",
            (10, 10),
            (32, 5, 5),
        ),
    ];
    for (case, (w, h), (n, kh, kw)) in cases {
        let dir = root.join(case);
        let Ok(meta) = std::fs::read_to_string(dir.join("meta.json")) else {
            common::absent_capture(case);
            continue;
        };
        let a = buffer_addr(&meta, "weights + regcmd buffer").unwrap();
        let buf = std::fs::read(dir.join(format!("buf-{a:08x}.bin"))).unwrap();
        let slots: Vec<u16> = halves(&buf).collect();
        let mut rng = NumpyRandom::new(0);
        for _ in 0..w * h {
            rng.uniform(-2.0, 2.0);
        }
        let taps = kh * kw;
        let wt: Vec<u16> = (0..n * taps)
            .map(|_| half::f16::from_f64(rng.uniform(-2.0, 2.0)).to_bits())
            .collect();
        let (mut tap_major, mut kernel_major) = (0, 0);
        for k in 0..n {
            for t in 0..taps {
                let (g, size) = (k / 16, 16.min(n - k / 16 * 16));
                let slot = g * 16 * taps + t * size + k % 16;
                let v = wt[k * taps + t];
                tap_major += usize::from(slots[8 * slot] == v);
                kernel_major += usize::from(slots[8 * (k * taps + t)] == v);
                assert!(slots[8 * slot + 1..8 * slot + 8].iter().all(|&x| x == 0));
            }
        }
        assert_eq!(tap_major, n * taps, "{case}");
        assert!(kernel_major < n * taps / 2, "{case}: {kernel_major}");
        eprintln!(
            "{case}: all {} weights are numpy seed 0's, packed [16-kernel group][tap][kernel] (kernel-major matches {kernel_major})",
            n * taps
        );
    }
}
