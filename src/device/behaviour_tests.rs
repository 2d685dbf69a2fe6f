//! The kernel behaviours K1–K12 (docs/hardware/kernel-behaviours.md; `s8_N_…` tests KN): each
//! test fails if the emulated kernel stops imitating the driver or the device layer stops
//! handling it. Each runs on an emulated kernel of its own, so hung cores and leaked
//! buffers stay there.

use super::*;
use crate::emu::{EmuKernel, Flavour, MISC_NODE, node_path};
use crate::kernels::single::{self, Dtype, SingleMatmul};
use crate::regcmd::{Program, ProgramBuilder, words_to_le_bytes};
use crate::sim::{At, Faults};
use crate::sys::uapi::*;
use crate::sys::{Errno, Ioctl, Kernel, VendorOp};
use std::time::{Duration, Instant};

fn private(flavour: Flavour) -> Device {
    Device::open_emulator(Arc::new(EmuKernel::new(flavour))).unwrap()
}

/// An int8 matmul of ones by twos (every result 128) as `tasks` identical chained
/// tasks, with an output buffer the CPU never touched.
pub(super) struct Mm {
    pub(super) regcmd: Bo,
    pub(super) a: Bo,
    pub(super) b: Bo,
    pub(super) c: Bo,
    pub(super) program: Program,
    pub(super) mm: SingleMatmul,
}

pub(super) fn matmul(d: &Device, tasks: usize) -> Mm {
    matmul_of(d, tasks, 1)
}

/// [`matmul`] of A all `ones` (every result `128 * ones`).
pub(super) fn matmul_of(d: &Device, tasks: usize, ones: i32) -> Mm {
    let mm = mm_4x64x32();
    let mut a = d.alloc(mm.a_bytes(), BoFlags::default()).unwrap();
    a.write(0, &mm.pack_a_int(&[ones; 4 * 64]).unwrap())
        .unwrap();
    matmul_reading(d, tasks, a)
}

/// The 4×64×32 int8 matmul [`matmul`] runs.
pub(super) fn mm_4x64x32() -> SingleMatmul {
    SingleMatmul::new(4, 64, 32, Dtype::Int8)
}

/// [`matmul`] reading A from `a` (packed for [`mm_4x64x32`]), B all 2.
pub(super) fn matmul_reading(d: &Device, tasks: usize, a: Bo) -> Mm {
    matmul_chains(d, &[tasks], a)
}

/// [`matmul`] as one chain per core: `split[i]` tasks for the job's `i`-th core.
pub(super) fn matmul_split(d: &Device, split: &[usize]) -> Mm {
    let mm = mm_4x64x32();
    let mut a = d.alloc(mm.a_bytes(), BoFlags::default()).unwrap();
    a.write(0, &mm.pack_a_int(&[1; 4 * 64]).unwrap()).unwrap();
    matmul_chains(d, split, a)
}

/// [`matmul_reading`] with the tasks chained per core as `split` gives them.
fn matmul_chains(d: &Device, split: &[usize], a: Bo) -> Mm {
    let mm = mm_4x64x32();
    let mut p = ProgramBuilder::new(single::REGCMD);
    for &tasks in split {
        for _ in 0..tasks {
            p.push_task(mm.body().unwrap(), mm.enable());
        }
        p.end_chain();
    }
    let program = p.build().unwrap();
    let mut b = d.alloc(mm.b_bytes(), BoFlags::default()).unwrap();
    b.write(0, &mm.pack_b_int(&[2; 64 * 32]).unwrap()).unwrap();
    let c = d.alloc(mm.c_bytes(), BoFlags::default()).unwrap();
    let mut regcmd = d.alloc(program.byte_len(), BoFlags::default()).unwrap();
    let words = program
        .bind(|id| {
            Some(u64::from(match id {
                single::REGCMD => regcmd.dma_addr(),
                single::A => a.dma_addr(),
                single::B => b.dma_addr(),
                _ => c.dma_addr(),
            }))
        })
        .unwrap();
    regcmd.write(0, &words_to_le_bytes(&words)).unwrap();
    Mm {
        regcmd,
        a,
        b,
        c,
        program,
        mm,
    }
}

impl Mm {
    pub(super) fn job(&self) -> Job<'_> {
        Job::from_program(&self.regcmd, &self.program)
            .reads(&self.a)
            .reads(&self.b)
            .writes(&self.c)
    }

    fn product_is_right(&mut self) -> bool {
        let bytes = self.c.read_all().unwrap();
        let c = self.mm.unpack_c_int(&bytes[..self.mm.c_bytes()]).unwrap();
        c.iter().all(|&v| v == 128)
    }

    /// The product as the NPU wrote it.
    pub(super) fn product(&mut self) -> Vec<i64> {
        let bytes = self.c.read_all().unwrap();
        self.mm.unpack_c_int(&bytes[..self.mm.c_bytes()]).unwrap()
    }
}

fn hang(d: &Device, core: usize, task: usize) {
    d.emulator().unwrap().inject(Faults {
        hang: Some(At { core, task }),
        ..Faults::default()
    });
}

pub(super) fn is_timeout<T: std::fmt::Debug>(r: &Result<T>) -> bool {
    matches!(r, Err(Error::Timeout { .. }))
}

#[test]
fn s8_1_a_hung_rocket_job_is_a_timeout_under_any_deadline() {
    let d = private(Flavour::Rocket);
    let mm = matmul(&d, 1);
    hang(&d, 0, 0);
    // Beyond the scheduler's 500 ms the driver signals the fence and PREP_BO succeeds.
    let r = d.submit(&mm.job().timeout(Duration::from_millis(900)));
    assert!(is_timeout(&r), "{r:?}");
    let r = d
        .submit_nonblocking(mm.job())
        .unwrap()
        .wait(Instant::now() + Duration::from_millis(900));
    assert!(is_timeout(&r), "{r:?}");
    assert!(
        d.leaked_buffers().is_empty(),
        "the scheduler stopped the job"
    );
    d.emulator().unwrap().inject(Faults::default());
    let mut mm = mm;
    d.submit(&mm.job()).unwrap();
    assert!(mm.product_is_right());
}

#[test]
fn s8_2_fresh_bit_10_buffers_are_cleaned_before_the_npu_writes_them() {
    let d = private(Flavour::Vendor098);
    let mut mm = matmul(&d, 1);
    d.submit(&mm.job()).unwrap();
    assert!(mm.product_is_right(), "{:?}", d.emulator().unwrap().log());
    let log = d.emulator().unwrap().log();
    assert!(!log.iter().any(|l| l.contains("evicted")), "{log:?}");
    // Bit 10 is used only where the clean is possible (cacheable buffers).
    let uncached = BoFlags {
        cacheable: false,
        ..BoFlags::default()
    };
    assert_eq!(
        uncached.vendor_bits((0, 9, 8)) & mem::IOMMU_LIMIT_IOVA_ALIGNMENT,
        0
    );
}

#[test]
fn s8_3_vendor_int_status_lands_in_the_jobs_last_task_only() {
    let d = private(Flavour::Vendor098);
    let mut mm = matmul_split(&d, &[1, 1]);
    let r = d
        .submit(&mm.job().on_cores(CoreMask::Cores01, &[1, 1]))
        .unwrap();
    assert_eq!(r.int_status.len(), 2);
    assert_eq!(r.int_status[0], 0, "{r:?}");
    assert_ne!(r.int_status[1], 0, "the last task's status was read: {r:?}");
    assert!(mm.product_is_right());
    // Non-blocking: the kernel writes nothing back.
    let mm = matmul(&d, 2);
    let r = d
        .submit_nonblocking(mm.job().on_cores(CoreMask::Auto, &[2]))
        .unwrap()
        .wait(Instant::now() + Duration::from_secs(2))
        .unwrap();
    assert_eq!(r.int_status, vec![0, 0]);
}

#[test]
fn s8_4_a_hung_nonblocking_vendor_job_keeps_its_core() {
    let d = private(Flavour::Vendor098);
    let mm = matmul(&d, 1);
    hang(&d, 0, 0);
    let job = mm.job().timeout(Duration::from_millis(50));
    let r = d.submit_nonblocking(job).unwrap().wait(Instant::now());
    assert!(is_timeout(&r), "{r:?}");
    d.emulator().unwrap().inject(Faults::default());
    d.reset().unwrap();
    // A fresh matmul (the first one's buffers are held): core 0 never takes it.
    let mut fresh = matmul(&d, 1);
    let t0 = Instant::now();
    let job = fresh.job().on_cores(CoreMask::Core0, &[1]);
    let r = d.submit(&job.timeout(Duration::from_millis(50)));
    assert!(
        matches!(
            r,
            Err(Error::Ioctl {
                errno: crate::OsError::EINVAL,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(150),
        "3 × the timeout"
    );
    // The automatic mask takes a free core.
    d.submit(&fresh.job()).unwrap();
    assert!(fresh.product_is_right());
}

#[test]
fn s8_5_nonblocking_vendor_jobs_on_an_explicit_mask_are_refused() {
    let d = private(Flavour::Vendor098);
    let mm = matmul(&d, 1);
    let job = mm.job().on_cores(CoreMask::Core1, &[1]);
    match d.submit_nonblocking(job) {
        Err(Error::NotOffered { what }) => assert!(what.contains("automatic"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert!(d.submit(&mm.job().on_cores(CoreMask::Core1, &[1])).is_ok());
}

#[test]
fn s8_6_a_buffer_read_and_written_is_listed_once_to_rocket() {
    let d = private(Flavour::Rocket);
    let mut mm = matmul(&d, 1);
    d.submit(&mm.job().reads(&mm.c).reads(&mm.a)).unwrap();
    assert!(mm.product_is_right());
    assert!(
        !d.emulator()
            .unwrap()
            .log()
            .iter()
            .any(|l| l.contains("twice"))
    );
    // The emulated driver drops a job naming a BO twice, and says nothing.
    let k = EmuKernel::new(Flavour::Rocket);
    let fd = k.open(node_path(Flavour::Rocket)).unwrap();
    let mut c = DrmRocketCreateBo {
        size: 4096,
        ..DrmRocketCreateBo::default()
    };
    k.ioctl(fd, &mut Ioctl::RocketCreateBo(&mut c)).unwrap();
    let r = super::tests::rocket_submit_one(&k, fd, &[c.handle], &[c.handle]);
    assert_eq!(r, Ok(0));
    assert!(k.log().iter().any(|l| l.contains("twice")), "{:?}", k.log());
}

#[test]
fn s8_7_a_dropped_job_that_may_still_run_keeps_its_buffers() {
    let emu = Arc::new(EmuKernel::new(Flavour::Vendor098));
    let d = Device::open_emulator(emu.clone()).unwrap();
    // A dropped job that finishes: waited for, nothing held, everything freed.
    let mm = matmul(&d, 1);
    drop(d.submit_nonblocking(mm.job()).unwrap());
    drop(mm);
    assert!(d.leaked_buffers().is_empty());
    let objects = emu.live_objects();
    // One that never finishes: held, then leaked, its addresses kept.
    let mut mm = matmul(&d, 1);
    hang(&d, 0, 0);
    let t0 = Instant::now();
    drop(
        d.submit_nonblocking(mm.job().timeout(Duration::from_millis(60)))
            .unwrap(),
    );
    assert!(t0.elapsed() >= Duration::from_millis(50), "a bounded wait");
    emu.inject(Faults::default());
    assert!(matches!(mm.c.read_all(), Err(Error::StillRunning { .. })));
    assert!(matches!(
        d.submit(&mm.job()),
        Err(Error::StillRunning { .. })
    ));
    let held: Vec<(u64, u64)> = [&mm.regcmd, &mm.a, &mm.b, &mm.c]
        .iter()
        .map(|b| (u64::from(b.dma_addr()), b.size() as u64))
        .collect();
    drop(mm);
    let leaked = d.leaked_buffers();
    assert_eq!(leaked.len(), 5, "the job's four buffers and its task array");
    assert!(leaked.iter().all(|l| l.reason.contains("dropped")));
    assert_eq!(emu.live_objects(), objects + 5, "none freed under the NPU");
    let next = d.alloc(4096, BoFlags::default()).unwrap();
    let at = u64::from(next.dma_addr());
    assert!(held.iter().all(|&(a, n)| !(a..a + n).contains(&at)));
    // Closing the node would free them: a device with leaks keeps it open.
    drop(next);
    drop(d);
    assert_eq!(emu.live_objects(), objects + 5);
}

#[test]
fn s8_8_the_misc_node_is_recognised() {
    let emu = Arc::new(EmuKernel::new(Flavour::Vendor098));
    match Device::open_with(emu.clone(), Some(emu), MISC_NODE) {
        Err(Error::UnsupportedDriver { driver, .. }) => {
            assert!(driver.contains("misc"), "{driver}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s8_9_uncached_vendor_buffers_are_not_device_memory() {
    let d = private(Flavour::Vendor098);
    let flags = BoFlags {
        cacheable: false,
        ..BoFlags::default()
    };
    let mut bo = d.alloc(4096, flags).unwrap();
    bo.write(3, &[1, 2, 3, 4, 5]).unwrap();
    assert_eq!(&bo.read_all().unwrap()[3..8], &[1, 2, 3, 4, 5]);
    let log = d.emulator().unwrap().log();
    assert!(!log.iter().any(|l| l.contains("SIGBUS")), "{log:?}");
}

#[test]
fn s8_10_error_codes_and_address_reuse() {
    let k = EmuKernel::new(Flavour::Vendor098);
    let fd = k.open(node_path(Flavour::Vendor098)).unwrap();
    let mut c = RknpuMemCreate {
        handle: 77,
        size: 4096,
        ..RknpuMemCreate::default()
    };
    let vendor = |op: VendorOp<'_>| k.ioctl(fd, &mut Ioctl::Vendor(VendorNode::Drm, op));
    vendor(VendorOp::MemCreate(&mut c)).unwrap();
    assert_ne!(c.handle, 77, "an unknown handle allocates a new object");
    let mut gone = RknpuMemDestroy {
        handle: c.handle,
        ..RknpuMemDestroy::default()
    };
    vendor(VendorOp::MemDestroy(&mut gone)).unwrap();
    let mut again = RknpuMemCreate {
        size: 4096,
        ..RknpuMemCreate::default()
    };
    vendor(VendorOp::MemCreate(&mut again)).unwrap();
    assert_eq!(again.dma_addr, c.dma_addr, "the domain reuses freed ranges");

    let d = private(Flavour::Rocket);
    assert_eq!(d.info().date, "0");
    let mut mm = matmul(&d, 1);
    hang(&d, 0, 0);
    let pending = d.submit_nonblocking(mm.job()).unwrap();
    let mut p = DrmRocketPrepBo {
        handle: mm.c.handle(),
        reserved: 0,
        timeout_ns: backend::deadline_ns(Duration::ZERO) - 1_000_000,
    };
    let r = d
        .inner
        .port
        .kernel
        .ioctl(d.inner.port.fd, &mut Ioctl::RocketPrepBo(&mut p));
    assert_eq!(r, Err(Errno::EBUSY), "a past deadline");
    assert!(is_timeout(
        &pending.wait(Instant::now() + Duration::from_millis(900))
    ));
    d.emulator().unwrap().inject(Faults::default());
    assert!(
        mm.c.read_all().is_ok(),
        "the scheduler stopped it: nothing held"
    );
    // drm_mm hands a freed range out again.
    let k = EmuKernel::new(Flavour::Rocket);
    let fd = k.open(node_path(Flavour::Rocket)).unwrap();
    let create = || {
        let mut c = DrmRocketCreateBo {
            size: 4096,
            ..DrmRocketCreateBo::default()
        };
        k.ioctl(fd, &mut Ioctl::RocketCreateBo(&mut c)).map(|_| c)
    };
    let (first, _second) = (create().unwrap(), create().unwrap());
    let mut close = DrmGemClose {
        handle: first.handle,
        pad: 0,
    };
    k.ioctl(fd, &mut Ioctl::GemClose(&mut close)).unwrap();
    assert_eq!(create().unwrap().dma_address, first.dma_address);
}

#[test]
fn s8_11_an_rk3583_has_two_cores() {
    let d = Device::open_emulator(Arc::new(EmuKernel::rk3583(Flavour::Vendor098))).unwrap();
    assert_eq!(d.cores(), 3, "not known before the driver refuses a mask");
    let mut mm = matmul(&d, 1);
    let r = d.submit(&mm.job().on_cores(CoreMask::Core2, &[1]));
    assert_eq!(r, Err(Error::NoSuchCore { mask: 4, cores: 2 }));
    assert_eq!(d.cores(), 2);
    let refusals = d.emulator().unwrap().log().len();
    let mm3 = matmul_split(&d, &[1, 1, 1]);
    let r = d.submit(&mm3.job().on_cores(CoreMask::All, &[1, 1, 1]));
    assert_eq!(r, Err(Error::NoSuchCore { mask: 7, cores: 2 }));
    assert_eq!(d.emulator().unwrap().log().len(), refusals, "not sent");
    d.submit(&mm.job().on_cores(CoreMask::Core1, &[1])).unwrap();
    assert!(mm.product_is_right());
}

#[test]
fn s8_12_a_vendor_timeout_reports_the_wait_cores_counter() {
    let d = private(Flavour::Vendor098);
    let mm = matmul(&d, 3);
    hang(&d, 0, 1);
    let r = d.submit(&mm.job().timeout(Duration::from_millis(30)));
    assert_eq!(
        r,
        Err(Error::Timeout {
            task_counter: 1,
            int_status: 0
        })
    );
    // On masks 3 and 7 the wait core is core 0, whatever another core does.
    hang(&d, 1, 0);
    let mm = matmul_split(&d, &[2, 1]);
    let job = mm.job().on_cores(CoreMask::Cores01, &[2, 1]);
    let r = d.submit(&job.timeout(Duration::from_millis(30)));
    assert!(
        matches!(
            r,
            Err(Error::Timeout {
                task_counter: 2,
                ..
            })
        ),
        "{r:?}"
    );
}
