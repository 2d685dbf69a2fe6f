//! Check mode's static checks of a submission's task lists.

use super::ReplayReport;
use super::target::{Run, Target};
use crate::regcmd::{self, RegCmd};
use crate::submit::BufferTask;

/// A task's list (body and tail) as the target holds it now.
pub(super) fn task_words(target: &mut dyn Target, t: &BufferTask) -> Result<Vec<RegCmd>, String> {
    let len = t.task.list_bytes() as usize;
    let b = target.read(t.buffer, t.task.offset as u64, len)?;
    regcmd::words_from_le_bytes(&b).map_err(|e| e.to_string())
}

/// The static checks of every task of a submission.
pub(super) fn check_tasks(target: &mut dyn Target, r: &Run<'_>, rep: &mut ReplayReport) {
    let range_end: Vec<usize> = r
        .ranges
        .iter()
        .flat_map(|&(s, n)| std::iter::repeat_n((s + n) as usize, n as usize))
        .collect();
    for (i, t) in r.tasks.iter().enumerate() {
        let at = format!("submit {} task {i}", r.id);
        let words = match task_words(target, t) {
            Ok(w) => w,
            Err(e) => {
                rep.mismatches.push(format!("{at}: {e}"));
                continue;
            }
        };
        let d = regcmd::decode(&words);
        for e in &d.entries {
            if e.is_unknown() {
                rep.mismatches.push(format!(
                    "{at} entry {}: {:?} is no register of the model",
                    e.index, e.word
                ));
            } else if e.reserved_bits() != 0 {
                rep.lints.push(format!(
                    "{at} entry {}: reserved bits {:#x} set",
                    e.index,
                    e.reserved_bits()
                ));
            }
        }
        let Some(span) = d.tasks.first() else {
            rep.mismatches.push(format!("{at}: an empty list"));
            continue;
        };
        match span.enable {
            Some(m) if t.task.enable != 0 && m.0 != t.task.enable => rep.mismatches.push(format!(
                "{at}: op-enable {:#x} in the list, {:#x} in the task",
                m.0, t.task.enable
            )),
            None => rep
                .mismatches
                .push(format!("{at}: the list has no op-enable entry")),
            _ => {}
        }
        // Within a core's range the PC follows the chain: it must name the next task.
        if i + 1 < range_end[i] {
            let next = r.addrs[i + 1];
            match span.next_address {
                Some(a) if a & !0xf == next & !0xf => {}
                Some(a) => rep.mismatches.push(format!(
                    "{at}: chains to {a:#010x}, but the next task is at {next:#010x}"
                )),
                None => rep.mismatches.push(format!(
                    "{at}: the next task of its core's range is not chained"
                )),
            }
        }
    }
}
