//! `#[repr(C)]` mirrors of the kernel interfaces' structures and their request codes
//! (the vendor `rknpu` driver's `include/rknpu_ioctl.h`, mainline `include/uapi/drm/rocket_accel.h`,
//! and the three generic DRM ioctls the library needs). Sizes and field offsets are
//! asserted at compile time against the driver headers (docs/hardware/kernel-behaviours.md#sources); `IntoBytes` rules out implicit
//! padding.

use std::mem::{offset_of, size_of};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

macro_rules! uapi {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty),* $(,)? } size $size:expr; offsets { $($of:ident = $o:expr),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        const _: () = assert!(size_of::<$name>() == $size);
        $(const _: () = assert!(offset_of!($name, $of) == $o);)*
    };
}

// ----- vendor rknpu, 0.9.8 (include/rknpu_ioctl.h; docs/hardware/kernel-behaviours.md#sources) -----

uapi! {
    /// `struct rknpu_action`: an action code and its argument or result.
    pub struct RknpuAction {
        /// Action code ([`action`]).
        pub flags: u32,
        /// Argument / result.
        pub value: u32,
    }
    size 8; offsets { flags = 0, value = 4 }
}

uapi! {
    /// `struct rknpu_mem_create` (48 bytes since 0.9.6; offset 44 is `core_mask` in 0.9.8,
    /// `reserved` in 0.9.6; before 0.9.6 it ended after `sram_size`, at 40 bytes).
    pub struct RknpuMemCreate {
        /// In: 0 to allocate (or an existing handle); out: the new GEM handle.
        pub handle: u32,
        /// `RKNPU_MEM_*` ([`mem`]).
        pub flags: u32,
        /// In: requested bytes; out: page-rounded size.
        pub size: u64,
        /// Out: kernel address of the driver's object (an opaque cookie).
        pub obj_addr: u64,
        /// Out: the NPU-visible address.
        pub dma_addr: u64,
        /// In/out: on-chip SRAM bytes.
        pub sram_size: u64,
        /// In: IOMMU domain 0..15.
        pub iommu_domain_id: i32,
        /// In: 0.9.8 `core_mask` (RK3576 NBUF only), 0.9.6 `reserved`.
        pub core_mask: u32,
    }
    size 48; offsets { handle = 0, flags = 4, size = 8, obj_addr = 16, dma_addr = 24, sram_size = 32, iommu_domain_id = 40, core_mask = 44 }
}

uapi! {
    /// `struct rknpu_mem_map`: the DRM fake offset to mmap a handle at.
    pub struct RknpuMemMap {
        /// In: GEM handle.
        pub handle: u32,
        /// Reserved.
        pub reserved: u32,
        /// Out: mmap offset.
        pub offset: u64,
    }
    size 16; offsets { handle = 0, offset = 8 }
}

uapi! {
    /// `struct rknpu_mem_destroy`.
    pub struct RknpuMemDestroy {
        /// In: GEM handle.
        pub handle: u32,
        /// Reserved.
        pub reserved: u32,
        /// In: the object's cookie (used by the misc node).
        pub obj_addr: u64,
    }
    size 16; offsets { handle = 0, obj_addr = 8 }
}

uapi! {
    /// `struct rknpu_mem_sync`: cache maintenance of a byte range of a cacheable object.
    pub struct RknpuMemSync {
        /// `RKNPU_MEM_SYNC_*` ([`mem::SYNC_TO_DEVICE`], [`mem::SYNC_FROM_DEVICE`]).
        pub flags: u32,
        /// Reserved.
        pub reserved: u32,
        /// The object's cookie from MEM_CREATE (not a handle).
        pub obj_addr: u64,
        /// First byte.
        pub offset: u64,
        /// Bytes.
        pub size: u64,
    }
    size 32; offsets { flags = 0, obj_addr = 8, offset = 16, size = 24 }
}

uapi! {
    /// `struct rknpu_task` (declared packed in C; 40 bytes, natural offsets). Lives in an
    /// array inside a kernel-mapped object, not in an ioctl argument.
    pub struct RknpuTask {
        /// Not used by the kernel.
        pub flags: u32,
        /// Not used by the kernel.
        pub op_idx: u32,
        /// Not used by the kernel (the op-enable entry carries the mask).
        pub enable_mask: u32,
        /// Completion interrupt mask (last task) and INT_CLEAR value (first task).
        pub int_mask: u32,
        /// Not used by the kernel.
        pub int_clear: u32,
        /// Written back into the last task after a blocking wait.
        pub int_status: u32,
        /// Body entries, tail excluded (first task of each kick).
        pub regcfg_amount: u32,
        /// Not used by 0.9.8.
        pub regcfg_offset: u32,
        /// NPU address of the task's list (first task of each kick).
        pub regcmd_addr: u64,
    }
    size 40; offsets { int_mask = 12, int_status = 20, regcfg_amount = 24, regcmd_addr = 32 }
}

uapi! {
    /// `struct rknpu_subcore_task`: one core's task range.
    pub struct RknpuSubcoreTask {
        /// First task index.
        pub task_start: u32,
        /// Number of tasks.
        pub task_number: u32,
    }
    size 8; offsets { task_start = 0, task_number = 4 }
}

uapi! {
    /// `struct rknpu_submit` (104 bytes; 0.9.6+ meaning of offsets 32-39 and 48-55).
    pub struct RknpuSubmit {
        /// `RKNPU_JOB_*` ([`job`]).
        pub flags: u32,
        /// Milliseconds.
        pub timeout: u32,
        /// First task (single-IRQ SoCs only).
        pub task_start: u32,
        /// Total tasks (non-zero).
        pub task_number: u32,
        /// Out: tasks completed (the wait core's counter on timeout).
        pub task_counter: u32,
        /// Send 0.
        pub priority: i32,
        /// `obj_addr` of the kernel-mapped object holding the task array.
        pub task_obj_addr: u64,
        /// IOMMU domain.
        pub iommu_domain_id: u32,
        /// Reserved.
        pub reserved: u32,
        /// Written to PC_TASK_DMA_BASE_ADDR (0 is used).
        pub task_base_addr: u64,
        /// Out: nanoseconds from hardware commit to completion.
        pub hw_elapse_time: i64,
        /// 0 auto, 1/2/4 one core, 3 cores 0+1, 7 all.
        pub core_mask: u32,
        /// In/out: sync_file fd, -1 when unused.
        pub fence_fd: i32,
        /// Per-core task ranges.
        pub subcore_task: [RknpuSubcoreTask; 5],
    }
    size 104; offsets { flags = 0, timeout = 4, task_number = 12, task_counter = 16, priority = 20, task_obj_addr = 24, iommu_domain_id = 32, task_base_addr = 40, hw_elapse_time = 48, core_mask = 56, fence_fd = 60, subcore_task = 64 }
}

// ----- mainline rocket (include/uapi/drm/rocket_accel.h; docs/hardware/kernel-behaviours.md#sources) -----

uapi! {
    /// `struct drm_rocket_create_bo`.
    pub struct DrmRocketCreateBo {
        /// In: bytes (32-bit).
        pub size: u32,
        /// Out: GEM handle.
        pub handle: u32,
        /// Out: NPU address, private to the fd.
        pub dma_address: u64,
        /// Out: mmap offset.
        pub offset: u64,
    }
    size 24; offsets { size = 0, handle = 4, dma_address = 8, offset = 16 }
}

uapi! {
    /// `struct drm_rocket_prep_bo`: wait for the BO's writers and make it CPU-visible.
    pub struct DrmRocketPrepBo {
        /// GEM handle.
        pub handle: u32,
        /// Must be 0.
        pub reserved: u32,
        /// Absolute CLOCK_MONOTONIC deadline in ns (0 = poll).
        pub timeout_ns: i64,
    }
    size 16; offsets { handle = 0, timeout_ns = 8 }
}

uapi! {
    /// `struct drm_rocket_fini_bo`: end CPU access (clean to the device).
    pub struct DrmRocketFiniBo {
        /// GEM handle.
        pub handle: u32,
        /// Must be 0.
        pub reserved: u32,
    }
    size 8; offsets { handle = 0, reserved = 4 }
}

uapi! {
    /// `struct drm_rocket_task`.
    pub struct DrmRocketTask {
        /// NPU address of the task's list.
        pub regcmd: u32,
        /// Entries including the 4-entry tail.
        pub regcmd_count: u32,
    }
    size 8; offsets { regcmd = 0, regcmd_count = 4 }
}

uapi! {
    /// `struct drm_rocket_job`: user pointers to tasks and BO handle arrays.
    pub struct DrmRocketJob {
        /// User pointer to `drm_rocket_task[]`.
        pub tasks: u64,
        /// User pointer to the input handles.
        pub in_bo_handles: u64,
        /// User pointer to the output handles.
        pub out_bo_handles: u64,
        /// Tasks (> 0).
        pub task_count: u32,
        /// Task stride (≥ 8).
        pub task_struct_size: u32,
        /// Input handles.
        pub in_bo_handle_count: u32,
        /// Output handles.
        pub out_bo_handle_count: u32,
    }
    size 40; offsets { tasks = 0, in_bo_handles = 8, out_bo_handles = 16, task_count = 24, task_struct_size = 28, in_bo_handle_count = 32, out_bo_handle_count = 36 }
}

uapi! {
    /// `struct drm_rocket_submit`.
    pub struct DrmRocketSubmit {
        /// User pointer to `drm_rocket_job[]`.
        pub jobs: u64,
        /// Jobs.
        pub job_count: u32,
        /// Job stride (≥ 40).
        pub job_struct_size: u32,
        /// Must be 0.
        pub reserved: u64,
    }
    size 24; offsets { jobs = 0, job_count = 8, job_struct_size = 12, reserved = 16 }
}

// ----- generic DRM -----

uapi! {
    /// `struct drm_version` (LP64; the explicit `pad` is C's implicit padding).
    pub struct DrmVersion {
        /// Major version.
        pub version_major: i32,
        /// Minor version.
        pub version_minor: i32,
        /// Patch level.
        pub version_patchlevel: i32,
        /// Padding before the 64-bit lengths.
        pub pad: u32,
        /// In: buffer size; out: name length.
        pub name_len: u64,
        /// User pointer to the name buffer.
        pub name: u64,
        /// In: buffer size; out: date length.
        pub date_len: u64,
        /// User pointer to the date buffer.
        pub date: u64,
        /// In: buffer size; out: description length.
        pub desc_len: u64,
        /// User pointer to the description buffer.
        pub desc: u64,
    }
    size 64; offsets { name_len = 16, name = 24, date_len = 32, desc_len = 48, desc = 56 }
}

uapi! {
    /// `struct drm_gem_close`.
    pub struct DrmGemClose {
        /// GEM handle.
        pub handle: u32,
        /// Padding.
        pub pad: u32,
    }
    size 8; offsets { handle = 0 }
}

uapi! {
    /// `struct drm_prime_handle`: a GEM handle and a dma-buf fd.
    pub struct DrmPrimeHandle {
        /// GEM handle.
        pub handle: u32,
        /// `DRM_CLOEXEC | DRM_RDWR` for export.
        pub flags: u32,
        /// The dma-buf fd.
        pub fd: i32,
    }
    size 12; offsets { handle = 0, flags = 4, fd = 8 }
}

// ----- dma-buf (Linux `include/uapi/linux/dma-buf.h`) -----

uapi! {
    /// `struct dma_buf_sync`: brackets CPU access to a dma-buf, so that its exporter
    /// keeps CPU caches coherent.
    pub struct DmaBufSync {
        /// `DMA_BUF_SYNC_*` ([`dma_buf`]).
        pub flags: u64,
    }
    size 8; offsets { flags = 0 }
}

/// `DMA_BUF_SYNC_*` flags (Linux `include/uapi/linux/dma-buf.h`).
pub mod dma_buf {
    /// The CPU reads.
    pub const READ: u64 = 1;
    /// The CPU writes.
    pub const WRITE: u64 = 2;
    /// The CPU reads and writes.
    pub const RW: u64 = READ | WRITE;
    /// CPU access begins.
    pub const START: u64 = 0;
    /// CPU access ends.
    pub const END: u64 = 4;
}

/// `DRM_CLOEXEC` (`O_CLOEXEC`): PRIME export flag, the dma-buf closes on `exec`.
pub const DRM_CLOEXEC: u32 = 0o2_000_000;
/// `DRM_RDWR` (`O_RDWR`): PRIME export flag, the dma-buf may be mapped writable.
pub const DRM_RDWR: u32 = 0o2;

/// `RKNPU_ACTION` codes (the vendor driver's include/rknpu_ioctl.h; docs/hardware/kernel-behaviours.md#sources).
pub mod action {
    /// Hardware version word.
    pub const GET_HW_VERSION: u32 = 0;
    /// `major·10000 + minor·100 + patch`.
    pub const GET_DRV_VERSION: u32 = 1;
    /// NPU clock in Hz.
    pub const GET_FREQ: u32 = 2;
    /// Rail voltage in µV.
    pub const GET_VOLT: u32 = 4;
    /// Soft reset of every core.
    pub const ACT_RESET: u32 = 6;
    /// 1 if the IOMMU is enabled.
    pub const GET_IOMMU_EN: u32 = 18;
    /// On-chip SRAM bytes.
    pub const GET_TOTAL_SRAM_SIZE: u32 = 22;
    /// Free on-chip SRAM bytes.
    pub const GET_FREE_SRAM_SIZE: u32 = 23;
    /// The live IOMMU domain.
    pub const GET_IOMMU_DOMAIN_ID: u32 = 24;
    /// Switch the live IOMMU domain.
    pub const SET_IOMMU_DOMAIN_ID: u32 = 25;
}

/// `RKNPU_MEM_*` allocation flags and `RKNPU_MEM_SYNC_*` (the vendor driver's include/rknpu_ioctl.h; docs/hardware/kernel-behaviours.md#sources).
pub mod mem {
    /// Pages mapped through the IOMMU instead of one CMA block.
    pub const NON_CONTIGUOUS: u32 = 0x1;
    /// Cacheable CPU mapping; required for MEM_SYNC.
    pub const CACHEABLE: u32 = 0x2;
    /// Write-combined CPU mapping.
    pub const WRITE_COMBINE: u32 = 0x4;
    /// A kernel mapping: mandatory for the task array.
    pub const KERNEL_MAPPING: u32 = 0x8;
    /// Not referenced by the kernel; set by vendor userspace.
    pub const IOMMU: u32 = 0x10;
    /// Zero a contiguous buffer at allocation (without it the contiguous path skips
    /// zeroing; pages are always zeroed).
    pub const ZEROING: u32 = 0x20;
    /// The driver's own IOVA allocator (0.9.7+).
    pub const IOMMU_LIMIT_IOVA_ALIGNMENT: u32 = 0x400;
    /// MEM_SYNC: clean CPU caches for the device.
    pub const SYNC_TO_DEVICE: u32 = 0x1;
    /// MEM_SYNC: invalidate CPU caches after the device wrote.
    pub const SYNC_FROM_DEVICE: u32 = 0x2;
}

/// `RKNPU_JOB_*` submit flags (the vendor driver's include/rknpu_ioctl.h; docs/hardware/kernel-behaviours.md#sources).
pub mod job {
    /// PC mode: required.
    pub const PC: u32 = 0x1;
    /// Return after queuing.
    pub const NONBLOCK: u32 = 0x2;
    /// TASK_PP_EN.
    pub const PINGPONG: u32 = 0x4;
    /// Wait for the fence fd first.
    pub const FENCE_IN: u32 = 0x8;
    /// Return a sync_file fd signalled on success.
    pub const FENCE_OUT: u32 = 0x10;
}

/// The two ioctl families of the vendor driver (the vendor driver's include/rknpu_ioctl.h; docs/hardware/kernel-behaviours.md#sources).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VendorNode {
    /// DRM card or render node: magic `'d'`, numbers `0x40 + nr`.
    Drm,
    /// `/dev/rknpu` misc node: magic `'r'`, numbers `nr`.
    Misc,
}

const fn iowr(ty: u8, nr: u8, size: usize) -> u32 {
    nix::request_code_readwrite!(ty, nr, size) as u32
}

const fn iow(ty: u8, nr: u8, size: usize) -> u32 {
    nix::request_code_write!(ty, nr, size) as u32
}

/// The vendor request code of command `nr` (0 ACTION … 5 MEM_SYNC) with argument `T`.
pub const fn vendor_code<T>(node: VendorNode, nr: u8) -> u32 {
    vendor_code_sized(node, nr, size_of::<T>())
}

/// The vendor request code of command `nr` with an argument of `size` bytes.
pub const fn vendor_code_sized(node: VendorNode, nr: u8, size: usize) -> u32 {
    match node {
        VendorNode::Drm => iowr(b'd', 0x40 + nr, size),
        VendorNode::Misc => iowr(b'r', nr, size),
    }
}

/// `DRM_IOCTL_VERSION`.
pub const DRM_IOCTL_VERSION: u32 = iowr(b'd', 0x00, size_of::<DrmVersion>());
/// `DRM_IOCTL_GEM_CLOSE`.
pub const DRM_IOCTL_GEM_CLOSE: u32 = iow(b'd', 0x09, size_of::<DrmGemClose>());
/// `DRM_IOCTL_PRIME_HANDLE_TO_FD`.
pub const DRM_IOCTL_PRIME_HANDLE_TO_FD: u32 = iowr(b'd', 0x2D, size_of::<DrmPrimeHandle>());
/// `DRM_IOCTL_PRIME_FD_TO_HANDLE`.
pub const DRM_IOCTL_PRIME_FD_TO_HANDLE: u32 = iowr(b'd', 0x2E, size_of::<DrmPrimeHandle>());
/// `DMA_BUF_IOCTL_SYNC`.
pub const DMA_BUF_IOCTL_SYNC: u32 = iow(b'b', 0, size_of::<DmaBufSync>());
/// `DRM_IOCTL_ROCKET_CREATE_BO`.
pub const DRM_IOCTL_ROCKET_CREATE_BO: u32 = iowr(b'd', 0x40, size_of::<DrmRocketCreateBo>());
/// `DRM_IOCTL_ROCKET_SUBMIT`.
pub const DRM_IOCTL_ROCKET_SUBMIT: u32 = iow(b'd', 0x41, size_of::<DrmRocketSubmit>());
/// `DRM_IOCTL_ROCKET_PREP_BO`.
pub const DRM_IOCTL_ROCKET_PREP_BO: u32 = iow(b'd', 0x42, size_of::<DrmRocketPrepBo>());
/// `DRM_IOCTL_ROCKET_FINI_BO`.
pub const DRM_IOCTL_ROCKET_FINI_BO: u32 = iow(b'd', 0x43, size_of::<DrmRocketFiniBo>());

#[cfg(test)]
mod tests {
    use super::*;
    use VendorNode::{Drm, Misc};

    #[test]
    fn vendor_request_codes_equal_the_reference() {
        // the vendor and rocket driver sources (docs/hardware/kernel-behaviours.md#sources).
        assert_eq!(vendor_code::<RknpuAction>(Drm, 0), 0xC008_6440);
        assert_eq!(vendor_code::<RknpuSubmit>(Drm, 1), 0xC068_6441);
        assert_eq!(vendor_code::<RknpuMemCreate>(Drm, 2), 0xC030_6442);
        assert_eq!(vendor_code::<RknpuMemMap>(Drm, 3), 0xC010_6443);
        assert_eq!(vendor_code::<RknpuMemDestroy>(Drm, 4), 0xC010_6444);
        assert_eq!(vendor_code::<RknpuMemSync>(Drm, 5), 0xC020_6445);
        assert_eq!(vendor_code::<RknpuAction>(Misc, 0), 0xC008_7200);
        assert_eq!(vendor_code::<RknpuSubmit>(Misc, 1), 0xC068_7201);
        assert_eq!(vendor_code::<RknpuMemCreate>(Misc, 2), 0xC030_7202);
        assert_eq!(vendor_code::<RknpuMemMap>(Misc, 3), 0xC010_7203);
        assert_eq!(vendor_code::<RknpuMemDestroy>(Misc, 4), 0xC010_7204);
        assert_eq!(vendor_code::<RknpuMemSync>(Misc, 5), 0xC020_7205);
        // Before 0.9.6 the struct was the first 40 bytes of today's, up to and including
        // `sram_size` (no IOMMU domain, no core mask): the library refuses such drivers,
        // and this is their MEM_CREATE.
        let legacy = std::mem::offset_of!(RknpuMemCreate, iommu_domain_id);
        assert_eq!(legacy, 40);
        assert_eq!(vendor_code_sized(Drm, 2, legacy), 0xC028_6442);
    }

    #[test]
    fn drm_and_rocket_request_codes_equal_the_reference() {
        assert_eq!(DRM_IOCTL_VERSION, 0xC040_6400);
        assert_eq!(DRM_IOCTL_GEM_CLOSE, 0x4008_6409);
        assert_eq!(DRM_IOCTL_PRIME_HANDLE_TO_FD, 0xC00C_642D);
        assert_eq!(DRM_IOCTL_PRIME_FD_TO_HANDLE, 0xC00C_642E);
        assert_eq!(DRM_IOCTL_ROCKET_CREATE_BO, 0xC018_6440);
        assert_eq!(DRM_IOCTL_ROCKET_SUBMIT, 0x4018_6441);
        assert_eq!(DRM_IOCTL_ROCKET_PREP_BO, 0x4010_6442);
        assert_eq!(DRM_IOCTL_ROCKET_FINI_BO, 0x4008_6443);
        assert_eq!(DMA_BUF_IOCTL_SYNC, 0x4008_6200);
    }

    #[test]
    fn task_array_round_trips_through_bytes() {
        let t = RknpuTask {
            int_mask: 0x300,
            regcfg_amount: 104,
            regcmd_addr: 0xFFFE_B000,
            ..RknpuTask::default()
        };
        let bytes = t.as_bytes();
        assert_eq!(&bytes[12..16], &0x300u32.to_le_bytes());
        assert_eq!(&bytes[32..40], &0xFFFE_B000u64.to_le_bytes());
        assert_eq!(RknpuTask::read_from_bytes(bytes).unwrap(), t);
    }
}
