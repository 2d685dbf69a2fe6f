//! `rknpu`: the command-line tool of rknpu-driver (see docs/cli.md).

use rknpu_driver::regcmd;
use rknpu_driver::sim::{Kick, Simulator};
use std::process::ExitCode;

const USAGE: &str = "\
usage: rknpu <command> [options]

commands:
  decode FILE [--json] [--addr ADDR] [--strict]
        Decode a raw file of little-endian u64 regcmd entries. --addr gives the device
        address of the first word (resolves chain addresses to tasks). --strict exits 1
        when an entry is unknown. The last line is `summary: <N> entries, <U> unknown`.
  sim run --regcmd PROG.bin [--regcmd-addr ADDR] [--task-words N] [--core C]
          [--load ADDR=FILE]... [--dump ADDR:LEN=FILE]... [--int-mask MASK]
        Run a regcmd program on the simulator. PROG.bin (little-endian u64 entries) is
        placed at ADDR (default 0). --task-words is the first task's body length
        (regcfg_amount); by default the body runs up to the first task tail. --load
        places a file at a device address; --dump writes LEN bytes from a device address
        to a file after the run (a region that is not loaded is created zeroed).
        --int-mask is the completion mask (default 0x300). Prints the tasks run, the
        interrupt status and every lint; exit 0 when the program completed.
  matmul --m M --k K --n N --dtype int8|int4|fp16 [--cores 1|2|3] [--device auto|emu|PATH]
         [--seed S] [--trace FILE]
        Multiply seeded random matrices on the NPU (or, with no NPU, the emulated kernel),
        check against a CPU reference, print the plan, a time breakdown, the largest
        error and OK. --trace records the run to FILE (docs/trace-format.md); so does
        RKNPU_TRACE=FILE for any program using the library.
  bench pack
        Packing throughput against memcpy of the same bytes, measured in the same run:
        int8 weight packing from K x N and from N x K, int4 weight packing (4096x4096),
        int8 activation packing (128x4096), int32 output unpacking (128x4096).
  trace import --regcmd PROG.bin [--regcmd-addr ADDR] [--task-words N] [--load ADDR=FILE]...
               [--expect ADDR=FILE]... --out FILE
  trace import --capture DIR --out FILE
        Build a trace (docs/trace-format.md) from the inputs of `sim run` and the contents
        expected after the run, or from a capture folder (task-NN.regcmd.bin or
        regcmd.bin, buf-ADDR.bin, meta.json).
  trace dump FILE
        Print a trace as stable text, each task's list decoded.
  trace replay FILE [--mode check|model|hw] [--ulps N]
        check: decode and check every task and relocation; model (the default): run on
        the simulator and compare completions and outputs; hw: run on the device that
        RKNPU_DEVICE or probing finds, buffers relocated. --ulps sets how far fp16, bf16
        and fp32 outputs may differ (default 0 for traces from the emulated kernel, 2
        otherwise). Exit 0 on a match, 1 on a mismatch (with where), 2 on usage errors.
  info  Print the NPU this machine has (or the emulated one that RKNPU_DEVICE selects):
        interface, node, driver name and version, cores, IOMMU state.
  help  Show this text.

exit codes: 0 success, 1 bad input, 2 usage error";

/// Writes to standard output; a reader that went away (a closed pipe) ends the program
/// quietly instead of panicking.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write;
        if write!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// `out!` with a newline.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write;
        if writeln!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// A failure with its exit code: 1 for bad input, 2 for usage.
struct Failure(u8, String);

fn usage(msg: impl Into<String>) -> Failure {
    Failure(2, msg.into())
}

fn parse_u32(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn cmd_decode(args: &[String]) -> Result<(), Failure> {
    let mut file = None;
    let mut json = false;
    let mut strict = false;
    let mut addr = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--strict" => strict = true,
            "--addr" => {
                let v = it.next().ok_or_else(|| usage("--addr needs a value"))?;
                addr = Some(
                    parse_u32(v)
                        .ok_or_else(|| usage(format!("--addr: not a 32-bit address: {v}")))?,
                );
            }
            s if s.starts_with('-') => return Err(usage(format!("decode: unknown option {s}"))),
            s if file.is_none() => file = Some(s.to_string()),
            s => return Err(usage(format!("decode: unexpected argument {s}"))),
        }
    }
    let file = file.ok_or_else(|| usage("decode: missing FILE"))?;
    let bytes = std::fs::read(&file).map_err(|e| Failure(1, format!("{file}: {e}")))?;
    let decoded = regcmd::decode_bytes(&bytes).map_err(|e| Failure(1, format!("{file}: {e}")))?;
    if json {
        outln!("{}", decoded.to_json());
        outln!(
            "summary: {} entries, {} unknown",
            decoded.entries.len(),
            decoded.unknown()
        );
    } else {
        out!("{}", decoded.to_text(addr));
    }
    if strict && decoded.unknown() > 0 {
        return Err(Failure(
            1,
            format!("{file}: {} unknown entries", decoded.unknown()),
        ));
    }
    Ok(())
}

/// `ADDR=FILE`.
fn parse_load(s: &str) -> Option<(u32, String)> {
    let (a, f) = s.split_once('=')?;
    Some((parse_u32(a)?, f.to_string()))
}

/// `ADDR:LEN=FILE`.
fn parse_dump(s: &str) -> Option<(u32, u32, String)> {
    let (range, f) = s.split_once('=')?;
    let (a, l) = range.split_once(':')?;
    Some((parse_u32(a)?, parse_u32(l)?, f.to_string()))
}

/// The first task's body: entries before the first tail (the four entries that end with
/// an op-enable), or the whole program when there is no op-enable entry.
fn first_body(words: &[regcmd::RegCmd]) -> usize {
    words
        .iter()
        .position(|w| w.target() == rknpu_driver::regs::TARGET_OP_ENABLE)
        .map_or(words.len(), |i| {
            (i + 1).saturating_sub(regcmd::TAIL_ENTRIES)
        })
}

fn cmd_sim(args: &[String]) -> Result<(), Failure> {
    match args.first().map(String::as_str) {
        Some("run") => {}
        Some(other) => return Err(usage(format!("sim: unknown subcommand {other}"))),
        None => return Err(usage("sim: missing subcommand (run)")),
    }
    let mut prog = None;
    let mut addr = 0u32;
    let mut task_words = None;
    let mut core = 0usize;
    let mut loads = Vec::new();
    let mut dumps = Vec::new();
    let mut int_mask = rknpu_driver::submit::irq::DPU;
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| usage(format!("{name} needs a value")))
        };
        match a.as_str() {
            "--regcmd" => prog = Some(value("--regcmd")?),
            "--regcmd-addr" => {
                let v = value("--regcmd-addr")?;
                addr = parse_u32(&v)
                    .ok_or_else(|| usage(format!("--regcmd-addr: not a 32-bit address: {v}")))?;
            }
            "--task-words" => {
                let v = value("--task-words")?;
                task_words = Some(
                    parse_u32(&v)
                        .ok_or_else(|| usage(format!("--task-words: not a number: {v}")))?,
                );
            }
            "--core" => {
                let v = value("--core")?;
                core = match v.as_str() {
                    "0" => 0,
                    "1" => 1,
                    "2" => 2,
                    _ => return Err(usage(format!("--core: 0, 1 or 2, not {v}"))),
                };
            }
            "--load" => {
                let v = value("--load")?;
                loads.push(
                    parse_load(&v)
                        .ok_or_else(|| usage(format!("--load: expected ADDR=FILE, got {v}")))?,
                );
            }
            "--dump" => {
                let v = value("--dump")?;
                dumps
                    .push(parse_dump(&v).ok_or_else(|| {
                        usage(format!("--dump: expected ADDR:LEN=FILE, got {v}"))
                    })?);
            }
            "--int-mask" => {
                let v = value("--int-mask")?;
                int_mask =
                    parse_u32(&v).ok_or_else(|| usage(format!("--int-mask: not a number: {v}")))?;
            }
            s => return Err(usage(format!("sim run: unexpected argument {s}"))),
        }
    }
    let prog = prog.ok_or_else(|| usage("sim run: missing --regcmd PROG.bin"))?;
    let read = |path: &str| std::fs::read(path).map_err(|e| Failure(1, format!("{path}: {e}")));
    let bytes = read(&prog)?;
    let words =
        regcmd::words_from_le_bytes(&bytes).map_err(|e| Failure(1, format!("{prog}: {e}")))?;
    let body = match task_words {
        Some(n) => n,
        None => u32::try_from(first_body(&words))
            .map_err(|_| Failure(1, format!("{prog}: too large")))?,
    };
    let mut sim = Simulator::new();
    let mem_err = |e: rknpu_driver::sim::SimError| usage(e.to_string());
    sim.memory_mut().map(addr, bytes).map_err(mem_err)?;
    for (a, file) in &loads {
        let data = read(file)?;
        if data.is_empty() {
            return Err(usage(format!("--load {a:#x}={file}: the file is empty")));
        }
        sim.memory_mut().map(*a, data).map_err(mem_err)?;
    }
    for (a, len, _) in &dumps {
        let covered = sim.memory().read(*a as u64, *len as usize).is_some();
        if !covered {
            sim.memory_mut()
                .map_zeroed(*a, *len as usize)
                .map_err(mem_err)?;
        }
    }
    let kick = Kick {
        core,
        regcmd_addr: addr,
        regcfg_amount: body,
        task_number: None,
        int_mask,
    };
    let run = sim.kick(&kick).map_err(|e| Failure(1, e.to_string()))?;
    for (a, len, file) in &dumps {
        let data = sim
            .memory()
            .read_vec(*a, *len as usize)
            .ok_or_else(|| Failure(1, format!("--dump {a:#x}:{len}: not in one region")))?;
        std::fs::write(file, data).map_err(|e| Failure(1, format!("{file}: {e}")))?;
    }
    outln!("tasks: {}", run.tasks_run);
    outln!("macs: {}", run.macs);
    outln!("raw_status: {:#x}", run.raw_status);
    outln!(
        "int_status: {:#x} (int_mask {:#x})",
        run.int_status,
        int_mask
    );
    for l in &run.lints {
        outln!("warning: {l}");
    }
    if let Some(s) = &run.stall {
        return Err(Failure(1, format!("{}: stalls: {}", s.at, s.why)));
    }
    if !run.completed {
        return Err(Failure(
            1,
            format!(
                "not completed: int_status {:#x} does not match int_mask {int_mask:#x}",
                run.int_status
            ),
        ));
    }
    outln!("completed");
    Ok(())
}

/// xorshift64*: the seeded data of `rknpu matmul`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + ((self.next() >> 11) % (hi - lo + 1) as u64) as i32
    }
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn cmd_matmul(args: &[String]) -> Result<(), Failure> {
    use rknpu_driver::device::Device;
    use rknpu_driver::device::matmul::{Matmul, WeightBank};
    use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
    use rknpu_driver::kernels::single::Dtype;
    use std::time::Instant;

    let (mut m, mut k, mut n, mut dtype) = (None, None, None, None);
    let (mut cores, mut device, mut seed) = (1u32, "auto".to_string(), 1u64);
    let mut trace_file: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it
            .next()
            .ok_or_else(|| usage(format!("{a} needs a value")))?;
        let num = |what: &str| {
            parse_u32(v)
                .filter(|&x| x > 0)
                .ok_or_else(|| usage(format!("{what}: not a positive number: {v}")))
        };
        match a.as_str() {
            "--m" => m = Some(num("--m")?),
            "--k" => k = Some(num("--k")?),
            "--n" => n = Some(num("--n")?),
            "--dtype" => {
                dtype = Some(match v.as_str() {
                    "int8" => Dtype::Int8,
                    "int4" => Dtype::Int4,
                    "fp16" => Dtype::Fp16,
                    _ => return Err(usage(format!("--dtype: int8, int4 or fp16, not {v}"))),
                })
            }
            "--cores" => {
                cores = match v.as_str() {
                    "1" => 1,
                    "2" => 2,
                    "3" => 3,
                    _ => return Err(usage(format!("--cores: 1, 2 or 3, not {v}"))),
                }
            }
            "--device" => device = v.clone(),
            "--trace" => trace_file = Some(v.clone()),
            "--seed" => {
                seed = v
                    .parse()
                    .map_err(|_| usage(format!("--seed: not a number: {v}")))?
            }
            s => return Err(usage(format!("matmul: unexpected argument {s}"))),
        }
    }
    let (Some(m), Some(k), Some(n), Some(dtype)) = (m, k, n, dtype) else {
        return Err(usage("matmul: --m, --k, --n and --dtype are required"));
    };
    let fail = |e: &dyn std::fmt::Display| Failure(1, e.to_string());
    let dev = match device.as_str() {
        "auto" => match Device::open() {
            Ok(d) => d,
            Err(rknpu_driver::device::DeviceError::NotFound { .. }) => {
                outln!("no NPU found: running on the emulated kernel (RKNPU_DEVICE=emu)");
                Device::open_spec("emu").map_err(|e| fail(&e))?
            }
            Err(e) => return Err(fail(&e)),
        },
        spec => Device::open_spec(spec).map_err(|e| fail(&e))?,
    };
    outln!("device: {}", dev.info());

    if let Some(path) = &trace_file {
        dev.record_to_file(std::path::Path::new(path))
            .map_err(|e| fail(&e))?;
    }
    let t0 = Instant::now();
    let plan = Plan::new(MatmulSpec::new(m, k, n, dtype).on_cores(cores)).map_err(|e| fail(&e))?;
    let t_plan = t0.elapsed();
    outln!("plan: {plan}");
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let (mu, ku, nu) = (m as usize, k as usize, n as usize);
    let (t_pack_b, timings, err, bound) = if dtype == Dtype::Fp16 {
        use rknpu_driver::float::{f16_to_f32, f32_to_f16};
        let q = |v: f32| f16_to_f32(f32_to_f16(v));
        let a: Vec<f32> = (0..mu * ku).map(|_| q(rng.unit())).collect();
        let b: Vec<f32> = (0..ku * nu).map(|_| q(rng.unit())).collect();
        let t = Instant::now();
        let bank = WeightBank::new_f32(&dev, &plan, &b).map_err(|e| fail(&e))?;
        let t_pack_b = t.elapsed();
        let mut mm = Matmul::new(&dev, plan, &bank).map_err(|e| fail(&e))?;
        let c = mm.run_f32(&a).map_err(|e| fail(&e))?;
        // fp32 summation in any order: |error| <= (K + 1) 2^-24 sum |a b|.
        let (mut worst, mut bound) = (0f64, 0f64);
        let mut row = vec![0f64; nu];
        let mut mag = vec![0f64; nu];
        for i in 0..mu {
            row.fill(0.0);
            mag.fill(0.0);
            for kk in 0..ku {
                let x = a[i * ku + kk] as f64;
                for j in 0..nu {
                    let p = x * b[kk * nu + j] as f64;
                    row[j] += p;
                    mag[j] += p.abs();
                }
            }
            for j in 0..nu {
                let e = (c[i * nu + j] as f64 - row[j]).abs();
                let tol = (ku as f64 + 1.0) * 2f64.powi(-24) * mag[j];
                worst = worst.max(e);
                bound = bound.max(e - tol);
            }
        }
        (t_pack_b, mm.timings, worst, bound)
    } else {
        let (lo, hi) = if dtype == Dtype::Int4 {
            (-8, 7)
        } else {
            (-128, 127)
        };
        let a: Vec<i32> = (0..mu * ku).map(|_| rng.int(lo, hi)).collect();
        let b: Vec<i32> = (0..ku * nu).map(|_| rng.int(lo, hi)).collect();
        let t = Instant::now();
        let bank = WeightBank::new_int(&dev, &plan, &b).map_err(|e| fail(&e))?;
        let t_pack_b = t.elapsed();
        let mut mm = Matmul::new(&dev, plan, &bank).map_err(|e| fail(&e))?;
        let c = mm.run_int(&a).map_err(|e| fail(&e))?;
        let mut reference = vec![0i64; mu * nu];
        for i in 0..mu {
            let r = &mut reference[i * nu..(i + 1) * nu];
            for kk in 0..ku {
                let x = a[i * ku + kk] as i64;
                for (o, &y) in r.iter_mut().zip(&b[kk * nu..(kk + 1) * nu]) {
                    *o += x * y as i64;
                }
            }
        }
        let worst = c
            .iter()
            .zip(&reference)
            .map(|(x, y)| (x - y).abs())
            .max()
            .unwrap_or(0) as f64;
        (t_pack_b, mm.timings, worst, worst)
    };
    outln!(
        "time: plan {:.3} ms, pack {:.3} ms (weights {:.3} ms, A {:.3} ms), submit+wait {:.3} ms, unpack {:.3} ms",
        t_plan.as_secs_f64() * 1e3,
        (t_pack_b + timings.pack).as_secs_f64() * 1e3,
        t_pack_b.as_secs_f64() * 1e3,
        timings.pack.as_secs_f64() * 1e3,
        timings.submit_wait.as_secs_f64() * 1e3,
        timings.unpack.as_secs_f64() * 1e3
    );
    if dtype == Dtype::Fp16 {
        outln!(
            "largest error: {err:e} (fp32 summation bound respected: {})",
            bound <= 0.0
        );
    } else {
        outln!("largest error: {err}");
    }
    if bound > 0.0 {
        return Err(Failure(
            1,
            "MISMATCH: the result differs from the CPU reference".into(),
        ));
    }
    if let Some(path) = &trace_file {
        dev.stop_recording().map_err(|e| fail(&e))?;
        outln!("trace: {path}");
    }
    outln!("OK");
    Ok(())
}

/// Best time of `f` over runs filling about 0.3 s.
fn best_of(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    let start = std::time::Instant::now();
    let mut runs = 0;
    while runs < 3 || (start.elapsed().as_secs_f64() < 0.3 && runs < 1000) {
        let t = std::time::Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    best
}

fn cmd_bench(args: &[String]) -> Result<(), Failure> {
    use rknpu_driver::kernels::matmul::{MatmulSpec, Plan, pack};
    use rknpu_driver::kernels::single::Dtype;
    use std::hint::black_box;
    if args.first().map(String::as_str) != Some("pack") || args.len() != 1 {
        return Err(usage("bench: the only benchmark is `bench pack`"));
    }
    let fail = |e: rknpu_driver::Error| Failure(1, e.to_string());
    let mut rng = Rng(7);
    let line = |name: &str, bytes: usize, secs: f64| {
        let src = vec![1u8; bytes];
        let mut dst = vec![0u8; bytes];
        let copy = best_of(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&dst);
        });
        let (gbs, mem) = (bytes as f64 / secs / 1e9, bytes as f64 / copy / 1e9);
        outln!(
            "{name}: {gbs:.2} GB/s (memcpy {mem:.2} GB/s, ratio {:.2})",
            gbs / mem
        );
    };
    let p8 = Plan::new(MatmulSpec::new(128, 4096, 4096, Dtype::Int8)).map_err(fail)?;
    let b8: Vec<i8> = (0..4096 * 4096).map(|_| rng.int(-128, 127) as i8).collect();
    let mut bank = vec![0u8; p8.b_bytes as usize];
    let t = best_of(|| {
        black_box(pack::weights_i8_kn_into(&p8, black_box(&b8), &mut bank).ok());
    });
    line("int8 weight packing (K x N)", p8.b_bytes as usize, t);
    let t = best_of(|| {
        black_box(pack::weights_i8_nk_into(&p8, black_box(&b8), &mut bank).ok());
    });
    line("int8 weight packing (N x K)", p8.b_bytes as usize, t);
    let p4 = Plan::new(MatmulSpec::new(128, 4096, 4096, Dtype::Int4)).map_err(fail)?;
    let b4: Vec<i8> = (0..4096 * 4096).map(|_| rng.int(-8, 7) as i8).collect();
    let mut bank4 = vec![0u8; p4.b_bytes as usize];
    let t = best_of(|| {
        black_box(pack::weights_i4_kn_into(&p4, black_box(&b4), &mut bank4).ok());
    });
    line("int4 weight packing (K x N)", p4.b_bytes as usize, t);
    let a8: Vec<i8> = (0..128 * 4096).map(|_| rng.int(-128, 127) as i8).collect();
    let t = best_of(|| {
        black_box(pack::activations_i8(&p8, black_box(&a8)).ok());
    });
    line("int8 activation packing", p8.a_bytes as usize, t);
    let c: Vec<u8> = (0..p8.c_bytes).map(|i| i as u8).collect();
    let mut out = vec![0i32; 128 * 4096];
    let t = best_of(|| {
        black_box(pack::unpack_i32(&p8, black_box(&c), &mut out).ok());
    });
    line("int32 output unpacking", p8.c_bytes as usize, t);
    Ok(())
}

fn cmd_trace(args: &[String]) -> Result<(), Failure> {
    use rknpu_driver::replay::{self, Mode, ReplayOptions};
    use rknpu_driver::trace::{self, Trace};
    let read = |path: &str| std::fs::read(path).map_err(|e| Failure(1, format!("{path}: {e}")));
    let load = |path: &str| -> Result<Trace, Failure> {
        Trace::from_bytes(&read(path)?).map_err(|e| Failure(1, format!("{path}: {e}")))
    };
    match args.first().map(String::as_str) {
        Some("dump") => {
            let [_, file] = args else {
                return Err(usage("trace dump: expected one FILE"));
            };
            out!("{}", trace::dump(&load(file)?));
            Ok(())
        }
        Some("replay") => {
            const REPLAY: &str = "trace replay: expected FILE [--mode check|model|hw] [--ulps N]";
            let Some((file, opts)) = args[1..].split_first() else {
                return Err(usage(REPLAY));
            };
            let (mut mode, mut ulps) = ("model", None);
            for pair in opts.chunks(2) {
                match pair {
                    [o, v] if o == "--mode" => mode = v.as_str(),
                    [o, v] if o == "--ulps" => {
                        ulps = Some(
                            v.parse::<u32>()
                                .map_err(|_| usage(format!("--ulps: {v}")))?,
                        )
                    }
                    _ => return Err(usage(REPLAY)),
                }
            }
            let mode = match mode {
                "check" => Mode::Check,
                "model" => Mode::Model,
                "hw" => Mode::Hw,
                m => {
                    return Err(usage(format!("trace replay: mode {m}: check, model or hw")));
                }
            };
            let t = load(file)?;
            let mut options = ReplayOptions::for_trace(&t);
            if let Some(u) = ulps {
                options.tolerance.float_ulps = u;
            }
            let r = replay::replay(&t, mode, &options).map_err(|e| Failure(1, e.to_string()))?;
            outln!(
                "{} submission(s), {} task(s) checked, {} recorded completion(s) and output(s) compared",
                r.submits,
                r.tasks,
                r.compared
            );
            for l in &r.lints {
                outln!("warning: {l}");
            }
            if !r.is_match() {
                return Err(Failure(
                    1,
                    format!("mismatch:\n  {}", r.mismatches.join("\n  ")),
                ));
            }
            outln!("match");
            Ok(())
        }
        Some("import") if args.get(1).map(String::as_str) == Some("--capture") => {
            let [_, _, dir, o, out] = args else {
                return Err(usage("trace import: --capture DIR --out FILE"));
            };
            if o != "--out" {
                return Err(usage("trace import: --capture DIR --out FILE"));
            }
            let t = trace::import_capture(std::path::Path::new(dir))
                .map_err(|e| Failure(1, e.to_string()))?;
            std::fs::write(out, t.to_bytes()).map_err(|e| Failure(1, format!("{out}: {e}")))?;
            outln!("wrote {out}: {} chunk(s)", t.chunks.len() + 1);
            Ok(())
        }
        Some("import") => {
            let (mut prog, mut addr, mut words, mut out) = (None, 0u32, None, None);
            let (mut loads, mut expect) = (Vec::new(), Vec::new());
            let mut it = args[1..].iter();
            while let Some(a) = it.next() {
                let v = it
                    .next()
                    .ok_or_else(|| usage(format!("{a} needs a value")))?;
                match a.as_str() {
                    "--regcmd" => prog = Some(v.clone()),
                    "--regcmd-addr" => {
                        addr = parse_u32(v).ok_or_else(|| usage(format!("--regcmd-addr: {v}")))?
                    }
                    "--task-words" => {
                        words =
                            Some(parse_u32(v).ok_or_else(|| usage(format!("--task-words: {v}")))?)
                    }
                    "--load" | "--expect" => {
                        let (at, file) = parse_load(v)
                            .ok_or_else(|| usage(format!("{a}: expected ADDR=FILE, got {v}")))?;
                        let target = if a == "--load" {
                            &mut loads
                        } else {
                            &mut expect
                        };
                        target.push((at, read(&file)?));
                    }
                    "--out" => out = Some(v.clone()),
                    s => return Err(usage(format!("trace import: unexpected argument {s}"))),
                }
            }
            let (Some(prog), Some(out)) = (prog, out) else {
                return Err(usage("trace import: --regcmd and --out are required"));
            };
            let bytes = read(&prog)?;
            let entries = regcmd::words_from_le_bytes(&bytes)
                .map_err(|e| Failure(1, format!("{prog}: {e}")))?;
            let words = words.unwrap_or(first_body(&entries) as u32);
            let t = trace::import_raw(&bytes, addr, words, &loads, &expect);
            std::fs::write(&out, t.to_bytes()).map_err(|e| Failure(1, format!("{out}: {e}")))?;
            outln!("wrote {out}: {} chunk(s)", t.chunks.len() + 1);
            Ok(())
        }
        _ => Err(usage("trace: import, dump or replay")),
    }
}

fn cmd_info(args: &[String]) -> Result<(), Failure> {
    if let Some(a) = args.first() {
        return Err(usage(format!("info: unexpected argument {a}")));
    }
    let dev = rknpu_driver::device::Device::open().map_err(|e| Failure(1, e.to_string()))?;
    let i = dev.info();
    outln!(
        "interface: {}",
        match i.interface {
            rknpu_driver::device::Interface::Vendor => "vendor rknpu",
            rknpu_driver::device::Interface::Rocket => "rocket",
        }
    );
    outln!(
        "node: {}{}",
        i.node,
        if i.emulated { " (emulated)" } else { "" }
    );
    outln!(
        "driver: {} {}.{}.{}",
        i.driver,
        i.version.0,
        i.version.1,
        i.version.2
    );
    if !i.date.is_empty() {
        outln!("date: {}", i.date);
    }
    outln!("cores: {}", i.cores);
    outln!("iommu: {}", if i.iommu { "enabled" } else { "disabled" });
    if let Some(f) = i.freq_hz {
        outln!("clock: {} MHz", f / 1_000_000);
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("decode") => cmd_decode(&args[1..]),
        Some("sim") => cmd_sim(&args[1..]),
        Some("info") => cmd_info(&args[1..]),
        Some("matmul") => cmd_matmul(&args[1..]),
        Some("bench") => cmd_bench(&args[1..]),
        Some("trace") => cmd_trace(&args[1..]),
        Some("help") | Some("--help") | Some("-h") => {
            outln!("{USAGE}");
            Ok(())
        }
        Some("--version") | Some("-V") => {
            outln!("rknpu {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Some(other) => Err(usage(format!("unknown command {other}"))),
        None => Err(usage("missing command")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, msg)) => {
            eprintln!("rknpu: {msg}");
            if code == 2 {
                eprintln!("{USAGE}");
            }
            ExitCode::from(code)
        }
    }
}
