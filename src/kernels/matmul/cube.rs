//! A plan's C written as one native cube, the form a chained operation reads: every M
//! tile, column tile and core of the plan writes its block in place in `[N/E][M][E]`,
//! and the partial sums of K waves after the first are added on the NPU by the flying
//! int32 add of the split-K recipe (docs/hardware/matmul-programs.md#npu-k-reduction).
//! What a layer step runs (`compute::layer`), where nothing returns to the host between
//! the operations.
//!
//! Where a task writes: its block of rows `m0 .. m0 + rows` and columns `n0 .. n0 + nt`
//! starts at `((n0 / E) · M + m0) · 16` bytes, surfaces `M` atoms apart
//! (`DST_SURF_STRIDE` = M, `SURFACE_ADD` in the precision's validated ratio to it): the
//! geometry of a convolution task writing a band of its output plane, here a band of the
//! cube's M pixels (docs/hardware/matmul-programs.md#cube-output).

use super::{Plan, TaskTile, offset, unsupported};
use crate::error::Result;
use crate::kernels::single::{Layout, OutType, add_task_strided};
use crate::regcmd::DmaAddr;
use crate::task::Task;

/// Rows one split-K add task takes (the recipe's bound).
const ADD_ROWS: u32 = 128;
/// Channels one split-K add task takes (the recipe's bound).
const ADD_CHANNELS: u32 = 1024;

/// The shape of a plan's C as one cube.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CubeForm {
    /// Pixels of the cube: the plan's M.
    pub m: u32,
    /// Channels of the cube: N rounded up to cover every column tile (a multiple of 32).
    pub channels: u32,
    /// The element type C is written in.
    pub out: OutType,
    /// Bytes of the cube.
    pub bytes: u64,
    /// Scratch bytes for the partial sums of K waves after the first (0 for one wave).
    pub scratch: u64,
}

impl Plan {
    /// How this plan writes C as one cube ([`Plan::cube_tasks`]), or why it cannot: with
    /// several K waves the partial sums must be int32 (int8 inputs with int32 output),
    /// the one type the board-tested split-K add takes.
    pub fn cube_form(&self) -> Result<CubeForm> {
        let out = self.c_type();
        let waves = self.layout.waves.len();
        if waves > 1 && out != OutType::Int32 {
            return Err(unsupported(format!(
                "{} K waves of {out:?} partial sums: only int32 partials are added on the NPU \
                 (the board-tested split-K add)",
                waves
            )));
        }
        let covered = self.tasks.iter().map(|t| t.n0 + t.nt).max().unwrap_or(0);
        let channels = covered.max(self.spec.n).next_multiple_of(32);
        let elem = u64::from(out.bytes());
        let bytes = u64::from(self.spec.m) * u64::from(channels) * elem;
        let scratch = self
            .tasks
            .iter()
            .filter(|t| t.wave > 0)
            .map(|t| u64::from(t.rows) * u64::from(t.nt) * elem)
            .sum();
        Ok(CubeForm {
            m: self.spec.m,
            channels,
            out,
            bytes,
            scratch,
        })
    }

    /// The tasks writing C as one cube at `c` (A at `a`, the weight bank at `b`, the
    /// partials of later K waves at `scratch`, [`CubeForm::scratch`] bytes): the plan's
    /// tasks in its order, then one int32 add per partial block (at most 128 rows and
    /// 1024 channels each) into the cube. `native_a`: A is the cube `[K/E][M][E]` an
    /// earlier operation wrote rather than the plan's packed A (K a multiple of 32).
    pub fn cube_tasks(
        &self,
        [a, b, c, scratch]: [DmaAddr; 4],
        native_a: bool,
    ) -> Result<Vec<Task>> {
        let form = self.cube_form()?;
        if native_a && !self.spec.k.is_multiple_of(32) {
            return Err(unsupported(format!(
                "a native A of K = {} channels; K must be a multiple of 32",
                self.spec.k
            )));
        }
        let mut tasks = Vec::with_capacity(self.tasks.len());
        let mut adds = Vec::new();
        let mut partial_at = 0u64;
        for t in &self.tasks {
            let block = self.cube_block(t, c)?;
            let task = if t.wave == 0 {
                self.cube_task(t, a, b, native_a, (block, true))?
            } else {
                let at = offset(scratch, partial_at)?;
                adds.extend(self.add_partial(t, block, at)?);
                partial_at += u64::from(t.rows) * u64::from(t.nt) * u64::from(form.out.bytes());
                self.cube_task(t, a, b, native_a, (at, false))?
            };
            tasks.push(task);
        }
        tasks.extend(adds);
        Ok(tasks)
    }

    /// The address of `t`'s block in the cube at `c`.
    fn cube_block(&self, t: &TaskTile, c: DmaAddr) -> Result<DmaAddr> {
        let e = u64::from(self.c_type().atom_elems());
        let m = u64::from(self.spec.m);
        offset(c, (u64::from(t.n0) / e * m + u64::from(t.m0)) * 16)
    }

    /// `t`'s task reading A (packed, or the native cube at `a`), writing its block at
    /// `c_at`: into the cube (surfaces M atoms apart) when `in_cube`, else in the plan's
    /// own block layout (surfaces `t.rows` atoms apart).
    fn cube_task(
        &self,
        t: &TaskTile,
        a: DmaAddr,
        b: DmaAddr,
        native_a: bool,
        (c_at, in_cube): (DmaAddr, bool),
    ) -> Result<Task> {
        let m = self.spec.m;
        let mut mm = self.task_matmul(t);
        let a_at = if native_a {
            let w = self.layout.waves[t.wave as usize];
            let e = u64::from(self.spec.dtype.atom_elems());
            // The tile's rows of each of the cube's surfaces of M atoms.
            mm.a_layout = Layout::Native;
            mm.a_cube_rows = Some(m);
            offset(
                a,
                (u64::from(w.k0) / e * u64::from(m) + u64::from(t.m0)) * 16,
            )?
        } else {
            offset(a, t.a_offset)?
        };
        if in_cube {
            mm.c_cube_rows = Some(m);
        }
        self.task_writing(mm, t, a_at, [b, c_at, c_at])
    }

    /// The adds of `t`'s partial block (at `partial`, surfaces `rows` atoms apart) into
    /// the cube's block at `block` (surfaces M atoms apart).
    fn add_partial(&self, t: &TaskTile, block: DmaAddr, partial: DmaAddr) -> Result<Vec<Task>> {
        let (m, cols) = (self.spec.m, t.nt);
        let mut v = Vec::new();
        for c0 in (0..cols).step_by(ADD_CHANNELS as usize) {
            let ch = (cols - c0).min(ADD_CHANNELS);
            for r0 in (0..t.rows).step_by(ADD_ROWS as usize) {
                let rows = (t.rows - r0).min(ADD_ROWS);
                let acc = offset(
                    block,
                    (u64::from(c0 / 4) * u64::from(m) + u64::from(r0)) * 16,
                )?;
                let p = offset(
                    partial,
                    (u64::from(c0 / 4) * u64::from(t.rows) + u64::from(r0)) * 16,
                )?;
                v.push(add_task_strided(rows, ch, (acc, m), (p, t.rows))?);
            }
        }
        Ok(v)
    }
}
