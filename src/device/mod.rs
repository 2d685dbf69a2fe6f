//! The NPU as a device: find and open it, allocate buffers, submit jobs, wait for them.
//!
//! One API over both kernel drivers — Rockchip's vendor `rknpu` (0.9.6 and 0.9.8, DRM
//! flavour) and mainline `rocket` — and over the emulated kernel ([`emu`]) that runs the
//! same requests on the simulator. Everything reaches the kernel through the seam of
//! [`crate::sys`].
//!
//! ```
//! use rknpu_driver::device::{BoFlags, Device, Job};
//! use rknpu_driver::kernels::single::{Dtype, SingleMatmul};
//!
//! let dev = Device::open_spec("emu")?;                 // or Device::open(): RKNPU_DEVICE or probing
//! let mm = SingleMatmul::new(4, 64, 32, Dtype::Int8);
//! let program = mm.program()?;
//! let (mut regcmd, mut a, mut b, mut c) = (
//!     dev.alloc(program.byte_len(), BoFlags::default())?,
//!     dev.alloc(mm.a_bytes(), BoFlags::default())?,
//!     dev.alloc(mm.b_bytes(), BoFlags::default())?,
//!     dev.alloc(mm.c_bytes(), BoFlags::default())?,
//! );
//! let addr = |id: rknpu_driver::regcmd::BufferId| {
//!     Some(u64::from([regcmd.dma_addr(), a.dma_addr(), b.dma_addr(), c.dma_addr()][id.0 as usize]))
//! };
//! let words = program.bind(addr)?;
//! regcmd.write(0, &rknpu_driver::regcmd::words_to_le_bytes(&words))?;
//! a.write(0, &mm.pack_a_int(&vec![1; 4 * 64])?)?;
//! b.write(0, &mm.pack_b_int(&vec![2; 64 * 32])?)?;
//! let result = dev.submit(&Job::from_program(&regcmd, &program).writes(&c))?;
//! assert_eq!(result.task_counter, 1);
//! let out = mm.unpack_c_int(&c.read_all()?[..mm.c_bytes()])?;
//! assert!(out.iter().all(|&v| v == 128));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod emu;
mod error;
mod job;
pub mod matmul;

pub use error::DeviceError;
pub use job::{CoreMask, Job, JobResult, Pending};

use crate::sys::uapi::{self, *};
use crate::sys::{Errno, Fd, Ioctl, Kernel, Mapping, RealKernel, VendorOp};
use crate::trace::{Header, Recorder};
use emu::{EmuKernel, Flavour};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `Result` with [`DeviceError`].
pub type Result<T, E = DeviceError> = std::result::Result<T, E>;

/// The kernel interface a device speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Interface {
    /// Rockchip's vendor `rknpu` driver (DRM flavour).
    Vendor,
    /// The mainline `rocket` accel driver.
    Rocket,
}

/// What [`Device::open`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Vendor or rocket.
    pub interface: Interface,
    /// The device node.
    pub node: String,
    /// The DRM driver name (`rknpu`, `rocket`).
    pub driver: String,
    /// Driver version `(major, minor, patch)`.
    pub version: (u32, u32, u32),
    /// The driver's date string (empty when it gives none).
    pub date: String,
    /// Cores.
    pub cores: u32,
    /// Whether the NPU is behind an IOMMU.
    pub iommu: bool,
    /// NPU clock in Hz, when the driver reports it.
    pub freq_hz: Option<u32>,
    /// Whether this is the emulated kernel.
    pub emulated: bool,
}

impl std::fmt::Display for DeviceInfo {
    /// `rknpu 0.9.8 at /dev/dri/renderD129`, with ` (emulated)` for the emulated kernel.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (major, minor, patch) = self.version;
        write!(
            f,
            "{} {major}.{minor}.{patch} at {}{}",
            self.driver,
            self.node,
            if self.emulated { " (emulated)" } else { "" }
        )
    }
}

/// Where [`Device::open`] looks, in order.
pub fn probe_candidates() -> Vec<String> {
    let mut v: Vec<String> = (0..8).map(|i| format!("/dev/accel/accel{i}")).collect();
    v.extend((128..144).map(|i| format!("/dev/dri/renderD{i}")));
    v.extend((0..8).map(|i| format!("/dev/dri/card{i}")));
    v.push("/dev/rknpu".into());
    v
}

/// An open NPU.
#[derive(Debug)]
pub struct Device {
    kernel: Arc<dyn Kernel>,
    emu: Option<Arc<EmuKernel>>,
    fd: Fd,
    info: DeviceInfo,
    live_maps: Arc<AtomicUsize>,
    /// Live buffers by GEM handle.
    handles: std::sync::Mutex<std::collections::HashMap<u32, BoMeta>>,
    /// The trace being recorded, if any.
    recorder: std::sync::Mutex<Option<Recorder>>,
}

/// What the device keeps of a live buffer (to read it for a trace).
#[derive(Clone, Copy, Debug)]
struct BoMeta {
    size: usize,
    dma: u32,
    obj_addr: u64,
    mmap_offset: u64,
    cacheable: bool,
    /// Whether a trace records it (not the internal task arrays or imported buffers).
    traced: bool,
    /// The CPU may have written it since a trace last read it (mapped, or exported as a
    /// dma-buf that anyone may write at any time): only such buffers are read before a
    /// submission.
    cpu_written: bool,
    /// Exported as a dma-buf.
    exported: bool,
}

fn ioctl_err(op: &'static str) -> impl Fn(Errno) -> DeviceError {
    move |errno| DeviceError::Ioctl { op, errno }
}

impl Device {
    /// Opens the NPU named by `RKNPU_DEVICE` (a node path, `emu`, `emu:rocket`,
    /// `emu:vendor-0.9.6`), or else the first node of [`probe_candidates`] whose driver is
    /// `rknpu` or `rocket`.
    pub fn open() -> Result<Device> {
        match std::env::var("RKNPU_DEVICE") {
            Ok(spec) if !spec.is_empty() => Device::open_spec(&spec),
            _ => {
                let looked = probe_candidates();
                let mut refused = None;
                for node in &looked {
                    if std::path::Path::new(node).exists() {
                        match Device::open_with(Arc::new(RealKernel::new()), None, node) {
                            Ok(d) => return Ok(d),
                            // An NPU driver the library does not speak: say so, unless
                            // another node works.
                            Err(e @ DeviceError::UnsupportedDriver { .. }) if e.is_npu() => {
                                refused = Some(e)
                            }
                            Err(_) => {}
                        }
                    }
                }
                if let Some(e) = refused {
                    return Err(e);
                }
                Err(DeviceError::NotFound {
                    looked_for: "an rknpu or rocket DRM node among /dev/accel/accel0-7, /dev/dri/renderD128-143, /dev/dri/card0-7, /dev/rknpu".into(),
                    hint: "set RKNPU_DEVICE to a node path, or to emu, emu:rocket or emu:vendor-0.9.6 for the emulated kernel".into(),
                })
            }
        }
    }

    /// Opens a device by specification: `emu` (vendor 0.9.8), `emu:vendor-0.9.8`,
    /// `emu:vendor-0.9.6`, `emu:rocket`, or a node path.
    pub fn open_spec(spec: &str) -> Result<Device> {
        let flavour = match spec {
            "emu" | "emu:vendor" | "emu:vendor-0.9.8" => Some(Flavour::Vendor098),
            "emu:vendor-0.9.6" => Some(Flavour::Vendor096),
            "emu:rocket" => Some(Flavour::Rocket),
            s if s.starts_with("emu") => {
                return Err(DeviceError::NotFound {
                    looked_for: format!("the emulated kernel {s:?}"),
                    hint: "emu, emu:vendor-0.9.8, emu:vendor-0.9.6 or emu:rocket".into(),
                });
            }
            _ => None,
        };
        match flavour {
            Some(f) => {
                let emu = EmuKernel::shared(f);
                Device::open_with(emu.clone(), Some(emu), emu::node_path(f))
            }
            None => Device::open_with(Arc::new(RealKernel::new()), None, spec),
        }
    }

    /// Opens the device of an emulated kernel of one's own (`EmuKernel::new`), rather
    /// than the process-wide one `emu` names: its buffer addresses then depend on this
    /// device's history only, which makes recordings reproducible.
    pub fn open_emulator(emu: Arc<EmuKernel>) -> Result<Device> {
        let node = emu::node_path(emu.flavour());
        Device::open_with(emu.clone(), Some(emu), node)
    }

    fn open_with(
        kernel: Arc<dyn Kernel>,
        emu: Option<Arc<EmuKernel>>,
        node: &str,
    ) -> Result<Device> {
        let fd = kernel.open(node).map_err(|errno| DeviceError::Open {
            node: node.into(),
            errno,
        })?;
        let mut dev = Device {
            kernel,
            emu,
            fd,
            info: DeviceInfo {
                interface: Interface::Vendor,
                node: node.into(),
                driver: String::new(),
                version: (0, 0, 0),
                date: String::new(),
                cores: 3,
                iommu: true,
                freq_hz: None,
                emulated: false,
            },
            live_maps: Arc::new(AtomicUsize::new(0)),
            handles: Default::default(),
            recorder: Default::default(),
        };
        dev.info.emulated = dev.kernel.is_emulated();
        dev.identify()?;
        if let Some(path) = std::env::var_os("RKNPU_TRACE").filter(|p| !p.is_empty()) {
            dev.record_to_file(&trace_path(std::path::Path::new(&path)))?;
        }
        Ok(dev)
    }

    /// Reads the driver's name and version and refuses what the library does not speak.
    fn identify(&mut self) -> Result<()> {
        let mut v = DrmVersion::default();
        let (mut name, mut date, mut desc) = ([0u8; 64], [0u8; 64], [0u8; 128]);
        let r = self.kernel.ioctl(
            self.fd,
            &mut Ioctl::DrmVersion {
                version: &mut v,
                name: &mut name,
                date: &mut date,
                desc: &mut desc,
            },
        );
        if let Err(errno) = r {
            // Not a DRM node. The vendor's misc flavour (/dev/rknpu) answers RKNPU_ACTION
            // with its own request codes: recognise it, and refuse it by name.
            let mut a = RknpuAction {
                flags: uapi::action::GET_DRV_VERSION,
                value: 0,
            };
            let misc = self.kernel.ioctl(
                self.fd,
                &mut Ioctl::Vendor(VendorNode::Misc, VendorOp::Action(&mut a)),
            );
            return Err(match misc {
                Ok(_) => DeviceError::UnsupportedDriver {
                    driver: "rknpu (misc node, DMA-heap build)".into(),
                    version: format!("{}.{}.{}", a.value / 10000, a.value / 100 % 100, a.value % 100),
                    why: "this flavour allocates from a DMA heap whose addresses are only meaningful without an IOMMU; use a kernel built with CONFIG_ROCKCHIP_RKNPU_DRM_GEM or the rocket driver".into(),
                },
                Err(_) => DeviceError::Unsupported {
                    what: format!("{}: not a DRM node (DRM_IOCTL_VERSION: {errno}) and not the vendor misc node", self.info.node),
                },
            });
        }
        let text = |b: &[u8], len: u64| {
            String::from_utf8_lossy(&b[..(len as usize).min(b.len())]).into_owned()
        };
        self.info.driver = text(&name, v.name_len);
        self.info.date = text(&date, v.date_len);
        self.info.version = (
            v.version_major as u32,
            v.version_minor as u32,
            v.version_patchlevel as u32,
        );
        match self.info.driver.as_str() {
            "rknpu" => {
                self.info.interface = Interface::Vendor;
                let code = self.action(uapi::action::GET_DRV_VERSION, 0)?;
                if !(906..1000).contains(&code) {
                    return Err(DeviceError::UnsupportedDriver {
                        driver: "rknpu".into(),
                        version: format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100),
                        why: "the library speaks the 0.9.6 and later 0.9.x layouts (48-byte MEM_CREATE, IOMMU domains); older drivers use a 40-byte MEM_CREATE".into(),
                    });
                }
                self.info.version = (code / 10000, code / 100 % 100, code % 100);
                self.info.iommu = self.action(uapi::action::GET_IOMMU_EN, 0)? == 1;
                self.info.freq_hz = self.action(uapi::action::GET_FREQ, 0).ok();
            }
            "rocket" => {
                self.info.interface = Interface::Rocket;
                self.info.iommu = true;
            }
            other => {
                return Err(DeviceError::UnsupportedDriver {
                    driver: other.into(),
                    version: format!(
                        "{}.{}.{}",
                        self.info.version.0, self.info.version.1, self.info.version.2
                    ),
                    why: "not an NPU driver (expected rknpu or rocket)".into(),
                });
            }
        }
        Ok(())
    }

    /// A vendor `RKNPU_ACTION`.
    fn action(&self, code: u32, value: u32) -> Result<u32> {
        let mut a = RknpuAction { flags: code, value };
        self.vendor(VendorOp::Action(&mut a), "RKNPU_ACTION")?;
        Ok(a.value)
    }

    fn vendor(&self, op: VendorOp<'_>, name: &'static str) -> Result<i32> {
        self.kernel
            .ioctl(self.fd, &mut Ioctl::Vendor(VendorNode::Drm, op))
            .map_err(ioctl_err(name))
    }

    fn ioctl(&self, req: &mut Ioctl<'_>) -> Result<i32> {
        let name = req.name();
        self.kernel.ioctl(self.fd, req).map_err(ioctl_err(name))
    }

    /// What was found.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The emulated kernel behind this device, if it is one (for fault injection and its
    /// log).
    pub fn emulator(&self) -> Option<&EmuKernel> {
        self.emu.as_deref()
    }

    fn track(&self, handle: u32, meta: BoMeta) {
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(handle, meta);
    }

    fn untrack(&self, handle: u32) {
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&handle);
        if let Some(r) = self.recording().as_mut() {
            r.buffer_freed(handle);
        }
    }

    fn recording(&self) -> std::sync::MutexGuard<'_, Option<Recorder>> {
        self.recorder.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Buffer objects of this device not yet freed.
    pub fn live_buffers(&self) -> usize {
        self.handles.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// CPU mappings of this device's buffers not yet unmapped.
    pub fn live_mappings(&self) -> usize {
        self.live_maps.load(Ordering::SeqCst)
    }

    /// Soft-resets every core (vendor `RKNPU_ACT_RESET`). The rocket driver resets a
    /// core itself after a job timeout and has no request for it.
    pub fn reset(&self) -> Result<()> {
        match self.info.interface {
            Interface::Vendor => self.action(uapi::action::ACT_RESET, 0).map(|_| ()),
            Interface::Rocket => Err(DeviceError::Unsupported {
                what: "reset: the rocket driver resets a core itself after a job timeout".into(),
            }),
        }
    }

    /// Allocates a buffer object of at least `size` bytes.
    pub fn alloc(&self, size: usize, flags: BoFlags) -> Result<Bo<'_>> {
        let bo = self.alloc_with(size, flags, true)?;
        if let Some(r) = self.recording().as_mut() {
            let bits = match self.info.interface {
                Interface::Vendor => flags.vendor_bits(self.info.version),
                Interface::Rocket => 0,
            };
            r.buffer_created(bo.handle, bits, bo.size as u64, bo.dma);
        }
        Ok(bo)
    }

    /// Allocates a buffer; `traced` says whether a trace records it.
    fn alloc_with(&self, size: usize, flags: BoFlags, traced: bool) -> Result<Bo<'_>> {
        if size == 0 {
            return Err(DeviceError::InvalidArgument {
                what: "a buffer of 0 bytes".into(),
            });
        }
        let bo = match self.info.interface {
            Interface::Vendor => {
                let mut c = RknpuMemCreate {
                    flags: flags.vendor_bits(self.info.version),
                    size: size as u64,
                    iommu_domain_id: flags.iommu_domain as i32,
                    ..RknpuMemCreate::default()
                };
                self.vendor(VendorOp::MemCreate(&mut c), "RKNPU_MEM_CREATE")?;
                let mut m = RknpuMemMap {
                    handle: c.handle,
                    ..RknpuMemMap::default()
                };
                // From here the object exists: the Bo frees it on every path.
                let bo = Bo {
                    dev: self,
                    handle: c.handle,
                    size: c.size as usize,
                    dma: c.dma_addr as u32,
                    obj_addr: c.obj_addr,
                    mmap_offset: 0,
                    cacheable: flags.cacheable,
                };
                self.track(c.handle, bo.meta(traced));
                if c.dma_addr + c.size > 1 << 32 {
                    return Err(DeviceError::Unsupported {
                        what: format!(
                            "buffer at {:#x}+{:#x} lies above the NPU's 32-bit address space",
                            c.dma_addr, c.size
                        ),
                    });
                }
                self.vendor(VendorOp::MemMap(&mut m), "RKNPU_MEM_MAP")?;
                let mut bo = bo;
                bo.mmap_offset = m.offset;
                // Again, now with the offset a trace maps it at.
                self.track(bo.handle, bo.meta(traced));
                bo
            }
            Interface::Rocket => {
                let size32 = u32::try_from(size).map_err(|_| DeviceError::InvalidArgument {
                    what: format!("{size} bytes: rocket buffers are at most 4 GiB - 1"),
                })?;
                let mut c = DrmRocketCreateBo {
                    size: size32,
                    ..DrmRocketCreateBo::default()
                };
                self.ioctl(&mut Ioctl::RocketCreateBo(&mut c))?;
                let bo = Bo {
                    dev: self,
                    handle: c.handle,
                    size: size.div_ceil(4096) * 4096,
                    dma: c.dma_address as u32,
                    obj_addr: 0,
                    mmap_offset: c.offset,
                    cacheable: true,
                };
                self.track(c.handle, bo.meta(traced));
                bo
            }
        };
        Ok(bo)
    }
}

impl Device {
    /// Imports a dma-buf (vendor DRM flavour only): PRIME_FD_TO_HANDLE, then MEM_CREATE
    /// with that handle for the object's address. Imported objects cannot be mapped
    /// through the driver (map the dma-buf itself) and are not cacheable; they serve as
    /// NPU operands.
    pub fn import_dmabuf(&self, dmabuf: &DmaBuf<'_>) -> Result<Bo<'_>> {
        if self.info.interface == Interface::Rocket {
            return Err(DeviceError::Unsupported {
                what: "dma-buf import: the rocket driver has no import path".into(),
            });
        }
        let mut p = DrmPrimeHandle {
            handle: 0,
            flags: 0,
            fd: dmabuf.raw_fd(),
        };
        self.ioctl(&mut Ioctl::PrimeFdToHandle(&mut p))?;
        if self
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&p.handle)
        {
            // DRM gives a buffer of this fd back under its existing handle; a second Bo
            // would free it twice.
            return Err(DeviceError::InvalidArgument {
                what: format!(
                    "the dma-buf is this device's own buffer (handle {}): use that buffer",
                    p.handle
                ),
            });
        }
        let mut c = RknpuMemCreate {
            handle: p.handle,
            ..RknpuMemCreate::default()
        };
        self.vendor(VendorOp::MemCreate(&mut c), "RKNPU_MEM_CREATE")?;
        let bo = Bo {
            dev: self,
            handle: c.handle,
            size: c.size as usize,
            dma: c.dma_addr as u32,
            obj_addr: c.obj_addr,
            mmap_offset: u64::MAX,
            cacheable: false,
        };
        // Imported memory cannot be mapped through the driver: traces do not record it.
        self.track(c.handle, bo.meta(false));
        Ok(bo)
    }
}

impl Device {
    /// Ownership transition device → CPU: invalidate CPU caches (vendor MEM_SYNC
    /// FROM_DEVICE, rocket PREP_BO with a 5 s deadline).
    fn to_cpu(&self, handle: u32, m: &BoMeta) -> Result<()> {
        match self.info.interface {
            Interface::Vendor if m.cacheable => self.sync(m, mem::SYNC_FROM_DEVICE),
            Interface::Vendor => Ok(()),
            Interface::Rocket => {
                let mut p = DrmRocketPrepBo {
                    handle,
                    reserved: 0,
                    timeout_ns: job::deadline_ns(std::time::Duration::from_secs(5)),
                };
                self.ioctl(&mut Ioctl::RocketPrepBo(&mut p)).map(|_| ())
            }
        }
    }

    /// Ownership transition CPU → device: clean CPU caches (vendor MEM_SYNC TO_DEVICE,
    /// rocket FINI_BO).
    fn to_device(&self, handle: u32, m: &BoMeta) -> Result<()> {
        match self.info.interface {
            Interface::Vendor if m.cacheable => self.sync(m, mem::SYNC_TO_DEVICE),
            Interface::Vendor => Ok(()),
            Interface::Rocket => {
                let mut f = DrmRocketFiniBo {
                    handle,
                    reserved: 0,
                };
                self.ioctl(&mut Ioctl::RocketFiniBo(&mut f)).map(|_| ())
            }
        }
    }

    fn sync(&self, m: &BoMeta, dir: u32) -> Result<()> {
        let mut y = RknpuMemSync {
            flags: dir,
            obj_addr: m.obj_addr,
            offset: 0,
            size: m.size as u64,
            ..RknpuMemSync::default()
        };
        self.vendor(VendorOp::MemSync(&mut y), "RKNPU_MEM_SYNC")
            .map(|_| ())
    }

    /// Records everything this device does from now on into `sink` as a trace
    /// (docs/trace-format.md): buffers alive now and later, the contents the program
    /// puts in them before each submission, the submissions, their completions and the
    /// contents they leave. Setting `RKNPU_TRACE=FILE` does the same for every device a
    /// program opens (the first device writes FILE, later ones FILE.1, FILE.2, ...).
    pub fn start_recording(&self, sink: Box<dyn std::io::Write + Send>) -> Result<()> {
        let r = Recorder::new(sink, &self.trace_header()).map_err(|e| DeviceError::Trace {
            what: e.to_string(),
        })?;
        self.record_with(r)
    }

    /// The header a trace of this device starts with (for [`Recorder::new`]).
    pub fn trace_header(&self) -> Header {
        let info = &self.info;
        let (major, minor, patch) = info.version;
        Header::new(
            "RK3588",
            u8::from(info.interface == Interface::Rocket),
            &format!("{} {major}.{minor}.{patch}", info.driver),
            info.emulated,
        )
    }

    /// [`Device::start_recording`] with a recorder set up by the caller, e.g. one that
    /// records outputs as digests only. A recording already running is stopped first.
    /// Buffers alive when recording starts are recorded with allocation flags 0 (the
    /// device does not keep them); their contents are recorded at the next submission.
    ///
    /// ```
    /// use rknpu_driver::device::Device;
    /// use rknpu_driver::trace::Recorder;
    ///
    /// let dev = Device::open_spec("emu")?;
    /// let mut r = Recorder::new(Box::new(std::io::sink()), &dev.trace_header())?;
    /// r.redact_outputs(true);
    /// dev.record_with(r)?;
    /// assert!(dev.is_recording());
    /// dev.stop_recording()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_with(&self, mut r: Recorder) -> Result<()> {
        let live: Vec<(u32, BoMeta)> = {
            let h = self.handles.lock().unwrap_or_else(|e| e.into_inner());
            let mut v: Vec<_> = h.iter().map(|(&k, &m)| (k, m)).collect();
            v.sort_by_key(|&(k, _)| k);
            v
        };
        for (handle, m) in live.into_iter().filter(|(_, m)| m.traced) {
            r.buffer_created(handle, 0, m.size as u64, m.dma);
            // What the CPU put in it before now is not in the trace yet.
            self.note_cpu_write(handle);
        }
        // A recording already running ends here, flushed, with its error if it had one.
        match self.recording().replace(r) {
            Some(mut old) => old.finish().map_err(|e| DeviceError::Trace {
                what: format!("the previous recording: {e}"),
            }),
            None => Ok(()),
        }
    }

    /// [`Device::start_recording`] into a new file at `path`.
    pub fn record_to_file(&self, path: &std::path::Path) -> Result<()> {
        let f = std::fs::File::create(path).map_err(|e| DeviceError::Trace {
            what: format!("{}: {e}", path.display()),
        })?;
        self.start_recording(Box::new(std::io::BufWriter::new(f)))
    }

    /// Stops recording and flushes the trace; reports the first write error of the
    /// recording. Dropping the device stops it too (and reports an error on stderr, the
    /// only place left to say it).
    pub fn stop_recording(&self) -> Result<()> {
        match self.recording().take() {
            Some(mut r) => r.finish().map_err(|e| DeviceError::Trace {
                what: e.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// Whether a trace is being recorded.
    pub fn is_recording(&self) -> bool {
        self.recording().is_some()
    }

    /// The CPU may have changed a buffer: the next submission's trace reads it.
    fn note_cpu_write(&self, handle: u32) {
        if let Some(m) = self
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&handle)
        {
            m.cpu_written = true;
        }
    }

    /// A recorded buffer's contents, synced for the CPU when the device may have written
    /// it (`after_job`) and handed back afterwards. Before a job only buffers the CPU may
    /// have written since the last read are read (`None` for the others: unchanged).
    fn trace_contents(&self, handle: u32, after_job: bool) -> Option<Vec<u8>> {
        let m = {
            let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
            let m = handles.get_mut(&handle)?;
            if !m.traced || !(after_job || m.cpu_written || m.exported) {
                return None;
            }
            m.cpu_written = false;
            *m
        };
        if after_job {
            self.to_cpu(handle, &m).ok()?;
        }
        let bytes = self
            .kernel
            .mmap(self.fd, m.size, m.mmap_offset)
            .ok()
            .map(|map| map.as_slice().to_vec());
        if after_job {
            let _ = self.to_device(handle, &m);
        }
        bytes
    }
}

/// The file the `n`-th device of this process records to under `RKNPU_TRACE`.
fn trace_path(base: &std::path::Path) -> std::path::PathBuf {
    static OPENED: AtomicUsize = AtomicUsize::new(0);
    match OPENED.fetch_add(1, Ordering::SeqCst) {
        0 => base.to_path_buf(),
        n => {
            let mut s = base.as_os_str().to_owned();
            s.push(format!(".{n}"));
            s.into()
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Err(e) = self.stop_recording() {
            eprintln!("rknpu-driver: the trace is incomplete: {e}");
        }
        self.kernel.close(self.fd);
    }
}

/// How a buffer is allocated. The default is what the reference recommends for buffers
/// the CPU touches: non-contiguous, cacheable, with explicit syncs (matmul-recipe.md 1.3,
/// kernel-interfaces.md P6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BoFlags {
    /// One physically contiguous block (CMA) instead of IOMMU-mapped pages.
    pub contiguous: bool,
    /// A cacheable CPU mapping (syncs copy between CPU caches and memory).
    pub cacheable: bool,
    /// A kernel mapping (vendor: required for task arrays; the device adds it there).
    pub kernel_mapping: bool,
    /// The vendor driver's IOMMU domain (0..15; 0.9.6 and later).
    pub iommu_domain: u8,
}

impl Default for BoFlags {
    fn default() -> Self {
        BoFlags {
            contiguous: false,
            cacheable: true,
            kernel_mapping: false,
            iommu_domain: 0,
        }
    }
}

impl BoFlags {
    /// `RKNPU_MEM_*` bits for a driver version.
    fn vendor_bits(&self, version: (u32, u32, u32)) -> u32 {
        let mut f = mem::IOMMU;
        if !self.contiguous {
            f |= mem::NON_CONTIGUOUS;
            // The driver's own IOVA allocator avoids leaking the shared window (0.9.7+).
            if version >= (0, 9, 7) {
                f |= mem::IOMMU_LIMIT_IOVA_ALIGNMENT;
            }
        }
        if self.cacheable {
            f |= mem::CACHEABLE;
        }
        if self.kernel_mapping {
            f |= mem::KERNEL_MAPPING;
        }
        f
    }
}

/// A buffer object: NPU-visible memory at a 32-bit device address, freed on drop.
#[derive(Debug)]
pub struct Bo<'d> {
    dev: &'d Device,
    handle: u32,
    size: usize,
    dma: u32,
    obj_addr: u64,
    mmap_offset: u64,
    cacheable: bool,
}

impl<'d> Bo<'d> {
    fn meta(&self, traced: bool) -> BoMeta {
        BoMeta {
            size: self.size,
            dma: self.dma,
            obj_addr: self.obj_addr,
            mmap_offset: self.mmap_offset,
            cacheable: self.cacheable,
            traced,
            cpu_written: false,
            exported: false,
        }
    }

    /// The device address the NPU uses.
    pub fn dma_addr(&self) -> u32 {
        self.dma
    }

    /// Bytes (page-rounded).
    pub fn size(&self) -> usize {
        self.size
    }

    /// The GEM handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The device it belongs to.
    pub fn device(&self) -> &'d Device {
        self.dev
    }

    /// Makes the buffer CPU-owned and maps it. While the returned map lives the buffer
    /// cannot be submitted (it borrows the buffer exclusively); dropping it hands the
    /// buffer back to the device (cleaning CPU caches).
    pub fn map(&mut self) -> Result<CpuMap<'_, 'd>> {
        let mapping = self.cpu_mapping()?;
        self.dev.note_cpu_write(self.handle);
        self.dev.live_maps.fetch_add(1, Ordering::SeqCst);
        Ok(CpuMap {
            bo: self,
            mapping: Some(mapping),
        })
    }

    fn to_cpu(&self) -> Result<()> {
        self.dev.to_cpu(self.handle, &self.meta(false))
    }

    fn to_device(&self) -> Result<()> {
        self.dev.to_device(self.handle, &self.meta(false))
    }

    /// Copies `data` in at `offset` (map, copy, hand back to the device).
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        let end = offset.checked_add(data.len()).filter(|&e| e <= self.size);
        let end = end.ok_or_else(|| DeviceError::InvalidArgument {
            what: format!(
                "{} bytes at offset {offset} of a {}-byte buffer",
                data.len(),
                self.size
            ),
        })?;
        let mut m = self.map()?;
        m[offset..end].copy_from_slice(data);
        m.finish()
    }

    /// Copies the whole buffer out.
    pub fn read_all(&mut self) -> Result<Vec<u8>> {
        Ok(self.cpu_mapping()?.as_slice().to_vec())
    }

    /// Makes the buffer CPU-owned and maps all of it.
    fn cpu_mapping(&mut self) -> Result<Mapping> {
        self.to_cpu()?;
        self.dev
            .kernel
            .mmap(self.dev.fd, self.size, self.mmap_offset)
            .map_err(|errno| DeviceError::Ioctl { op: "mmap", errno })
    }

    /// Exports the buffer as a dma-buf (vendor DRM flavour only).
    pub fn export_dmabuf(&self) -> Result<DmaBuf<'d>> {
        if self.dev.info.interface == Interface::Rocket {
            return Err(DeviceError::Unsupported {
                what: "dma-buf export: untested on the rocket driver".into(),
            });
        }
        let mut p = DrmPrimeHandle {
            handle: self.handle,
            flags: 0o2_000_002, // DRM_CLOEXEC | DRM_RDWR
            fd: -1,
        };
        self.dev.ioctl(&mut Ioctl::PrimeHandleToFd(&mut p))?;
        if let Some(m) = self
            .dev
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&self.handle)
        {
            m.exported = true;
        }
        Ok(DmaBuf {
            dev: self.dev,
            fd: Fd(p.fd),
        })
    }
}

impl Drop for Bo<'_> {
    fn drop(&mut self) {
        let _ = match self.dev.info.interface {
            Interface::Vendor => {
                let mut d = RknpuMemDestroy {
                    handle: self.handle,
                    reserved: 0,
                    obj_addr: self.obj_addr,
                };
                self.dev
                    .vendor(VendorOp::MemDestroy(&mut d), "RKNPU_MEM_DESTROY")
            }
            Interface::Rocket => {
                let mut c = DrmGemClose {
                    handle: self.handle,
                    pad: 0,
                };
                self.dev.ioctl(&mut Ioctl::GemClose(&mut c))
            }
        };
        self.dev.untrack(self.handle);
    }
}

/// An exported dma-buf, closed on drop.
#[derive(Debug)]
pub struct DmaBuf<'d> {
    dev: &'d Device,
    fd: Fd,
}

impl DmaBuf<'_> {
    /// The descriptor's number, to pass to another API while this value lives.
    pub fn raw_fd(&self) -> i32 {
        self.fd.0
    }
}

impl Drop for DmaBuf<'_> {
    fn drop(&mut self) {
        self.dev.kernel.close(self.fd);
    }
}

/// A CPU mapping of a buffer, borrowed from it; the buffer is CPU-owned while it lives.
#[derive(Debug)]
pub struct CpuMap<'b, 'd> {
    bo: &'b mut Bo<'d>,
    mapping: Option<Mapping>,
}

impl CpuMap<'_, '_> {
    /// Unmaps and hands the buffer back to the device, reporting a failed cache clean
    /// (dropping the map does the same but cannot report).
    pub fn finish(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        if self.mapping.take().is_some() {
            self.bo.dev.live_maps.fetch_sub(1, Ordering::SeqCst);
            return self.bo.to_device();
        }
        Ok(())
    }
}

impl std::ops::Deref for CpuMap<'_, '_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.mapping.as_ref().map_or(&[], |m| m.as_slice())
    }
}

impl std::ops::DerefMut for CpuMap<'_, '_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.mapping.as_mut().map_or(&mut [], |m| m.as_mut_slice())
    }
}

impl Drop for CpuMap<'_, '_> {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

#[cfg(test)]
mod tests;
