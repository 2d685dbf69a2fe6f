//! The DPU LUT of the EW stage: its configuration (`LUT_CFG`, `LUT_INFO`, the table ranges
//! and out-of-range slopes) and the upload of its two tables through the access port
//! (`LUT_ACCESS_CFG`, `LUT_ACCESS_DATA`; docs/hardware/lut.md).
//!
//! The tables live in a RAM of the core, not in the register file: a task body uploads
//! them, and later tasks use whatever the RAM holds. So [`Lut::upload`] is written by
//! [`emit`](super::Dpu) but never read back by decoding — the two port registers are not
//! register-file state ([`is_port`]), and a decoded task always has `upload: None`.

use super::bit;
use crate::error::{Error, Result};
use crate::regcmd::TaskBuilder;
use crate::regs::{CommandRegister, Field, Register, dpu};
use crate::task::read::{Decoded, Reader};

/// Entries of each of the two tables (docs/hardware/lut.md#tables).
pub const LUT_ENTRIES: usize = 513;

/// Segments each table's range is cut into (one fewer than its entries).
pub const LUT_SEGMENTS: i64 = 512;

/// The contents of the two tables: LE (table id 0) and LO (table id 1), 16-bit entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LutTables {
    /// The LE table.
    pub le: [i16; LUT_ENTRIES],
    /// The LO table.
    pub lo: [i16; LUT_ENTRIES],
}

impl LutTables {
    /// The table with id `id` (0: LE, 1: LO).
    pub fn table(&self, id: usize) -> Option<&[i16; LUT_ENTRIES]> {
        match id {
            0 => Some(&self.le),
            1 => Some(&self.lo),
            _ => None,
        }
    }
}

/// One table's out-of-range slopes: the output moves by `(X − edge) × scale / 2^shift`
/// past the edge (docs/hardware/lut.md#arithmetic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LutSlope {
    /// `*_SLOPE_UFLOW_SCALE` (bits 15:0 of `*_SLOPE_SCALE`, signed).
    pub uflow_scale: i16,
    /// `*_SLOPE_UFLOW_SHIFT` (bits 4:0 of `*_SLOPE_SHIFT`).
    pub uflow_shift: u32,
    /// `*_SLOPE_OFLOW_SCALE` (bits 31:16 of `*_SLOPE_SCALE`, signed).
    pub oflow_scale: i16,
    /// `*_SLOPE_OFLOW_SHIFT` (bits 9:5 of `*_SLOPE_SHIFT`).
    pub oflow_shift: u32,
}

/// One table's range in the index domain and its index bit-select.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LutRange {
    /// `LUT_*_START` (signed).
    pub start: i32,
    /// `LUT_*_END` (signed).
    pub end: i32,
    /// `LUT_INFO.LUT_*_INDEX_SELECT`: a segment is `2^index_select` index units.
    pub index_select: u32,
    /// The slopes past the range.
    pub slope: LutSlope,
}

/// The LUT's configuration, present when `EW_CFG.EW_LUT_BYPASS` is clear.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lut {
    /// `LUT_CFG.LUT_ROAD_SEL`.
    pub road_sel: bool,
    /// `LUT_CFG.LUT_EXPAND_EN`: the two tables joined into one.
    pub expand: bool,
    /// `LUT_CFG.LUT_LO_LE_MUX` (encoding undocumented; every program that ran writes 2).
    pub lo_le_mux: u32,
    /// `LUT_CFG.LUT_UFLOW_PRIORITY`: on underflow of both tables use LO (else LE).
    pub uflow_lo: bool,
    /// `LUT_CFG.LUT_OFLOW_PRIORITY`: on overflow of both tables use LO (else LE).
    pub oflow_lo: bool,
    /// `LUT_CFG.LUT_HYBRID_PRIORITY`: when both tables hit (or one under- and one
    /// overflows) use LO (else LE).
    pub hybrid_lo: bool,
    /// `LUT_CFG.LUT_CAL_SEL` (only with `expand`).
    pub cal_sel: bool,
    /// The LE table's range.
    pub le: LutRange,
    /// The LO table's range.
    pub lo: LutRange,
    /// The tables this task's body uploads before its configuration, `None` when the
    /// task uses what the RAM already holds. Never set by decoding.
    pub upload: Option<LutTables>,
}

impl Lut {
    /// The hybrid configuration every board-run program writes (`LUT_CFG` 0x68: hybrid and
    /// overflow priority LO, underflow LE, mux 2), with the LE table over
    /// `[−512·2^sel, 0]` and the LO table over `[0, 512·2^sel]`, no slopes and no upload.
    pub fn hybrid(index_select: u32) -> Result<Lut> {
        if index_select > 21 {
            return Err(Error::Unsupported {
                what: "LUT index select",
                why: format!(
                    "{index_select}: 512 segments of 2^{index_select} overflow the 32-bit range registers"
                ),
            });
        }
        let span = (LUT_SEGMENTS << index_select) as i32;
        Ok(Lut {
            road_sel: false,
            expand: false,
            lo_le_mux: 2,
            uflow_lo: false,
            oflow_lo: true,
            hybrid_lo: true,
            cal_sel: false,
            le: LutRange {
                start: -span,
                end: 0,
                index_select,
                slope: LutSlope::default(),
            },
            lo: LutRange {
                start: 0,
                end: span,
                index_select,
                slope: LutSlope::default(),
            },
            upload: None,
        })
    }

    /// The same configuration uploading `tables` first.
    pub fn with_upload(mut self, tables: LutTables) -> Lut {
        self.upload = Some(tables);
        self
    }

    /// The same configuration without an upload (what decoding a task gives).
    pub fn without_upload(mut self) -> Lut {
        self.upload = None;
        self
    }
}

/// One table's slope fields: `*_SLOPE_SCALE` (underflow, overflow; signed 16-bit) and
/// `*_SLOPE_SHIFT` (underflow, overflow). LE and LO have the same layout in registers of
/// their own.
struct SlopeFields<S, H> {
    scale: [Field<S>; 2],
    shift: [Field<H>; 2],
}

/// The LE table's slope fields.
const LE_SLOPE: SlopeFields<dpu::LutLeSlopeScale, dpu::LutLeSlopeShift> = SlopeFields {
    scale: [
        dpu::LutLeSlopeScale::LUT_LE_SLOPE_UFLOW_SCALE,
        dpu::LutLeSlopeScale::LUT_LE_SLOPE_OFLOW_SCALE,
    ],
    shift: [
        dpu::LutLeSlopeShift::LUT_LE_SLOPE_UFLOW_SHIFT,
        dpu::LutLeSlopeShift::LUT_LE_SLOPE_OFLOW_SHIFT,
    ],
};

/// The LO table's slope fields.
const LO_SLOPE: SlopeFields<dpu::LutLoSlopeScale, dpu::LutLoSlopeShift> = SlopeFields {
    scale: [
        dpu::LutLoSlopeScale::LUT_LO_SLOPE_UFLOW_SCALE,
        dpu::LutLoSlopeScale::LUT_LO_SLOPE_OFLOW_SCALE,
    ],
    shift: [
        dpu::LutLoSlopeShift::LUT_LO_SLOPE_UFLOW_SHIFT,
        dpu::LutLoSlopeShift::LUT_LO_SLOPE_OFLOW_SHIFT,
    ],
};

impl<S: CommandRegister, H: CommandRegister> SlopeFields<S, H> {
    /// Writes the scale register, then the shift register.
    fn emit(&self, t: &mut TaskBuilder, s: &LutSlope) -> Result<()> {
        let [uflow_scale, oflow_scale] = self.scale;
        let [uflow_shift, oflow_shift] = self.shift;
        t.write_fields(&[
            (uflow_scale, u32::from(s.uflow_scale as u16)),
            (oflow_scale, u32::from(s.oflow_scale as u16)),
        ])?
        .write_fields(&[(uflow_shift, s.uflow_shift), (oflow_shift, s.oflow_shift)])?;
        Ok(())
    }

    /// Reads the four fields.
    fn decode(&self, r: &mut Reader<'_>) -> LutSlope {
        let [uflow_scale, oflow_scale] = self.scale;
        let [uflow_shift, oflow_shift] = self.shift;
        LutSlope {
            uflow_scale: r.get(uflow_scale) as u16 as i16,
            uflow_shift: r.get(uflow_shift),
            oflow_scale: r.get(oflow_scale) as u16 as i16,
            oflow_shift: r.get(oflow_shift),
        }
    }
}

/// Whether the register at `offset` is one of the two LUT access-port registers, which
/// the PC routes to the LUT RAM and which hold no task configuration.
pub(crate) fn is_port(offset: u16) -> bool {
    offset == dpu::LutAccessCfg::OFFSET || offset == dpu::LutAccessData::OFFSET
}

/// Writes the access port (the upload, or the zero words of a task without one) and the
/// LUT configuration registers, in ascending offsets.
pub(super) fn emit(t: &mut TaskBuilder, lut: Option<&Lut>) -> Result<()> {
    use dpu::*;
    match lut.and_then(|l| l.upload.as_ref()) {
        Some(tables) => {
            for (id, table) in [(0u32, &tables.le), (1, &tables.lo)] {
                t.write_fields(&[
                    (LutAccessCfg::LUT_ACCESS_TYPE, 1),
                    (LutAccessCfg::LUT_TABLE_ID, id),
                    (LutAccessCfg::LUT_ADDR, 0),
                ])?;
                for &v in table {
                    t.write_fields(&[(LutAccessData::LUT_ACCESS_DATA, u32::from(v as u16))])?;
                }
            }
        }
        None => {
            t.write(LutAccessCfg::new()).write(LutAccessData::new());
        }
    }
    let Some(l) = lut else {
        t.write(LutCfg::new())
            .write(LutInfo::new())
            .write(LutLeStart::new())
            .write(LutLeEnd::new())
            .write(LutLoStart::new())
            .write(LutLoEnd::new())
            .write(LutLeSlopeScale::new())
            .write(LutLeSlopeShift::new())
            .write(LutLoSlopeScale::new())
            .write(LutLoSlopeShift::new());
        return Ok(());
    };
    t.write_fields(&[
        (LutCfg::LUT_ROAD_SEL, bit(l.road_sel)),
        (LutCfg::LUT_EXPAND_EN, bit(l.expand)),
        (LutCfg::LUT_LO_LE_MUX, l.lo_le_mux),
        (LutCfg::LUT_UFLOW_PRIORITY, bit(l.uflow_lo)),
        (LutCfg::LUT_OFLOW_PRIORITY, bit(l.oflow_lo)),
        (LutCfg::LUT_HYBRID_PRIORITY, bit(l.hybrid_lo)),
        (LutCfg::LUT_CAL_SEL, bit(l.cal_sel)),
    ])?
    .write_fields(&[
        (LutInfo::LUT_LE_INDEX_SELECT, l.le.index_select),
        (LutInfo::LUT_LO_INDEX_SELECT, l.lo.index_select),
    ])?
    .write_fields(&[(LutLeStart::LUT_LE_START, l.le.start as u32)])?
    .write_fields(&[(LutLeEnd::LUT_LE_END, l.le.end as u32)])?
    .write_fields(&[(LutLoStart::LUT_LO_START, l.lo.start as u32)])?
    .write_fields(&[(LutLoEnd::LUT_LO_END, l.lo.end as u32)])?;
    LE_SLOPE.emit(t, &l.le.slope)?;
    LO_SLOPE.emit(t, &l.lo.slope)?;
    Ok(())
}

/// Marks the LUT configuration registers inert: the EW stage that holds the LUT is
/// bypassed (docs/simulator.md, "Inert fields").
pub(super) fn inert(r: &mut Reader<'_>) {
    use dpu::*;
    r.inert_register::<LutCfg>();
    r.inert_register::<LutInfo>();
    r.inert_register::<LutLeStart>();
    r.inert_register::<LutLeEnd>();
    r.inert_register::<LutLoStart>();
    r.inert_register::<LutLoEnd>();
    r.inert_register::<LutLeSlopeScale>();
    r.inert_register::<LutLeSlopeShift>();
    r.inert_register::<LutLoSlopeScale>();
    r.inert_register::<LutLoSlopeShift>();
}

/// Reads the LUT configuration (every field of `LUT_CFG`, `LUT_INFO`, the four range
/// registers and the four slope registers). The access-port registers are not read: the
/// PC routes them to the LUT RAM.
pub(super) fn decode(r: &mut Reader<'_>) -> Decoded<Lut> {
    use dpu::*;
    let le = LutRange {
        start: r.get(LutLeStart::LUT_LE_START) as i32,
        end: r.get(LutLeEnd::LUT_LE_END) as i32,
        index_select: r.get(LutInfo::LUT_LE_INDEX_SELECT),
        slope: LE_SLOPE.decode(r),
    };
    let lo = LutRange {
        start: r.get(LutLoStart::LUT_LO_START) as i32,
        end: r.get(LutLoEnd::LUT_LO_END) as i32,
        index_select: r.get(LutInfo::LUT_LO_INDEX_SELECT),
        slope: LO_SLOPE.decode(r),
    };
    Ok(Lut {
        road_sel: r.flag(LutCfg::LUT_ROAD_SEL),
        expand: r.flag(LutCfg::LUT_EXPAND_EN),
        lo_le_mux: r.get(LutCfg::LUT_LO_LE_MUX),
        uflow_lo: r.flag(LutCfg::LUT_UFLOW_PRIORITY),
        oflow_lo: r.flag(LutCfg::LUT_OFLOW_PRIORITY),
        hybrid_lo: r.flag(LutCfg::LUT_HYBRID_PRIORITY),
        cal_sel: r.flag(LutCfg::LUT_CAL_SEL),
        le,
        lo,
        upload: None,
    })
}
