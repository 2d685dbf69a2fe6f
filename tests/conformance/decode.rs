//! Reading a capture's tasks, and the matmul shape of a task.

use super::*;

// ---------------------------------------------------------------------------------------
// Decoding.

/// The capture's program: its regcmd files in task order, concatenated (each file ends in
/// its own tail, so the decoder splits them again at the op-enable entries).
pub(crate) fn load(dir: &Path) -> Vec<RegCmd> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with("regcmd.bin"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no regcmd file", dir.display());
    let mut words = Vec::new();
    for f in &files {
        let bytes = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        words.extend(
            regcmd::words_from_le_bytes(&bytes).unwrap_or_else(|e| panic!("{}: {e}", f.display())),
        );
    }
    words
}

/// One task as a core runs it: the blocks it starts, the registers its body writes (in
/// order), the register file when its op-enable entry arrives, and that file read into
/// the task model.
pub(crate) struct TaskState {
    pub(crate) enable: BlockMask,
    pub(crate) body: Vec<RegCmd>,
    pub(crate) regs: Snapshot,
    pub(crate) model: Task,
}

/// The tasks of `words` in order. Each task's writes land in one of two ping-pong register
/// groups, alternating, so an incremental task (394-pcchain's tasks 2..10) sees what the
/// task two before it left: the rule of [`verify::tasks_of_words`], whose models must be
/// the same.
pub(crate) fn tasks(words: &[RegCmd]) -> Result<Vec<TaskState>, String> {
    let decoded = regcmd::decode(words);
    if decoded.unknown() != 0 {
        return Err(format!(
            "{} entries the decoder does not know",
            decoded.unknown()
        ));
    }
    let mut groups = [Snapshot::default(), Snapshot::default()];
    let mut out: Vec<TaskState> = Vec::new();
    for span in &decoded.tasks {
        let Some(enable) = span.enable else {
            continue;
        };
        let group = &mut groups[out.len() % 2];
        let mut body = Vec::new();
        for e in &decoded.entries[span.start..span.start + span.body_len] {
            if let EntryKind::Write(info) = e.kind {
                group.set(info.offset, e.word.value());
                body.push(e.word);
            }
        }
        let regs = group.clone();
        let model = Task::decode(&mut group.clone(), enable)
            .map_err(|e| format!("task {}: {e}", out.len()))?;
        out.push(TaskState {
            enable,
            body,
            regs,
            model,
        });
    }
    let models = verify::tasks_of_words(words).map_err(|e| e.to_string())?;
    if models != out.iter().map(|t| t.model.clone()).collect::<Vec<_>>() {
        return Err("the ping-pong replay disagrees with verify::tasks_of_words".into());
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// The shape of a task, from its model.

pub(crate) fn dtype_of(p: Precision) -> Result<Dtype, String> {
    Dtype::try_from(p).map_err(|_| format!("{p} is no convolution input"))
}

pub(crate) fn out_of(p: Precision) -> Result<OutType, String> {
    OutType::try_from(p).map_err(|_| format!("{p} is no matmul output type"))
}

/// The matmul a task computes, read from its model alone: M from the output atomics and
/// the feature cube (W = 1, H = M for a plain A, fetched line by line with GROUP_LINE_OFF;
/// W = M, H = 1 for a native A), K from the feature channels, N from the kernels, the
/// types from the CNA and DPU precisions, C's layout from the DPU's line notch (a plain C
/// steps over the rest of a row, a native C writes surfaces of M atoms) and the post-ops
/// from the DPU stages.
///
/// The registers hold K and N padded to 32 (the vendor writes DATAIN_CHANNEL_REAL padded
/// too), so the shape is the padded one; the library's program is the same for both.
pub(crate) fn shape_of(t: &Task) -> Result<SingleMatmul, String> {
    let (Some(cna), Some(_), Some(dpu)) = (&t.cna, &t.core, &t.dpu) else {
        return Err("not a convolution task (CNA, CORE and DPU)".into());
    };
    if dpu.input != DpuInput::Core {
        return Err("the DPU does not take the CORE's output".into());
    }
    let f = &cna.feature;
    let m = cna.conv.out_atomics;
    let a_layout = if f.group_line_off {
        if (f.width, f.height) != (1, m) {
            return Err(format!(
                "plain A of {}x{} pixels for {m} rows",
                f.width, f.height
            ));
        }
        Layout::Plain
    } else {
        if (f.width, f.height) != (m, 1) {
            return Err(format!(
                "native A of {}x{} pixels for {m} rows",
                f.width, f.height
            ));
        }
        Layout::Native
    };
    let c_layout = if dpu.out.notch == 0 {
        Layout::Native
    } else {
        Layout::Plain
    };
    // Native surfaces further apart than M atoms: a band of a taller cube.
    let a_cube_rows = match a_layout {
        Layout::Native => {
            let atoms = 4 * i64::from(f.width) + i64::from(f.surf_stride);
            let rows = u32::try_from(atoms)
                .map_err(|_| format!("native A surfaces {} apart", f.surf_stride))?;
            (rows != m).then_some(rows)
        }
        Layout::Plain => None,
    };
    let c_surf = dpu.out.surf_stride;
    let c_cube_rows = (c_layout == Layout::Native && c_surf != m).then_some(c_surf);
    let mut post = PostOps::default();
    if !dpu.bs.bypass {
        post.bias = dpu.bs.alu.map(|a| a.operand);
        post.scale = dpu
            .bs
            .mul
            .map(|m| (m.operand, u8::try_from(m.shift).unwrap_or(u8::MAX)));
        post.relu = dpu.bs.relu;
        post.clip = dpu.bs.relux;
    }
    if let Some(ew) = &dpu.ew {
        if ew.op != Some(EwOp::Alu(AluOp::Add)) || ew.src != EwSrc::Memory {
            return Err(format!("EW stage {ew:?} is no add of a memory operand"));
        }
        post.add = true;
    }
    let c = &dpu.out_cvt;
    if !c.is_identity() {
        let narrow = |v: u32| u16::try_from(v).unwrap_or(u16::MAX);
        post.out_cvt = Some((c.offset, narrow(c.scale), narrow(c.shift)));
    }
    Ok(SingleMatmul {
        m,
        k: f.channels_real,
        n: cna.weights.kernels,
        dtype: dtype_of(cna.precision)?,
        out: out_of(dpu.out.precision)?,
        a_layout,
        c_layout,
        post,
        a_cube_rows,
        c_cube_rows,
    })
}

/// The library's program for `mm`, bound at [`bind_at`], as one task.
pub(crate) fn generate(mm: &SingleMatmul) -> Result<TaskState, String> {
    let words = mm
        .program()
        .and_then(|p| p.bind(|b| Some(bind_at(b.0))))
        .map_err(|e| format!("{mm:?}: {e}"))?;
    let mut t = tasks(&words)?;
    if t.len() != 1 {
        return Err(format!("{} tasks for one SingleMatmul", t.len()));
    }
    Ok(t.remove(0))
}
