//! Static checks of one task for known hazards (docs/hardware/quirks.md).

use super::error::{At, Lint, LintKind};
use super::exec::{EwSrc, Feature, Main, Task};
use super::reg_name;
use crate::regcmd::BlockMask;
use crate::regs::{Register, cna, dpu};
use crate::task::{Precision, limits};

fn lint(out: &mut Vec<Lint>, at: At, kind: LintKind, message: String) {
    out.push(Lint { at, kind, message });
}

/// Whether the task's DPU needs data that only DPU_RDMA reads.
pub(super) fn needs_rdma(t: &Task) -> bool {
    matches!(t.main, Main::Flying(_))
        || matches!(t.ew.as_ref().map(|e| &e.src), Some(EwSrc::Memory(_)))
}

/// Whether the atoms `(surface, line, x)` of a cube can land on the same address.
fn may_overlap(w: u64, h: u64, surfaces: u64, line: u64, surf: u64) -> bool {
    let planar = surfaces <= 1 || surf >= (h - 1) * line + w;
    let lines_ok = h <= 1 || line >= w;
    let interleaved = h <= 1 || line >= (surfaces - 1) * surf + w;
    let surf_ok = surfaces <= 1 || surf >= w;
    !((planar && lines_ok) || (interleaved && surf_ok))
}

/// Lints one checked pooling task: what its checks let through as derived.
pub(super) fn pool(p: &super::exec::Pool, at: At, out: &mut Vec<Lint>) {
    for why in &p.unvalidated {
        lint(out, at, LintKind::Unvalidated, why.clone());
    }
}

/// Lints one checked task.
pub(super) fn task(t: &Task, at: At, out: &mut Vec<Lint>) {
    for why in &t.unvalidated {
        lint(out, at, LintKind::Unvalidated, why.clone());
    }
    if needs_rdma(t) && !t.enable.contains(BlockMask::DPU_RDMA) {
        lint(
            out,
            at,
            LintKind::DpuWithoutRdma,
            format!(
                "the DPU reads {} through DPU_RDMA, but the op-enable mask {:#x} does not start DPU_RDMA (0x10)",
                if matches!(t.main, Main::Flying(_)) {
                    "its main data"
                } else {
                    "an element-wise operand"
                },
                t.enable.0
            ),
        );
    }
    let o = &t.out;
    let epa = o.atom_elems() as u64;
    if may_overlap(
        o.w as u64,
        o.h as u64,
        o.c as u64 / epa,
        o.line / 16,
        o.surf / 16,
    ) {
        lint(
            out,
            at,
            LintKind::OutputOverlap,
            format!(
                "output atoms overlap: {} surfaces of {}x{} atoms with line stride {} and surface stride {} bytes ({} / {})",
                o.c as u64 / epa,
                o.w,
                o.h,
                o.line,
                o.surf,
                <dpu::DataCubeNotchAddr as Register>::NAME,
                dpu::DstSurfStride::DST_SURF_STRIDE
            ),
        );
    }
    if matches!(t.proc, Precision::Fp16 | Precision::Bf16) && o.c > limits::FLOAT_MAX_CHANNELS {
        lint(
            out,
            at,
            LintKind::WideFp16,
            format!(
                "{} output channels in one 16-bit float task; tasks wider than 4096 made later int8 tasks time out on boards",
                o.c
            ),
        );
    }
    if matches!(o.prec, Precision::Fp16 | Precision::Bf16) && o.h > 1 {
        let surfaces = o.c as u64 / epa;
        if o.surf / 16 < o.w as u64 * o.h as u64 && o.line / 16 > surfaces * (o.surf / 16).max(1) {
            lint(
                out,
                at,
                LintKind::Fp16NTileScatter,
                format!(
                    "a 16-bit float output of {} channels written into rows of {} bytes; boards could not scatter fp16 N tiles into full rows",
                    o.c, o.line
                ),
            );
        }
    }
    if let Some(e) = &t.ew
        && e.dropped
    {
        lint(
            out,
            at,
            LintKind::Fp16EwAddDropped,
            format!(
                "fp16 element-wise ADD with {} = 1: the hardware drops the operand (the simulator does too)",
                dpu::EwCfg::EW_OP_CVT_BYPASS
            ),
        );
    }
    if let Main::Conv { feature, .. } = &t.main {
        conv(t, feature, at, out);
    }
}

/// Lints the convolution feeding a checked task, whose feature read is `feature`.
fn conv(t: &Task, feature: &Feature, at: At, out: &mut Vec<Lint>) {
    let pixels = feature.w as u64 * feature.h as u64;
    if feature.prec == Precision::Int8
        && limits::in_int8_k_gap(feature.c)
        && pixels > u64::from(limits::INT8_GAP_MAX_ROWS)
    {
        lint(
            out,
            at,
            LintKind::Int8KTile,
            format!(
                "int8 K tile of {} channels with {pixels} rows: K in ({}, {}) failed to submit on boards for M > {}",
                feature.c,
                limits::INT8_K_GAP.0,
                limits::INT8_K_GAP.1,
                limits::INT8_GAP_MAX_ROWS
            ),
        );
    }
    if feature.prec.is_float() && t.grains < feature.h + 1 {
        lint(
            out,
            at,
            LintKind::FeatureGrains,
            format!(
                "{:?} = {} for {} rows; values below rows + 1 corrupted some large-K fp16 results",
                cna::ConvCon2::FEATURE_GRAINS,
                t.grains,
                feature.h
            ),
        );
    }
    if feature.prec == Precision::Int4 && feature.c > 480 {
        lint(
            out,
            at,
            LintKind::Int4Saturation,
            format!(
                "int4 x int4 over {} channels accumulates in int16 and may saturate (safe for any input up to 480)",
                feature.c
            ),
        );
    }
    if !t.group_line_off && feature.h > 1 && t.line_stride_field != 4 * feature.w {
        lint(
            out,
            at,
            LintKind::UnverifiedGeometry,
            format!(
                "{:?} = {} with group line fetch on and {} lines of width {}: no board-validated program uses a line stride other than 4 x width here",
                cna::DmaCon1::LINE_STRIDE,
                t.line_stride_field,
                feature.h,
                feature.w
            ),
        );
    }
}

/// Lints registers the task read that no task of its kick wrote.
pub(super) fn stale(offsets: &[u16], never_written: &[u16], at: At, out: &mut Vec<Lint>) {
    if offsets.is_empty() {
        return;
    }
    let mut names: Vec<String> = offsets
        .iter()
        .take(6)
        .map(|&o| {
            if never_written.contains(&o) {
                format!("{} (reset value)", reg_name(o))
            } else {
                reg_name(o).to_string()
            }
        })
        .collect();
    if offsets.len() > 6 {
        names.push(format!("and {} more", offsets.len() - 6));
    }
    lint(
        out,
        at,
        LintKind::StaleRegisters,
        format!(
            "reads {} register(s) no list of its kick writes, so their values depend on earlier programs: {}",
            offsets.len(),
            names.join(", ")
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::may_overlap;

    #[test]
    fn overlap_of_common_layouts() {
        // Native [C1][M][atom]: surface stride M atoms.
        assert!(!may_overlap(4, 1, 8, 4, 4));
        assert!(!may_overlap(1, 4, 8, 1, 4));
        // Row-major int32 [M][N]: surface 1 atom, line N/4 atoms.
        assert!(!may_overlap(1, 16, 256, 256, 1));
        // A notch clamped to 13 groups with N = 1024: lines of 104 atoms, 256 surfaces.
        assert!(may_overlap(1, 16, 256, 104, 1));
        // Planar with surfaces too close.
        assert!(may_overlap(4, 4, 2, 4, 8));
        assert!(!may_overlap(4, 4, 2, 4, 16));
    }
}
