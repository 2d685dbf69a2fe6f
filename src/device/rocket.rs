//! The mainline `rocket` accel driver: CREATE_BO buffers in a per-fd address space,
//! PREP_BO / FINI_BO ownership transitions, jobs of tasks the scheduler places on cores
//! itself, completion signalled through the buffers a job writes (kernel-interfaces.md 4).

use super::backend::{Backend, InFlight, Port, deadline_ns};
use super::{Bo, BoFlags, BoMeta, CoreMask, Device, DeviceError, DeviceInfo, DmaBuf};
use super::{Interface, Job, JobResult, Result};
use crate::sys::uapi::*;
use crate::sys::{Errno, Fd, Ioctl};
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

    fn alloc<'d>(
        &self,
        dev: &'d Device,
        size: usize,
        _flags: BoFlags,
        traced: bool,
    ) -> Result<Bo<'d>> {
        let size32 = u32::try_from(size).map_err(|_| DeviceError::InvalidArgument {
            what: format!("{size} bytes: rocket buffers are at most 4 GiB - 1"),
        })?;
        let mut c = DrmRocketCreateBo {
            size: size32,
            ..DrmRocketCreateBo::default()
        };
        dev.port.ioctl(&mut Ioctl::RocketCreateBo(&mut c))?;
        let bo = Bo {
            dev,
            handle: c.handle,
            size: size.div_ceil(4096) * 4096,
            dma: c.dma_address as u32,
            obj_addr: 0,
            mmap_offset: c.offset,
            cacheable: true,
        };
        dev.track(c.handle, bo.meta(traced));
        Ok(bo)
    }

    fn import<'d>(&self, _dev: &'d Device, _dmabuf: &DmaBuf<'_>) -> Result<Bo<'d>> {
        Err(DeviceError::Unsupported {
            what: "dma-buf import: the rocket driver has no import path".into(),
        })
    }

    fn export(&self, _dev: &Device, _handle: u32) -> Result<Fd> {
        Err(DeviceError::Unsupported {
            what: "dma-buf export: untested on the rocket driver".into(),
        })
    }

    fn free(&self, dev: &Device, handle: u32, _m: &BoMeta) -> Result<()> {
        let mut c = DrmGemClose { handle, pad: 0 };
        dev.port.ioctl(&mut Ioctl::GemClose(&mut c)).map(|_| ())
    }

    /// PREP_BO with a 5 s deadline.
    fn to_cpu(&self, dev: &Device, handle: u32, _m: &BoMeta) -> Result<()> {
        let mut p = DrmRocketPrepBo {
            handle,
            reserved: 0,
            timeout_ns: deadline_ns(Duration::from_secs(5)),
        };
        dev.port.ioctl(&mut Ioctl::RocketPrepBo(&mut p)).map(|_| ())
    }

    /// FINI_BO.
    fn to_device(&self, dev: &Device, handle: u32, _m: &BoMeta) -> Result<()> {
        let mut f = DrmRocketFiniBo {
            handle,
            reserved: 0,
        };
        dev.port.ioctl(&mut Ioctl::RocketFiniBo(&mut f)).map(|_| ())
    }

    fn reset(&self, _dev: &Device) -> Result<()> {
        Err(DeviceError::Unsupported {
            what: "reset: the rocket driver resets a core itself after a job timeout".into(),
        })
    }

    fn picks_cores(&self) -> bool {
        true
    }

    fn check(&self, job: &Job<'_>) -> Result<()> {
        if job.cores != CoreMask::Auto {
            return Err(DeviceError::Unsupported {
                what: "core selection: the rocket driver schedules jobs on cores itself".into(),
            });
        }
        if job.writes.is_empty() {
            return Err(DeviceError::InvalidArgument {
                what: "rocket signals completion only through written buffers: name one with Job::writes".into(),
            });
        }
        Ok(())
    }

    /// Rocket has no submit flags.
    fn submit_flags(&self, _nonblocking: bool) -> u32 {
        0
    }

    fn run(&self, dev: &Device, job: &Job<'_>) -> Result<JobResult> {
        submit(dev, job)?;
        wait(dev, job, Instant::now() + job.timeout)
    }

    fn start<'a>(&self, dev: &'a Device, job: &Job<'a>) -> Result<InFlight<'a>> {
        submit(dev, job)?;
        Ok(InFlight::default())
    }

    fn wait(
        &self,
        dev: &Device,
        job: &Job<'_>,
        _flight: &mut InFlight<'_>,
        deadline: Instant,
    ) -> Result<JobResult> {
        wait(dev, job, deadline)
    }
}

/// One SUBMIT of one job: its tasks, the buffers it reads (the regcmd buffer first) and
/// those it writes.
fn submit(dev: &Device, job: &Job<'_>) -> Result<()> {
    let tasks: Vec<DrmRocketTask> = job
        .tasks
        .iter()
        .map(|t| DrmRocketTask {
            regcmd: job.regcmd.dma_addr() + t.offset,
            regcmd_count: t.regcmd_count(),
        })
        .collect();
    let ins: Vec<u32> = std::iter::once(job.regcmd)
        .chain(job.reads.iter().copied())
        .map(Bo::handle)
        .collect();
    let outs: Vec<u32> = job.writes.iter().map(|b| b.handle()).collect();
    let mut j = DrmRocketJob::default();
    dev.port
        .ioctl(&mut Ioctl::RocketSubmit {
            job: &mut j,
            tasks: &tasks,
            in_handles: &ins,
            out_handles: &outs,
        })
        .map(|_| ())
}

/// Waits on every buffer the job writes (PREP_BO with the absolute deadline).
fn wait(dev: &Device, job: &Job<'_>, deadline: Instant) -> Result<JobResult> {
    let left = deadline.saturating_duration_since(Instant::now());
    for bo in &job.writes {
        let mut p = DrmRocketPrepBo {
            handle: bo.handle,
            reserved: 0,
            timeout_ns: deadline_ns(left),
        };
        match dev.port.ioctl(&mut Ioctl::RocketPrepBo(&mut p)) {
            Ok(_) => {}
            Err(DeviceError::Ioctl {
                errno: Errno::ETIMEDOUT | Errno::EBUSY,
                ..
            }) => {
                return Err(DeviceError::Timeout {
                    task_counter: 0,
                    int_status: 0,
                });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(JobResult {
        task_counter: job.tasks.len() as u32,
        int_status: vec![0; job.tasks.len()],
        hw_elapsed: None,
    })
}
