//! What a config field looks like on the command line: its value shape, how a flag's text
//! becomes a JSON value, and how a YAML value is checked against it.

use serde_json::{Map, Value};

/// The scalar kind of a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarKind {
    /// `true/false/True/False/1/0/yes/no/on/off`.
    Bool,
    /// A signed integer (negative numbers allowed with or without `=`).
    Int,
    /// A floating-point number.
    Float,
    /// Free text.
    Str,
    /// One of a fixed set of strings.
    Choice(&'static [&'static str]),
    /// A JSON list or map (a comma-separated list is accepted for lists of strings).
    Json,
}

/// A flag's value shape: its kind and whether `None`/`null` is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagShape {
    /// The value kind.
    pub kind: ScalarKind,
    /// Whether `None` / `null` clears the field.
    pub nullable: bool,
}

impl FlagShape {
    const fn of(kind: ScalarKind) -> Self {
        FlagShape {
            kind,
            nullable: false,
        }
    }

    /// The placeholder shown in `--help` (`INT`, `FLOAT`, `BOOL`, …).
    pub fn value_name(&self) -> &'static str {
        match self.kind {
            ScalarKind::Bool => "BOOL",
            ScalarKind::Int => "INT",
            ScalarKind::Float => "FLOAT",
            ScalarKind::Str => "TEXT",
            ScalarKind::Choice(_) => "CHOICE",
            ScalarKind::Json => "JSON",
        }
    }
}

/// Rust types that can be config fields (and so `--env.*` flags). The `#[hermes_env]` macro
/// requires this for every `#[config]` field.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a command-line flag",
    label = "use bool, an integer, a float, String, PathBuf, Option<T>, Vec<T> or a map",
    note = "config fields become `--env.<field>` flags, so their values must be parseable from text"
)]
pub trait FlagType {
    /// The value shape of this type.
    const SHAPE: FlagShape;
}

macro_rules! flag_types {
    ($kind:expr => $($t:ty),*) => { $(impl FlagType for $t { const SHAPE: FlagShape = FlagShape::of($kind); })* };
}
flag_types!(ScalarKind::Bool => bool);
flag_types!(ScalarKind::Int => i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);
flag_types!(ScalarKind::Float => f32, f64);
flag_types!(ScalarKind::Str => String, std::path::PathBuf);
flag_types!(ScalarKind::Json => Value, Map<String, Value>);

impl<T: FlagType> FlagType for Option<T> {
    const SHAPE: FlagShape = FlagShape {
        nullable: true,
        ..T::SHAPE
    };
}
impl<T> FlagType for Vec<T> {
    const SHAPE: FlagShape = FlagShape::of(ScalarKind::Json);
}
impl<K, V> FlagType for std::collections::HashMap<K, V> {
    const SHAPE: FlagShape = FlagShape::of(ScalarKind::Json);
}
impl<K, V> FlagType for std::collections::BTreeMap<K, V> {
    const SHAPE: FlagShape = FlagShape::of(ScalarKind::Json);
}

/// One settable config field.
#[derive(Debug, Clone, Copy)]
pub struct FieldSpec {
    /// Field name (the part after `--env.` / `--openai.`).
    pub name: &'static str,
    /// Value shape.
    pub shape: FlagShape,
    /// Help text (the field's doc comment).
    pub help: &'static str,
    /// The values a numeric field accepts; `None` for other fields.
    pub range: Option<Range>,
}

/// The closed interval a numeric field's value must lie in. A negative limit is not
/// "unlimited" and an absurd count is not a request to exhaust the host: both are refused
/// with the bounds named.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// The smallest value accepted.
    pub min: f64,
    /// The largest value accepted.
    pub max: f64,
}

impl Range {
    /// `min..=max`.
    pub const fn new(min: f64, max: f64) -> Self {
        Range { min, max }
    }

    /// `Err(reason)` when `value` (a field's JSON value) is a number outside the range or a
    /// non-finite float (which serialises as `null`); `null` of a nullable field passes.
    pub fn check(&self, shape: FlagShape, value: &Value) -> Result<(), String> {
        let number = match value {
            Value::Null if shape.nullable => return Ok(()),
            Value::Number(n) => n.as_f64(),
            _ => None,
        };
        match number {
            Some(v) if (self.min..=self.max).contains(&v) => Ok(()),
            Some(_) => Err(format!("must be within {self}, got {value}")),
            None => Err(format!("must be a finite number within {self}")),
        }
    }

    fn show(v: f64) -> String {
        if v.fract() == 0.0 && v.abs() < 1e15 {
            format!("{}", v as i64)
        } else {
            format!("{v}")
        }
    }
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..={}", Self::show(self.min), Self::show(self.max))
    }
}

/// Parses a flag's text as `shape` (Atropos's lenient coercions, plus negative numbers and
/// JSON lists/maps). The error is a short phrase for "invalid value for --x: <phrase>".
pub(crate) fn parse_flag_text(shape: FlagShape, text: &str) -> Result<Value, String> {
    if shape.nullable && matches!(text, "None" | "null" | "none") {
        return Ok(Value::Null);
    }
    coerce(shape, &Value::String(text.to_owned()))
}

/// Checks (and leniently coerces) a YAML/JSON value against `shape`, as pydantic does for
/// Atropos configs: `"16"` → 16, `"false"` → false, `1` → 1.0.
pub(crate) fn coerce(shape: FlagShape, value: &Value) -> Result<Value, String> {
    if value.is_null() {
        return if shape.nullable {
            Ok(Value::Null)
        } else {
            Err("null is not allowed here".into())
        };
    }
    match shape.kind {
        ScalarKind::Bool => match value {
            Value::Bool(b) => Ok(Value::Bool(*b)),
            Value::Number(n) if n.as_i64() == Some(0) || n.as_i64() == Some(1) => {
                Ok(Value::Bool(n.as_i64() == Some(1)))
            }
            Value::String(s) => match s.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" | "t" | "y" => Ok(Value::Bool(true)),
                "false" | "0" | "no" | "off" | "f" | "n" => Ok(Value::Bool(false)),
                _ => Err(format!("expected true or false, got '{s}'")),
            },
            other => Err(format!("expected true or false, got {other}")),
        },
        ScalarKind::Int => match value {
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok(value.clone()),
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Value::from(f as i64)),
                _ => Err(format!("expected an integer, got {n}")),
            },
            Value::String(s) => s
                .trim()
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("expected an integer, got '{s}'")),
            other => Err(format!("expected an integer, got {other}")),
        },
        ScalarKind::Float => match value {
            Value::Number(n) => Ok(Value::from(n.as_f64().unwrap_or_default())),
            Value::String(s) => match s.trim().parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(Value::from(f)),
                _ => Err(format!("expected a number, got '{s}'")),
            },
            other => Err(format!("expected a number, got {other}")),
        },
        ScalarKind::Str => match value {
            Value::String(s) => Ok(Value::String(s.clone())),
            Value::Number(n) => Ok(Value::String(n.to_string())),
            Value::Bool(b) => Ok(Value::String(b.to_string())),
            other => Err(format!("expected text, got {other}")),
        },
        ScalarKind::Choice(choices) => {
            let s = match value {
                Value::String(s) => s.as_str(),
                other => {
                    return Err(format!(
                        "expected one of {}, got {other}",
                        choices.join(", ")
                    ))
                }
            };
            choices
                .iter()
                .find(|c| c.eq_ignore_ascii_case(s))
                .map(|c| Value::String((*c).to_owned()))
                .ok_or_else(|| format!("expected one of {}, got '{s}'", choices.join(", ")))
        }
        ScalarKind::Json => match value {
            Value::String(s) => {
                let t = s.trim();
                if t.starts_with('[') || t.starts_with('{') {
                    serde_json::from_str(t).map_err(|e| format!("invalid JSON: {e}"))
                } else if t.is_empty() {
                    Ok(Value::Array(Vec::new()))
                } else {
                    Ok(Value::Array(
                        t.split(',')
                            .map(|p| Value::String(p.trim().to_owned()))
                            .collect(),
                    ))
                }
            }
            Value::Array(_) | Value::Object(_) => Ok(value.clone()),
            other => Err(format!("expected a JSON list or map, got {other}")),
        },
    }
}

/// Levenshtein distance, for "did you mean" suggestions on YAML keys.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The closest name within a small edit distance, if any.
pub fn suggest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 5))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const INT: FlagShape = FlagShape::of(ScalarKind::Int);
    const OPT_STR: FlagShape = FlagShape {
        kind: ScalarKind::Str,
        nullable: true,
    };

    #[test]
    fn flag_text_table() {
        let cases: &[(FlagShape, &str, Result<Value, ()>)] = &[
            (INT, "-1", Ok(json!(-1))),
            (INT, "16", Ok(json!(16))),
            (INT, "1.5", Err(())),
            (FlagShape::of(ScalarKind::Bool), "False", Ok(json!(false))),
            (FlagShape::of(ScalarKind::Bool), "True", Ok(json!(true))),
            (FlagShape::of(ScalarKind::Bool), "maybe", Err(())),
            (FlagShape::of(ScalarKind::Float), "0.5", Ok(json!(0.5))),
            (FlagShape::of(ScalarKind::Float), "-2", Ok(json!(-2.0))),
            (OPT_STR, "None", Ok(Value::Null)),
            (FlagShape::of(ScalarKind::Str), "None", Ok(json!("None"))),
            (
                FlagShape::of(ScalarKind::Json),
                "terminal,file",
                Ok(json!(["terminal", "file"])),
            ),
            (
                FlagShape::of(ScalarKind::Json),
                r#"{"a": 1}"#,
                Ok(json!({"a": 1})),
            ),
            (FlagShape::of(ScalarKind::Json), "[1,", Err(())),
            (
                FlagShape::of(ScalarKind::Choice(&["STOP_TRAIN", "NONE"])),
                "none",
                Ok(json!("NONE")),
            ),
            (
                FlagShape::of(ScalarKind::Choice(&["STOP_TRAIN", "NONE"])),
                "x",
                Err(()),
            ),
        ];
        for (shape, text, want) in cases {
            let got = parse_flag_text(*shape, text).map_err(|_| ());
            assert_eq!(&got, want, "{shape:?} {text:?}");
        }
    }

    #[test]
    fn yaml_values_are_coerced_like_pydantic() {
        assert_eq!(coerce(INT, &json!("16")).unwrap(), json!(16));
        assert_eq!(coerce(INT, &json!(16.0)).unwrap(), json!(16));
        assert!(coerce(INT, &json!(null)).is_err());
        assert_eq!(coerce(OPT_STR, &json!(null)).unwrap(), Value::Null);
    }

    #[test]
    fn suggestions_find_near_misses_only() {
        let names = ["group_size", "total_steps", "use_wandb"];
        assert_eq!(suggest("group_sise", names), Some("group_size"));
        assert_eq!(suggest("totl_steps", names), Some("total_steps"));
        assert_eq!(suggest("banana", names), None);
    }
}
