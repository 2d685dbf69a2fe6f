//! Activations a caller writes straight into a matmul's device-visible A buffer: where
//! the NPU reads a float plan's activations as plain rows ([`pack::plain_rows`]), the
//! caller's own values land there with no copy or conversion by the library
//! (docs/matmul.md, "Writing activations in place").

use super::*;
use crate::kernels::matmul::pack::RowLayout;

/// The activation rows of a float matmul in its mapped A buffer, for a writer of
/// [`Matmul::run_written_into`] to fill: value `k` of row `m` is the little-endian fp16
/// (or bf16, [`InputRows::activations`]) value at byte `m · stride + 2 · k`.
///
/// Every value must be written: the buffer holds what the last call left there. What
/// lies between one row's values and the next row is the library's (it zeroes it after
/// the writer returns).
#[derive(Debug)]
pub struct InputRows<'a> {
    bytes: &'a mut [u8],
    layout: RowLayout,
    acts: Activations,
}

impl InputRows<'_> {
    /// Rows (the matmul's M).
    pub fn rows(&self) -> usize {
        self.layout.rows
    }

    /// Values a row (K).
    pub fn k(&self) -> usize {
        self.layout.k
    }

    /// Bytes from one row's start to the next's.
    pub fn stride(&self) -> usize {
        self.layout.stride
    }

    /// The values' type: [`Activations::Fp16`] or [`Activations::Bf16`].
    pub fn activations(&self) -> Activations {
        self.acts
    }

    /// Row `r`'s `2 · K` bytes, `None` past the last row.
    pub fn row_mut(&mut self, r: usize) -> Option<&mut [u8]> {
        let at = r.checked_mul(self.layout.stride)?;
        (r < self.layout.rows).then(|| &mut self.bytes[at..at + 2 * self.layout.k])
    }

    /// Every row and what lies between them: `(rows − 1) · stride + 2 · K` bytes and
    /// the last row's padding (a C caller's view; [`InputRows::row_mut`] is safer).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
}

impl Matmul {
    /// How this matmul's activations lie in its A buffer when a caller can write them
    /// there ([`Matmul::run_written_into`]): a matmul against an fp16 or bf16 bank whose
    /// plan keeps every row whole in one K wave, or is of one row. Else why not
    /// ([`Error::Unsupported`]).
    pub fn input_rows(&self) -> Result<RowLayout> {
        pack::plain_rows(&self.plan)
    }

    /// `C = A · W` into `out` (M×N) for activations `write` puts straight into the A
    /// buffer the NPU reads ([`InputRows`]): no copy and no conversion on the host. The
    /// library then zeroes the rows' padding and checks every value is finite (a value
    /// that is not is [`Error::OutOfRange`], with its index in row-major M×K). Results
    /// as [`Matmul::run_into`] of the same values.
    ///
    /// Errors: a matmul whose rows are not plain ([`Matmul::input_rows`]), integer
    /// results ([`Error::Precision`]) or `out` of another length than M×N before
    /// `write` is called; what `write` returns, as it returns it (the product does not
    /// run).
    ///
    /// ```
    /// use rknpu_driver::compute::matmul::{Matmul, WeightBank, Weights};
    /// use rknpu_driver::device::Device;
    /// use half::f16;
    /// use std::sync::Arc;
    ///
    /// let dev = Device::open_spec("emu")?;
    /// let w = vec![f16::from_f32(0.5); 32 * 64];
    /// let bank = Arc::new(WeightBank::new(&dev, (32, 64), Weights::F16(&w))?);
    /// let mut mm = Matmul::new(&bank, 1)?;
    /// let mut y = vec![0f32; 32];
    /// mm.run_written_into(
    ///     |rows| {
    ///         let row = rows.row_mut(0).expect("one row");
    ///         for v in row.chunks_exact_mut(2) {
    ///             v.copy_from_slice(&f16::from_f32(2.0).to_le_bytes());
    ///         }
    ///         Ok(())
    ///     },
    ///     &mut y,
    /// )?;
    /// assert!(y.iter().all(|&v| v == 64.0));
    /// # Ok::<(), rknpu_driver::Error>(())
    /// ```
    pub fn run_written_into<C: Output>(
        &mut self,
        write: impl FnOnce(&mut InputRows<'_>) -> Result<()>,
        out: &mut [C],
    ) -> Result<()> {
        let mut out = C::slice_mut(out);
        self.integer_results_of(false, &out)?;
        shape("result values", self.len_c(), out.len())?;
        let layout = self.input_rows()?;
        let (acts, dtype) = (self.acts, self.plan.spec.dtype);
        self.timed(
            |m| {
                m.pack_a_in_place(|_, a| {
                    let (rows, _) = a.split_at_mut(layout.span);
                    write(&mut InputRows {
                        bytes: rows,
                        layout,
                        acts,
                    })?;
                    pack::seal_rows(&layout, dtype, a)
                })?;
                Ok(Submitted::Float)
            },
            |m, what| m.read(what, &mut out),
        )
    }
}

#[cfg(test)]
mod tests {
    //! Rows written in place against the same values through `run_into`, on fp16 and
    //! bf16 banks; the refusals, and a writer's error passed on.

    use super::*;
    use crate::device::Device;

    fn bank(dev: &Device, n: usize, k: usize, bf: bool) -> Arc<WeightBank> {
        let mut rng = crate::seeded::Rng::new(17);
        let w: Vec<f32> = (0..n * k).map(|_| rng.unit() - 0.5).collect();
        let bank = match bf {
            true => {
                let w: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
                WeightBank::new(dev, (n as u32, k as u32), Weights::Bf16(&w))
            }
            false => {
                let w: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
                WeightBank::new(dev, (n as u32, k as u32), Weights::F16(&w))
            }
        };
        Arc::new(bank.unwrap())
    }

    #[test]
    fn rows_written_in_place_give_what_run_into_gives() {
        let dev = Device::open_spec("emu").unwrap();
        let mut rng = crate::seeded::Rng::new(18);
        for (m, k, bf) in [
            (1, 4100, false),
            (3, 40, true),
            (6, 96, false),
            (1, 64, true),
        ] {
            let bank = bank(&dev, 48, k, bf);
            let mut mm = Matmul::new(&bank, m as u32).unwrap();
            let bits: Vec<u16> = (0..m * k)
                .map(|_| match bf {
                    true => bf16::from_f32(rng.unit() * 2.0 - 1.0).to_bits(),
                    false => f16::from_f32(rng.unit() * 2.0 - 1.0).to_bits(),
                })
                .collect();
            let mut want = vec![0f32; m * 48];
            match bf {
                true => {
                    let a: Vec<bf16> = bits.iter().map(|&b| bf16::from_bits(b)).collect();
                    mm.run_into(&a, &mut want).unwrap();
                }
                false => {
                    let a: Vec<f16> = bits.iter().map(|&b| f16::from_bits(b)).collect();
                    mm.run_into(&a, &mut want).unwrap();
                }
            }
            // Other values first, so that the A buffer holds something else.
            let _: Vec<f32> = match bf {
                true => mm.run(&vec![bf16::ONE; m * k]).unwrap(),
                false => mm.run(&vec![f16::ONE; m * k]).unwrap(),
            };
            let mut got = vec![0f32; m * 48];
            let fill = |rows: &mut InputRows<'_>| {
                assert_eq!((rows.rows(), rows.k()), (m, k));
                for (r, src) in bits.chunks_exact(k).enumerate() {
                    let row = rows.row_mut(r).unwrap();
                    for (d, s) in row.chunks_exact_mut(2).zip(src) {
                        d.copy_from_slice(&s.to_le_bytes());
                    }
                }
                assert!(rows.row_mut(m).is_none());
                Ok(())
            };
            mm.run_written_into(fill, &mut got).unwrap();
            assert_eq!(got, want, "{m}×{k} bf16 {bf}");
        }
    }

    #[test]
    fn refusals_come_before_the_writer_and_its_error_stops_the_product() {
        let dev = Device::open_spec("emu").unwrap();
        let never = |_: &mut InputRows<'_>| -> Result<()> { panic!("the writer was called") };
        // Rows cut into several K waves; an int8 bank; integer results; a short `out`.
        let mut wide = Matmul::new(&bank(&dev, 32, 9000, false), 4).unwrap();
        let r = wide.run_written_into(never, &mut vec![0f32; 4 * 32]);
        assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
        let i8_bank = WeightBank::new(&dev, (32, 64), Weights::I8(&[1; 32 * 64])).unwrap();
        let mut int8 = Matmul::new(&Arc::new(i8_bank), 1).unwrap();
        let r = int8.run_written_into(never, &mut [0f32; 32]);
        assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
        let mut mm = Matmul::new(&bank(&dev, 32, 64, false), 2).unwrap();
        let r = mm.run_written_into(never, &mut vec![0i32; 2 * 32]);
        assert!(matches!(r, Err(Error::Precision { .. })), "{r:?}");
        let r = mm.run_written_into(never, &mut vec![0f32; 2 * 32 - 1]);
        assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
        // The writer's own error, and a value that is not finite.
        let refuse = |_: &mut InputRows<'_>| {
            Err(Error::InvalidArgument {
                what: "the writer gave up".into(),
            })
        };
        let r = mm.run_written_into(refuse, &mut vec![0f32; 2 * 32]);
        assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
        let inf = |rows: &mut InputRows<'_>| {
            rows.bytes_mut().fill(0);
            rows.row_mut(1).unwrap()[10..12].copy_from_slice(&0x7C00u16.to_le_bytes());
            Ok(())
        };
        let r = mm.run_written_into(inf, &mut vec![0f32; 2 * 32]);
        assert!(
            matches!(r, Err(Error::OutOfRange { index: 69, .. })),
            "{r:?}"
        );
    }
}
