//! The bug-report bundle: `device.txt` (what the device and the machine are),
//! `report.txt` (the ladder's report) and the traces the ladder records per rung.

use super::Report;
use crate::device::Device;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

/// A file of the bundle that could not be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleError {
    /// The file (or folder).
    pub path: PathBuf,
    /// Why.
    pub what: String,
}

impl BundleError {
    pub(super) fn new(path: &Path, e: impl fmt::Display) -> BundleError {
        BundleError {
            path: path.to_path_buf(),
            what: e.to_string(),
        }
    }
}

impl fmt::Display for BundleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.what)
    }
}

impl std::error::Error for BundleError {}

/// The folder's name for the driver's description.
pub(super) const DEVICE_TXT: &str = "device.txt";
/// The folder's name for the report.
pub(super) const REPORT_TXT: &str = "report.txt";

/// Creates the folder and writes what is known before the first rung.
pub(super) fn prepare(dir: &Path, dev: &Device) -> Vec<BundleError> {
    if let Err(e) = std::fs::create_dir_all(dir) {
        return vec![BundleError::new(dir, e)];
    }
    write(&dir.join(DEVICE_TXT), &device_text(Some(dev)))
        .err()
        .into_iter()
        .collect()
}

/// Writes `device.txt` again (with what the kernel logged meanwhile) and `report.txt`.
pub(super) fn write_closing(dir: &Path, dev: Option<&Device>, report: &Report) -> Vec<BundleError> {
    if let Err(e) = std::fs::create_dir_all(dir) {
        return vec![BundleError::new(dir, e)];
    }
    let mut text = report.to_string();
    text.push('\n');
    [
        write(&dir.join(DEVICE_TXT), &device_text(dev)),
        write(&dir.join(REPORT_TXT), &text),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect()
}

fn write(path: &Path, text: &str) -> Result<(), BundleError> {
    std::fs::write(path, text).map_err(|e| BundleError::new(path, e))
}

/// The library, the device, the kernel and the nodes present.
fn device_text(dev: Option<&Device>) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "rknpu-driver {}", env!("CARGO_PKG_VERSION"));
    match dev {
        Some(d) => {
            let i = d.info();
            let _ = writeln!(t, "device: {i}");
            let _ = writeln!(t, "interface: {:?}", i.interface);
            let (major, minor, patch) = i.version;
            let _ = writeln!(t, "driver: {} {major}.{minor}.{patch}", i.driver);
            if !i.date.is_empty() {
                let _ = writeln!(t, "driver date: {}", i.date);
            }
            let _ = writeln!(t, "cores: {}", i.cores);
            let _ = writeln!(t, "iommu: {}", i.iommu);
            if let Some(f) = i.freq_hz {
                let _ = writeln!(t, "clock: {f} Hz");
            }
            let _ = writeln!(t, "emulated: {}", i.emulated);
        }
        None => {
            let _ = writeln!(t, "device: none opened (report.txt says why)");
        }
    }
    let env = std::env::var("RKNPU_DEVICE").unwrap_or_default();
    let _ = writeln!(t, "RKNPU_DEVICE: {env:?}");
    let kernel = std::fs::read_to_string("/proc/version").unwrap_or_default();
    let _ = writeln!(t, "kernel: {}", kernel.trim());
    for folder in ["/dev/dri", "/dev/accel"] {
        let _ = writeln!(t, "{folder}: {}", listing(folder));
    }
    devfreq(&mut t);
    if let Some(emu) = dev.and_then(Device::emulator) {
        let _ = writeln!(t, "emulated kernel log:");
        for line in emu.log() {
            let _ = writeln!(t, "  {line}");
        }
    }
    t
}

/// The entries of a folder, sorted, or why there are none.
fn listing(folder: &str) -> String {
    match std::fs::read_dir(folder) {
        Ok(entries) => {
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            if names.is_empty() {
                "(empty)".into()
            } else {
                names.join(" ")
            }
        }
        Err(e) => format!("({e})"),
    }
}

/// The NPU's devfreq governor and clock, where the kernel has them.
fn devfreq(t: &mut String) {
    let Ok(entries) = std::fs::read_dir("/sys/class/devfreq") else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.contains("npu") {
            continue;
        }
        let read = |f: &str| {
            std::fs::read_to_string(e.path().join(f))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|err| format!("({err})"))
        };
        let _ = writeln!(
            t,
            "devfreq {name}: governor {}, cur_freq {}",
            read("governor"),
            read("cur_freq")
        );
    }
}
