//! What grouped int8 banks cost on the NPU, by the cost model: for the two weight shapes
//! of a 7B model's layer that matter most (4096×4096, the attention projections, and
//! 4096 inputs × 11008 outputs, the feed-forward's up projection), decode (M = 1) and
//! prefill (M = 128), groups of 32 to 512 input channels, one pass of activations and
//! residual activations (two and three passes), beside the per-channel layouts: int8 and int4
//! (W4A8) banks scaled on the host, and fp16. Each figure is [`Matmul::modelled_seconds`] of the matmul's whole program (its
//! matmul tasks and its dequantisation tasks) on the RK3588 profile; a matmul whose
//! program exceeds what one submission holds says so. Nothing runs on the NPU: the
//! emulated kernel only holds the buffers. docs/matmul.md ("Grouped int8") has the
//! table. Run it with:
//!
//! ```text
//! cargo run --release --example grouped_cost
//! ```

use rknpu_driver::compute::matmul::{Matmul, MatmulOptions, WeightBank, Weights};
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::cost::HardwareProfile;
use std::error::Error;
use std::sync::Arc;

/// The example's result type.
type Res<T = ()> = Result<T, Box<dyn Error>>;

/// `(k, n)`: input and output channels.
const SHAPES: [(u32, u32); 2] = [(4096, 4096), (4096, 11008)];
/// Rows: a decoded token, a prompt.
const ROWS: [u32; 2] = [1, 128];
/// Input channels per group.
const GROUPS: [u32; 5] = [32, 64, 128, 256, 512];

/// The modelled milliseconds of a matmul of `m` rows against `bank` with `options`, or
/// why it cannot be made.
fn modelled(bank: &Arc<WeightBank>, m: u32, options: MatmulOptions) -> Res<String> {
    let profile = HardwareProfile::rk3588();
    Ok(match Matmul::with_options(bank, m, options) {
        Ok(mm) => format!("{:.3} ms", mm.modelled_seconds(&profile)? * 1e3),
        Err(rknpu_driver::Error::Unsupported { .. }) => "past one submission".into(),
        Err(e) => return Err(e.into()),
    })
}

/// Prints every figure, then `OK`; an error ends the run with its message (exit 1).
fn main() -> Res {
    let dev = Device::open_spec("emu")?;
    for (k, n) in SHAPES {
        let len = k as usize * n as usize;
        // The cost depends on the shape, not on the values.
        let q = vec![1i8; len];
        let ones = vec![1.0; n as usize];
        let per_channel =
            Arc::new(WeightBank::new(&dev, (n, k), Weights::I8(&q))?.with_scales(&ones)?);
        let int4 = Arc::new(WeightBank::new(&dev, (n, k), Weights::I4(&q))?.with_scales(&ones)?);
        let halves = vec![half::f16::from_f32(1.0); len];
        let fp16 = Arc::new(WeightBank::new(&dev, (n, k), Weights::F16(&halves))?);
        for m in ROWS {
            let host = modelled(&per_channel, m, MatmulOptions::default())?;
            let w4a8 = modelled(&int4, m, MatmulOptions::default())?;
            let fp16 = modelled(&fp16, m, MatmulOptions::default())?;
            println!("{k}x{n} M {m}: per-channel int8, host scaling: {host}");
            println!("{k}x{n} M {m}: per-channel int4 (W4A8), host scaling: {w4a8}");
            println!("{k}x{n} M {m}: fp16: {fp16}");
            for group in GROUPS {
                let scales = vec![1.0; n as usize * k.div_ceil(group) as usize];
                let bank = Arc::new(WeightBank::from_i8_nk_grouped(
                    &dev,
                    (n, k, group),
                    &q,
                    &scales,
                )?);
                let one = modelled(&bank, m, MatmulOptions::default())?;
                let passes = |p| modelled(&bank, m, MatmulOptions::default().activation_passes(p));
                let (two, three) = (passes(2)?, passes(3)?);
                println!(
                    "{k}x{n} M {m}: groups of {group}: one pass {one}, residual {two}, three passes {three}"
                );
            }
        }
    }
    println!("OK");
    Ok(())
}
