//! The kernel behaviours the device layer handles (docs/device.md, "Kernel behaviours"):
//! a hang past the rocket scheduler's timeout, a pending job dropped before it was
//! waited for, a job naming a buffer twice, a vendor interrupt mask that cannot
//! complete, and buffer sizes no kernel can map. Each runs on a board as on the emulated
//! kernels; what only an emulated kernel can show safely (a non-blocking vendor job
//! that never completes holds its core for good) runs on a private emulated kernel.

use super::{cpu_matmul, dev, upload, upload_program, values};
use rknpu_driver::Error;
use rknpu_driver::device::{Bo, BoFlags, Device, Interface, Job};
use rknpu_driver::emu::EmuKernel;
use rknpu_driver::kernels::single::{Dtype, SingleMatmul};
use rknpu_driver::regcmd::Program;
use rknpu_driver::sim::{At, Faults};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A 4×64×32 int8 matmul: its buffers, program and expected product.
struct Mm {
    regcmd: Bo,
    a: Bo,
    b: Bo,
    c: Bo,
    program: Program,
    mm: SingleMatmul,
    want: Vec<i64>,
}

fn matmul(d: &Device, seed: u32) -> Mm {
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let (a, b) = (values(4 * 64, seed), values(64 * 32, seed + 1));
    let a_bo = upload(d, &mm.pack_a_int(&a).unwrap());
    let b_bo = upload(d, &mm.pack_b_int(&b).unwrap());
    let c_bo = d.alloc(mm.c_bytes(), BoFlags::default()).unwrap();
    let program = mm.program().unwrap();
    let regcmd = upload_program(
        d,
        &program,
        &[&a_bo, &b_bo, &c_bo, &c_bo],
        program.byte_len(),
    );
    Mm {
        regcmd,
        a: a_bo,
        b: b_bo,
        c: c_bo,
        program,
        mm,
        want: cpu_matmul(&a, &b, 4, 64, 32),
    }
}

impl Mm {
    fn job(&self) -> Job<'_> {
        Job::from_program(&self.regcmd, &self.program)
            .reads(&self.a)
            .reads(&self.b)
            .writes(&self.c)
            .timeout(Duration::from_secs(2))
    }

    fn product(&mut self) -> Vec<i64> {
        let bytes = self.c.read_all().unwrap();
        self.mm.unpack_c_int(&bytes[..self.mm.c_bytes()]).unwrap()
    }
}

/// A job of `m` that never completes: an injected hang on an emulated kernel; on a
/// board a DPU task waiting for the PPU pair (vendor) or a fetch cut short before the
/// op-enable entry (rocket), as in `a_job_that_never_completes_...`.
fn never_completes<'m>(d: &Device, m: &'m Mm) -> Job<'m> {
    let mut tasks = m.program.tasks().to_vec();
    match (d.emulator(), d.info().interface) {
        (Some(emu), _) => {
            emu.inject(Faults {
                hang: Some(At { core: 0, task: 0 }),
                ..Faults::default()
            });
            m.job()
        }
        (None, Interface::Vendor) => {
            tasks[0].int_mask = 0xC00;
            Job::new(&m.regcmd, tasks)
                .reads(&m.a)
                .reads(&m.b)
                .writes(&m.c)
        }
        (None, Interface::Rocket) => {
            tasks[0].regcfg_amount = 8;
            Job::new(&m.regcmd, tasks).writes(&m.c).unverified()
        }
        (None, other) => panic!("no never-completing job known for {other:?}"),
    }
}

#[test]
fn a_hang_is_a_timeout_even_past_the_rocket_scheduler_timeout() {
    let d = dev();
    let mut m = matmul(&d, 11);
    // 900 ms: past rocket's 500 ms job timeout, after which PREP_BO succeeds although
    // the job never completed; the completion sentinel tells.
    let job = never_completes(&d, &m).timeout(Duration::from_millis(900));
    let r = d.submit(&job);
    drop(job);
    if let Some(emu) = d.emulator() {
        emu.inject(Faults::default());
    }
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(d.leaked_buffers().is_empty(), "a blocking timeout settles");
    d.submit(&m.job()).unwrap();
    assert_eq!(m.product(), m.want, "the device runs jobs again");
}

#[test]
fn a_dropped_pending_job_is_waited_for_or_its_buffers_kept() {
    let d = dev();
    let mut m = matmul(&d, 12);
    // Dropped at once: the drop waits for it, so the output is complete afterwards.
    drop(d.submit_nonblocking(m.job()).unwrap());
    assert_eq!(m.product(), m.want);
    assert!(d.leaked_buffers().is_empty());
    // A job that never completes, on a private emulated kernel: on a board a vendor
    // non-blocking job that hangs would hold its core until the driver is reloaded.
    let Some(shared) = d.emulator() else {
        return;
    };
    let own = Device::open_emulator(Arc::new(EmuKernel::new(shared.flavour()))).unwrap();
    let m = matmul(&own, 13);
    let job = never_completes(&own, &m).timeout(Duration::from_millis(100));
    let t0 = Instant::now();
    drop(own.submit_nonblocking(job).unwrap());
    assert!(t0.elapsed() >= Duration::from_millis(100), "a bounded wait");
    let (c, held) = (m.c.dma_addr(), m.c.size());
    drop(m);
    let leaked = own.leaked_buffers();
    match own.info().interface {
        // The fence is never signalled: the buffers are leaked, addresses kept.
        Interface::Vendor => {
            assert_eq!(leaked.len(), 5, "{leaked:?}");
            assert!(leaked.iter().any(|l| l.dma_addr == c && l.size == held));
            assert!(leaked.iter().all(|l| !l.reason.is_empty()));
        }
        // The scheduler stops it after 500 ms: nothing to keep.
        Interface::Rocket => assert!(leaked.is_empty(), "{leaked:?}"),
        other => panic!("no expectation for {other:?}"),
    }
}

#[test]
fn a_job_naming_a_buffer_twice_runs() {
    let d = dev();
    let mut m = matmul(&d, 14);
    // The output also read, and an input named twice: rocket would drop a job whose
    // lists hold a BO twice, silently.
    let job = m.job().reads(&m.c).reads(&m.a);
    let r = d.submit(&job).unwrap();
    drop(job);
    assert_eq!(r.task_counter, 1);
    assert_eq!(m.product(), m.want);
}

/// K13: on the vendor driver a job whose last task names one bit of a pair, or two
/// pairs, would record an interrupt and never complete (holding the core); it is
/// refused before the kernel sees it. Rocket ignores the descriptors' masks.
#[test]
fn a_vendor_int_mask_that_cannot_complete_is_refused() {
    let d = dev();
    let mut m = matmul(&d, 21);
    if d.info().interface == Interface::Vendor {
        for mask in [0x100, 0xF00] {
            let mut tasks = m.program.tasks().to_vec();
            tasks[0].int_mask = mask;
            let job = Job::new(&m.regcmd, tasks)
                .reads(&m.a)
                .reads(&m.b)
                .writes(&m.c);
            let r = d.submit(&job);
            assert!(
                matches!(r, Err(Error::InvalidArgument { .. })),
                "{mask:#x}: {r:?}"
            );
        }
    }
    d.submit(&m.job()).unwrap();
    assert_eq!(m.product(), m.want);
}

/// K18: a size no kernel can map is a typed error before any request, on every
/// interface (it used to be a 0-byte buffer, or an overflow panic, on the vendor one).
#[test]
fn sizes_no_kernel_can_map_are_refused() {
    let d = dev();
    for size in [usize::MAX, usize::MAX - 4094, (1 << 32) + 1] {
        let r = d.alloc(size, BoFlags::default());
        assert!(
            matches!(r, Err(Error::InvalidArgument { .. })),
            "{size}: {:?}",
            r.map(|b| b.size())
        );
    }
}
