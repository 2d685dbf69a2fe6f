//! The bounds of the GGUF reader and its loaders (docs/gguf.md, "Bounds"): the memory a
//! parsed file's index takes for hostile shapes (many tiny tensors, many metadata keys,
//! long arrays); a listing linear in the file; weights a bank cannot hold refused with
//! the tensor, the index and the value; NaN-aware reports.

use rknpu_driver::device::Device;
use rknpu_driver::gguf::write::Writer;
use rknpu_driver::gguf::{
    Array, GgmlType, Gguf, GgufError as Error, LIST_NAME_COLUMN, LoadReport, Value, load_weights,
    write_listing,
};
use rknpu_driver::kernels::single::Dtype;

/// A GGUF file built byte by byte: version 3, the given metadata and tensor infos, and
/// `data` bytes of tensor data after the alignment padding.
struct Raw {
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
}

impl Raw {
    fn new() -> Raw {
        Raw {
            kv: Vec::new(),
            n_kv: 0,
            infos: Vec::new(),
            n_tensors: 0,
        }
    }

    fn string(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
    }

    /// A metadata key with a value of type `ty` whose bytes are `value`.
    fn kv(&mut self, key: &[u8], ty: u32, value: &[u8]) {
        Raw::string(&mut self.kv, key);
        self.kv.extend_from_slice(&ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
    }

    /// A tensor of type `ty` (a ggml code) with `dims` at data offset `offset`.
    fn tensor(&mut self, name: &[u8], dims: &[u64], ty: u32, offset: u64) {
        Raw::string(&mut self.infos, name);
        self.infos
            .extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            self.infos.extend_from_slice(&d.to_le_bytes());
        }
        self.infos.extend_from_slice(&ty.to_le_bytes());
        self.infos.extend_from_slice(&offset.to_le_bytes());
        self.n_tensors += 1;
    }

    fn bytes(&self, data: &[u8]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&self.n_tensors.to_le_bytes());
        out.extend_from_slice(&self.n_kv.to_le_bytes());
        out.extend_from_slice(&self.kv);
        out.extend_from_slice(&self.infos);
        out.resize(out.len().next_multiple_of(32), 0);
        out.extend_from_slice(data);
        out
    }
}

/// The `i`-th of a run of distinct short ASCII names (1 byte up to 62, then 2, ...).
fn short_name(mut i: usize) -> Vec<u8> {
    const A: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut out = Vec::new();
    loop {
        out.push(A[i % A.len()]);
        i /= A.len();
        if i == 0 {
            return out;
        }
        i -= 1;
    }
}

/// Many tiny tensors: no dimension (one F32 value each), all at data offset 0.
fn many_tensors(n: usize) -> Vec<u8> {
    let mut r = Raw::new();
    for i in 0..n {
        r.tensor(&short_name(i), &[], 0, 0);
    }
    r.bytes(&[0; 4])
}

/// Many metadata keys of one `u8` each.
fn many_keys(n: usize) -> Vec<u8> {
    let mut r = Raw::new();
    for i in 0..n {
        r.kv(&short_name(i), 0, &[7]);
    }
    r.bytes(&[])
}

/// One array of `n` elements of type `elem`, each element's bytes `one`.
fn long_array(elem: u32, n: usize, one: &[u8]) -> Vec<u8> {
    let mut value = elem.to_le_bytes().to_vec();
    value.extend_from_slice(&(n as u64).to_le_bytes());
    for _ in 0..n {
        value.extend_from_slice(one);
    }
    let mut r = Raw::new();
    r.kv(b"a", 9, &value);
    r.bytes(&[])
}

/// The hostile shapes of about `size` bytes each, named.
fn hostile(size: usize) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("tiny tensors", many_tensors(size / 27)),
        ("metadata keys", many_keys(size / 15)),
        (
            "empty strings",
            long_array(8, size / 8, &0u64.to_le_bytes()),
        ),
        (
            "empty arrays",
            long_array(9, size / 12, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        ),
        ("bools", long_array(7, size, &[1])),
        ("u64s", long_array(10, size / 8, &[1, 2, 3, 4, 5, 6, 7, 8])),
    ]
}

/// The bound docs/gguf.md states: the index a parsed file keeps besides the file's
/// bytes is at most 20/13 of them (a 16-byte entry and a 4-byte place in the sorted
/// order for each metadata entry of at least 13 bytes), whatever the shape. The reader
/// before this bound (owned names and values, two hash maps of cloned names) kept 6.5
/// times the file for many short metadata keys, by its types' sizes.
#[test]
fn the_index_is_bounded_by_the_file_size() {
    for (what, bytes) in hostile(400_000) {
        let len = bytes.len();
        let g = Gguf::from_vec(bytes).expect("the hostile file is valid");
        let ratio = g.index_bytes() as f64 / len as f64;
        println!(
            "{what}: {len} bytes, index {} bytes, {ratio:.3} a byte",
            g.index_bytes()
        );
        assert!(
            ratio <= 20.0 / 13.0,
            "{what}: {} bytes for {len}",
            g.index_bytes()
        );
        assert_eq!(g.file_len(), len as u64);
    }
    // The entries count what they index: 24 + 4 bytes a tensor, 16 + 4 a key.
    let g = Gguf::from_vec(many_tensors(1_000)).unwrap();
    assert_eq!((g.tensor_count(), g.index_bytes()), (1_000, 28_000));
    let g = Gguf::from_vec(many_keys(1_000)).unwrap();
    assert_eq!((g.metadata_count(), g.index_bytes()), (1_000, 20_000));
}

/// The shapes that parse into the most memory still read back what was written.
#[test]
fn hostile_shapes_read_back() {
    let g = Gguf::from_vec(many_tensors(5_000)).unwrap();
    for (i, t) in g.tensors().enumerate() {
        assert_eq!(t.name.as_bytes(), short_name(i));
        assert_eq!((t.dims, t.offset, t.ggml_type), (&[][..], 0, GgmlType::F32));
    }
    let name = String::from_utf8(short_name(4_321)).unwrap();
    assert_eq!(g.tensor(&name).map(|t| t.name), Some(name.as_str()));
    assert!(g.tensor("no such tensor").is_none());
    let g = Gguf::from_vec(many_keys(5_000)).unwrap();
    let key = String::from_utf8(short_name(77)).unwrap();
    assert_eq!(g.metadata(&key), Some(Value::U8(7)));
    assert_eq!(g.metadata_keys().nth(77), Some(key.as_str()));
    let g = Gguf::from_vec(long_array(8, 1_000, &0u64.to_le_bytes())).unwrap();
    match g.metadata("a") {
        Some(Value::Array(Array::String(v))) => {
            assert_eq!(v.len(), 1_000);
            assert!(v.iter().all(String::is_empty));
        }
        v => panic!("{v:?}"),
    }
}

/// The listing of `g` as text.
fn listing(g: &Gguf) -> String {
    let mut out = Vec::new();
    write_listing(g, &mut out).expect("a Vec takes any listing");
    String::from_utf8(out).expect("the listing is UTF-8")
}

#[test]
fn a_name_of_65536_bytes_and_control_characters_list_escaped() {
    let long = vec![b'x'; 65_536];
    let mut r = Raw::new();
    r.tensor(&long, &[4, 2], 0, 0);
    r.tensor(b"evil\n\x1b[2J\\\x7f\t\r", &[4], 1, 0);
    let g = Gguf::from_vec(r.bytes(&[0; 32])).expect("a valid file");
    let text = listing(&g);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{}", &text[..200.min(text.len())]);
    let want_long = format!("{}  F32      [4, 2]", "x".repeat(65_536));
    assert_eq!(lines[1], want_long);
    let escaped = r"evil\n\u{1b}[2J\\\u{7f}\t\r";
    assert_eq!(
        lines[2],
        format!(
            "{escaped}{}  F16      [4]",
            " ".repeat(LIST_NAME_COLUMN - escaped.len())
        )
    );
    assert_eq!(lines[3], "2 tensors");
    // No control character but the line ends.
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'));
}

#[test]
fn the_listing_is_linear_in_the_file() {
    // One long name and many short ones: padding every line to the longest name would
    // print 20,000 x 2,000 bytes.
    let mut r = Raw::new();
    r.tensor(&vec![b'n'; 20_000], &[], 0, 0);
    for i in 0..2_000 {
        r.tensor(&short_name(i), &[1, 1, 1, 1], 0, 0);
    }
    let bytes = r.bytes(&[0; 4]);
    let len = bytes.len();
    let g = Gguf::from_vec(bytes).expect("a valid file");
    let text = listing(&g);
    assert!(
        text.len() <= 5 * len + 200,
        "{} bytes listed for a {len}-byte file",
        text.len()
    );
    // Short names end at the column, so the type starts at the same place on each line.
    let short = text.lines().nth(2).expect("a short tensor's line");
    assert_eq!(short, format!("a{}  F32      [1, 1, 1, 1]", " ".repeat(39)));
    assert_eq!(text.lines().count(), 2_003);
}

#[test]
fn the_listing_is_at_most_five_bytes_a_file_byte() {
    // The worst shape: a name of control characters, each listed as 5 bytes (`\u{1}`).
    let mut r = Raw::new();
    r.tensor(&[1u8; 10_000], &[], 0, 0);
    let bytes = r.bytes(&[0; 4]);
    let len = bytes.len();
    let g = Gguf::from_vec(bytes).expect("a valid file");
    let text = listing(&g);
    assert!(text.len() > 50_000, "every control byte is escaped");
    assert!(text.len() <= 5 * len + 200, "{} for {len}", text.len());
}

fn emu() -> Device {
    Device::open_spec("emu").expect("the emulated kernel")
}

/// A file with tensor `name` of `n` rows of 32 values of type `ty`, all `fill` but the
/// value at (`row`, `col`), which has the bits `bits` (F32, F16 or BF16 encoded).
fn one_odd_value(ty: GgmlType, n: u64, row: u64, col: u64, bits: u32) -> Gguf {
    let size = ty.type_size() as usize;
    let fill: u32 = match ty {
        GgmlType::F32 => 0.5f32.to_bits(),
        GgmlType::F16 => 0x3800,
        _ => 0x3f00,
    };
    let mut data = Vec::new();
    for i in 0..n * 32 {
        let v = if i == row * 32 + col { bits } else { fill };
        data.extend_from_slice(&v.to_le_bytes()[..size]);
    }
    let mut w = Writer::new();
    w.tensor_raw("w", ty, &[32, n], data)
        .expect("a valid tensor");
    Gguf::from_vec(w.to_bytes()).expect("a valid file")
}

/// The weight a load refused, as (row, column, value, bank).
fn refused(g: &Gguf, dtype: Dtype) -> (u64, u64, f32, Dtype) {
    match load_weights(&emu(), g, "w", dtype) {
        Err(Error::NotRepresentable {
            tensor,
            row,
            column,
            value,
            bank,
        }) => {
            assert_eq!(tensor, "w");
            (row, column, value, bank)
        }
        Err(e) => panic!("{dtype:?}: another error: {e}"),
        Ok((_, report)) => panic!("{dtype:?}: loaded: {report}"),
    }
}

#[test]
fn a_weight_past_the_fp16_range_is_refused_with_its_index_and_value() {
    let g = one_odd_value(GgmlType::F32, 3, 1, 5, 1e5f32.to_bits());
    assert_eq!(refused(&g, Dtype::Fp16), (1, 5, 1e5, Dtype::Fp16));
    // A bf16 bank holds 1e5, rounded; so do the integer banks, scaled.
    for dtype in [Dtype::Bf16, Dtype::Int8, Dtype::Int4] {
        let (_, report) = load_weights(&emu(), &g, "w", dtype).expect("1e5 fits");
        assert!(report.max_abs.is_finite(), "{report}");
    }
    // 65519 rounds to the largest fp16, 65504; 65520 rounds to infinity.
    let g = one_odd_value(GgmlType::F32, 2, 0, 31, 65519f32.to_bits());
    let (_, report) = load_weights(&emu(), &g, "w", Dtype::Fp16).expect("65519 fits");
    assert_eq!(report.max_abs, 15.0, "{report}");
    let g = one_odd_value(GgmlType::F32, 2, 0, 31, 65520f32.to_bits());
    assert_eq!(refused(&g, Dtype::Fp16), (0, 31, 65520.0, Dtype::Fp16));
}

#[test]
fn a_bf16_weight_that_rounds_to_infinity_is_refused() {
    // 0x7f7f is the largest bf16, about 3.39e38: it fits a bf16 bank, not an fp16 one.
    let g = one_odd_value(GgmlType::BF16, 2, 1, 0, 0x7f7f);
    let big = f32::from_bits(0x7f7f_0000);
    assert_eq!(refused(&g, Dtype::Fp16), (1, 0, big, Dtype::Fp16));
    let (_, report) = load_weights(&emu(), &g, "w", Dtype::Bf16).expect("exact in bf16");
    assert_eq!(report.max_abs, 0.0, "{report}");
    // An f32 3.4e38 is finite but rounds up to infinity in bf16.
    let g = one_odd_value(GgmlType::F32, 2, 1, 7, 3.4e38f32.to_bits());
    assert_eq!(refused(&g, Dtype::Bf16), (1, 7, 3.4e38, Dtype::Bf16));
}

#[test]
fn nan_and_infinite_weights_are_refused_by_every_bank() {
    for (ty, nan, inf) in [
        (GgmlType::F32, 0x7fc0_0000, 0x7f80_0000),
        (GgmlType::F16, 0x7e00, 0xfc00),
        (GgmlType::BF16, 0x7fc0, 0xff80),
    ] {
        for dtype in [Dtype::Fp16, Dtype::Bf16, Dtype::Int8, Dtype::Int4] {
            let (row, col, v, bank) = refused(&one_odd_value(ty, 2, 1, 3, nan), dtype);
            assert_eq!((row, col, bank), (1, 3, dtype), "{ty} NaN");
            assert!(v.is_nan(), "{ty}: {v}");
            let (row, col, v, _) = refused(&one_odd_value(ty, 2, 0, 9, inf), dtype);
            assert_eq!((row, col), (0, 9), "{ty} infinity");
            assert!(v.is_infinite(), "{ty}: {v}");
        }
    }
}

#[test]
fn the_report_maxima_do_not_skip_nan() {
    let want = [1.0f32, 2.0, 3.0];
    let report = LoadReport::measure("t", GgmlType::F32, Dtype::Fp16, (1, 3), &want, &want);
    assert_eq!(
        (report.max_abs, report.rms, report.rel_rms),
        (0.0, 0.0, 0.0)
    );
    // A NaN after a larger error: f64::max would keep the 1.0.
    let got = [2.0f32, f32::NAN, 3.0];
    let report = LoadReport::measure("t", GgmlType::F32, Dtype::Fp16, (1, 3), &got, &want);
    assert!(report.max_abs.is_nan(), "{report}");
    assert!(report.rms.is_nan() && report.rel_rms.is_nan(), "{report}");
    let got = [f32::INFINITY, 2.0, 3.0];
    let report = LoadReport::measure("t", GgmlType::F32, Dtype::Fp16, (1, 3), &got, &want);
    assert_eq!(report.max_abs, f64::INFINITY, "{report}");
    // Values one side lacks are not a number either.
    let report = LoadReport::measure("t", GgmlType::F32, Dtype::Fp16, (1, 3), &want[..2], &want);
    assert!(report.max_abs.is_nan(), "{report}");
}

#[test]
fn a_block_scale_that_is_not_finite_is_refused_at_the_value_it_makes() {
    // Two Q8_0 rows of one block each: row 0 fine, row 1 with d = +inf (f16 0x7c00) and
    // quants 0 and 1 from value 0 on, which dequantise to NaN (inf x 0) and +inf.
    let mut data = Vec::new();
    for (d, first) in [(0x3c00u16, 0u8), (0x7c00, 0)] {
        data.extend_from_slice(&d.to_le_bytes());
        data.push(first);
        data.extend_from_slice(&[1u8; 31]);
    }
    let mut w = Writer::new();
    w.tensor_raw("w", GgmlType::Q8_0, &[32, 2], data).unwrap();
    let g = Gguf::from_vec(w.to_bytes()).unwrap();
    for dtype in [Dtype::Int8, Dtype::Fp16] {
        let (row, col, v, _) = refused(&g, dtype);
        assert_eq!((row, col), (1, 0), "{dtype:?}");
        assert!(v.is_nan(), "{dtype:?}: {v}");
    }
}
