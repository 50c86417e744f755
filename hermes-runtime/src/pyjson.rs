//! JSON encodings that match Python's `json.dumps`, so files we write are byte-identical to the
//! ones Atropos tooling writes and reads.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{CharEscape, Formatter, PrettyFormatter, Serializer};

/// `json.dumps(x, ensure_ascii=False)` layout: `", "` between items, `": "` after keys,
/// non-ASCII kept as UTF-8. Used for the group JSONL, samples and tool results.
#[derive(Default)]
pub struct PythonCompact;

impl Formatter for PythonCompact {
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

/// `json.dumps(x, indent=2)` layout with the default `ensure_ascii=True`: every non-ASCII
/// character is written as `\uXXXX` (surrogate pairs above U+FFFF). Used for `metrics.json`.
pub struct PythonIndentAscii(PrettyFormatter<'static>);

impl Default for PythonIndentAscii {
    fn default() -> Self {
        Self(PrettyFormatter::with_indent(b"  "))
    }
}

macro_rules! delegate {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(fn $name<W: ?Sized + Write>(&mut self, w: &mut W $(, $arg: $ty)*) -> io::Result<()> {
            self.0.$name(w $(, $arg)*)
        })*
    };
}

impl Formatter for PythonIndentAscii {
    delegate! {
        begin_array();
        end_array();
        begin_array_value(first: bool);
        end_array_value();
        begin_object();
        end_object();
        begin_object_key(first: bool);
        begin_object_value();
        end_object_value();
    }

    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        for ch in fragment.chars() {
            if ch.is_ascii() {
                w.write_all(&[ch as u8])?;
            } else {
                let mut units = [0u16; 2];
                for unit in ch.encode_utf16(&mut units) {
                    write!(w, "\\u{unit:04x}")?;
                }
            }
        }
        Ok(())
    }

    fn write_char_escape<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        escape: CharEscape,
    ) -> io::Result<()> {
        self.0.write_char_escape(w, escape)
    }
}

/// Serialises `value` with the Python compact layout (no trailing newline).
pub fn to_python_string<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::with_capacity(256);
    let mut ser = Serializer::with_formatter(&mut out, PythonCompact);
    value
        .serialize(&mut ser)
        .expect("serialising to memory with string keys cannot fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Serialises `value` like Python's `json.dumps(value, indent=2)`.
pub fn to_python_pretty_ascii<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::with_capacity(256);
    let mut ser = Serializer::with_formatter(&mut out, PythonIndentAscii::default());
    value
        .serialize(&mut ser)
        .expect("serialising to memory with string keys cannot fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Python's `repr(float)` for the values we write as strings (`2.0`, not Rust's `2`).
pub fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let s = format!("{x}");
    if s.contains(['.', 'e']) {
        s
    } else {
        format!("{s}.0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compact_matches_python_separators_and_keeps_utf8() {
        let v = json!({"a": [1, 2.5, -100], "b": {"c": null, "d": "é✓"}, "e": []});
        assert_eq!(
            to_python_string(&v),
            r#"{"a": [1, 2.5, -100], "b": {"c": null, "d": "é✓"}, "e": []}"#
        );
    }

    #[test]
    fn pretty_ascii_escapes_non_ascii_like_python() {
        let v = json!({"k": "é😀", "l": [1], "m": {}});
        assert_eq!(
            to_python_pretty_ascii(&v),
            "{\n  \"k\": \"\\u00e9\\ud83d\\ude00\",\n  \"l\": [\n    1\n  ],\n  \"m\": {}\n}"
        );
    }

    #[test]
    fn float_repr_has_a_decimal_point() {
        assert_eq!(python_float_repr(2.0), "2.0");
        assert_eq!(python_float_repr(1.5), "1.5");
        assert_eq!(python_float_repr(-0.25), "-0.25");
    }
}
