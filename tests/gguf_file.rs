//! GGUF files opened from disk without reading them whole (`Gguf::open` reads the header,
//! tensor data when asked), and weight banks loaded a piece of rows at a time without a
//! read back (`load_bank`), against the same file parsed in memory and the whole-tensor
//! conversion.

use half::{bf16, f16};
use rknpu_driver::compute::matmul::WeightBank;
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::device::Device;
use rknpu_driver::gguf::write::Writer;
use rknpu_driver::gguf::{GgmlType, Gguf, GgufError as Error, Value, load_bank, load_weights};
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::seeded::Rng;
use std::path::PathBuf;

/// A file in the temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str, bytes: &[u8]) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("rknpu-gguf-file-{tag}-{}.gguf", std::process::id()));
        std::fs::write(&path, bytes).expect("temporary file");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn values(seed: u64, len: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| rng.unit() * 2.0).collect()
}

/// A file of `n` rows of `k` values in Q8_0, Q4_0, F16 and F32, with a metadata string
/// of `pad` bytes that makes the header that long.
fn model(n: usize, k: usize, pad: usize) -> Vec<u8> {
    let w = values(7, n * k);
    let dims = [k as u64, n as u64];
    let mut out = Writer::new();
    out.metadata("general.name", Value::String("x".repeat(pad)))
        .unwrap();
    out.tensor_q8_0("w.q8_0", &dims, &w).unwrap();
    out.tensor_q4_0("w.q4_0", &dims, &w).unwrap();
    let h: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
    out.tensor_f16("w.f16", &dims, &h).unwrap();
    out.tensor_f32("w.f32", &dims, &w).unwrap();
    out.to_bytes()
}

#[test]
fn a_file_is_opened_by_its_header_and_its_tensors_read_when_asked() {
    let bytes = model(640, 1024, 16);
    assert!(bytes.len() > 4 << 20, "{} bytes", bytes.len());
    let file = TempFile::new("header", &bytes);
    let disk = Gguf::open(&file.0).unwrap();
    let memory = Gguf::parse(&bytes).unwrap();
    assert_eq!(disk.file_len(), bytes.len() as u64);
    assert!(
        disk.held_bytes() as u64 <= disk.data_offset() && disk.held_bytes() < 64 << 10,
        "holds {} bytes of a {}-byte file",
        disk.held_bytes(),
        bytes.len()
    );
    assert_eq!(memory.held_bytes(), bytes.len());
    assert_eq!(
        disk.metadata("general.name"),
        memory.metadata("general.name")
    );
    for t in memory.tensors() {
        assert_eq!(disk.tensor(t.name), Some(t));
        assert_eq!(
            *disk.tensor_data(t.name).unwrap(),
            *memory.tensor_data(t.name).unwrap(),
            "{}",
            t.name
        );
        // A part of a tensor, from both.
        let (mut a, mut b) = (vec![0u8; 1000], vec![0u8; 1000]);
        disk.read_tensor(t.name, 333, &mut a).unwrap();
        memory.read_tensor(t.name, 333, &mut b).unwrap();
        assert_eq!(a, b, "{}", t.name);
        assert_eq!(a[..], memory.tensor_data(t.name).unwrap()[333..1333]);
    }
}

#[test]
fn a_header_longer_than_the_first_read_is_read_on() {
    // A 3 MiB metadata string: the header goes on past the first 1 MiB read.
    let bytes = model(640, 1024, 3 << 20);
    let file = TempFile::new("long", &bytes);
    let disk = Gguf::open(&file.0).unwrap();
    assert!(disk.held_bytes() > 3 << 20);
    assert!((disk.held_bytes() as u64) <= disk.data_offset());
    let memory = Gguf::parse(&bytes).unwrap();
    assert_eq!(
        disk.metadata("general.name"),
        memory.metadata("general.name")
    );
    assert_eq!(disk.dequantize("w.q4_0"), memory.dequantize("w.q4_0"));
}

#[test]
fn a_truncated_file_fails_on_disk_as_in_memory() {
    // Cut inside the long header (past the first read), at the end of the header, and
    // inside the data section.
    let bytes = model(640, 1024, 3 << 20);
    let header_end = Gguf::parse(&bytes).unwrap().data_offset() as usize;
    for cut in [
        (2 << 20) + 5,
        header_end - 3,
        header_end + 1000,
        bytes.len() - 1,
    ] {
        let file = TempFile::new(&format!("cut{cut}"), &bytes[..cut]);
        let disk = Gguf::open(&file.0).map(|_| ());
        let memory = Gguf::parse(&bytes[..cut]).map(|_| ());
        assert!(memory.is_err(), "cut at {cut}");
        assert_eq!(disk, memory, "cut at {cut}");
    }
}

#[test]
fn a_read_past_a_tensor_is_refused() {
    let bytes = model(640, 1024, 16);
    let file = TempFile::new("past", &bytes);
    let disk = Gguf::open(&file.0).unwrap();
    let len = disk.tensor("w.q8_0").unwrap().bytes();
    let mut buf = vec![0u8; 10];
    assert!(matches!(
        disk.read_tensor("w.q8_0", len - 9, &mut buf),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(disk.read_tensor("w.q8_0", len - 10, &mut buf).is_ok());
    assert!(matches!(
        disk.read_tensor("w.q8_0", u64::MAX, &mut buf),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        disk.read_tensor("none", 0, &mut buf),
        Err(Error::NoSuchTensor { .. })
    ));
}

/// The bank the whole-tensor path makes: the f32 values of the whole tensor, then the
/// bank constructors.
fn whole_tensor_bank(dev: &Device, g: &Gguf, name: &str, dtype: Dtype) -> WeightBank {
    let info = g.tensor(name).unwrap();
    let (k, n) = (info.dims[0] as u32, info.dims[1] as u32);
    let w = g.dequantize(name).unwrap();
    match dtype {
        Dtype::Fp16 => WeightBank::new(dev, (n, k), Weights::F32(&w)).unwrap(),
        Dtype::Bf16 => {
            let b: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
            WeightBank::new(dev, (n, k), Weights::Bf16(&b)).unwrap()
        }
        d => WeightBank::quantize_f32_nk(dev, n, k, &w, d).unwrap(),
    }
}

#[test]
fn banks_loaded_in_pieces_equal_the_whole_tensor_conversion() {
    // 640 rows of 1024: Q8_0 rows of 1088 bytes, so 60 rows a 64 KiB piece and 11
    // pieces, the last one short.
    let bytes = model(640, 1024, 16);
    let file = TempFile::new("banks", &bytes);
    let disk = Gguf::open(&file.0).unwrap();
    let dev = Device::open_spec("emu").unwrap();
    for name in ["w.q8_0", "w.q4_0", "w.f16", "w.f32"] {
        for dtype in [Dtype::Fp16, Dtype::Bf16, Dtype::Int8, Dtype::Int4] {
            let bank = load_bank(&dev, &disk, name, dtype).unwrap();
            let want = whole_tensor_bank(&dev, &disk, name, dtype);
            let what = format!("{name} into {dtype:?}");
            assert!(bank.layout() == want.layout(), "{what}: layout");
            assert!(bank.packed().unwrap() == want.packed().unwrap(), "{what}");
            assert_eq!(bank.scales(), want.scales(), "{what}: scales");
        }
    }
    // The report path loads the same bank.
    let (bank, report) = load_weights(&dev, &disk, "w.q8_0", Dtype::Int8).unwrap();
    let alone = load_bank(&dev, &disk, "w.q8_0", Dtype::Int8).unwrap();
    assert!(bank.packed().unwrap() == alone.packed().unwrap());
    assert_eq!(
        (report.source, report.n, report.k),
        (GgmlType::Q8_0, 640, 1024)
    );
    assert!(report.rel_rms > 0.0 && report.rel_rms < 0.01, "{report}");
}

#[test]
fn a_value_the_bank_cannot_hold_in_a_later_piece_names_its_row() {
    let (n, k) = (300usize, 256usize);
    let mut w = values(3, n * k);
    w[290 * k + 17] = 70000.0; // rounds to infinity in fp16
    let mut out = Writer::new();
    out.tensor_f32("w", &[k as u64, n as u64], &w).unwrap();
    let file = TempFile::new("range", &out.to_bytes());
    let disk = Gguf::open(&file.0).unwrap();
    let dev = Device::open_spec("emu").unwrap();
    match load_bank(&dev, &disk, "w", Dtype::Fp16) {
        Err(Error::NotRepresentable { row, column, .. }) => assert_eq!((row, column), (290, 17)),
        other => panic!("{:?}", other.map(|_| "a bank")),
    }
    // int8 takes any finite value.
    assert!(load_bank(&dev, &disk, "w", Dtype::Int8).is_ok());
    w[299 * k] = f32::NAN;
    let mut out = Writer::new();
    out.tensor_f32("w", &[k as u64, n as u64], &w).unwrap();
    let file = TempFile::new("nan", &out.to_bytes());
    let disk = Gguf::open(&file.0).unwrap();
    match load_bank(&dev, &disk, "w", Dtype::Int8) {
        Err(Error::NotRepresentable { row, column, .. }) => assert_eq!((row, column), (299, 0)),
        other => panic!("{:?}", other.map(|_| "a bank")),
    }
}
