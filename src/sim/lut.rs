//! The DPU LUT: the per-core table RAM the access port writes, the checks of a task's LUT
//! configuration, and the arithmetic (docs/hardware/lut.md, docs/simulator.md "LUT").
//!
//! The model of one element, all in fp32 with every operation rounded to nearest even:
//!
//! 1. `X` is the BN stage's result (`x · BN_MUL + BN_ALU` in the LUT programs).
//! 2. Each table *hits* when `START ≤ X ≤ END`, *underflows* below, *overflows* above.
//!    One hit: that table. Both hit: `LUT_HYBRID_PRIORITY`. Both miss: both underflow →
//!    `LUT_UFLOW_PRIORITY`, both overflow → `LUT_OFLOW_PRIORITY`, one of each →
//!    `LUT_HYBRID_PRIORITY` (1 = LO).
//! 3. Hit: `t = (X − START) · 2^−INDEX_SELECT`, `i = ⌊t⌋`, `f = t − i`,
//!    `y = T[i] + f · (T[i+1] − T[i])` (`y = T[512]` at `X = END`). The fraction keeps
//!    every bit of `X` (the interpolation's precision is not published; this is the
//!    model's choice, docs/hardware/lut.md#precision).
//! 4. Underflow: `y = T[0] + (X − START) · UFLOW_SCALE / 2^UFLOW_SHIFT`; overflow:
//!    `y = T[512] + (X − END) · OFLOW_SCALE / 2^OFLOW_SHIFT`, with the chosen table's
//!    slopes.
//! 5. The output converter: `(y + OFFSET) · SCALE · 2^−MINUS_EXP` with `CVT_TYPE` 1,
//!    `(y · SCALE + OFFSET) · 2^−MINUS_EXP` with 0; the write DMA narrows to fp16.

use super::error::{At, SimError, at_most, inconsistent, unsupported};
use crate::regs::{Register, dpu};
use crate::task::{self, LUT_ENTRIES, LUT_SEGMENTS, Precision};

/// The LUT RAM of one core: two tables of 513 16-bit entries, which entries were written
/// since reset, and the access port's state. It persists across tasks and kicks (it is
/// not part of the ping-pong register groups); a soft reset clears it.
#[derive(Clone)]
pub(super) struct LutRam {
    tables: [[i16; LUT_ENTRIES]; 2],
    written: [[bool; LUT_ENTRIES]; 2],
    /// `LUT_ACCESS_CFG` as last written: write access, table id, next address.
    write: bool,
    table: usize,
    addr: usize,
}

impl LutRam {
    pub(super) fn new() -> LutRam {
        LutRam {
            tables: [[0; LUT_ENTRIES]; 2],
            written: [[false; LUT_ENTRIES]; 2],
            write: false,
            table: 0,
            addr: 0,
        }
    }

    /// A write to the access port at `offset` (`LUT_ACCESS_CFG` or `LUT_ACCESS_DATA`).
    /// A data write while the port is set to read access leaves the RAM alone if it
    /// writes 0 (every DPU body writes the two port registers, with 0 when it uploads
    /// nothing); anything else that cannot be a table write is refused.
    pub(super) fn port_write(&mut self, offset: u16, value: u32) -> Result<(), String> {
        use dpu::{LutAccessCfg, LutAccessData};
        if offset == LutAccessCfg::OFFSET {
            self.write = LutAccessCfg::LUT_ACCESS_TYPE.extract(value) == 1;
            self.table = LutAccessCfg::LUT_TABLE_ID.extract(value) as usize;
            self.addr = LutAccessCfg::LUT_ADDR.extract(value) as usize;
            return Ok(());
        }
        let data = LutAccessData::LUT_ACCESS_DATA.extract(value);
        if !self.write {
            if data != 0 {
                return Err(format!(
                    "{} {data:#x} while {} selects read access: no program reads the LUT back",
                    LutAccessData::NAME,
                    LutAccessCfg::LUT_ACCESS_TYPE
                ));
            }
            return Ok(());
        }
        if self.addr >= LUT_ENTRIES {
            return Err(format!(
                "{} past the last entry ({}) of table {}: each table holds {LUT_ENTRIES} entries",
                LutAccessData::NAME,
                LUT_ENTRIES - 1,
                self.table
            ));
        }
        self.tables[self.table][self.addr] = data as u16 as i16;
        self.written[self.table][self.addr] = true;
        self.addr += 1;
        Ok(())
    }

    /// The tables, when every entry of both has been written since reset.
    pub(super) fn tables(&self, at: At) -> Result<[[i16; LUT_ENTRIES]; 2], SimError> {
        for (id, w) in self.written.iter().enumerate() {
            if let Some(i) = w.iter().position(|&b| !b) {
                let n = w.iter().filter(|&&b| !b).count();
                return Err(inconsistent(
                    at,
                    dpu::EwCfg::EW_LUT_BYPASS,
                    0,
                    format!(
                        "the LUT is enabled but core {}'s LUT RAM holds no uploaded {} table: {n} entries (the first {i}) were never written through {} since reset",
                        at.core,
                        if id == 0 { "LE" } else { "LO" },
                        dpu::LutAccessData::NAME
                    ),
                ));
            }
        }
        Ok(self.tables)
    }
}

/// One table's range as the arithmetic uses it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Range {
    pub start: f32,
    pub end: f32,
    /// `2^−INDEX_SELECT`.
    pub inv_step: f32,
    /// `UFLOW_SCALE / 2^UFLOW_SHIFT` and `OFLOW_SCALE / 2^OFLOW_SHIFT`.
    pub uflow: f32,
    pub oflow: f32,
}

/// The checked LUT stage of one task (the tables are filled from the core's RAM when
/// the task starts).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Lut {
    pub le: Range,
    pub lo: Range,
    pub uflow_lo: bool,
    pub oflow_lo: bool,
    pub hybrid_lo: bool,
    /// The output converter: offset, scale, `2^−MINUS_EXP`, add first.
    pub offset: f32,
    pub scale: f32,
    pub exp: f32,
    pub add_first: bool,
    /// The decode is signed (a negative offset added first): boards show spikes near
    /// x = 0 (docs/hardware/lut.md#quirks).
    pub signed_decode: bool,
    pub tables: [[i16; LUT_ENTRIES]; 2],
}

impl Eq for Lut {}

/// Which table an index `x` uses, and whether it under- (`-1`) or overflows (`1`) it.
fn choose(l: &Lut, x: f32) -> (usize, i32) {
    let side = |r: &Range| {
        if x < r.start {
            -1
        } else if x > r.end {
            1
        } else {
            0
        }
    };
    let (le, lo) = (side(&l.le), side(&l.lo));
    let pick_lo = match (le, lo) {
        (0, 0) => l.hybrid_lo,
        (0, _) => false,
        (_, 0) => true,
        (-1, -1) => l.uflow_lo,
        (1, 1) => l.oflow_lo,
        _ => l.hybrid_lo,
    };
    if pick_lo { (1, lo) } else { (0, le) }
}

/// The LUT's output code for the index `x` (steps 2–4 of the module documentation).
pub(super) fn lookup(l: &Lut, x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let (id, side) = choose(l, x);
    let r = if id == 0 { &l.le } else { &l.lo };
    let t = &l.tables[id];
    let last = LUT_SEGMENTS as usize;
    match side {
        -1 => f32::from(t[0]) + (x - r.start) * r.uflow,
        1 => f32::from(t[last]) + (x - r.end) * r.oflow,
        _ => {
            let pos = (x - r.start) * r.inv_step;
            let i = (pos.floor() as usize).min(last);
            if i == last {
                return f32::from(t[last]);
            }
            let f = pos - i as f32;
            let (a, b) = (f32::from(t[i]), f32::from(t[i + 1]));
            a + f * (b - a)
        }
    }
}

/// The output converter of the LUT's code (step 5).
pub(super) fn decode_out(l: &Lut, y: f32) -> f32 {
    if l.add_first {
        (y + l.offset) * l.scale * l.exp
    } else {
        (y * l.scale + l.offset) * l.exp
    }
}

/// `2^−e` for `e ≤ 31`.
fn pow2_neg(e: u32) -> f32 {
    1.0 / (1u64 << e) as f32
}

/// Checks a task's LUT stage and the EW stage around it; returns the checked LUT and,
/// through `unvalidated`, what is derived rather than board-run.
pub(super) fn check(
    d: &task::Dpu,
    e: &task::Ew,
    l: &task::Lut,
    at: At,
    unvalidated: &mut Vec<String>,
) -> Result<Lut, SimError> {
    use dpu::{DataFormat, LutCfg, LutLeEnd, LutLeStart, LutLoEnd, LutLoStart, OutCvtScale};
    let fp32 = match d.precision {
        Precision::Fp16 => false,
        Precision::Fp32 => true,
        p => {
            return Err(unsupported(
                at,
                DataFormat::PROC_PRECISION,
                p.code(),
                "the LUT is modelled in the fp16 and fp32 pipelines of the board-run programs only (an integer LUT pipeline has no published program)",
            ));
        }
    };
    if fp32 && (d.out.precision != Precision::Fp32 || d.out_cvt.fp32_to_fp16) {
        return Err(unsupported(
            at,
            DataFormat::OUT_PRECISION,
            d.out.precision.code(),
            format!(
                "the fp32 LUT program that ran writes fp32 (without {})",
                OutCvtScale::FP32TOFP16_EN
            ),
        ));
    }
    if !fp32 && (d.out.precision != Precision::Fp16 || !d.out_cvt.fp32_to_fp16) {
        return Err(unsupported(
            at,
            OutCvtScale::FP32TOFP16_EN,
            u32::from(d.out_cvt.fp32_to_fp16),
            format!(
                "the fp16 LUT programs that ran write fp16 through {} (fp16 output, 1)",
                OutCvtScale::FP32TOFP16_EN
            ),
        ));
    }
    ew_around(e, at)?;
    // LUT_CFG: only the board-run 0x68 has known semantics for its mux fields.
    for (field, v, want) in [
        (LutCfg::LUT_ROAD_SEL, u32::from(l.road_sel), 0),
        (LutCfg::LUT_EXPAND_EN, u32::from(l.expand), 0),
        (LutCfg::LUT_CAL_SEL, u32::from(l.cal_sel), 0),
        (LutCfg::LUT_LO_LE_MUX, l.lo_le_mux, 2),
    ] {
        if v != want {
            return Err(unsupported(
                at,
                field,
                v,
                format!("its meaning is not published; every program that ran writes {want}"),
            ));
        }
    }
    if l.uflow_lo || !l.oflow_lo || !l.hybrid_lo {
        unvalidated.push(format!(
            "{} priorities underflow {}, overflow {}, hybrid {}: every program that ran writes 0, 1, 1 ({} 0x68); the model follows the NVDLA selection rules",
            LutCfg::NAME,
            u32::from(l.uflow_lo),
            u32::from(l.oflow_lo),
            u32::from(l.hybrid_lo),
            LutCfg::NAME
        ));
    }
    let le = range(&l.le, true, at)?;
    let lo = range(&l.lo, false, at)?;
    let span_le = LUT_SEGMENTS << l.le.index_select;
    let span_lo = LUT_SEGMENTS << l.lo.index_select;
    let board = l.le.end == 0
        && l.lo.start == 0
        && i64::from(l.le.start) == -span_le
        && i64::from(l.lo.end) == span_lo
        && l.le.index_select == l.lo.index_select
        && matches!(l.le.index_select, 5 | 6);
    if !board {
        unvalidated.push(format!(
            "LUT ranges LE [{}, {}] select {}, LO [{}, {}] select {}: every program that ran has {} = -{} = 512 << select (5 or 6) and {} = {} = 0",
            l.le.start,
            l.le.end,
            l.le.index_select,
            l.lo.start,
            l.lo.end,
            l.lo.index_select,
            LutLoEnd::NAME,
            LutLeStart::NAME,
            LutLeEnd::NAME,
            LutLoStart::NAME
        ));
    }
    // The output converter: the affine decode of the fixed-point code.
    let c = &d.out_cvt;
    out_converter(c, at, unvalidated)?;
    let scale = c.scale as u16 as i16;
    Ok(Lut {
        le,
        lo,
        uflow_lo: l.uflow_lo,
        oflow_lo: l.oflow_lo,
        hybrid_lo: l.hybrid_lo,
        offset: c.offset as f32,
        scale: f32::from(scale),
        exp: pow2_neg(c.minus_exp),
        add_first: c.add_first,
        signed_decode: c.add_first && c.offset < 0,
        tables: [[0; LUT_ENTRIES]; 2],
    })
}

/// The EW stage around the LUT: every unit but the LUT bypassed (EW_CFG 0x302), or, as
/// rocket-userspace's board-run LUT programs leave it (EW_CFG 0x300), the ALU on with
/// MAX and the zero register operand (checked below): their board outputs are the
/// LUT's, so that exact configuration runs as the LUT alone (docs/hardware/lut.md#ew-around-the-lut).
fn ew_around(e: &task::Ew, at: At) -> Result<(), SimError> {
    use dpu::EwCfg;
    match e.op {
        None | Some(task::EwOp::Alu(task::AluOp::Max)) => {}
        Some(_) => {
            return Err(unsupported(
                at,
                EwCfg::EW_OP_BYPASS,
                0,
                format!(
                    "with the LUT, the EW units run bypassed or, as the board-run {} 0x300 leaves them, as MAX with a zero register operand only (their order with the LUT is not published)",
                    dpu::EwCfg::NAME
                ),
            ));
        }
    }
    if e.src != task::EwSrc::Register {
        return Err(unsupported(
            at,
            EwCfg::EW_OP_SRC,
            1,
            "the LUT programs read no EW operand",
        ));
    }
    if e.cvt.is_some() {
        return Err(unsupported(
            at,
            EwCfg::EW_OP_CVT_BYPASS,
            0,
            "the LUT programs bypass the EW operand converter",
        ));
    }
    if e.relu || e.relux.is_some() {
        return Err(unsupported(
            at,
            EwCfg::EW_RELU_BYPASS,
            0,
            "the LUT programs bypass the EW ReLU and ReLUX",
        ));
    }
    if e.data_size != 0 || e.data_mode != 0 || e.values.iter().any(|&v| v != 0) {
        return Err(unsupported(
            at,
            EwCfg::EDATA_SIZE,
            e.data_size,
            format!(
                "the LUT programs write 0 to {}, {} and the EW operand registers",
                EwCfg::EDATA_SIZE,
                EwCfg::EW_DATA_MODE
            ),
        ));
    }
    Ok(())
}

/// One of the LUT's two ranges (`le`: the LE table's, else the LO table's).
fn range(r: &task::LutRange, le: bool, at: At) -> Result<Range, SimError> {
    use dpu::{LutInfo, LutLeEnd, LutLoEnd};
    let sel = r.index_select;
    if sel > 21 {
        let f = if le {
            LutInfo::LUT_LE_INDEX_SELECT
        } else {
            LutInfo::LUT_LO_INDEX_SELECT
        };
        return Err(unsupported(
            at,
            f,
            sel,
            "512 segments of 2^select index units must fit the 32-bit range registers (0..=21)",
        ));
    }
    let span = i64::from(r.end) - i64::from(r.start);
    if span != LUT_SEGMENTS << sel {
        let why = format!(
            "END - START is {span}, not 512 << INDEX_SELECT {sel} = {}: the table holds 513 entries",
            LUT_SEGMENTS << sel
        );
        return Err(if le {
            inconsistent(at, LutLeEnd::LUT_LE_END, r.end as u32, why)
        } else {
            inconsistent(at, LutLoEnd::LUT_LO_END, r.end as u32, why)
        });
    }
    let s = r.slope;
    if s.uflow_shift > 31 || s.oflow_shift > 31 {
        // 5-bit fields: cannot happen for decoded values.
        return Err(SimError::Setup {
            why: "a LUT slope shift above 31".into(),
        });
    }
    Ok(Range {
        start: r.start as f32,
        end: r.end as f32,
        inv_step: pow2_neg(sel),
        uflow: f32::from(s.uflow_scale) * pow2_neg(s.uflow_shift),
        oflow: f32::from(s.oflow_scale) * pow2_neg(s.oflow_shift),
    })
}

/// The output converter of a LUT task: the affine decode of the fixed-point code.
fn out_converter(c: &task::OutCvt, at: At, unvalidated: &mut Vec<String>) -> Result<(), SimError> {
    use dpu::OutCvtShift;
    if c.shift != 0 {
        return Err(unsupported(
            at,
            OutCvtShift::OUT_CVT_SHIFT,
            c.shift,
            format!(
                "the LUT's float decode scales by {}; no program shifts",
                OutCvtShift::MINUS_EXP
            ),
        ));
    }
    let exp = (OutCvtShift::MINUS_EXP, c.minus_exp);
    at_most(at, exp, 31, "exponents above 31 are not modelled")?;
    let scale = c.scale as u16 as i16;
    let validated = scale == 1 && (c.add_first || (c.offset == 0 && c.minus_exp == 0));
    if !validated {
        unvalidated.push(format!(
            "LUT output converter {} {}, scale {scale}, offset {}, {} {}: the programs that ran add first with scale 1, or write the raw code (scale 1, offset 0, exponent 0)",
            OutCvtShift::CVT_TYPE,
            u32::from(c.add_first),
            c.offset,
            OutCvtShift::MINUS_EXP,
            c.minus_exp
        ));
    }
    Ok(())
}

/// Board-measured hazards of the tables a task uses (docs/hardware/lut.md#quirks), one
/// message each: zero entries under a fixed-point decode, long flat runs, a signed decode.
pub(super) fn quirks(l: &Lut) -> Vec<String> {
    let mut out = Vec::new();
    for (id, t) in l.tables.iter().enumerate() {
        let name = if id == 0 { "LE" } else { "LO" };
        let zeros = t.iter().filter(|&&v| v == 0).count();
        // Measured with the fixed-point decode (MINUS_EXP > 0); the raw-code programs'
        // tables hold zeros and ran.
        if zeros > 0 && l.exp != 1.0 {
            out.push(format!(
                "the {name} table holds {zeros} entries equal to 0: boards decode such entries to about 4.0 (floor entries to 1); the model interpolates them as 0"
            ));
        }
        let mut run = 1;
        let mut longest = (1, 0i16);
        for w in t.windows(2) {
            run = if w[0] == w[1] { run + 1 } else { 1 };
            // The floor 1 and ceiling 32767 of the Q0.15 recipes: their flat tails ran
            // clean on boards (the unit and shifted recipes).
            if run > longest.0 && w[1] != 1 && w[1] != i16::MAX {
                longest = (run, w[1]);
            }
        }
        if longest.0 >= 32 {
            out.push(format!(
                "the {name} table has a flat run of {} equal entries ({}): boards show spikes in exactly flat runs; the model interpolates them",
                longest.0, longest.1
            ));
        }
    }
    if l.signed_decode {
        out.push(format!(
            "signed LUT decode ({} {} added first): boards show spikes of 64..128 for inputs within about 2 index units of 0 at the LE/LO join; the model does not reproduce them",
            dpu::OutCvtOffset::NAME,
            l.offset
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lut(tables: [[i16; LUT_ENTRIES]; 2]) -> Lut {
        let r = |start: f32, end: f32| Range {
            start,
            end,
            inv_step: 1.0 / 32.0,
            uflow: 0.5,
            oflow: 0.25,
        };
        Lut {
            le: r(-16384.0, 0.0),
            lo: r(0.0, 16384.0),
            uflow_lo: false,
            oflow_lo: true,
            hybrid_lo: true,
            offset: 1.0,
            scale: 1.0,
            exp: 1.0 / 32768.0,
            add_first: true,
            signed_decode: false,
            tables,
        }
    }

    fn ramp() -> [[i16; LUT_ENTRIES]; 2] {
        // LE: -1000 at START .. 24 at 0; LO: 7 at 0 .. 1543 at END.
        [
            std::array::from_fn(|i| -1000 + 2 * i as i16),
            std::array::from_fn(|i| 3 * i as i16 + 7),
        ]
    }

    #[test]
    fn points_between_points_and_both_edges_follow_the_model() {
        let l = lut(ramp());
        // On a point: X = START + 10 segments of 32.
        assert_eq!(lookup(&l, -16384.0 + 320.0), -1000.0 + 20.0);
        // A quarter into LO segment 3: 16 + 0.25 × 3.
        assert_eq!(lookup(&l, 3.0 * 32.0 + 8.0), 16.0 + 0.75);
        // X = 0 hits both tables: the hybrid priority picks LO (7, not LE's 24).
        assert_eq!(lookup(&l, 0.0), 7.0);
        // Below LE_START by 10: T_LE[0] + (-10) × 0.5.
        assert_eq!(lookup(&l, -16394.0), -1005.0);
        // Above LO_END by 8: T_LO[512] + 8 × 0.25.
        assert_eq!(lookup(&l, 16392.0), 1543.0 + 2.0);
        // At END exactly: the last entry.
        assert_eq!(lookup(&l, 16384.0), 1543.0);
        // Decode: (y + 1) / 32768.
        assert_eq!(decode_out(&l, 32767.0), 1.0);
    }

    #[test]
    fn the_ram_takes_uploads_and_refuses_what_is_no_upload() {
        use dpu::{LutAccessCfg, LutAccessData};
        let mut ram = LutRam::new();
        let at = At { core: 0, task: 0 };
        assert!(ram.tables(at).is_err());
        // A zero data write in read mode (every body without an upload) is harmless.
        ram.port_write(LutAccessCfg::OFFSET, 0).unwrap();
        ram.port_write(LutAccessData::OFFSET, 0).unwrap();
        assert!(ram.port_write(LutAccessData::OFFSET, 5).is_err());
        for (id, cfg) in [(0, 0x2_0000), (1, 0x3_0000)] {
            ram.port_write(LutAccessCfg::OFFSET, cfg).unwrap();
            for i in 0..LUT_ENTRIES as u32 {
                ram.port_write(LutAccessData::OFFSET, (i + 100 * id) & 0xFFFF)
                    .unwrap();
            }
        }
        assert!(ram.port_write(LutAccessData::OFFSET, 1).is_err());
        let t = ram.tables(at).unwrap();
        assert_eq!((t[0][0], t[0][512], t[1][0], t[1][512]), (0, 512, 100, 612));
    }
}
