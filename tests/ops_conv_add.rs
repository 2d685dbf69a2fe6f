//! A convolution with a tensor added in its own DPU (`kernels::ops::residual`, the
//! `COMB_USE` 5 path of board-run programs) against an independent CPU reference: a plain
//! f64 convolution over row-major data written here, plus the operand. The tolerance is
//! the one the board-run corpus uses for fp16 convolutions: `1e-4 · Σ|x·w| + |r|·2⁻¹¹ +`
//! one fp16 ulp of the result (fp32 accumulation, the add, one fp16 rounding).

mod common;

use common::Rng;
use half::f16;
use rknpu_driver::compute::ops::{ProgramBuffers, run_program};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::ops::contract::{Bindings, Role};
use rknpu_driver::kernels::ops::conv::Conv2d;
use rknpu_driver::kernels::ops::{self, Cube};
use rknpu_driver::regcmd::{BufferId, words_to_le_bytes};
use rknpu_driver::sim::{Kick, Simulator};
use rknpu_driver::task::Precision;

/// The input, weights, operand and output each at offset 0 of its role's buffer.
fn slots() -> Bindings {
    [Role::Input, Role::Weights, Role::Operand, Role::Output]
        .into_iter()
        .fold(Bindings::new(), |b, r| b.bind(r, ops::at(r.buffer(), 0)))
}

fn program(cv: &Conv2d) -> rknpu_driver::regcmd::Program {
    let tasks = cv.tasks_with_add(&slots()).unwrap();
    ops::chain(&tasks).unwrap()
}

fn addr(b: BufferId) -> Option<u64> {
    Some(0x1000_0000 * (b.0 as u64 + 1))
}

/// Runs on the simulator (no lint allowed) and on the three emulated kernels; returns
/// each output.
fn run(cv: &Conv2d, input: &[u8], weights: &[u8], operand: &[u8]) -> Vec<Vec<u8>> {
    let p = program(cv);
    let out_bytes = cv.output_cube().unwrap().bytes() as usize;
    let a = |b: BufferId| addr(b).unwrap() as u32;
    let mut sim = Simulator::new();
    let m = sim.memory_mut();
    m.map(a(ops::REGCMD), words_to_le_bytes(&p.bind(addr).unwrap()))
        .unwrap();
    m.map(a(ops::INPUT), input.to_vec()).unwrap();
    m.map(a(ops::WEIGHTS), weights.to_vec()).unwrap();
    m.map(a(ops::OPERAND), operand.to_vec()).unwrap();
    m.map_zeroed(a(ops::OUTPUT), out_bytes).unwrap();
    let r = sim
        .kick(&Kick::new(a(ops::REGCMD), p.tasks()[0].regcfg_amount))
        .unwrap();
    assert!(r.completed && r.lints.is_empty(), "{r:?}");
    let mut outs = vec![sim.memory().read_vec(a(ops::OUTPUT), out_bytes).unwrap()];
    for spec in ["emu", "emu:rocket", "emu:vendor-0.9.6"] {
        let dev = Device::open_spec(spec).unwrap();
        let mut o = run_program(
            &dev,
            &p,
            ProgramBuffers::new()
                .input(ops::INPUT, input.to_vec())
                .input(ops::WEIGHTS, weights.to_vec())
                .input(ops::OPERAND, operand.to_vec())
                .output(ops::OUTPUT, out_bytes),
        )
        .unwrap();
        outs.push(o.remove(0));
    }
    outs
}

fn check(cv: Conv2d, seed: u64) {
    let mut rng = Rng(seed | 1);
    let (h, w, c) = (cv.input.height, cv.input.width, cv.input.channels);
    let (oc, (kh, kw)) = (cv.out_channels, cv.kernel);
    let f = |rng: &mut Rng| f16::from_f32(rng.float());
    let x: Vec<f16> = (0..h * w * c).map(|_| f(&mut rng)).collect();
    let k: Vec<f16> = (0..oc * kh * kw * c).map(|_| f(&mut rng)).collect();
    let (oh, ow) = (h, w); // stride 1, "same" padding
    let r: Vec<f16> = (0..oh * ow * oc).map(|_| f(&mut rng)).collect();
    let operand = cv.output_cube().unwrap().pack(&r).unwrap();
    let outs = run(
        &cv,
        &cv.pack_input(&x).unwrap(),
        &cv.pack_weights(&k).unwrap(),
        &operand,
    );
    let pad = (kh / 2) as i64;
    for (n, bytes) in outs.iter().enumerate() {
        let got: Vec<f16> = cv.unpack_output(bytes).unwrap();
        for oy in 0..oh {
            for ox in 0..ow {
                for o in 0..oc {
                    let (mut sum, mut mag) = (0f64, 0f64);
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let (iy, ix) =
                                (oy as i64 + ky as i64 - pad, ox as i64 + kx as i64 - pad);
                            if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                continue;
                            }
                            for i in 0..c {
                                let xv = x[((iy as u32 * w + ix as u32) * c + i) as usize];
                                let kv = k[(((o * kh + ky) * kw + kx) * c + i) as usize];
                                let p = f64::from(xv.to_f32()) * f64::from(kv.to_f32());
                                sum += p;
                                mag += p.abs();
                            }
                        }
                    }
                    let rv = f64::from(r[((oy * ow + ox) * oc + o) as usize].to_f32());
                    let want = sum + rv;
                    let at = ((oy * ow + ox) * oc + o) as usize;
                    let have = f64::from(got[at].to_f32());
                    let ulp =
                        f64::from(f16::from_f64(want.abs()).to_f32()).max(6.1e-5) * 2f64.powi(-10);
                    let allowed = 1e-4 * mag + rv.abs() * 2f64.powi(-11) + ulp;
                    assert!(
                        (have - want).abs() <= allowed,
                        "run {n} ({oy},{ox},{o}): got {have}, want {want} ± {allowed}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_tensor_added_in_the_convolutions_dpu_matches_the_cpu() {
    let cube = |w, h, c| Cube::new(w, h, c, Precision::Fp16).unwrap();
    // 3×3 over 6×6 (36-atom planes), 32 → 16 channels.
    check(
        Conv2d::new(cube(6, 6, 32), 16, (3, 3)).with_pad_symmetric(1),
        7,
    );
    // 1×1 over 4×4 (16 atoms), 32 → 32 channels (four output surfaces).
    check(Conv2d::new(cube(4, 4, 32), 32, (1, 1)), 11);
}

#[test]
fn what_the_board_run_add_does_not_cover_is_refused() {
    let cube = |w, h, c| Cube::new(w, h, c, Precision::Fp16).unwrap();
    // A 3×3 plane (9 atoms) is below the 12 the board-run add floors at.
    let small = Conv2d::new(cube(3, 3, 32), 16, (1, 1));
    let e = small.tasks_with_add(&slots()).unwrap_err();
    assert!(e.to_string().contains("at least 12"), "{e}");
    // int8 is not fused.
    let int8 = Conv2d::new(Cube::new(4, 4, 32, Precision::Int8).unwrap(), 32, (1, 1));
    assert!(int8.tasks_with_add(&slots()).is_err());
}
