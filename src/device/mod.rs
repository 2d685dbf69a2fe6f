//! The NPU as a device: find and open it, allocate buffers, submit jobs, wait for them.
//!
//! One API over both kernel drivers — Rockchip's vendor `rknpu` (0.9.6 and 0.9.8, DRM
//! flavour) and mainline `rocket` — and over the emulated kernel ([`emu`]) that runs the
//! same requests on the simulator. Everything reaches the kernel through the crate's
//! private seam (`src/sys/`), the only place nix is used: no nix type is part of the
//! public API.
//!
//! What differs between the interfaces is one private trait, `Backend` (`backend.rs`),
//! with a vendor (`vendor.rs`) and a rocket (`rocket.rs`) implementation that a device
//! picks once, by the driver's name, when it is opened. Around it, the same for every
//! interface: buffers and mappings (`bo.rs`), their placement in the vendor driver's IOMMU
//! domains (`domains.rs`), jobs and their checks (`job.rs`), recording
//! (`recording.rs`). What runs on a device (weight banks, matmuls, layer programs) is
//! [`crate::compute`]; the emulated kernels are [`crate::emu`].
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
//! let job = Job::from_program(&regcmd, &program).reads(&a).reads(&b).writes(&c);
//! let result = dev.submit(&job)?;   // every DMA range verified against a, b, c first
//! assert_eq!(result.task_counter, 1);
//! let out = mm.unpack_c_int(&c.read_all()?[..mm.c_bytes()])?;
//! assert!(out.iter().all(|&v| v == 128));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backend;
mod bo;
mod domains;
mod job;
mod leak;
mod recording;
mod rocket;
mod sentinel;
mod vendor;

pub use bo::{Bo, BoFlags, CpuMap};
pub use domains::IOMMU_DOMAINS;
pub use job::{CoreMask, Job, JobResult, Pending};
pub use leak::LeakedBuffer;

use crate::Error;
use crate::emu::{self, EmuKernel, Flavour};
use crate::sys::uapi::{self, DrmVersion, RknpuAction, VendorNode};
use crate::sys::{Ioctl, Kernel, RealKernel, VendorOp};
use crate::trace::Recorder;
use backend::{Backend, Port};
use bo::BoMeta;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The kernel interface a device speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Interface {
    /// Rockchip's vendor `rknpu` driver (DRM flavour).
    Vendor,
    /// The mainline `rocket` accel driver.
    Rocket,
}

/// What a device's kernel interface offers the layers above it: the policy of each
/// interface in one place, so that plans and jobs ask this instead of the
/// [`Interface`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The driver places each job on a core itself: a job names no core
    /// ([`CoreMask::Auto`]) and cannot be split over cores by the caller.
    pub picks_cores: bool,
    /// The tasks of one job run back to back on a core, so a plan may keep data or
    /// weights in the CBUF from one task to the next (otherwise
    /// [`Plan::without_reuse`](crate::kernels::matmul::Plan::without_reuse)).
    pub cbuf_reuse: bool,
    /// Incremental task bodies (a task writing only the registers that differ from the
    /// task two before it) run.
    pub incremental_tasks: bool,
    /// The kernel stops a job still running after this long, whatever the job's own
    /// timeout: rocket's scheduler, 500 ms (docs/hardware/kernel-behaviours.md#k1). A
    /// program modelled near it is submitted as several jobs
    /// ([`split_jobs`](crate::kernels::matmul::cost::jobs::split_jobs)). `None`: the job's
    /// own timeout holds (the vendor driver).
    pub job_timeout: Option<std::time::Duration>,
    /// The driver starts every task of a job on its own (no program controller walks
    /// the chain), so the pre-submit verifier checks each task's list alone rather than
    /// following chain tails.
    pub tasks_run_alone: bool,
    /// IOMMU address spaces of 4 GiB a device offers its buffers
    /// (docs/device.md#beyond-4-gib): the vendor driver's 16 domains, rocket's one
    /// address space per open.
    pub iommu_domains: u8,
}

/// What [`Device::open`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Cores assumed at open: 3. No request reports them; an RK3583 (two cores) is
    /// recognised when its driver refuses a mask naming core 2 ([`Device::cores`]).
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

/// An open NPU: a cheap handle to a shared state (clones are the same device). Buffers,
/// weight banks and matmuls hold a clone, so they own what they need (`'static`,
/// `Send + Sync`); the node closes when the last of them is dropped.
#[derive(Clone, Debug)]
pub struct Device {
    inner: Arc<Inner>,
}

/// What every clone of a [`Device`] shares.
#[derive(Debug)]
struct Inner {
    /// The seam and the open node (closed when the device is dropped).
    port: Port,
    /// The interface's behaviour, chosen once at open by the driver's name.
    backend: Box<dyn Backend>,
    emu: Option<Arc<EmuKernel>>,
    info: DeviceInfo,
    live_maps: Arc<AtomicUsize>,
    /// Live buffers by GEM handle.
    handles: Mutex<HashMap<u32, BoMeta>>,
    /// The trace being recorded, if any.
    recorder: Mutex<Option<Recorder>>,
    /// Buffers of jobs that may still run, and those leaked because of them.
    quarantine: Mutex<leak::Quarantine>,
    /// Which IOMMU domains have room, and whether the kernel has domains at all.
    placement: Mutex<domains::Placement>,
    /// The highest core mask the driver accepts: 7 on the RK3588, 3 once an RK3583 has
    /// refused a mask naming core 2.
    core_limit: AtomicU32,
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
                            Err(e @ Error::UnsupportedDriver { .. }) if e.is_npu() => {
                                refused = Some(e)
                            }
                            Err(_) => {}
                        }
                    }
                }
                if let Some(e) = refused {
                    return Err(e);
                }
                Err(Error::NotFound {
                    looked_for: "an rknpu or rocket DRM node among /dev/accel/accel0-7, /dev/dri/renderD128-143, /dev/dri/card0-7, /dev/rknpu".into(),
                    hint: "set RKNPU_DEVICE to a node path, or to emu, emu:rocket or emu:vendor-0.9.6 for the emulated kernel".into(),
                })
            }
        }
    }

    /// Opens the board's NPU as [`Device::open`] does, or, when none is found (no
    /// `RKNPU_DEVICE`, no NPU node), the emulated kernel (vendor 0.9.8): the
    /// "board, else emulator" of examples and tools. Which one it is shows in
    /// [`Device::info`] (`emulated`, and its `Display`). An NPU that is present but
    /// refuses to open is an error, not a fallback.
    pub fn open_or_emulated() -> Result<Device> {
        match Device::open() {
            Err(Error::NotFound { .. }) => Device::open_spec("emu"),
            r => r,
        }
    }

    /// Opens a device by specification: `emu` (vendor 0.9.8), `emu:vendor-0.9.8`,
    /// `emu:vendor-0.9.6`, `emu:rocket`, each of them with `:async` appended (`emu:async`,
    /// `emu:rocket:async`: the emulated kernel's asynchronous mode,
    /// [`EmuKernel::set_async`]), or a node path.
    pub fn open_spec(spec: &str) -> Result<Device> {
        let (base, asynchronous) = match spec.strip_suffix(":async") {
            Some(base) if base.starts_with("emu") => (base, true),
            _ => (spec, false),
        };
        let flavour = match base {
            "emu" | "emu:vendor" | "emu:vendor-0.9.8" => Some(Flavour::Vendor098),
            "emu:vendor-0.9.6" => Some(Flavour::Vendor096),
            "emu:rocket" => Some(Flavour::Rocket),
            s if s.starts_with("emu") => {
                return Err(Error::NotFound {
                    looked_for: format!("the emulated kernel {spec:?}"),
                    hint: "emu, emu:vendor-0.9.8, emu:vendor-0.9.6 or emu:rocket, optionally followed by :async".into(),
                });
            }
            _ => None,
        };
        match flavour {
            Some(f) => {
                let emu = if asynchronous {
                    EmuKernel::shared_async(f)
                } else {
                    EmuKernel::shared(f)
                };
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

    /// Opens this device's node once more, on the same kernel: a second client of the
    /// driver, with buffer handles of its own (a board's node path, or the same emulated
    /// kernel). Buffers pass between the two only as dma-bufs ([`Bo::export_dmabuf`],
    /// [`Device::import_dmabuf`]).
    pub fn open_again(&self) -> Result<Device> {
        Device::open_with(
            self.inner.port.kernel.clone(),
            self.inner.emu.clone(),
            &self.inner.info.node,
        )
    }

    fn open_with(
        kernel: Arc<dyn Kernel>,
        emu: Option<Arc<EmuKernel>>,
        node: &str,
    ) -> Result<Device> {
        let fd = kernel.open(node).map_err(|errno| Error::Open {
            node: node.into(),
            errno: crate::sys::os_error(errno),
        })?;
        // From here the port closes the node on every path.
        let port = Port {
            kernel,
            fd,
            keep_open: AtomicBool::new(false),
        };
        let (backend, info) = identify(&port, node)?;
        let dev = Inner {
            port,
            backend,
            emu,
            info,
            live_maps: Arc::new(AtomicUsize::new(0)),
            handles: Default::default(),
            recorder: Default::default(),
            quarantine: Default::default(),
            placement: Default::default(),
            core_limit: AtomicU32::new(7),
        };
        let dev = Device {
            inner: Arc::new(dev),
        };
        if let Some(path) = std::env::var_os("RKNPU_TRACE").filter(|p| !p.is_empty()) {
            dev.record_to_file(&recording::trace_path(std::path::Path::new(&path)))?;
        }
        Ok(dev)
    }

    /// What was found.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The emulated kernel behind this device, if it is one (for fault injection and its
    /// log).
    pub fn emulator(&self) -> Option<&EmuKernel> {
        self.inner.emu.as_deref()
    }

    /// Buffer objects of this device not yet freed.
    pub fn live_buffers(&self) -> usize {
        self.handles().len()
    }

    /// CPU mappings of this device's buffers not yet unmapped.
    pub fn live_mappings(&self) -> usize {
        self.inner.live_maps.load(Ordering::SeqCst)
    }

    /// Whether `other` is this device (a clone of the same open), not another open of
    /// the same or another NPU: buffers and banks of one open are not addressable in
    /// another's jobs.
    pub fn same_device(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// What this device's kernel interface offers (one value per interface).
    pub fn capabilities(&self) -> Capabilities {
        let mut caps = self.inner.backend.capabilities();
        // An emulated rocket kernel says its own job timeout (a test may shorten it).
        if let (Some(t), Some(emu)) = (caps.job_timeout.as_mut(), self.emulator()) {
            *t = emu.rocket_job_timeout();
        }
        caps
    }

    /// NPU cores as far as the library knows: 3 (RK3588) until the driver refuses a
    /// core mask naming core 2 at once, which only the RK3583's (two cores, `core_mask`
    /// limit 0x3) does; from then on 2, and masks naming core 2 are refused before the
    /// kernel. An `EINVAL` that comes later (another process's soft reset failing the
    /// wait) teaches nothing (docs/device.md, K11).
    pub fn cores(&self) -> u32 {
        if self.inner.core_limit.load(Ordering::SeqCst) >= 7 {
            3
        } else {
            2
        }
    }

    /// Records that the driver accepts core masks up to `limit` only.
    fn learn_core_limit(&self, limit: u32) {
        self.inner.core_limit.store(limit, Ordering::SeqCst);
    }

    /// Soft-resets every core (vendor `RKNPU_ACT_RESET`). The rocket driver resets a
    /// core itself after a job timeout and has no request for it.
    pub fn reset(&self) -> Result<()> {
        self.inner.backend.reset(self)
    }

    fn handles(&self) -> MutexGuard<'_, HashMap<u32, BoMeta>> {
        self.inner.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts tracking a buffer, or refreshes what is kept of it.
    fn track(&self, handle: u32, meta: BoMeta) {
        self.handles().insert(handle, meta);
    }

    fn untrack(&self, handle: u32) {
        self.handles().remove(&handle);
        if let Some(r) = self.recording().as_mut() {
            r.buffer_freed(handle);
        }
    }

    /// Whether `handle` is a live buffer of this device.
    fn is_tracked(&self, handle: u32) -> bool {
        self.handles().contains_key(&handle)
    }

    fn recording(&self) -> MutexGuard<'_, Option<Recorder>> {
        self.inner
            .recorder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// Reads the driver's name and version, picks its backend, and lets it refuse what the
/// library does not speak.
fn identify(port: &Port, node: &str) -> Result<(Box<dyn Backend>, DeviceInfo)> {
    let mut info = DeviceInfo {
        interface: Interface::Vendor,
        node: node.into(),
        driver: String::new(),
        version: (0, 0, 0),
        date: String::new(),
        cores: 3,
        iommu: true,
        freq_hz: None,
        emulated: port.kernel.is_emulated(),
    };
    let mut v = DrmVersion::default();
    let (mut name, mut date, mut desc) = ([0u8; 64], [0u8; 64], [0u8; 128]);
    let r = port.kernel.ioctl(
        port.fd,
        &mut Ioctl::DrmVersion {
            version: &mut v,
            name: &mut name,
            date: &mut date,
            desc: &mut desc,
        },
    );
    // The vendor misc node (/dev/rknpu) dispatches on the request number alone
    // (rknpu_drv.c:596): DRM_IOCTL_VERSION (nr 0) runs RKNPU_ACTION GET_HW_VERSION there
    // and succeeds without writing a name. A DRM driver always names itself.
    if r.is_err() || name.iter().all(|&b| b == 0) {
        return Err(not_drm(port, &info.node, r.err()));
    }
    let text = |b: &[u8], len: u64| {
        String::from_utf8_lossy(&b[..(len as usize).min(b.len())]).into_owned()
    };
    info.driver = text(&name, v.name_len);
    info.date = text(&date, v.date_len);
    info.version = (
        v.version_major as u32,
        v.version_minor as u32,
        v.version_patchlevel as u32,
    );
    let Some(backend) = backend::for_driver(&info.driver) else {
        let (major, minor, patch) = info.version;
        return Err(Error::UnsupportedDriver {
            driver: info.driver,
            version: format!("{major}.{minor}.{patch}"),
            why: "not an NPU driver (expected rknpu or rocket)".into(),
        });
    };
    info.interface = backend.interface();
    backend.identify(port, &mut info)?;
    Ok((backend, info))
}

/// The error for a node that is not a DRM node (`errno` from DRM_IOCTL_VERSION, or none
/// when it succeeded without naming a driver): the vendor misc node, recognised by its
/// own RKNPU_ACTION and refused by name, or something else.
fn not_drm(port: &Port, node: &str, errno: Option<crate::sys::Errno>) -> Error {
    let mut a = RknpuAction {
        flags: uapi::action::GET_DRV_VERSION,
        value: 0,
    };
    let misc = port.kernel.ioctl(
        port.fd,
        &mut Ioctl::Vendor(VendorNode::Misc, VendorOp::Action(&mut a)),
    );
    match misc {
        Ok(_) => Error::UnsupportedDriver {
            driver: "rknpu (misc node, DMA-heap build)".into(),
            version: format!("{}.{}.{}", a.value / 10000, a.value / 100 % 100, a.value % 100),
            why: "this flavour allocates from a DMA heap whose addresses are only meaningful without an IOMMU; use a kernel built with CONFIG_ROCKCHIP_RKNPU_DRM_GEM or the rocket driver".into(),
        },
        Err(_) => Error::NotOffered {
            what: match errno {
                Some(e) => format!("{node}: not a DRM node (DRM_IOCTL_VERSION: {e}) and not the vendor misc node"),
                None => format!("{node}: DRM_IOCTL_VERSION named no driver, and the node is not the vendor misc node"),
            },
        },
    }
}

impl Drop for Inner {
    /// Runs when the last handle (device, buffer, bank) is gone.
    fn drop(&mut self) {
        let recorder = self.recorder.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(mut r) = recorder.take()
            && let Err(e) = r.finish()
        {
            eprintln!("rknpu-driver: the trace is incomplete: {e}");
        }
        let quarantine = self.quarantine.get_mut().unwrap_or_else(|e| e.into_inner());
        let leaked = quarantine.leaked.len();
        if leaked > 0 {
            // Closing the node frees every object it holds, under the NPU.
            eprintln!(
                "rknpu-driver: {leaked} buffer(s) leaked for jobs that may still run; the device node stays open"
            );
            self.port.keep_open.store(true, Ordering::SeqCst);
        }
        // The port closes the node after this, when the fields are dropped.
    }
}

#[cfg(test)]
mod async_tests;
#[cfg(test)]
mod behaviour_tests;
#[cfg(test)]
mod chain_tests;
#[cfg(test)]
mod dmabuf_tests;
#[cfg(test)]
mod edge_tests;
#[cfg(test)]
mod emulation_tests;
#[cfg(test)]
mod handle_tests;
#[cfg(test)]
mod tests;
