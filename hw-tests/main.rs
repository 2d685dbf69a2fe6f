//! Board tests: the device layer against a real NPU, and in CI against the emulated
//! kernel. Run on a board with
//!
//! ```text
//! cargo test --features hw -- --test-threads=1
//! ```
//!
//! (`RKNPU_DEVICE` selects a node, or `emu`, `emu:rocket`, `emu:vendor-0.9.6`; without it
//! the tests probe for an `rknpu` or `rocket` node). With no device every test fails and
//! says what was looked for: none passes vacuously. docs/hw-testing.md says what each
//! test proves.

use rknpu_driver::Error;
use rknpu_driver::device::{Bo, BoFlags, CoreMask, Device, Interface, Job};
use rknpu_driver::kernels::single::{self, Dtype, SingleMatmul};
use rknpu_driver::regcmd::{BufferId, DmaAddr, Program, ProgramBuilder, words_to_le_bytes};
use rknpu_driver::sim::{At, Faults};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

mod behaviours;
mod dequant;
mod matmul;
mod trace;

/// The device under test, or a failure that says how to select one.
fn dev() -> Device {
    match Device::open() {
        Ok(d) => d,
        Err(e) => panic!(
            "no device for the hw tests: {e}\n\
             On a board, run as a user who may open the node (see docs/hw-testing.md); \
             elsewhere set RKNPU_DEVICE=emu (or emu:rocket, emu:vendor-0.9.6)."
        ),
    }
}

/// Deterministic int8 values.
fn values(n: u32, seed: u32) -> Vec<i32> {
    (0..n)
        .map(|i| ((i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) % 255) as i32 - 127)
        .collect()
}

fn cpu_matmul(a: &[i32], b: &[i32], m: usize, k: usize, n: usize) -> Vec<i64> {
    let mut c = vec![0i64; m * n];
    for i in 0..m {
        for kk in 0..k {
            let x = a[i * k + kk] as i64;
            for j in 0..n {
                c[i * n + j] += x * b[kk * n + j] as i64;
            }
        }
    }
    c
}

/// A buffer holding `bytes`.
fn upload(dev: &Device, bytes: &[u8]) -> Bo {
    let mut bo = dev.alloc(bytes.len().max(1), BoFlags::default()).unwrap();
    bo.write(0, bytes).unwrap();
    bo
}

/// Binds `program` with buffer ids 0.. to `bos` and uploads it.
fn upload_program(dev: &Device, program: &Program, bos: &[&Bo], regcmd_size: usize) -> Bo {
    let mut regcmd = dev.alloc(regcmd_size, BoFlags::default()).unwrap();
    let base = regcmd.dma_addr();
    let words = program
        .bind(|id: BufferId| {
            if id.0 == 0 {
                Some(base as u64)
            } else {
                bos.get(id.0 as usize - 1).map(|b| b.dma_addr() as u64)
            }
        })
        .unwrap();
    regcmd.write(0, &words_to_le_bytes(&words)).unwrap();
    regcmd
}

/// An int8 matmul of the given shape, run as `tiles` chained M tiles; returns the job's
/// result and whether the product matched the CPU.
fn run_matmul(
    dev: &Device,
    m: u32,
    k: u32,
    n: u32,
    tiles: u32,
    mask: CoreMask,
    split: &[usize],
) -> Result<bool, Error> {
    let full = SingleMatmul::new(m, k, n, Dtype::Int8);
    let tile = SingleMatmul::new(m / tiles, k, n, Dtype::Int8);
    let (a, b) = (values(m * k, 1), values(k * n, 2));
    let a_bo = upload(dev, &full.pack_a_int(&a).unwrap());
    let b_bo = upload(dev, &full.pack_b_int(&b).unwrap());
    let c_bo = dev.alloc(full.c_bytes(), BoFlags::default()).unwrap();
    // One chain per core: the PC of each core walks only its own share of the tasks
    // (a tail may never lead into another core's tasks; docs/device.md).
    let ends: Vec<usize> = split
        .iter()
        .scan(0, |sum, &n| {
            *sum += n;
            Some(*sum)
        })
        .collect();
    let mut p = ProgramBuilder::new(single::REGCMD);
    for t in 0..tiles {
        let rows = m / tiles;
        let body = tile
            .body_at(
                DmaAddr::reloc(single::A, t * rows * k),
                DmaAddr::reloc(single::B, 0),
                DmaAddr::reloc(single::C, t * rows * full.padded_n() * 4),
                DmaAddr::reloc(single::E, 0),
            )
            .unwrap();
        p.push_task(body, tile.enable());
        if ends.contains(&(t as usize + 1)) {
            p.end_chain();
        }
    }
    let program = p.build().unwrap();
    let regcmd = upload_program(
        dev,
        &program,
        &[&a_bo, &b_bo, &c_bo, &c_bo],
        program.byte_len(),
    );
    let job = Job::from_program(&regcmd, &program)
        .on_cores(mask, split)
        .reads(&a_bo)
        .reads(&b_bo)
        .writes(&c_bo)
        .timeout(Duration::from_millis(2000));
    let result = dev.submit(&job)?;
    assert_eq!(result.task_counter, tiles, "{result:?}");
    drop(job);
    let mut c_bo = c_bo;
    let got = full
        .unpack_c_int(&c_bo.read_all()?[..full.c_bytes()])
        .unwrap();
    Ok(got == cpu_matmul(&a, &b, m as usize, k as usize, n as usize))
}

#[test]
fn device_info() {
    let d = dev();
    let info = d.info();
    eprintln!("{info:?}");
    match info.interface {
        Interface::Vendor => {
            assert_eq!(info.driver, "rknpu");
            assert!(info.version >= (0, 9, 6), "{:?}", info.version);
        }
        Interface::Rocket => assert_eq!(info.driver, "rocket"),
        other => panic!("no expectation for {other:?}"),
    }
    assert_eq!(info.cores, 3);
    assert!(!info.node.is_empty());
}

#[test]
fn buffers_allocate_map_sync_and_free_without_leaks() {
    let d = dev();
    let (bos, maps) = (d.live_buffers(), d.live_mappings());
    let objects = d.emulator().map(|e| e.live_objects());
    let node_maps = || {
        std::fs::read_to_string("/proc/self/maps")
            .map(|m| m.lines().filter(|l| l.contains(&d.info().node)).count())
            .unwrap_or(0)
    };
    let before = node_maps();
    for i in 0..1000u32 {
        let size = 4096 * (1 + i as usize % 5);
        let mut bo = d.alloc(size, BoFlags::default()).unwrap();
        assert!(bo.size() >= size);
        let bo_size = bo.size();
        assert!(bo.dma_addr() as u64 + bo.size() as u64 <= 1 << 32);
        {
            let mut m = bo.map().unwrap();
            assert_eq!(m.len(), bo_size, "the mapping covers the buffer");
            m[0] = i as u8;
            let last = m.len() - 1;
            m[last] = !(i as u8);
            m.finish().unwrap();
        }
        let back = bo.read_all().unwrap();
        assert_eq!((back[0], back[back.len() - 1]), (i as u8, !(i as u8)));
    }
    assert_eq!(d.live_buffers(), bos, "buffers leaked");
    assert_eq!(d.live_mappings(), maps, "mappings leaked");
    assert_eq!(node_maps(), before, "mmaps of the device node leaked");
    if let Some(before) = objects {
        assert_eq!(
            d.emulator().unwrap().live_objects(),
            before,
            "kernel objects leaked"
        );
    }
}

#[test]
fn single_task_int8_matmul_matches_the_cpu() {
    let d = dev();
    assert!(run_matmul(&d, 8, 64, 32, 1, CoreMask::Auto, &[1]).unwrap());
}

#[test]
fn chained_multi_task_program_matches_the_cpu() {
    let d = dev();
    assert!(run_matmul(&d, 24, 96, 64, 3, CoreMask::Auto, &[3]).unwrap());
}

#[test]
fn every_accepted_core_mask() {
    let d = dev();
    let masks: &[(CoreMask, &[usize])] = match d.info().interface {
        Interface::Vendor => &[
            (CoreMask::Auto, &[3]),
            (CoreMask::Core0, &[3]),
            (CoreMask::Core1, &[3]),
            (CoreMask::Core2, &[3]),
            (CoreMask::Cores01, &[2, 1]),
            (CoreMask::All, &[1, 1, 1]),
        ],
        Interface::Rocket => &[(CoreMask::Auto, &[3])],
        other => panic!("no core masks known for {other:?}"),
    };
    for (mask, split) in masks {
        assert!(
            run_matmul(&d, 12, 64, 32, 3, *mask, split).unwrap(),
            "{mask:?}"
        );
    }
    for bits in [5, 6] {
        assert_eq!(
            CoreMask::from_bits(bits).unwrap_err(),
            Error::CoreMask { mask: bits }
        );
    }
    if d.info().interface == Interface::Rocket {
        let err = run_matmul(&d, 4, 64, 32, 1, CoreMask::Core1, &[1]).unwrap_err();
        assert!(matches!(err, Error::NotOffered { .. }), "{err}");
    }
}

#[test]
fn nonblocking_submit_then_wait() {
    let d = dev();
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let (a, b) = (values(4 * 64, 3), values(64 * 32, 4));
    let a_bo = upload(&d, &mm.pack_a_int(&a).unwrap());
    let b_bo = upload(&d, &mm.pack_b_int(&b).unwrap());
    let mut c_bo = d.alloc(mm.c_bytes(), BoFlags::default()).unwrap();
    let program = mm.program().unwrap();
    let regcmd = upload_program(
        &d,
        &program,
        &[&a_bo, &b_bo, &c_bo, &c_bo],
        program.byte_len(),
    );
    {
        let job = Job::from_program(&regcmd, &program)
            .reads(&a_bo)
            .reads(&b_bo)
            .writes(&c_bo);
        let pending = d.submit_nonblocking(job).unwrap();
        let result = pending
            .wait(Instant::now() + Duration::from_secs(2))
            .unwrap();
        assert_eq!(result.task_counter, 1);
    }
    let got = mm
        .unpack_c_int(&c_bo.read_all().unwrap()[..mm.c_bytes()])
        .unwrap();
    assert_eq!(got, cpu_matmul(&a, &b, 4, 64, 32));
}

#[test]
fn a_job_that_never_completes_times_out_and_the_device_recovers() {
    let d = dev();
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let a_bo = upload(&d, &mm.pack_a_int(&values(4 * 64, 5)).unwrap());
    let b_bo = upload(&d, &mm.pack_b_int(&values(64 * 32, 6)).unwrap());
    let c_bo = d.alloc(mm.c_bytes(), BoFlags::default()).unwrap();
    let program = mm.program().unwrap();
    let regcmd = upload_program(
        &d,
        &program,
        &[&a_bo, &b_bo, &c_bo, &c_bo],
        program.byte_len(),
    );
    let mut task = Job::from_program(&regcmd, &program)
        .reads(&a_bo)
        .reads(&b_bo)
        .writes(&c_bo);
    let tasks = program.tasks().to_vec();
    match (d.emulator(), d.info().interface) {
        (Some(emu), _) => emu.inject(Faults {
            hang: Some(At { core: 0, task: 0 }),
            ..Faults::default()
        }),
        // A board: the vendor kernel never accepts a DPU task's status against the PPU
        // pair; rocket never starts a task whose fetch ends before its op-enable entry.
        (None, Interface::Vendor) => {
            let mut t = tasks.clone();
            t[0].int_mask = 0xC00;
            task = Job::new(&regcmd, t).reads(&a_bo).reads(&b_bo).writes(&c_bo);
        }
        (None, Interface::Rocket) => {
            let mut t = tasks.clone();
            t[0].regcfg_amount = 8;
            // A list cut short on purpose: the verifier would refuse it unread.
            task = Job::new(&regcmd, t).writes(&c_bo).unverified();
        }
        (None, other) => panic!("no never-completing job known for {other:?}"),
    }
    let started = Instant::now();
    let err = d
        .submit(&task.timeout(Duration::from_millis(100)))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Timeout {
                task_counter: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "a timeout before the deadline"
    );
    if let Some(emu) = d.emulator() {
        emu.inject(Faults::default());
        assert!(
            emu.log().iter().any(|l| l.contains("injected")),
            "{:?}",
            emu.log()
        );
    }
    // After the reset the device runs jobs again.
    let job = Job::new(&regcmd, tasks)
        .reads(&a_bo)
        .reads(&b_bo)
        .writes(&c_bo)
        .timeout(Duration::from_secs(2));
    assert_eq!(d.submit(&job).unwrap().task_counter, 1);
}

#[test]
fn two_threads_submit_at_once() {
    let d = dev();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| s.spawn(|| run_matmul(&d, 8, 64, 64, 2, CoreMask::Auto, &[2])))
            .collect();
        for h in handles {
            assert!(h.join().unwrap().unwrap());
        }
    });
}

#[test]
fn dma_buf_export_and_import_where_the_driver_allows_them() {
    let d = dev();
    let mut bo = d
        .alloc(4096, BoFlags::default().with_cacheable(false))
        .unwrap();
    bo.write(0, b"shared").unwrap();
    // Both drivers export through DRM PRIME.
    let fd = bo.export_dmabuf().unwrap();
    // Another open of the same node imports it.
    let other = d.open_again().unwrap();
    match d.info().interface {
        Interface::Vendor => {
            let mut imported = other.import_dmabuf(fd.as_fd()).unwrap();
            assert_eq!(imported.dma_addr(), bo.dma_addr(), "one IOMMU domain");
            assert_eq!(&imported.read_all().unwrap()[..6], b"shared");
        }
        Interface::Rocket => assert!(matches!(
            other.import_dmabuf(fd.as_fd()),
            Err(Error::NotOffered { .. })
        )),
        other => panic!("no expectation for {other:?}"),
    }
    assert_eq!(other.live_buffers(), 0);
}
