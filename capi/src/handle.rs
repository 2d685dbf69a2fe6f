//! The handle table: what C holds instead of pointers to Rust objects.
//!
//! A handle C receives (`rknpu_device *`, `rknpu_weights *`, ...) is not an address: it
//! is a slot of one process-wide table and the slot's generation, packed into a
//! pointer-sized integer that is never dereferenced. The table holds each object behind
//! an `Arc` together with its kind, so
//!
//! - a handle used after it was freed, or freed twice, names a slot whose generation has
//!   moved on (or that is empty): `RKNPU_ERR_ARG`, not a use after free;
//! - a handle of one kind passed where another is expected (a weights handle to
//!   `rknpu_batch_free`) finds an object of the wrong kind: `RKNPU_ERR_ARG`;
//! - a call looks its handle up once and works on its own `Arc`, so a free racing the
//!   call on another thread only removes the handle from the table: the object lives
//!   until the call ends, and later calls with the handle fail.
//!
//! What stays undefined is what C passes beside handles: data pointers (`w`, `x`, `y`,
//! ...) must hold the lengths their sizes give. An integer that happens to equal a live
//! handle (a forged or corrupted value, or a handle kept across 2^40 frees of one slot
//! on a 64-bit system, 2^16 on a 32-bit one, when the generation wraps) is taken as
//! that handle.

use crate::{Failure, Job, Result, RknpuBatch, RknpuDevice, RknpuWeights};
use std::sync::{Arc, Mutex, MutexGuard};

/// `rknpu_device` in C: an opaque type a device handle points to (never dereferenced).
#[repr(C)]
pub struct DeviceHandle {
    _opaque: [u8; 0],
}

/// `rknpu_weights` in C: an opaque type a weights handle points to.
#[repr(C)]
pub struct WeightsHandle {
    _opaque: [u8; 0],
}

/// `rknpu_batch` in C: an opaque type a batch handle points to.
#[repr(C)]
pub struct BatchHandle {
    _opaque: [u8; 0],
}

/// `rknpu_job` in C: an opaque type a job handle points to.
#[repr(C)]
pub struct JobHandle {
    _opaque: [u8; 0],
}

/// An object the table holds.
#[derive(Clone, Debug)]
enum Object {
    Device(Arc<RknpuDevice>),
    Weights(Arc<RknpuWeights>),
    Batch(Arc<RknpuBatch>),
    Job(Arc<Job>),
}

impl Object {
    fn kind(&self) -> &'static str {
        match self {
            Object::Device(_) => "a device",
            Object::Weights(_) => "a weights",
            Object::Batch(_) => "a batch",
            Object::Job(_) => "a job",
        }
    }
}

/// A handle type: the C type its pointers point to and the object it names.
pub trait Handle: Sized {
    /// The object a handle of this type names.
    type Target;
    /// The kind's name in messages ("a device").
    const KIND: &'static str;
    /// Wraps an object for the table (private).
    #[doc(hidden)]
    fn wrap(value: Arc<Self::Target>) -> ObjectBox;
    /// The object, when `object` is of this kind (private).
    #[doc(hidden)]
    fn unwrap(object: &ObjectBox) -> Option<Arc<Self::Target>>;
}

/// An object of the table, opaque outside this module.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct ObjectBox(Object);

macro_rules! handle {
    ($handle:ty, $target:ty, $variant:ident, $kind:literal) => {
        impl Handle for $handle {
            type Target = $target;
            const KIND: &'static str = $kind;
            fn wrap(value: Arc<$target>) -> ObjectBox {
                ObjectBox(Object::$variant(value))
            }
            fn unwrap(object: &ObjectBox) -> Option<Arc<$target>> {
                match &object.0 {
                    Object::$variant(v) => Some(Arc::clone(v)),
                    _ => None,
                }
            }
        }
    };
}

handle!(DeviceHandle, RknpuDevice, Device, "a device");
handle!(WeightsHandle, RknpuWeights, Weights, "a weights");
handle!(BatchHandle, RknpuBatch, Batch, "a batch");
handle!(JobHandle, Job, Job, "a job");

/// Bits of a handle that hold its slot (plus one, so no handle is NULL); the rest hold
/// the slot's generation.
const SLOT_BITS: u32 = if usize::BITS >= 64 { 24 } else { 16 };
/// The most slots the table has, so the most handles alive at once.
pub const MAX_HANDLES: usize = (1 << SLOT_BITS) - 1;
/// The generations a slot counts through before its handles repeat.
const GENERATIONS: usize = 1 << (usize::BITS - SLOT_BITS);

/// One slot: its generation and the object it holds, if any.
struct Slot {
    generation: usize,
    object: Option<ObjectBox>,
}

/// The table: the slots, and the empty ones to reuse.
struct Table {
    slots: Vec<Slot>,
    free: Vec<usize>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    slots: Vec::new(),
    free: Vec::new(),
});

/// The table, locked. No code panics while holding the lock with the table half
/// changed, so a poisoned lock is taken over as it is.
fn table() -> MutexGuard<'static, Table> {
    TABLE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The value of the handle of `slot` at `generation`.
fn encode(slot: usize, generation: usize) -> usize {
    (generation << SLOT_BITS) | (slot + 1)
}

/// The slot and generation of a handle value (`None` for 0, which is NULL).
fn decode(value: usize) -> Option<(usize, usize)> {
    let slot = (value & MAX_HANDLES).checked_sub(1)?;
    Some((slot, value >> SLOT_BITS))
}

/// Stores `value` and returns its new handle.
pub fn insert<H: Handle>(value: H::Target) -> Result<*mut H> {
    insert_arc::<H>(Arc::new(value))
}

/// Stores a shared `value` and returns its new handle.
pub fn insert_arc<H: Handle>(value: Arc<H::Target>) -> Result<*mut H> {
    let object = H::wrap(value);
    let mut t = table();
    let slot = match t.free.pop() {
        Some(slot) => slot,
        None => {
            if t.slots.len() >= MAX_HANDLES {
                return Err(Failure::arg(format!(
                    "{MAX_HANDLES} handles are alive: free some before making more"
                )));
            }
            t.slots.push(Slot {
                generation: 1,
                object: None,
            });
            t.slots.len() - 1
        }
    };
    let s = &mut t.slots[slot];
    s.object = Some(object);
    Ok(std::ptr::without_provenance_mut(encode(slot, s.generation)))
}

/// The object of handle `p`, named `what` in messages: `RKNPU_ERR_ARG` when `p` is
/// NULL, not a live handle, or a handle of another kind.
pub fn get<H: Handle>(p: *mut H, what: &str) -> Result<Arc<H::Target>> {
    let object = {
        let t = table();
        lookup(&t, p.addr(), what, H::KIND)?.clone()
    };
    H::unwrap(&object).ok_or_else(|| {
        Failure::arg(format!(
            "{what} is {} handle, not {} handle",
            object.0.kind(),
            H::KIND
        ))
    })
}

/// The live object of a handle value.
fn lookup<'t>(t: &'t Table, value: usize, what: &str, kind: &str) -> Result<&'t ObjectBox> {
    let (slot, generation) =
        decode(value).ok_or_else(|| Failure::arg(format!("{what} is NULL")))?;
    t.slots
        .get(slot)
        .filter(|s| s.generation == generation)
        .and_then(|s| s.object.as_ref())
        .ok_or_else(|| {
            Failure::arg(format!(
                "{what} is not a live handle: freed already, or never {kind} handle of this \
                 library"
            ))
        })
}

/// Removes handle `p` from the table and returns its object (dropped by the caller,
/// after the table is unlocked); NULL is `Ok(None)`. A handle that is not live, or is
/// of another kind, is `RKNPU_ERR_ARG` and the table is unchanged.
pub fn remove<H: Handle>(p: *mut H, what: &str) -> Result<Option<Arc<H::Target>>> {
    if p.is_null() {
        return Ok(None);
    }
    let mut t = table();
    let object = lookup(&t, p.addr(), what, H::KIND)?;
    let value = H::unwrap(object).ok_or_else(|| {
        Failure::arg(format!(
            "{what} is {} handle, not {} handle",
            object.0.kind(),
            H::KIND
        ))
    })?;
    let (slot, _) = decode(p.addr()).ok_or_else(|| Failure::arg(format!("{what} is NULL")))?;
    let s = &mut t.slots[slot];
    s.object = None;
    s.generation = (s.generation + 1) % GENERATIONS;
    t.free.push(slot);
    Ok(Some(value))
}

/// How many handles are alive (of every kind).
pub fn live() -> usize {
    let t = table();
    t.slots.len() - t.free.len()
}
