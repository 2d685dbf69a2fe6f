//! The kernel behaviours K13–K18 and K11's soft-reset case (docs/device.md, "Kernel
//! behaviours"; `s8_N_…` tests KN; K19 is a documented limitation without a test), as
//! `behaviour_tests.rs` does K1–K12: each fails if the emulated kernel stops
//! doing what the driver does or the device layer stops handling it. The emulated kernel
//! is told to produce the events a test cannot arrange on demand (a signal in a wait,
//! a failed commit, another process's soft reset, a high IOMMU aperture).

use super::behaviour_tests::{is_timeout, matmul, matmul_split};
use super::*;
use crate::emu::{EmuKernel, Flavour};
use crate::sys::uapi::*;
use crate::sys::{Errno, Ioctl, Kernel, VendorOp};
use std::time::{Duration, Instant};

fn private(flavour: Flavour) -> Device {
    Device::open_emulator(Arc::new(EmuKernel::new(flavour))).unwrap()
}

fn is_invalid<T: std::fmt::Debug>(r: &Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument { .. }))
}

fn is_einval<T: std::fmt::Debug>(r: &Result<T>) -> bool {
    matches!(
        r,
        Err(Error::Ioctl {
            errno: crate::OsError::EINVAL,
            ..
        })
    )
}

#[test]
fn s8_13_a_last_int_mask_the_vendor_driver_cannot_complete_is_refused() {
    let d = private(Flavour::Vendor098);
    let mut mm = matmul(&d, 1);
    for mask in [0x100, 0x200, 0xF00, 0x3300, 0x1000, 0] {
        let mut job = mm.job().timeout(Duration::from_millis(20));
        job.tasks[0].int_mask = mask;
        let r = d.submit(&job);
        assert!(is_invalid(&r), "{mask:#x}: {r:?}");
        let mut job = mm.job();
        job.tasks[0].int_mask = mask;
        let r = d.submit_nonblocking(job).map(|_| ());
        assert!(is_invalid(&r), "{mask:#x}: {r:?}");
    }
    // The emulated kernel, asked directly, never completes such a job either: the
    // refusal is what keeps it from timing out.
    let mut job = mm.job().timeout(Duration::from_millis(20)).unverified();
    job.tasks[0].int_mask = 0x100;
    let r = d.inner.backend.run(&d, &job);
    assert!(is_timeout(&r), "{r:?}");
    // Nothing was left holding a core: every core takes a job, and a whole pair runs.
    let mm3 = matmul_split(&d, &[1, 1, 1]);
    d.submit(&mm3.job().on_cores(CoreMask::All, &[1, 1, 1]))
        .unwrap();
    d.submit(&mm.job()).unwrap();
    assert!(mm.product().iter().all(|&v| v == 128));
    // Each core's range ends in a task that supplies its interrupt mask.
    let mut job = mm3.job().on_cores(CoreMask::All, &[1, 1, 1]);
    job.tasks[1].int_mask = 0x100;
    assert!(is_invalid(&d.submit(&job)));
}

#[test]
fn s8_11_a_soft_reset_failing_the_wait_is_not_an_rk3583() {
    let d = private(Flavour::Vendor098);
    let mm3 = matmul_split(&d, &[1, 1, 1]);
    let job = mm3
        .job()
        .on_cores(CoreMask::All, &[1, 1, 1])
        .timeout(Duration::from_millis(500));
    for after in [Duration::from_millis(120), Duration::from_millis(400)] {
        d.emulator().unwrap().soft_reset_during_next_wait(after);
        let r = d.submit(&job);
        assert!(is_einval(&r), "{after:?}: {r:?}");
        assert_eq!(d.cores(), 3, "{after:?}: no core was learned missing");
    }
    d.submit(&job).unwrap();
}

#[test]
fn s8_14_interrupted_waits_are_resumed() {
    // Vendor: the fence poll of a non-blocking job.
    let d = private(Flavour::Vendor098);
    let mut mm = matmul(&d, 1);
    d.emulator().unwrap().interrupt_waits(3, 0);
    let r = d
        .submit_nonblocking(mm.job())
        .unwrap()
        .wait(Instant::now() + Duration::from_secs(5));
    assert!(r.is_ok(), "{r:?}");
    assert!(mm.product().iter().all(|&v| v == 128));
    // Rocket: PREP_BO, in the wait for the job and in the CPU's access.
    let d = private(Flavour::Rocket);
    let mut mm = matmul(&d, 1);
    d.emulator().unwrap().interrupt_waits(0, 3);
    d.submit(&mm.job()).unwrap();
    d.emulator().unwrap().interrupt_waits(0, 1);
    assert!(mm.product().iter().all(|&v| v == 128));
}

#[test]
fn s8_15_a_failed_nonblocking_vendor_submit_closes_its_fence() {
    let d = private(Flavour::Vendor098);
    let mut mm = matmul(&d, 1);
    let emu = d.emulator().unwrap();
    let files = emu.open_files();
    emu.fail_nonblocking_commits(1);
    let r = d.submit_nonblocking(mm.job()).map(|_| ());
    assert!(is_einval(&r), "{r:?}");
    assert!(
        emu.log().iter().any(|l| l.contains("left installed")),
        "the kernel installed a fence"
    );
    assert_eq!(emu.open_files(), files, "the fence was closed");
    d.submit_nonblocking(mm.job())
        .unwrap()
        .wait(Instant::now() + Duration::from_secs(5))
        .unwrap();
    assert!(mm.product().iter().all(|&v| v == 128));
}

#[test]
fn s8_16_contiguous_vendor_buffers_start_zeroed() {
    for flavour in [Flavour::Vendor098, Flavour::Vendor096] {
        let d = private(flavour);
        for cacheable in [true, false] {
            let flags = BoFlags::default()
                .with_contiguous(true)
                .with_cacheable(cacheable);
            let mut bo = d.alloc(3 * 4096, flags).unwrap();
            assert!(bo.read_all().unwrap().iter().all(|&b| b == 0));
        }
        // The driver's contiguous path without RKNPU_MEM_ZEROING keeps what the memory
        // held; pages are zeroed either way.
        let k = d.emulator().unwrap();
        for (flags, zero) in [
            (0, false),
            (mem::ZEROING, true),
            (mem::NON_CONTIGUOUS, true),
        ] {
            let mut c = RknpuMemCreate {
                flags: flags | mem::WRITE_COMBINE,
                size: 4096,
                ..RknpuMemCreate::default()
            };
            let fd = d.inner.port.fd;
            k.ioctl(
                fd,
                &mut Ioctl::Vendor(VendorNode::Drm, VendorOp::MemCreate(&mut c)),
            )
            .unwrap();
            let mut m = RknpuMemMap {
                handle: c.handle,
                ..RknpuMemMap::default()
            };
            k.ioctl(
                fd,
                &mut Ioctl::Vendor(VendorNode::Drm, VendorOp::MemMap(&mut m)),
            )
            .unwrap();
            let bytes = k.mmap(fd, 4096, m.offset).unwrap().as_slice().to_vec();
            assert_eq!(bytes.iter().all(|&b| b == 0), zero, "flags {flags:#x}");
        }
    }
}

#[test]
fn s8_17_rocket_addresses_above_4_gib_are_refused() {
    let k = Arc::new(EmuKernel::new(Flavour::Rocket));
    k.set_rocket_iova_base((1 << 32) - 4096);
    let d = Device::open_emulator(Arc::clone(&k)).unwrap();
    let r = d.alloc(8192, BoFlags::default());
    assert!(
        matches!(r, Err(Error::NotOffered { .. })),
        "{:?}",
        r.map(|b| b.dma_addr())
    );
    assert_eq!(k.live_objects(), 0, "the refused buffer was freed");
    // The last page below 4 GiB is an address the NPU can use.
    let bo = d.alloc(4096, BoFlags::default()).unwrap();
    assert_eq!(bo.dma_addr(), 0xFFFF_F000);
    drop(bo);
    let k = Arc::new(EmuKernel::new(Flavour::Rocket));
    k.set_rocket_iova_base(1 << 32);
    let d = Device::open_emulator(Arc::clone(&k)).unwrap();
    assert!(d.alloc(4096, BoFlags::default()).is_err());
    assert_eq!(k.live_objects(), 0);
}

#[test]
fn s8_18_sizes_no_kernel_can_map_are_refused() {
    for flavour in [Flavour::Vendor098, Flavour::Vendor096, Flavour::Rocket] {
        let d = private(flavour);
        for size in [usize::MAX, usize::MAX - 4094, (1 << 32) + 1, 1 << 40] {
            let r = d.alloc(size, BoFlags::default());
            assert!(is_invalid(&r), "{flavour:?} {size}: {r:?}");
        }
        assert_eq!(d.emulator().unwrap().live_objects(), 0);
        let bo = d.alloc((1 << 20) + 1, BoFlags::default()).unwrap();
        assert_eq!(bo.size(), (1 << 20) + 4096);
    }
    // The emulated vendor kernel itself: rounding the last page's sizes up wraps to 0,
    // which it refuses (never an overflow); a size no domain holds is out of memory.
    let d = private(Flavour::Vendor098);
    let k = d.emulator().unwrap();
    for (size, errno) in [
        (u64::MAX, Errno::EINVAL),
        (u64::MAX - 4094, Errno::EINVAL),
        (1 << 40, Errno::ENOMEM),
    ] {
        let mut c = RknpuMemCreate {
            flags: mem::NON_CONTIGUOUS,
            size,
            ..RknpuMemCreate::default()
        };
        let r = k.ioctl(
            d.inner.port.fd,
            &mut Ioctl::Vendor(VendorNode::Drm, VendorOp::MemCreate(&mut c)),
        );
        assert_eq!(r, Err(errno), "{size:#x}");
    }
}
