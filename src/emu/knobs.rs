//! Kernel events a test can make the emulated kernel produce, each something a real
//! driver does under conditions a test cannot arrange on demand: a signal interrupting a
//! wait, a commit that fails after the out-fence was installed, another process's soft
//! reset waking a waiting job, an IOMMU aperture above 4 GiB (docs/device.md, "Kernel
//! behaviours").

use super::EmuKernel;
use std::time::Duration;

/// The events armed for the next requests; each fires once per count and then disarms.
#[derive(Debug)]
pub(super) struct Knobs {
    /// Fence polls still to fail with `EINTR`.
    pub(super) eintr_polls: u32,
    /// Rocket PREP_BO requests still to fail with `EINTR`.
    pub(super) eintr_prep_bos: u32,
    /// Vendor non-blocking submissions still to fail their commit.
    pub(super) failing_commits: u32,
    /// Vendor: the next blocking job's wait is woken by a soft reset this long in.
    pub(super) reset_after: Option<Duration>,
    /// Rocket: where the address spaces of fds opened from now on start.
    pub(super) rocket_iova_base: u64,
    /// Rocket: the scheduler's job timeout for jobs submitted from now on.
    pub(super) rocket_job_timeout: Duration,
}

impl Default for Knobs {
    fn default() -> Knobs {
        Knobs {
            eintr_polls: 0,
            eintr_prep_bos: 0,
            failing_commits: 0,
            reset_after: None,
            rocket_iova_base: 0,
            rocket_job_timeout: super::ROCKET_JOB_TIMEOUT,
        }
    }
}

impl EmuKernel {
    /// The next `polls` polls of a fence and the next `prep_bos` rocket PREP_BO
    /// requests fail with `EINTR`, as when a signal arrives during the wait: `poll(2)`
    /// is never restarted, and PREP_BO's reservation wait is interruptible
    /// (`rocket_gem.c`, `rocket_ioctl_prep_bo`) and returns `EINTR` to a handler
    /// installed without `SA_RESTART`.
    pub fn interrupt_waits(&self, polls: u32, prep_bos: u32) {
        let mut s = self.lock();
        s.knobs.eintr_polls = polls;
        s.knobs.eintr_prep_bos = prep_bos;
    }

    /// The commit of the next `count` vendor non-blocking submissions fails, as
    /// `rknpu_job_commit` refuses a job (one without `RKNPU_JOB_PC`, say): `rknpu_submit`
    /// (`rknpu_job.c`) has installed the out-fence's descriptor and written it to
    /// `fence_fd` before it schedules the job, and returns the job's error without
    /// taking the descriptor back. The fence is never signalled.
    pub fn fail_nonblocking_commits(&self, count: u32) {
        self.lock().knobs.failing_commits = count;
    }

    /// The next vendor blocking job that passes SUBMIT's checks is failed with
    /// `EINVAL` `after` into its wait, without running, as another process's soft
    /// reset (`rknpu_soft_reset`, `rknpu_reset.c`, after a timeout or RKNPU_ACT_RESET)
    /// wakes every waiter.
    pub fn soft_reset_during_next_wait(&self, after: Duration) {
        self.lock().knobs.reset_after = Some(after);
    }

    /// Rocket fds opened from now on get an address space of 4 GiB starting at
    /// `base`, as an IOMMU domain whose aperture lies elsewhere than the Rockchip
    /// IOMMU's `[0, 4 GiB)` would give (`rocket_drv.c` sizes the `drm_mm` from the
    /// domain's geometry).
    pub fn set_rocket_iova_base(&self, base: u64) {
        self.lock().knobs.rocket_iova_base = base;
    }

    /// Rocket jobs submitted from now on are stopped once their modelled time
    /// ([`super::ROCKET_TIME_MODEL`]) passes `timeout` rather than the scheduler's 500 ms,
    /// and their fences signalled that long after: a job the simulator runs in
    /// milliseconds can then stand for one a board runs for longer than the timeout.
    /// The device reports it as its job timeout
    /// ([`Capabilities::job_timeout`](crate::device::Capabilities::job_timeout)).
    pub fn set_rocket_job_timeout(&self, timeout: Duration) {
        self.lock().knobs.rocket_job_timeout = timeout;
    }

    /// The rocket job timeout in force ([`EmuKernel::set_rocket_job_timeout`]).
    pub fn rocket_job_timeout(&self) -> Duration {
        self.lock().knobs.rocket_job_timeout
    }
}
