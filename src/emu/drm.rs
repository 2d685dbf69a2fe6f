//! The DRM core's ioctls both drivers inherit: the version query, PRIME import, and the
//! sync bracket of an exported dma-buf.

use super::{EmuKernel, File, Flavour, State};
use crate::sys::uapi;
use crate::sys::{Errno, Fd, Ioctl};
use std::sync::Arc;

impl EmuKernel {
    /// `DRM_IOCTL_VERSION`: the driver's version and names, each copied up to the
    /// caller's buffer with its full length reported.
    pub(super) fn drm_version(&self, req: &mut Ioctl<'_>) {
        let Ioctl::DrmVersion {
            version,
            name,
            date,
            desc,
        } = req
        else {
            return;
        };
        let (ma, mi, pa, n, d, e) = self.version();
        version.version_major = ma;
        version.version_minor = mi;
        version.version_patchlevel = pa;
        for (buf, text, len) in [
            (&mut **name, n, &mut version.name_len),
            (&mut **date, d, &mut version.date_len),
            (&mut **desc, e, &mut version.desc_len),
        ] {
            let k = buf.len().min(text.len());
            buf[..k].copy_from_slice(&text.as_bytes()[..k]);
            *len = text.len() as u64;
        }
    }

    /// `DRM_IOCTL_PRIME_FD_TO_HANDLE`: the handle of a dma-buf's object on `fd`.
    pub(super) fn prime_fd_to_handle(
        &self,
        s: &mut State,
        fd: Fd,
        p: &mut uapi::DrmPrimeHandle,
    ) -> Result<i32, Errno> {
        let bo = match s.files.get(&p.fd) {
            Some(File::DmaBuf(bo)) => Arc::clone(bo),
            // dma_buf_get refuses a file that is not a dma-buf, and a dma-buf of
            // another exporter is one this kernel cannot attach.
            Some(_) => return Err(Errno::EINVAL),
            None => return Err(Errno::EBADF),
        };
        if self.flavour == Flavour::Rocket {
            // rocket has no gem_prime_import_sg_table: DRM gives back only an
            // object of this very fd (under its handle) and refuses the rest.
            let Some(File::Device { handles, .. }) = s.files.get(&fd.0) else {
                return Err(Errno::EBADF);
            };
            let (&h, _) = handles
                .iter()
                .find(|(_, b)| Arc::ptr_eq(b, &bo))
                .ok_or(Errno::EINVAL)?;
            p.handle = h;
            return Ok(0);
        }
        let Some(File::Device {
            handles,
            next_handle,
            imported,
            ..
        }) = s.files.get_mut(&fd.0)
        else {
            return Err(Errno::EBADF);
        };
        if let Some((&h, _)) = handles.iter().find(|(_, b)| Arc::ptr_eq(b, &bo)) {
            p.handle = h;
        } else {
            p.handle = *next_handle;
            *next_handle += 1;
            handles.insert(p.handle, bo);
            imported.insert(p.handle);
        }
        Ok(0)
    }
}

/// `DMA_BUF_IOCTL_SYNC`, the one ioctl of a dma-buf file: unknown bits, or neither READ
/// nor WRITE, are EINVAL (`dma_buf_ioctl`). The drivers' dma-bufs use DRM's PRIME
/// operations, which have no CPU-access hooks: a valid bracket does nothing.
pub(super) fn dma_buf_sync(req: &Ioctl<'_>) -> Result<i32, Errno> {
    let Ioctl::DmaBufSync(y) = req else {
        return Err(Errno::ENOTTY);
    };
    let valid = uapi::dma_buf::RW | uapi::dma_buf::END;
    if y.flags & !valid != 0 || y.flags & uapi::dma_buf::RW == 0 {
        return Err(Errno::EINVAL);
    }
    Ok(0)
}
