//! Bytes the NPU's DMA engines move, per engine, as the model moves them.

use std::ops::{Add, AddAssign};

/// Bytes each DMA engine read from or wrote to memory, as the simulator moves them:
/// whole 16-byte atoms per line of a cube (padding lanes included), whole weight atoms,
/// whole regcmd fetches. These are what the model moves, derived from the same decoded
/// task values its data path executes — not a measurement on a board.
///
/// A [`CoreRun`](super::CoreRun) and a [`RangeRun`](super::RangeRun) carry the sum over
/// the tasks they ran; counters add up across runs with `+` and `+=`.
/// docs/simulator.md ("DMA counters") says what each engine's count covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DmaCounters {
    /// The PC's reads of task lists: `(amount + 1) × 16` bytes per fetch.
    pub pc_regcmd: u64,
    /// CNA feature (input cube) reads: one run of `W × 16` bytes per line and surface,
    /// atoms whole. Nothing for a task that reuses the data already in the CBUF
    /// (DATA_REUSE).
    pub cna_feature: u64,
    /// CNA weight reads: the kernels' weight atoms, `N × C × bits / 8` bytes. Nothing for a
    /// task that reuses the weights already in the CBUF (WEIGHT_REUSE).
    pub cna_weight: u64,
    /// DPU_RDMA MRDMA reads (the main data of a flying-mode task): one run of `W × 16`
    /// bytes per line and surface.
    pub dpu_mrdma: u64,
    /// DPU_RDMA ERDMA reads (the element-wise operand): one run of `W × 16` bytes per
    /// line and surface.
    pub dpu_erdma: u64,
    /// DPU write DMA writes (the output cube): one run of `W × 16` bytes per line and
    /// surface. Nothing for a task whose output a DMA fault suppressed.
    pub dpu_write: u64,
}

impl DmaCounters {
    /// Bytes read by every engine: PC, CNA feature and weights, MRDMA, ERDMA.
    pub fn read(&self) -> u64 {
        self.pc_regcmd + self.cna_feature + self.cna_weight + self.dpu_rdma()
    }

    /// Bytes written by every engine (the DPU write DMA).
    pub fn written(&self) -> u64 {
        self.dpu_write
    }

    /// Bytes DPU_RDMA read (MRDMA and ERDMA).
    pub fn dpu_rdma(&self) -> u64 {
        self.dpu_mrdma + self.dpu_erdma
    }
}

impl AddAssign for DmaCounters {
    fn add_assign(&mut self, o: DmaCounters) {
        self.pc_regcmd += o.pc_regcmd;
        self.cna_feature += o.cna_feature;
        self.cna_weight += o.cna_weight;
        self.dpu_mrdma += o.dpu_mrdma;
        self.dpu_erdma += o.dpu_erdma;
        self.dpu_write += o.dpu_write;
    }
}

impl Add for DmaCounters {
    type Output = DmaCounters;

    fn add(mut self, o: DmaCounters) -> DmaCounters {
        self += o;
        self
    }
}

impl std::iter::Sum for DmaCounters {
    fn sum<I: Iterator<Item = DmaCounters>>(iter: I) -> DmaCounters {
        iter.fold(DmaCounters::default(), Add::add)
    }
}
