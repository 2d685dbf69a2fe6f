//! The allow-list and the known deviations, by the generated field constants.

use super::*;

// ---------------------------------------------------------------------------------------
// Fields, named by the generated constants.

/// One field of one register: the register's offset and the field's row of the table.
#[derive(Clone, Copy)]
pub(crate) struct FieldRef {
    pub(crate) offset: u16,
    pub(crate) info: &'static FieldInfo,
    pub(crate) register: &'static str,
}

impl FieldRef {
    /// Whether `f` of `r` (a row of [`REGISTERS`]) is this field.
    pub(crate) fn is(&self, r: &RegisterInfo, f: &FieldInfo) -> bool {
        self.offset == r.offset && self.info == f
    }
}

pub(crate) fn field<R: Register>(f: Field<R>) -> FieldRef {
    FieldRef {
        offset: R::OFFSET,
        info: f.info(),
        register: R::NAME,
    }
}

/// A field that may differ, and why.
pub(crate) struct Allowed {
    pub(crate) field: FieldRef,
    pub(crate) why: &'static str,
}

/// The fields that may differ between a vendor program and the library's for the same
/// shape. Each is a geometry or address choice that does not change what is computed; the
/// ones that are choices of the vendor (grains, bank split, reuse) are checked for
/// soundness in [`check_choices`].
pub(crate) fn allow_list() -> Vec<Allowed> {
    vec![
        Allowed {
            field: field(cna::FeatureDataAddr::FEATURE_BASE_ADDR),
            why: "DMA address of A: the capture's buffer, ours bound elsewhere (tile offsets checked)",
        },
        Allowed {
            field: field(cna::DcompAddr0::DECOMPRESS_ADDR0),
            why: "DMA address of B: the capture's buffer, ours bound elsewhere (tile offsets checked)",
        },
        Allowed {
            field: field(dpu::DstBaseAddr::DST_BASE_ADDR),
            why: "DMA address of C: the capture's buffer, ours bound elsewhere (tile offsets checked)",
        },
        Allowed {
            field: field(cna::ConvCon2::FEATURE_GRAINS),
            why: "lines the CNA fetches ahead: the vendor caps them near two banks of lines, \
                  the library writes M + 1 (quirk 5); timing only, both at least 1",
        },
        Allowed {
            field: field(cna::CbufCon0::DATA_BANK),
            why: "CBUF split: the vendor keeps its first tile's split for a shorter last tile, \
                  the library sizes it to the tile; both hold the tile (checked)",
        },
        Allowed {
            field: field(cna::CbufCon0::WEIGHT_BANK),
            why: "the other half of the same CBUF split (12 banks in both, checked)",
        },
        Allowed {
            field: field(cna::CbufCon0::WEIGHT_REUSE),
            why: "the vendor chain keeps the weights the previous task loaded; a standalone \
                  task loads them (checked: same weights, same banks, not the first task)",
        },
    ]
}

/// A value difference of the generator: the field, the vendor's value and the library's.
pub(crate) struct Deviation {
    pub(crate) field: FieldRef,
    pub(crate) vendor: u32,
    pub(crate) library: u32,
    pub(crate) note: &'static str,
}

/// Differences that are not geometry. They are reported (docs/conformance.md), not
/// allowed: each must still be observed with exactly these values, so settling one in the
/// generator makes this test name the entry to remove.
pub(crate) fn known_deviations() -> Vec<Deviation> {
    // None left: QD_EN (set for every precision) and OD_BYPASS (clear for int8) follow the
    // vendor's programs since they were found here.
    Vec::new()
}
