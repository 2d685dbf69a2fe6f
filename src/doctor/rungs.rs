//! The rungs up to the chained program: probe, buffers, the worked example, the
//! single-task matmuls, the chain. The matmul grid is in `grid.rs`.

use super::check::{self, Operands, Values};
use super::diagnosis::{Diagnosis, Finding};
use super::{Options, Rung, grid};
use crate::Error;
use crate::device::{Bo, BoFlags, Device, Job, JobResult};
use crate::kernels::single::{self, Dtype, SingleMatmul};
use crate::kernels::worked_example as we;
use crate::regcmd::{BufferId, DmaAddr, Program, ProgramBuilder, words_to_le_bytes};

/// What the output buffers hold before a job, so that a job that writes nothing shows.
pub(super) const FILL: u8 = 0xA5;

/// How a rung ended, with what it ran.
pub(super) enum Outcome {
    Passed(String),
    Skipped(String),
    Failed(String, Box<Diagnosis>),
}

/// Why a rung failed, before the hint is chosen.
pub(super) struct Fail(Box<Why>);

struct Why {
    expected: String,
    finding: Finding,
    job: Option<JobResult>,
}

impl Fail {
    pub(super) fn new(expected: impl Into<String>, finding: Finding) -> Fail {
        Fail(Box::new(Why {
            expected: expected.into(),
            finding,
            job: None,
        }))
    }

    /// The same, with the result of the job that ran.
    pub(super) fn with_job(mut self, job: JobResult) -> Fail {
        self.0.job = Some(job);
        self
    }

    pub(super) fn device(expected: impl Into<String>) -> impl FnOnce(Error) -> Fail {
        let expected = expected.into();
        move |e| Fail::new(expected, Finding::Device(e))
    }

    pub(super) fn build(e: impl std::fmt::Display) -> Fail {
        Fail::new(
            "a program and operands the library builds",
            Finding::Build(e.to_string()),
        )
    }
}

/// The rung's context.
pub(super) struct Ctx<'a> {
    pub(super) dev: &'a Device,
    pub(super) opts: &'a Options,
    pub(super) rung: Rung,
}

impl Ctx<'_> {
    /// Whether this rung's input is to be corrupted.
    pub(super) fn corrupt(&self) -> bool {
        self.opts.corrupt == Some(self.rung)
    }

    /// Submits `job` with the ladder's deadline; a completion with another task count
    /// than `tasks` is a failure.
    pub(super) fn submit(
        &self,
        job: Job<'_>,
        tasks: u32,
        expected: &str,
    ) -> Result<JobResult, Fail> {
        let r = self
            .dev
            .submit(&job.timeout(self.opts.deadline))
            .map_err(Fail::device(expected))?;
        if r.task_counter != tasks {
            let got = r.task_counter;
            let finding = Finding::TaskCounter {
                expected: tasks,
                got,
            };
            return Err(Fail::new(expected, finding).with_job(r));
        }
        Ok(r)
    }
}

/// Runs `rung` on `dev`; a rung that leaves buffers or mappings behind fails.
pub(super) fn climb(rung: Rung, dev: &Device, opts: &Options) -> Outcome {
    let c = Ctx { dev, opts, rung };
    let before = (dev.live_buffers(), dev.live_mappings());
    let mut detail = String::new();
    let r = match rung {
        Rung::Probe => probe(&c, &mut detail),
        Rung::Buffers => buffers(&c, &mut detail),
        Rung::WorkedExample => worked(&c, &mut detail),
        Rung::SingleInt8 => single_task(&c, Dtype::Int8, &mut detail),
        Rung::SingleInt4 => single_task(&c, Dtype::Int4, &mut detail),
        Rung::SingleFp16 => single_task(&c, Dtype::Fp16, &mut detail),
        Rung::Chained => chained(&c, &mut detail),
        Rung::Grid1 => grid::grid(&c, 1, &mut detail),
        Rung::Grid2 => grid::grid(&c, 2, &mut detail),
        Rung::Grid3 => grid::grid(&c, 3, &mut detail),
    };
    let after = (dev.live_buffers(), dev.live_mappings());
    let r = match r {
        Ok(true) if after.0 > before.0 || after.1 > before.1 => Err(Fail::new(
            "every buffer and mapping of the rung freed",
            Finding::Leak {
                buffers: after.0.saturating_sub(before.0),
                mappings: after.1.saturating_sub(before.1),
            },
        )),
        r => r,
    };
    match r {
        Ok(true) => Outcome::Passed(detail),
        Ok(false) => Outcome::Skipped(detail),
        Err(Fail(f)) => Outcome::Failed(
            detail,
            Box::new(Diagnosis::new(rung, f.expected, f.finding, f.job)),
        ),
    }
}

/// The device is open: say what it is.
fn probe(c: &Ctx<'_>, detail: &mut String) -> Result<bool, Fail> {
    let i = c.dev.info();
    *detail = format!(
        "{i}, {} cores, IOMMU {}{}",
        i.cores,
        if i.iommu { "on" } else { "off" },
        i.freq_hz
            .map(|f| format!(", {} MHz", f / 1_000_000))
            .unwrap_or_default()
    );
    Ok(true)
}

/// Allocate, map, write, hand back, read back, free; three sizes.
fn buffers(c: &Ctx<'_>, detail: &mut String) -> Result<bool, Fail> {
    const SIZES: [usize; 3] = [4096, 3 * 4096 + 100, 1 << 20];
    *detail = format!(
        "{} buffers of 4 KiB to 1 MiB, write → device → read",
        SIZES.len()
    );
    for (i, &size) in SIZES.iter().enumerate() {
        round_trip(c, size, i as u64)?;
    }
    Ok(true)
}

fn round_trip(c: &Ctx<'_>, size: usize, seed: u64) -> Result<(), Fail> {
    let expected = format!("a {size}-byte buffer to read back the bytes written");
    let err = || Fail::device(expected.clone());
    let mut bo = c.dev.alloc(size, BoFlags::default()).map_err(err())?;
    let bytes = check::pattern(size, seed);
    {
        let mut m = bo.map().map_err(err())?;
        m[..size].copy_from_slice(&bytes);
        m.finish().map_err(err())?;
    }
    if c.corrupt() && seed == 0 {
        // Memory that does not hold what was written, between the write and the read.
        bo.write(size / 2, &[bytes[size / 2] ^ 0x5A])
            .map_err(err())?;
    }
    let back = bo.read_all().map_err(err())?;
    match check::compare_bytes("buffer", &bytes, &back) {
        Some(m) => Err(Fail::new(expected, Finding::Mismatch(m))),
        None => Ok(()),
    }
}

/// A buffer holding `bytes`.
pub(super) fn upload(dev: &Device, bytes: &[u8]) -> Result<Bo, Error> {
    let mut bo = dev.alloc(bytes.len().max(1), BoFlags::default())?;
    bo.write(0, bytes)?;
    Ok(bo)
}

/// An output buffer of `len` bytes, filled with [`FILL`].
fn output(dev: &Device, len: usize) -> Result<Bo, Error> {
    upload(dev, &vec![FILL; len.max(1)])
}

/// `program` bound with buffer 0 at its own buffer and buffer `i` at `bases[i - 1]`,
/// uploaded.
fn upload_program(dev: &Device, program: &Program, bases: &[u32]) -> Result<Bo, Fail> {
    let expected = "the program uploaded";
    let mut regcmd = dev
        .alloc(program.byte_len(), BoFlags::default())
        .map_err(Fail::device(expected))?;
    let own = regcmd.dma_addr();
    let words = program
        .bind(|id: BufferId| match id.0 {
            0 => Some(u64::from(own)),
            i => bases.get(i as usize - 1).map(|&b| u64::from(b)),
        })
        .map_err(Fail::build)?;
    regcmd
        .write(0, &words_to_le_bytes(&words))
        .map_err(Fail::device(expected))?;
    Ok(regcmd)
}

/// The worked example (mtx512's int8 matmul; docs/provenance.md), with seeded operands in its layouts:
/// A native `[K/16][M][16]`, B `[N][K]`, C native `[N/4][M][4]` int32.
fn worked(c: &Ctx<'_>, detail: &mut String) -> Result<bool, Fail> {
    const M: usize = 4;
    const K: usize = 32;
    const N: usize = 32;
    *detail = "the worked example (mtx512's int8 matmul): int8 4x32x32, 1 task".into();
    let expected = "C = A·B (int8 4x32x32) as the CPU computes it";
    let program = we::program().map_err(Fail::build)?;
    let mut ops = Operands::new(Dtype::Int8, M as u32, K as u32, N as u32, 8);
    let want = ops.product(M, K, N);
    if c.corrupt() {
        ops.corrupt();
    }
    let Operands::Int { a, b, .. } = &ops else {
        return Err(Fail::build("int8 operands"));
    };
    let mut a_bytes = vec![0u8; M * K];
    for m in 0..M {
        for k in 0..K {
            a_bytes[((k / 16) * M + m) * 16 + k % 16] = a[m * K + k] as i8 as u8;
        }
    }
    let mut b_bytes = vec![0u8; K * N];
    for k in 0..K {
        for n in 0..N {
            b_bytes[n * K + k] = b[k * N + n] as i8 as u8;
        }
    }
    let dev_err = || Fail::device(expected);
    let input = upload(c.dev, &a_bytes).map_err(dev_err())?;
    let weights = upload(c.dev, &b_bytes).map_err(dev_err())?;
    let mut out = output(c.dev, M * N * 4).map_err(dev_err())?;
    let regcmd = upload_program(
        c.dev,
        &program,
        &[input.dma_addr(), weights.dma_addr(), out.dma_addr()],
    )?;
    let job = Job::from_program(&regcmd, &program)
        .reads(&input)
        .reads(&weights)
        .writes(&out);
    let result = c.submit(job, 1, expected)?;
    let bytes = out.read_all().map_err(dev_err())?;
    let at = |m: usize, n: usize| ((n / 4) * M + m) * 16 + (n % 4) * 4;
    let read = |bytes: &[u8]| {
        let mut v = Vec::with_capacity(M * N);
        for m in 0..M {
            for n in 0..N {
                let o = at(m, n);
                v.push(i64::from(i32::from_le_bytes([
                    bytes[o],
                    bytes[o + 1],
                    bytes[o + 2],
                    bytes[o + 3],
                ])));
            }
        }
        Values::Int(v)
    };
    let got = read(&bytes);
    let before = read(&[FILL; M * N * 4]);
    judge(expected, "C", &want, &got, N, Some(&before), result)
}

/// A failure when `got` differs from `want`, with the job's counters.
pub(super) fn judge(
    expected: &str,
    what: &str,
    want: &Values,
    got: &Values,
    n: usize,
    before: Option<&Values>,
    job: JobResult,
) -> Result<bool, Fail> {
    match check::compare(what, want, got, n, before) {
        None => Ok(true),
        Some(m) => Err(Fail::new(expected, Finding::Mismatch(m)).with_job(job)),
    }
}

/// One task of the kernel generator's single matmul.
fn single_task(c: &Ctx<'_>, dtype: Dtype, detail: &mut String) -> Result<bool, Fail> {
    let (m, k, n) = (8, 64, 32);
    let mm = SingleMatmul::new(m, k, n, dtype);
    let name = dtype_name(dtype);
    *detail = format!("{m}x{k}x{n} {name}, 1 task");
    let expected = format!("C = A·B ({name} {m}x{k}x{n}) as the CPU computes it");
    let program = mm.program().map_err(Fail::build)?;
    run_single(c, &mm, &program, 1, &expected)
}

/// Three M tiles of an int8 matmul, one task each, chained.
fn chained(c: &Ctx<'_>, detail: &mut String) -> Result<bool, Fail> {
    const TILES: u32 = 3;
    let (rows, k, n) = (4, 64, 32);
    let full = SingleMatmul::new(rows * TILES, k, n, Dtype::Int8);
    let tile = SingleMatmul::new(rows, k, n, Dtype::Int8);
    *detail = format!("int8 {}x{k}x{n} as {TILES} chained tasks", rows * TILES);
    let expected = format!(
        "C = A·B (int8 {}x{k}x{n}) from {TILES} tasks in one submission",
        rows * TILES
    );
    let mut p = ProgramBuilder::new(single::REGCMD);
    for t in 0..TILES {
        let body = tile
            .body_at(
                DmaAddr::reloc(single::A, t * rows * full.padded_k()),
                DmaAddr::reloc(single::B, 0),
                DmaAddr::reloc(single::C, t * rows * full.padded_n() * 4),
                DmaAddr::reloc(single::E, 0),
            )
            .map_err(Fail::build)?;
        p.push_task(body, tile.enable());
    }
    let program = p.build().map_err(Fail::build)?;
    run_single(c, &full, &program, TILES, &expected)
}

/// Uploads seeded operands packed for `mm`, runs `program` (relocations A, B, C, E),
/// unpacks C and compares it with the CPU's.
fn run_single(
    c: &Ctx<'_>,
    mm: &SingleMatmul,
    program: &Program,
    tasks: u32,
    expected: &str,
) -> Result<bool, Fail> {
    let (m, k, n) = (mm.m as usize, mm.k as usize, mm.n as usize);
    let mut ops = Operands::new(mm.dtype, mm.m, mm.k, mm.n, u64::from(tasks) + 16);
    let want = ops.product(m, k, n);
    if c.corrupt() {
        ops.corrupt();
    }
    let (a_bytes, b_bytes) = match &ops {
        Operands::Int { a, b, .. } => (mm.pack_a_int(a), mm.pack_b_int(b)),
        Operands::Float { a, b } => (mm.pack_a_f32(a), mm.pack_b_f32(b)),
    };
    let (a_bytes, b_bytes) = (a_bytes.map_err(Fail::build)?, b_bytes.map_err(Fail::build)?);
    let dev_err = || Fail::device(expected);
    let a_bo = upload(c.dev, &a_bytes).map_err(dev_err())?;
    let b_bo = upload(c.dev, &b_bytes).map_err(dev_err())?;
    let c_len = mm.c_bytes();
    let mut c_bo = output(c.dev, c_len).map_err(dev_err())?;
    let (a_at, b_at, c_at) = (a_bo.dma_addr(), b_bo.dma_addr(), c_bo.dma_addr());
    let regcmd = upload_program(c.dev, program, &[a_at, b_at, c_at, c_at])?;
    let job = Job::from_program(&regcmd, program)
        .reads(&a_bo)
        .reads(&b_bo)
        .writes(&c_bo);
    let result = c.submit(job, tasks, expected)?;
    let bytes = c_bo.read_all().map_err(dev_err())?;
    let read = |bytes: &[u8]| -> Result<Values, Fail> {
        let bytes = &bytes[..c_len.min(bytes.len())];
        Ok(if mm.dtype.is_float() {
            Values::Float(mm.unpack_c_f32(bytes).map_err(Fail::build)?)
        } else {
            Values::Int(mm.unpack_c_int(bytes).map_err(Fail::build)?)
        })
    };
    let got = read(&bytes)?;
    let before = read(&vec![FILL; c_len])?;
    judge(expected, "C", &want, &got, n, Some(&before), result)
}

/// `int8`, `int4`, `fp16`.
pub(super) fn dtype_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::Int4 => "int4",
        Dtype::Int8 => "int8",
        Dtype::Int16 => "int16",
        Dtype::Fp16 => "fp16",
        Dtype::Bf16 => "bf16",
    }
}
