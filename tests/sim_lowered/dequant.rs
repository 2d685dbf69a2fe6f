//! The dequantisation task: an int8 matmul writing fp32 results, then one dequantisation
//! task per row and 1024-channel chunk in the same chain, compared exactly with
//! `(acc as f32 · fp16(row_scale)) · fp16(w_scale)`; the typed errors of its builder; and
//! the simulator refusing any value the published program does not write.

use super::*;
use crate::common::lowered::push_k_waves;
use rknpu_driver::Error;
use rknpu_driver::float::{f16_to_f32, f32_to_f16};
use rknpu_driver::kernels::single::{OutType, dequant_task, pack_dequant_coefficients};
use rknpu_driver::regs::dpu_rdma;
use rknpu_driver::seeded::Rng;

const COEFFS: BufferId = BufferId(5);
const OUT: BufferId = BufferId(6);

/// Scales spanning fp16: its smallest sub-normal, 1, its largest finite value, a value
/// fp16 rounds, negative and zero.
const SCALES: [f32; 7] = [
    5.960_464_5e-8, // 2^-24
    1.0,
    65504.0,
    0.0137,
    -0.501,
    0.0,
    3.0e-3,
];

/// The matmul (int8 in, fp32 out, native `[N/4][M][4]` layout) and the chain of
/// dequantisation tasks after it.
struct Chain {
    mm: SingleMatmul,
    row_scales: Vec<f32>,
    w_scales: Vec<f32>,
}

impl Chain {
    fn new(m: u32, k: u32, n: u32) -> Chain {
        let mut mm = SingleMatmul::new(m, k, n, Dtype::Int8);
        mm.out = OutType::Fp32;
        mm.c_layout = Layout::Native;
        Chain {
            mm,
            row_scales: (0..m as usize).map(|i| SCALES[i % SCALES.len()]).collect(),
            w_scales: (0..n as usize)
                .map(|j| SCALES[(j * 3 + 1) % SCALES.len()])
                .collect(),
        }
    }

    /// The program: the matmul, then per row and chunk a dequantisation task.
    fn program(&self) -> (rknpu_driver::regcmd::Program, u32) {
        let mm = &self.mm;
        let (m, n) = (mm.m, mm.padded_n());
        let mut p = ProgramBuilder::new(single::REGCMD);
        p.push_task(mm.body().unwrap(), mm.enable());
        let mut tasks = 1;
        for row in 0..m {
            for n0 in (0..n).step_by(1024) {
                let channels = (n - n0).min(1024);
                p.push_task(
                    dequant_task(
                        m,
                        row,
                        channels,
                        self.row_scales[row as usize],
                        DmaAddr::reloc(single::C, n0 * m * 4),
                        DmaAddr::reloc(COEFFS, n0 * 4),
                        DmaAddr::reloc(OUT, (row * n + n0) * 4),
                    )
                    .unwrap()
                    .body()
                    .unwrap(),
                    BlockMask::ELEMENTWISE,
                );
                tasks += 1;
            }
        }
        (p.build().unwrap(), tasks)
    }

    /// Runs the chain with A and B; returns the run, C (fp32, native) and the dequantised rows.
    fn run(&self, a: &[i32], b: &[i32]) -> (CoreRun, Vec<f32>, Vec<f32>) {
        let mm = &self.mm;
        let (program, tasks) = self.program();
        let words = program.bind(addr).unwrap();
        let mut sim = Simulator::new();
        let mem = sim.memory_mut();
        mem.map(at(single::REGCMD), words_to_le_bytes(&words))
            .unwrap();
        mem.map(at(single::A), mm.pack_a_int(a).unwrap()).unwrap();
        mem.map(at(single::B), mm.pack_b_int(b).unwrap()).unwrap();
        mem.map_zeroed(at(single::C), mm.c_bytes()).unwrap();
        mem.map(
            at(COEFFS),
            pack_dequant_coefficients(&self.w_scales).unwrap(),
        )
        .unwrap();
        let out_bytes = mm.m as usize * mm.padded_n() as usize * 4;
        mem.map_zeroed(at(OUT), out_bytes).unwrap();
        let r = sim
            .kick(&Kick {
                task_number: Some(tasks),
                ..Kick::new(at(single::REGCMD), program.tasks()[0].regcfg_amount)
            })
            .unwrap();
        let c = mm
            .unpack_c_f32(&sim.memory().read_vec(at(single::C), mm.c_bytes()).unwrap())
            .unwrap();
        let out = sim
            .memory()
            .read_vec(at(OUT), out_bytes)
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        (r, c, out)
    }
}

/// Exact sums of an int8 matmul, row-major `[m][n]`.
fn sums(a: &[i32], b: &[i32], m: usize, k: usize, n: usize) -> Vec<i64> {
    let mut out = vec![0i64; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|kk| i64::from(a[i * k + kk]) * i64::from(b[kk * n + j]))
                .sum();
        }
    }
    out
}

fn fp16(x: f32) -> f32 {
    f16_to_f32(f32_to_f16(x))
}

/// K = 2048 with a row of 127s against columns of 127s: sums above 2^24, which fp32
/// rounds; N = 1056 needs two chunks (1024 + 32 channels) per row.
#[test]
fn int8_matmul_then_dequant_matches_the_cpu_reference_exactly() {
    let (m, k, n) = (5u32, 2048u32, 1056u32);
    let (mu, ku, nu) = (m as usize, k as usize, n as usize);
    let chain = Chain::new(m, k, n);
    let mut rng = Rng::new(0x5eed);
    let mut a: Vec<i32> = (0..mu * ku).map(|_| rng.int(-128, 127)).collect();
    let mut b: Vec<i32> = (0..ku * nu).map(|_| rng.int(-128, 127)).collect();
    for kk in 1..ku {
        a[kk] = 127;
        for j in 0..nu {
            b[kk * nu + j] = if j % 2 == 0 { 127 } else { -128 };
        }
    }
    let (r, c, out) = chain.run(&a, &b);
    let tasks = 1 + m * 2;
    assert!(r.completed && r.tasks_run == tasks, "{r:?}");
    assert!(r.lints.is_empty(), "{:?}", r.lints);
    let acc = sums(&a, &b, mu, ku, nu);
    assert!(
        acc.iter()
            .any(|&s| s.abs() > 1 << 24 && s as f32 as i64 != s)
    );
    let padded = chain.mm.padded_n() as usize;
    for i in 0..mu {
        let row = fp16(chain.row_scales[i]);
        for j in 0..nu {
            let x = acc[i * nu + j] as f32;
            assert_eq!(c[i * nu + j], x, "the matmul's fp32 result ({i}, {j})");
            let want = (x * row) * fp16(chain.w_scales[j]);
            let got = out[i * padded + j];
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "({i}, {j}): acc {} row {} w {}: {got} != {want}",
                acc[i * nu + j],
                chain.row_scales[i],
                chain.w_scales[j]
            );
        }
    }
}

/// One row of one 32-channel chunk: the product order is (x · row) · w, each product
/// rounded to fp32 — for some of these columns the other order gives another value.
#[test]
fn the_product_order_is_row_scale_first() {
    let chain = {
        let mut c = Chain::new(1, 32, 32);
        c.row_scales = vec![0.1];
        c.w_scales = (0..32).map(|j| 0.3 + j as f32 * 0.01).collect();
        c
    };
    // Sums with up to 19 significant bits, so that x · row rounds.
    let mut rng = Rng::new(7);
    let a: Vec<i32> = (0..32).map(|_| rng.int(-128, 127)).collect();
    let b: Vec<i32> = (0..32 * 32).map(|_| rng.int(-128, 127)).collect();
    let acc = sums(&a, &b, 1, 32, 32);
    let (r, _, out) = chain.run(&a, &b);
    assert!(r.completed);
    let row = fp16(0.1);
    let mut differs = false;
    for j in 0..32 {
        let (x, w) = (acc[j] as f32, fp16(chain.w_scales[j]));
        assert_eq!(out[j], (x * row) * w, "column {j}");
        differs |= (x * row) * w != x * (row * w);
    }
    assert!(differs, "the columns do not tell the orders apart");
}

#[test]
fn out_of_envelope_inputs_are_typed_errors() {
    let f = DmaAddr::Fixed(0x1000);
    let model = |rows, row, channels, scale| dequant_task(rows, row, channels, scale, f, f, f);
    for scale in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 70000.0, 1e-30] {
        assert!(
            matches!(
                model(4, 0, 64, scale),
                Err(Error::OutOfRange {
                    what: "dequant row scale",
                    ..
                })
            ),
            "{scale}"
        );
    }
    for (rows, row, channels) in [
        (4, 0, 0),
        (4, 0, 1028),
        (4, 0, 1056),
        (4, 0, 48),
        (129, 0, 64),
        (0, 0, 64),
        (4, 4, 64),
    ] {
        assert!(
            matches!(
                model(rows, row, channels, 1.0),
                Err(Error::Unsupported {
                    what: "dequant task",
                    ..
                })
            ),
            "{rows} {row} {channels}"
        );
    }
    assert!(model(128, 127, 1024, 65504.0).is_ok());
    assert!(model(1, 0, 32, 5.960_464_5e-8).is_ok());
    assert!(model(1, 0, 32, 0.0).is_ok());
    match pack_dequant_coefficients(&[1.0, 0.5, f32::NAN]) {
        Err(Error::OutOfRange {
            what: "dequant channel scale",
            index: 2,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let packed = pack_dequant_coefficients(&[1.0, -2.0]).unwrap();
    assert_eq!(packed.len(), 32 * 4, "padded to 32 channels");
    assert_eq!(&packed[..8], &[0x00, 0x3C, 0, 0, 0x00, 0xC0, 0, 0]);
    assert!(packed[8..].iter().all(|&x| x == 0));
}

/// A one-task program: the dequantisation task alone, over an fp32 cube in C.
struct One {
    words: Vec<RegCmd>,
    body: u32,
}

impl One {
    fn new() -> One {
        let mut p = ProgramBuilder::new(single::REGCMD);
        p.push_task(
            dequant_task(
                4,
                1,
                64,
                0.25,
                DmaAddr::reloc(single::C, 0),
                DmaAddr::reloc(COEFFS, 0),
                DmaAddr::reloc(OUT, 0),
            )
            .unwrap()
            .body()
            .unwrap(),
            BlockMask::ELEMENTWISE,
        );
        let program = p.build().unwrap();
        One {
            words: program.bind(addr).unwrap(),
            body: program.tasks()[0].regcfg_amount,
        }
    }

    fn field<R: Register>(mut self, f: Field<R>, value: u32) -> One {
        let mut found = false;
        for w in self
            .words
            .iter_mut()
            .filter(|w| w.offset() == R::OFFSET && w.target() > 0x0081)
        {
            *w = w.with_value(f.info().insert(w.value(), value).unwrap());
            found = true;
        }
        assert!(found, "no entry writes {}", R::NAME);
        self
    }

    fn run(&self) -> Result<CoreRun, SimError> {
        let mut sim = Simulator::new();
        let m = sim.memory_mut();
        m.map(at(single::REGCMD), words_to_le_bytes(&self.words))
            .unwrap();
        // C: 4 rows x 64 channels of fp32 = 1.5 each.
        let c: Vec<u8> = (0..4 * 64).flat_map(|_| 1.5f32.to_le_bytes()).collect();
        m.map(at(single::C), c).unwrap();
        let coeffs = pack_dequant_coefficients(&[2.0; 64]).unwrap();
        m.map(at(COEFFS), coeffs).unwrap();
        m.map_zeroed(at(OUT), 4096).unwrap();
        let r = sim.kick(&Kick::new(at(single::REGCMD), self.body))?;
        let out = sim.memory().read_vec(at(OUT), 64 * 4).unwrap();
        assert!(
            out.chunks_exact(4)
                .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) == 0.75)
        );
        Ok(r)
    }
}

#[test]
fn the_published_task_runs_alone() {
    let r = One::new().run().unwrap();
    assert!(
        r.completed && r.tasks_run == 1 && r.lints.is_empty(),
        "{r:?}"
    );
}

/// Every field the published program sets, changed alone, is refused by name.
#[test]
fn a_changed_field_outside_the_validated_values_is_refused_by_name() {
    type Case = (fn(One) -> One, &'static str, &'static str, u32);
    let cases: [Case; 16] = [
        (
            |s| s.field(dpu::BsCfg::BS_BYPASS, 1),
            dpu::BsCfg::NAME,
            dpu::BsCfg::BS_BYPASS.name(),
            1,
        ),
        (
            |s| s.field(dpu::BsCfg::BS_RELU_BYPASS, 0),
            dpu::BsCfg::NAME,
            dpu::BsCfg::BS_RELU_BYPASS.name(),
            0,
        ),
        (
            |s| {
                s.field(dpu::BsCfg::BS_MUL_BYPASS, 1)
                    .field(dpu::BsMulCfg::BS_MUL_OPERAND, 0)
            },
            dpu::BsCfg::NAME,
            dpu::BsCfg::BS_MUL_BYPASS.name(),
            1,
        ),
        (
            |s| s.field(dpu::BsMulCfg::BS_MUL_SHIFT_VALUE, 2),
            dpu::BsMulCfg::NAME,
            dpu::BsMulCfg::BS_MUL_SHIFT_VALUE.name(),
            2,
        ),
        (
            |s| s.field(dpu::BsMulCfg::BS_MUL_SRC, 1),
            dpu::BsMulCfg::NAME,
            dpu::BsMulCfg::BS_MUL_SRC.name(),
            1,
        ),
        (
            |s| s.field(dpu::BsMulCfg::BS_MUL_OPERAND, 0x7C00),
            dpu::BsMulCfg::NAME,
            dpu::BsMulCfg::BS_MUL_OPERAND.name(),
            0x7C00,
        ),
        (
            |s| s.field(dpu::BnCfg::BN_BYPASS, 0),
            dpu::BnCfg::NAME,
            dpu::BnCfg::BN_BYPASS.name(),
            0,
        ),
        (
            |s| s.field(dpu::EwCfg::EW_OP_TYPE, 0),
            dpu::EwCfg::NAME,
            dpu::EwCfg::EW_OP_TYPE.name(),
            0,
        ),
        (
            |s| s.field(dpu::EwCfg::EW_RELU_BYPASS, 0),
            dpu::EwCfg::NAME,
            dpu::EwCfg::EW_RELU_BYPASS.name(),
            0,
        ),
        (
            |s| s.field(dpu::EwCfg::EDATA_SIZE, 2),
            dpu::EwCfg::NAME,
            dpu::EwCfg::EDATA_SIZE.name(),
            2,
        ),
        (
            |s| s.field(dpu::SurfaceAdd::SURF_ADD, 4),
            dpu::SurfaceAdd::NAME,
            dpu::SurfaceAdd::SURF_ADD.name(),
            4,
        ),
        (
            |s| s.field(dpu::DstSurfStride::DST_SURF_STRIDE, 2),
            dpu::DstSurfStride::NAME,
            dpu::DstSurfStride::DST_SURF_STRIDE.name(),
            2,
        ),
        (
            |s| s.field(dpu::BsOwCfg::OD_BYPASS, 0),
            dpu::BsOwCfg::NAME,
            dpu::BsOwCfg::OD_BYPASS.name(),
            0,
        ),
        (
            |s| s.field(dpu_rdma::RdmaEwSurfStride::EW_SURF_STRIDE, 4),
            dpu_rdma::RdmaEwSurfStride::NAME,
            dpu_rdma::RdmaEwSurfStride::EW_SURF_STRIDE.name(),
            4,
        ),
        (
            |s| s.field(dpu_rdma::RdmaSurfNotch::SURF_NOTCH_ADDR, 128),
            dpu_rdma::RdmaSurfNotch::NAME,
            dpu_rdma::RdmaSurfNotch::SURF_NOTCH_ADDR.name(),
            128,
        ),
        (
            |s| s.field(dpu::FeatureModeCfg::BURST_LEN, 7),
            dpu::FeatureModeCfg::NAME,
            dpu::FeatureModeCfg::BURST_LEN.name(),
            7,
        ),
    ];
    for (change, register, field, value) in cases {
        match change(One::new()).run() {
            Err(SimError::Unsupported {
                register: r,
                field: f,
                value: v,
                ..
            }) => assert_eq!((r, f, v), (register, field, u64::from(value))),
            other => panic!("{register}.{field}: {other:?}"),
        }
    }
}

/// K in two waves of int32 partials, the add task writing their sum as fp32, then the
/// dequantisation rows: the chain of `I8DpuChain` for two K waves.
#[test]
fn split_k_waves_then_an_fp32_add_then_dequant() {
    use rknpu_driver::kernels::single::add_to_fp32_task;
    let (m, k, n) = (6u32, 128u32, 96u32);
    let (mu, ku, nu) = (m as usize, k as usize, n as usize);
    let half = {
        let mut mm = SingleMatmul::new(m, k / 2, n, Dtype::Int8);
        mm.a_layout = Layout::Native;
        mm.c_layout = Layout::Native;
        mm
    };
    let ids = |i: u32| BufferId(10 + i);
    let (a0, a1, b0, b1, p0, p1, f, co, out) = (
        ids(0),
        ids(1),
        ids(2),
        ids(3),
        ids(4),
        ids(5),
        ids(6),
        ids(7),
        ids(8),
    );
    let r = |b| DmaAddr::reloc(b, 0);
    let row_scales: Vec<f32> = (0..mu).map(|i| SCALES[(i + 2) % SCALES.len()]).collect();
    let w_scales: Vec<f32> = (0..nu).map(|j| SCALES[(j * 5) % SCALES.len()]).collect();
    let mut p = ProgramBuilder::new(single::REGCMD);
    push_k_waves(&mut p, &half, ([a0, a1], [b0, b1], [p0, p1]), ids(9));
    p.push_task(
        add_to_fp32_task(add_task(m, n, r(p0), r(p1), r(f)).unwrap())
            .body()
            .unwrap(),
        BlockMask::ELEMENTWISE,
    );
    for row in 0..m {
        p.push_task(
            dequant_task(
                m,
                row,
                n,
                row_scales[row as usize],
                r(f),
                r(co),
                DmaAddr::reloc(out, row * n * 4),
            )
            .unwrap()
            .body()
            .unwrap(),
            BlockMask::ELEMENTWISE,
        );
    }
    let program = p.build().unwrap();
    let place = |b: BufferId| Some(0x0100_0000 * (b.0 as u64 + 1));
    let at = |b: BufferId| place(b).unwrap() as u32;
    let words = program.bind(place).unwrap();

    let mut rng = Rng::new(42);
    let a: Vec<i32> = (0..mu * ku).map(|_| rng.int(-128, 127)).collect();
    let b: Vec<i32> = (0..ku * nu).map(|_| rng.int(-128, 127)).collect();
    let slice_a = |lo: usize| -> Vec<i32> {
        (0..mu)
            .flat_map(|i| (lo..lo + ku / 2).map(move |kk| (i, kk)))
            .map(|(i, kk)| a[i * ku + kk])
            .collect()
    };
    let slice_b = |lo: usize| b[lo * nu..(lo + ku / 2) * nu].to_vec();
    let mut sim = Simulator::new();
    let mem = sim.memory_mut();
    mem.map(at(single::REGCMD), words_to_le_bytes(&words))
        .unwrap();
    mem.map(at(a0), half.pack_a_int(&slice_a(0)).unwrap())
        .unwrap();
    mem.map(at(a1), half.pack_a_int(&slice_a(ku / 2)).unwrap())
        .unwrap();
    mem.map(at(b0), half.pack_b_int(&slice_b(0)).unwrap())
        .unwrap();
    mem.map(at(b1), half.pack_b_int(&slice_b(ku / 2)).unwrap())
        .unwrap();
    for buf in [p0, p1, f] {
        mem.map_zeroed(at(buf), half.c_bytes()).unwrap();
    }
    mem.map(at(co), pack_dequant_coefficients(&w_scales).unwrap())
        .unwrap();
    mem.map_zeroed(at(out), mu * nu * 4).unwrap();
    let tasks = 3 + m;
    let run = sim
        .kick(&Kick {
            task_number: Some(tasks),
            ..Kick::new(at(single::REGCMD), program.tasks()[0].regcfg_amount)
        })
        .unwrap();
    assert!(run.completed && run.tasks_run == tasks, "{run:?}");
    assert!(run.lints.is_empty(), "{:?}", run.lints);
    let got: Vec<f32> = sim
        .memory()
        .read_vec(at(out), mu * nu * 4)
        .unwrap()
        .chunks_exact(4)
        .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
        .collect();
    let acc = sums(&a, &b, mu, ku, nu);
    for i in 0..mu {
        for j in 0..nu {
            let want = (acc[i * nu + j] as f32 * fp16(row_scales[i])) * fp16(w_scales[j]);
            assert_eq!(got[i * nu + j].to_bits(), want.to_bits(), "({i}, {j})");
        }
    }
}
