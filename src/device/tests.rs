//! The emulated kernel refuses what the drivers refuse, with the same errno, and models
//! what they do (caches, per-fd address spaces, dropped rocket jobs, timeouts), checked
//! through the seam itself.

use super::*;
use crate::emu::{EmuKernel, Flavour, node_path};
use crate::regs::{Register, dpu};
use crate::submit::TaskDesc;
use crate::sys::uapi::*;
use crate::sys::{Errno, Fd, Ioctl, Kernel, VendorOp};
use std::time::{Duration, Instant};
use zerocopy::IntoBytes;

fn vendor() -> (EmuKernel, Fd) {
    let k = EmuKernel::new(Flavour::Vendor098);
    let fd = k.open(node_path(Flavour::Vendor098)).unwrap();
    (k, fd)
}

fn v(k: &EmuKernel, fd: Fd, op: VendorOp<'_>) -> Result<i32, Errno> {
    k.ioctl(fd, &mut Ioctl::Vendor(VendorNode::Drm, op))
}

fn create(k: &EmuKernel, fd: Fd, size: u64, flags: u32) -> Result<RknpuMemCreate, Errno> {
    let mut c = RknpuMemCreate {
        size,
        flags,
        ..RknpuMemCreate::default()
    };
    v(k, fd, VendorOp::MemCreate(&mut c)).map(|_| c)
}

#[test]
fn vendor_memory_requests_are_checked_like_the_driver() {
    let (k, fd) = vendor();
    assert_eq!(create(&k, fd, 0, 0).unwrap_err(), Errno::EINVAL);
    let mut c = RknpuMemCreate {
        size: 4096,
        iommu_domain_id: 16,
        ..RknpuMemCreate::default()
    };
    assert_eq!(
        v(&k, fd, VendorOp::MemCreate(&mut c)).unwrap_err(),
        Errno::EINVAL
    );
    let bo = create(&k, fd, 100, mem::CACHEABLE).unwrap();
    assert_eq!(bo.size, 4096, "page-rounded");
    assert_eq!(bo.dma_addr + bo.size, 1 << 32, "top-down from 4 GiB");
    let second = create(&k, fd, 8192, 0).unwrap();
    assert_eq!(second.dma_addr + second.size, bo.dma_addr);
    let mut m = RknpuMemMap {
        handle: 99,
        ..RknpuMemMap::default()
    };
    assert_eq!(
        v(&k, fd, VendorOp::MemMap(&mut m)).unwrap_err(),
        Errno::ENOENT
    );
    let mut d = RknpuMemDestroy {
        handle: 99,
        ..RknpuMemDestroy::default()
    };
    assert_eq!(
        v(&k, fd, VendorOp::MemDestroy(&mut d)).unwrap_err(),
        Errno::EINVAL,
        "rknpu_gem.c:935"
    );
    // MEM_SYNC: needs a cacheable object, refuses obj_addr 0, and a fabricated address
    // (which the real driver would dereference) is logged and refused.
    let sync = |obj: u64| RknpuMemSync {
        flags: mem::SYNC_TO_DEVICE,
        obj_addr: obj,
        size: 4096,
        ..RknpuMemSync::default()
    };
    assert_eq!(
        v(&k, fd, VendorOp::MemSync(&mut sync(second.obj_addr))).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        v(&k, fd, VendorOp::MemSync(&mut sync(0))).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        v(&k, fd, VendorOp::MemSync(&mut sync(0xDEAD_0000))).unwrap_err(),
        Errno::EFAULT
    );
    assert!(k.log().iter().any(|l| l.contains("kernel oops")));
    assert!(v(&k, fd, VendorOp::MemSync(&mut sync(bo.obj_addr))).is_ok());
    // mmap: whole object at most.
    let mut m = RknpuMemMap {
        handle: bo.handle,
        ..RknpuMemMap::default()
    };
    v(&k, fd, VendorOp::MemMap(&mut m)).unwrap();
    assert_eq!(k.mmap(fd, 8192, m.offset).unwrap_err(), Errno::EINVAL);
    assert!(k.mmap(fd, 4096, m.offset).is_ok());
    // Requests of the other driver, and the misc flavour's numbers, are unknown here.
    let mut rc = DrmRocketCreateBo {
        size: 4096,
        ..DrmRocketCreateBo::default()
    };
    assert_eq!(
        k.ioctl(fd, &mut Ioctl::RocketCreateBo(&mut rc))
            .unwrap_err(),
        Errno::EINVAL
    );
    let mut a = RknpuAction::default();
    assert_eq!(
        k.ioctl(
            fd,
            &mut Ioctl::Vendor(VendorNode::Misc, VendorOp::Action(&mut a))
        )
        .unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        k.ioctl(
            Fd(7),
            &mut Ioctl::Vendor(VendorNode::Drm, VendorOp::Action(&mut a))
        )
        .unwrap_err(),
        Errno::EBADF
    );
}

#[test]
fn vendor_caches_are_modelled() {
    let (k, fd) = vendor();
    // Zeroed: without the flag a contiguous buffer holds stale bytes.
    let bo = create(&k, fd, 4096, mem::CACHEABLE | mem::ZEROING).unwrap();
    let mut m = RknpuMemMap {
        handle: bo.handle,
        ..RknpuMemMap::default()
    };
    v(&k, fd, VendorOp::MemMap(&mut m)).unwrap();
    let sync = |flags| RknpuMemSync {
        flags,
        obj_addr: bo.obj_addr,
        size: 4096,
        ..RknpuMemSync::default()
    };
    let write = |value: u8| k.mmap(fd, 4096, m.offset).unwrap().as_mut_slice()[0] = value;
    let read = || k.mmap(fd, 4096, m.offset).unwrap().as_slice()[0];
    // A CPU write that is never cleaned: invalidating drops it.
    write(7);
    v(&k, fd, VendorOp::MemSync(&mut sync(mem::SYNC_FROM_DEVICE))).unwrap();
    assert_eq!(read(), 0, "the device never saw the write");
    // Cleaned first, it survives.
    write(7);
    v(&k, fd, VendorOp::MemSync(&mut sync(mem::SYNC_TO_DEVICE))).unwrap();
    v(&k, fd, VendorOp::MemSync(&mut sync(mem::SYNC_FROM_DEVICE))).unwrap();
    assert_eq!(read(), 7);
    // The emulation copies only unmapped buffers, and maps each once at a time.
    let held = k.mmap(fd, 4096, m.offset).unwrap();
    assert_eq!(k.mmap(fd, 4096, m.offset).unwrap_err(), Errno::EBUSY);
    assert_eq!(
        v(&k, fd, VendorOp::MemSync(&mut sync(mem::SYNC_TO_DEVICE))).unwrap_err(),
        Errno::EBUSY
    );
    drop(held);
}

#[test]
fn vendor_submit_is_checked_like_the_driver() {
    let (k, fd) = vendor();
    let plain = create(&k, fd, 4096, mem::CACHEABLE).unwrap();
    let submit = |obj: u64| RknpuSubmit {
        flags: uapi::job::PC,
        timeout: 30,
        task_number: 1,
        task_obj_addr: obj,
        core_mask: 1,
        fence_fd: -1,
        ..RknpuSubmit::default()
    };
    let mut s = RknpuSubmit {
        flags: 0,
        ..submit(plain.obj_addr)
    };
    assert_eq!(
        v(&k, fd, VendorOp::Submit(&mut s)).unwrap_err(),
        Errno::EINVAL,
        "no PC flag"
    );
    let mut s = RknpuSubmit {
        task_number: 0,
        ..submit(plain.obj_addr)
    };
    assert_eq!(
        v(&k, fd, VendorOp::Submit(&mut s)).unwrap_err(),
        Errno::EINVAL,
        "no task"
    );
    let mut s = RknpuSubmit {
        core_mask: 8,
        ..submit(plain.obj_addr)
    };
    assert_eq!(
        v(&k, fd, VendorOp::Submit(&mut s)).unwrap_err(),
        Errno::EINVAL,
        "mask 8"
    );
    // A task array without a kernel mapping: the driver would dereference NULL.
    let mut s = submit(plain.obj_addr);
    assert_eq!(
        v(&k, fd, VendorOp::Submit(&mut s)).unwrap_err(),
        Errno::EFAULT
    );
    assert!(k.log().iter().any(|l| l.contains("KERNEL_MAPPING")));
    // Mask 5 is accepted and never started: -EINVAL after the timeout.
    let tasks = create(&k, fd, 4096, mem::CACHEABLE | mem::KERNEL_MAPPING).unwrap();
    let mut s = RknpuSubmit {
        core_mask: 5,
        ..submit(tasks.obj_addr)
    };
    let t0 = Instant::now();
    assert_eq!(
        v(&k, fd, VendorOp::Submit(&mut s)).unwrap_err(),
        Errno::EINVAL
    );
    assert!(t0.elapsed() >= Duration::from_millis(30));
}

/// Runs the worked example through the vendor seam with a given `int_mask`.
fn worked_submit(int_mask: u32) -> (EmuKernel, Result<i32, Errno>, RknpuSubmit, u32) {
    use crate::kernels::worked_example as we;
    let (k, fd) = vendor();
    let regcmd = create(&k, fd, 4096, 0).unwrap();
    let ops: Vec<RknpuMemCreate> = (0..3).map(|_| create(&k, fd, 4096, 0).unwrap()).collect();
    let program = we::program().unwrap();
    let addr = |b: crate::regcmd::BufferId| {
        Some(if b == we::REGCMD {
            regcmd.dma_addr
        } else {
            ops[b.0 as usize - 1].dma_addr
        })
    };
    let words = program.bind(addr).unwrap();
    let write = |bo: &RknpuMemCreate, bytes: &[u8]| {
        let mut m = RknpuMemMap {
            handle: bo.handle,
            ..RknpuMemMap::default()
        };
        v(&k, fd, VendorOp::MemMap(&mut m)).unwrap();
        k.mmap(fd, 4096, m.offset).unwrap().as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
    };
    write(&regcmd, &crate::regcmd::words_to_le_bytes(&words));
    let tasks = create(&k, fd, 4096, mem::KERNEL_MAPPING).unwrap();
    let task = RknpuTask {
        int_mask,
        regcfg_amount: 104,
        regcmd_addr: regcmd.dma_addr,
        ..RknpuTask::default()
    };
    write(&tasks, task.as_bytes());
    let mut s = RknpuSubmit {
        flags: uapi::job::PC | uapi::job::PINGPONG,
        timeout: 20,
        task_number: 1,
        task_obj_addr: tasks.obj_addr,
        core_mask: 1,
        fence_fd: -1,
        ..RknpuSubmit::default()
    };
    s.subcore_task[0].task_number = 1;
    let r = v(&k, fd, VendorOp::Submit(&mut s));
    let mut m = RknpuMemMap {
        handle: tasks.handle,
        ..RknpuMemMap::default()
    };
    v(&k, fd, VendorOp::MemMap(&mut m)).unwrap();
    let status = u32::from_le_bytes(
        k.mmap(fd, 4096, m.offset).unwrap().as_slice()[20..24]
            .try_into()
            .unwrap(),
    );
    (k, r, s, status)
}

#[test]
fn vendor_completion_follows_the_interrupt_status_match() {
    let (_, r, s, status) = worked_submit(0x300);
    assert_eq!(r, Ok(0));
    assert_eq!(s.task_counter, 1);
    assert!(s.hw_elapse_time > 0);
    assert_eq!(status, 0x100, "written back into the last task");
    // The PPU pair never matches a DPU task: the job times out and the cores are reset.
    let (k, r, s, _) = worked_submit(0xC00);
    assert_eq!(r, Err(Errno::ETIMEDOUT));
    assert_eq!(
        s.task_counter, 1,
        "the task ran; only the status did not match"
    );
    assert!(
        k.log().iter().any(|l| l.contains("soft reset")),
        "{:?}",
        k.log()
    );
}

fn rocket() -> (EmuKernel, Fd) {
    let k = EmuKernel::new(Flavour::Rocket);
    let fd = k.open(node_path(Flavour::Rocket)).unwrap();
    (k, fd)
}

fn rocket_bo(k: &EmuKernel, fd: Fd, size: u32) -> Result<DrmRocketCreateBo, Errno> {
    let mut c = DrmRocketCreateBo {
        size,
        ..DrmRocketCreateBo::default()
    };
    k.ioctl(fd, &mut Ioctl::RocketCreateBo(&mut c)).map(|_| c)
}

/// A rocket job of one 8-entry task at offset 0 reading `in_handles` and writing
/// `out_handles`: what the submit ioctl returns.
pub(super) fn rocket_submit_one(
    k: &EmuKernel,
    fd: Fd,
    in_handles: &[u32],
    out_handles: &[u32],
) -> Result<i32, Errno> {
    let tasks = [DrmRocketTask {
        regcmd: 0,
        regcmd_count: 8,
    }];
    k.ioctl(
        fd,
        &mut Ioctl::RocketSubmit {
            job: &mut DrmRocketJob::default(),
            tasks: &tasks,
            in_handles,
            out_handles,
        },
    )
}

#[test]
fn rocket_requests_are_checked_like_the_driver() {
    let (k, fd) = rocket();
    assert_eq!(rocket_bo(&k, fd, 0).unwrap_err(), Errno::EINVAL);
    let first = rocket_bo(&k, fd, 100).unwrap();
    assert_eq!(first.dma_address, 0, "IOVA 0 is a valid BO address");
    assert_eq!(rocket_bo(&k, fd, 4096).unwrap().dma_address, 4096);
    // Every fd has its own address space.
    let fd2 = k.open(node_path(Flavour::Rocket)).unwrap();
    assert_eq!(rocket_bo(&k, fd2, 4096).unwrap().dma_address, 0);
    let mut p = DrmRocketPrepBo {
        handle: first.handle,
        reserved: 1,
        timeout_ns: 0,
    };
    assert_eq!(
        k.ioctl(fd, &mut Ioctl::RocketPrepBo(&mut p)).unwrap_err(),
        Errno::EINVAL
    );
    let mut p = DrmRocketPrepBo {
        handle: 77,
        reserved: 0,
        timeout_ns: 0,
    };
    assert_eq!(
        k.ioctl(fd, &mut Ioctl::RocketPrepBo(&mut p)).unwrap_err(),
        Errno::ENOENT
    );
    let mut c = crate::sys::uapi::DrmGemClose { handle: 77, pad: 0 };
    assert_eq!(
        k.ioctl(fd, &mut Ioctl::GemClose(&mut c)).unwrap_err(),
        Errno::EINVAL
    );
    // A job naming an unknown handle: the ioctl succeeds and the job is dropped.
    assert_eq!(rocket_submit_one(&k, fd, &[55], &[first.handle]), Ok(0));
    assert!(k.log().iter().any(|l| l.contains("dropped")));
    // Vendor numbers are unknown to rocket.
    let mut a = RknpuAction::default();
    assert_eq!(
        v(&k, fd, VendorOp::Action(&mut a)).unwrap_err(),
        Errno::EINVAL
    );
    k.close(fd2);
}

/// The policy each interface offers upward: the vendor driver runs a job's chains on
/// the cores it names, keeps the CBUF between tasks and has 16 IOMMU domains; rocket
/// picks the core, starts each task alone, stops a job after 500 ms and has one address
/// space per open (so a buffer asked for domain 1 is refused there, by that value).
#[test]
fn capabilities_carry_each_interface_s_policy() {
    let vendor = Device::open_spec("emu").unwrap();
    let c = vendor.capabilities();
    assert!(!c.picks_cores && c.cbuf_reuse && c.incremental_tasks && !c.tasks_run_alone);
    assert_eq!((c.job_timeout, c.iommu_domains), (None, 16));
    let rocket = Device::open_spec("emu:rocket").unwrap();
    let c = rocket.capabilities();
    assert!(c.picks_cores && !c.cbuf_reuse && !c.incremental_tasks && c.tasks_run_alone);
    assert_eq!(c.iommu_domains, 1);
    assert_eq!(c.job_timeout, Some(std::time::Duration::from_millis(500)));
    let in_domain_1 = BoFlags::default().with_iommu_domain(1);
    assert!(matches!(
        rocket.alloc(4096, in_domain_1),
        Err(Error::NotOffered { .. })
    ));
    assert!(vendor.alloc(4096, in_domain_1).is_ok());
}

#[test]
fn devices_open_by_specification() {
    assert!(matches!(
        Device::open_spec("emu:nonsense"),
        Err(Error::NotFound { .. })
    ));
    for (spec, interface, version) in [
        ("emu", Interface::Vendor, (0, 9, 8)),
        ("emu:vendor-0.9.6", Interface::Vendor, (0, 9, 6)),
        ("emu:rocket", Interface::Rocket, (0, 0, 0)),
    ] {
        let d = Device::open_spec(spec).unwrap();
        assert_eq!((d.info().interface, d.info().version), (interface, version));
        assert!(d.info().emulated);
    }
    assert!(matches!(
        Device::open_spec("/nonexistent/node"),
        Err(Error::Open {
            errno: crate::OsError::ENOENT,
            ..
        })
    ));
    // The 0.9.6 driver has no IOVA-alignment flag: the library does not send it there.
    assert_eq!(
        BoFlags::default().vendor_bits((0, 9, 6)) & mem::IOMMU_LIMIT_IOVA_ALIGNMENT,
        0
    );
    assert_ne!(
        BoFlags::default().vendor_bits((0, 9, 8)) & mem::IOMMU_LIMIT_IOVA_ALIGNMENT,
        0
    );
}

#[test]
fn jobs_are_checked_before_they_reach_the_kernel() {
    let d = Device::open_spec("emu").unwrap();
    let regcmd = d.alloc(4096, BoFlags::default()).unwrap();
    let task = TaskDesc {
        offset: 8,
        regcfg_amount: 104,
        int_mask: 0x300,
        enable: 0xD,
    };
    let err = d.submit(&Job::new(&regcmd, vec![task])).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { .. }),
        "misaligned: {err}"
    );
    let task = TaskDesc {
        offset: 4096 - 64,
        ..task
    };
    assert!(matches!(
        d.submit(&Job::new(&regcmd, vec![task])),
        Err(Error::InvalidArgument { .. })
    ));
    let ok = TaskDesc { offset: 0, ..task };
    let j = Job::new(&regcmd, vec![ok]).on_cores(CoreMask::All, &[1]);
    assert!(
        matches!(d.submit(&j), Err(Error::InvalidArgument { .. })),
        "one task over three cores"
    );
    assert!(matches!(
        d.alloc(0, BoFlags::default()),
        Err(Error::InvalidArgument { .. })
    ));
    let r = Device::open_spec("emu:rocket").unwrap();
    let rc = r.alloc(4096, BoFlags::default()).unwrap();
    let err = r.submit(&Job::new(&rc, vec![ok])).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { .. }),
        "rocket needs an output: {err}"
    );
}

/// The words of a single-matmul `program` with its list at `base`, A in `a`, B in `b`
/// and C (and E) at `c_addr`.
pub(super) fn bind_single(
    program: &crate::regcmd::Program,
    base: u32,
    a: &Bo,
    b: &Bo,
    c_addr: u32,
) -> Vec<crate::regcmd::RegCmd> {
    program
        .bind(|id| {
            Some(u64::from(match id.0 {
                0 => base,
                1 => a.dma_addr(),
                2 => b.dma_addr(),
                _ => c_addr,
            }))
        })
        .unwrap()
}

/// An int8 matmul program in a regcmd buffer of `d`, with C bound to `c_addr`.
fn stray_program(d: &Device, a: &Bo, b: &Bo, c_addr: u32) -> Bo {
    use crate::kernels::single::{Dtype, SingleMatmul};
    use crate::regcmd::words_to_le_bytes;
    let program = SingleMatmul::new(4, 64, 32, Dtype::Int8).program().unwrap();
    let mut regcmd = d.alloc(4096, BoFlags::default()).unwrap();
    let base = regcmd.dma_addr();
    let words = bind_single(&program, base, a, b, c_addr);
    regcmd.write(0, &words_to_le_bytes(&words)).unwrap();
    regcmd
}

#[test]
fn the_verifier_not_the_kernel_catches_a_stray_address() {
    use crate::kernels::single::{Dtype, SingleMatmul};
    use crate::verify::VerifyError;
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    for spec in ["emu", "emu:rocket"] {
        let d = Device::open_spec(spec).unwrap();
        let mut a = d.alloc(mm.a_bytes(), BoFlags::default()).unwrap();
        a.write(0, &vec![1; mm.a_bytes()]).unwrap();
        let b = d.alloc(mm.b_bytes(), BoFlags::default()).unwrap();
        let c = d.alloc(mm.c_bytes(), BoFlags::default()).unwrap();
        // C bound onto A: the program writes into a buffer the job only reads.
        let regcmd = stray_program(&d, &a, &b, a.dma_addr());
        let program = mm.program().unwrap();
        let job = || {
            Job::from_program(&regcmd, &program)
                .reads(&a)
                .reads(&b)
                .writes(&c)
        };
        match d.submit(&job()) {
            Err(Error::Verify {
                error: VerifyError::Access { task: 0, range, .. },
            }) => assert_eq!(range.register, dpu::DstBaseAddr::NAME, "{spec}"),
            other => panic!("{spec}: {other:?}"),
        }
        // Verifying on its own (as a matmul does once, when it binds its program)
        // catches it even in a job that then submits unverified.
        assert!(
            matches!(
                job().unverified().verify_on(&d),
                Err(Error::Verify {
                    error: VerifyError::Access { task: 0, .. }
                })
            ),
            "{spec}"
        );
        // The emulated kernel, like the drivers, runs it: A is overwritten.
        d.submit(&job().unverified()).unwrap();
        let mut a = a;
        assert_ne!(a.read_all().unwrap(), vec![1; mm.a_bytes()], "{spec}");

        // C at an address in none of the (few-KiB) buffers.
        let stray = 0x4000_0000;
        for bo in [&a, &b, &c, &regcmd] {
            let at = u64::from(bo.dma_addr());
            assert!(!(at..at + bo.size() as u64).contains(&stray), "{spec}");
        }
        let regcmd = stray_program(&d, &a, &b, stray as u32);
        let job = Job::from_program(&regcmd, &program)
            .reads(&a)
            .reads(&b)
            .writes(&c);
        assert!(
            matches!(
                d.submit(&job),
                Err(Error::Verify {
                    error: VerifyError::Outside { task: 0, .. }
                })
            ),
            "{spec}"
        );
    }
}
