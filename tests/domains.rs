//! Weights beyond 4 GiB through the vendor driver's IOMMU domains, on the emulated
//! kernel: banks totalling more than 6 GiB spill from domain 0 into domain 1, exact int8
//! matmuls run against banks of either domain, a job mixing domains is refused before
//! submission, and where there are no domains (rocket, a vendor kernel without
//! `CONFIG_NO_GKI`) allocation past 4 GiB stays an `ENOMEM` error.

use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, MatmulBatch, WeightBank};
use rknpu_driver::device::{Bo, BoFlags, Device, Job};
use rknpu_driver::emu::{EmuKernel, Flavour};
use rknpu_driver::kernels::matmul::WeightLayout;
use rknpu_driver::kernels::single::{Dtype, SingleMatmul};
use rknpu_driver::{Error, OsError};
use std::sync::Arc;
use std::time::Duration;

const MIB: usize = 1 << 20;

/// A device of a kernel of its own (its addresses and domains depend on this test only).
fn device(flavour: Flavour, domains: bool) -> Device {
    let k = EmuKernel::new(flavour);
    k.set_iommu_domains(domains);
    Device::open_emulator(Arc::new(k)).unwrap()
}

/// Small deterministic int8 values in -8..=7.
fn values(n: usize, seed: u64) -> Vec<i8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % 16) as i8 - 8
        })
        .collect()
}

/// An M×K by K×N int8 product of `a` and the N×K weights `w`, on the CPU.
fn cpu_product(a: &[i8], w: &[i8], m: usize, k: usize, n: usize) -> Vec<i32> {
    let mut c = vec![0i32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|kk| i32::from(a[i * k + kk]) * i32::from(w[j * k + kk]))
                .sum();
        }
    }
    c
}

/// The peak resident set of this process, in bytes (Linux `VmHWM`).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A small int8 bank and a matmul against it, with its weights.
fn small(dev: &Device, seed: u64) -> (Matmul, Vec<i8>) {
    let (k, n) = (64usize, 32usize);
    let w = values(n * k, seed);
    let bank = Arc::new(WeightBank::new(dev, (n as u32, k as u32), Weights::I8(&w)).unwrap());
    (Matmul::new(&bank, 4).unwrap(), w)
}

fn check_exact(mm: &mut Matmul, w: &[i8], seed: u64) {
    let (m, k, n) = (4usize, 64usize, 32usize);
    let a = values(m * k, seed);
    let got = mm.run::<i8, i32>(&a).unwrap();
    assert_eq!(
        got,
        cpu_product(&a, w, m, k, n),
        "bank in domain {}",
        mm.bank().buffer().iommu_domain()
    );
}

#[test]
fn banks_beyond_six_gib_spill_into_the_next_domain_and_run_exactly() {
    let dev = device(Flavour::Vendor098, true);
    let emu = dev.emulator().unwrap();
    // A small bank and its matmul first: domain 0.
    let (mut m0, w0) = small(&dev, 1);
    assert_eq!(m0.bank().buffer().iommu_domain(), 0);

    // 26 banks of 256 MiB of zeros: 6.5 GiB, more than a 4 GiB window holds.
    let layout = WeightLayout::new(8192, 32768, Dtype::Int8).unwrap();
    let zeros = vec![0u8; layout.bytes as usize];
    let mut banks = Vec::new();
    for i in 0..26 {
        let bank = WeightBank::from_packed(&dev, &layout, &zeros)
            .unwrap_or_else(|e| panic!("bank {i}: {e}"));
        banks.push(bank);
    }
    let total: u64 = banks.iter().map(|b| b.buffer().size() as u64).sum();
    assert!(total > 6 << 30, "{total} bytes of banks");
    let in_domain = |d: u8| {
        banks
            .iter()
            .filter(|b| b.buffer().iommu_domain() == d)
            .count()
    };
    let (first, second) = (in_domain(0), in_domain(1));
    assert_eq!(first + second, 26, "every bank in domain 0 or 1");
    assert_eq!(
        first, 15,
        "domain 0 holds 15 (the small matmul took the rest)"
    );
    // Domain 1's first bank lies at the top of its own window, where domain 0 holds
    // buffers too: separate windows.
    let top1 = banks
        .iter()
        .filter(|b| b.buffer().iommu_domain() == 1)
        .map(|b| u64::from(b.buffer().dma_addr()))
        .max();
    assert_eq!(top1, Some((1u64 << 32) - 256 * MIB as u64));

    // Fill what domain 0 has left, so that the next small bank lands in domain 1.
    let in_domain1: u64 = banks
        .iter()
        .filter(|b| b.buffer().iommu_domain() == 1)
        .map(|b| b.buffer().size() as u64)
        .sum();
    let rest = (1u64 << 32) - (emu.iova_in_use() - in_domain1);
    let filler = (rest > 0).then(|| dev.alloc_in(0, rest as usize, BoFlags::default()).unwrap());
    let (mut m1, w1) = small(&dev, 2);
    assert_eq!(m1.bank().buffer().iommu_domain(), 1);
    // Each submission allocates its task array in the job's domain: give domain 0 room.
    drop(filler);

    let switches = emu.iommu_domain_switches();
    check_exact(&mut m0, &w0, 11);
    check_exact(&mut m1, &w1, 12);
    check_exact(&mut m0, &w0, 13);
    assert!(
        emu.iommu_domain_switches() >= switches + 2,
        "each job switches to its domain"
    );

    let peak = peak_rss().unwrap_or(0);
    eprintln!(
        "{} banks, {total} bytes ({first} in domain 0, {second} in domain 1); peak RSS {} MiB",
        banks.len(),
        peak >> 20
    );
    assert!(
        peak < 2 << 30,
        "peak RSS {peak} bytes: the zero banks were materialised"
    );

    // A batch of matmuls of two domains is one job of two domains: refused.
    let mut batch = MatmulBatch::new(vec![m0, m1]).unwrap();
    let x = vec![1.0f32; 4 * 64];
    let (mut y0, mut y1) = (vec![0f32; 4 * 32], vec![0f32; 4 * 32]);
    let e = batch
        .mul_mat(&[&x, &x], &mut [&mut y0, &mut y1])
        .unwrap_err();
    assert!(
        matches!(e, Error::MixedDomains { ref domains, .. } if domains.contains(&0) && domains.contains(&1)),
        "{e}"
    );
}

/// A single int8 matmul's program and buffers, B (the weights) in `b_domain`.
fn single_job_buffers(dev: &Device, b_domain: u8) -> (SingleMatmul, Bo, Bo, Bo, Bo) {
    let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
    let program = mm.program().unwrap();
    let f = BoFlags::default();
    let mut regcmd = dev.alloc_in(0, program.byte_len(), f).unwrap();
    let mut a = dev.alloc_in(0, mm.a_bytes(), f).unwrap();
    let mut b = dev.alloc_in(b_domain, mm.b_bytes(), f).unwrap();
    let c = dev.alloc_in(0, mm.c_bytes(), f).unwrap();
    let addrs = [regcmd.dma_addr(), a.dma_addr(), b.dma_addr(), c.dma_addr()];
    let words = program
        .bind(|id: rknpu_driver::regcmd::BufferId| Some(u64::from(addrs[id.0 as usize])))
        .unwrap();
    regcmd
        .write(0, &rknpu_driver::regcmd::words_to_le_bytes(&words))
        .unwrap();
    a.write(0, &mm.pack_a_int(&[1; 4 * 64]).unwrap()).unwrap();
    b.write(0, &mm.pack_b_int(&[2; 64 * 32]).unwrap()).unwrap();
    (mm, regcmd, a, b, c)
}

#[test]
fn a_job_mixing_two_domains_is_refused_before_submission() {
    let dev = device(Flavour::Vendor098, true);
    let emu = dev.emulator().unwrap();
    let (mm, regcmd, a, b, c) = single_job_buffers(&dev, 1);
    assert_eq!((regcmd.iommu_domain(), b.iommu_domain()), (0, 1));
    let program = mm.program().unwrap();
    let switches = emu.iommu_domain_switches();
    let job = Job::from_program(&regcmd, &program)
        .reads(&a)
        .reads(&b)
        .writes(&c);
    let e = dev.submit(&job).unwrap_err();
    assert_eq!(
        e,
        Error::MixedDomains {
            what: "a job of 1 tasks".into(),
            domains: vec![0, 1]
        }
    );
    assert!(e.to_string().contains("[0, 1]"), "{e}");
    // Refused before the kernel: no switch, no job.
    assert_eq!(emu.iommu_domain_switches(), switches);
    // A domain asked for that is not its buffers' is refused the same way.
    let (_, regcmd0, a0, b0, c0) = single_job_buffers(&dev, 0);
    let job = Job::from_program(&regcmd0, &program)
        .reads(&a0)
        .reads(&b0)
        .writes(&c0)
        .iommu_domain(2);
    let e = dev.submit(&job).unwrap_err();
    assert!(
        matches!(e, Error::MixedDomains { ref domains, .. } if domains == &[0, 2]),
        "{e}"
    );
    // The same job in one domain runs.
    let job = Job::from_program(&regcmd0, &program)
        .reads(&a0)
        .reads(&b0)
        .writes(&c0);
    dev.submit(&job).unwrap();
    let out = mm
        .unpack_c_int(&c0.read_with(|b| b[..mm.c_bytes()].to_vec()).unwrap())
        .unwrap();
    assert!(out.iter().all(|&v| v == 128));
}

#[test]
fn an_address_of_another_domain_is_not_mapped_in_the_jobs_domain() {
    // What the library refuses, the kernel cannot tell: a program that names a buffer of
    // domain 0 while its job runs in domain 1 faults (the address is not mapped there).
    let dev = device(Flavour::Vendor098, true);
    let emu = dev.emulator().unwrap();
    // Keep domain 0's buffers below the top page, where domain 1's program lies.
    let _top = dev.alloc_in(0, MIB, BoFlags::default()).unwrap();
    let (mm, regcmd0, _a, _b, _c) = single_job_buffers(&dev, 0);
    let program = mm.program().unwrap();
    let mut regcmd1 = dev
        .alloc_in(1, program.byte_len(), BoFlags::default())
        .unwrap();
    regcmd1
        .write(0, &regcmd0.read_with(|b| b.to_vec()).unwrap())
        .unwrap();
    let job = Job::from_program(&regcmd1, &program)
        .unverified()
        .timeout(Duration::from_millis(50));
    let e = dev.submit(&job).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert_eq!(emu.live_iommu_domain(), 1);
    assert!(
        emu.log()
            .iter()
            .any(|l| l.contains("switch iommu domain from 0 to 1"))
    );
}

/// Allocates buffers of 256 MiB until the kernel refuses one: how many it took, and
/// the refusal.
fn fill(dev: &Device) -> (usize, Error) {
    let mut held = Vec::new();
    loop {
        match dev.alloc(256 * MIB, BoFlags::default()) {
            Ok(bo) => held.push(bo),
            Err(e) => return (held.len(), e),
        }
        assert!(held.len() <= 16, "more than 4 GiB in one window");
    }
}

#[test]
fn without_domains_allocation_past_four_gib_is_enomem() {
    let enomem = |e: &Error| matches!(e, Error::Ioctl { errno, .. } if *errno == OsError::ENOMEM);
    // rocket: one 4 GiB address space per open file, from 0.
    let dev = device(Flavour::Rocket, true);
    let (n, e) = fill(&dev);
    assert_eq!(n, 16);
    assert!(enomem(&e), "{e}");
    let e = dev.alloc_in(1, 4096, BoFlags::default()).unwrap_err();
    assert!(matches!(e, Error::NotOffered { .. }), "{e}");
    // A vendor kernel built without CONFIG_NO_GKI: the domain calls are stubs.
    let dev = device(Flavour::Vendor098, false);
    let (n, e) = fill(&dev);
    assert_eq!(n, 16);
    assert!(enomem(&e), "{e}");
    assert_eq!(dev.emulator().unwrap().iommu_domain_switches(), 0);
    // With domains, the 17th lands in domain 1.
    let dev = device(Flavour::Vendor098, true);
    let held: Vec<Bo> = (0..17)
        .map(|_| dev.alloc(256 * MIB, BoFlags::default()).unwrap())
        .collect();
    assert_eq!(held.iter().filter(|b| b.iommu_domain() == 1).count(), 1);
}

#[test]
fn a_switch_waits_for_the_live_domains_jobs_and_destroy_switches_to_the_objects_domain() {
    let emu = Arc::new(EmuKernel::new_async(Flavour::Vendor098));
    let dev = Device::open_emulator(emu.clone()).unwrap();
    let (mm, regcmd, a, b, c) = single_job_buffers(&dev, 0);
    let program = mm.program().unwrap();
    // A job of domain 0 queued and held: it holds a reference on domain 0.
    let hold = emu.hold_worker();
    let job = Job::from_program(&regcmd, &program)
        .reads(&a)
        .reads(&b)
        .writes(&c);
    let pending = dev.submit_nonblocking(job).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(hold);
    });
    let switches = emu.iommu_domain_switches();
    let t = std::time::Instant::now();
    let other = dev.alloc_in(1, 4096, BoFlags::default()).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(50),
        "the switch waited for the job"
    );
    assert!(pending.is_done().unwrap(), "the job ran before the switch");
    assert_eq!(emu.live_iommu_domain(), 1);
    // Waiting frees the job's task array, an object of domain 0: MEM_DESTROY switches
    // back to its domain first.
    pending
        .wait(std::time::Instant::now() + Duration::from_secs(5))
        .unwrap();
    release.join().unwrap();
    assert_eq!(emu.live_iommu_domain(), 0);
    let back = dev.alloc_in(0, 4096, BoFlags::default()).unwrap();
    drop(other);
    assert_eq!(emu.live_iommu_domain(), 1);
    assert_eq!(emu.iommu_domain_switches(), switches + 3);
    drop(back);
}
