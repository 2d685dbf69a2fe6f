//! Loading GGUF weights into banks, against a `memcpy` of the tensor's bytes in the file
//! measured in the same group and run (docs/gguf.md, "Loading speed").
//!
//! The file holds two 4096×4096 tensors, Q8_0 (17.8 MB) and Q4_0 (9.4 MB), of seeded
//! values; it is written to the temporary directory once and opened with `Gguf::open`,
//! which reads its header and maps the rest, so every iteration reads its tensor in
//! place from the page cache.
//!
//! Per tensor, a group of:
//! * `memcpy`: the baseline, as many bytes as the tensor has in the file;
//! * `read`: `Gguf::read_tensor` of the whole tensor into a buffer allocated once;
//! * `load_bank_<type>`: `gguf::load_bank` into a bank of that type on the emulated
//!   device: reading the file a piece at a time, dequantising, requantising (int8,
//!   int4) or rounding (fp16), packing, and the emulated kernel's upload of the bank;
//! * `load_grouped`: `gguf::load_grouped` into a grouped int8 bank (the file's integers
//!   and block scales written in one pass into the bank's mapped buffer, which the
//!   emulated kernel allocates afresh each time, and freed when the bank drops);
//! * `pack_grouped`: `gguf::pack_grouped`, the same pass into a bank-sized buffer and
//!   scales allocated once (the packing alone, without a device buffer).
//!
//! Each group reports `Throughput::Bytes(<tensor bytes in the file>)`, so criterion's
//! rates compare directly. Run with `cargo bench --bench load`.

mod common;

use common::{group, memcpy_baseline};
use criterion::{Criterion, criterion_group, criterion_main};
use rknpu_driver::device::Device;
use rknpu_driver::gguf::write::Writer;
use rknpu_driver::gguf::{Gguf, grouped_layout, load_bank, load_grouped, pack_grouped};
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::seeded::Rng;
use std::hint::black_box;

const K: u64 = 4096;
const N: u64 = 4096;

fn bench(c: &mut Criterion) {
    let mut rng = Rng::new(11);
    let w: Vec<f32> = (0..K * N).map(|_| rng.unit()).collect();
    let mut out = Writer::new();
    out.tensor_q8_0("w.q8_0", &[K, N], &w).expect("Q8_0 tensor");
    out.tensor_q4_0("w.q4_0", &[K, N], &w).expect("Q4_0 tensor");
    drop(w);
    let path = std::env::temp_dir().join(format!("rknpu-bench-load-{}.gguf", std::process::id()));
    out.write(&path).expect("bench file");
    drop(out);
    let file = Gguf::open(&path).expect("bench file");
    let dev = Device::open_spec("emu").expect("the emulated kernel");
    let cases = [
        ("w.q8_0", &[Dtype::Int8, Dtype::Fp16][..]),
        ("w.q4_0", &[Dtype::Int4][..]),
    ];
    for (name, dtypes) in cases {
        let bytes = file.tensor(name).expect("written above").bytes() as usize;
        let mut g = group(c, &format!("load_{name}_4096x4096"), bytes, true);
        let mut src = vec![0u8; bytes];
        file.read_tensor(name, 0, &mut src).expect("tensor bytes");
        memcpy_baseline(&mut g, src);
        let mut buf = vec![0u8; bytes];
        g.bench_function("read", |b| {
            b.iter(|| {
                file.read_tensor(name, 0, black_box(&mut buf))
                    .expect("read")
            })
        });
        for &dtype in dtypes {
            g.bench_function(format!("load_bank_{}", dtype.name()), |b| {
                b.iter(|| black_box(load_bank(&dev, &file, name, dtype).expect("bank")))
            });
        }
        g.bench_function("load_grouped", |b| {
            b.iter(|| black_box(load_grouped(&dev, &file, name).expect("bank")))
        });
        let layout = grouped_layout(&file, name).expect("a plain grouped layout");
        let mut bank = vec![0u8; layout.bytes as usize];
        let mut scales = vec![half::f16::ZERO; layout.n as usize * layout.waves.len()];
        g.bench_function("pack_grouped", |b| {
            b.iter(|| {
                pack_grouped(&file, name, &layout, black_box(&mut bank), &mut scales)
                    .expect("packed")
            })
        });
        g.finish();
    }
    let _ = std::fs::remove_file(&path);
}

criterion_group!(benches, bench);
criterion_main!(benches);
