//! The generators' choice among equivalent forms by the cost model
//! (`kernels::ops::lower`): a one-channel-per-group convolution lowered to the depthwise
//! mode, and a tensor added in the convolution's DPU or by an element-wise task after it.
//! Every form runs on the emulated kernels (the simulator behind them) and is checked
//! against a plain f64 convolution written here.

mod common;

use common::Rng;
use half::f16;
use rknpu_driver::compute::ops::{ProgramBuffers, run_program};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::kernels::ops::conv::{Conv2d, ConvOut};
use rknpu_driver::kernels::ops::lower::AddForm;
use rknpu_driver::kernels::ops::{self, Cube};
use rknpu_driver::task::{Precision, Task};

const SPECS: [&str; 2] = ["emu", "emu:rocket"];

/// `conv` (stride 1, symmetric padding of half the window) of `x` (`[h][w][c]`) with `k`
/// (`[oc][kh][kw][c / groups]`), plain loops in f64: the sums and the sums of magnitudes.
fn reference(cv: &Conv2d, groups: u32, x: &[f64], k: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (h, w, c) = (cv.input.height, cv.input.width, cv.input.channels);
    let (oc, (kh, kw)) = (cv.out_channels, cv.kernel);
    let (cg, og) = (c / groups, oc / groups);
    let pad = (kh / 2) as i64;
    let mut sums = vec![0f64; (h * w * oc) as usize];
    let mut mags = sums.clone();
    for oy in 0..h {
        for ox in 0..w {
            for o in 0..oc {
                let g = o / og;
                let at = ((oy * w + ox) * oc + o) as usize;
                for ky in 0..kh {
                    for kx in 0..kw {
                        let (iy, ix) = (oy as i64 + ky as i64 - pad, ox as i64 + kx as i64 - pad);
                        if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                            continue;
                        }
                        for i in 0..cg {
                            let xv = x[((iy as u32 * w + ix as u32) * c + g * cg + i) as usize];
                            let kv = k[(((o * kh + ky) * kw + kx) * cg + i) as usize];
                            sums[at] += xv * kv;
                            mags[at] += (xv * kv).abs();
                        }
                    }
                }
            }
        }
    }
    (sums, mags)
}

/// Runs `tasks` as one program on `spec` with the packed input, weights and operand.
fn run(spec: &str, tasks: &[Task], bufs: [&[u8]; 3], out_bytes: usize) -> Vec<u8> {
    let dev = Device::open_spec(spec).unwrap();
    let mut o = run_program(
        &dev,
        &ops::chain(tasks).unwrap(),
        ProgramBuffers::new()
            .input(ops::INPUT, bufs[0].to_vec())
            .input(ops::WEIGHTS, bufs[1].to_vec())
            .input(ops::OPERAND, bufs[2].to_vec())
            .output(ops::OUTPUT, out_bytes),
    )
    .unwrap_or_else(|e| panic!("{spec}: {e}"));
    o.remove(0)
}

/// The input, weights, operand and output each at offset 0 of its role's buffer.
fn addresses() -> Bindings {
    [Role::Input, Role::Weights, Role::Operand, Role::Output]
        .into_iter()
        .fold(Bindings::new(), |b, r| b.bind(r, ops::at(r.buffer(), 0)))
}

/// A grouped fp16 convolution of one channel per group, which the grouped path refuses,
/// runs in the depthwise mode and gives the reference's values within the fp16 bound
/// (`1e-4 · Σ|x·w|` plus one fp16 ulp).
#[test]
fn one_channel_groups_run_in_the_depthwise_mode() {
    let c = 40;
    let cube = Cube::new(8, 6, c, Precision::Fp16).unwrap();
    let grouped = Conv2d::new(cube, c, (3, 3))
        .with_pad_symmetric(1)
        .with_groups(c);
    assert!(grouped.check().is_err());
    let cv = grouped.lowered().unwrap();
    assert!(cv.depthwise && cv.groups == 1, "{cv:?}");

    let mut rng = Rng(0x10e4);
    let x: Vec<f16> = (0..6 * 8 * c).map(|_| f16::from_f32(rng.float())).collect();
    let k: Vec<f16> = (0..c * 9).map(|_| f16::from_f32(rng.float())).collect();
    let wide = |v: &[f16]| v.iter().map(|e| f64::from(e.to_f32())).collect::<Vec<_>>();
    let (want, mag) = reference(&grouped, c, &wide(&x), &wide(&k));
    let tasks = cv.tasks(&addresses()).unwrap();
    let bufs = [
        &cv.pack_input(&x).unwrap()[..],
        &cv.pack_weights(&k).unwrap()[..],
        &[0u8; 64][..],
    ];
    let out_bytes = cv.output_cube().unwrap().bytes() as usize;
    for spec in SPECS {
        let got: Vec<f16> = cv
            .unpack_output(&run(spec, &tasks, bufs, out_bytes))
            .unwrap();
        assert_eq!(got.len(), want.len());
        for (at, ((g, &e), &m)) in got.iter().zip(&want).zip(&mag).enumerate() {
            let ulp = f64::from(f16::from_f64(e.abs()).to_f32()).max(6.1e-5) * 2f64.powi(-10);
            let have = f64::from(g.to_f32());
            assert!(
                (have - e).abs() <= 1e-4 * m + ulp,
                "{spec} [{at}]: {have} vs {e}"
            );
        }
    }
}

/// Other convolutions are returned as they are: a plain one, and a grouped one of 32
/// channels per group; one neither form takes is its check's error.
#[test]
fn other_convolutions_are_not_lowered() {
    let cube = Cube::new(4, 4, 64, Precision::Fp16).unwrap();
    for cv in [
        Conv2d::new(cube, 16, (3, 3)).with_pad_symmetric(1),
        Conv2d::new(cube, 64, (1, 1)).with_groups(2),
    ] {
        assert_eq!(cv.lowered().unwrap(), cv);
    }
    assert!(
        Conv2d::new(cube, 64, (3, 3))
            .with_groups(0)
            .lowered()
            .is_err()
    );
    assert!(
        Conv2d::new(cube, 64, (1, 1))
            .with_groups(32)
            .lowered()
            .is_err()
    );
}

/// `output = conv(input) + operand`: fused into the convolution's DPU where the board-run
/// geometry applies (fp16 whole planes of at least 12 atoms), an element-wise add task
/// after it elsewhere (a 3×3 plane of 9 atoms, and int8 → int8); each form checked
/// against the reference plus the operand.
#[test]
fn a_tensor_add_is_fused_where_it_applies_and_separate_elsewhere() {
    let profile = HardwareProfile::rk3588();
    let fp16 = |w, h, c| Cube::new(w, h, c, Precision::Fp16).unwrap();
    for (cv, form) in [
        (
            Conv2d::new(fp16(6, 6, 32), 16, (3, 3)).with_pad_symmetric(1),
            AddForm::Fused,
        ),
        (Conv2d::new(fp16(3, 3, 32), 16, (1, 1)), AddForm::Separate),
    ] {
        let (tasks, chosen) = cv.tasks_adding(&addresses(), &profile).unwrap();
        assert_eq!(chosen, form, "{cv:?}");
        let (h, w, c, oc) = (
            cv.input.height,
            cv.input.width,
            cv.input.channels,
            cv.out_channels,
        );
        let mut rng = Rng(0xadd0 + u64::from(h));
        let f = |rng: &mut Rng| f16::from_f32(rng.float());
        let x: Vec<f16> = (0..h * w * c).map(|_| f(&mut rng)).collect();
        let k: Vec<f16> = (0..oc * cv.kernel.0 * cv.kernel.1 * c)
            .map(|_| f(&mut rng))
            .collect();
        let r: Vec<f16> = (0..h * w * oc).map(|_| f(&mut rng)).collect();
        let wide = |v: &[f16]| v.iter().map(|e| f64::from(e.to_f32())).collect::<Vec<_>>();
        let (sums, mag) = reference(&cv, 1, &wide(&x), &wide(&k));
        let out_cube = cv.output_cube().unwrap();
        let bufs = [
            &cv.pack_input(&x).unwrap()[..],
            &cv.pack_weights(&k).unwrap()[..],
            &out_cube.pack(&r).unwrap()[..],
        ];
        for spec in SPECS {
            let out = run(spec, &tasks, bufs, out_cube.bytes() as usize);
            let got: Vec<f16> = cv.unpack_output(&out).unwrap();
            for at in 0..got.len() {
                let rv = f64::from(r[at].to_f32());
                let want = sums[at] + rv;
                let ulp =
                    f64::from(f16::from_f64(want.abs()).to_f32()).max(6.1e-5) * 2f64.powi(-10);
                // The separate form rounds the convolution to fp16 before the add: one
                // more ulp of it.
                let conv_ulp = f64::from(f16::from_f64(sums[at].abs()).to_f32()) * 2f64.powi(-10);
                let allowed = 1e-4 * mag[at] + rv.abs() * 2f64.powi(-11) + ulp + conv_ulp;
                let have = f64::from(got[at].to_f32());
                assert!(
                    (have - want).abs() <= allowed,
                    "{spec} {form:?} [{at}]: {have} vs {want} ± {allowed}"
                );
            }
        }
    }
    // int8 in and out: the element-wise path adds int8 tensors.
    let int8 = Conv2d::new(Cube::new(6, 6, 32, Precision::Int8).unwrap(), 32, (1, 1))
        .with_out(ConvOut::Int8 { multiplier: 0.01 });
    match int8.tasks_adding(&addresses(), &profile) {
        Ok((_, form)) => assert_eq!(form, AddForm::Separate),
        Err(e) => panic!("int8 add: {e}"),
    }
}
