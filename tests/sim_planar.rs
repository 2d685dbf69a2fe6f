//! The convolution over the CNA's 1-channel planar input (docs/hardware/convolution.md#planar-input)
//! from typed task values, without captures: the simulator's output against a CPU
//! computation made here, and the refusals of what no board-run program shows.

use rknpu_driver::kernels::ops::contract::{Bindings, Op, Role};
use rknpu_driver::sim::{Kick, SimError, Simulator};

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// A planar-input convolution built from task values (no capture needed): the vendor's
/// registers for a `w` × `h` 1-channel fp16 input (docs/hardware/convolution.md#planar-input)
/// on a 1×1 convolution task of the generator, one kernel, 16 CORE channels.
fn planar_task(w: u32, h: u32) -> rknpu_driver::task::Task {
    use rknpu_driver::kernels::ops::conv::Conv2d;
    use rknpu_driver::kernels::ops::{self, Cube};
    use rknpu_driver::task::Precision;
    let cv = Conv2d::new(Cube::new(w, h, 32, Precision::Fp16).unwrap(), 16, (1, 1));
    let mut t = cv
        .tasks(
            &Bindings::new()
                .bind(Role::Input, ops::at(ops::INPUT, 0))
                .bind(Role::Weights, ops::at(ops::WEIGHTS, 0))
                .bind(Role::Output, ops::at(ops::OUTPUT, 0)),
        )
        .unwrap()
        .remove(0);
    let cna = t.cna.as_mut().unwrap();
    let pw = w.next_multiple_of(8);
    let f = &mut cna.feature;
    f.channels = 8;
    f.channels_real = 1;
    f.planar_width = Some(pw);
    f.group_line_off = true;
    f.line_stride = pw;
    f.surf_stride = (pw * (h - 1)) as i32;
    cna.cbuf.data_entries = pw * h;
    cna.weights.kernels = 1;
    cna.cvt.per_channel = 0xFFFF;
    t.dpu.as_mut().unwrap().orig_channels = 1;
    t
}

/// Runs one task on the simulator: input (planar lines), 16 bytes of weights, output.
fn run_planar(
    t: &rknpu_driver::task::Task,
    input: Vec<u8>,
    weights: Vec<u8>,
    out_bytes: usize,
) -> Result<(rknpu_driver::sim::CoreRun, Vec<u8>), SimError> {
    use rknpu_driver::kernels::ops;
    use rknpu_driver::regcmd::{BufferId, words_to_le_bytes};
    let program = ops::chain(std::slice::from_ref(t)).unwrap();
    let addr = |b: BufferId| Some(0x1000_0000 * (b.0 as u64 + 1));
    let a = |b: BufferId| addr(b).unwrap() as u32;
    let words = program.bind(addr).unwrap();
    let mut sim = Simulator::new();
    let mem = sim.memory_mut();
    mem.map(a(ops::REGCMD), words_to_le_bytes(&words))?;
    mem.map(a(ops::INPUT), input)?;
    mem.map(a(ops::WEIGHTS), weights)?;
    mem.map_zeroed(a(ops::OUTPUT), out_bytes)?;
    let r = sim.kick(&Kick::new(a(ops::REGCMD), program.tasks()[0].regcfg_amount))?;
    let out = sim.memory().read_vec(a(ops::OUTPUT), out_bytes).unwrap();
    Ok((r, out))
}

/// Over seeded planar inputs of widths that do and do not need padding, the planar
/// convolution's output channel 0 is x·w (f32 product rounded to fp16, computed here
/// from the row-major input), channels 1..15 zero; the padding columns, filled with a
/// large value, are never read; the run raises `unvalidated` for the zero channels.
#[test]
fn planar_convolution_from_task_values_against_the_cpu() {
    for (w, h, seed) in [(7u32, 5u32, 1u64), (10, 3, 2), (16, 4, 3), (85, 2, 4)] {
        let pw = w.next_multiple_of(8) as usize;
        let (wu, hu) = (w as usize, h as usize);
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) % 2048) as f32 / 128.0 - 8.0
        };
        let mut x = vec![0f32; wu * hu];
        let mut input = vec![0u8; pw * hu * 2];
        for y in 0..hu {
            for c in 0..pw {
                let v = if c < wu { next() } else { 30000.0 };
                if c < wu {
                    x[y * wu + c] = v;
                }
                let b = half::f16::from_f32(v).to_bits().to_le_bytes();
                input[2 * (y * pw + c)..2 * (y * pw + c) + 2].copy_from_slice(&b);
            }
        }
        let wv = 0.75f32;
        let mut weights = vec![0u8; 16];
        weights[..2].copy_from_slice(&half::f16::from_f32(wv).to_bits().to_le_bytes());
        let t = planar_task(w, h);
        let out_bytes = 2 * 16 * wu * hu;
        let (r, out) = run_planar(&t, input, weights, out_bytes).unwrap();
        assert!(r.completed, "{w}x{h}: {r:?}");
        assert!(
            r.lints
                .iter()
                .any(|l| format!("{:?}", l.kind) == "Unvalidated"),
            "{w}x{h}: {:?}",
            r.lints
        );
        // fp16 output, 16 channels in two 8-channel surfaces of W·H atoms.
        for (p, &xp) in x.iter().enumerate() {
            let want = half::f16::from_f32(xp * wv).to_f32();
            assert_eq!(f16_at(&out, 16 * p), want, "{w}x{h} pixel {p}");
            for c in 1..16 {
                let at = (c / 8) * 16 * wu * hu + 16 * p + 2 * (c % 8);
                assert_eq!(f16_at(&out, at), 0.0, "{w}x{h} pixel {p} channel {c}");
            }
        }
    }
}

/// What no capture shows is refused by name: several kernels over the planar input, a
/// LINE_STRIDE other than DATAIN_WIDTH, DATA_ENTRIES other than DATAIN_WIDTH × rows, a
/// DATAIN_WIDTH other than the width rounded up to 8.
#[test]
fn planar_convolution_refusals_name_their_field() {
    use rknpu_driver::regs::cna;
    let (w, h) = (10u32, 3u32);
    type Change = fn(&mut rknpu_driver::task::Task);
    let cases: [(&str, Change); 4] = [
        (cna::WeightSize2::WEIGHT_KERNELS.name(), |t| {
            t.cna.as_mut().unwrap().weights.kernels = 2
        }),
        (cna::DmaCon1::LINE_STRIDE.name(), |t| {
            t.cna.as_mut().unwrap().feature.line_stride += 8
        }),
        (cna::CbufCon1::DATA_ENTRIES.name(), |t| {
            t.cna.as_mut().unwrap().cbuf.data_entries += 1
        }),
        (cna::DataSize0::DATAIN_WIDTH.name(), |t| {
            let f = &mut t.cna.as_mut().unwrap().feature;
            f.planar_width = Some(24);
            f.line_stride = 24;
        }),
    ];
    for (field, change) in cases {
        let mut t = planar_task(w, h);
        change(&mut t);
        let input = vec![0u8; 24 * h as usize * 2];
        match run_planar(&t, input, vec![0; 32], 2 * 16 * (w * h) as usize) {
            Err(SimError::Unsupported { field: f, .. })
            | Err(SimError::Inconsistent { field: f, .. }) => {
                assert_eq!(f, field)
            }
            other => panic!("{field}: {other:?}"),
        }
    }
}
