//! The prelude's `Serialize` / `Deserialize` derives (hermes-macros' shims over serde's own)
//! against serde's derives, shape by shape: the same JSON out, the same values back in, the
//! same errors. Each shape is declared twice, once per derive, by one macro.

use std::borrow::Cow;
use std::fmt::Debug;

use serde_json::json;

/// Declares `$item` in module `ours` (the prelude's derives) and in module `theirs` (serde's).
macro_rules! both {
    ($($item:item)*) => {
        mod ours {
            #![allow(dead_code)]
            use super::*;
            use hermes_env::prelude::{Deserialize, Serialize};
            $( #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)] $item )*
        }
        mod theirs {
            #![allow(dead_code)]
            use super::*;
            use serde::{Deserialize, Serialize};
            $( #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)] $item )*
        }
    };
}

both! {
    #[serde(rename_all = "camelCase")]
    pub struct Task {
        pub prompt_text: String,
        #[serde(default)]
        pub tags: Vec<String>,
        #[serde(rename = "answer")]
        pub expected: Option<i64>,
        #[serde(skip)]
        pub cache: u8,
        #[serde(flatten)]
        pub extra: std::collections::BTreeMap<String, serde_json::Value>,
    }

    #[serde(tag = "kind", rename_all = "snake_case")]
    pub enum Tagged {
        Unit,
        Named { value: u32, #[serde(default)] note: String },
    }

    pub enum Plain<T> {
        Unit,
        Tuple(T, u8),
        Named { inner: T },
    }

    pub struct Wrapper(pub String);

    pub struct Pair(pub u8, pub String);

    pub struct Empty;

    #[serde(deny_unknown_fields)]
    pub struct Strict { pub a: u8 }

    #[serde(default)]
    pub struct Defaults { pub a: u8, pub b: String }

    pub struct Borrowing<'a> {
        #[serde(borrow)]
        pub name: Cow<'a, str>,
    }

    pub struct Bounded<T: Clone> where T: Debug { pub items: Vec<T> }
}

impl Default for ours::Defaults {
    fn default() -> Self {
        ours::Defaults {
            a: 7,
            b: "seven".into(),
        }
    }
}
impl Default for theirs::Defaults {
    fn default() -> Self {
        theirs::Defaults {
            a: 7,
            b: "seven".into(),
        }
    }
}

/// Serializes both values, checks the JSON is identical, and reads `input` with both derives:
/// the same JSON back, or both refuse it with the same message.
fn agree<O, T>(ours: &O, theirs: &T, inputs: &[serde_json::Value])
where
    O: serde::Serialize + serde::de::DeserializeOwned + Debug,
    T: serde::Serialize + serde::de::DeserializeOwned + Debug,
{
    let a = serde_json::to_value(ours).expect("ours serializes");
    let b = serde_json::to_value(theirs).expect("theirs serializes");
    assert_eq!(a, b, "serialized differently");
    for input in inputs.iter().chain([&a]) {
        let o: Result<O, _> = serde_json::from_value(input.clone());
        let t: Result<T, _> = serde_json::from_value(input.clone());
        match (o, t) {
            (Ok(o), Ok(t)) => assert_eq!(
                serde_json::to_value(&o).unwrap(),
                serde_json::to_value(&t).unwrap(),
                "read {input} differently"
            ),
            (Err(o), Err(t)) => assert_eq!(o.to_string(), t.to_string(), "refused {input}"),
            (o, t) => panic!("{input}: ours {o:?}, serde's {t:?}"),
        }
    }
}

#[test]
fn structs_with_field_attributes() {
    let extra: std::collections::BTreeMap<_, _> =
        [("x".to_owned(), json!(1))].into_iter().collect();
    agree(
        &ours::Task {
            prompt_text: "p".into(),
            tags: vec!["t".into()],
            expected: Some(3),
            cache: 9,
            extra: extra.clone(),
        },
        &theirs::Task {
            prompt_text: "p".into(),
            tags: vec!["t".into()],
            expected: Some(3),
            cache: 9,
            extra,
        },
        &[
            json!({"promptText": "q"}),
            json!({"promptText": 1}),
            json!({}),
            json!({"promptText": "q", "answer": null, "more": [1]}),
        ],
    );
}

#[test]
fn enums_tagged_and_generic() {
    agree(
        &ours::Tagged::Named {
            value: 1,
            note: "n".into(),
        },
        &theirs::Tagged::Named {
            value: 1,
            note: "n".into(),
        },
        &[
            json!({"kind": "unit"}),
            json!({"kind": "named", "value": 2}),
            json!({"kind": "other"}),
        ],
    );
    agree(
        &ours::Plain::Tuple("a".to_owned(), 1),
        &theirs::Plain::Tuple("a".to_owned(), 1),
        &[
            json!("Unit"),
            json!({"Named": {"inner": "b"}}),
            json!({"Tuple": ["a"]}),
        ],
    );
}

#[test]
fn newtypes_tuples_units_strict_and_defaults() {
    agree(
        &ours::Wrapper("w".into()),
        &theirs::Wrapper("w".into()),
        &[json!(1)],
    );
    agree(
        &ours::Pair(1, "p".into()),
        &theirs::Pair(1, "p".into()),
        &[json!([1]), json!([1, "x", 2])],
    );
    agree(&ours::Empty, &theirs::Empty, &[json!(1)]);
    agree(
        &ours::Strict { a: 1 },
        &theirs::Strict { a: 1 },
        &[json!({"a": 1, "b": 2})],
    );
    agree(
        &ours::Defaults::default(),
        &theirs::Defaults::default(),
        &[json!({}), json!({"b": "x"}), json!({"a": "x"})],
    );
}

#[test]
fn generics_with_bounds() {
    agree(
        &ours::Bounded {
            items: vec![1u8, 2],
        },
        &theirs::Bounded {
            items: vec![1u8, 2],
        },
        &[json!({"items": []}), json!({"items": [-1]})],
    );
}

#[test]
fn borrowed_fields_borrow() {
    let text = r#"{"name":"borrowed"}"#;
    let ours: ours::Borrowing<'_> = serde_json::from_str(text).unwrap();
    let theirs: theirs::Borrowing<'_> = serde_json::from_str(text).unwrap();
    assert!(matches!(ours.name, Cow::Borrowed("borrowed")), "{ours:?}");
    assert!(matches!(theirs.name, Cow::Borrowed("borrowed")));
}
