//! The vendor convolution programs among the captured board programs
//! (`../shared/captures/`, beside a development checkout, absent from a fresh clone; the
//! tests skip with a note without it) against the simulator and the convolution
//! generator.
//!
//! What the captures hold: the `allbilly-rk3588/rknn-conv-fp16-*` cases hold the program
//! (the regcmd buffer) but no tensor contents, so their outputs cannot be compared with
//! anything the board computed. What is checked instead:
//!
//! 1. Each case's single-core chain (the first chain of the task table) runs on the
//!    simulator as captured, over seeded inputs and weights placed at the addresses its
//!    registers name, and its output equals a direct fp16 convolution of the shape the
//!    case is named after, computed here from the same bytes (the weight layout of
//!    docs/hardware/convolution.md#weights): the row-split programs (40×40, 56×56) must
//!    give the whole output from their row windows, through the vendor's full-tensor
//!    strides and moved base addresses.
//! 2. The first task of each case, field by field, against what `Conv2d` generates for
//!    the same shape; the deviations that are allowed are listed with their reason. The
//!    CNA and CORE of `oRKLLM-ork-driver/rknn-conv-task0`, a padded 3×3 convolution whose
//!    bias comes through DPU_RDMA (not this model's), are compared the same way.
//! 3. The `rknn-conv-fp16-inline-*` cases, whose buffers are present, feed a 1-channel
//!    planar input (`ARGB_IN`): they decode as such (tests/sim_graph_captures.rs runs
//!    them; the simulator refuses their several-kernel weights by name). Their buffers
//!    are all zero, so no output is compared.

mod common;
use common::{captures_or_skip, meta_hex, meta_numbers};
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::kernels::ops::conv::Conv2d;
use rknpu_driver::kernels::ops::{self, Cube};
use rknpu_driver::regcmd::BlockMask;
use rknpu_driver::sim::{Kick, Simulator};
use rknpu_driver::task::{Precision, Snapshot, Task};
use std::path::{Path, PathBuf};

/// `c{C}h{H}w{W}-oc{OC}-k{K}` from a case name.
fn shape(name: &str) -> Option<(u32, u32, u32, u32, u32)> {
    let s = name.strip_prefix("rknn-conv-fp16-c")?;
    let num = |s: &str, end: char| -> Option<(u32, String)> {
        let i = s.find(end)?;
        Some((s[..i].parse().ok()?, s[i + 1..].to_string()))
    };
    let (c, s) = num(s, 'h')?;
    let (h, s) = num(&s, 'w')?;
    let (w, s) = num(&s, '-')?;
    let s = s.strip_prefix("oc")?;
    let (oc, s) = num(s, '-')?;
    let k = s.strip_prefix('k')?.parse().ok()?;
    Some((c, h, w, oc, k))
}

fn words(path: &Path) -> Vec<u64> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// The task a task file's entries leave in a fresh register file.
fn decode(path: &Path) -> Option<Task> {
    decode_blocks(path, None)
}

/// The same, decoding only the blocks of `only` when given.
fn decode_blocks(path: &Path, only: Option<BlockMask>) -> Option<Task> {
    let w = words(path);
    let enable = w
        .iter()
        .rev()
        .find(|&&e| e & 0xFFFF == 0x0008 && (e >> 48) == 0x0081)
        .map(|&e| ((e >> 16) & 0xFFFF_FFFF) as u32)?;
    let snap = Snapshot::from_writes(
        w.iter()
            .filter(|&&e| e >> 48 != 0 && e & 0xFFFF < 0x8000)
            .map(|&e| ((e & 0xFFFF) as u16, ((e >> 16) & 0xFFFF_FFFF) as u32)),
    );
    let mut snap = snap;
    match Task::decode(&mut snap, only.unwrap_or(BlockMask(enable))) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            None
        }
    }
}

struct Vendor {
    name: String,
    dir: PathBuf,
    shape: (u32, u32, u32, u32, u32),
    tasks: Vec<PathBuf>,
}

fn vendor_cases(root: &Path) -> Vec<Vendor> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(root.join("allbilly-rk3588")) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(shape) = shape(&name) else { continue };
        let mut tasks: Vec<PathBuf> = std::fs::read_dir(e.path())
            .unwrap()
            .flatten()
            .map(|f| f.path())
            .filter(|p| p.to_string_lossy().ends_with(".regcmd.bin"))
            .collect();
        tasks.sort();
        out.push(Vendor {
            name,
            dir: e.path(),
            shape,
            tasks,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// A small deterministic generator for the seeded operands.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// An fp16 multiple of 1/8 in [-2, 2], as its bits and its value times 8.
    fn half(&mut self) -> (u16, i64) {
        let v = (self.next() >> 40) as i64 % 33 - 16;
        (half::f16::from_f32(v as f32 / 8.0).to_bits(), v)
    }
}

#[test]
fn vendor_single_core_conv_chains_compute_the_named_convolution() {
    let Some(root) = captures_or_skip("the vendor convolution programs are not checked") else {
        return;
    };
    let cases = vendor_cases(&root);
    assert!(!cases.is_empty(), "no rknn-conv-fp16 case found");
    for case in &cases {
        let (c, h, w, oc, k) = case.shape;
        let meta = std::fs::read_to_string(case.dir.join("meta.json")).unwrap();
        let addrs = meta_hex(&meta, "regcmd_addr");
        let amounts = meta_numbers(&meta, "regcfg_amount");
        // The regcmd window, saved as the buffer at its IOVA.
        let (win_addr, win_path) = std::fs::read_dir(&case.dir)
            .unwrap()
            .flatten()
            .find_map(|f| {
                let n = f.file_name().to_string_lossy().to_string();
                let hx = n.strip_prefix("buf-")?.strip_suffix(".bin")?;
                Some((u32::from_str_radix(hx, 16).ok()?, f.path()))
            })
            .expect("the regcmd window");
        // The single-core chain: task 0 and the tasks its tail chains to.
        let first = decode(&case.tasks[0]).expect("task 0 decodes");
        let cna0 = first.cna.as_ref().unwrap();
        let dpu0 = first.dpu.as_ref().unwrap();
        let fixed = |a: rknpu_driver::regcmd::DmaAddr| match a {
            rknpu_driver::regcmd::DmaAddr::Fixed(x) => x,
            _ => unreachable!(),
        };
        let (in_base, w_base, out_base) = (
            fixed(cna0.feature.addr),
            fixed(cna0.weights.addr),
            fixed(dpu0.out.addr),
        );
        let (ow, oh) = (w - k + 1, h - k + 1);
        let in_len = (c / 8 * h * w * 16) as usize;
        let w_len = (oc * k * k * c * 2) as usize;
        // Output planes at the program's own surface stride (the vendor rounds a plane
        // up to whole 4-atom units: 5×5 → 28 atoms).
        let plane = dpu0.out.surf_stride;
        let out_len = (oc / 8 * plane * 16) as usize;
        let mut rng = Rng(0x5EED ^ u64::from(c * h * oc * k));
        let mut x = vec![0i64; (h * w * c) as usize];
        let mut input = vec![0u8; in_len];
        for y in 0..h {
            for xx in 0..w {
                for ch in 0..c {
                    let (bits, v) = rng.half();
                    x[((y * w + xx) * c + ch) as usize] = v;
                    let at = ((ch / 8) * h * w + y * w + xx) as usize * 16 + (ch % 8) as usize * 2;
                    input[at..at + 2].copy_from_slice(&bits.to_le_bytes());
                }
            }
        }
        let mut wt = vec![0i64; (oc * k * k * c) as usize];
        let mut weights = vec![0u8; w_len];
        let n_ic = c.div_ceil(32);
        for o in 0..oc {
            for ky in 0..k {
                for kx in 0..k {
                    for ic in 0..c {
                        let (bits, v) = rng.half();
                        wt[(((o * k + ky) * k + kx) * c + ic) as usize] = v;
                        let i = (((((o / 16) * n_ic + ic / 32) * k + ky) * k + kx) * 16 + o % 16)
                            * 32
                            + ic % 32;
                        weights[i as usize * 2..i as usize * 2 + 2]
                            .copy_from_slice(&bits.to_le_bytes());
                    }
                }
            }
        }
        let mut sim = Simulator::new();
        let mem = sim.memory_mut();
        mem.map(win_addr, std::fs::read(&win_path).unwrap())
            .unwrap();
        mem.map(in_base, input).unwrap();
        mem.map(w_base, weights).unwrap();
        mem.map_zeroed(out_base, out_len).unwrap();
        let kick = Kick::new(addrs[0], amounts[0]);
        let run = match sim.kick(&kick) {
            Ok(r) => r,
            Err(e) => panic!("{}: {e}", case.name),
        };
        assert!(run.completed, "{}: {run:?}", case.name);
        let got = sim.memory().read_vec(out_base, out_len).unwrap();
        for y in 0..oh {
            for xx in 0..ow {
                for o in 0..oc {
                    let mut s = 0i64;
                    for ky in 0..k {
                        for kx in 0..k {
                            for ic in 0..c {
                                s += x[(((y + ky) * w + xx + kx) * c + ic) as usize]
                                    * wt[(((o * k + ky) * k + kx) * c + ic) as usize];
                            }
                        }
                    }
                    let exact = s as f64 / 64.0;
                    let at = ((o / 8) * plane + y * ow + xx) as usize * 16 + (o % 8) as usize * 2;
                    let g =
                        half::f16::from_bits(u16::from_le_bytes([got[at], got[at + 1]])).to_f64();
                    assert!(
                        (g - exact).abs() <= exact.abs() * 2f64.powi(-11) + 1e-6,
                        "{}: output ({y}, {xx}, {o}) = {g}, want {exact}",
                        case.name
                    );
                }
            }
        }
        eprintln!(
            "{}: {} task(s) of the single-core chain, {} MACs, lints {:?}",
            case.name,
            run.tasks_run,
            run.macs,
            run.lints.iter().map(|l| l.kind).collect::<Vec<_>>()
        );
    }
}

/// A field whose vendor value may differ from the generator's, and why.
struct Allowed {
    field: &'static str,
    why: &'static str,
}

const ALLOWED: &[Allowed] = &[
    Allowed {
        field: "DATAIN_CHANNEL_REAL",
        why: "the vendor writes (C − 1) mod 64, the generator C − 1 (as the matmul programs and Mesa); both mean no channel padding (checked by the simulator)",
    },
    Allowed {
        field: "FEATURE_GRAINS",
        why: "lines fetched ahead: the vendor caps them, the generator writes rows + 1 (gregordinary/rocket-userspace); timing only",
    },
    Allowed {
        field: "QD_EN",
        why: "the vendor's fp16 convolutions clear it, the generator sets it for every precision as the matmul generator does (gregordinary's fp16 convolutions set it too)",
    },
    Allowed {
        field: "CBUF",
        why: "the vendor's 56×56 1×1 task keeps 1 weight bank beside 11 data banks; the generator keeps at least 2 (quirk 3) and so cuts fewer rows per band",
    },
    Allowed {
        field: "output",
        why: "the vendor rounds an output plane up to whole 4-atom units (7×7 k3: 25 → 28 atoms, SURFACE_ADD twice that); the generator writes the contiguous planes of its output cube",
    },
    Allowed {
        field: "rows",
        why: "follows from the CBUF split of the 56×56 case",
    },
];

const ROW_ALLOWED: Allowed = Allowed {
    field: "rows",
    why: "the output rows of a band follow from its input rows",
};

#[test]
fn vendor_conv_first_tasks_agree_with_the_generator() {
    let Some(root) = captures_or_skip("the vendor convolution programs are not compared") else {
        return;
    };
    for case in vendor_cases(&root) {
        let (c, h, w, oc, k) = case.shape;
        let v = decode(&case.tasks[0]).unwrap();
        let cv = Conv2d::new(Cube::new(w, h, c, Precision::Fp16).unwrap(), oc, (k, k));
        compare(&case.name, &v, &cv, true);
    }
    // oRKLLM/ork-driver's padded 3×3 convolution 8×8×32 → 64 (with a bias through
    // DPU_RDMA: its CNA and CORE only).
    let path = root.join("oRKLLM-ork-driver/rknn-conv-task0/regcmd.bin");
    if path.is_file() {
        let v = decode_blocks(&path, Some(BlockMask(BlockMask::CNA.0 | BlockMask::CORE.0)))
            .expect("the padded convolution's CNA and CORE decode");
        let cv = Conv2d::new(Cube::new(8, 8, 32, Precision::Fp16).unwrap(), 64, (3, 3))
            .with_pad_symmetric(1);
        compare("oRKLLM-ork-driver/rknn-conv-task0", &v, &cv, false);
    }
}

/// Reads one compared field of a task.
type Get = fn(&Task) -> String;

fn cna(t: &Task) -> &rknpu_driver::task::Cna {
    t.cna.as_ref().unwrap()
}

fn core(t: &Task) -> &rknpu_driver::task::Core {
    t.core.as_ref().unwrap()
}

fn dpu_of(t: &Task) -> &rknpu_driver::task::Dpu {
    t.dpu.as_ref().unwrap()
}

/// The vendor task `v` field by field against the first task `Conv2d` generates for the
/// same shape (the DPU too when `dpu`).
fn compare(name: &str, v: &Task, cv: &Conv2d, dpu: bool) {
    {
        let case_name = name;
        let ours = cv
            .tasks(
                &Bindings::new()
                    .bind(Role::Input, ops::at(ops::INPUT, 0))
                    .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                    .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
            )
            .unwrap()
            .remove(0);
        let (vc, oc_) = (v.cna.as_ref().unwrap(), ours.cna.as_ref().unwrap());
        // Each compared field, read the same way from both tasks.
        let mut getters: Vec<(&str, Get)> = vec![
            ("precision", |t| format!("{:?}", cna(t).precision)),
            ("width", |t| cna(t).feature.width.to_string()),
            ("rows", |t| cna(t).feature.height.to_string()),
            ("channels", |t| cna(t).feature.channels.to_string()),
            ("DATAIN_CHANNEL_REAL", |t| {
                cna(t).feature.channels_real.to_string()
            }),
            ("LINE_STRIDE", |t| cna(t).feature.line_stride.to_string()),
            ("SURF_STRIDE", |t| cna(t).feature.surf_stride.to_string()),
            ("GROUP_LINE_OFF", |t| {
                cna(t).feature.group_line_off.to_string()
            }),
            ("FEATURE_GRAINS", |t| cna(t).feature.grains.to_string()),
            ("WEIGHT_KERNELS", |t| cna(t).weights.kernels.to_string()),
            ("conv", |t| format!("{:?}", cna(t).conv)),
            ("kernel", |t| format!("{:?}", cna(t).kernel)),
            ("CBUF", |t| {
                format!("{}/{}", cna(t).cbuf.data_banks, cna(t).cbuf.weight_banks)
            }),
            ("DATA_ENTRIES", |t| cna(t).cbuf.data_entries.to_string()),
            ("cvt", |t| format!("{:?}", cna(t).cvt)),
            ("burst", |t| format!("{:?}", cna(t).burst)),
            ("QD_EN", |t| core(t).qd_en.to_string()),
            ("core out", |t| format!("{:?}", core(t).out)),
        ];
        if dpu {
            getters.extend::<[(&str, Get); 6]>([
                ("DPU cube", |t| format!("{:?}", dpu_of(t).cube)),
                ("DPU precision", |t| format!("{:?}", dpu_of(t).precision)),
                ("output", |t| {
                    let o = dpu_of(t).out;
                    format!(
                        "{:?}/{}/{}/{}",
                        o.precision, o.surf_stride, o.notch, o.surface_add
                    )
                }),
                ("ow", |t| format!("{:?}", dpu_of(t).ow)),
                ("out_cvt", |t| format!("{:?}", dpu_of(t).out_cvt)),
                ("bs", |t| format!("{:?}", dpu_of(t).bs)),
            ]);
        }
        let fields: Vec<(&str, String, String)> = getters
            .iter()
            .map(|&(name, get)| (name, get(v), get(&ours)))
            .collect();
        let mut deviations = Vec::new();
        // The band's rows decide these: they may differ only where the rows do.
        const ROW_DEPENDENT: &[&str] = &["conv", "core out", "DPU cube"];
        let rows_differ = vc.feature.height != oc_.feature.height;
        for (name, vendor, generated) in fields {
            if vendor == generated {
                continue;
            }
            let allowed = ALLOWED
                .iter()
                .find(|a| a.field == name)
                .or_else(|| (rows_differ && ROW_DEPENDENT.contains(&name)).then_some(&ROW_ALLOWED));
            assert!(
                allowed.is_some(),
                "{case_name}: {name}: vendor {vendor}, generator {generated}"
            );
            let why = allowed.map_or("", |a| a.why);
            deviations.push(format!(
                "{name}: vendor {vendor}, generator {generated} ({why})"
            ));
        }
        eprintln!("{case_name}: deviations {deviations:?}");
    }
}

#[test]
fn the_inline_cases_decode_as_planar_inputs() {
    let Some(root) = captures_or_skip("the inline convolution cases are not checked") else {
        return;
    };
    for name in ["rknn-conv-fp16-inline-case1", "rknn-conv-fp16-inline-case4"] {
        let dir = root.join("allbilly-rk3588").join(name);
        if !dir.is_dir() {
            common::absent_capture(name);
            continue;
        }
        let mut tasks: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|f| f.path())
            .filter(|p| p.to_string_lossy().ends_with(".regcmd.bin"))
            .collect();
        tasks.sort();
        let w = words(&tasks[0]);
        let mut snap = Snapshot::from_writes(
            w.iter()
                .filter(|&&e| e >> 48 != 0 && e & 0xFFFF < 0x8000)
                .map(|&e| ((e & 0xFFFF) as u16, ((e >> 16) & 0xFFFF_FFFF) as u32)),
        );
        let t = Task::decode(&mut snap, BlockMask(0x0D)).expect("the planar input decodes");
        let f = t.cna.expect("a CNA task").feature;
        // The real width (7 and 10) in DMA_WIDTH, the line padded to a multiple of 8
        // elements in DATAIN_WIDTH and LINE_STRIDE (docs/hardware/convolution.md#planar-input).
        let real = if name.ends_with("case1") { 7 } else { 10 };
        assert_eq!(f.width, real, "{name}");
        assert_eq!(
            f.planar_width,
            Some(if real == 7 { 8 } else { 16 }),
            "{name}"
        );
        assert_eq!(Some(f.line_stride), f.planar_width, "{name}");
        assert_eq!((f.channels, f.channels_real), (8, 1), "{name}");
    }
}
