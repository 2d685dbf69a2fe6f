//! The host's share of a matmul call: what the CPU does around the NPU's job, from the
//! plan's buffer sizes and a [`HostProfile`] of rates. Pure arithmetic, like the NPU
//! model beside it ([`super::cost`]); `compute::host_profile::measure` fills a profile
//! by running the library's own host routines on the machine.
//!
//! Per call:
//!
//! ```text
//! t_host = A_bytes / prepare_rate + C_bytes / finish_rate
//! ```
//!
//! `A_bytes` is the plan's A buffer (the activations quantised or rounded and packed
//! into it), `C_bytes` its C buffer (every K wave's partial blocks, which the host
//! reads, sums over the waves, unpacks from the native layout and scales). Once per
//! binding, not per call: `tasks × verify_task`, the pre-submit verifier decoding and
//! checking every task when a `Matmul` binds its program. Left out: the kernel's own work
//! (the profile's per-submit figure holds it), cache maintenance, and the copies of a
//! caller that packs into its own buffers. docs/matmul.md ("Host work") has the figures.

use super::Plan;
use crate::error::{Error, Result};
use std::fmt;

/// Bytes per second one Cortex-A76 core of an RK3588 copies with `memcpy`: 10.1 GB/s on
/// an Orange Pi 5 (`ggml-org/whisper.cpp` issue 89; 13.4 GB/s on a Turing RK1,
/// `gregordinary/rockchip-npu-notes` `perf/rga-detile.md`, the lower is used).
pub const A76_MEMCPY_BYTES_PER_S: f64 = 10.1e9;

/// How fast one CPU core does the host work around a matmul call. A plain value: start
/// from [`HostProfile::cortex_a76`] or measure the machine
/// (`compute::host_profile::measure`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HostProfile {
    /// Name printed in a [`HostCost`] line.
    pub name: &'static str,
    /// Bytes of the A buffer prepared per second: f32 activations quantised to int8
    /// (one scale a row) and packed, counted in the A buffer's bytes.
    pub prepare_bytes_per_s: f64,
    /// Bytes of the C buffer finished per second: int32 partial blocks of every K wave
    /// read, summed, unpacked to row-major and scaled to f32, counted in C's bytes.
    pub finish_bytes_per_s: f64,
    /// Seconds the pre-submit verifier takes per task (decode every register entry of
    /// the task, check its DMA ranges against the job's buffers).
    pub verify_task_s: f64,
}

impl HostProfile {
    /// One Cortex-A76 core of an RK3588. **Estimates:** no board ran these routines.
    /// Each rate is the ratio to a single-thread memcpy measured on an x86-64 build
    /// (docs/matmul.md, "Host work": prepare 0.10 by [`measure`], finish 0.36 by
    /// `cargo bench --bench finish`, its slowest of 1 to 6 K waves), times the
    /// memcpy one A76 core of an RK3588 board reaches ([`A76_MEMCPY_BYTES_PER_S`]). The
    /// verifier's time per task is the x86-64 figure (11 µs) doubled, an assumed ratio of
    /// the two cores' scalar speed.
    ///
    /// [`measure`]: ../../../compute/host_profile/fn.measure.html
    pub fn cortex_a76() -> HostProfile {
        HostProfile {
            name: "cortex-a76 (estimate)",
            prepare_bytes_per_s: 0.10 * A76_MEMCPY_BYTES_PER_S,
            finish_bytes_per_s: 0.36 * A76_MEMCPY_BYTES_PER_S,
            verify_task_s: 2.0 * 11.0e-6,
        }
    }

    /// Checks that every rate and time is finite and positive ([`Error::OutOfRange`]
    /// naming the field): a cost is never computed from a profile that would make it
    /// NaN or infinite.
    pub fn check(&self) -> Result<()> {
        let fields = [
            ("host profile prepare_bytes_per_s", self.prepare_bytes_per_s),
            ("host profile finish_bytes_per_s", self.finish_bytes_per_s),
            ("host profile verify_task_s", self.verify_task_s),
        ];
        for (what, v) in fields {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::OutOfRange {
                    what,
                    index: 0,
                    value: v.to_string(),
                    range: "finite and positive",
                });
            }
        }
        Ok(())
    }
}

/// The host's share of one call of a plan, in seconds, by part.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HostCost {
    /// The profile's name.
    pub profile: &'static str,
    /// Quantising or rounding the activations and packing them into A.
    pub prepare_s: f64,
    /// Reading C, summing the K waves, unpacking and scaling.
    pub finish_s: f64,
    /// The pre-submit verifier over the plan's tasks: once, when a `Matmul` binds the
    /// program, so not part of [`HostCost::total_s`].
    pub verify_s: f64,
}

impl HostCost {
    /// The host work of one call: preparing A and finishing C.
    pub fn total_s(&self) -> f64 {
        self.prepare_s + self.finish_s
    }
}

impl fmt::Display for HostCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |s: f64| s * 1e3;
        write!(
            f,
            "host {:.2} ms (prepare A {:.2}, finish C {:.2}; verify {:.2} once) on {}",
            ms(self.total_s()),
            ms(self.prepare_s),
            ms(self.finish_s),
            ms(self.verify_s),
            self.profile
        )
    }
}

impl Plan {
    /// The host work of one call of this plan on `host`, and the verification of its
    /// program once (the module documentation has the formula). A profile value that is not finite and positive is an
    /// [`Error::OutOfRange`].
    pub fn host_cost(&self, host: &HostProfile) -> Result<HostCost> {
        host.check()?;
        Ok(HostCost {
            profile: host.name,
            prepare_s: self.a_bytes as f64 / host.prepare_bytes_per_s,
            finish_s: self.c_bytes as f64 / host.finish_bytes_per_s,
            verify_s: self.tasks.len() as f64 * host.verify_task_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::MatmulSpec;
    use crate::kernels::single::Dtype;

    fn profile() -> HostProfile {
        HostProfile {
            name: "test",
            prepare_bytes_per_s: 1e9,
            finish_bytes_per_s: 2e9,
            verify_task_s: 1e-6,
        }
    }

    #[test]
    fn each_part_is_its_bytes_over_its_rate() {
        let plan = Plan::new(MatmulSpec::new(64, 4096, 4096, Dtype::Int8).on_cores(3)).unwrap();
        let c = plan.host_cost(&profile()).unwrap();
        assert_eq!(c.prepare_s, plan.a_bytes as f64 / 1e9);
        assert_eq!(c.finish_s, plan.c_bytes as f64 / 2e9);
        assert_eq!(c.verify_s, plan.tasks.len() as f64 * 1e-6);
        // Verification happens once per binding, not per call.
        assert_eq!(c.total_s(), c.prepare_s + c.finish_s);
        // More K waves write more partial blocks for the host to finish.
        let mut layouts =
            crate::kernels::matmul::WeightLayout::candidates(4096, 4096, Dtype::Int8, 512, 3)
                .unwrap();
        layouts.sort_by_key(|l| l.waves.len());
        let (fewest, most) = (layouts.first().unwrap(), layouts.last().unwrap());
        assert!(most.waves.len() > fewest.waves.len(), "{layouts:?}");
        let cost = |l| {
            Plan::for_layout(l, 512, crate::kernels::single::OutType::Int32, 3)
                .unwrap()
                .host_cost(&profile())
                .unwrap()
                .finish_s
        };
        assert!(cost(most) > cost(fewest));
    }

    #[test]
    fn a_profile_value_that_is_not_finite_and_positive_is_refused() {
        let plan = Plan::new(MatmulSpec::new(1, 64, 32, Dtype::Int8)).unwrap();
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            for field in 0..3 {
                let mut p = profile();
                match field {
                    0 => p.prepare_bytes_per_s = bad,
                    1 => p.finish_bytes_per_s = bad,
                    _ => p.verify_task_s = bad,
                }
                assert!(
                    matches!(plan.host_cost(&p), Err(Error::OutOfRange { .. })),
                    "field {field} = {bad}"
                );
            }
        }
        assert!(HostProfile::cortex_a76().check().is_ok());
    }

    #[test]
    fn the_line_names_each_part() {
        let plan = Plan::new(MatmulSpec::new(128, 4096, 4096, Dtype::Int8)).unwrap();
        let line = plan.host_cost(&profile()).unwrap().to_string();
        assert!(line.starts_with("host "), "{line}");
        for part in ["prepare A", "finish C", "verify", " once)", "on test"] {
            assert!(line.contains(part), "{line}");
        }
    }
}
