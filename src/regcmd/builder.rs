//! Building tasks and programs from typed registers.

use super::addr::{BufferId, DmaAddr, Reloc, Relocation};
use super::{BlockMask, RegCmd, TAIL_ENTRIES, TASK_ALIGN_BYTES, pc_data_amount};
use crate::error::{Error, Result};
use crate::regs::{self, CommandRegister, DmaAddressRegister, Register, cna, dpu, pc};
use crate::submit::TaskDesc;
use std::collections::{BTreeSet, HashMap};

/// The body of one task: register writes in the order they will be fetched.
///
/// Only typed registers of blocks that regcmd can address are accepted
/// ([`CommandRegister`]); [`TaskBuilder::write_raw`] is the escape hatch for words the
/// model does not know, and every use of it is counted and marked by the decoder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskBuilder {
    entries: Vec<RegCmd>,
    relocs: Vec<(usize, Reloc, &'static str, u32)>,
    raw: Vec<usize>,
}

impl TaskBuilder {
    /// An empty body.
    pub fn new() -> TaskBuilder {
        TaskBuilder::default()
    }

    /// An empty body with room for `entries` writes.
    pub fn with_capacity(entries: usize) -> TaskBuilder {
        TaskBuilder {
            entries: Vec::with_capacity(entries),
            ..TaskBuilder::default()
        }
    }

    /// Appends a write of the typed register `reg`.
    pub fn write<R: CommandRegister>(&mut self, reg: R) -> &mut TaskBuilder {
        self.entries.push(RegCmd::write(reg));
        self
    }

    /// Appends a write of `R` built from field values, each field a generated constant
    /// (so a misspelt field does not compile); fields not given are 0. A value that does
    /// not fit its field is an error, never truncated.
    ///
    /// ```
    /// use rknpu_driver::regcmd::TaskBuilder;
    /// use rknpu_driver::regs::cna::DataSize0;
    ///
    /// let mut t = TaskBuilder::new();
    /// t.write_fields(&[(DataSize0::DATAIN_WIDTH, 1), (DataSize0::DATAIN_HEIGHT, 4)])?;
    /// assert_eq!(t.entries()[0].value(), 0x0001_0004);
    /// assert!(t.write_fields(&[(DataSize0::DATAIN_HEIGHT, 4096)]).is_err());
    /// # Ok::<(), rknpu_driver::Error>(())
    /// ```
    pub fn write_fields<R: CommandRegister>(
        &mut self,
        fields: &[(regs::Field<R>, u32)],
    ) -> Result<&mut TaskBuilder> {
        let reg = fields
            .iter()
            .try_fold(R::from_raw(0), |r, &(f, v)| f.set(r, v))?;
        Ok(self.write(reg))
    }

    /// Appends a write of element `index` of a register array (e.g.
    /// [`regs::cna::DCOMP_AMOUNT`]); an index past the array is an error.
    pub fn write_at<R: CommandRegister, const N: usize>(
        &mut self,
        array: &regs::RegArray<R, N>,
        index: usize,
        value: R,
    ) -> Result<&mut TaskBuilder> {
        let info = array.info(index).ok_or_else(|| Error::Unsupported {
            what: "register array write",
            why: format!("index {index} of a {N}-register array"),
        })?;
        self.entries
            .push(RegCmd::new(R::TARGET, value.raw(), info.offset));
        Ok(self)
    }

    /// Appends a write of a DMA address register. A fixed address is checked against the
    /// register's alignment now; a relocation when the program is bound.
    pub fn write_addr<R: DmaAddressRegister>(&mut self, addr: DmaAddr) -> Result<&mut TaskBuilder> {
        match addr {
            DmaAddr::Fixed(a) => {
                if a % R::ALIGN != 0 {
                    return Err(Error::Misaligned {
                        register: R::NAME,
                        addr: a.into(),
                        align: R::ALIGN,
                    });
                }
                self.entries.push(RegCmd::write(R::from_raw(a)));
            }
            DmaAddr::Reloc(r) => {
                self.relocs.push((self.entries.len(), r, R::NAME, R::ALIGN));
                self.entries.push(RegCmd::new(R::TARGET, 0, R::OFFSET));
            }
        }
        Ok(self)
    }

    /// Appends a raw entry the register model does not describe. Counted by
    /// [`TaskBuilder::raw_count`] and marked `raw` by the decoder of the built program.
    pub fn write_raw(&mut self, target: u16, offset: u16, value: u32) -> &mut TaskBuilder {
        self.raw.push(self.entries.len());
        self.entries.push(RegCmd::new(target, value, offset));
        self
    }

    /// Number of body entries so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many entries came through [`TaskBuilder::write_raw`].
    pub fn raw_count(&self) -> usize {
        self.raw.len()
    }

    /// The body entries (relocated ones hold 0 until bound).
    pub fn entries(&self) -> &[RegCmd] {
        &self.entries
    }

    /// Where entry `index` points, if it is a relocated address.
    pub fn relocation(&self, index: usize) -> Option<Reloc> {
        self.relocs
            .iter()
            .find(|&&(e, ..)| e == index)
            .map(|&(_, target, ..)| target)
    }

    /// The body with only the entries whose index `keep` accepts, in their order; the
    /// relocations and raw marks move with their entries.
    pub fn retain(&self, keep: impl Fn(usize) -> bool) -> TaskBuilder {
        let mut out = TaskBuilder::with_capacity(self.entries.len());
        // New index of each kept entry.
        let mut moved = vec![None; self.entries.len()];
        for (i, &e) in self.entries.iter().enumerate() {
            if keep(i) {
                moved[i] = Some(out.entries.len());
                out.entries.push(e);
            }
        }
        out.relocs = self
            .relocs
            .iter()
            .filter_map(|&(e, r, name, align)| Some((moved[e]?, r, name, align)))
            .collect();
        out.raw = self.raw.iter().filter_map(|&e| moved[e]).collect();
        out
    }
}

/// A register as a body addresses it: target code and offset.
type RegKey = (u16, u16);

/// What a body entry leaves in its register: the value, or the relocation target whose
/// bound address will be the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    Value(u32),
    Reloc(Reloc),
}

/// The registers an incremental body writes even when the group already holds their
/// value: those the vendor runtime's chained fp16 GEMM (allbilly-rk3588
/// `rknn-gemm-fp16-394-pcchain`, docs/conformance.md) writes unchanged in every
/// incremental task.
fn always_written() -> [RegKey; 10] {
    fn key<R: CommandRegister>() -> RegKey {
        (R::TARGET, R::OFFSET)
    }
    [
        key::<cna::CbufCon0>(),
        key::<cna::DcompRegnum>(),
        key::<cna::DcompCtrl>(),
        key::<cna::ConvCon1>(),
        key::<dpu::SPointer>(),
        key::<cna::FcDataSize0>(),
        key::<cna::FcDataSize1>(),
        key::<cna::DcompAddr0>(),
        key::<dpu::WdmaSize0>(),
        key::<dpu::WdmaSize1>(),
    ]
}

/// One ping-pong register group as the tasks of the current chain left it.
#[derive(Default)]
struct Group {
    held: HashMap<RegKey, Held>,
    /// The registers the last task that used this group wrote (its full body's).
    last: Option<BTreeSet<RegKey>>,
}

/// Reduces the bodies of a chain to incremental ones ([`ProgramBuilder::incremental`]).
struct Reducer<'a> {
    groups: [Group; 2],
    /// Tasks of the current chain so far.
    index: usize,
    always: &'a [RegKey],
}

impl Reducer<'_> {
    /// The body to emit for `body`, the next task of the chain.
    fn next(&mut self, body: &TaskBuilder) -> TaskBuilder {
        let group = &mut self.groups[self.index % 2];
        self.index += 1;
        let keys: Vec<RegKey> = body
            .entries
            .iter()
            .map(|e| (e.target(), e.offset()))
            .collect();
        let held: Vec<Held> = (0..body.entries.len())
            .map(|i| match body.relocation(i) {
                Some(r) => Held::Reloc(r),
                None => Held::Value(body.entries[i].value()),
            })
            .collect();
        let set: BTreeSet<RegKey> = keys.iter().copied().collect();
        let reduced = if group.last.as_ref() == Some(&set) {
            // Registers with a write that changes what the group holds keep every write.
            let changed: BTreeSet<RegKey> = keys
                .iter()
                .zip(&held)
                .filter(|&(k, h)| group.held.get(k) != Some(h))
                .map(|(k, _)| *k)
                .collect();
            let mut first_seen = BTreeSet::new();
            let keep: Vec<bool> = keys
                .iter()
                .map(|k| {
                    let first = first_seen.insert(*k);
                    changed.contains(k) || (first && self.always.contains(k))
                })
                .collect();
            body.retain(|i| keep[i])
        } else {
            // The first task in this group, or another kind of task: the full body.
            body.clone()
        };
        for (k, h) in keys.into_iter().zip(held) {
            group.held.insert(k, h);
        }
        group.last = Some(set);
        reduced
    }
}

/// Chains task bodies into one program in one regcmd buffer.
#[derive(Clone, Debug)]
pub struct ProgramBuilder {
    regcmd_buffer: BufferId,
    tasks: Vec<(TaskBuilder, BlockMask)>,
    /// Tasks whose tail ends their chain although more tasks follow.
    chain_ends: Vec<usize>,
    /// Whether later tasks of a chain get incremental bodies.
    incremental: bool,
    /// Registers an incremental body writes even when unchanged.
    always: Vec<RegKey>,
}

impl ProgramBuilder {
    /// A program whose words will live in `regcmd_buffer` (chain addresses point into it).
    pub fn new(regcmd_buffer: BufferId) -> ProgramBuilder {
        ProgramBuilder {
            regcmd_buffer,
            tasks: Vec::new(),
            chain_ends: Vec::new(),
            incremental: false,
            always: always_written().to_vec(),
        }
    }

    /// Incremental bodies (off by default), as the vendor runtime writes its chains.
    ///
    /// Each core has two ping-pong register groups and the tasks of a chain alternate
    /// between them, so a task finds in its group what the task two before it left. With
    /// this on, the first two tasks of every chain are written in full and each later
    /// task's body keeps, in order, only the writes of registers whose value or
    /// relocation target differs from what its group holds (every write of such a
    /// register), plus the first write of each register the vendor writes in every
    /// incremental task (docs/conformance.md, "Incremental bodies"). A task whose
    /// registers are not those of the task before it in its group (another kind of
    /// task) is written in full. Validated on the vendor driver only: a delta program did
    /// not work on the mainline rocket driver (docs/device.md).
    pub fn incremental(mut self, on: bool) -> ProgramBuilder {
        self.incremental = on;
        self
    }

    /// Makes incremental bodies always write `R`: for a register whose value the caller
    /// patches into the bound words after building, which the builder cannot compare.
    pub fn always_write<R: CommandRegister>(mut self) -> ProgramBuilder {
        let key = (R::TARGET, R::OFFSET);
        if !self.always.contains(&key) {
            self.always.push(key);
        }
        self
    }

    /// Appends a task: `body` then a tail whose op-enable entry starts `enable`.
    pub fn push_task(&mut self, body: TaskBuilder, enable: BlockMask) -> &mut ProgramBuilder {
        self.tasks.push((body, enable));
        self
    }

    /// Ends the chain at the last task pushed: its tail does not link to the next task,
    /// which starts a new chain (for the per-core task ranges of a multi-core job).
    pub fn end_chain(&mut self) -> &mut ProgramBuilder {
        if let Some(last) = self.tasks.len().checked_sub(1) {
            self.chain_ends.push(last);
        }
        self
    }

    /// Lays the tasks out (each on 64 bytes, zero padded), writes every tail and chains
    /// each task to the next (docs/hardware/registers.md#pc-chain).
    pub fn build(&self) -> Result<Program> {
        if self.tasks.is_empty() {
            return Err(Error::EmptyProgram);
        }
        let bodies = self.bodies();
        let align = TASK_ALIGN_BYTES / 8;
        // First pass: where each task starts.
        let mut starts = Vec::with_capacity(self.tasks.len());
        let mut at = 0usize;
        for body in &bodies {
            starts.push(at);
            at += (body.len() + TAIL_ENTRIES).next_multiple_of(align);
        }
        let total = at;
        if total * 8 > u32::MAX as usize {
            return Err(Error::ProgramTooLarge {
                what: "program size (bytes)",
                value: total * 8,
                limit: u32::MAX as usize,
            });
        }
        let mut words = Vec::with_capacity(total);
        let mut relocs = Vec::new();
        let mut raw = Vec::new();
        let mut tasks = Vec::with_capacity(self.tasks.len());
        for (i, (body, (_, enable))) in bodies.iter().zip(&self.tasks).enumerate() {
            let first = words.len();
            // A body the PC cannot fetch in one go is an error here, not at submission.
            pc_data_amount(body.len())?;
            words.extend_from_slice(&body.entries);
            relocs.extend(
                body.relocs
                    .iter()
                    .map(|&(e, target, register, align)| Relocation {
                        entry: first + e,
                        target,
                        register,
                        align,
                    }),
            );
            raw.extend(body.raw.iter().map(|e| first + e));
            let next = bodies.get(i + 1).filter(|_| !self.chain_ends.contains(&i));
            match next {
                Some(next) => {
                    relocs.push(Relocation {
                        entry: words.len(),
                        target: Reloc {
                            buffer: self.regcmd_buffer,
                            offset: (starts[i + 1] * 8) as u32,
                        },
                        register: pc::BaseAddress::NAME,
                        align: 16,
                    });
                    words.push(RegCmd::write(pc::BaseAddress::new()));
                    let next_amount = pc_data_amount(next.len())?;
                    words.push(RegCmd::write(
                        pc::RegisterAmounts::new().with_pc_data_amount(next_amount),
                    ));
                }
                None => {
                    words.push(RegCmd::NOP);
                    words.push(RegCmd::write(pc::RegisterAmounts::new()));
                }
            }
            words.push(RegCmd::MARKER);
            words.push(RegCmd::op_enable(*enable));
            words.resize(
                first + (body.len() + TAIL_ENTRIES).next_multiple_of(align),
                RegCmd::NOP,
            );
            // Both fit: the program's byte size was checked against u32 above.
            tasks.push(TaskDesc {
                offset: (first * 8) as u32,
                regcfg_amount: body.len() as u32,
                int_mask: enable.completion_int_mask().unwrap_or(0),
                enable: enable.0,
            });
        }
        debug_assert_eq!(words.len(), total);
        Ok(Program {
            words,
            tasks,
            relocs,
            raw,
            regcmd_buffer: self.regcmd_buffer,
        })
    }
}

impl ProgramBuilder {
    /// The bodies to lay out: as pushed, or reduced chain by chain when incremental.
    fn bodies(&self) -> Vec<std::borrow::Cow<'_, TaskBuilder>> {
        use std::borrow::Cow;
        if !self.incremental {
            return self.tasks.iter().map(|(b, _)| Cow::Borrowed(b)).collect();
        }
        let fresh = || Reducer {
            groups: Default::default(),
            index: 0,
            always: &self.always,
        };
        let mut r = fresh();
        let mut out = Vec::with_capacity(self.tasks.len());
        for (i, (body, _)) in self.tasks.iter().enumerate() {
            out.push(Cow::Owned(r.next(body)));
            if self.chain_ends.contains(&i) {
                r = fresh();
            }
        }
        out
    }
}

/// A complete program: words with relocations still symbolic, plus what a kernel driver
/// needs to submit it. Deterministic for the same input, so it can be golden-tested,
/// cached and bound again to new buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    words: Vec<RegCmd>,
    tasks: Vec<TaskDesc>,
    relocs: Vec<Relocation>,
    raw: Vec<usize>,
    regcmd_buffer: BufferId,
}

impl Program {
    /// The words, relocated entries holding 0.
    pub fn words(&self) -> &[RegCmd] {
        &self.words
    }

    /// The tasks, in chain order, as a kernel driver must describe them: each `offset` is
    /// the task list's byte offset in the program's regcmd buffer (a multiple of 64).
    pub fn tasks(&self) -> &[TaskDesc] {
        &self.tasks
    }

    /// Every relocated entry.
    pub fn relocations(&self) -> &[Relocation] {
        &self.relocs
    }

    /// Indices of entries written through the raw escape hatch.
    pub fn raw_entries(&self) -> &[usize] {
        &self.raw
    }

    /// The buffer the words are meant to live in.
    pub fn regcmd_buffer(&self) -> BufferId {
        self.regcmd_buffer
    }

    /// Size of the words in bytes.
    pub fn byte_len(&self) -> usize {
        self.words.len() * 8
    }

    /// The words with every relocation resolved: `base(buffer)` gives a buffer's device address.
    pub fn bind(&self, base: impl Fn(BufferId) -> Option<u64>) -> Result<Vec<RegCmd>> {
        let mut words = self.words.clone();
        self.rebind(&mut words, base)?;
        Ok(words)
    }

    /// Patches only the relocated entries of `words` (a copy of [`Program::words`],
    /// possibly bound before) for new buffer addresses.
    pub fn rebind(
        &self,
        words: &mut [RegCmd],
        base: impl Fn(BufferId) -> Option<u64>,
    ) -> Result<()> {
        if words.len() != self.words.len() {
            return Err(Error::ProgramTooLarge {
                what: "words to rebind (entries)",
                value: words.len(),
                limit: self.words.len(),
            });
        }
        for r in &self.relocs {
            let b = base(r.target.buffer).ok_or(Error::UnboundBuffer {
                buffer: r.target.buffer.0,
            })?;
            let addr = b + u64::from(r.target.offset);
            let addr32 = u32::try_from(addr).map_err(|_| Error::AddressOverflow {
                buffer: r.target.buffer.0,
                offset: r.target.offset,
                base: b,
            })?;
            if addr32 % r.align != 0 {
                return Err(Error::Misaligned {
                    register: r.register,
                    addr,
                    align: r.align,
                });
            }
            words[r.entry] = self.words[r.entry].with_value(addr32);
        }
        Ok(())
    }

    /// Decodes the program, marking raw and relocated entries.
    pub fn decode(&self) -> super::Decoded {
        let mut d = super::decode(&self.words);
        for &i in &self.raw {
            d.entries[i].raw = true;
        }
        for r in &self.relocs {
            d.entries[r.entry].reloc = Some(r.target);
        }
        d
    }
}

/// Checks at compile time that the PC registers the tails use are regcmd-addressable,
/// and that the submission vocabulary counts the same tail.
const _: () = {
    let bare = TaskDesc {
        offset: 0,
        regcfg_amount: 0,
        int_mask: 0,
        enable: 0,
    };
    assert!(bare.regcmd_count() as usize == super::TAIL_ENTRIES);
    assert!(<pc::BaseAddress as CommandRegister>::TARGET == 0x0101);
    assert!(<pc::RegisterAmounts as Register>::OFFSET == 0x0014);
    assert!(regs::TARGET_MARKER == 0x0041);
};
