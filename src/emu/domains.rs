//! The emulated vendor driver's IOMMU domains (0.9.6 and later).
//!
//! The vendor driver keeps up to sixteen IOMMU domains (`RKNPU_MAX_IOMMU_DOMAIN_NUM`,
//! `rknpu_iommu.c`), each with its own page table and its own IOVA window of 4 GiB
//! (aperture `0..=0xFFFF_FFFF`), so a process can map more than 4 GiB in all. Only one
//! domain is live at a time: MEM_CREATE (`rknpu_gem.c`) and SUBMIT (`rknpu_job.c`) call
//! `rknpu_iommu_domain_get_and_switch` with the request's `iommu_domain_id`, which takes
//! a reference on the live domain when it is the one asked for, and otherwise waits —
//! polling, up to `RKNPU_SWITCH_DOMAIN_WAIT_TIME_MS` (6 s), then `EINVAL` — until no
//! reference is held (no allocation in progress, no job queued or running) and then
//! switches the IOMMU to the other page table. MEM_DESTROY switches to the object's
//! domain before it unmaps it. An object is mapped only in the domain it was created
//! in: a job that names its address in another domain reads whatever that domain maps
//! there, or faults.
//!
//! Domains other than 0 exist only in kernels built with `CONFIG_NO_GKI`; otherwise the
//! domain calls are stubs that return 0 and every object lands in the one window
//! ([`EmuKernel::set_iommu_domains`] plays such a kernel).

use super::iova::Iova;
use super::mem::lock_bo;
use super::{EmuKernel, File, State};
use crate::sys::uapi::RknpuSubmit;
use crate::sys::{Errno, Fd, VendorOp};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

/// `RKNPU_MAX_IOMMU_DOMAIN_NUM`.
pub const IOMMU_DOMAINS: usize = 16;

/// `RKNPU_SWITCH_DOMAIN_WAIT_TIME_MS`: how long a switch waits for the live domain's
/// references to go (`rknpu_iommu.c`).
pub const DOMAIN_SWITCH_WAIT: Duration = Duration::from_millis(6000);

/// The vendor driver's domains: an IOVA allocator per domain, and which is live.
#[derive(Debug)]
pub(super) struct Domains {
    /// Whether the kernel has domains (`CONFIG_NO_GKI`); without, every object lies in
    /// domain 0's window whatever it asked for.
    pub(super) enabled: bool,
    /// Each domain's window, top-down from 4 GiB, freed ranges first.
    iova: Vec<Iova>,
    /// The live domain.
    pub(super) live: u8,
    /// Switches made since the kernel was created.
    pub(super) switches: u64,
}

impl Domains {
    pub(super) fn new() -> Domains {
        Domains {
            enabled: true,
            iova: (0..IOMMU_DOMAINS).map(|_| Iova::top_down()).collect(),
            live: 0,
            switches: 0,
        }
    }

    /// The domain an object asked for in `id` lands in: `id` with domains, 0 without.
    pub(super) fn placed(&self, id: u8) -> u8 {
        if self.enabled { id } else { 0 }
    }

    /// A range of `size` bytes in `domain`'s window.
    pub(super) fn alloc(&mut self, domain: u8, size: u64) -> Option<u64> {
        self.iova.get_mut(domain as usize)?.alloc(size)
    }

    /// Gives a range of `domain` back.
    pub(super) fn free(&mut self, domain: u8, start: u64, size: u64) {
        if let Some(v) = self.iova.get_mut(domain as usize) {
            v.free(start, size);
        }
    }

    /// Bytes handed out in every domain.
    pub(super) fn in_use(&self) -> u64 {
        self.iova.iter().map(Iova::in_use).sum()
    }
}

/// The domain a vendor request switches to before it runs, with the request's name:
/// MEM_CREATE of a new object (its `iommu_domain_id`; an out-of-range id is left to
/// MEM_CREATE to refuse), MEM_DESTROY (the object's domain).
fn switch_of(s: &State, fd: Fd, op: &VendorOp<'_>) -> Option<(u8, &'static str)> {
    let handles = match s.files.get(&fd.0) {
        Some(File::Device { handles, .. }) => handles,
        _ => return None,
    };
    match op {
        VendorOp::MemCreate(c) => {
            if c.handle != 0 && handles.contains_key(&c.handle) {
                return None;
            }
            let id = u8::try_from(c.iommu_domain_id).ok()?;
            ((id as usize) < IOMMU_DOMAINS).then_some((id, "MEM_CREATE"))
        }
        VendorOp::MemDestroy(d) => {
            let bo = handles.get(&d.handle)?;
            Some((lock_bo(bo).domain, "MEM_DESTROY"))
        }
        _ => None,
    }
}

impl EmuKernel {
    /// A vendor request on the DRM node, after the domain switch it makes.
    pub(super) fn vendor_request<'a>(
        &'a self,
        s: MutexGuard<'a, State>,
        fd: Fd,
        op: &mut VendorOp<'_>,
    ) -> Result<i32, Errno> {
        if let VendorOp::Submit(sub) = op {
            return self.vendor_submit(s, sub);
        }
        let mut s = match switch_of(&s, fd, op) {
            Some((domain, request)) => self.enter_domain(s, domain, request)?,
            None => s,
        };
        self.vendor(&mut s, fd, op)
    }

    /// `rknpu_iommu_domain_get_and_switch`: makes `domain` live, waiting first (up to
    /// [`DOMAIN_SWITCH_WAIT`], then `EINVAL`) until no job is queued or running, since
    /// each holds a reference on the live domain from submission until it is done.
    /// Nothing to do without domains (the stub returns 0) or when it is live already.
    pub(super) fn enter_domain<'a>(
        &'a self,
        mut s: MutexGuard<'a, State>,
        domain: u8,
        request: &str,
    ) -> Result<MutexGuard<'a, State>, Errno> {
        if !s.domains.enabled || s.domains.live == domain {
            return Ok(s);
        }
        let deadline = Instant::now() + DOMAIN_SWITCH_WAIT;
        while s.queue.busy() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let live = s.domains.live;
                s.log.push(format!(
                    "{request}: switching IOMMU domain {live} to {domain} timed out after {DOMAIN_SWITCH_WAIT:?} (jobs of domain {live} still hold it): EINVAL"
                ));
                return Err(Errno::EINVAL);
            }
            s = self.shared.wait_timeout(s, left);
        }
        let live = s.domains.live;
        s.domains.live = domain;
        s.domains.switches += 1;
        s.log.push(format!(
            "{request}: switch iommu domain from {live} to {domain}"
        ));
        Ok(s)
    }

    /// SUBMIT's domain: its `iommu_domain_id` (0..=15, else `EINVAL`) made live.
    pub(super) fn submit_domain<'a>(
        &'a self,
        s: MutexGuard<'a, State>,
        sub: &RknpuSubmit,
    ) -> Result<MutexGuard<'a, State>, Errno> {
        let domain = u8::try_from(sub.iommu_domain_id)
            .ok()
            .filter(|&d| (d as usize) < IOMMU_DOMAINS)
            .ok_or(Errno::EINVAL)?;
        self.enter_domain(s, domain, "SUBMIT")
    }

    /// Plays a vendor kernel built without `CONFIG_NO_GKI` (`on == false`), whose
    /// domain calls are stubs: every object lies in domain 0's one 4 GiB window
    /// whatever `iommu_domain_id` asked for, and allocations past it fail with `ENOMEM`;
    /// or with domains (`on`, the default), sixteen windows of 4 GiB. Set it before
    /// the first allocation.
    pub fn set_iommu_domains(&self, on: bool) {
        self.lock().domains.enabled = on;
    }

    /// The live IOMMU domain.
    pub fn live_iommu_domain(&self) -> u8 {
        self.lock().domains.live
    }

    /// IOMMU domain switches made so far (each a full switch of the IOMMU's page table,
    /// after waiting for the live domain's jobs).
    pub fn iommu_domain_switches(&self) -> u64 {
        self.lock().domains.switches
    }
}
