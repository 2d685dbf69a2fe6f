//! The simulator's value checks as data.
//!
//! A published envelope is one [`Envelope`]: a register field, the values board-run or
//! published programs write there (or the values the model executes), and the text that
//! names that source. A block's envelopes are a table, walked in order by [`check`],
//! which returns the first field outside its envelope as the [`SimError`] naming the
//! register, the field, its value and the source. The DPU's tables and the computations
//! around them (cube geometry, the dequantisation task, the operand reads) are in the
//! submodules: [`dpu`] (output cube, converter, layout), `stage` (BS and BN), `ew` (EW
//! and its ERDMA operand) and `dequant` (the fp32 pipeline).

mod depthwise;
mod dequant;
mod dpu;
mod ew;
mod stage;

pub(super) use depthwise::modes_agree;
pub(super) use dpu::{dpu, surface_add};

use super::error::{At, SimError};
use crate::regs::{Field, Register};
use std::fmt;

/// A register field without its register's type, so that one table holds fields of
/// several registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FieldRef {
    /// `BLOCK.REGISTER`.
    register: &'static str,
    /// The field's name in the register model.
    field: &'static str,
}

impl FieldRef {
    /// The field `f` of register `R`.
    pub(super) const fn of<R: Register>(f: Field<R>) -> FieldRef {
        FieldRef {
            register: R::NAME,
            field: f.name(),
        }
    }

    /// [`SimError::Unsupported`] at this field.
    pub(super) fn unsupported(self, at: At, value: u32, why: impl Into<String>) -> SimError {
        SimError::Unsupported {
            at,
            register: self.register,
            field: self.field,
            value: value.into(),
            why: why.into(),
        }
    }
}

/// Prints `BLOCK.REGISTER.field`, as a typed [`Field`] does.
impl fmt::Display for FieldRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.register, self.field)
    }
}

/// What kind of error a value outside the envelope is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// [`SimError::Unsupported`]: a value the model does not run.
    Unsupported,
    /// [`SimError::Inconsistent`]: a value other registers contradict.
    Inconsistent,
}

/// The values an envelope lets through.
pub(super) enum Allowed<C> {
    /// Exactly this value.
    Is(u32),
    /// Any of these values.
    OneOf(&'static [u32]),
    /// The values from the first to the second, both included.
    Range(u32, u32),
    /// The values with a property (a finite fp16, for one).
    Test(fn(u32) -> bool),
    /// Whatever the value, when the task's other fields pass the test: for envelopes
    /// over several fields that name one of them.
    When(fn(&C) -> bool),
}

/// The source text of an envelope: the `why` of the error it returns.
pub(super) enum Why<C> {
    /// A fixed text.
    Text(&'static str),
    /// `the published task <what> (<register> <word>)`: what the published
    /// dequantisation task writes into a register, with the register word.
    Published {
        /// What the task does with the register.
        what: &'static str,
        /// `BLOCK.REGISTER`.
        register: &'static str,
        /// The word the task writes.
        word: u32,
    },
    /// A text naming values of the task.
    With(fn(&C) -> String),
}

impl<C> Why<C> {
    /// [`Why::Published`] for register `R`.
    pub(super) const fn published<R: Register>(what: &'static str, word: u32) -> Why<C> {
        Why::Published {
            what,
            register: R::NAME,
            word,
        }
    }

    fn text(&self, c: &C) -> String {
        match self {
            Why::Text(t) => (*t).to_string(),
            Why::Published {
                what,
                register,
                word,
            } => format!("the published task {what} ({register} {word:#x})"),
            Why::With(f) => f(c),
        }
    }
}

/// One published envelope: a field, how to read its value from the context `C`, the
/// values allowed and the source that allows them.
pub(super) struct Envelope<C> {
    /// The field named on failure.
    pub field: FieldRef,
    /// The field's value, or `None` where the envelope does not apply to the task.
    pub value: fn(&C) -> Option<u32>,
    /// The values let through.
    pub allowed: Allowed<C>,
    /// The source, as the error's text.
    pub why: Why<C>,
    /// The error a value outside the envelope is.
    pub kind: Kind,
}

impl<C> Envelope<C> {
    /// An envelope of field `field` of register `R` whose other values the model does
    /// not support.
    pub(super) const fn new<R: Register>(
        field: Field<R>,
        value: fn(&C) -> Option<u32>,
        allowed: Allowed<C>,
        why: Why<C>,
    ) -> Envelope<C> {
        Envelope::on(FieldRef::of(field), value, allowed, why)
    }

    /// [`Envelope::new`] for a field named by a [`FieldRef`].
    pub(super) const fn on(
        field: FieldRef,
        value: fn(&C) -> Option<u32>,
        allowed: Allowed<C>,
        why: Why<C>,
    ) -> Envelope<C> {
        Envelope {
            field,
            value,
            allowed,
            why,
            kind: Kind::Unsupported,
        }
    }

    /// The same envelope, its other values reported as inconsistent.
    pub(super) const fn inconsistent(self) -> Envelope<C> {
        Envelope {
            kind: Kind::Inconsistent,
            ..self
        }
    }

    /// Whether `value` (of context `c`) is inside the envelope.
    fn allows(&self, c: &C, value: u32) -> bool {
        match &self.allowed {
            Allowed::Is(v) => value == *v,
            Allowed::OneOf(vs) => vs.contains(&value),
            Allowed::Range(lo, hi) => (*lo..=*hi).contains(&value),
            Allowed::Test(f) => f(value),
            Allowed::When(f) => f(c),
        }
    }
}

/// Checks the context `c` against `table` in order: the first field outside its
/// envelope is the error, naming the field, its value and the envelope's source.
pub(super) fn check<C>(at: At, c: &C, table: &[Envelope<C>]) -> Result<(), SimError> {
    for e in table {
        let Some(value) = (e.value)(c) else {
            continue;
        };
        if !e.allows(c, value) {
            let (at, register, field) = (at, e.field.register, e.field.field);
            let (value, why) = (u64::from(value), e.why.text(c));
            return Err(match e.kind {
                Kind::Unsupported => SimError::Unsupported {
                    at,
                    register,
                    field,
                    value,
                    why,
                },
                Kind::Inconsistent => SimError::Inconsistent {
                    at,
                    register,
                    field,
                    value,
                    why,
                },
            });
        }
    }
    Ok(())
}
