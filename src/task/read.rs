//! Reading a task's registers field by field, and the sweep that makes sure every field
//! of a started block has been read.

use crate::regs::{
    Access as FieldAccess, Block, Field, REGISTERS, Register, cna, core, dpu, dpu_rdma, pc, ppu,
    ppu_rdma,
};
use std::fmt;

/// A core's register file as a task decoder sees it: the value each register holds when
/// the op-enable entry arrives.
pub trait RegisterFile {
    /// The value of the register at `offset` (a multiple of 4 below 0x8000).
    fn value(&mut self, offset: u16) -> u32;

    /// The value without counting it as a read of the task (the sweep over fields the
    /// model does not represent uses it).
    fn peek(&mut self, offset: u16) -> u32 {
        self.value(offset)
    }
}

/// A register file built from a list of writes, starting from every register's reset
/// value: what one task's list leaves behind when nothing ran before it.
#[derive(Clone, Debug)]
pub struct Snapshot {
    values: Vec<u32>,
}

/// Bytes of the register window a task can reach: the blocks a regcmd targets, PC to
/// PPU_RDMA (offsets 0x0000..0x8000); DDMA, the first block beyond, is MMIO only.
pub(crate) const WINDOW_BYTES: usize = Block::Ddma.base() as usize;
/// Words in that window.
pub(crate) const WINDOW: usize = WINDOW_BYTES / 4;

/// Every register of the window at its reset value, one word per offset / 4.
pub(crate) fn reset_window() -> Vec<u32> {
    let mut values = vec![0; WINDOW];
    for r in REGISTERS.iter() {
        if (r.offset as usize) < WINDOW_BYTES {
            values[r.offset as usize / 4] = r.reset;
        }
    }
    values
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            values: reset_window(),
        }
    }
}

impl Snapshot {
    /// The register file after `writes` of `(offset, value)`, in order.
    pub fn from_writes(writes: impl IntoIterator<Item = (u16, u32)>) -> Snapshot {
        let mut s = Snapshot::default();
        for (offset, value) in writes {
            s.set(offset, value);
        }
        s
    }

    /// Sets one register (offsets outside the window are ignored, and so are the LUT
    /// access-port registers, which write the LUT RAM and are no register-file state).
    pub fn set(&mut self, offset: u16, value: u32) {
        if super::is_lut_port(offset) {
            return;
        }
        if let Some(v) = self.values.get_mut(offset as usize / 4) {
            *v = value;
        }
    }
}

impl RegisterFile for Snapshot {
    fn value(&mut self, offset: u16) -> u32 {
        self.values.get(offset as usize / 4).copied().unwrap_or(0)
    }
}

/// Why a task does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// A value the model does not implement (the hardware may).
    Unsupported,
    /// Values of two registers that contradict each other.
    Inconsistent,
}

/// A field whose value the task model cannot represent, named by register and field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Unsupported or inconsistent.
    pub kind: DecodeErrorKind,
    /// `BLOCK.REGISTER`.
    pub register: &'static str,
    /// The field's name.
    pub field: &'static str,
    /// The field's value.
    pub value: u64,
    /// Why.
    pub why: String,
}

impl DecodeError {
    /// An error about field `f` of register `R`.
    pub fn unsupported<R: Register>(f: Field<R>, value: u32, why: impl Into<String>) -> Self {
        DecodeError {
            kind: DecodeErrorKind::Unsupported,
            register: R::NAME,
            field: f.name(),
            value: value.into(),
            why: why.into(),
        }
    }

    /// A contradiction, reported at field `f` of register `R`.
    pub fn inconsistent<R: Register>(f: Field<R>, value: u32, why: impl Into<String>) -> Self {
        DecodeError {
            kind: DecodeErrorKind::Inconsistent,
            register: R::NAME,
            field: f.name(),
            value: value.into(),
            why: why.into(),
        }
    }

    /// An op-enable mask the model does not run.
    pub(crate) fn enable_error(value: u32, why: impl Into<String>) -> Self {
        DecodeError {
            kind: DecodeErrorKind::Unsupported,
            register: pc::OperationEnable::NAME,
            field: pc::OperationEnable::OP_EN.name(),
            value: value.into(),
            why: format!("the op-enable entry (target 0x0081): {}", why.into()),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            DecodeErrorKind::Unsupported => "is not supported",
            DecodeErrorKind::Inconsistent => "is inconsistent",
        };
        write!(
            f,
            "{}.{} = {} ({:#x}) {what}: {}",
            self.register, self.field, self.value, self.value, self.why
        )
    }
}

impl std::error::Error for DecodeError {}

/// The group-control registers of a block (S_STATUS, S_POINTER, OPERATION_ENABLE): the
/// PC and the op-enable entry drive them, they are no task configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroupControl {
    /// `S_STATUS` (read-only).
    Status,
    /// `S_POINTER` (ping-pong).
    Pointer,
    /// `OPERATION_ENABLE` (set by the op-enable entry).
    Enable,
}

/// Which group-control register `offset` is, if any.
pub(crate) fn group_control(offset: u16) -> Option<GroupControl> {
    const STATUS: [u16; 6] = [
        cna::SStatus::OFFSET,
        core::SStatus::OFFSET,
        dpu::SStatus::OFFSET,
        dpu_rdma::SStatus::OFFSET,
        ppu::SStatus::OFFSET,
        ppu_rdma::SStatus::OFFSET,
    ];
    const POINTER: [u16; 6] = [
        cna::SPointer::OFFSET,
        core::SPointer::OFFSET,
        dpu::SPointer::OFFSET,
        dpu_rdma::SPointer::OFFSET,
        ppu::SPointer::OFFSET,
        ppu_rdma::SPointer::OFFSET,
    ];
    const ENABLE: [u16; 6] = [
        cna::OperationEnable::OFFSET,
        core::OperationEnable::OFFSET,
        dpu::OperationEnable::OFFSET,
        dpu_rdma::OperationEnable::OFFSET,
        ppu::OperationEnable::OFFSET,
        ppu_rdma::OperationEnable::OFFSET,
    ];
    if STATUS.contains(&offset) {
        Some(GroupControl::Status)
    } else if POINTER.contains(&offset) {
        Some(GroupControl::Pointer)
    } else if ENABLE.contains(&offset) {
        Some(GroupControl::Enable)
    } else {
        None
    }
}

/// Result of a decoder.
pub type Decoded<T> = std::result::Result<T, DecodeError>;

/// Reads fields and remembers which bits were read.
pub(crate) struct Reader<'a> {
    regs: &'a mut dyn RegisterFile,
    read: Vec<u32>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(regs: &'a mut dyn RegisterFile) -> Self {
        Reader {
            regs,
            read: vec![0; WINDOW],
        }
    }

    /// A field's value.
    pub(crate) fn get<R: Register>(&mut self, f: Field<R>) -> u32 {
        let i = R::OFFSET as usize / 4;
        if let Some(m) = self.read.get_mut(i) {
            *m |= f.info().mask();
        }
        f.extract(self.regs.value(R::OFFSET))
    }

    /// The address a DMA address register holds (its whole value: some keep the address
    /// in a field that starts above bit 0).
    pub(crate) fn address<R: Register>(&mut self) -> u32 {
        let i = R::OFFSET as usize / 4;
        if let Some(m) = self.read.get_mut(i) {
            *m |= R::INFO.known_mask();
        }
        self.regs.value(R::OFFSET) & R::INFO.known_mask()
    }

    /// Fields of an engine or stage the program disables: the hardware never looks at
    /// them, so whatever they hold is taken as read (the decoder's text output still shows
    /// it) and [`Reader::finish`] does not hold them to 0. Only for fields gated by an
    /// enable the caller has decoded (docs/simulator.md, "Inert fields").
    pub(crate) fn inert<R: Register>(&mut self, fields: &[Field<R>]) {
        for &f in fields {
            self.get(f);
        }
    }

    /// Every field of a register that only a disabled engine reads (see [`Reader::inert`]).
    pub(crate) fn inert_register<R: Register>(&mut self) {
        let i = R::OFFSET as usize / 4;
        if let Some(m) = self.read.get_mut(i) {
            *m |= R::INFO.known_mask();
        }
    }

    /// A one-bit field.
    pub(crate) fn flag<R: Register>(&mut self, f: Field<R>) -> bool {
        self.get(f) != 0
    }

    /// A field read as a two's complement number of its width.
    pub(crate) fn signed<R: Register>(&mut self, f: Field<R>) -> i64 {
        let v = self.get(f) as i64;
        let bits = u32::from(f.info().width);
        let shift = 64 - bits;
        (v << shift) >> shift
    }

    /// A field that must hold `want`: anything else is [`DecodeErrorKind::Unsupported`].
    pub(crate) fn expect<R: Register>(&mut self, f: Field<R>, want: u32, why: &str) -> Decoded<()> {
        let v = self.get(f);
        if v != want {
            return Err(DecodeError::unsupported(
                f,
                v,
                format!("{why} (the model needs {want})"),
            ));
        }
        Ok(())
    }

    /// A field that repeats a value given elsewhere: anything else is
    /// [`DecodeErrorKind::Inconsistent`].
    pub(crate) fn agree<R: Register>(
        &mut self,
        f: Field<R>,
        want: u32,
        why: impl FnOnce() -> String,
    ) -> Decoded<()> {
        let v = self.get(f);
        if v != want {
            return Err(DecodeError::inconsistent(f, v, why()));
        }
        Ok(())
    }

    /// Checks that every field of every register of `blocks` that no decoder read holds 0
    /// or its reset value, and that no bit outside the known fields is set. Read-only and
    /// write-one-to-clear fields, and the group-control registers the PC handles
    /// (S_STATUS, S_POINTER, OPERATION_ENABLE), are not task configuration.
    pub(crate) fn finish(&mut self, blocks: &[Block]) -> Decoded<()> {
        for info in REGISTERS.iter() {
            if !blocks.contains(&info.block) || info.offset as usize >= WINDOW_BYTES {
                continue;
            }
            if group_control(info.offset).is_some() {
                continue;
            }
            let read = self.read[info.offset as usize / 4];
            let raw = self.regs.peek(info.offset);
            for field in info.fields {
                if field.mask() & read != 0 || matches!(field.access, FieldAccess::Ro) {
                    continue;
                }
                let v = field.extract(raw);
                if v != 0 && v != field.extract(info.reset) {
                    return Err(DecodeError {
                        kind: DecodeErrorKind::Unsupported,
                        register: info.full_name,
                        field: field.name,
                        value: v.into(),
                        why: "the task model does not represent this field (only 0 or its reset value)".into(),
                    });
                }
            }
            let reserved = raw & !info.known_mask() & !info.reset;
            if reserved != 0 {
                return Err(DecodeError {
                    kind: DecodeErrorKind::Unsupported,
                    register: info.full_name,
                    field: "reserved bits",
                    value: reserved.into(),
                    why: "bits outside every documented field are set".into(),
                });
            }
        }
        Ok(())
    }
}
