//! The mainline `rocket` accel driver: CREATE_BO buffers in a per-fd address space,
//! PREP_BO / FINI_BO ownership transitions, jobs of tasks the scheduler places on cores
//! itself, completion signalled through the buffers a job writes (docs/hardware/kernel-behaviours.md#k1).

use super::backend::{Backend, InFlight, Port, Submitted, deadline_ns, prime_export};
use super::sentinel;
use super::{Bo, BoFlags, BoMeta, CoreMask, Device, DeviceInfo, Error};
use super::{Capabilities, Interface, Job, JobResult, Result};
use crate::OsError;
use crate::sys::uapi::*;
use crate::sys::{Fd, Ioctl};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// The rocket driver.
#[derive(Debug)]
pub(super) struct Rocket;

impl Backend for Rocket {
    fn interface(&self) -> Interface {
        Interface::Rocket
    }

    /// Nothing to ask: rocket has no version request beyond DRM_VERSION, and always
    /// sits behind an IOMMU.
    fn identify(&self, _port: &Port, info: &mut DeviceInfo) -> Result<()> {
        info.iommu = true;
        Ok(())
    }

    /// CREATE_BO takes no flags.
    fn alloc_bits(&self, _dev: &Device, _flags: &BoFlags) -> u32 {
        0
    }

    fn alloc(&self, dev: &Device, size: usize, _flags: BoFlags, traced: bool) -> Result<Bo> {
        let size32 = u32::try_from(size).map_err(|_| Error::InvalidArgument {
            what: format!("{size} bytes: rocket buffers are at most 4 GiB - 1"),
        })?;
        let mut c = DrmRocketCreateBo {
            size: size32,
            ..DrmRocketCreateBo::default()
        };
        dev.inner.port.ioctl(&mut Ioctl::RocketCreateBo(&mut c))?;
        let bo = Bo {
            dev: dev.clone(),
            handle: c.handle,
            size: size.div_ceil(4096) * 4096,
            dma: c.dma_address as u32,
            obj_addr: 0,
            domain: 0,
            mmap_offset: c.offset,
            cacheable: true,
            dmabuf: None,
        };
        dev.track(c.handle, bo.meta(traced));
        // `dma_address` is 64 bits wide, and the driver sizes its address allocator from
        // the IOMMU domain's aperture (rocket_drv.c, rocket_gem.c) without checking it
        // against the NPU's 32-bit address registers; dropping `bo` frees the object.
        if c.dma_address.saturating_add(bo.size as u64) > 1 << 32 {
            return Err(Error::NotOffered {
                what: format!(
                    "buffer at {:#x}+{:#x} lies above the NPU's 32-bit address space",
                    c.dma_address, bo.size
                ),
            });
        }
        Ok(bo)
    }

    /// Refused before any request: the driver has no `gem_prime_import_sg_table`, so DRM
    /// refuses a foreign dma-buf (`EINVAL`), and an object is mapped only into the
    /// address space of the fd that created it.
    fn import(&self, _dev: &Device, _dmabuf: BorrowedFd<'_>) -> Result<Bo> {
        Err(Error::NotOffered {
            what: "dma-buf import: the rocket driver cannot attach a dma-buf (no gem_prime_import_sg_table)".into(),
        })
    }

    /// DRM's generic PRIME export of the shmem object.
    fn export(&self, dev: &Device, handle: u32) -> Result<Fd> {
        prime_export(dev, handle)
    }

    fn free(&self, dev: &Device, handle: u32, _m: &BoMeta) -> Result<()> {
        let mut c = DrmGemClose { handle, pad: 0 };
        dev.inner
            .port
            .ioctl(&mut Ioctl::GemClose(&mut c))
            .map(|_| ())
    }

    /// PREP_BO with a 5 s deadline.
    fn to_cpu(&self, dev: &Device, handle: u32, _m: &BoMeta) -> Result<()> {
        let mut p = DrmRocketPrepBo {
            handle,
            reserved: 0,
            timeout_ns: deadline_ns(Duration::from_secs(5)),
        };
        dev.inner
            .port
            .ioctl(&mut Ioctl::RocketPrepBo(&mut p))
            .map(|_| ())
    }

    /// FINI_BO.
    fn to_device(&self, dev: &Device, handle: u32, _m: &BoMeta) -> Result<()> {
        let mut f = DrmRocketFiniBo {
            handle,
            reserved: 0,
        };
        dev.inner
            .port
            .ioctl(&mut Ioctl::RocketFiniBo(&mut f))
            .map(|_| ())
    }

    fn reset(&self, _dev: &Device) -> Result<()> {
        Err(Error::NotOffered {
            what: "reset: the rocket driver resets a core itself after a job timeout".into(),
        })
    }

    fn capabilities(&self) -> Capabilities {
        // Rocket places each job on a core itself and starts every task on its own, so
        // nothing stays in the CBUF between tasks and a delta program did not run there
        // (docs/device.md).
        Capabilities {
            picks_cores: true,
            cbuf_reuse: false,
            incremental_tasks: false,
            job_timeout: Some(crate::emu::ROCKET_JOB_TIMEOUT),
            tasks_run_alone: true,
            iommu_domains: 1,
        }
    }

    fn check(&self, job: &Job<'_>) -> Result<()> {
        if job.cores != CoreMask::Auto {
            return Err(Error::NotOffered {
                what: "core selection: the rocket driver schedules jobs on cores itself".into(),
            });
        }
        if job.writes.is_empty() {
            return Err(Error::InvalidArgument {
                what: "rocket signals completion only through written buffers: name one with Job::writes".into(),
            });
        }
        // Mainline rocket runs each task alone and unmasks and waits for the DPU pair
        // only: a task that ends with the PPU never completes, the scheduler stops the job
        // after 500 ms and resets the core (docs/device.md, "Pooling on rocket").
        let ppu = crate::regcmd::BlockMask::PPU.0 | crate::regcmd::BlockMask::PPU_RDMA.0;
        if let Some(i) = job
            .tasks
            .iter()
            .position(|t| t.int_mask & crate::submit::irq::PPU != 0 || t.enable & ppu != 0)
        {
            return Err(Error::NotOffered {
                what: format!(
                    "task {i} runs the PPU (pooling): the rocket driver waits for DPU interrupts only, so the task would time out after 500 ms and the core be reset; pool on the vendor driver or on the host"
                ),
            });
        }
        Ok(())
    }

    /// Rocket has no submit flags.
    fn submit_flags(&self, _nonblocking: bool) -> u32 {
        0
    }

    /// Nothing more: the driver places every job itself.
    fn check_nonblocking(&self, _job: &Job<'_>) -> Result<()> {
        Ok(())
    }

    fn run(&self, dev: &Device, job: &Job<'_>) -> Result<JobResult> {
        let mut flight = submit(dev, job)?;
        let deadline = Instant::now() + job.timeout;
        let r = wait(dev, Submitted::new(job, &mut flight), deadline);
        if r.is_err() {
            // A deadline inside the scheduler's 500 ms leaves the job running.
            dev.settle(Submitted::new(job, &mut flight), "whose wait failed");
        }
        r
    }

    fn start<'a>(&self, dev: &'a Device, job: &Job<'a>) -> Result<InFlight> {
        submit(dev, job)
    }

    fn wait(&self, dev: &Device, s: Submitted<'_, '_>, deadline: Instant) -> Result<JobResult> {
        wait(dev, s, deadline)
    }

    /// PREP_BO with a zero timeout on the job's sentinel buffer, an output of this job
    /// alone (another job may write the job's own outputs after it, and PREP_BO on those
    /// would wait for that one too): `EBUSY` while its fence is unsignalled. A job the
    /// scheduler stopped after its timeout is done as well; `wait` then reports it.
    fn is_done(&self, dev: &Device, job: &Job<'_>, flight: &InFlight) -> Result<bool> {
        let handle = match &flight.sentinel {
            Some(s) => s.handle(),
            None => match job.writes.first() {
                Some(b) => b.handle(),
                None => return Ok(true),
            },
        };
        let mut p = DrmRocketPrepBo {
            handle,
            reserved: 0,
            timeout_ns: 0,
        };
        match dev.inner.port.ioctl(&mut Ioctl::RocketPrepBo(&mut p)) {
            Ok(_) => Ok(true),
            Err(Error::Ioctl {
                errno: OsError::EBUSY | OsError::ETIMEDOUT,
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The scheduler's job timeout (500 ms) and a margin: by then a hung job has been
    /// stopped and its fences signalled.
    fn settle_bound(&self, _job: &Job<'_>) -> Duration {
        crate::emu::ROCKET_JOB_TIMEOUT + Duration::from_millis(500)
    }

    /// PREP_BO on every written buffer: once all return, the job's fences are signalled
    /// and it no longer runs (whether or not it completed).
    fn settle(&self, dev: &Device, s: Submitted<'_, '_>, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        written(s.job, s.flight).all(|handle| prep(dev, handle, left).is_ok())
    }
}

/// The handles of the buffers a job writes, its sentinel last.
fn written<'b>(job: &'b Job<'_>, flight: &'b InFlight) -> impl Iterator<Item = u32> + 'b {
    job.writes
        .iter()
        .copied()
        .chain(flight.sentinel.iter())
        .map(Bo::handle)
}

/// PREP_BO with a deadline `left` from now.
fn prep(dev: &Device, handle: u32, left: Duration) -> Result<i32> {
    let mut p = DrmRocketPrepBo {
        handle,
        reserved: 0,
        timeout_ns: deadline_ns(left),
    };
    dev.inner.port.ioctl(&mut Ioctl::RocketPrepBo(&mut p))
}

/// The job's input and output handle lists, each buffer once: the driver drops a job
/// that lists a BO twice, in either list, and still returns success
/// (`drm_gem_lock_reservations` → -EALREADY, ignored by `rocket_ioctl_submit`). A
/// buffer both read and written is listed as an output, whose fence covers both.
fn bo_lists(job: &Job<'_>, sentinel: &Bo) -> (Vec<u32>, Vec<u32>) {
    let mut outs: Vec<u32> = Vec::new();
    for h in job.writes.iter().map(|b| b.handle).chain([sentinel.handle]) {
        if !outs.contains(&h) {
            outs.push(h);
        }
    }
    let mut ins: Vec<u32> = Vec::new();
    for h in std::iter::once(job.regcmd)
        .chain(job.reads.iter().copied())
        .map(Bo::handle)
    {
        if !outs.contains(&h) && !ins.contains(&h) {
            ins.push(h);
        }
    }
    (ins, outs)
}

/// One SUBMIT of one job: its tasks and then the completion sentinel's, the buffers it
/// reads (the regcmd buffer first) and those it writes, each once.
fn submit(dev: &Device, job: &Job<'_>) -> Result<InFlight> {
    let sentinel = sentinel::make(dev)?;
    let mut tasks: Vec<DrmRocketTask> = job
        .tasks
        .iter()
        .map(|t| DrmRocketTask {
            regcmd: job.regcmd.dma_addr() + t.offset,
            regcmd_count: t.regcmd_count(),
        })
        .collect();
    tasks.extend(sentinel::tasks(&sentinel)?);
    let (ins, outs) = bo_lists(job, &sentinel);
    let mut j = DrmRocketJob::default();
    dev.inner.port.ioctl(&mut Ioctl::RocketSubmit {
        job: &mut j,
        tasks: &tasks,
        in_handles: &ins,
        out_handles: &outs,
    })?;
    Ok(InFlight {
        fence: None,
        tasks: None,
        sentinel: Some(sentinel),
    })
}

/// Waits on every buffer the job writes (PREP_BO with the absolute deadline), then
/// confirms completion by the sentinel: PREP_BO also succeeds for a job the scheduler
/// stopped after its timeout, and for one the driver dropped.
fn wait(dev: &Device, s: Submitted<'_, '_>, deadline: Instant) -> Result<JobResult> {
    let Submitted { job, flight } = s;
    let timeout = Error::Timeout {
        task_counter: 0,
        int_status: 0,
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let handles: Vec<u32> = written(job, flight).collect();
    for handle in handles {
        match prep(dev, handle, left) {
            Ok(_) => {}
            Err(Error::Ioctl {
                errno: OsError::ETIMEDOUT | OsError::EBUSY,
                ..
            }) => return Err(timeout),
            Err(e) => return Err(e),
        }
    }
    if let Some(s) = flight.sentinel.as_mut()
        && !sentinel::overwritten(s)?
    {
        return Err(timeout);
    }
    Ok(JobResult {
        task_counter: job.tasks.len() as u32,
        int_status: vec![0; job.tasks.len()],
        hw_elapsed: None,
    })
}
