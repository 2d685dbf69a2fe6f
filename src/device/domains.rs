//! Buffers beyond 4 GiB: placement in the vendor driver's IOMMU domains.
//!
//! The NPU addresses 32 bits, so every buffer a job names lies in one 4 GiB IOVA
//! window. The vendor driver (0.9.6 and later) keeps up to sixteen IOMMU domains, each
//! with a window of its own (`rknpu_iommu.c`); MEM_CREATE creates an object in the
//! domain its `iommu_domain_id` names and SUBMIT runs a job in the one its
//! `iommu_domain_id` names (`rknpu_gem.c`, `rknpu_job.c`), switching the IOMMU when that
//! is not the live domain. An object is mapped only in its own domain.
//!
//! A buffer allocated without a domain ([`BoFlags::iommu_domain`] `None`) goes to the
//! first domain with room: domain 0, and when the kernel refuses it there with `ENOMEM`
//! (the window is full), the next ones. Domains other than 0 exist only in kernels built
//! with `CONFIG_NO_GKI`; in others the domain calls are stubs and every object lies in
//! the one window whatever it asked for. So the device trusts a second domain only on
//! evidence: the first buffer it places past domain 0 must come back at an address
//! that a live buffer of another domain occupies, which only separate windows allow.
//! Otherwise that buffer is freed and the allocation fails as it did in domain 0, and
//! a refusal in domain 1 too marks the kernel as one without domains (no further
//! attempts). Jobs whose buffers span domains are refused ([`Error::MixedDomains`]).
//!
//! [`Error::MixedDomains`]: crate::Error::MixedDomains

use super::{Bo, BoFlags, Device, Error, Result};
use crate::OsError;

/// `RKNPU_MAX_IOMMU_DOMAIN_NUM`: the vendor driver's domains, 0..=15.
pub const IOMMU_DOMAINS: u8 = 16;

/// What the device knows of the kernel's domains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Evidence {
    /// No buffer has been placed past domain 0 yet.
    Unknown,
    /// A buffer of domain 1 or later came back at an address a live buffer of another
    /// domain occupies: the windows are separate.
    Separate,
    /// Domain 1 refused what domain 0 refused: one window (the stubs of a kernel
    /// without `CONFIG_NO_GKI`).
    Absent,
}

/// The device's placement state.
#[derive(Debug)]
pub(super) struct Placement {
    evidence: Evidence,
    /// Per domain, the smallest size it refused with `ENOMEM` since it last freed a
    /// buffer: larger ones skip it without asking the kernel (each attempt in another
    /// domain than the live one costs the kernel a domain switch).
    refused: [Option<u64>; IOMMU_DOMAINS as usize],
}

impl Default for Placement {
    fn default() -> Placement {
        Placement {
            evidence: Evidence::Unknown,
            refused: [None; IOMMU_DOMAINS as usize],
        }
    }
}

fn is_enomem(e: &Error) -> bool {
    matches!(
        e,
        Error::Ioctl {
            errno: OsError::ENOMEM,
            ..
        }
    )
}

impl Device {
    /// Allocates a buffer object of at least `size` bytes in the vendor driver's IOMMU
    /// domain `domain` (0..=15), whatever `flags` say of the domain: the buffers of one
    /// job must share a domain, so a buffer that a job will use with another (a
    /// matmul's activations beside its weight bank) is allocated in that one's domain
    /// ([`Bo::iommu_domain`]). A full domain is an error here, not a reason to move on.
    /// On rocket, which has one address space per open, only domain 0 exists.
    pub fn alloc_in(&self, domain: u8, size: usize, flags: BoFlags) -> Result<Bo> {
        self.alloc(size, flags.with_iommu_domain(domain))
    }

    /// Allocates a buffer in the IOMMU domain of `other` ([`Device::alloc_in`]).
    pub fn alloc_beside(&self, other: &Bo, size: usize, flags: BoFlags) -> Result<Bo> {
        self.alloc_in(other.iommu_domain(), size, flags)
    }

    /// Creates the buffer in the domain `flags` name, or, without one, in the first
    /// domain with room (see the module documentation).
    pub(super) fn place(&self, size: usize, flags: BoFlags, traced: bool) -> Result<Bo> {
        let backend = &self.inner.backend;
        let domains = backend.capabilities().iommu_domains;
        match flags.iommu_domain {
            Some(d) if d >= IOMMU_DOMAINS => Err(Error::InvalidArgument {
                what: format!("IOMMU domain {d}: the vendor driver has 0..=15"),
            }),
            Some(d) if d >= domains => Err(Error::NotOffered {
                what: format!(
                    "IOMMU domain {d}: this driver gives each open {domains} address space(s) of 4 GiB (rocket: domain 0 only)"
                ),
            }),
            Some(_) => backend.alloc(self, size, flags, traced),
            None if domains <= 1 => backend.alloc(self, size, flags.with_iommu_domain(0), traced),
            None => self.place_first_fit(size, flags, traced),
        }
    }

    /// Tries domain 0, then (unless the kernel has shown it has no domains) the next
    /// ones, skipping those that refused a size no larger since their last free.
    fn place_first_fit(&self, size: usize, flags: BoFlags, traced: bool) -> Result<Bo> {
        let mut first_refusal: Option<Error> = None;
        for d in 0..IOMMU_DOMAINS {
            let (evidence, skip) = {
                let p = self.placement();
                let skip = p.refused[d as usize].is_some_and(|r| size as u64 >= r);
                (p.evidence, skip)
            };
            if d > 0 && evidence == Evidence::Absent {
                break;
            }
            if skip {
                continue;
            }
            let r = (self.inner.backend).alloc(self, size, flags.with_iommu_domain(d), traced);
            match r {
                Ok(bo) if d == 0 || evidence == Evidence::Separate => return Ok(bo),
                Ok(bo) => {
                    if self.overlaps_other_domain(&bo) {
                        self.placement().evidence = Evidence::Separate;
                        return Ok(bo);
                    }
                    // No sign of a window of its own: not trusted (freed on drop).
                    drop(bo);
                    break;
                }
                Err(e) if is_enomem(&e) => {
                    {
                        let mut p = self.placement();
                        let r = &mut p.refused[d as usize];
                        *r = Some(r.map_or(size as u64, |r| r.min(size as u64)));
                        // A fresh window refuses only sizes near 4 GiB: a smaller size
                        // refused in domain 1 as in 0 shows there is one window.
                        if d > 0 && p.evidence == Evidence::Unknown && size < 1 << 31 {
                            p.evidence = Evidence::Absent;
                        }
                    }
                    first_refusal.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(first_refusal.unwrap_or(Error::Ioctl {
            op: "RKNPU_MEM_CREATE",
            errno: OsError::ENOMEM,
        }))
    }

    /// Whether `bo`'s address range meets a live buffer of another domain.
    fn overlaps_other_domain(&self, bo: &Bo) -> bool {
        let (start, end) = (u64::from(bo.dma), u64::from(bo.dma) + bo.size as u64);
        self.handles().values().any(|m| {
            let (s, e) = (u64::from(m.dma), u64::from(m.dma) + m.size as u64);
            m.domain != bo.domain && s < end && start < e
        })
    }

    /// A buffer of `domain` was freed: it may have room again.
    pub(super) fn freed_in(&self, domain: u8) {
        if let Some(r) = self.placement().refused.get_mut(domain as usize) {
            *r = None;
        }
    }

    fn placement(&self) -> std::sync::MutexGuard<'_, Placement> {
        self.inner
            .placement
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}
