//! A matmul's host side around a job: packing activations into the A buffer and
//! reading, reducing and scaling the results out of the C buffer.

use super::*;
use zerocopy::{FromBytes, IntoBytes};

impl Matmul {
    /// Packs activations of any element type into the A buffer; what the job will
    /// compute from them. Integer activations are refused where the program
    /// dequantises on the NPU (its C holds no integer sums).
    pub(super) fn put(&mut self, a: InputSlice<'_>) -> Result<Submitted> {
        match a {
            InputSlice::I8(a) => {
                self.expect(Activations::Int8)?;
                self.integer_results()?;
                self.put_i8(a)?;
                Ok(Submitted::Int)
            }
            InputSlice::I32(a) => {
                self.integer_results()?;
                self.put_int(a)?;
                Ok(Submitted::Int)
            }
            InputSlice::F16(a) => {
                self.put_f16(a)?;
                Ok(Submitted::Float)
            }
            InputSlice::Bf16(a) => {
                self.put_bf16(a)?;
                Ok(Submitted::Float)
            }
            InputSlice::F32(x) => self.put_f32(x),
        }
    }

    /// Reads what `what` computed into `out` in its element type.
    pub(super) fn read(&self, what: Submitted, out: &mut OutputSlice<'_>) -> Result<()> {
        match out {
            OutputSlice::I32(out) => self.read_i32_into(out),
            OutputSlice::I64(out) => {
                shape("result values", self.len_c(), out.len())?;
                out.copy_from_slice(&self.read_int()?);
                Ok(())
            }
            OutputSlice::F32(out) => self.read_f32_of(what, out),
        }
    }

    /// Packs int8 activations into the A buffer (W4A8: their high and low halves).
    pub(super) fn put_i8(&mut self, a: &[i8]) -> Result<()> {
        shape("activation values", self.len_a(), a.len())?;
        match self.bank.layout.dtype {
            Dtype::Int8 => {
                self.pack_a_in_place(|plan, out| pack::activations_i8_into(plan, a, out))
            }
            // W4A8: each value's high and low int4 halves, in one pass.
            _ => self.pack_a_in_place(|plan, out| pack::activations_w4a8_into(plan, a, out)),
        }
    }

    /// Runs `pack` on the first `plan.a_bytes` bytes of the mapped A buffer and hands
    /// the buffer back to the device: activations packed where the NPU reads them, with
    /// no copy of them on the host. The buffer's bytes are unspecified after an error.
    pub(super) fn pack_a_in_place(
        &mut self,
        pack: impl FnOnce(&Plan, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let mut mapped = self.a.map()?;
        let (a_bytes, len) = (self.plan.a_bytes as usize, mapped.len());
        let out = mapped.get_mut(..a_bytes).ok_or(Error::ShapeMismatch {
            what: "A buffer bytes",
            expected: a_bytes as u64,
            actual: len as u64,
        })?;
        pack(&self.plan, out)?;
        mapped.finish()
    }

    /// Packs integer activations of this matmul's type into the A buffer.
    pub(super) fn put_int(&mut self, a: &[i32]) -> Result<()> {
        shape("activation values", self.len_a(), a.len())?;
        match self.acts {
            Activations::Int8 => {
                in_range("activations", a, (-128, 127), "-128..=127")?;
                let a8: Vec<i8> = a.iter().map(|&v| v as i8).collect();
                self.put_i8(&a8)
            }
            Activations::Int4 => {
                in_range("activations", a, (-8, 7), "-8..=7")?;
                let packed = self.plan.pack_a_int(a)?;
                self.a.write(0, &packed)
            }
            Activations::Fp16 | Activations::Bf16 => Err(Error::Precision {
                input: "integer",
                weights: self.bank.layout.dtype.name(),
                output: "fp32",
            }),
        }
    }

    /// Packs float activations, rounded to the bank's 16-bit type (the packer rounds),
    /// into the A buffer of a matmul made for `acts`.
    pub(super) fn put_float(&mut self, acts: Activations, a: &[f32]) -> Result<()> {
        self.expect(acts)?;
        shape("activation values", self.len_a(), a.len())?;
        self.pack_a_in_place(|plan, out| pack::activations_float_into(plan, a, out))
    }

    /// Packs fp16 activations into the A buffer as they are.
    pub(super) fn put_f16(&mut self, a: &[f16]) -> Result<()> {
        self.put_half(Activations::Fp16, a.as_bytes())
    }

    /// Packs bf16 activations into the A buffer as they are.
    pub(super) fn put_bf16(&mut self, a: &[bf16]) -> Result<()> {
        self.put_half(Activations::Bf16, a.as_bytes())
    }

    /// Packs 16-bit float activations of type `acts` (`bytes`: their native-endian
    /// bytes) into the A buffer of a matmul made for them: their bits copied, not
    /// converted.
    fn put_half(&mut self, acts: Activations, bytes: &[u8]) -> Result<()> {
        self.expect(acts)?;
        let bits = <[u16]>::ref_from_bytes(bytes).map_err(|_| Error::InvalidArgument {
            what: "16-bit activations that are not 2-byte aligned".into(),
        })?;
        shape("activation values", self.len_a(), bits.len())?;
        self.pack_a_in_place(|plan, out| pack::activations_half_into(plan, bits, out))
    }

    /// Quantises f32 activations per row (integer banks) or rounds them to fp16 or bf16
    /// (float banks) into the A buffer.
    pub(super) fn put_f32(&mut self, x: &[f32]) -> Result<Submitted> {
        shape("activation values", self.len_a(), x.len())?;
        match self.acts {
            Activations::Bf16 | Activations::Fp16 => {
                self.put_float(self.acts, x)?;
                Ok(Submitted::Float)
            }
            Activations::Int8 => {
                // A grouped bank: a scale per row and group (wave).
                let group = match self.npu.as_ref().is_some_and(|d| d.grouped) {
                    true => self.bank.layout.k_tile() as usize,
                    false => self.k(),
                };
                let passes = self.npu.as_ref().map_or(1, |d| d.passes);
                if passes > 1 {
                    // Every pass, as the plan's rows a pass.
                    let (q, s) = super::quantize_passes_i8(x, self.k(), group, passes)?;
                    self.pack_a_in_place(|plan, out| pack::activations_i8_into(plan, &q, out))?;
                    self.row_scales = s;
                } else {
                    let (q, s) = super::quantize_groups_i8(x, self.k(), group)?;
                    self.put_i8(&q)?;
                    self.row_scales = s;
                }
                self.keep_group_sums(x);
                if self.npu.is_some() {
                    self.encode_row_scales()?;
                    return Ok(Submitted::NpuScaled);
                }
                Ok(Submitted::Quantized)
            }
            Activations::Int4 => Err(Error::Precision {
                input: "f32 (quantised to int8)",
                weights: "int4",
                output: "this matmul, made for int4 activations",
            }),
        }
    }

    /// Writes the current row scales into the program (NPU dequantisation). A scale
    /// fp16 cannot hold to its precision is left to the host: the NPU gets 1.
    pub(super) fn encode_row_scales(&mut self) -> Result<()> {
        let Some(d) = &mut self.npu else {
            return Ok(());
        };
        let words = d.set_row_scales(&self.row_scales)?;
        self.regcmd.write(0, &words_to_le_bytes(words))
    }

    /// The NPU-dequantised rows into `out` (with several K waves, the sum of each wave's
    /// block in wave order, in `f32`), each multiplied on the host by its scale if the
    /// NPU did not take it.
    pub(super) fn read_npu_scaled_into(&self, out: &mut [f32]) -> Result<()> {
        shape("result values", self.len_c(), out.len())?;
        let Some(d) = &self.npu else {
            return Err(Error::Precision {
                input: "int8",
                weights: "int8",
                output: "fp32 dequantised on the NPU (not chosen for this matmul)",
            });
        };
        let (n, n_pad) = (self.n(), self.bank.layout.n_pad as usize);
        let block = self.plan.spec.m as usize * n_pad * 4;
        let f32_at = |v: &[u8]| f32::from_le_bytes([v[0], v[1], v[2], v[3]]);
        // A scale fp16 cannot hold was left to the host: the NPU multiplied by 1.
        let factor = |row: usize, wave: usize| {
            let s = self.row_scales[d.scale_index(row, wave)];
            if fp16_normal(s) { 1.0 } else { s }
        };
        // Residual activations: row `m`'s pass `p` is the plan's row `p · rows + m`.
        let passes = d.passes as usize;
        let rows = self.rows as usize;
        d.out.read_with(|bytes| {
            for (m, row) in out.chunks_exact_mut(n).enumerate() {
                let parts = (0..passes).flat_map(|p| (0..d.waves).map(move |w| (p * rows + m, w)));
                for (i, (src_row, w)) in parts.enumerate() {
                    let src = &bytes[w * block + src_row * n_pad * 4..][..n * 4];
                    let f = factor(src_row, w);
                    for (y, v) in row.iter_mut().zip(src.chunks_exact(4)) {
                        let part = f32_at(v) * f;
                        *y = if i == 0 { part } else { *y + part };
                    }
                }
            }
        })?;
        self.add_group_offsets(out);
        Ok(())
    }

    /// The exact integer results, row-major M×N, from the C buffer.
    pub(super) fn read_int(&self) -> Result<Vec<i64>> {
        let all = self.c.read_with(|c| self.plan.reduce_int(c))??;
        if self.bank.layout.dtype == Dtype::Int4 && self.acts == Activations::Int8 {
            // W4A8: rows [0, M) are Hi·W, rows [M, 2M) Lo·W.
            let half = self.len_c();
            let n = self.n();
            let sums = &self.bank.col_sums;
            return Ok((0..half)
                .map(|i| 16 * all[i] + all[half + i] + 8 * sums[i % n])
                .collect());
        }
        Ok(all)
    }

    /// The results as `i32` into `out`: an error names the first that leaves the int32
    /// range (nothing is wrapped).
    pub(super) fn read_i32_into(&self, out: &mut [i32]) -> Result<()> {
        shape("result values", self.len_c(), out.len())?;
        if self.bank.layout.dtype == Dtype::Int8 {
            return self.c.read_with(|c| self.reduction.sum_i32_into(c, out))?;
        }
        for (i, (d, v)) in out.iter_mut().zip(self.read_int()?).enumerate() {
            *d = i32::try_from(v).map_err(|_| Error::OutOfRange {
                what: "results",
                index: i,
                value: v.to_string(),
                range: "the int32 range (read as i64 it is exact)",
            })?;
        }
        Ok(())
    }

    /// Float results (fp16 banks) into `out`: fp32 partials in one pass, fp16 results
    /// of one wave (written by the DPU) widened, fp16 results of several waves summed and
    /// rounded to fp16 once on the host ([`Plan::reduce_f32_into`]).
    pub(super) fn read_f32_into(&self, out: &mut [f32]) -> Result<()> {
        shape("result values", self.len_c(), out.len())?;
        if self.plan.c_type() == OutType::Fp32 && self.plan.spec.out != OutType::Fp16 {
            return self.c.read_with(|c| self.reduction.sum_f32_into(c, out))?;
        }
        self.c.read_with(|c| self.plan.reduce_f32_into(c, out))?
    }

    /// Quantised results: `acc · row_scale · channel_scale` into `out`.
    pub(super) fn read_scaled_into(&self, out: &mut [f32]) -> Result<()> {
        shape("result values", self.len_c(), out.len())?;
        let n = self.n();
        let scales = self.bank.scales.as_deref();
        let scale = |i: usize| scales.map_or(1.0, |s| s[i % n]);
        if self.bank.layout.dtype == Dtype::Int8 {
            // One pass over C: the waves summed and scaled into `out`.
            self.c.read_with(|c| {
                self.reduction
                    .scale_i32_into(c, &self.row_scales, scales, out)
            })??;
        } else {
            for (i, (y, v)) in out.iter_mut().zip(self.read_int()?).enumerate() {
                *y = v as f32 * self.row_scales[i / n] * scale(i);
            }
        }
        Ok(())
    }

    /// Reads what `what` computed into `out` as f32.
    pub(super) fn read_f32_of(&self, what: Submitted, out: &mut [f32]) -> Result<()> {
        match what {
            Submitted::Quantized => self.read_scaled_into(out),
            Submitted::NpuScaled => self.read_npu_scaled_into(out),
            Submitted::Float => self.read_f32_into(out),
            Submitted::Int => {
                shape("result values", self.len_c(), out.len())?;
                for (y, v) in out.iter_mut().zip(self.read_int()?) {
                    *y = v as f32;
                }
                Ok(())
            }
        }
    }
}
