//! The job the verifier-vs-simulator checks mutate: a valid two-task int8 matmul chain,
//! bound at fixed addresses, with an unlisted copy of the program after it whose output
//! is bound onto a read-only buffer. Shared by `tests/verify_differential.rs` (proptest)
//! and the fuzz target `verify_sim` (included there by path), so both check the same
//! claim (issue 26, item 1): any program `verify::check_chain` accepts never makes the
//! simulated NPU read or write outside the job's buffers, or write a read-only one.
#![allow(dead_code)]

use rknpu_driver::kernels::single::{self, Dtype, SingleMatmul};
use rknpu_driver::regcmd::{ProgramBuilder, RegCmd, words_to_le_bytes};
use rknpu_driver::regs::{CommandRegister, Register, pc};
use rknpu_driver::sim::{Kick, SimError, Simulator};
use rknpu_driver::verify::{self, BufferAccess, JobBuffer, TaskList};

/// Where the program (and its unlisted copy after it) is mapped.
pub const REGCMD_AT: u64 = 0x1000_0000;
/// The activations (read-only).
pub const A_AT: u64 = 0x2000_0000;
/// The weights (read-only).
pub const B_AT: u64 = 0x3000_0000;
/// The results (the only buffer the job may write).
pub const C_AT: u64 = 0x4000_0000;

/// The valid program, the unlisted copy placed after it, and the job's buffers.
pub struct Base {
    /// The task both entries of the chain run.
    pub mm: SingleMatmul,
    /// The bound program.
    pub words: Vec<RegCmd>,
    /// The unlisted copy, bound with its output on A.
    pub copy: Vec<RegCmd>,
    /// The listed tasks.
    pub tasks: Vec<rknpu_driver::submit::TaskDesc>,
    /// The job's buffers, with their access.
    pub buffers: Vec<JobBuffer>,
    /// The entries worth mutating most: every relocated address (DMA and chain) and
    /// every tail's address and amount.
    pub hot: Vec<usize>,
}

/// Builds the job.
pub fn base() -> Base {
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let mut p = ProgramBuilder::new(single::REGCMD);
    for _ in 0..2 {
        p.push_task(mm.body().unwrap(), mm.enable());
    }
    let program = p.build().unwrap();
    let len = program.byte_len() as u64;
    let bind = |regcmd: u64, c: u64| {
        program
            .bind(|id| {
                Some(match id {
                    single::REGCMD => regcmd,
                    single::A => A_AT,
                    single::B => B_AT,
                    _ => c,
                })
            })
            .unwrap()
    };
    let words = bind(REGCMD_AT, C_AT);
    let copy = bind(REGCMD_AT + len, A_AT);
    let buffers = vec![
        JobBuffer::new(REGCMD_AT, 2 * len, BufferAccess::Read),
        JobBuffer::new(A_AT, mm.a_bytes() as u64, BufferAccess::Read),
        JobBuffer::new(B_AT, mm.b_bytes() as u64, BufferAccess::Read),
        JobBuffer::new(C_AT, mm.c_bytes() as u64, BufferAccess::Write),
    ];
    let mut hot: Vec<usize> = program.relocations().iter().map(|r| r.entry).collect();
    for t in program.tasks() {
        let tail = (t.offset / 8 + t.regcfg_amount) as usize;
        hot.extend([tail, tail + 1]);
    }
    Base {
        mm,
        words,
        copy,
        tasks: program.tasks().to_vec(),
        buffers,
        hot,
    }
}

/// One mutation: the entry at `index` (modulo the program's length; below
/// [`HOT`], the `index`-th hot entry instead) gets `value`; with `forge`, the whole entry
/// becomes a chain-address write of it.
#[derive(Clone, Debug)]
pub struct Mutation {
    pub index: usize,
    pub value: u32,
    pub forge: bool,
}

/// Indices below this pick a hot entry.
pub const HOT: usize = usize::MAX / 4 * 3;

/// Applies `m` to `words`.
pub fn mutate(b: &Base, words: &mut [RegCmd], m: &Mutation) {
    let i = if m.index < HOT {
        b.hot[m.index % b.hot.len()]
    } else {
        m.index % words.len()
    };
    words[i] = if m.forge {
        RegCmd::new(pc::BaseAddress::TARGET, m.value, pc::BaseAddress::OFFSET)
    } else {
        words[i].with_value(m.value)
    };
}

/// Values worth writing: each task's address in the program and in the copy, its
/// amount and the amount its tail states, 0 and addresses in the buffers.
pub fn interesting(b: &Base) -> Vec<u32> {
    let len = 8 * b.words.len() as u32;
    let mut v: Vec<u32> = b
        .tasks
        .iter()
        .flat_map(|t| {
            let at = REGCMD_AT as u32 + t.offset;
            [
                at,
                at + len,
                t.regcfg_amount,
                (t.regcfg_amount + 4).div_ceil(2) - 1,
            ]
        })
        .collect();
    v.extend([0, A_AT as u32, C_AT as u32, C_AT as u32 + 64]);
    v
}

/// The claim: if the verifier accepts `words`, the simulated run stays inside the job's
/// buffers and leaves the read-only ones unchanged. `Err` says how it did not.
pub fn check(b: &Base, words: &[RegCmd]) -> Result<bool, String> {
    if verify::check_chain(&lists(b, words), &b.buffers).is_err() {
        return Ok(false);
    }
    let (dma, written) = run(b, words);
    match (dma, written) {
        (Some(e), _) => Err(format!("verified, then {e:?}")),
        (None, true) => Err("verified, then a read-only buffer was written".into()),
        (None, false) => Ok(true),
    }
}

/// Runs the job on a simulator with only its buffers mapped; returns the DMA error if
/// any, and whether a read-only buffer changed.
pub fn run(b: &Base, words: &[RegCmd]) -> (Option<SimError>, bool) {
    let mut sim = Simulator::new();
    let mut regcmd = words_to_le_bytes(words);
    regcmd.extend(words_to_le_bytes(&b.copy));
    let a = b.mm.pack_a_int(&vec![1; 4 * 64]).unwrap();
    let bb = b.mm.pack_b_int(&vec![2; 64 * 32]).unwrap();
    let read_only = [
        (REGCMD_AT, regcmd.clone()),
        (A_AT, a.clone()),
        (B_AT, bb.clone()),
    ];
    for (at, bytes) in &read_only {
        sim.memory_mut().map(*at as u32, bytes.clone()).unwrap();
    }
    sim.memory_mut()
        .map_zeroed(C_AT as u32, b.mm.c_bytes())
        .unwrap();
    let kick = Kick {
        core: 0,
        regcmd_addr: (REGCMD_AT + u64::from(b.tasks[0].offset)) as u32,
        regcfg_amount: b.tasks[0].regcfg_amount,
        task_number: Some(2),
        int_mask: b.tasks[1].int_mask,
    };
    let dma = match sim.kick(&kick) {
        Err(e @ SimError::Dma { .. }) => Some(e),
        _ => None,
    };
    let written = read_only.iter().any(|(at, bytes)| {
        sim.memory().read(*at, bytes.len()).map(|m| m != &bytes[..]) != Some(false)
    });
    (dma, written)
}

/// The listed tasks of `words`, as Device::submit verifies them.
pub fn lists<'a>(b: &Base, words: &'a [RegCmd]) -> Vec<TaskList<'a>> {
    b.tasks
        .iter()
        .map(|t| {
            let start = t.offset as usize / 8;
            TaskList {
                addr: REGCMD_AT + u64::from(t.offset),
                words: &words[start..start + t.list_bytes() as usize / 8],
            }
        })
        .collect()
}
