//! Published board timings held against the cost model, plan for plan: each
//! [`Row`] is one figure a public project or vendor tool measured for a matmul on an
//! RK3588 (its shape, precision, cores, NPU clock, driver, the tiles it ran where the
//! source states them, and what the figure includes), [`Row::model`] plans it as it ran
//! and costs it on the profile of its driver and clock. The project's table is
//! fixtures/calibration/published-timings.tsv; tests/calibration.rs checks the model against
//! it and docs/matmul.md ("Calibration") shows the result.
//!
//! Text format: one row per line, eleven tab-separated fields (`id`, `MxKxN`, dtype,
//! cores, MHz, driver, tiling, includes, microseconds, source, note); lines starting
//! with `#` and blank lines are skipped. The fixture's header documents each field.

use super::HardwareProfile;
use crate::error::{Error, Result};
use crate::kernels::matmul::host_cost::A76_MEMCPY_BYTES_PER_S;
use crate::kernels::matmul::{I4_ANY_WEIGHTS, MatmulSpec, Plan, TileLimits, WeightLayout};
use crate::kernels::single::{Dtype, OutType};

/// The software a published figure ran through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// Rockchip's matmul API (`rknn_matmul_run` of librknnrt) over the vendor driver.
    VendorApi,
    /// Register programs of its own over the vendor `rknpu` driver (as this library).
    Vendor,
    /// Mainline `rocket`, one open device per core used.
    Rocket,
}

impl Driver {
    /// The profile a row of this driver is costed on, at `mhz` and on `cores` cores.
    ///
    /// * vendor: [`HardwareProfile::rk3588`].
    /// * rocket: [`HardwareProfile::rk3588_rocket`] with one open device per core, as the
    ///   published multi-core rocket runs did.
    /// * vendor API: the vendor driver as Rockchip's runtime drives it, which
    ///   its own figures show to differ from a raw submission: 30 µs per call (its
    ///   smallest cells, 128×128×64 fp16 and int8 in 31 and 30 µs, row A1.21;
    ///   `airockchip/rknn-toolkit2` issue 154: 0.03 ms), no measurable cost per further
    ///   task (rows A1.24a and A1.24c: calls of three tasks take the floor plus their
    ///   bytes), and 7.8 GB/s per core (its GEMVs stream 7.5–7.9 GB/s whatever the
    ///   type, rows A1.16–A1.19).
    pub fn profile(self, mhz: u32, cores: u32) -> HardwareProfile {
        let mut p = match self {
            Driver::VendorApi | Driver::Vendor => HardwareProfile::rk3588(),
            Driver::Rocket => HardwareProfile::rk3588_rocket(),
        };
        match self {
            Driver::VendorApi => {
                p.name = "rk3588 (vendor matmul API)";
                p.per_submit_vendor_s = 30.0e-6;
                p.per_task_vendor_s = 0.0;
                p.core_dram_bytes_per_s = 7.8e9;
            }
            Driver::Rocket => p.rocket_devices = cores.max(1),
            Driver::Vendor => {}
        }
        p.at_clock(mhz as f64 * 1e6)
    }

    fn parse(s: &str) -> Option<Driver> {
        match s {
            "vendor-api" => Some(Driver::VendorApi),
            "vendor" => Some(Driver::Vendor),
            "rocket" => Some(Driver::Rocket),
            _ => None,
        }
    }

    /// The name the table uses.
    pub fn name(self) -> &'static str {
        match self {
            Driver::VendorApi => "vendor-api",
            Driver::Vendor => "vendor",
            Driver::Rocket => "rocket",
        }
    }
}

/// What a published time covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Includes {
    /// Submission to completion, operands resident: NPU time.
    Npu,
    /// NPU time and the host's copy of A in and C out (modelled at
    /// [`A76_MEMCPY_BYTES_PER_S`]).
    Copy,
    /// NPU time, the copy of A, and the host's sum of the K waves' partials (modelled
    /// with the plan's [`super::super::host_cost`] finishing term).
    Reduce,
}

impl Includes {
    /// The name the table uses.
    pub fn name(self) -> &'static str {
        match self {
            Includes::Npu => "npu",
            Includes::Copy => "copy",
            Includes::Reduce => "reduce",
        }
    }
}

/// The tiles a row ran, where its source states them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiling {
    /// K channels per wave (`k=`); `None`: the widest the library allows for the M.
    pub k_tile: Option<u32>,
    /// Rows per M tile and columns per column tile at most (`rows=`, `cols=`), and
    /// whether the cores split M (`split-rows`).
    pub limits: TileLimits,
    /// One submission per task (`unchained`).
    pub unchained: bool,
}

/// One published timing.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The table's name for it.
    pub id: String,
    /// The shape, precision (int8, int4, fp16) and cores it ran.
    pub spec: MatmulSpec,
    /// NPU clock in MHz.
    pub mhz: u32,
    /// The software it ran through.
    pub driver: Driver,
    /// The tiles it ran; `None`: the library's own plan ([`Plan::cheapest`]).
    pub tiling: Option<Tiling>,
    /// What the figure covers.
    pub includes: Includes,
    /// The published time, in seconds.
    pub published_s: f64,
    /// Where it was published.
    pub source: String,
    /// What it ran and how it is modelled.
    pub note: String,
}

/// A row's modelled time.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Modelled {
    /// The NPU job, in seconds.
    pub npu_s: f64,
    /// The host work the figure includes, in seconds (0 for [`Includes::Npu`]).
    pub host_s: f64,
    /// Tasks of the plan the row is modelled with.
    pub tasks: usize,
}

impl Modelled {
    /// NPU and host, in seconds.
    pub fn total_s(&self) -> f64 {
        self.npu_s + self.host_s
    }
}

fn bad(line: usize, why: String) -> Error {
    Error::Unsupported {
        what: "calibration row",
        why: format!("line {line}: {why}"),
    }
}

/// Parses the rows of `text` (the module documentation has the format). A malformed
/// line, or a row the planner cannot express (a precision other than int8, int4 and
/// fp16, no cores, a tile limit below one granule), is [`Error::Unsupported`] naming
/// the line.
pub fn parse(text: &str) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 11 {
            return Err(bad(n, format!("{} tab-separated fields, not 11", f.len())));
        }
        let num = |what: &str, s: &str| -> Result<u32> {
            s.parse()
                .map_err(|_| bad(n, format!("{what} {s:?} is not a whole number")))
        };
        let dims: Vec<&str> = f[1].split('x').collect();
        let [m, k, n_] = dims[..] else {
            return Err(bad(n, format!("shape {:?} is not MxKxN", f[1])));
        };
        let (m, k, n_) = (num("M", m)?, num("K", k)?, num("N", n_)?);
        let dtype = match f[2] {
            "int8" => Dtype::Int8,
            "int4" => Dtype::Int4,
            "fp16" => Dtype::Fp16,
            other => return Err(bad(n, format!("precision {other:?}"))),
        };
        let cores = num("cores", f[3])?;
        if !(1..=3).contains(&cores) || m == 0 || k == 0 || n_ == 0 {
            return Err(bad(n, format!("{m}x{k}x{n_} on {cores} cores")));
        }
        let mhz = num("clock", f[4])?;
        let driver = Driver::parse(f[5]).ok_or_else(|| bad(n, format!("driver {:?}", f[5])))?;
        let tiling = parse_tiling(f[6]).map_err(|why| bad(n, why))?;
        let includes = match f[7] {
            "npu" => Includes::Npu,
            "copy" => Includes::Copy,
            "reduce" => Includes::Reduce,
            other => return Err(bad(n, format!("includes {other:?}"))),
        };
        let us: f64 = f[8]
            .parse()
            .map_err(|_| bad(n, format!("time {:?}", f[8])))?;
        if mhz == 0 || !(us.is_finite() && us > 0.0) {
            return Err(bad(n, format!("clock {mhz} MHz, time {us} us")));
        }
        let out = match dtype {
            Dtype::Fp16 => OutType::Fp32,
            _ => OutType::Int32,
        };
        rows.push(Row {
            id: f[0].into(),
            spec: MatmulSpec {
                out,
                ..MatmulSpec::new(m, k, n_, dtype).on_cores(cores)
            },
            mhz,
            driver,
            tiling,
            includes,
            published_s: us * 1e-6,
            source: f[9].into(),
            note: f[10].into(),
        });
    }
    Ok(rows)
}

fn parse_tiling(s: &str) -> std::result::Result<Option<Tiling>, String> {
    if s == "plan" {
        return Ok(None);
    }
    let mut t = Tiling {
        k_tile: None,
        limits: TileLimits::NONE,
        unchained: false,
    };
    for part in s.split(',') {
        let value = |v: &str| v.parse::<u32>().map_err(|_| format!("tiling {part:?}"));
        match part.split_once('=') {
            Some(("k", v)) => t.k_tile = Some(value(v)?),
            Some(("rows", v)) => t.limits.rows = value(v)?,
            Some(("cols", v)) => t.limits.cols = value(v)?,
            None if part == "unchained" => t.unchained = true,
            None if part == "split-rows" => t.limits.split_rows = true,
            _ => return Err(format!("tiling {part:?}")),
        }
    }
    Ok(Some(t))
}

impl Row {
    /// The profile the row is costed on ([`Driver::profile`] at its clock and cores).
    pub fn profile(&self) -> HardwareProfile {
        self.driver.profile(self.mhz, self.spec.cores)
    }

    /// The plan closest to what the row ran: its tiles where stated (int4 waves wider
    /// than any weights allow are taken as certified, [`WeightLayout::certified_i4`]),
    /// else the library's own choice on the row's profile.
    pub fn plan(&self) -> Result<Plan> {
        let s = &self.spec;
        let Some(t) = self.tiling else {
            return Plan::cheapest(*s, &self.profile());
        };
        let layout = match t.k_tile {
            Some(kt) if s.dtype == Dtype::Int4 && kt > I4_ANY_WEIGHTS => {
                // Zero magnitudes stand for weights whose sums cannot saturate: only
                // the layout is used.
                let granules = s.k.div_ceil(32) as usize * s.n as usize;
                let l = WeightLayout::certified_i4(s.k, s.n, &vec![0; granules])?;
                if l.k_tile() != kt.min(s.k) {
                    return Err(Error::Unsupported {
                        what: "calibration row",
                        why: format!(
                            "{}: int4 waves of {kt} channels (widest {})",
                            self.id,
                            l.k_tile()
                        ),
                    });
                }
                l
            }
            Some(kt) => WeightLayout::with_k_tile(s.k, s.n, s.dtype, kt)?,
            None => WeightLayout::for_max_rows(s.k, s.n, s.dtype, s.m)?,
        };
        Plan::with_limits(&layout, s.m, s.out, s.cores, t.limits)
    }

    /// The model's time for what the row's figure covers.
    pub fn model(&self) -> Result<Modelled> {
        let profile = self.profile();
        let plan = self.plan()?;
        let unchained = self.tiling.is_some_and(|t| t.unchained);
        let cost = if unchained {
            plan.cost_unchained(&profile)?
        } else {
            plan.cost(&profile)?
        };
        let s = &self.spec;
        let a = s.m as u64 * s.k as u64 * s.dtype.bits() as u64 / 8;
        let c = s.m as u64 * s.n as u64 * s.out.bytes() as u64;
        let copy = |bytes: u64| bytes as f64 / A76_MEMCPY_BYTES_PER_S;
        let host_s = match self.includes {
            Includes::Npu => 0.0,
            Includes::Copy => copy(a + c),
            Includes::Reduce => copy(a) + cost.host.finish_s,
        };
        Ok(Modelled {
            npu_s: cost.seconds,
            host_s,
            tasks: plan.tasks.len(),
        })
    }

    /// Whether the row is a GEMV (one row of A).
    pub fn is_gemv(&self) -> bool {
        self.spec.m == 1
    }

    /// The row's shape, `MxKxN`.
    pub fn shape(&self) -> String {
        format!("{}x{}x{}", self.spec.m, self.spec.k, self.spec.n)
    }
}

/// The tiling field of `row` as the table writes it.
pub fn tiling_text(row: &Row) -> String {
    let Some(t) = row.tiling else {
        return "plan".into();
    };
    let mut parts = Vec::new();
    if let Some(k) = t.k_tile {
        parts.push(format!("k={k}"));
    }
    if t.limits.rows != u32::MAX {
        parts.push(format!("rows={}", t.limits.rows));
    }
    if t.limits.cols != u32::MAX {
        parts.push(format!("cols={}", t.limits.cols));
    }
    if t.limits.split_rows {
        parts.push("split-rows".into());
    }
    if t.unchained {
        parts.push("unchained".into());
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROW: &str = "X.1\t128x4096x4096\tint8\t3\t1000\tvendor\tk=1024,rows=64,split-rows\tcopy\t5000\tsrc\tnote";

    #[test]
    fn a_row_parses_into_its_fields_and_back() {
        let rows = parse(&format!("# comment\n\n{ROW}\n")).unwrap();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(
            (r.spec.m, r.spec.k, r.spec.n, r.spec.cores),
            (128, 4096, 4096, 3)
        );
        assert_eq!(
            (r.spec.dtype, r.driver, r.includes),
            (Dtype::Int8, Driver::Vendor, Includes::Copy)
        );
        assert_eq!(r.published_s, 5000e-6);
        assert_eq!(tiling_text(r), "k=1024,rows=64,split-rows");
        let plan = r.plan().unwrap();
        assert_eq!(plan.layout.k_tile(), 1024);
        assert!(plan.m_tile <= 64);
        // The cores split the M tiles: each core starts at column 0, and no row is on
        // two cores.
        assert_eq!(plan.per_core.len(), 3);
        for core in 0..3u32 {
            let mine = plan.tasks.iter().filter(|t| t.core == core);
            assert!(mine.clone().any(|t| t.n0 == 0), "core {core}");
            let others = plan.tasks.iter().filter(|t| t.core != core);
            assert!(mine.clone().all(|t| others.clone().all(|o| o.m0 != t.m0)));
        }
        let m = r.model().unwrap();
        assert!(m.npu_s > 0.0 && m.host_s > 0.0, "{m:?}");
    }

    #[test]
    fn a_row_the_planner_cannot_express_is_a_typed_error() {
        for bad_row in [
            ROW.replace("int8", "int16"),
            ROW.replace("\t3\t", "\t4\t"),
            ROW.replace("128x4096x4096", "128x4096"),
            ROW.replace("vendor\tk", "npu\tk"),
            ROW.replace("rows=64", "rows=x"),
            ROW.replace("rows=64", "lanes=2"),
            ROW.replace("copy", "all"),
            ROW.replace("5000", "NaN"),
            ROW.replace("5000", "-1"),
            ROW.replace("\tnote", ""),
        ] {
            match parse(&bad_row) {
                Err(Error::Unsupported { what, why }) => {
                    assert_eq!(what, "calibration row");
                    assert!(why.starts_with("line 1: "), "{why}");
                }
                other => panic!("{bad_row}: {other:?}"),
            }
        }
        // Parsed, but no plan: a column limit below the granule.
        let r = &parse(&ROW.replace("rows=64", "cols=16")).unwrap()[0];
        assert!(matches!(r.plan(), Err(Error::Unsupported { .. })));
    }
}
