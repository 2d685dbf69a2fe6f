//! `rknpu info`: the NPU this machine has, or the emulated one `RKNPU_DEVICE` selects.

use crate::Failure;

/// Prints the device's interface, node, driver, cores, IOMMU state and clock.
pub(crate) fn run() -> Result<(), Failure> {
    let dev = rknpu_driver::device::Device::open().map_err(|e| Failure(1, e.to_string()))?;
    let i = dev.info();
    outln!(
        "interface: {}",
        match i.interface {
            rknpu_driver::device::Interface::Vendor => "vendor rknpu",
            rknpu_driver::device::Interface::Rocket => "rocket",
            _ => "another interface",
        }
    );
    outln!(
        "node: {}{}",
        i.node,
        if i.emulated { " (emulated)" } else { "" }
    );
    outln!(
        "driver: {} {}.{}.{}",
        i.driver,
        i.version.0,
        i.version.1,
        i.version.2
    );
    if !i.date.is_empty() {
        outln!("date: {}", i.date);
    }
    outln!("cores: {}", i.cores);
    outln!("iommu: {}", if i.iommu { "enabled" } else { "disabled" });
    if let Some(f) = i.freq_hz {
        outln!("clock: {} MHz", f / 1_000_000);
    }
    Ok(())
}
