//! The public handles: what a backend may do with them, and how their values are built.

use super::*;

/// Handles are owned and shareable: a backend keeps them in its own structs, across threads.
#[test]
fn handles_are_send_sync_and_static() {
    fn owned<T: Send + Sync + 'static>() {}
    owned::<Device>();
    owned::<Bo>();
    let dev = Device::open_spec("emu").unwrap();
    let bo = dev.alloc(4096, BoFlags::default()).unwrap();
    let before = dev.live_buffers();
    drop(dev);
    // The buffer keeps the device open; its drop frees it.
    assert_eq!(bo.device().live_buffers(), before);
    let dev = bo.device().clone();
    drop(bo);
    assert_eq!(dev.live_buffers(), before - 1);
}

/// Buffer flags are built from the default, since the struct may gain fields.
#[test]
fn buffer_flags_build_from_the_default() {
    let f = BoFlags::default()
        .with_contiguous(true)
        .with_cacheable(false)
        .with_kernel_mapping(true)
        .with_iommu_domain(3);
    assert!(f.contiguous && !f.cacheable && f.kernel_mapping);
    assert_eq!(f.iommu_domain, Some(3));
    assert_ne!(f, BoFlags::default());
}
