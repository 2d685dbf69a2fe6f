//! Comparing outputs with the recording: exactly, or within a tolerance for the float
//! outputs a DPU task writes.

use super::Tolerance;
use super::check::task_words;
use super::target::Target;
use super::walk::Placed;
use crate::regcmd::{self, EntryKind};
use crate::regs::{Register, dpu};
use crate::submit::BufferTask;
use crate::task::Precision;
use crate::trace::{Contents, fnv1a64};
use std::collections::BTreeMap;

/// What a buffer's outputs are: the output precision of the DPU task that writes it, or
/// `None` when no DPU task does (bytes, compared exactly).
pub(super) type OutKind = Option<Precision>;

/// What `buffer`'s outputs are: the precision of the last of `tasks` whose DPU writes
/// into it.
pub(super) fn output_kind(
    target: &mut dyn Target,
    bufs: &BTreeMap<u32, Placed>,
    tasks: &[BufferTask],
    buffer: u32,
) -> OutKind {
    let &Placed {
        at: placed, size, ..
    } = bufs.get(&buffer)?;
    let mut kind = None;
    for t in tasks {
        let Ok(words) = task_words(target, t) else {
            continue;
        };
        let mut writes_here = false;
        let mut precision = None;
        for e in regcmd::decode(&words).entries {
            if let EntryKind::Write(info) = e.kind {
                let v = e.word.value();
                if info.offset == dpu::DstBaseAddr::OFFSET {
                    let dst = dpu::DstBaseAddr::DST_BASE_ADDR.extract(v);
                    writes_here = dst >= placed && (dst - placed) as u64 <= size;
                } else if info.offset == dpu::DataFormat::OFFSET {
                    precision = Precision::from_code(dpu::DataFormat::OUT_PRECISION.extract(v));
                }
            }
        }
        if writes_here {
            kind = precision.filter(|p| p.is_float());
        }
    }
    kind
}

/// An ordered integer of a float's bits, so that adjacent floats differ by one.
fn ordered(bits: u32, width: u32) -> i64 {
    let sign = 1u32 << (width - 1);
    let mag = (bits & (sign - 1)) as i64;
    if bits & sign != 0 { -mag } else { mag }
}

/// Why `got` does not match the recorded contents, or `None`.
pub(super) fn compare(
    got: &[u8],
    want: &Contents,
    kind: OutKind,
    tol: Tolerance,
) -> Option<String> {
    let want = match want {
        Contents::Bytes(b) => b,
        Contents::Digest { digest, .. } => {
            return (fnv1a64(got) != *digest)
                .then(|| "its digest differs from the recording".to_string());
        }
    };
    let width = match kind {
        Some(p) if p.is_float() && tol.float_ulps > 0 => p.bytes() as usize,
        _ => 0,
    };
    if width == 0 {
        let diff = (0..want.len()).filter(|&i| got[i] != want[i]).count();
        let first = (0..want.len()).find(|&i| got[i] != want[i])?;
        return Some(format!(
            "{diff} byte(s) differ; the first, at +{first:#x}, is {:#04x}, recorded {:#04x}",
            got[first], want[first]
        ));
    }
    let read = |b: &[u8], i: usize| -> u32 {
        if width == 2 {
            u16::from_le_bytes([b[i], b[i + 1]]) as u32
        } else {
            u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
        }
    };
    let bits = (width * 8) as u32;
    let mut worst: Option<(usize, u32, u32, i64)> = None;
    for i in (0..want.len() / width * width).step_by(width) {
        let (g, w) = (read(got, i), read(want, i));
        let d = (ordered(g, bits) - ordered(w, bits)).abs();
        if d > tol.float_ulps as i64 && worst.is_none_or(|x| d > x.3) {
            worst = Some((i, g, w, d));
        }
    }
    worst.map(|(i, g, w, d)| {
        format!(
            "element at +{i:#x} is {g:#x}, recorded {w:#x}: {d} ULP apart, beyond the {} ULP tolerance",
            tol.float_ulps
        )
    })
}
