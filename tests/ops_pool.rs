//! Pooling on the PPU (`kernels::ops::pool`) through the emulated vendor kernel, against
//! an independent CPU definition (plain loops on row-major `[h][w][c]` values): max and
//! min exactly, the average within the error of its fp16 reciprocals; hand-computed
//! cases; refusals; golden decoded programs (fixtures/ops/pool-*.txt).

mod common;

use half::f16;
use proptest::prelude::*;
use rknpu_driver::Error;
use rknpu_driver::compute::ops::{ProgramBuffers, run_program};
use rknpu_driver::device::{BoFlags, Device, Job};
use rknpu_driver::kernels::ops::pool::{Pool2d, PoolKind, SCRATCH, reference};
use rknpu_driver::kernels::ops::{Cube, INPUT, OUTPUT};
use rknpu_driver::regcmd::{Program, words_to_le_bytes};
use rknpu_driver::task::Precision;
use std::path::PathBuf;

/// The pooling by definition: windows of the padded input, padding never wins max or
/// min and counts as 0 in an average over kw·kh positions.
fn cpu_pool(
    x: &[f64],
    (w, h, c): (usize, usize, usize),
    kind: PoolKind,
    (kw, kh): (usize, usize),
    (sx, sy): (usize, usize),
    [l, t, r, b]: [usize; 4],
) -> Vec<f64> {
    let ow = (w + l + r - kw) / sx + 1;
    let oh = (h + t + b - kh) / sy + 1;
    let mut out = Vec::new();
    for oy in 0..oh {
        for ox in 0..ow {
            for k in 0..c {
                let mut vals = Vec::new();
                for dy in 0..kh {
                    for dx in 0..kw {
                        let (py, px) = (oy * sy + dy, ox * sx + dx);
                        if py >= t && py - t < h && px >= l && px - l < w {
                            vals.push(x[((py - t) * w + (px - l)) * c + k]);
                        }
                    }
                }
                out.push(match kind {
                    PoolKind::Max => vals.iter().cloned().fold(f64::MIN, f64::max),
                    PoolKind::Min => vals.iter().cloned().fold(f64::MAX, f64::min),
                    _ => vals.iter().sum::<f64>() / (kw * kh) as f64,
                });
            }
        }
    }
    out
}

fn cpu(pool: &Pool2d, x: &[f64]) -> Vec<f64> {
    let i = &pool.input;
    let u = |v: u32| v as usize;
    cpu_pool(
        x,
        (u(i.width), u(i.height), u(i.channels)),
        pool.kind,
        (u(pool.kernel.0), u(pool.kernel.1)),
        (u(pool.stride.0), u(pool.stride.1)),
        pool.padding.map(u),
    )
}

/// Runs `pool` on the emulated vendor kernel with `x` (row-major, exactly representable
/// in the input type); the output as f64 values.
fn npu(pool: &Pool2d, x: &[f64]) -> Vec<f64> {
    let dev = Device::open_spec("emu").unwrap();
    let program = pool.program().unwrap();
    let input = &pool.input;
    let out = pool.output().unwrap();
    let bytes = match input.precision {
        Precision::Int8 => {
            let v: Vec<i8> = x.iter().map(|&v| v as i8).collect();
            input.pack(&v).unwrap()
        }
        _ => {
            let v: Vec<f16> = x.iter().map(|&v| f16::from_f64(v)).collect();
            input.pack(&v).unwrap()
        }
    };
    let scratch = pool.scratch_bytes().unwrap() as usize;
    let got = if scratch == 0 {
        let buffers = ProgramBuffers::new()
            .input(INPUT, bytes)
            .output(OUTPUT, out.bytes() as usize);
        run_program(&dev, &program, buffers).unwrap().remove(0)
    } else {
        run_chain(&dev, &program, bytes, out.bytes() as usize, scratch)
    };
    match out.precision {
        Precision::Int8 => out
            .unpack::<i8>(&got)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        _ => out
            .unpack::<f16>(&got)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
    }
}

/// A multi-pass program: its intermediates buffer is written by one pass and read by
/// the next, so the job names it among the buffers it reads and those it writes.
fn run_chain(
    dev: &Device,
    program: &Program,
    input: Vec<u8>,
    out: usize,
    scratch: usize,
) -> Vec<u8> {
    let mut i = dev.alloc(input.len(), BoFlags::default()).unwrap();
    i.write(0, &input).unwrap();
    let mut o = dev.alloc(out, BoFlags::default()).unwrap();
    let s = dev.alloc(scratch, BoFlags::default()).unwrap();
    let mut regcmd = dev.alloc(program.byte_len(), BoFlags::default()).unwrap();
    let words = program
        .bind(|id| {
            Some(u64::from(match id {
                INPUT => i.dma_addr(),
                OUTPUT => o.dma_addr(),
                SCRATCH => s.dma_addr(),
                _ => regcmd.dma_addr(),
            }))
        })
        .unwrap();
    regcmd.write(0, &words_to_le_bytes(&words)).unwrap();
    let job = Job::from_program(&regcmd, program)
        .reads(&i)
        .reads(&s)
        .writes(&s)
        .writes(&o);
    dev.submit(&job).unwrap();
    drop(job);
    let mut bytes = o.read_all().unwrap();
    bytes.truncate(out);
    bytes
}

/// Max and min exactly; an average within its fp16 reciprocals' error (each of
/// 65536/kw and 65536/kh rounded to fp16, ≤ 2^-11 relative) and the fp16 rounding of
/// the result.
fn assert_close(pool: &Pool2d, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = match pool.kind {
            PoolKind::Avg => (g - w).abs() <= 2e-3 * w.abs() + 1e-4,
            _ => g == w,
        };
        assert!(ok, "{pool:?}: element {i}: NPU {g}, CPU {w}");
    }
}

fn values(n: usize, seed: u64, int8: bool) -> Vec<f64> {
    let mut rng = common::Rng(seed | 1);
    (0..n)
        .map(|_| {
            if int8 {
                f64::from(rng.int(-128, 127))
            } else {
                f64::from(rng.int(-64, 64)) / 16.0
            }
        })
        .collect()
}

fn kind() -> impl Strategy<Value = PoolKind> {
    prop::sample::select(vec![PoolKind::Max, PoolKind::Avg, PoolKind::Min])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn fp16_pools_match_the_cpu_definition(
        (w, h) in (1u32..=9, 1u32..=9),
        c in prop::sample::select(vec![3u32, 8, 13, 16]),
        kind in kind(),
        (kw, kh) in (1u32..=4, 1u32..=4),
        (sx, sy) in (1u32..=3, 1u32..=3),
        pads in prop::array::uniform4(0u32..=3),
        seed in any::<u64>(),
    ) {
        let padding = [pads[0] % kw, pads[1] % kh, pads[2] % kw, pads[3] % kh];
        prop_assume!(kind != PoolKind::Avg || (kw > 1 && kh > 1));
        prop_assume!(w + padding[0] + padding[2] >= kw && h + padding[1] + padding[3] >= kh);
        let input = Cube::new(w, h, c, Precision::Fp16).unwrap();
        let pool = Pool2d::new(input, kind, 1)
            .with_kernel(kw, kh)
            .with_stride(sx, sy)
            .with_padding(padding);
        let x = values(input.elems(), seed, false);
        let want = cpu(&pool, &x);
        // The library's reference is the same definition.
        let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let lib: Vec<f64> = reference(&pool, &xf).unwrap().into_iter().map(f64::from).collect();
        for (a, b) in lib.iter().zip(&want) {
            prop_assert!((a - b).abs() <= 1e-6, "reference {a}, CPU {b}");
        }
        assert_close(&pool, &npu(&pool, &x), &want);
    }

    #[test]
    fn int8_max_and_min_match_exactly(
        (w, h) in (1u32..=8, 1u32..=8),
        c in prop::sample::select(vec![5u32, 16, 32]),
        min in any::<bool>(),
        (kw, kh) in (1u32..=3, 1u32..=3),
        (sx, sy) in (1u32..=2, 1u32..=2),
        pad in 0u32..=2,
        seed in any::<u64>(),
    ) {
        let kind = if min { PoolKind::Min } else { PoolKind::Max };
        // Padded int8 min has no pad value from any source: refused (below).
        let pad = if min { 0 } else { pad % kw.min(kh) };
        prop_assume!(w + 2 * pad >= kw && h + 2 * pad >= kh);
        let input = Cube::new(w, h, c, Precision::Int8).unwrap();
        let pool = Pool2d::new(input, kind, 1).with_kernel(kw, kh).with_stride(sx, sy).with_pad(pad);
        let x = values(input.elems(), seed, true);
        assert_close(&pool, &npu(&pool, &x), &cpu(&pool, &x));
    }
}

#[test]
fn global_pools_of_large_planes_run_as_chains() {
    for (w, h, kind) in [
        (64, 40, PoolKind::Avg),
        (20, 24, PoolKind::Max),
        (48, 32, PoolKind::Min),
        (12, 7, PoolKind::Avg),
    ] {
        let input = Cube::new(w, h, 16, Precision::Fp16).unwrap();
        let pool = Pool2d::global(input, kind);
        let x = values(input.elems(), u64::from(w * h), false);
        let got = npu(&pool, &x);
        assert_eq!(got.len(), 16);
        // A chain of averages compounds the reciprocals' error per pass.
        let want = cpu(&pool, &x);
        for (g, v) in got.iter().zip(&want) {
            let tol = if kind == PoolKind::Avg {
                4e-3 * v.abs() + 2e-4
            } else {
                0.0
            };
            assert!((g - v).abs() <= tol, "{w}x{h} {kind:?}: NPU {g}, CPU {v}");
        }
    }
}

#[test]
fn tall_inputs_split_by_output_rows() {
    // 1024 wide: at most 7 output rows per task; 10 rows of a 3x3 stride-1 padded max.
    let input = Cube::new(1024, 10, 8, Precision::Fp16).unwrap();
    let pool = Pool2d::new(input, PoolKind::Max, 3)
        .with_stride(1, 1)
        .with_pad(1);
    assert_eq!(pool.program().unwrap().tasks().len(), 2);
    let x = values(input.elems(), 7, false);
    assert_close(&pool, &npu(&pool, &x), &cpu(&pool, &x));
}

#[test]
fn hand_computed_averages() {
    // Nine ones through 3x3: the fp16 reciprocal 0x7555 = 21840 (65536/3 = 21845.3)
    // gives 9 · 21840² / 2^32 = 0.999511..., the fp16 just below 1.
    let input = Cube::new(3, 3, 8, Precision::Fp16).unwrap();
    let pool = Pool2d::new(input, PoolKind::Avg, 3);
    let got = npu(&pool, &[1.0; 72]);
    assert_eq!(got, vec![1.0 - 1.0 / 2048.0; 8]);
    // Padding 1 counts: four ones and five pads, 4 · 21840² / 2^32 = 0.444227...,
    // fp16 1820 / 4096.
    let pool = pool.with_pad(1);
    assert_eq!(npu(&pool, &[1.0; 72]), vec![1820.0 / 4096.0; 8]);
    // 2x2 with an exact reciprocal (2^15): (1 + 2 + 3 + 4) / 4 = 2.5.
    let input = Cube::new(2, 2, 8, Precision::Fp16).unwrap();
    let x: Vec<f64> = (1..=4).flat_map(|v| [f64::from(v); 8]).collect();
    assert_eq!(npu(&Pool2d::new(input, PoolKind::Avg, 2), &x), vec![2.5; 8]);
}

#[test]
fn padded_max_uses_minus_infinity() {
    // All values negative: a pad of 0 would win; -inf does not.
    let input = Cube::new(3, 3, 8, Precision::Fp16).unwrap();
    let pool = Pool2d::new(input, PoolKind::Max, 2)
        .with_stride(2, 2)
        .with_pad(1);
    let x: Vec<f64> = (0..9).flat_map(|p| [-1.0 - f64::from(p); 8]).collect();
    // Windows: {(0,0)}, {(1,0),(2,0)}, {(0,1),(0,2)}, {(1,1),(2,1),(1,2),(2,2)}.
    let want: Vec<f64> = [-1.0, -2.0, -4.0, -5.0]
        .iter()
        .flat_map(|&v| [v; 8])
        .collect();
    assert_eq!(npu(&pool, &x), want);
}

#[test]
fn refusals_are_typed() {
    let f = Cube::new(8, 8, 8, Precision::Fp16).unwrap();
    let i8c = f.with_precision(Precision::Int8).unwrap();
    let refused = |p: Pool2d| matches!(p.program(), Err(Error::Unsupported { .. }));
    assert!(refused(Pool2d::new(i8c, PoolKind::Avg, 2)));
    assert!(refused(Pool2d::new(i8c, PoolKind::Min, 3).with_pad(1)));
    assert!(refused(Pool2d::new(f, PoolKind::Avg, 1)));
    assert!(refused(Pool2d::new(f, PoolKind::Max, 17)));
    assert!(refused(Pool2d::new(f, PoolKind::Max, 2).with_stride(17, 1)));
    assert!(refused(Pool2d::new(f, PoolKind::Max, 3).with_pad(3)));
    let odd = Cube::new(17, 17, 8, Precision::Fp16).unwrap();
    assert!(refused(Pool2d::global(odd, PoolKind::Avg)));
    let bf = f.with_precision(Precision::Bf16).unwrap();
    assert!(refused(Pool2d::new(bf, PoolKind::Max, 2)));
}

#[test]
fn rocket_refuses_pooling_before_submission() {
    // Mainline rocket waits for the DPU interrupt pair only (docs/device.md).
    let dev = Device::open_spec("emu:rocket").unwrap();
    let input = Cube::new(4, 4, 8, Precision::Fp16).unwrap();
    let pool = Pool2d::new(input, PoolKind::Max, 2);
    let buffers = ProgramBuffers::new()
        .input(INPUT, vec![0; input.bytes() as usize])
        .output(OUTPUT, 64);
    match run_program(&dev, &pool.program().unwrap(), buffers) {
        Err(Error::NotOffered { what }) => assert!(what.contains("DPU interrupts"), "{what}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn golden_decoded_programs() {
    let f16c = |w, h, c| Cube::new(w, h, c, Precision::Fp16).unwrap();
    let cases = [
        (
            "pool-max-2x2-fp16",
            Pool2d::new(f16c(8, 8, 16), PoolKind::Max, 2),
        ),
        (
            "pool-avg-3x3-pad1-fp16",
            Pool2d::new(f16c(7, 7, 8), PoolKind::Avg, 3)
                .with_stride(2, 2)
                .with_pad(1),
        ),
        (
            "pool-global-avg-64x40-fp16",
            Pool2d::global(f16c(64, 40, 8), PoolKind::Avg),
        ),
        (
            "pool-max-1x1-int8",
            Pool2d::new(
                Cube::new(1, 1, 32, Precision::Int8).unwrap(),
                PoolKind::Max,
                1,
            ),
        ),
    ];
    for (name, pool) in cases {
        let program = pool.program().unwrap();
        let text = format!(
            "# {pool:?}\n# UPDATE_FIXTURES=1 cargo test --test ops_pool rewrites it\n{}",
            program.decode().to_text(None)
        );
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/ops/{name}.txt"));
        common::check_text_fixture(&path, &text);
    }
}

/// The average's error, kernel by kernel: within the bound its fp16 reciprocals allow.
/// Each reciprocal is off by e = |fp16(65536/k)·k/65536 − 1| (0 for powers of two,
/// 2.4·10⁻⁴ for most k, 3.1·10⁻⁴ for k = 11); the result is then rounded to fp16 (at most
/// 2^−11 relative), so |NPU − mean| ≤ (2e + 2^−11 + 10⁻⁶)·|mean|. `--nocapture` prints
/// the measured table (docs/ops.md "Pooling").
#[test]
fn average_error_stays_within_the_reciprocals_bound() {
    for k in 2..=16u32 {
        let input = Cube::new(2 * k, 2 * k, 32, Precision::Fp16).unwrap();
        let pool = Pool2d::new(input, PoolKind::Avg, k);
        let x = values(input.elems(), u64::from(k), false);
        let got = npu(&pool, &x);
        let want = cpu(&pool, &x);
        let r = f16::from_f64(65536.0 / f64::from(k)).to_f64();
        let e = (r * f64::from(k) / 65536.0 - 1.0).abs();
        let bound = 2.0 * e + 2f64.powi(-11) + 1e-6;
        let mut worst = 0f64;
        for (g, w) in got.iter().zip(&want) {
            let err = (g - w).abs();
            assert!(err <= bound * w.abs() + 1e-7, "k {k}: NPU {g}, mean {w}");
            if w.abs() > 0.05 {
                worst = worst.max(err / w.abs());
            }
        }
        eprintln!(
            "k {k:2}: reciprocal {:#06x}, its error {e:.1e}, worst relative error {worst:.1e} (bound {bound:.1e})",
            f16::from_f64(65536.0 / f64::from(k)).to_bits()
        );
    }
}
