//! The device layer's errors are the crate's one [`crate::Error`]: opening, allocating
//! and submitting fail with its device variants ([`crate::Error::Ioctl`],
//! [`crate::Error::Timeout`], ...).

/// The crate's error type, under the name the device layer has always used for it.
pub type DeviceError = crate::Error;
