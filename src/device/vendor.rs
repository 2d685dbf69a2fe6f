//! The vendor `rknpu` driver (DRM flavour, 0.9.6 and later 0.9.x): MEM_CREATE / MEM_MAP
//! / MEM_SYNC / MEM_DESTROY buffers, task arrays in a kernel-mapped buffer, per-core
//! `subcore_task` ranges, blocking submission or an out-fence (docs/hardware/matmul-programs.md#multi-core, docs/hardware/kernel-behaviours.md).

use super::backend::{Backend, InFlight, Port, Submitted, prime_export};
use super::{Bo, BoFlags, BoMeta, CoreMask, Device, DeviceInfo, Error};
use super::{Capabilities, Interface, Job, JobResult, Result};
use crate::OsError;
use crate::submit::{self, irq};
use crate::sys::uapi::{self, *};
use crate::sys::{Fd, Ioctl, VendorOp};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};
use zerocopy::{FromBytes, IntoBytes};

/// Bytes of one `rknpu_task` in a task array.
const TASK_BYTES: usize = std::mem::size_of::<RknpuTask>();

/// How soon an `EINVAL` must come for it to be the driver's `core_mask` limit, which
/// SUBMIT checks before anything else: well below the 100 ms a soft reset sleeps
/// before it wakes (and fails) the waiting jobs (docs/device.md, K11).
const IMMEDIATE_REFUSAL: Duration = Duration::from_millis(20);

/// The vendor driver.
#[derive(Debug)]
pub(super) struct Vendor;

impl BoFlags {
    /// `RKNPU_MEM_*` bits for a driver version.
    pub(super) fn vendor_bits(&self, version: (u32, u32, u32)) -> u32 {
        let mut f = mem::IOMMU;
        if self.contiguous {
            // The contiguous path skips zeroing unless asked (rknpu_gem.c,
            // rknpu_gem_alloc_buf: DMA_ATTR_SKIP_ZEROING without RKNPU_MEM_ZEROING);
            // pages and rocket's shmem are always zeroed, so every buffer starts so.
            f |= mem::ZEROING;
        } else {
            f |= mem::NON_CONTIGUOUS;
            // The driver's own IOVA allocator avoids leaking the shared window (0.9.7+).
            // It maps without the DMA API's cache clean (rknpu_iommu.c:222-283), so the
            // device cleans such a buffer once at creation, which MEM_SYNC allows for
            // cacheable buffers only.
            if version >= (0, 9, 7) && self.cacheable {
                f |= mem::IOMMU_LIMIT_IOVA_ALIGNMENT;
            }
        }
        if self.cacheable {
            f |= mem::CACHEABLE;
        } else {
            // Without CACHEABLE or WRITE_COMBINE a non-contiguous buffer is mapped
            // pgprot_noncached, Device-nGnRnE memory on arm64, where the unaligned
            // accesses of memcpy fault (rknpu_gem.c:1353-1362); write-combined memory
            // is Normal non-cacheable and takes any access.
            f |= mem::WRITE_COMBINE;
        }
        if self.kernel_mapping {
            f |= mem::KERNEL_MAPPING;
        }
        f
    }
}

impl Backend for Vendor {
    fn interface(&self) -> Interface {
        Interface::Vendor
    }

    fn identify(&self, port: &Port, info: &mut DeviceInfo) -> Result<()> {
        let code = port.action(uapi::action::GET_DRV_VERSION, 0)?;
        if !(906..1000).contains(&code) {
            return Err(Error::UnsupportedDriver {
                driver: "rknpu".into(),
                version: format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100),
                why: "the library speaks the 0.9.6 and later 0.9.x layouts (48-byte MEM_CREATE, IOMMU domains); older drivers use a 40-byte MEM_CREATE".into(),
            });
        }
        info.version = (code / 10000, code / 100 % 100, code % 100);
        info.iommu = port.action(uapi::action::GET_IOMMU_EN, 0)? == 1;
        info.freq_hz = port.action(uapi::action::GET_FREQ, 0).ok();
        Ok(())
    }

    fn alloc_bits(&self, dev: &Device, flags: &BoFlags) -> u32 {
        flags.vendor_bits(dev.inner.info.version)
    }

    fn alloc(&self, dev: &Device, size: usize, flags: BoFlags, traced: bool) -> Result<Bo> {
        let mut c = RknpuMemCreate {
            flags: flags.vendor_bits(dev.inner.info.version),
            size: size as u64,
            iommu_domain_id: i32::from(flags.iommu_domain.unwrap_or(0)),
            ..RknpuMemCreate::default()
        };
        dev.inner
            .port
            .vendor(VendorOp::MemCreate(&mut c), "RKNPU_MEM_CREATE")?;
        // From here the object exists: the Bo frees it on every path.
        let mut bo = Bo {
            dev: dev.clone(),
            handle: c.handle,
            size: c.size as usize,
            dma: c.dma_addr as u32,
            obj_addr: c.obj_addr,
            domain: flags.iommu_domain.unwrap_or(0),
            mmap_offset: 0,
            dmabuf: None,
            cacheable: flags.cacheable,
        };
        dev.track(c.handle, bo.meta(traced));
        if c.dma_addr.saturating_add(c.size) > 1 << 32 {
            return Err(Error::NotOffered {
                what: format!(
                    "buffer at {:#x}+{:#x} lies above the NPU's 32-bit address space",
                    c.dma_addr, c.size
                ),
            });
        }
        let mut m = RknpuMemMap {
            handle: c.handle,
            ..RknpuMemMap::default()
        };
        dev.inner
            .port
            .vendor(VendorOp::MemMap(&mut m), "RKNPU_MEM_MAP")?;
        bo.mmap_offset = m.offset;
        // Again, now with the offset a trace maps it at.
        dev.track(bo.handle, bo.meta(traced));
        if c.flags & mem::IOMMU_LIMIT_IOVA_ALIGNMENT != 0 {
            // Clean the dirty lines of the page zeroing before the NPU writes the
            // buffer, or their eviction would overwrite its output.
            sync(dev, &bo.meta(false), mem::SYNC_TO_DEVICE)?;
        }
        Ok(bo)
    }

    /// PRIME_FD_TO_HANDLE, then MEM_CREATE with that handle for the object's address
    /// (no allocation: the driver describes the attached object). The kernel keeps a
    /// duplicate of the dma-buf for CPU access, since MEM_MAP refuses imported objects.
    fn import(&self, dev: &Device, dmabuf: BorrowedFd<'_>) -> Result<Bo> {
        let port = &dev.inner.port;
        let fd = port.adopt(dmabuf)?;
        let mut p = DrmPrimeHandle {
            handle: 0,
            flags: 0,
            fd: fd.0,
        };
        if let Err(e) = port.ioctl(&mut Ioctl::PrimeFdToHandle(&mut p)) {
            port.close(fd);
            return Err(e);
        }
        if dev.is_tracked(p.handle) {
            // DRM gives a buffer of this fd back under its existing handle; a second Bo
            // would free it twice.
            port.close(fd);
            return Err(Error::InvalidArgument {
                what: format!(
                    "the dma-buf is this device's own buffer (handle {}): use that buffer",
                    p.handle
                ),
            });
        }
        let mut c = RknpuMemCreate {
            handle: p.handle,
            ..RknpuMemCreate::default()
        };
        if let Err(e) = port.vendor(VendorOp::MemCreate(&mut c), "RKNPU_MEM_CREATE") {
            // Drop the handle the import made, and the duplicate.
            let mut g = DrmGemClose {
                handle: p.handle,
                pad: 0,
            };
            let _ = port.ioctl(&mut Ioctl::GemClose(&mut g));
            port.close(fd);
            return Err(e);
        }
        // From here the Bo frees the handle and closes the duplicate on every path.
        let bo = Bo {
            dev: dev.clone(),
            handle: c.handle,
            size: c.size as usize,
            dma: c.dma_addr as u32,
            obj_addr: c.obj_addr,
            // Attached in the live domain; the library keeps it with domain 0's.
            domain: 0,
            mmap_offset: u64::MAX,
            cacheable: false,
            dmabuf: Some(fd),
        };
        if c.dma_addr.saturating_add(c.size) > 1 << 32 {
            return Err(Error::InvalidArgument {
                what: format!(
                    "the imported buffer at {:#x}+{:#x} lies above the NPU's 32-bit address space",
                    c.dma_addr, c.size
                ),
            });
        }
        // Imported memory cannot be mapped through the driver: traces do not record it.
        dev.track(c.handle, bo.meta(false));
        Ok(bo)
    }

    fn export(&self, dev: &Device, handle: u32) -> Result<Fd> {
        prime_export(dev, handle)
    }

    fn free(&self, dev: &Device, handle: u32, m: &BoMeta) -> Result<()> {
        let mut d = RknpuMemDestroy {
            handle,
            reserved: 0,
            obj_addr: m.obj_addr,
        };
        dev.inner
            .port
            .vendor(VendorOp::MemDestroy(&mut d), "RKNPU_MEM_DESTROY")
            .map(|_| ())
    }

    /// MEM_SYNC FROM_DEVICE (uncached buffers need none).
    fn to_cpu(&self, dev: &Device, _handle: u32, m: &BoMeta) -> Result<()> {
        sync(dev, m, mem::SYNC_FROM_DEVICE)
    }

    /// MEM_SYNC TO_DEVICE (uncached buffers need none).
    fn to_device(&self, dev: &Device, _handle: u32, m: &BoMeta) -> Result<()> {
        sync(dev, m, mem::SYNC_TO_DEVICE)
    }

    fn reset(&self, dev: &Device) -> Result<()> {
        dev.inner
            .port
            .action(uapi::action::ACT_RESET, 0)
            .map(|_| ())
    }

    fn capabilities(&self) -> Capabilities {
        // The vendor driver runs a job's chains on the cores its mask names, the PC walks a
        // job's tasks back to back (CBUF contents stay between them) and keeps registers
        // from the task two before (docs/device.md).
        Capabilities {
            picks_cores: false,
            cbuf_reuse: true,
            incremental_tasks: true,
            job_timeout: None,
            tasks_run_alone: false,
            iommu_domains: super::domains::IOMMU_DOMAINS,
        }
    }

    /// The last task of each core's range supplies that core's INTERRUPT_MASK, and the
    /// interrupt handler completes the job only when the status, widened to whole
    /// pairs, equals it (`rknpu_job.c`, `rknpu_irq_handler` / `rknpu_fuzz_status`):
    /// anything but exactly one pair records an interrupt and never completes.
    fn check(&self, job: &Job<'_>) -> Result<()> {
        let mut end = 0;
        for &n in &job.split {
            end += n;
            let Some(last) = job.tasks.get(end.wrapping_sub(1)) else {
                continue;
            };
            if !irq::vendor_completable(last.int_mask) {
                return Err(Error::InvalidArgument {
                    what: format!(
                        "task {} ends a core's range with int_mask {:#x}: the vendor driver completes a job only on exactly one interrupt pair (0x3, 0xc, 0x30, 0xc0, 0x300 or 0xc00, the block that finishes last); this mask would never complete it and would hold the core",
                        end - 1,
                        last.int_mask
                    ),
                });
            }
        }
        Ok(())
    }

    /// A non-blocking job on an explicit core mask is refused: the driver never times
    /// non-blocking jobs out (rknpu_job.c:823-830), and its timeout-clean path kills a
    /// running job on the named core and queues a cleanup work that only non-blocking
    /// jobs initialise (rknpu_job.c:171, :699-735: a blocking victim oopses the
    /// kernel). The automatic mask never takes that path.
    fn check_nonblocking(&self, job: &Job<'_>) -> Result<()> {
        if job.cores == CoreMask::Auto {
            return Ok(());
        }
        Err(Error::NotOffered {
            what: format!(
                "non-blocking submission on core mask {:#x}: the vendor driver's timeout clean-up of explicitly placed non-blocking jobs can crash the kernel on another process's blocking job; submit with the automatic mask, or block",
                job.cores.bits()
            ),
        })
    }

    fn submit_flags(&self, nonblocking: bool) -> u32 {
        let base = job::PC | job::PINGPONG;
        if nonblocking {
            base | job::NONBLOCK | job::FENCE_OUT
        } else {
            base
        }
    }

    fn run(&self, dev: &Device, job: &Job<'_>) -> Result<JobResult> {
        let (mut sub, tasks) = self.submit_args(dev, job, false)?;
        let started = Instant::now();
        let r = dev
            .inner
            .port
            .vendor(VendorOp::Submit(&mut sub), "RKNPU_SUBMIT");
        let statuses = task_statuses(&tasks, job.tasks.len())?;
        match r {
            // A mask naming core 2 refused at once: the driver's `core_mask` limit is
            // below 4, which is the RK3583's 0x3 (rknpu_drv.c:204-223). Only an
            // immediate refusal counts: masks it accepts and cannot start fail after
            // the timeout, and a job another process's soft reset wakes fails with
            // EINVAL too, 100 ms or more into the reset (rknpu_reset.c,
            // rknpu_soft_reset).
            Err(Error::Ioctl {
                errno: OsError::EINVAL,
                ..
            }) if job.cores.bits() & 4 != 0 && started.elapsed() < IMMEDIATE_REFUSAL => {
                dev.learn_core_limit(3);
                Err(Error::NoSuchCore {
                    mask: job.cores.bits(),
                    cores: 2,
                })
            }
            Ok(_) => Ok(JobResult {
                task_counter: sub.task_counter,
                int_status: statuses,
                hw_elapsed: Some(Duration::from_nanos(sub.hw_elapse_time.max(0) as u64)),
            }),
            Err(Error::Ioctl {
                errno: OsError::ETIMEDOUT,
                ..
            }) => Err(Error::Timeout {
                task_counter: sub.task_counter,
                int_status: statuses.last().copied().unwrap_or(0),
            }),
            Err(e) => Err(e),
        }
    }

    /// A non-blocking submission with an out-fence (`CONFIG_ROCKCHIP_RKNPU_FENCE`).
    fn start<'a>(&self, dev: &'a Device, job: &Job<'a>) -> Result<InFlight> {
        let (mut sub, tasks) = self.submit_args(dev, job, true)?;
        let r = dev
            .inner
            .port
            .vendor(VendorOp::Submit(&mut sub), "RKNPU_SUBMIT");
        if let Err(e) = r {
            // rknpu_submit installs the out-fence before it schedules the job and
            // returns a failed commit's error without taking it back (rknpu_job.c).
            if sub.fence_fd >= 0 {
                dev.inner.port.close(Fd(sub.fence_fd));
            }
            return Err(e);
        }
        Ok(InFlight {
            fence: (sub.fence_fd >= 0).then_some(Fd(sub.fence_fd)),
            tasks: Some(tasks),
            sentinel: None,
        })
    }

    /// Polls the fence until `deadline`, then reads the statuses from the task array.
    fn wait(&self, dev: &Device, s: Submitted<'_, '_>, deadline: Instant) -> Result<JobResult> {
        let Submitted { job, flight } = s;
        let Some(fd) = flight.fence.take() else {
            return Err(Error::NotOffered {
                what: "waiting: the kernel returned no fence".into(),
            });
        };
        let ready = poll_until(dev, fd, deadline);
        if !matches!(ready, Ok(true)) {
            // Kept: a settling wait polls it again, and dropping the job closes it.
            flight.fence = Some(fd);
            ready?;
            return Err(Error::Timeout {
                task_counter: 0,
                int_status: 0,
            });
        }
        dev.inner.port.close(fd);
        // The kernel writes no status back for non-blocking jobs (only its blocking
        // wait does): these are zeros unless the task array says otherwise.
        Ok(JobResult {
            task_counter: job.tasks.len() as u32,
            int_status: match flight.tasks.as_ref() {
                Some(tasks) => task_statuses(tasks, job.tasks.len())?,
                None => vec![0; job.tasks.len()],
            },
            hw_elapsed: None,
        })
    }

    /// Polls the fence with a zero timeout. Without a fence nothing can tell.
    fn is_done(&self, dev: &Device, _job: &Job<'_>, flight: &InFlight) -> Result<bool> {
        match flight.fence {
            Some(fd) => dev.inner.port.poll(fd, Duration::ZERO),
            None => Err(Error::NotOffered {
                what: "telling whether the job finished: the kernel returned no fence".into(),
            }),
        }
    }

    fn settle_bound(&self, job: &Job<'_>) -> Duration {
        super::leak::vendor_bound(job.timeout)
    }

    /// Polls the job's fence until `deadline`; without a fence nothing proves the job
    /// finished.
    fn settle(&self, dev: &Device, s: Submitted<'_, '_>, deadline: Instant) -> bool {
        match s.flight.fence {
            Some(fd) => matches!(poll_until(dev, fd, deadline), Ok(true)),
            None => false,
        }
    }
}

impl Vendor {
    /// The task array and the submit structure of a job.
    fn submit_args(
        &self,
        dev: &Device,
        job: &Job<'_>,
        nonblocking: bool,
    ) -> Result<(RknpuSubmit, Bo)> {
        // The task array's address is the kernel's own mapping, but it is an object of
        // the job's domain like the others (creating it elsewhere would switch domains).
        let domain = job.domain();
        let flags = BoFlags {
            kernel_mapping: true,
            iommu_domain: Some(domain),
            ..BoFlags::default()
        };
        let mut tasks = dev.alloc_with(job.tasks.len() * TASK_BYTES, flags, false)?;
        let mut bytes = Vec::with_capacity(job.tasks.len() * TASK_BYTES);
        for t in &job.tasks {
            let task = RknpuTask {
                enable_mask: t.enable,
                int_mask: t.int_mask,
                int_clear: irq::CLEAR_ALL,
                regcfg_amount: t.regcfg_amount,
                regcmd_addr: job.regcmd.dma_addr() as u64 + t.offset as u64,
                ..RknpuTask::default()
            };
            bytes.extend_from_slice(task.as_bytes());
        }
        tasks.write(0, &bytes)?;
        let mut sub = RknpuSubmit {
            flags: self.submit_flags(nonblocking),
            timeout: job.timeout.as_millis().min(u32::MAX as u128) as u32,
            task_number: job.tasks.len() as u32,
            task_obj_addr: tasks.obj_addr,
            iommu_domain_id: u32::from(domain),
            core_mask: job.cores.bits(),
            fence_fd: -1,
            ..RknpuSubmit::default()
        };
        match job.cores {
            // Whichever core the kernel picks finds the whole job in its slot.
            CoreMask::Auto => {
                for slot in 0..3 {
                    sub.subcore_task[slot] = RknpuSubcoreTask {
                        task_start: 0,
                        task_number: job.tasks.len() as u32,
                    };
                }
            }
            _ => {
                let ranges = submit::ranges(&job.split);
                for (&(_, slot), (task_start, task_number)) in
                    job.cores.started().iter().zip(ranges)
                {
                    sub.subcore_task[slot] = RknpuSubcoreTask {
                        task_start,
                        task_number,
                    };
                }
            }
        }
        Ok((sub, tasks))
    }
}

/// MEM_SYNC of a whole buffer in direction `dir`; nothing for an uncached one.
fn sync(dev: &Device, m: &BoMeta, dir: u32) -> Result<()> {
    if !m.cacheable {
        return Ok(());
    }
    let mut y = RknpuMemSync {
        flags: dir,
        obj_addr: m.obj_addr,
        offset: 0,
        size: m.size as u64,
        ..RknpuMemSync::default()
    };
    dev.inner
        .port
        .vendor(VendorOp::MemSync(&mut y), "RKNPU_MEM_SYNC")
        .map(|_| ())
}

/// Polls fence `fd` until it is signalled or `deadline` passes.
fn poll_until(dev: &Device, fd: Fd, deadline: Instant) -> Result<bool> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if dev.inner.port.poll(fd, left)? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
    }
}

/// The `int_status` words of a task array. The kernel writes them through its cacheable
/// mapping (rknpu_gem.c:77-80), so they sit in the CPU's cache: they are read through
/// the (cacheable, coherent) CPU mapping without a FROM_DEVICE sync, which would
/// invalidate them away.
fn task_statuses(tasks: &Bo, n: usize) -> Result<Vec<u32>> {
    let bytes = tasks
        .dev
        .inner
        .port
        .mmap(tasks.size, tasks.mmap_offset)?
        .as_slice()
        .to_vec();
    Ok((0..n)
        .map(|i| {
            bytes
                .get(i * TASK_BYTES..(i + 1) * TASK_BYTES)
                .and_then(|b| RknpuTask::read_from_bytes(b).ok())
                .map_or(0, |t| t.int_status)
        })
        .collect())
}
