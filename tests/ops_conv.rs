//! K×K convolution (`kernels::ops::conv`): int8 and fp16 against a direct-convolution
//! CPU reference written here (plain loops on `[h][w][c]`), through the emulated kernel
//! and on the simulator directly (for its lints); height and output-channel tiling;
//! refusals; golden decoded programs.

mod common;

use common::Rng;
use half::f16;
use proptest::prelude::*;
use rknpu_driver::compute::ops::{ProgramBuffers, run_program};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::kernels::ops::conv::{self, Conv2d, ConvOut, Padding};
use rknpu_driver::kernels::ops::{self, Cube};
use rknpu_driver::regcmd::{BufferId, words_to_le_bytes};
use rknpu_driver::sim::{CoreRun, Kick, Simulator};
use rknpu_driver::task::Precision;

/// Plain direct convolution: `x[h][w][c]`, `k[oc][kh][kw][c / groups]` (depthwise
/// `[c][kh][kw]`), result `[oh][ow][oc]`, padding pixels holding `pad`.
fn direct(cv: &Conv2d, x: &[i64], k: &[i64], pad: i64) -> (usize, usize, Vec<i64>) {
    let (h, w, c) = (
        cv.input.height as i64,
        cv.input.width as i64,
        cv.input.channels as i64,
    );
    let (kh, kw) = (cv.kernel.0 as i64, cv.kernel.1 as i64);
    let (sy, sx) = (cv.stride.0 as i64, cv.stride.1 as i64);
    let (dy, dx) = (cv.dilation.0 as i64, cv.dilation.1 as i64);
    let p = cv.pad;
    let oh = (h + p.top as i64 + p.bottom as i64 - ((kh - 1) * dy + 1)) / sy + 1;
    let ow = (w + p.left as i64 + p.right as i64 - ((kw - 1) * dx + 1)) / sx + 1;
    let oc = cv.out_channels as i64;
    let g = cv.groups as i64;
    let cg = if cv.depthwise { 1 } else { c / g };
    let og = oc / g;
    let mut out = vec![0; (oh * ow * oc) as usize];
    for oy in 0..oh {
        for ox in 0..ow {
            for o in 0..oc {
                let mut s = 0;
                for ky in 0..kh {
                    for kx in 0..kw {
                        let y = oy * sy + ky * dy - p.top as i64;
                        let xx = ox * sx + kx * dx - p.left as i64;
                        for i in 0..cg {
                            let ch = if cv.depthwise { o } else { (o / og) * cg + i };
                            let v = if y >= 0 && y < h && xx >= 0 && xx < w {
                                x[((y * w + xx) * c + ch) as usize]
                            } else {
                                pad
                            };
                            s += v * k[(((o * kh + ky) * kw + kx) * cg + i) as usize];
                        }
                    }
                }
                out[((oy * ow + ox) * oc + o) as usize] = s;
            }
        }
    }
    (oh as usize, ow as usize, out)
}

#[test]
fn the_reference_is_a_convolution() {
    // A hand-computed 3×3 input, one channel padded to 32, a 2×2 kernel of ones except
    // its last tap (2), stride 1, no padding: each output sums a 2×2 block.
    let x: Vec<i64> = (1..=9).collect();
    let cv = Conv2d::new(Cube::new(3, 3, 1, Precision::Int8).unwrap(), 1, (2, 2));
    let (oh, ow, out) = direct(&cv, &x, &[1, 1, 1, 2], 0);
    assert_eq!((oh, ow), (2, 2));
    assert_eq!(
        out,
        vec![
            1 + 2 + 4 + 10,
            2 + 3 + 5 + 12,
            4 + 5 + 7 + 16,
            5 + 6 + 8 + 18
        ]
    );
    // Padding 1 with pad value 7, a 1×1 kernel: the border is 7 × weight.
    let cv = Conv2d::new(Cube::new(1, 1, 1, Precision::Int8).unwrap(), 1, (1, 1));
    let (_, _, out) = direct(&cv, &[5], &[3], 7);
    assert_eq!(out, vec![15]);
    // The library's reference agrees on the first case.
    let cv = Conv2d::new(Cube::new(3, 3, 1, Precision::Int8).unwrap(), 1, (2, 2));
    let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let r = conv::reference(&cv, &xf, &[1.0, 1.0, 1.0, 2.0], 0.0).unwrap();
    assert_eq!(r, vec![17.0, 22.0, 32.0, 37.0]);
}

/// Device addresses for the simulator: buffer b at (b + 1) × 256 MiB.
fn addr(b: BufferId) -> Option<u64> {
    Some(0x1000_0000 * (b.0 as u64 + 1))
}

/// Runs the convolution on the simulator directly: the run (lints) and the output bytes.
fn simulate(cv: &Conv2d, input: Vec<u8>, weights: Vec<u8>) -> (CoreRun, Vec<u8>) {
    let tasks = cv
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
        )
        .unwrap();
    let program = ops::chain(&tasks).unwrap();
    let words = program.bind(addr).unwrap();
    let a = |b: BufferId| addr(b).unwrap() as u32;
    let out_bytes = cv.output_cube().unwrap().bytes() as usize;
    let mut sim = Simulator::new();
    let mem = sim.memory_mut();
    mem.map(a(ops::REGCMD), words_to_le_bytes(&words)).unwrap();
    mem.map(a(ops::INPUT), input).unwrap();
    mem.map(a(ops::WEIGHTS), weights).unwrap();
    mem.map_zeroed(a(ops::OUTPUT), out_bytes).unwrap();
    let kick = Kick::new(a(ops::REGCMD), program.tasks()[0].regcfg_amount);
    let r = sim.kick(&kick).unwrap();
    assert!(r.completed, "{r:?}");
    assert_eq!(r.tasks_run as usize, tasks.len());
    let out = sim.memory().read_vec(a(ops::OUTPUT), out_bytes).unwrap();
    (r, out)
}

/// Runs the convolution on the emulated kernel.
fn emulate(cv: &Conv2d, input: Vec<u8>, weights: Vec<u8>) -> Vec<u8> {
    let dev = Device::open_spec("emu").unwrap();
    let tasks = cv
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
        )
        .unwrap();
    let program = ops::chain(&tasks).unwrap();
    let out_bytes = cv.output_cube().unwrap().bytes() as usize;
    let mut out = run_program(
        &dev,
        &program,
        ProgramBuffers::new()
            .input(ops::INPUT, input)
            .input(ops::WEIGHTS, weights)
            .output(ops::OUTPUT, out_bytes),
    )
    .unwrap();
    out.remove(0)
}

fn random_i8(rng: &mut Rng, n: usize) -> Vec<i8> {
    (0..n).map(|_| rng.int(-128, 127) as i8).collect()
}

/// int8 → int32: exact.
fn check_int8(cv: &Conv2d, seed: u64, emu: bool) -> CoreRun {
    let mut rng = Rng(seed | 1);
    let x = random_i8(&mut rng, cv.input.elems());
    let cg = if cv.depthwise {
        1
    } else {
        cv.input.channels / cv.groups
    };
    let k = random_i8(
        &mut rng,
        (cv.out_channels * cv.kernel.0 * cv.kernel.1 * cg) as usize,
    );
    let input = cv.pack_input(&x).unwrap();
    let weights = cv.pack_weights(&k).unwrap();
    let xs: Vec<i64> = x.iter().map(|&v| v as i64).collect();
    let ks: Vec<i64> = k.iter().map(|&v| v as i64).collect();
    let (_, _, want) = direct(cv, &xs, &ks, cv.pad_value as i64);
    let (run, bytes) = simulate(cv, input.clone(), weights.clone());
    let got: Vec<i32> = cv.unpack_output(&bytes).unwrap();
    let got: Vec<i64> = got.into_iter().map(i64::from).collect();
    assert_eq!(got, want, "{cv:?}");
    if emu {
        let bytes = emulate(cv, input, weights);
        let got: Vec<i32> = cv.unpack_output(&bytes).unwrap();
        assert_eq!(got.into_iter().map(i64::from).collect::<Vec<_>>(), want);
    }
    run
}

/// fp16 → fp16: small integers scaled by 1/8, so products and sums are exact in fp32
/// and the only rounding is the final fp16 one; checked to half an fp16 ulp... plus the
/// f32 accumulation of |terms|, bounded by 2^-23 · Σ|x·w| per output.
fn check_fp16(cv: &Conv2d, seed: u64, emu: bool) -> CoreRun {
    let mut rng = Rng(seed | 1);
    let cg = if cv.depthwise {
        1
    } else {
        cv.input.channels / cv.groups
    };
    let nk = (cv.out_channels * cv.kernel.0 * cv.kernel.1 * cg) as usize;
    let x: Vec<f16> = (0..cv.input.elems())
        .map(|_| f16::from_f32(rng.int(-16, 16) as f32 / 8.0))
        .collect();
    let k: Vec<f16> = (0..nk)
        .map(|_| f16::from_f32(rng.int(-16, 16) as f32 / 8.0))
        .collect();
    let input = cv.pack_input(&x).unwrap();
    let weights = cv.pack_weights(&k).unwrap();
    // Exact in integers of 1/64.
    let xs: Vec<i64> = x.iter().map(|v| (v.to_f32() * 8.0) as i64).collect();
    let ks: Vec<i64> = k.iter().map(|v| (v.to_f32() * 8.0) as i64).collect();
    let (_, _, want) = direct(cv, &xs, &ks, 0);
    let check = |bytes: &[u8]| {
        let got: Vec<f16> = cv.unpack_output(bytes).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let exact = *w as f64 / 64.0;
            let tol = exact.abs() * 2f64.powi(-11) + 1e-6;
            assert!(
                (g.to_f64() - exact).abs() <= tol,
                "{cv:?} output {i}: {g} vs {exact}"
            );
        }
    };
    let (run, bytes) = simulate(cv, input.clone(), weights.clone());
    check(&bytes);
    if emu {
        check(&emulate(cv, input, weights));
    }
    run
}

fn unvalidated(run: &CoreRun) -> usize {
    run.lints
        .iter()
        .filter(|l| l.kind == rknpu_driver::sim::LintKind::Unvalidated)
        .count()
}

#[test]
fn a_padded_3x3_int8_convolution_runs_clean_on_the_emulated_kernel() {
    let cv = Conv2d::new(Cube::new(7, 6, 20, Precision::Int8).unwrap(), 24, (3, 3))
        .with_pad_symmetric(1)
        .with_pad_value(-128);
    let run = check_int8(&cv, 1, true);
    assert!(run.lints.is_empty(), "{:?}", run.lints);
}

#[test]
fn a_strided_fp16_convolution_runs_on_the_emulated_kernel() {
    let cv = Conv2d::new(Cube::new(9, 8, 40, Precision::Fp16).unwrap(), 20, (3, 3))
        .with_stride(2, 2)
        .with_pad(Padding {
            top: 1,
            left: 2,
            bottom: 0,
            right: 1,
        });
    let run = check_fp16(&cv, 2, true);
    assert_eq!(unvalidated(&run), 0, "{:?}", run.lints);
}

#[test]
fn depthwise_and_dilated_convolutions_run() {
    let dw = Conv2d::new(Cube::new(6, 5, 40, Precision::Fp16).unwrap(), 40, (3, 3))
        .with_depthwise(true)
        .with_pad_symmetric(1);
    check_fp16(&dw, 3, true);
    let dw8 = Conv2d::new(Cube::new(5, 5, 24, Precision::Int8).unwrap(), 24, (3, 3))
        .with_depthwise(true)
        .with_pad_symmetric(2)
        .with_dilation(2, 2);
    // int8 dilation and depthwise dilation are derived, and say so.
    let run = check_int8(&dw8, 4, false);
    assert_eq!(unvalidated(&run), 2, "{:?}", run.lints);
    let dil =
        Conv2d::new(Cube::new(8, 7, 16, Precision::Fp16).unwrap(), 16, (3, 2)).with_dilation(2, 3);
    let run = check_fp16(&dil, 5, false);
    assert_eq!(unvalidated(&run), 0, "{:?}", run.lints);
}

#[test]
fn grouped_convolutions_are_one_set_of_tasks_per_group() {
    let cv = Conv2d::new(Cube::new(4, 4, 64, Precision::Int8).unwrap(), 64, (3, 3))
        .with_groups(2)
        .with_pad_symmetric(1);
    let tasks = cv
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
        )
        .unwrap();
    assert_eq!(tasks.len(), 2);
    check_int8(&cv, 6, true);
}

#[test]
fn tall_inputs_are_cut_into_bands_of_rows() {
    // 120 × 40 × 64 fp16 rows of 5120 bytes: 600 KiB, more than the data banks.
    let cv = Conv2d::new(Cube::new(40, 120, 64, Precision::Fp16).unwrap(), 16, (3, 3))
        .with_pad_symmetric(1);
    let tasks = cv
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
        )
        .unwrap();
    assert!(tasks.len() >= 2, "{} tasks", tasks.len());
    // Only the first band is padded on top.
    let tops: Vec<u32> = tasks
        .iter()
        .map(|t| t.cna.as_ref().unwrap().kernel.pad_top)
        .collect();
    assert_eq!(tops[0], 1);
    assert!(tops[1..].iter().all(|&t| t == 0), "{tops:?}");
    // Later bands keep the weights the first loaded (they fit the weight banks).
    let reuse: Vec<bool> = tasks
        .iter()
        .map(|t| t.cna.as_ref().unwrap().cbuf.weight_reuse)
        .collect();
    assert!(!reuse[0] && reuse[1..].iter().all(|&r| r), "{reuse:?}");
    check_fp16(&cv, 7, true);
    // int8, stride 2.
    let cv = Conv2d::new(
        Cube::new(48, 100, 128, Precision::Int8).unwrap(),
        32,
        (3, 3),
    )
    .with_stride(2, 1)
    .with_pad_symmetric(1);
    assert!(
        cv.tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0))
        )
        .unwrap()
        .len()
            >= 2
    );
    check_int8(&cv, 8, false);
}

#[test]
fn a_tall_narrow_input_keeps_bands_within_the_fetch_ahead_field() {
    // 3000 rows of 1 × 32 fp16: the CBUF would hold them all, FEATURE_GRAINS not.
    let cv = Conv2d::new(Cube::new(1, 3000, 32, Precision::Fp16).unwrap(), 16, (3, 1));
    let tasks = cv
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
        )
        .unwrap();
    assert_eq!(tasks.len(), 3);
    let run = check_fp16(&cv, 11, false);
    assert!(run.lints.is_empty(), "{:?}", run.lints);
}

#[test]
fn wide_kernels_are_cut_into_kernel_tiles() {
    // 3·3·640 fp16 = 11 520 bytes a kernel: a group of 32 needs 12 banks, of 16 six.
    let cv = Conv2d::new(Cube::new(3, 3, 640, Precision::Fp16).unwrap(), 48, (3, 3));
    let tasks = cv
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
        )
        .unwrap();
    assert_eq!(tasks.len(), 3);
    check_fp16(&cv, 9, true);
}

#[test]
fn int8_requantisation_follows_the_converter() {
    let m = 0.0123f32;
    let cv = Conv2d::new(Cube::new(5, 5, 32, Precision::Int8).unwrap(), 32, (3, 3))
        .with_pad_symmetric(1)
        .with_out(ConvOut::Int8 { multiplier: m });
    let (scale, shift) = conv::requant_scale_shift(m).unwrap();
    // The converter's fixed point is the multiplier within its 15-bit mantissa.
    assert!(((scale as f64 / 2f64.powi(shift as i32)) / m as f64 - 1.0).abs() < 1e-4);
    let mut rng = Rng(10);
    let x = random_i8(&mut rng, cv.input.elems());
    let k = random_i8(&mut rng, 32 * 9 * 32);
    let xs: Vec<i64> = x.iter().map(|&v| v as i64).collect();
    let ks: Vec<i64> = k.iter().map(|&v| v as i64).collect();
    let (_, _, acc) = direct(&cv, &xs, &ks, 0);
    let want: Vec<i8> = acc
        .iter()
        .map(|&a| {
            // round half to even of a·scale / 2^shift, then saturate.
            let v = a * scale as i64;
            let q = v >> shift;
            let rem = v - (q << shift);
            let half = 1i64 << (shift - 1);
            let r = if rem > half || (rem == half && q & 1 == 1) {
                q + 1
            } else {
                q
            };
            r.clamp(-128, 127) as i8
        })
        .collect();
    let bytes = emulate(
        &cv,
        cv.pack_input(&x).unwrap(),
        cv.pack_weights(&k).unwrap(),
    );
    let got: Vec<i8> = cv.unpack_output(&bytes).unwrap();
    assert_eq!(got, want);
    // And close to the real multiplier.
    for (g, a) in got.iter().zip(&acc) {
        let exact = (*a as f64 * m as f64).clamp(-128.0, 127.0);
        assert!((*g as f64 - exact).abs() <= 1.0, "{g} vs {exact}");
    }
}

#[test]
fn shapes_beyond_the_registers_are_refused() {
    let c = |w, h, ch, p| Cube::new(w, h, ch, p).unwrap();
    let bad = [
        Conv2d::new(c(4, 4, 8, Precision::Int16), 16, (3, 3)),
        Conv2d::new(c(4, 4, 8, Precision::Int8), 16, (0, 3)),
        Conv2d::new(c(4, 4, 8, Precision::Int8), 16, (3, 3)).with_stride(8, 1),
        Conv2d::new(c(4, 4, 8, Precision::Int8), 16, (3, 3)).with_pad_symmetric(3),
        Conv2d::new(c(2, 2, 8, Precision::Int8), 16, (5, 5)),
        Conv2d::new(c(4, 4, 8, Precision::Int8), 16, (3, 3)).with_out(ConvOut::Fp16),
        Conv2d::new(c(4, 4, 8, Precision::Int8), 16, (3, 3)).with_depthwise(true),
        Conv2d::new(c(4, 4, 48, Precision::Int8), 48, (3, 3)).with_groups(3),
        Conv2d::new(c(4, 4, 64, Precision::Int8), 48, (3, 3)).with_groups(2),
        Conv2d::new(c(4, 4, 8, Precision::Int8), 0, (3, 3)),
        Conv2d::new(c(4, 4, 8, Precision::Int8), 16, (3, 3)).with_out(ConvOut::Int8 {
            multiplier: f32::NAN,
        }),
        // One kernel of 3·3·8192 fp16 does not fit the CBUF.
        Conv2d::new(c(3, 3, 8192, Precision::Fp16), 16, (3, 3)),
    ];
    for cv in bad {
        let r = cv.tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
        );
        assert!(r.is_err(), "{cv:?}");
    }
}

#[test]
fn golden_programs() {
    let cases = [
        (
            "conv-fp16-3x3-pad1",
            Conv2d::new(Cube::new(14, 14, 32, Precision::Fp16).unwrap(), 32, (3, 3))
                .with_pad_symmetric(1),
        ),
        (
            "conv-int8-depthwise-s2",
            Conv2d::new(Cube::new(8, 8, 64, Precision::Int8).unwrap(), 64, (3, 3))
                .with_depthwise(true)
                .with_stride(2, 2)
                .with_pad_symmetric(1),
        ),
        (
            "conv-fp16-bands",
            Conv2d::new(Cube::new(40, 40, 160, Precision::Fp16).unwrap(), 32, (3, 3)),
        ),
    ];
    for (name, cv) in cases {
        let tasks = cv
            .tasks(
                &Bindings::new()
                    .bind(Role::Input, ops::at(ops::INPUT, 0))
                    .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                    .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
            )
            .unwrap();
        let program = ops::chain(&tasks).unwrap();
        // The unbound program's decoded text (relocations named), as `rknpu decode` prints it.
        let text = program.decode().to_text(None);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/ops")
            .join(format!("{name}.txt"));
        common::check_text_fixture(&path, &text);
    }
}

fn shape() -> impl Strategy<Value = (Conv2d, bool)> {
    (
        (1u32..=12, 1u32..=12, 1u32..=40, 1u32..=40),
        prop::sample::select(vec![1u32, 2, 3, 5]),
        prop::sample::select(vec![1u32, 2, 3, 5]),
        (1u32..=2, 1u32..=2, 1u32..=2, 1u32..=2),
        (0u32..=2, 0u32..=2, 0u32..=2, 0u32..=2),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_filter_map(
            "the window fits",
            |((h, w, c, oc), kh, kw, (sy, sx, dy, dx), (pt, pl, pb, pr), dw, fp16)| {
                let p = if fp16 {
                    Precision::Fp16
                } else {
                    Precision::Int8
                };
                let ey = (kh - 1) * dy + 1;
                let ex = (kw - 1) * dx + 1;
                let pad = Padding {
                    top: pt.min(ey - 1),
                    left: pl.min(ex - 1),
                    bottom: pb.min(ey - 1),
                    right: pr.min(ex - 1),
                };
                if h + pad.top + pad.bottom < ey || w + pad.left + pad.right < ex {
                    return None;
                }
                let cv = Conv2d::new(
                    Cube::new(w, h, c, p).ok()?,
                    if dw { c } else { oc },
                    (kh, kw),
                )
                .with_stride(sy, sx)
                .with_dilation(dy, dx)
                .with_pad(pad)
                .with_depthwise(dw);
                Some((cv, fp16))
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn convolutions_match_the_direct_reference((cv, fp16) in shape(), seed in any::<u64>()) {
        if fp16 {
            check_fp16(&cv, seed, true);
        } else {
            check_int8(&cv, seed, true);
        }
    }
}
