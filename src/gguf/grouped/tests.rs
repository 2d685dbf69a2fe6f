//! The direct fill of Q8_0, Q4_0 and Q5_0 banks against the path that decodes every
//! block into host vectors and packs them: the same bank bytes, scales and errors.

use super::{GroupedReport, decoded, direct, load_grouped_report};
use crate::device::Device;
use crate::gguf::write::Writer;
use crate::gguf::{GgmlType, Gguf, GgufError};
use crate::seeded::Rng;

/// Shapes `(n, k)` with K not a multiple of 256 and N not a multiple of 32 among them.
const SHAPES: [(u64, u64); 5] = [(37, 96), (33, 32), (70, 160), (64, 288), (5, 4128)];

/// Raw Q5_0 blocks of seeded bytes, each with a finite f16 scale.
fn q5_0_bytes(rng: &mut Rng, blocks: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks * 22);
    for _ in 0..blocks {
        let d = half::f16::from_f32(rng.unit() * 0.1).to_bits();
        out.extend_from_slice(&d.to_le_bytes());
        out.extend((0..20).map(|_| (rng.unit() * 1000.0) as i32 as u8));
    }
    out
}

fn file(seed: u64) -> Gguf {
    let mut rng = Rng::new(seed);
    let mut w = Writer::new();
    for (i, &(n, k)) in SHAPES.iter().enumerate() {
        let v: Vec<f32> = (0..n * k).map(|_| rng.unit() * 3.0).collect();
        w.tensor_q8_0(&format!("q8_0.{i}"), &[k, n], &v).unwrap();
        w.tensor_q4_0(&format!("q4_0.{i}"), &[k, n], &v).unwrap();
        let raw = q5_0_bytes(&mut rng, (n * k / 32) as usize);
        w.tensor_raw(&format!("q5_0.{i}"), GgmlType::Q5_0, &[k, n], raw)
            .unwrap();
    }
    Gguf::from_vec(w.to_bytes()).unwrap()
}

#[test]
fn the_direct_fill_makes_the_decoded_path_s_bank_bit_for_bit() {
    let dev = Device::open_spec("emu").unwrap();
    let gguf = file(5);
    for t in gguf.tensors() {
        let ty = t.ggml_type;
        let (n, k) = (t.dims[1] as u32, t.dims[0] as u32);
        let fast = direct::load(&dev, &gguf, t.name, ty, (n, k))
            .unwrap()
            .unwrap_or_else(|| panic!("{}: the plain layout", t.name));
        let (slow, report) = decoded(&dev, &gguf, t.name, ty, (n, k)).unwrap();
        assert_eq!(report, GroupedReport::default(), "{}", t.name);
        assert_eq!(fast.layout(), slow.layout(), "{}", t.name);
        assert_eq!(fast.packed().unwrap(), slow.packed().unwrap(), "{}", t.name);
        let bits =
            |s: Option<&[half::f16]>| s.map(|s| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        assert_eq!(
            bits(fast.group_scales()),
            bits(slow.group_scales()),
            "{}",
            t.name
        );
        assert_eq!(fast.group_offsets(), slow.group_offsets(), "{}", t.name);
        assert_eq!(fast.group_size(), slow.group_size(), "{}", t.name);
        // The public entry takes the direct path and gives the same bank.
        let (public, _) = load_grouped_report(&dev, &gguf, t.name).unwrap();
        assert_eq!(
            public.packed().unwrap(),
            slow.packed().unwrap(),
            "{}",
            t.name
        );
    }
}

#[test]
fn a_non_finite_scale_is_the_same_error_on_both_paths() {
    let dev = Device::open_spec("emu").unwrap();
    let (n, k) = (70u64, 160u64);
    let mut rng = Rng::new(9);
    let v: Vec<f32> = (0..n * k).map(|_| rng.unit()).collect();
    let mut w = Writer::new();
    w.tensor_q8_0("w", &[k, n], &v).unwrap();
    let mut bytes = w.to_bytes();
    let gguf = Gguf::from_vec(bytes.clone()).unwrap();
    let at = (gguf.data_offset() + gguf.tensor("w").unwrap().offset) as usize;
    // Row 40, block 3 NaN; row 41, block 0 infinite; row 63, block 1 NaN: the first in
    // file order is named, though the direct fill meets block 0 of row 41 first.
    let block = |row: usize, b: usize| at + (row * 5 + b) * 34;
    for (row, b, bits) in [(40, 3, 0x7E00u16), (41, 0, 0x7C00), (63, 1, 0x7E01)] {
        bytes[block(row, b)..][..2].copy_from_slice(&bits.to_le_bytes());
    }
    let gguf = Gguf::from_vec(bytes).unwrap();
    let fast = direct::load(&dev, &gguf, "w", GgmlType::Q8_0, (70, 160)).map(|_| ());
    let slow = decoded(&dev, &gguf, "w", GgmlType::Q8_0, (70, 160)).map(|_| ());
    // The values are NaN, which compare unequal: compare what they print.
    assert_eq!(format!("{fast:?}"), format!("{slow:?}"));
    match fast {
        Err(GgufError::NotRepresentable { row, column, .. }) => assert_eq!((row, column), (40, 96)),
        other => panic!("{other:?}"),
    }
}
