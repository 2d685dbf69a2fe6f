//! The operating system behind the seam: the generic DRM requests (driver version, GEM
//! close, PRIME export and import) through drm-rs (the `drm` crate), the vendor and
//! rocket requests, `mmap(2)` and `poll(2)` through nix.

use super::mem::Mapping;
use super::uapi::DrmRocketSubmit;
use super::uapi::{DrmPrimeHandle, DrmVersion};
use super::{Errno, Fd, Ioctl, Kernel, VendorOp};
use drm::Device as _;
use drm::control::Device as _;
use nix::libc;
use std::collections::HashMap;
use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The real kernel: device nodes, `ioctl(2)`, `mmap(2)`, `poll(2)`.
///
/// It owns every descriptor it hands out (device nodes it opened, fence and dma-buf fds
/// the kernel returned through it) and refuses any other number with `EBADF`, so no
/// caller can make it touch a descriptor that belongs to someone else.
#[derive(Debug, Default)]
pub struct RealKernel {
    fds: Mutex<HashMap<i32, Arc<OwnedFd>>>,
}

impl RealKernel {
    /// A kernel with no descriptor open.
    pub fn new() -> RealKernel {
        RealKernel::default()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Arc<OwnedFd>>> {
        self.fds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the descriptor `fd` if this kernel owns it. The table is not locked
    /// during `f` (a blocking submit or poll does not hold up other threads); a `close`
    /// meanwhile takes effect when `f` is done.
    fn with_fd<T>(
        &self,
        fd: Fd,
        f: impl FnOnce(BorrowedFd<'_>) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let owned = self.table().get(&fd.0).cloned().ok_or(Errno::EBADF)?;
        f(owned.as_fd())
    }

    /// PRIME_HANDLE_TO_FD through drm-rs; the dma-buf joins this kernel's descriptors.
    fn prime_export(&self, fd: Fd, p: &mut DrmPrimeHandle) -> Result<i32, Errno> {
        let handle = drm::control::from_u32(p.handle).ok_or(Errno::ENOENT)?;
        let dmabuf = self.with_fd(fd, |fd| {
            Node(fd).buffer_to_prime_fd(handle, p.flags).map_err(errno)
        })?;
        p.fd = dmabuf.as_raw_fd();
        self.table().insert(p.fd, Arc::new(dmabuf));
        Ok(0)
    }

    /// PRIME_FD_TO_HANDLE through drm-rs, of a dma-buf this kernel holds (`p.fd`).
    fn prime_import(&self, fd: Fd, p: &mut DrmPrimeHandle) -> Result<i32, Errno> {
        let dmabuf = self.table().get(&p.fd).cloned().ok_or(Errno::EBADF)?;
        let handle = self.with_fd(fd, |fd| {
            Node(fd).prime_fd_to_buffer(dmabuf.as_fd()).map_err(errno)
        })?;
        p.handle = u32::from(handle);
        Ok(0)
    }

    /// Takes ownership of a descriptor the kernel just returned in a request's result.
    fn adopt_raw(&self, raw: i32) {
        if raw >= 0 {
            // SAFETY: `raw` was returned by the kernel in the result of an ioctl this
            // process just made (a sync_file fd); nothing else owns it yet.
            let owned = unsafe { OwnedFd::from_raw_fd(raw) };
            self.table().insert(raw, Arc::new(owned));
        }
    }
}

fn ptr<T>(r: &mut T) -> *mut c_void {
    (r as *mut T).cast()
}

/// A descriptor of a DRM node, as drm-rs takes one.
struct Node<'a>(BorrowedFd<'a>);

impl AsFd for Node<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0
    }
}

impl drm::Device for Node<'_> {}
impl drm::control::Device for Node<'_> {}

/// The errno of a drm-rs error (`EIO` for one that carries none).
fn errno(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

/// DRM_IOCTL_VERSION through drm-rs: the numbers, and each string copied into its buffer
/// as the kernel copies it (cut to the buffer, the full length reported).
fn drm_version(
    node: &Node<'_>,
    v: &mut DrmVersion,
    name: &mut [u8],
    date: &mut [u8],
    desc: &mut [u8],
) -> Result<(), Errno> {
    let d = node.get_driver().map_err(errno)?;
    (v.version_major, v.version_minor, v.version_patchlevel) = d.version;
    for (buf, text, len) in [
        (name, d.name(), &mut v.name_len),
        (date, d.date(), &mut v.date_len),
        (desc, d.description(), &mut v.desc_len),
    ] {
        let text = text.as_encoded_bytes();
        let k = buf.len().min(text.len());
        buf[..k].copy_from_slice(&text[..k]);
        *len = text.len() as u64;
    }
    Ok(())
}

impl Kernel for RealKernel {
    fn open(&self, path: &str) -> Result<Fd, Errno> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let owned = OwnedFd::from(file);
        let raw = owned.as_raw_fd();
        self.table().insert(raw, Arc::new(owned));
        Ok(Fd(raw))
    }

    fn close(&self, fd: Fd) {
        // Dropping the OwnedFd closes it; numbers this kernel does not own are ignored.
        drop(self.table().remove(&fd.0));
    }

    fn ioctl(&self, fd: Fd, req: &mut Ioctl<'_>) -> Result<i32, Errno> {
        let code = req.code();
        // A submit structure that lives until the call returns.
        let mut submit = DrmRocketSubmit::default();
        let arg: *mut c_void = match req {
            // The generic DRM requests go through drm-rs.
            Ioctl::DrmVersion {
                version,
                name,
                date,
                desc,
            } => {
                return self
                    .with_fd(fd, |fd| drm_version(&Node(fd), version, name, date, desc))
                    .map(|()| 0);
            }
            Ioctl::GemClose(c) => {
                let handle = drm::control::from_u32(c.handle).ok_or(Errno::EINVAL)?;
                return self
                    .with_fd(fd, |fd| Node(fd).close_buffer(handle).map_err(errno))
                    .map(|()| 0);
            }
            Ioctl::PrimeHandleToFd(p) => return self.prime_export(fd, p),
            Ioctl::PrimeFdToHandle(p) => return self.prime_import(fd, p),
            // The drivers' own requests, through nix's libc.
            Ioctl::Vendor(_, op) => match op {
                VendorOp::Action(a) => ptr(*a),
                VendorOp::Submit(a) => ptr(*a),
                VendorOp::MemCreate(a) => ptr(*a),
                VendorOp::MemMap(a) => ptr(*a),
                VendorOp::MemDestroy(a) => ptr(*a),
                VendorOp::MemSync(a) => ptr(*a),
            },
            Ioctl::RocketCreateBo(a) => ptr(*a),
            Ioctl::RocketSubmit {
                job,
                tasks,
                in_handles,
                out_handles,
            } => {
                job.tasks = tasks.as_ptr() as u64;
                job.task_count = tasks.len() as u32;
                job.task_struct_size = size_of::<super::uapi::DrmRocketTask>() as u32;
                job.in_bo_handles = in_handles.as_ptr() as u64;
                job.in_bo_handle_count = in_handles.len() as u32;
                job.out_bo_handles = out_handles.as_ptr() as u64;
                job.out_bo_handle_count = out_handles.len() as u32;
                submit.jobs = ptr(*job) as u64;
                submit.job_count = 1;
                submit.job_struct_size = size_of::<super::uapi::DrmRocketJob>() as u32;
                ptr(&mut submit)
            }
            Ioctl::RocketPrepBo(a) => ptr(*a),
            Ioctl::RocketFiniBo(a) => ptr(*a),
            Ioctl::DmaBufSync(a) => ptr(*a),
        };
        // The out-fence's number as the caller passed it: one the kernel wrote instead is
        // new, on failure too (below).
        let fence_in = match req {
            Ioctl::Vendor(_, VendorOp::Submit(s)) => Some(s.fence_fd),
            _ => None,
        };
        let r = self.with_fd(fd, |fd| {
            // SAFETY: `code` is computed from the size of the very structure `arg` points
            // to (uapi's request codes, asserted against the driver headers); the structure is
            // a `repr(C)` mirror with asserted size and offsets and no padding
            // (IntoBytes); every user pointer stored in it was taken from a slice borrowed
            // by `req`, which outlives this call, and `submit` lives until the function
            // returns; `fd` is a descriptor this kernel owns.
            Errno::result(unsafe { libc::ioctl(fd.as_raw_fd(), code as libc::c_ulong, arg) })
        });
        // A failed non-blocking SUBMIT may still have installed its out-fence:
        // rknpu_submit (rknpu_job.c) writes it to `fence_fd` before scheduling the job
        // and returns the commit's error without taking it back, and DRM copies the
        // structure out even then (drm_ioctl.c). Owned here, it is closed like any other.
        if let Ioctl::Vendor(_, VendorOp::Submit(s)) = req
            && s.flags & super::uapi::job::FENCE_OUT != 0
            && (r.is_ok() || fence_in != Some(s.fence_fd))
        {
            self.adopt_raw(s.fence_fd)
        }
        r
    }

    fn adopt(&self, fd: BorrowedFd<'_>) -> Result<Fd, Errno> {
        let owned = fd.try_clone_to_owned().map_err(errno)?;
        let raw = owned.as_raw_fd();
        self.table().insert(raw, Arc::new(owned));
        Ok(Fd(raw))
    }

    fn release(&self, fd: Fd) -> Result<OwnedFd, Errno> {
        let shared = self.table().remove(&fd.0).ok_or(Errno::EBADF)?;
        // Another thread may be using it this instant: then hand out a duplicate.
        Arc::try_unwrap(shared).or_else(|shared| shared.try_clone().map_err(errno))
    }

    fn mmap(&self, fd: Fd, len: usize, offset: u64) -> Result<Mapping, Errno> {
        let length = NonZeroUsize::new(len).ok_or(Errno::EINVAL)?;
        let offset = libc::off_t::try_from(offset).map_err(|_| Errno::EINVAL)?;
        let p = self.with_fd(fd, |fd| {
            // SAFETY: a fresh shared mapping chosen by the kernel (no fixed address), so
            // no existing memory is replaced; the result is owned by the Mapping below.
            unsafe {
                nix::sys::mman::mmap(
                    None,
                    length,
                    nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
                    nix::sys::mman::MapFlags::MAP_SHARED,
                    fd,
                    offset,
                )
            }
        })?;
        // SAFETY: `p` is the start of the live `len`-byte mapping just created, owned by
        // nothing else.
        Ok(unsafe { Mapping::from_mmap(p.cast(), len) })
    }

    fn poll(&self, fd: Fd, timeout: Duration) -> Result<bool, Errno> {
        self.with_fd(fd, |fd| {
            let mut fds = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
            let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
            Ok(nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms))? > 0)
        })
    }

    fn is_emulated(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::uapi::RknpuAction;
    use crate::sys::uapi::VendorNode;

    /// The real seam on a node every Linux machine has: requests reach the kernel, which
    /// refuses them, and descriptors are owned.
    #[test]
    fn the_real_seam_reaches_the_kernel_and_owns_its_descriptors() {
        let k = RealKernel::new();
        assert_eq!(k.open("/nonexistent/node").unwrap_err(), Errno::ENOENT);
        let fd = k.open("/dev/null").unwrap();
        let mut a = RknpuAction::default();
        let r = k.ioctl(
            fd,
            &mut Ioctl::Vendor(VendorNode::Drm, VendorOp::Action(&mut a)),
        );
        assert_eq!(r.unwrap_err(), Errno::ENOTTY);
        assert!(k.mmap(fd, 4096, 0).is_err(), "/dev/null cannot be mapped");
        assert!(
            k.poll(fd, Duration::from_millis(10)).unwrap(),
            "/dev/null is readable"
        );
        // Numbers it did not hand out are refused, not used.
        assert_eq!(
            k.poll(Fd(fd.0 + 1000), Duration::ZERO).unwrap_err(),
            Errno::EBADF
        );
        k.close(fd);
        assert_eq!(k.poll(fd, Duration::ZERO).unwrap_err(), Errno::EBADF);
        assert!(!k.is_emulated());
    }

    /// The generic DRM requests reach the kernel through drm-rs, with its errors as the
    /// seam's, and lent descriptors are duplicates the kernel owns until released.
    #[test]
    fn generic_drm_requests_go_through_drm_rs_and_lent_descriptors_are_owned() {
        use crate::sys::uapi::{DrmGemClose, DrmPrimeHandle, DrmVersion};
        let k = RealKernel::new();
        let fd = k.open("/dev/null").unwrap();
        let (mut v, mut name) = (DrmVersion::default(), [0u8; 8]);
        let r = k.ioctl(
            fd,
            &mut Ioctl::DrmVersion {
                version: &mut v,
                name: &mut name,
                date: &mut [],
                desc: &mut [],
            },
        );
        assert_eq!(r.unwrap_err(), Errno::ENOTTY, "not a DRM node");
        let mut c = DrmGemClose { handle: 1, pad: 0 };
        assert_eq!(
            k.ioctl(fd, &mut Ioctl::GemClose(&mut c)).unwrap_err(),
            Errno::ENOTTY
        );
        // Handle 0 is no GEM handle: refused before the kernel.
        let mut c = DrmGemClose { handle: 0, pad: 0 };
        assert_eq!(
            k.ioctl(fd, &mut Ioctl::GemClose(&mut c)).unwrap_err(),
            Errno::EINVAL
        );
        let mut p = DrmPrimeHandle {
            handle: 1,
            ..DrmPrimeHandle::default()
        };
        assert_eq!(
            k.ioctl(fd, &mut Ioctl::PrimeHandleToFd(&mut p))
                .unwrap_err(),
            Errno::ENOTTY
        );
        // Import names a descriptor the kernel holds, never a number of the caller's.
        let file = std::fs::File::open("/dev/null").unwrap();
        let mut p = DrmPrimeHandle {
            fd: file.as_raw_fd(),
            ..DrmPrimeHandle::default()
        };
        assert_eq!(
            k.ioctl(fd, &mut Ioctl::PrimeFdToHandle(&mut p))
                .unwrap_err(),
            Errno::EBADF
        );
        let lent = k.adopt(file.as_fd()).unwrap();
        assert_ne!(lent.0, file.as_raw_fd(), "a duplicate");
        p.fd = lent.0;
        assert_eq!(
            k.ioctl(fd, &mut Ioctl::PrimeFdToHandle(&mut p))
                .unwrap_err(),
            Errno::ENOTTY
        );
        // A dma-buf request reaches the descriptor's own driver, here /dev/null's.
        let mut y = crate::sys::uapi::DmaBufSync { flags: 3 };
        assert_eq!(
            k.ioctl(lent, &mut Ioctl::DmaBufSync(&mut y)).unwrap_err(),
            Errno::ENOTTY
        );
        let back = k.release(lent).unwrap();
        assert_eq!(back.as_raw_fd(), lent.0);
        assert_eq!(k.release(lent).unwrap_err(), Errno::EBADF, "no longer held");
        k.close(fd);
    }
}
