//! Sharing buffers as dma-bufs (docs/device.md, "Sharing buffers as dma-bufs"): export
//! gives a real descriptor, import into another device of the same kernel shares the
//! memory, foreign descriptors are refused as the kernel refuses them, and every path
//! frees what it made. Each test runs on an emulated kernel of its own, so its object
//! counts are its own.

use super::behaviour_tests::{matmul_reading, mm_4x64x32};
use super::*;
use crate::OsError;
use crate::emu::{EmuKernel, Flavour, node_path};
use crate::sys::uapi::*;
use crate::sys::{Errno, Ioctl, Kernel, VendorOp};
use std::os::fd::AsFd;

/// Two devices (two fds) of one private emulated kernel.
fn pair(flavour: Flavour) -> (Arc<EmuKernel>, Device, Device) {
    let k = Arc::new(EmuKernel::new(flavour));
    let d1 = Device::open_emulator(k.clone()).unwrap();
    let d2 = Device::open_emulator(k.clone()).unwrap();
    (k, d1, d2)
}

/// Exports `handle` of `fd` as a dma-buf the caller owns, and lends the kernel a
/// duplicate of it (the number an import request names), as `Device::import_dmabuf` does.
fn export_and_lend(
    k: &EmuKernel,
    fd: crate::sys::Fd,
    handle: u32,
) -> (std::os::fd::OwnedFd, crate::sys::Fd) {
    let mut p = DrmPrimeHandle {
        handle,
        flags: DRM_CLOEXEC | DRM_RDWR,
        fd: -1,
    };
    k.ioctl(fd, &mut Ioctl::PrimeHandleToFd(&mut p)).unwrap();
    let dmabuf = k.release(crate::sys::Fd(p.fd)).unwrap();
    let lent = k.adopt(dmabuf.as_fd()).unwrap();
    (dmabuf, lent)
}

#[test]
fn an_exported_buffer_imported_by_another_device_shares_its_memory() {
    let (k, d1, d2) = pair(Flavour::Vendor098);
    // Uncached: written both ways. (The importer cannot sync, so what it writes into a
    // cacheable buffer is lost when the exporter invalidates its caches.)
    let mut x = d1
        .alloc(8192, BoFlags::default().with_cacheable(false))
        .unwrap();
    x.write(0, b"from the exporter").unwrap();
    let fd = x.export_dmabuf().unwrap();
    let mut y = d2.import_dmabuf(fd.as_fd()).unwrap();
    // The buffer holds its own duplicate: the caller's copy may go at once.
    drop(fd);
    assert_eq!(y.size(), x.size());
    // One IOMMU domain for every fd of the vendor driver: the same device address.
    assert_eq!(y.dma_addr(), x.dma_addr());
    assert_ne!(y.handle(), 0);
    assert_eq!(&y.read_all().unwrap()[..17], b"from the exporter");
    y.write(100, b"back").unwrap();
    assert_eq!(&x.read_all().unwrap()[100..104], b"back");
    assert_eq!((d1.live_buffers(), d2.live_buffers()), (1, 1));
    assert_eq!(k.live_objects(), 1, "one object under two handles");
    // The importer keeps the memory after the exporter freed its buffer.
    drop(x);
    assert_eq!(k.live_objects(), 1);
    assert_eq!(&y.read_all().unwrap()[100..104], b"back");
    assert_eq!(
        k.open_files(),
        3,
        "two nodes and the imported buffer's dma-buf"
    );
    drop(y);
    assert_eq!(k.open_files(), 2);
    assert_eq!(k.live_objects(), 0);
    assert_eq!((d1.live_buffers(), d2.live_buffers()), (0, 0));
    assert_eq!((d1.live_mappings(), d2.live_mappings()), (0, 0));
}

#[test]
fn the_memory_lives_until_the_buffer_and_every_descriptor_are_gone_in_either_order() {
    let (k, d1, d2) = pair(Flavour::Vendor098);
    // The descriptor outlives both buffers.
    let mut x = d1.alloc(4096, BoFlags::default()).unwrap();
    x.write(0, &[7; 16]).unwrap();
    let fd = x.export_dmabuf().unwrap();
    let copy = fd.try_clone().unwrap();
    let y = d2.import_dmabuf(fd.as_fd()).unwrap();
    drop(x);
    drop(y);
    assert_eq!(k.live_objects(), 1, "the exported dma-buf holds the object");
    drop(fd);
    assert_eq!(
        k.live_objects(),
        1,
        "a duplicate of the descriptor still does"
    );
    // A dma-buf whose exporting buffer is gone still imports, with its bytes.
    let y = d2.import_dmabuf(copy.as_fd()).unwrap();
    assert_eq!(y.read_with(|b| b[..16].to_vec()).unwrap(), [7; 16]);
    drop(copy);
    assert_eq!(k.live_objects(), 1, "the imported buffer holds it");
    drop(y);
    assert_eq!(k.live_objects(), 0);
    // The descriptor closed first.
    let x = d1.alloc(4096, BoFlags::default()).unwrap();
    drop(x.export_dmabuf().unwrap());
    assert_eq!(k.live_objects(), 1);
    drop(x);
    assert_eq!(k.live_objects(), 0);
    assert_eq!((d1.live_buffers(), d2.live_buffers()), (0, 0));
}

#[test]
fn descriptors_that_are_no_dma_buf_of_this_kernel_are_refused_as_the_kernel_refuses_them() {
    let (k, d1, d2) = pair(Flavour::Vendor098);
    let null = std::fs::File::open("/dev/null").unwrap();
    let other = Device::open_emulator(Arc::new(EmuKernel::new(Flavour::Vendor098))).unwrap();
    let theirs = other.alloc(4096, BoFlags::default()).unwrap();
    let theirs = theirs.export_dmabuf().unwrap();
    // Two device nodes, nothing else: an export leaves no number behind.
    assert_eq!(k.open_files(), 2);
    for fd in [null.as_fd(), theirs.as_fd()] {
        match d1.import_dmabuf(fd) {
            Err(Error::Ioctl { op, errno }) => {
                assert_eq!(op, "DRM_IOCTL_PRIME_FD_TO_HANDLE");
                assert_eq!(errno, OsError::EINVAL);
            }
            r => panic!("{r:?}"),
        }
    }
    // The duplicates lent to the kernel were closed again.
    assert_eq!(k.open_files(), 2);
    // A dma-buf of the importing device's own fd: DRM would give the same buffer back.
    let mut x = d2.alloc(4096, BoFlags::default()).unwrap();
    let fd = x.export_dmabuf().unwrap();
    assert!(matches!(
        d2.import_dmabuf(fd.as_fd()),
        Err(Error::InvalidArgument { .. })
    ));
    // ... and the buffer is still whole.
    x.write(0, &[1, 2, 3]).unwrap();
    assert_eq!(&x.read_all().unwrap()[..3], &[1, 2, 3]);
    assert_eq!((d1.live_buffers(), d2.live_buffers()), (0, 1));
    assert_eq!(k.open_files(), 2);
    drop((x, fd));
    assert_eq!(k.live_objects(), 0);
}

#[test]
fn an_imported_handle_is_mapped_through_its_dma_buf_not_the_driver() {
    let k = EmuKernel::new(Flavour::Vendor098);
    let node = node_path(Flavour::Vendor098);
    let (f1, f2) = (k.open(node).unwrap(), k.open(node).unwrap());
    fn vendor(k: &EmuKernel, fd: crate::sys::Fd, op: VendorOp<'_>) -> Result<i32, Errno> {
        k.ioctl(fd, &mut Ioctl::Vendor(VendorNode::Drm, op))
    }
    let mut c = RknpuMemCreate {
        size: 4096,
        flags: mem::NON_CONTIGUOUS | mem::WRITE_COMBINE,
        ..RknpuMemCreate::default()
    };
    vendor(&k, f1, VendorOp::MemCreate(&mut c)).unwrap();
    let (dmabuf, lent) = export_and_lend(&k, f1, c.handle);
    let mut q = DrmPrimeHandle {
        fd: lent.0,
        ..DrmPrimeHandle::default()
    };
    k.ioctl(f2, &mut Ioctl::PrimeFdToHandle(&mut q)).unwrap();
    let mut m = RknpuMemMap {
        handle: q.handle,
        ..RknpuMemMap::default()
    };
    assert_eq!(vendor(&k, f2, VendorOp::MemMap(&mut m)), Err(Errno::EINVAL));
    // MEM_CREATE with the imported handle describes the object, allocating nothing.
    let mut info = RknpuMemCreate {
        handle: q.handle,
        ..RknpuMemCreate::default()
    };
    vendor(&k, f2, VendorOp::MemCreate(&mut info)).unwrap();
    assert_eq!((info.dma_addr, info.size), (c.dma_addr, c.size));
    assert_eq!(k.live_objects(), 1);
    // CPU access to the dma-buf is bracketed; the kernel checks the bracket's flags.
    let sync = |flags| k.ioctl(lent, &mut Ioctl::DmaBufSync(&mut DmaBufSync { flags }));
    assert_eq!(sync(dma_buf::START | dma_buf::RW), Ok(0));
    assert_eq!(sync(dma_buf::END | dma_buf::WRITE), Ok(0));
    assert_eq!(
        sync(dma_buf::START),
        Err(Errno::EINVAL),
        "neither read nor write"
    );
    assert_eq!(sync(dma_buf::RW | 8), Err(Errno::EINVAL), "an unknown bit");
    let mut map = k.mmap(lent, 4096, 0).unwrap();
    map.as_mut_slice()[0] = 42;
    drop(map);
    assert_eq!(k.mmap(lent, 4096, 4096).unwrap_err(), Errno::EINVAL);
    k.close(lent);
    k.close(f2);
    k.close(f1);
    assert_eq!(k.live_objects(), 1, "the caller's descriptor holds it");
    drop(dmabuf);
    assert_eq!(k.live_objects(), 0);
}

#[test]
fn rocket_exports_and_refuses_an_import_before_asking_the_kernel() {
    let (k, d1, d2) = pair(Flavour::Rocket);
    let x = d1.alloc(4096, BoFlags::default()).unwrap();
    let fd = x.export_dmabuf().unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    // /dev/null would be EINVAL from the kernel: NotOffered shows nothing was asked.
    for fd in [fd.as_fd(), null.as_fd()] {
        assert!(matches!(
            d2.import_dmabuf(fd),
            Err(Error::NotOffered { .. })
        ));
    }
    assert_eq!(d2.live_buffers(), 0);
    drop(x);
    assert_eq!(k.live_objects(), 1);
    drop(fd);
    assert_eq!(k.live_objects(), 0);
}

#[test]
fn a_matmul_reads_its_activations_from_an_imported_buffer() {
    let (k, producer, npu) = pair(Flavour::Vendor098);
    let mm = mm_4x64x32();
    // Uncached, so what the producer's CPU writes is what the NPU reads: an imported
    // buffer cannot be synced by the importer.
    let mut shared = producer
        .alloc(mm.a_bytes(), BoFlags::default().with_cacheable(false))
        .unwrap();
    shared
        .write(0, &mm.pack_a_int(&[3; 4 * 64]).unwrap())
        .unwrap();
    let a = npu
        .import_dmabuf(shared.export_dmabuf().unwrap().as_fd())
        .unwrap();
    let mut run = matmul_reading(&npu, 1, a);
    npu.submit(&run.job()).unwrap();
    let out = mm
        .unpack_c_int(&run.c.read_all().unwrap()[..mm.c_bytes()])
        .unwrap();
    assert!(out.iter().all(|&v| v == 3 * 2 * 64), "{:?}", &out[..4]);
    drop((run, shared));
    assert_eq!(k.live_objects(), 0);
}

#[test]
fn rocket_gives_back_only_its_own_fds_objects() {
    let k = EmuKernel::new(Flavour::Rocket);
    let node = node_path(Flavour::Rocket);
    let (f1, f2) = (k.open(node).unwrap(), k.open(node).unwrap());
    let mut c = DrmRocketCreateBo {
        size: 4096,
        ..DrmRocketCreateBo::default()
    };
    k.ioctl(f1, &mut Ioctl::RocketCreateBo(&mut c)).unwrap();
    let (dmabuf, lent) = export_and_lend(&k, f1, c.handle);
    let mut q = DrmPrimeHandle {
        fd: lent.0,
        ..DrmPrimeHandle::default()
    };
    // The creating fd gets its own handle back; another fd has no address for it.
    k.ioctl(f1, &mut Ioctl::PrimeFdToHandle(&mut q)).unwrap();
    assert_eq!(q.handle, c.handle);
    q.handle = 0;
    assert_eq!(
        k.ioctl(f2, &mut Ioctl::PrimeFdToHandle(&mut q)),
        Err(Errno::EINVAL)
    );
    k.close(lent);
    k.close(f1);
    k.close(f2);
    assert_eq!(k.live_objects(), 1, "the caller's descriptor holds it");
    drop(dmabuf);
    assert_eq!(k.live_objects(), 0);
}
