//! Just enough JSON to read a capture's `meta.json`.

use std::collections::BTreeMap;

fn bad(at: usize) -> String {
    format!("JSON: unexpected input at byte {at}")
}

/// Just enough JSON for `meta.json`: values, with numbers also read from `"0x..."`
/// strings.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Json {
    /// `null`, and what a missing key or index reads as.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Num(f64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object.
    Obj(BTreeMap<String, Json>),
}

static NULL: Json = Json::Null;

impl Json {
    /// Parses a whole document.
    pub(super) fn parse(text: &str) -> Result<Json, String> {
        let b = text.as_bytes();
        let mut at = 0;
        let v = Self::value(b, &mut at, 0)?;
        Self::ws(b, &mut at);
        if at != b.len() {
            return Err(format!("JSON: trailing bytes at {at}"));
        }
        Ok(v)
    }

    fn ws(b: &[u8], at: &mut usize) {
        while b.get(*at).is_some_and(u8::is_ascii_whitespace) {
            *at += 1;
        }
    }

    fn value(b: &[u8], at: &mut usize, depth: usize) -> Result<Json, String> {
        if depth > 64 {
            return Err("JSON: nested too deep".into());
        }
        Self::ws(b, at);
        match b.get(*at) {
            Some(b'{') => Self::object(b, at, depth),
            Some(b'[') => Self::array(b, at, depth),
            Some(b'"') => Self::string_at(b, at),
            Some(b't') if b[*at..].starts_with(b"true") => {
                *at += 4;
                Ok(Json::Bool(true))
            }
            Some(b'f') if b[*at..].starts_with(b"false") => {
                *at += 5;
                Ok(Json::Bool(false))
            }
            Some(b'n') if b[*at..].starts_with(b"null") => {
                *at += 4;
                Ok(Json::Null)
            }
            Some(c) if *c == b'-' || c.is_ascii_digit() => {
                let start = *at;
                while b
                    .get(*at)
                    .is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
                {
                    *at += 1;
                }
                std::str::from_utf8(&b[start..*at])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .map(Json::Num)
                    .ok_or_else(|| bad(start))
            }
            _ => Err(bad(*at)),
        }
    }

    /// An object, `at` on its `{`.
    fn object(b: &[u8], at: &mut usize, depth: usize) -> Result<Json, String> {
        *at += 1;
        let mut m = BTreeMap::new();
        loop {
            Self::ws(b, at);
            if b.get(*at) == Some(&b'}') {
                *at += 1;
                return Ok(Json::Obj(m));
            }
            let Json::Str(k) = Self::value(b, at, depth + 1)? else {
                return Err(bad(*at));
            };
            Self::ws(b, at);
            if b.get(*at) != Some(&b':') {
                return Err(bad(*at));
            }
            *at += 1;
            m.insert(k, Self::value(b, at, depth + 1)?);
            Self::ws(b, at);
            match b.get(*at) {
                Some(b',') => *at += 1,
                Some(b'}') => {}
                _ => return Err(bad(*at)),
            }
        }
    }

    /// An array, `at` on its `[`.
    fn array(b: &[u8], at: &mut usize, depth: usize) -> Result<Json, String> {
        *at += 1;
        let mut v = Vec::new();
        loop {
            Self::ws(b, at);
            if b.get(*at) == Some(&b']') {
                *at += 1;
                return Ok(Json::Arr(v));
            }
            v.push(Self::value(b, at, depth + 1)?);
            Self::ws(b, at);
            match b.get(*at) {
                Some(b',') => *at += 1,
                Some(b']') => {}
                _ => return Err(bad(*at)),
            }
        }
    }

    /// A string, `at` on its opening quote.
    fn string_at(b: &[u8], at: &mut usize) -> Result<Json, String> {
        *at += 1;
        let mut s = String::new();
        loop {
            match b.get(*at) {
                None => return Err("JSON: unterminated string".into()),
                Some(b'"') => {
                    *at += 1;
                    return Ok(Json::Str(s));
                }
                Some(b'\\') => {
                    let c = *b.get(*at + 1).ok_or_else(|| bad(*at))?;
                    *at += 2;
                    match c {
                        b'n' => s.push('\n'),
                        b't' => s.push('\t'),
                        b'r' => s.push('\r'),
                        b'b' | b'f' => {}
                        b'u' => {
                            let hex = b.get(*at..*at + 4).ok_or_else(|| bad(*at))?;
                            let code = std::str::from_utf8(hex)
                                .ok()
                                .and_then(|h| u32::from_str_radix(h, 16).ok())
                                .ok_or_else(|| bad(*at))?;
                            s.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                            *at += 4;
                        }
                        c => s.push(c as char),
                    }
                }
                Some(_) => {
                    let start = *at;
                    while b.get(*at).is_some_and(|&c| c != b'"' && c != b'\\') {
                        *at += 1;
                    }
                    s.push_str(&String::from_utf8_lossy(&b[start..*at]));
                }
            }
        }
    }

    /// The value at `key`, `null` when there is none.
    pub(super) fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(m) => m.get(key).unwrap_or(&NULL),
            _ => &NULL,
        }
    }

    /// The items of an array, none for anything else.
    pub(super) fn items(&self) -> &[Json] {
        match self {
            Json::Arr(v) => v,
            _ => &[],
        }
    }

    /// The text of a string.
    pub(super) fn string(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A number, or a string holding one in decimal or `0x` hexadecimal.
    pub(super) fn number(&self) -> Option<u64> {
        match self {
            Json::Num(n) if *n >= 0.0 && n.fract() == 0.0 && *n < 1.8e19 => Some(*n as u64),
            Json::Str(s) => match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Json;

    #[test]
    fn json_reads_meta_shapes() {
        let j = Json::parse(
            r#"{"a": [1, {"b": "0x1f"}], "s": "x\"y\u0041", "t": true, "n": null, "f": -2.5e1}"#,
        )
        .unwrap();
        assert_eq!(j.get("a").items()[0].number(), Some(1));
        assert_eq!(j.get("a").items()[1].get("b").number(), Some(0x1f));
        assert_eq!(j.get("s").string(), Some("x\"yA"));
        assert_eq!(j.get("t"), &Json::Bool(true));
        assert_eq!(j.get("f"), &Json::Num(-25.0));
        assert_eq!(j.get("f").number(), None);
        assert_eq!(j.get("missing").get("deeper"), &Json::Null);
        for bad in ["{", "[1,", "{\"a\" 1}", "\"abc", "[1] x", "{\"a\":tru}"] {
            assert!(Json::parse(bad).is_err(), "{bad}");
        }
        assert!(Json::parse(&"[".repeat(100)).is_err());
    }
}
