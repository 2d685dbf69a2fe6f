//! The emulated kernel's asynchronous mode (docs/device.md, "Asynchronous submission"):
//! jobs run on its worker thread while the submitter goes on, `Pending::is_done` sees
//! them unfinished and then finished, results equal a synchronous run's, the queue keeps
//! submission order, timeouts and dropped jobs follow the quarantine rules, and a kernel
//! dropped with a job queued ends its worker. A test that needs a job certainly not
//! finished holds the worker (`EmuKernel::hold_worker`) rather than relying on timing.

use super::behaviour_tests::matmul_of as matmul;
use super::*;
use crate::emu::{EmuKernel, Flavour, node_path};
use crate::sys::uapi::*;
use crate::sys::{Fd, Ioctl, Kernel, VendorOp};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const FLAVOURS: [Flavour; 2] = [Flavour::Vendor098, Flavour::Rocket];

fn private(flavour: Flavour) -> Device {
    Device::open_emulator(Arc::new(EmuKernel::new_async(flavour))).unwrap()
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// The product on the CPU: row i of A (all `ones`) times column j of B (all 2).
fn cpu_product(ones: i32) -> Vec<i64> {
    let a = vec![i64::from(ones); 4 * 64];
    let b = vec![2i64; 64 * 32];
    let mut c = vec![0i64; 4 * 32];
    for i in 0..4 {
        for j in 0..32 {
            c[i * 32 + j] = (0..64).map(|k| a[i * 64 + k] * b[k * 32 + j]).sum();
        }
    }
    c
}

#[test]
fn async_specs_open_kernels_in_asynchronous_mode() {
    for (spec, interface) in [
        ("emu:async", Interface::Vendor),
        ("emu:rocket:async", Interface::Rocket),
        ("emu:vendor-0.9.6:async", Interface::Vendor),
    ] {
        let d = Device::open_spec(spec).unwrap();
        assert_eq!(d.info().interface, interface, "{spec}");
        assert!(d.emulator().unwrap().is_async(), "{spec}");
    }
    for spec in ["emu", "emu:rocket"] {
        let d = Device::open_spec(spec).unwrap();
        assert!(
            !d.emulator().unwrap().is_async(),
            "{spec} stays synchronous"
        );
    }
    assert!(matches!(
        Device::open_spec("emu:nonsense:async"),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn an_async_job_overlaps_the_cpu_and_gives_a_synchronous_runs_result() {
    for (spec, sync_spec) in [("emu:async", "emu"), ("emu:rocket:async", "emu:rocket")] {
        // The reference: the same job on the synchronous kernel, submitted both ways.
        let s = Device::open_spec(sync_spec).unwrap();
        let mut reference = matmul(&s, 16, 3);
        let expected = s
            .submit_nonblocking(reference.job())
            .unwrap()
            .wait(soon())
            .unwrap();
        let product = reference.product();
        s.submit(&reference.job()).unwrap();
        assert_eq!(reference.product(), product);

        let d = Device::open_spec(spec).unwrap();
        let mut mm = matmul(&d, 16, 3);
        let emu = d.emulator().unwrap();
        let hold = emu.hold_worker();
        let pending = d.submit_nonblocking(mm.job()).unwrap();
        // The submission returned without running the job: the worker is held.
        assert!(!pending.is_done().unwrap(), "{spec}");
        assert!(
            !pending.is_done().unwrap(),
            "is_done settles nothing: {spec}"
        );
        // CPU work while the job is outstanding: the expected product, and a buffer of
        // another job written and read back.
        let cpu = cpu_product(3);
        let mut other = d.alloc(4096, BoFlags::default()).unwrap();
        other.write(0, &[7; 64]).unwrap();
        assert!(!pending.is_done().unwrap(), "{spec}");
        drop(hold);
        // And while it runs: what the CPU writes to other buffers meanwhile is kept.
        other.write(64, &[9; 64]).unwrap();
        let r = pending.wait(soon()).unwrap();
        assert_eq!(r, expected, "{spec}");
        let got = mm.product();
        assert_eq!(got, product, "{spec}");
        assert_eq!(got, cpu, "{spec}");
        let other = other.read_all().unwrap();
        assert_eq!(
            (&other[..64], &other[64..128]),
            (&[7; 64][..], &[9; 64][..])
        );
        assert!(d.leaked_buffers().is_empty());
    }
}

#[test]
fn jobs_submitted_back_to_back_complete_in_order() {
    for flavour in FLAVOURS {
        let d = private(flavour);
        let emu = d.emulator().unwrap();
        let (mut first, mut second) = (matmul(&d, 8, 1), matmul(&d, 8, 2));
        let hold = emu.hold_worker();
        let p1 = d.submit_nonblocking(first.job()).unwrap();
        let p2 = d.submit_nonblocking(second.job()).unwrap();
        assert!(!p1.is_done().unwrap() && !p2.is_done().unwrap());
        drop(hold);
        // The later job finished: so did the earlier one.
        let r2 = p2.wait(soon()).unwrap();
        assert!(p1.is_done().unwrap(), "{flavour:?}: one queue, in order");
        let r1 = p1.wait(soon()).unwrap();
        assert_eq!((r1.task_counter, r2.task_counter), (8, 8));
        assert_eq!(first.product(), cpu_product(1));
        assert_eq!(second.product(), cpu_product(2));

        // A blocking submission goes behind the jobs queued before it.
        let mut third = matmul(&d, 1, 3);
        let hold = emu.hold_worker();
        let p1 = d.submit_nonblocking(first.job()).unwrap();
        assert!(!p1.is_done().unwrap());
        drop(hold);
        d.submit(&third.job()).unwrap();
        assert!(
            p1.is_done().unwrap(),
            "{flavour:?}: the queued job ran first"
        );
        p1.wait(soon()).unwrap();
        assert_eq!(third.product(), cpu_product(3));
        assert!(d.leaked_buffers().is_empty());
    }
}

#[test]
fn a_pending_job_dropped_in_async_mode_is_waited_for() {
    for flavour in FLAVOURS {
        let d = private(flavour);
        let mut mm = matmul(&d, 8, 2);
        let hold = d.emulator().unwrap().hold_worker();
        // Vendor: the settling bound is the job's timeout (at most 5 s); rocket: 1 s.
        let job = mm.job().timeout(Duration::from_secs(5));
        let pending = d.submit_nonblocking(job).unwrap();
        // Released by another thread while the dropped job is being settled.
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            drop(hold);
        });
        drop(pending);
        release.join().unwrap();
        // Settled: finished, nothing held, its output complete.
        assert_eq!(mm.product(), cpu_product(2), "{flavour:?}");
        assert!(d.leaked_buffers().is_empty());
        // Dropped at once on a free worker: the same.
        let mut mm = matmul(&d, 1, 1);
        drop(d.submit_nonblocking(mm.job()).unwrap());
        assert_eq!(mm.product(), cpu_product(1));
        assert!(d.leaked_buffers().is_empty());
    }
}

#[test]
fn a_deadline_passing_while_the_worker_is_held_is_a_timeout() {
    // Vendor: the job has not run by the end of the settling bound (its 60 ms timeout),
    // so its buffers are held, then leaked; the job still runs later.
    let emu = Arc::new(EmuKernel::new_async(Flavour::Vendor098));
    let d = Device::open_emulator(emu.clone()).unwrap();
    let mut mm = matmul(&d, 1, 1);
    let hold = emu.hold_worker();
    let pending = d
        .submit_nonblocking(mm.job().timeout(Duration::from_millis(60)))
        .unwrap();
    let r = pending.wait(Instant::now() + Duration::from_millis(10));
    assert_eq!(
        r,
        Err(Error::Timeout {
            task_counter: 0,
            int_status: 0
        })
    );
    assert!(matches!(mm.c.read_all(), Err(Error::StillRunning { .. })));
    assert!(matches!(
        d.submit(&mm.job()),
        Err(Error::StillRunning { .. })
    ));
    drop(hold);
    drop(mm);
    let leaked = d.leaked_buffers();
    assert_eq!(leaked.len(), 5, "the job's four buffers and its task array");
    assert!(leaked.iter().all(|l| l.reason.contains("wait failed")));

    // Rocket: the same once the settling wait (1 s, past the scheduler's timeout) ends
    // with the job not run: held, then leaked, with the sentinel buffer.
    let d = private(Flavour::Rocket);
    let mut mm = matmul(&d, 1, 1);
    let hold = d.emulator().unwrap().hold_worker();
    let pending = d.submit_nonblocking(mm.job()).unwrap();
    let r = pending.wait(Instant::now() + Duration::from_millis(10));
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(matches!(mm.c.read_all(), Err(Error::StillRunning { .. })));
    drop(hold);
    drop(mm);
    assert_eq!(d.leaked_buffers().len(), 5, "four buffers and the sentinel");
}

/// Runs `f` on a thread of its own: a failure, not a hung test run, if it takes longer
/// than `limit`.
fn within(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(limit).expect("finished in time");
}

#[test]
fn a_kernel_dropped_with_a_queued_job_drops_it_and_joins_its_worker() {
    let k = EmuKernel::new_async(Flavour::Vendor098);
    let probe = k.shutdown_probe();
    let fd = k.open(node_path(Flavour::Vendor098)).unwrap();
    let vendor = |op: VendorOp<'_>| k.ioctl(fd, &mut Ioctl::Vendor(VendorNode::Drm, op));
    let mut tasks = RknpuMemCreate {
        size: 4096,
        flags: mem::KERNEL_MAPPING,
        ..RknpuMemCreate::default()
    };
    vendor(VendorOp::MemCreate(&mut tasks)).unwrap();
    let mut sub = RknpuSubmit {
        flags: crate::sys::uapi::job::PC
            | crate::sys::uapi::job::NONBLOCK
            | crate::sys::uapi::job::FENCE_OUT,
        timeout: 100,
        task_number: 1,
        task_obj_addr: tasks.obj_addr,
        fence_fd: -1,
        ..RknpuSubmit::default()
    };
    sub.subcore_task[0].task_number = 1;
    let hold = k.hold_worker();
    vendor(VendorOp::Submit(&mut sub)).unwrap();
    let fence = Fd(sub.fence_fd);
    assert_eq!(k.poll(fence, Duration::ZERO), Ok(false), "queued");
    within(Duration::from_secs(10), move || drop(k));
    // Still queued when the kernel went: dropped, never run.
    let log = probe.log().expect("the hold keeps the state");
    assert!(
        log.iter().any(|l| l.contains("dropped without running")),
        "{log:?}"
    );
    drop(hold);
    assert!(probe.gone(), "the worker thread ended");

    // Through a device: a job submitted, the device and the kernel dropped.
    let emu = Arc::new(EmuKernel::new_async(Flavour::Rocket));
    let probe = emu.shutdown_probe();
    let d = Device::open_emulator(emu).unwrap();
    let mm = matmul(&d, 1, 1);
    d.submit_nonblocking(mm.job())
        .unwrap()
        .wait(soon())
        .unwrap();
    within(Duration::from_secs(10), move || {
        drop(mm);
        drop(d);
    });
    assert!(probe.gone(), "the worker thread ended");
}

#[test]
fn switching_the_mode_off_keeps_the_order_of_queued_jobs() {
    let emu = Arc::new(EmuKernel::new_async(Flavour::Vendor098));
    let d = Device::open_emulator(emu.clone()).unwrap();
    let (mut first, mut second) = (matmul(&d, 4, 1), matmul(&d, 1, 2));
    let hold = emu.hold_worker();
    let p1 = d.submit_nonblocking(first.job()).unwrap();
    emu.set_async(false);
    assert!(!emu.is_async());
    drop(hold);
    // Synchronous again, but behind the job still queued.
    d.submit(&second.job()).unwrap();
    assert!(p1.is_done().unwrap());
    p1.wait(soon()).unwrap();
    assert_eq!(first.product(), cpu_product(1));
    assert_eq!(second.product(), cpu_product(2));
    // And from then on inside the request.
    let p = d.submit_nonblocking(second.job()).unwrap();
    assert!(p.is_done().unwrap());
    p.wait(soon()).unwrap();
}

#[test]
fn is_done_on_a_synchronous_kernel_is_true_at_once() {
    for spec in ["emu", "emu:rocket"] {
        let d = Device::open_spec(spec).unwrap();
        let mut mm = matmul(&d, 1, 1);
        let p = d.submit_nonblocking(mm.job()).unwrap();
        assert!(p.is_done().unwrap(), "{spec}");
        p.wait(soon()).unwrap();
        assert_eq!(mm.product(), cpu_product(1));
    }
}

#[test]
fn the_kernel_counts_dma_bytes_of_synchronous_and_asynchronous_jobs() {
    for flavour in FLAVOURS {
        let mut seen = Vec::new();
        for emu in [EmuKernel::new(flavour), EmuKernel::new_async(flavour)] {
            let emu = Arc::new(emu);
            let d = Device::open_emulator(Arc::clone(&emu) as Arc<EmuKernel>).unwrap();
            assert_eq!(emu.dma_counters(), crate::sim::DmaCounters::default());
            let mm = matmul(&d, 3, 1);
            // Blocking: on the asynchronous kernel it runs on the worker as well.
            d.submit(&mm.job()).unwrap();
            let c = emu.dma_counters();
            // Per task (4×64×32 int8): A 4 lines × 4 atoms of 16 bytes, B 32 × 64 bytes,
            // C 4 lines × 8 atoms of int32. Rocket jobs end with the completion
            // sentinel's task, whose bytes come on top.
            let want = [3 * 4 * 4 * 16, 3 * 32 * 64, 3 * 4 * 8 * 16];
            let got = [c.cna_feature, c.cna_weight, c.dpu_write];
            if flavour == Flavour::Rocket {
                assert!(got.iter().zip(want).all(|(&g, w)| g > w), "{got:?}");
            } else {
                assert_eq!(got, want);
            }
            assert_eq!(c.dpu_rdma(), 0);
            assert!(c.pc_regcmd > 0);
            d.submit(&mm.job()).unwrap();
            assert_eq!(emu.dma_counters(), c + c, "{flavour:?}: cumulative");
            // Non-blocking (on rocket with a sentinel task of its own): added on
            // completion.
            d.submit_nonblocking(mm.job())
                .unwrap()
                .wait(soon())
                .unwrap();
            let after = emu.dma_counters();
            assert!(after.cna_feature >= 3 * c.cna_feature, "{flavour:?}");
            assert!(after.dpu_write >= 3 * c.dpu_write, "{flavour:?}");
            seen.push(c);
            emu.reset_dma_counters();
            assert_eq!(emu.dma_counters(), crate::sim::DmaCounters::default());
        }
        assert_eq!(
            seen[0], seen[1],
            "{flavour:?}: the same job counts the same"
        );
    }
}
