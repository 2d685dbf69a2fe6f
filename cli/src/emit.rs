//! `rknpu matmul ... --emit FILE`: a plan's program bound at fixed device addresses and
//! written as little-endian u64 words, without a device — what `rknpu verify` and
//! `rknpu decode` read.

use crate::Failure;
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan, REGCMD};
use rknpu_driver::regcmd::words_to_le_bytes;

/// The program's address, and the step of the addresses of the buffers after it.
const STEP: u64 = 0x1000_0000;

/// One past the NPU's highest device address (32-bit).
const ADDRESS_SPACE: u64 = 1 << 32;

fn fail(e: &dyn std::fmt::Display) -> Failure {
    Failure(1, e.to_string())
}

/// Device addresses for buffers of `lens` bytes, in order: the first at 0x10000000, each
/// next one at the next free 0x10000000-aligned address (so 0x20000000, 0x30000000, ...
/// while every buffer holds at most 256 MiB).
fn layout(lens: impl IntoIterator<Item = u64>) -> Result<Vec<u64>, Failure> {
    let mut next = STEP;
    let mut addrs = Vec::new();
    for len in lens {
        let end = next + len.max(1);
        if end > ADDRESS_SPACE {
            return Err(Failure(
                1,
                format!(
                    "the buffers do not fit the 32-bit device address space from {STEP:#x}: one of {len} bytes would start at {next:#x}"
                ),
            ));
        }
        addrs.push(next);
        next = end.next_multiple_of(STEP);
    }
    Ok(addrs)
}

/// Plans `spec`, binds its program at [`layout`]'s addresses, writes the words to
/// `file` and prints the plan, every buffer and the matching `rknpu verify` command.
pub(crate) fn matmul(spec: MatmulSpec, file: &str) -> Result<(), Failure> {
    let plan = Plan::new(spec).map_err(|e| fail(&e))?;
    outln!("plan: {plan}");
    let program = plan.program().map_err(|e| fail(&e))?;
    let buffers = plan.buffers(&program);
    let addrs = layout(buffers.iter().map(|b| b.len))?;
    let words = program
        .bind(|id| buffers.iter().position(|b| b.id == id).map(|i| addrs[i]))
        .map_err(|e| fail(&e))?;
    std::fs::write(file, words_to_le_bytes(&words))
        .map_err(|e| Failure(1, format!("{file}: {e}")))?;
    outln!(
        "program: {} task(s), {} words ({} bytes) bound at {:#x}, written to {file}",
        program.tasks().len(),
        words.len(),
        words.len() * 8,
        addrs[0]
    );
    let mut verify = format!("rknpu verify --regcmd {file} --regcmd-addr {:#x}", addrs[0]);
    for (b, &addr) in buffers.iter().zip(&addrs) {
        let access = if b.written { "w" } else { "r" };
        outln!(
            "buffer {} {:<7} at {addr:#010x} {:>10} bytes {access}",
            b.id.0,
            b.name,
            b.len
        );
        // `verify` lists the program's own buffer itself.
        if b.id != REGCMD {
            verify.push_str(&format!(" --buffer {addr:#x}:{}:{access}", b.len));
        }
    }
    outln!("verify: {verify}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::layout;

    #[test]
    fn buffers_sit_at_the_next_free_aligned_address() {
        let at = |lens: &[u64]| layout(lens.iter().copied()).ok();
        assert_eq!(
            at(&[960, 256, 2048, 512]),
            Some(vec![0x1000_0000, 0x2000_0000, 0x3000_0000, 0x4000_0000])
        );
        // A buffer of more than 256 MiB pushes the next one up; exactly 256 MiB does not.
        assert_eq!(
            at(&[8, 0x1000_0001, 0x1000_0000, 1]),
            Some(vec![0x1000_0000, 0x2000_0000, 0x4000_0000, 0x5000_0000])
        );
        assert_eq!(at(&[8, 0]), Some(vec![0x1000_0000, 0x2000_0000]));
        // The last byte of the address space is usable, one more is not.
        assert!(at(&[8, 0xe000_0000]).is_some());
        assert!(at(&[8, 0xe000_0001]).is_none());
    }
}
