//! JSON encodings that match Python's `json.dumps`, so files we write are byte-identical to the
//! ones Atropos tooling writes and reads.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{CharEscape, Formatter, PrettyFormatter, Serializer};

/// `json.dumps(x, ensure_ascii=False)` layout: `", "` between items, `": "` after keys,
/// non-ASCII kept as UTF-8. Used for the group JSONL, samples and tool results.
#[derive(Default)]
pub(crate) struct PythonCompact;

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
pub(crate) struct PythonIndentAscii(PrettyFormatter<'static>);

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
pub(crate) fn to_python_pretty_ascii<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::with_capacity(256);
    let mut ser = Serializer::with_formatter(&mut out, PythonIndentAscii::default());
    value
        .serialize(&mut ser)
        .expect("serialising to memory with string keys cannot fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// The separators of a JSON text: Python's `json.dumps` (`", "` and `": "`, the JSONL files
/// Atropos tooling writes) or compact (`","` and `":"`, serde_json's, the request bodies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonLayout {
    /// `", "` and `": "`.
    Python,
    /// `","` and `":"`.
    Compact,
}

impl JsonLayout {
    /// Between the items of an array or the entries of an object.
    pub fn item_separator(self) -> &'static [u8] {
        match self {
            JsonLayout::Python => b", ",
            JsonLayout::Compact => b",",
        }
    }

    /// Between a key and its value.
    pub fn key_separator(self) -> &'static [u8] {
        match self {
            JsonLayout::Python => b": ",
            JsonLayout::Compact => b":",
        }
    }

    /// `value` serialised in this layout.
    pub fn to_vec<T: Serialize + ?Sized>(self, value: &T) -> Vec<u8> {
        match self {
            JsonLayout::Python => to_python_string(value).into_bytes(),
            JsonLayout::Compact => serde_json::to_vec(value)
                .expect("serialising to memory with string keys cannot fail"),
        }
    }
}

/// The digits of 0..1000, zero-padded to three.
const TRIPLES: [[u8; 3]; 1000] = {
    let mut t = [[0u8; 3]; 1000];
    let mut i = 0;
    while i < 1000 {
        t[i] = [
            b'0' + (i / 100) as u8,
            b'0' + (i / 10 % 10) as u8,
            b'0' + (i % 10) as u8,
        ];
        i += 1;
    }
    t
};

/// Appends `ints` as a JSON array in `layout`, the bytes serde_json writes for it. Token and
/// mask lists are nearly all of a group's JSON (100,000 integers for 8 rollouts of 6,600
/// tokens); serde_json's path costs a separator write, an `itoa` and a copy per integer, this
/// one writes ids below a million from a table of three-digit groups straight into a stack
/// buffer, and copies a run of Atropos's mask value `-100` (most of every mask list: the
/// prompt, the tools, the tool results) up to [`MASK_RUN`] values at a time from a prepared
/// pattern.
pub(crate) fn write_int_array(out: &mut Vec<u8>, ints: &[i64], layout: JsonLayout) {
    const CHUNK: usize = 4096;
    let sep = layout.item_separator();
    let unit = sep.len() + 4;
    // `sep` + `-100`, MASK_RUN times (a separator is at most 2 bytes).
    let mut masks = [0u8; MASK_RUN * 6];
    for at in (0..MASK_RUN * unit).step_by(unit) {
        masks[at..at + sep.len()].copy_from_slice(sep);
        masks[at + sep.len()..at + unit].copy_from_slice(b"-100");
    }
    // Room past CHUNK for a run of masks or a separator and the longest integer, and the
    // closing bracket.
    let mut chunk = [0u8; CHUNK + MASK_RUN * 6 + 32];
    chunk[0] = b'[';
    let Some((&first, rest)) = ints.split_first() else {
        out.extend_from_slice(b"[]");
        return;
    };
    let mut n = put_int(&mut chunk, 1, first);
    let mut i = 0;
    while i < rest.len() {
        if n >= CHUNK {
            out.extend_from_slice(&chunk[..n]);
            n = 0;
        }
        let x = rest[i];
        if x == -100 {
            let run = 1 + rest[i + 1..]
                .iter()
                .take(MASK_RUN - 1)
                .take_while(|&&x| x == -100)
                .count();
            chunk[n..n + run * unit].copy_from_slice(&masks[..run * unit]);
            n += run * unit;
            i += run;
            continue;
        }
        chunk[n] = b',';
        chunk[n + 1] = b' ';
        n = put_int(&mut chunk, n + sep.len(), x);
        i += 1;
    }
    chunk[n] = b']';
    out.extend_from_slice(&chunk[..=n]);
}

/// The most mask values [`write_int_array`] copies at once.
const MASK_RUN: usize = 64;

/// Writes `x` in decimal at `buf[n..]`; returns the end. Always inlined: the compiler's own
/// choice moved between builds, and a call per integer is a large part of the work.
#[inline(always)]
fn put_int(buf: &mut [u8], mut n: usize, x: i64) -> usize {
    if x < 0 {
        buf[n] = b'-';
        n += 1;
    }
    let u = x.unsigned_abs();
    if u < 1000 {
        return put_below_1000(buf, n, u as usize);
    }
    if u < 1_000_000 {
        let n = put_below_1000(buf, n, (u / 1000) as usize);
        buf[n..n + 3].copy_from_slice(&TRIPLES[(u % 1000) as usize]);
        return n + 3;
    }
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(u).as_bytes();
    buf[n..n + digits.len()].copy_from_slice(digits);
    n + digits.len()
}

/// Writes `u` (below 1000) without leading zeros at `buf[n..]`; returns the end.
#[inline(always)]
fn put_below_1000(buf: &mut [u8], n: usize, u: usize) -> usize {
    let [a, b, c] = TRIPLES[u];
    if u >= 100 {
        buf[n] = a;
        buf[n + 1] = b;
        buf[n + 2] = c;
        n + 3
    } else if u >= 10 {
        buf[n] = b;
        buf[n + 1] = c;
        n + 2
    } else {
        buf[n] = c;
        n + 1
    }
}

/// Python's `repr(float)` for the values we write as strings (`2.0`, not Rust's `2`).
pub(crate) fn python_float_repr(x: f64) -> String {
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
    fn integer_arrays_are_the_bytes_serde_json_writes() {
        let mut edge = vec![
            0, 9, 10, 99, 100, 101, 999, 1000, 1001, 9999, 10_000, 12_345,
        ];
        edge.extend([99_999, 100_000, 999_999, 1_000_000, 151_645, 123_456_789]);
        edge.extend([
            -1,
            -9,
            -10,
            -100,
            -999,
            -1000,
            -1_000_001,
            i64::MAX,
            i64::MIN,
        ]);
        // Long enough to cross the stack buffer several times.
        let long: Vec<i64> = (0..20_000).map(|i| (i * 7919) % 2_000_003 - 100).collect();
        // Mask runs of every length around the copy's block and the buffer's size, at the
        // start, between ids and at the end.
        let mut masks = Vec::new();
        for run in [1, 2, 63, 64, 65, 127, 128, 129, 700, 5_000] {
            masks.extend(std::iter::repeat_n(-100, run));
            masks.extend([run as i64, -99, -101]);
        }
        masks.extend(std::iter::repeat_n(-100, 1_000));
        for ints in [
            edge,
            long,
            masks,
            Vec::new(),
            vec![5],
            vec![-100],
            vec![-100, -100],
        ] {
            for layout in [JsonLayout::Python, JsonLayout::Compact] {
                let mut out = b"x".to_vec();
                write_int_array(&mut out, &ints, layout);
                assert_eq!(out[1..], layout.to_vec(&ints)[..], "{layout:?}");
            }
        }
    }

    #[test]
    fn float_repr_has_a_decimal_point() {
        assert_eq!(python_float_repr(2.0), "2.0");
        assert_eq!(python_float_repr(1.5), "1.5");
        assert_eq!(python_float_repr(-0.25), "-0.25");
    }
}
