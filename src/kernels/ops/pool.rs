//! Pooling on the PPU: max, average and min over K × K windows with stride and padding,
//! as stand-alone PPU tasks (op-enable 0x60, PPU_RDMA reads the input cube from memory)
//! with the register values of the board-tested `gregordinary/rocket-userspace`
//! `gen_pool_fp16` (docs/hardware/pooling.md#registers, docs/ops.md "Pooling").
//!
//! A kernel holds at most 16 × 16 (4-bit fields); a global pool of a larger plane runs as
//! a chain of passes whose intermediates stay at least 4 × 4 (smaller PPU-written
//! intermediates are mis-read on boards, docs/hardware/pooling.md#chains). A task has at
//! most ⌊8191 / input width⌋ output rows (docs/hardware/pooling.md#limits), so a taller
//! output is split into tasks by output rows, each a window into the whole tensors.
//!
//! ```
//! use rknpu_driver::kernels::ops::{Cube, pool::{Pool2d, PoolKind, reference}};
//! use rknpu_driver::task::Precision;
//!
//! let input = Cube::new(4, 4, 8, Precision::Fp16)?;
//! let pool = Pool2d::new(input, PoolKind::Max, 2); // 2 × 2, stride 2
//! assert_eq!(pool.output()?.width, 2);
//! let program = pool.program()?;
//! assert_eq!(program.tasks().len(), 1);
//! // The CPU definition: row-major [h][w][c].
//! let x: Vec<f32> = (0..128).map(|i| i as f32).collect();
//! let y = reference(&pool, &x)?;
//! assert_eq!(y[0], 5.0 * 8.0 + 0.0); // max of pixels (0,0), (1,0), (0,1), (1,1), channel 0
//! # Ok::<(), rknpu_driver::Error>(())
//! ```

use super::{Cube, INPUT, OUTPUT, REGCMD, at};
use crate::error::{Error, Result};
use crate::regcmd::{BufferId, DmaAddr, Program, ProgramBuilder};
use crate::task::{PoolMethod, Ppu, PpuRdma, Precision, Task};

/// The buffer holding the intermediates of a multi-pass (global) pool.
pub const SCRATCH: BufferId = BufferId(6);

/// The largest kernel side and stride one task holds (4-bit `minus one` fields).
pub const MAX_KERNEL: u32 = 16;

/// The largest padding count on one side (3-bit fields).
pub const MAX_PAD: u32 = 7;

/// The smallest width and height of a PPU-written intermediate a later pass reads
/// correctly (one definition: [`crate::task::limits::POOL_MIN_INTERMEDIATE`]).
pub const MIN_INTERMEDIATE: u32 = crate::task::limits::POOL_MIN_INTERMEDIATE;

/// Output rows one task holds for an input `width` pixels wide: ⌊8191 / width⌋
/// (one definition: [`crate::task::limits::pool_max_rows`]).
pub const fn max_rows(width: u32) -> u32 {
    crate::task::limits::pool_max_rows(width)
}

use crate::task::limits::{FP16_NEG_INF, FP16_POS_INF, POOL_INT8_MAX_PAD as INT8_MAX_PAD};

/// What a window reduces to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PoolKind {
    /// The largest value (padding never wins: it is −inf).
    Max,
    /// The mean over the whole window, padding counted as 0 (count includes padding).
    Avg,
    /// The smallest value (padding never wins: it is +inf).
    Min,
}

impl PoolKind {
    const fn method(self) -> PoolMethod {
        match self {
            PoolKind::Max => PoolMethod::Max,
            PoolKind::Avg => PoolMethod::Average,
            PoolKind::Min => PoolMethod::Min,
        }
    }

    /// Lower-case name (`max`, `avg`, `min`).
    pub const fn name(self) -> &'static str {
        match self {
            PoolKind::Max => "max",
            PoolKind::Avg => "avg",
            PoolKind::Min => "min",
        }
    }
}

/// A 2-D pooling of an NC1HWC2 tensor: every channel on its own, windows of
/// `kernel` (width, height) every `stride` (x, y) over the input padded by `padding`
/// (left, top, right, bottom). The output has `(W + left + right − kw) / sx + 1` columns and
/// likewise rows, and the input's channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Pool2d {
    /// The input tensor (fp16, or int8 for max and min).
    pub input: Cube,
    /// Max, average or min.
    pub kind: PoolKind,
    /// Window width and height.
    pub kernel: (u32, u32),
    /// Steps between windows, x and y.
    pub stride: (u32, u32),
    /// Padding left, top, right, bottom.
    pub padding: [u32; 4],
}

/// One task of a plan: an input window, an output window, the pooling geometry.
#[derive(Clone, Copy, Debug)]
struct Piece {
    /// Input pixels (width, height) the task reads, from row `in_row`.
    in_w: u32,
    in_h: u32,
    in_row: u32,
    /// The whole input's height (its surface is `in_w × full_in_h` atoms).
    full_in_h: u32,
    out_w: u32,
    out_h: u32,
    out_row: u32,
    full_out_h: u32,
    kernel: (u32, u32),
    stride: (u32, u32),
    padding: [u32; 4],
    /// Which tensor it reads and writes: 0 the input, `i` intermediate `i`, and the
    /// last pass the output.
    pass: usize,
}

impl Pool2d {
    /// A square `kernel` × `kernel` pooling with stride `kernel` and no padding.
    pub fn new(input: Cube, kind: PoolKind, kernel: u32) -> Pool2d {
        Pool2d {
            input,
            kind,
            kernel: (kernel, kernel),
            stride: (kernel, kernel),
            padding: [0; 4],
        }
    }

    /// The pooling of every plane to one value per channel (a window of the whole
    /// input); planes larger than 16 run as several passes.
    pub fn global(input: Cube, kind: PoolKind) -> Pool2d {
        Pool2d {
            input,
            kind,
            kernel: (input.width, input.height),
            stride: (input.width, input.height),
            padding: [0; 4],
        }
    }

    /// The same pooling with a `width` × `height` window.
    pub fn with_kernel(mut self, width: u32, height: u32) -> Pool2d {
        self.kernel = (width, height);
        self
    }

    /// The same pooling with strides `x` and `y`.
    pub fn with_stride(mut self, x: u32, y: u32) -> Pool2d {
        self.stride = (x, y);
        self
    }

    /// The same pooling with `pad` pixels of padding on every side.
    pub fn with_pad(mut self, pad: u32) -> Pool2d {
        self.padding = [pad; 4];
        self
    }

    /// The same pooling with padding left, top, right, bottom.
    pub fn with_padding(mut self, padding: [u32; 4]) -> Pool2d {
        self.padding = padding;
        self
    }

    fn refuse(&self, why: String) -> Error {
        Error::Unsupported {
            what: "PPU pooling",
            why,
        }
    }

    /// Whether the window is the whole unpadded input (one output pixel).
    pub fn is_global(&self) -> bool {
        self.kernel == (self.input.width, self.input.height) && self.padding == [0; 4]
    }

    /// The output tensor, or why the pooling is refused.
    pub fn output(&self) -> Result<Cube> {
        self.check()?;
        let (w, h) = self.out_dims();
        Cube::new(w, h, self.input.channels, self.input.precision)
    }

    fn out_dims(&self) -> (u32, u32) {
        let [l, t, r, b] = self.padding;
        let (kw, kh) = self.kernel;
        let (sx, sy) = self.stride;
        (
            (self.input.width + l + r - kw) / sx + 1,
            (self.input.height + t + b - kh) / sy + 1,
        )
    }

    /// The checks that do not depend on the plan.
    fn check(&self) -> Result<()> {
        let p = self.input.precision;
        match (p, self.kind) {
            (Precision::Fp16, _) => {}
            (Precision::Int8, PoolKind::Avg) => {
                return Err(self.refuse(
                    "int8 average: the native int8 average's reciprocal and rounding have no board confirmation the simulator can follow, and no board-validated int8 to fp16 conversion feeds the fp16 pool on the NPU; convert on the host (exact) and pool fp16".into(),
                ));
            }
            (Precision::Int8, PoolKind::Min) if self.padding != [0; 4] => {
                return Err(self
                    .refuse("padded int8 min: no program gives the int8 pad value of min".into()));
            }
            (Precision::Int8, _) => {}
            _ => {
                return Err(self.refuse(format!(
                    "{p} tensors: the PPU pools fp16 (board-validated) and int8 max/min"
                )));
            }
        }
        let (kw, kh) = self.kernel;
        let (sx, sy) = self.stride;
        if kw == 0 || kh == 0 || sx == 0 || sy == 0 {
            return Err(self.refuse(format!(
                "kernel {kw}x{kh}, stride {sx}x{sy}: every side must be at least 1"
            )));
        }
        let global = self.is_global();
        if !global && (kw > MAX_KERNEL || kh > MAX_KERNEL) {
            return Err(self.refuse(format!(
                "kernel {kw}x{kh}: a task holds at most {MAX_KERNEL}x{MAX_KERNEL}; larger windows run only as a global pool"
            )));
        }
        if !global && (sx > MAX_KERNEL || sy > MAX_KERNEL) {
            return Err(self.refuse(format!(
                "stride {sx}x{sy}: a task holds at most {MAX_KERNEL}"
            )));
        }
        let [l, t, r, b] = self.padding;
        for (name, pad, k) in [
            ("left", l, kw),
            ("top", t, kh),
            ("right", r, kw),
            ("bottom", b, kh),
        ] {
            if pad > MAX_PAD || pad >= k {
                return Err(self.refuse(format!(
                    "{name} padding {pad}: at most {MAX_PAD} and less than the kernel side {k}"
                )));
            }
        }
        if self.input.width + l + r < kw || self.input.height + t + b < kh {
            return Err(self.refuse(format!(
                "a {kw}x{kh} kernel does not fit the {}x{} input with its padding",
                self.input.width, self.input.height
            )));
        }
        if self.kind == PoolKind::Avg && (kw == 1 || kh == 1) {
            return Err(self.refuse(format!(
                "average over {kw}x{kh}: a kernel side of 1 needs the reciprocal 65536, which fp16 cannot hold"
            )));
        }
        Ok(())
    }

    /// The passes' kernels: one pass, or the factorisation of a global pool.
    pub(crate) fn pass_kernels(&self) -> Result<Vec<(u32, u32)>> {
        let (kw, kh) = self.kernel;
        if kw <= MAX_KERNEL && kh <= MAX_KERNEL {
            return Ok(vec![(kw, kh)]);
        }
        let min = if self.kind == PoolKind::Avg { 2 } else { 1 };
        for n in 2..=8 {
            if let (Some(x), Some(y)) = (factor(kw, n, min), factor(kh, n, min)) {
                return Ok(x.into_iter().zip(y).collect());
            }
        }
        Err(self.refuse(format!(
            "global {} pool of {kw}x{kh}: no chain of passes of kernels of at most {MAX_KERNEL} (at least 2 for an average) that tiles the plane exactly with every intermediate at least {MIN_INTERMEDIATE}x{MIN_INTERMEDIATE}",
            self.kind.name()
        )))
    }

    /// Every task: passes in order, each split by output rows.
    fn plan(&self) -> Result<Vec<Piece>> {
        self.check()?;
        let kernels = self.pass_kernels()?;
        let mut out = Vec::new();
        let (mut w, mut h) = (self.input.width, self.input.height);
        for (i, &(kw, kh)) in kernels.iter().enumerate() {
            let (stride, padding) = if kernels.len() == 1 {
                (self.stride, self.padding)
            } else {
                ((kw, kh), [0; 4])
            };
            let [l, t, r, b] = padding;
            let ow = (w + l + r - kw) / stride.0 + 1;
            let oh = (h + t + b - kh) / stride.1 + 1;
            let rows = max_rows(w);
            if rows == 0 {
                return Err(self.refuse(format!(
                    "an input {w} wide: a task holds at most 8191 / width output rows"
                )));
            }
            let mut r0 = 0;
            while r0 < oh {
                let n = rows.min(oh - r0);
                // Input rows the windows of output rows r0..r0+n cover, in padded coordinates.
                let first = i64::from(r0) * i64::from(stride.1) - i64::from(t);
                let last =
                    i64::from(r0 + n - 1) * i64::from(stride.1) - i64::from(t) + i64::from(kh) - 1;
                let top = (-first).max(0) as u32;
                let bottom = (last - (i64::from(h) - 1)).max(0) as u32;
                let start = first.max(0) as u32;
                let end = last.min(i64::from(h) - 1) as u32;
                out.push(Piece {
                    in_w: w,
                    in_h: end - start + 1,
                    in_row: start,
                    full_in_h: h,
                    out_w: ow,
                    out_h: n,
                    out_row: r0,
                    full_out_h: oh,
                    kernel: (kw, kh),
                    stride,
                    padding: [l, top, r, bottom],
                    pass: i,
                });
                r0 += n;
            }
            (w, h) = (ow, oh);
        }
        Ok(out)
    }

    /// Bytes of the intermediates of a multi-pass pool (0 for one pass): they live in
    /// [`SCRATCH`], one after another.
    pub fn scratch_bytes(&self) -> Result<u64> {
        Ok(self.intermediates()?.iter().map(|c| c.bytes()).sum())
    }

    /// The intermediate tensors of the passes before the last.
    fn intermediates(&self) -> Result<Vec<Cube>> {
        let kernels = self.pass_kernels_checked()?;
        let (mut w, mut h) = (self.input.width, self.input.height);
        let mut out = Vec::new();
        for &(kw, kh) in &kernels[..kernels.len() - 1] {
            (w, h) = (w / kw, h / kh);
            out.push(Cube::new(w, h, self.input.channels, self.input.precision)?);
        }
        Ok(out)
    }

    fn pass_kernels_checked(&self) -> Result<Vec<(u32, u32)>> {
        self.check()?;
        self.pass_kernels()
    }

    /// The tasks, reading `input`, writing `output`, with the intermediates of a
    /// multi-pass pool at `scratch` ([`Pool2d::scratch_bytes`] bytes; unused otherwise).
    pub(crate) fn tasks_at(
        &self,
        input: DmaAddr,
        output: DmaAddr,
        scratch: DmaAddr,
    ) -> Result<Vec<Task>> {
        let pieces = self.plan()?;
        let mids = self.intermediates()?;
        let passes = mids.len() + 1;
        let mut bases = vec![input];
        let mut off = 0u64;
        for m in &mids {
            bases.push(offset(scratch, off)?);
            off += m.bytes();
        }
        bases.push(output);
        let prec = self.input.precision;
        let channels = self.input.padded_channels();
        let mut tasks = Vec::with_capacity(pieces.len());
        for p in pieces {
            let (src, dst) = (bases[p.pass], bases[p.pass + 1]);
            let padded = p.padding != [0; 4];
            let kind = self.kind;
            let pad = match (padded, kind, prec) {
                (false, _, _) | (true, PoolKind::Avg, _) => 0,
                (true, PoolKind::Max, Precision::Int8) => INT8_MAX_PAD,
                (true, PoolKind::Max, _) => FP16_NEG_INF,
                (true, PoolKind::Min, _) => FP16_POS_INF,
            };
            let recip = match kind {
                PoolKind::Avg => (recip(p.kernel.0), recip(p.kernel.1)),
                _ => (0, 0),
            };
            let out_surf = p.out_w * p.full_out_h;
            debug_assert!(p.pass < passes);
            tasks.push(Task::pooling(
                Ppu {
                    ping_pong: true,
                    cube_in: (p.in_w, p.in_h, channels),
                    cube_out: (p.out_w, p.out_h, channels),
                    method: kind.method(),
                    from_memory: true,
                    kernel: p.kernel,
                    stride: p.stride,
                    recip,
                    padding: p.padding,
                    pad_values: (pad, 0),
                    out: offset(dst, u64::from(p.out_row) * u64::from(p.out_w) * 16)?,
                    surf_stride: out_surf,
                    precision: prec,
                    index_add: out_surf,
                    burst_len: 3,
                },
                PpuRdma {
                    ping_pong: true,
                    cube_in: (p.in_w, p.in_h, channels),
                    size_code: if prec == Precision::Int8 { 1 } else { 2 },
                    src: offset(src, u64::from(p.in_row) * u64::from(p.in_w) * 16)?,
                    line_stride: p.in_w,
                    surf_stride: p.in_w * p.full_in_h,
                },
            ));
        }
        Ok(tasks)
    }

    /// The program reading [`INPUT`], writing [`OUTPUT`], its intermediates in
    /// [`SCRATCH`] (a multi-pass pool only), its list in [`REGCMD`].
    pub fn program(&self) -> Result<Program> {
        let tasks = self.tasks_at(at(INPUT, 0), at(OUTPUT, 0), at(SCRATCH, 0))?;
        let mut p = ProgramBuilder::new(REGCMD);
        for t in &tasks {
            p.push_task(t.body()?, t.enable());
        }
        p.build()
    }
}

/// The fp16 bits of 65536 / k (k ≥ 2; the checks refuse 1).
fn recip(k: u32) -> u32 {
    u32::from(half::f16::from_f32(65536.0 / k as f32).to_bits())
}

/// `addr` moved on by `by` bytes.
fn offset(addr: DmaAddr, by: u64) -> Result<DmaAddr> {
    addr.checked_offset(by)
        .ok_or_else(|| Error::InvalidArgument {
            what: format!(
                "a pooling window {by} bytes past {addr:?} leaves 32-bit device addresses"
            ),
        })
}

/// `n` factors of `d`, each in `min..=16`, whose product is `d`, the last at least
/// [`MIN_INTERMEDIATE`] (the intermediate before the last pass is that large); larger
/// factors first.
fn factor(d: u32, n: usize, min: u32) -> Option<Vec<u32>> {
    fn go(d: u32, n: usize, min: u32, out: &mut Vec<u32>) -> bool {
        if n == 1 {
            if (min.max(MIN_INTERMEDIATE)..=MAX_KERNEL).contains(&d) {
                out.push(d);
                return true;
            }
            return false;
        }
        for f in (min..=MAX_KERNEL.min(d)).rev() {
            if d.is_multiple_of(f) {
                out.push(f);
                if go(d / f, n - 1, min, out) {
                    return true;
                }
                out.pop();
            }
        }
        false
    }
    let mut out = Vec::with_capacity(n);
    go(d, n, min, &mut out).then_some(out)
}

/// The mathematical definition of `pool` on row-major `[height][width][channels]`
/// values: max and min over the window positions inside the input, the average the sum
/// over the window's inside positions divided by `kw × kh` (padding counts as 0 and is
/// counted). Plain loops; the NPU's average differs by its fp16 reciprocals and
/// rounding (docs/ops.md "Pooling").
pub fn reference(pool: &Pool2d, input: &[f32]) -> Result<Vec<f32>> {
    let c = &pool.input;
    let (w, h, ch) = (c.width as i64, c.height as i64, c.channels as usize);
    if input.len() != c.elems() {
        return Err(Error::InvalidArgument {
            what: format!(
                "{} values for a {}x{}x{} input (height x width x channels)",
                input.len(),
                c.height,
                c.width,
                c.channels
            ),
        });
    }
    let (kw, kh) = (pool.kernel.0 as i64, pool.kernel.1 as i64);
    let (sx, sy) = (pool.stride.0 as i64, pool.stride.1 as i64);
    let [l, t, r, b] = pool.padding.map(i64::from);
    if kw == 0 || kh == 0 || sx == 0 || sy == 0 || w + l + r < kw || h + t + b < kh {
        return Err(Error::InvalidArgument {
            what: "a kernel or stride of 0, or a kernel larger than the padded input".into(),
        });
    }
    let ow = (w + l + r - kw) / sx + 1;
    let oh = (h + t + b - kh) / sy + 1;
    let mut out = Vec::with_capacity((ow * oh) as usize * ch);
    for oy in 0..oh {
        for ox in 0..ow {
            for k in 0..ch {
                let mut best: Option<f32> = None;
                let mut sum = 0f64;
                for dy in 0..kh {
                    for dx in 0..kw {
                        let (y, x) = (oy * sy + dy - t, ox * sx + dx - l);
                        if y < 0 || y >= h || x < 0 || x >= w {
                            continue;
                        }
                        let v = input[((y * w + x) as usize) * ch + k];
                        sum += f64::from(v);
                        best = Some(match (best, pool.kind) {
                            (None, _) => v,
                            (Some(a), PoolKind::Min) => a.min(v),
                            (Some(a), _) => a.max(v),
                        });
                    }
                }
                out.push(match pool.kind {
                    PoolKind::Avg => (sum / (kw * kh) as f64) as f32,
                    PoolKind::Max => best.unwrap_or(f32::NEG_INFINITY),
                    PoolKind::Min => best.unwrap_or(f32::INFINITY),
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
