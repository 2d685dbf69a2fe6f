//! The DPU's post-processing: the BS, BN and EW stages, the output converter and
//! saturation.

use super::Values;
use crate::float::f16_to_f32;
use crate::sim::exec::{Alu, EwOp, EwSrc, OutCvt, Stage, Task};
use crate::task::Precision;

/// Shift right with rounding: half up (towards +∞) or half to even.
fn shr_round(v: i64, s: u32, half_up: bool) -> i64 {
    if s == 0 {
        return v;
    }
    if s >= 63 {
        return if v < 0 { -1 } else { 0 };
    }
    let q = v >> s;
    let rem = v - (q << s);
    let half = 1i64 << (s - 1);
    if rem > half || (rem == half && (half_up || q & 1 == 1)) {
        q + 1
    } else {
        q
    }
}

fn alu_int(op: Alu, x: i64, o: i64) -> i64 {
    match op {
        Alu::Add => x.saturating_add(o),
        Alu::Minus => x.saturating_sub(o),
        Alu::Max => x.max(o),
        Alu::Min => x.min(o),
    }
}

/// The per-channel operands the BS and BN stages read from memory (BRDMA, NRDMA).
pub(super) struct StageOperands {
    pub bs_alu: Option<Vec<i64>>,
    pub bs_mul: Option<Vec<i64>>,
    pub bn_alu: Option<Vec<i64>>,
    pub bn_mul: Option<Vec<i64>>,
}

/// One integer BS/BN stage; `alu` and `mul` replace the register operands when the stage
/// reads them per channel from memory.
fn stage_int(s: &Stage, mut x: i64, alu: Option<i64>, mul: Option<i64>) -> i64 {
    if let Some((op, o)) = s.alu {
        x = alu_int(op, x, alu.unwrap_or(o));
    }
    if let Some((m, sp, sn, prelu)) = s.mul
        && (!prelu || x < 0)
    {
        let m = mul.unwrap_or(m);
        let shift = if x >= 0 { sp } else { sn };
        x = shr_round(x.saturating_mul(m), shift, true);
    }
    if s.relu {
        x = x.max(0);
    }
    if let Some(cap) = s.relux {
        x = x.min(cap);
    }
    x
}

/// A float BS or BN stage: multiply by the fp16 operand, then add or subtract the fp32
/// operand, then ReLU, each rounded to fp32 (docs/simulator.md, "Float BS and BN").
fn stage_float(s: &Stage, mut x: f32) -> f32 {
    if let Some((m, ..)) = s.mul {
        x *= f16_to_f32(m as u16);
    }
    if let Some((op, o)) = s.alu {
        let a = f32::from_bits(o as u32);
        x = match op {
            Alu::Minus => x - a,
            _ => x + a,
        };
    }
    if s.relu {
        x = x.max(0.0);
    }
    x
}

fn saturate(x: i64, prec: Precision) -> i64 {
    match prec {
        Precision::Int8 => x.clamp(i8::MIN as i64, i8::MAX as i64),
        Precision::Int16 => x.clamp(i16::MIN as i64, i16::MAX as i64),
        Precision::Int4 => x.clamp(-8, 7),
        _ => x.clamp(i32::MIN as i64, i32::MAX as i64),
    }
}

/// The integer output converter. Multiply first (`CVT_TYPE` 0): `round((x × scale) >>
/// shift) + offset`, the offset added after the rounding shift, as measured on an RK3588
/// (gregordinary/rocket-userspace `tests/requant_model.h`, probe
/// `tests/requant_round_probe`: ties to even, offset after rounding, saturation after the
/// offset). Add first (`CVT_TYPE` 1): `round(((x + offset) × scale) >> shift)`.
fn out_cvt_int(c: &OutCvt, x: i64) -> i64 {
    if c.add_first {
        shr_round(
            x.saturating_add(c.offset).saturating_mul(c.scale),
            c.shift,
            c.half_up,
        )
    } else {
        shr_round(x.saturating_mul(c.scale), c.shift, c.half_up).saturating_add(c.offset)
    }
}

/// BS → BN → EW → output converter, element by element (float data: the fp32 BS
/// multiplier, then EW).
pub(super) fn post(t: &Task, main: Values, operand: Option<Values>, so: &StageOperands) -> Values {
    let ew = t.ew.as_ref();
    let channels = t.out.c as usize;
    // The operand index of element `i` (`[pixel][channel]`): per channel or per element.
    let at_op = |i: usize| {
        if ew.is_some_and(|e| e.per_channel) {
            i % channels
        } else {
            i
        }
    };
    let pick = |v: &Option<Vec<i64>>, ch: usize| v.as_ref().map(|v| v[ch]);
    match main {
        Values::Int(mut xs) => {
            let ops = match &operand {
                Some(Values::Int(o)) => Some(o.as_slice()),
                _ => None,
            };
            for (i, x) in xs.iter_mut().enumerate() {
                let mut v = *x;
                let ch = i % channels;
                if let Some(s) = &t.bs {
                    v = stage_int(s, v, pick(&so.bs_alu, ch), pick(&so.bs_mul, ch));
                }
                if let Some(s) = &t.bn {
                    v = stage_int(s, v, pick(&so.bn_alu, ch), pick(&so.bn_mul, ch));
                }
                if let Some(e) = ew {
                    let mut o = match (&e.src, ops) {
                        (EwSrc::Register(r), _) => *r as i32 as i64,
                        (EwSrc::Memory(_), Some(o)) => o[at_op(i)],
                        (EwSrc::Memory(_), None) => 0,
                    };
                    if let Some((off, scale, shift, add_first)) = e.cvt {
                        let c = if add_first {
                            o.saturating_add(off).saturating_mul(scale)
                        } else {
                            o.saturating_mul(scale).saturating_add(off)
                        };
                        o = shr_round(c, shift, true);
                    }
                    match e.op {
                        Some(EwOp::Alu(op)) => v = alu_int(op, v, o),
                        Some(EwOp::Mul(tp, tn)) => {
                            let p = v.saturating_mul(o);
                            v = shr_round(p, if p >= 0 { tp } else { tn }, true);
                        }
                        None => {}
                    }
                    if e.relu {
                        v = v.max(0);
                    }
                    if let Some(cap) = e.relux {
                        v = v.min(cap);
                    }
                }
                *x = out_cvt_int(&t.out_cvt, v);
                if !t.out.prec.is_float() {
                    *x = saturate(*x, t.out.prec);
                }
            }
            if t.out.prec.is_float() {
                Values::Float(xs.into_iter().map(|v| v as f32).collect())
            } else {
                Values::Int(xs)
            }
        }
        Values::Float(mut xs) => {
            let ops = match &operand {
                Some(Values::Float(o)) => Some(o.as_slice()),
                _ => None,
            };
            // The fp32 BS multiplier: one f32 product with the fp16 operand, rounded to
            // nearest even, before the EW stage ((x · row) · w).
            if let Some(bits) = t.bs_f16_mul {
                let m = f16_to_f32(bits);
                for x in xs.iter_mut() {
                    *x *= m;
                }
            }
            for s in [&t.bs_float, &t.bn_float].into_iter().flatten() {
                for x in xs.iter_mut() {
                    *x = stage_float(s, *x);
                }
            }
            if let Some(e) = ew {
                for (i, x) in xs.iter_mut().enumerate() {
                    let o = ops.map_or(0.0, |o| o[at_op(i)]);
                    match e.op {
                        _ if e.dropped => {}
                        Some(EwOp::Alu(Alu::Add)) => *x += o,
                        Some(EwOp::Alu(Alu::Minus)) => *x -= o,
                        Some(EwOp::Alu(Alu::Max)) => *x = x.max(o),
                        Some(EwOp::Alu(Alu::Min)) => *x = x.min(o),
                        Some(EwOp::Mul(..)) => *x *= o,
                        None => {}
                    }
                    if e.relu {
                        *x = x.max(0.0);
                    }
                }
            }
            // The LUT (the EW stage's only unit when it is on) and its output decode.
            if let Some(l) = &t.lut {
                for x in xs.iter_mut() {
                    *x = crate::sim::lut::decode_out(l, crate::sim::lut::lookup(l, *x));
                }
            }
            Values::Float(xs)
        }
    }
}
