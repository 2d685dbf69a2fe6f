//! The text listing of a file's tensors (what `rknpu gguf` prints): a header line, one
//! line a tensor, a count. Its length is linear in the file's: names are padded to a
//! fixed column, never to the longest name, and escaped so that no byte of a name can
//! start a line of its own or move the cursor.

use super::Gguf;
use std::io::{self, Write};

/// The column the type of a tensor starts at when its (escaped) name is shorter: a
/// longer name pushes only its own line's type to the right.
pub const LIST_NAME_COLUMN: usize = 40;

/// The width of the type column: the longest ggml type name (`IQ2_XXS`).
const TYPE_WIDTH: usize = 7;

/// Writes the listing of `g` to `out`:
///
/// ```text
/// GGUF version 3, 2 metadata entries, alignment 32
/// blk.0.ffn_up.weight                       Q8_0     [4096, 11008]
/// 1 tensors
/// ```
///
/// Each tensor line is its name escaped by [`escape_name`], padded with spaces to
/// [`LIST_NAME_COLUMN`] characters, two spaces, the type padded to 7, two spaces and the
/// shape in GGUF order. A line takes at most `LIST_NAME_COLUMN + 81` bytes plus 5 bytes a
/// byte of the name, so the listing is at most 5 bytes a byte of the file plus its first
/// and last lines (docs/gguf.md, "Bounds"). The only error is `out`'s.
pub fn write_listing(g: &Gguf, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "GGUF version {}, {} metadata entries, alignment {}",
        g.version(),
        g.metadata_count(),
        g.alignment()
    )?;
    let mut name = String::new();
    for t in g.tensors() {
        name.clear();
        escape_name(t.name, &mut name);
        out.write_all(name.as_bytes())?;
        let chars = name.chars().count();
        for _ in chars..LIST_NAME_COLUMN {
            out.write_all(b" ")?;
        }
        let ty = t.ggml_type.name();
        out.write_all(b"  ")?;
        out.write_all(ty.as_bytes())?;
        for _ in ty.len()..TYPE_WIDTH {
            out.write_all(b" ")?;
        }
        out.write_all(b"  [")?;
        for (i, d) in t.dims.iter().enumerate() {
            if i > 0 {
                out.write_all(b", ")?;
            }
            write!(out, "{d}")?;
        }
        out.write_all(b"]\n")?;
    }
    writeln!(out, "{} tensors", g.tensor_count())
}

/// Appends `name` to `out` with its control characters escaped: `\n`, `\r` and `\t` as
/// such, the other C0 and C1 controls and DEL as `\u{XX}`, and the backslash doubled, so
/// the escaped text is unambiguous and holds no control character. Other characters are
/// kept as they are.
pub fn escape_name(name: &str, out: &mut String) {
    use std::fmt::Write as _;
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                // Writing to a String does not fail.
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}
