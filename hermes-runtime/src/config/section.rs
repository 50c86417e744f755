//! Config sections: typed structs whose fields are flags, declared once with their defaults
//! and help text.

use serde::{de::DeserializeOwned, Serialize};

use super::flags::FieldSpec;

/// A group of config fields settable from YAML and flags. Implemented by the built-in
/// sections and by the config type `#[hermes_env]` generates for an environment's own fields.
pub trait ConfigSection:
    Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static
{
    /// Every field, in declaration order.
    fn fields() -> Vec<FieldSpec>;
}

/// Config section with no fields, for environments without their own config.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct NoConfig {}

impl ConfigSection for NoConfig {
    fn fields() -> Vec<FieldSpec> {
        Vec::new()
    }
}

/// Declares a config struct, its `Default` and its `ConfigSection` field list from one table.
macro_rules! config_section {
    (@range) => { None };
    (@range $min:expr, $max:expr) => {
        Some($crate::config::flags::Range::new($min as f64, $max as f64))
    };
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[doc = $doc:literal])+ $(#[range($min:expr, $max:expr)])? $field:ident : $ty:ty = $default:expr, )*
        }
    ) => {
        $(#[$meta])*
        // The field docs are the flags' `--help` text (`[user@]host`, `[\"a\", \"b\"]`), not links.
        #[allow(rustdoc::broken_intra_doc_links)]
        #[derive(Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct $name {
            $( $(#[doc = $doc])+ pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $field: $default, )* }
            }
        }

        impl $crate::config::ConfigSection for $name {
            fn fields() -> Vec<$crate::config::FieldSpec> {
                vec![$( $crate::config::FieldSpec {
                    name: stringify!($field),
                    shape: <$ty as $crate::config::FlagType>::SHAPE,
                    help: concat!($($doc),+),
                    range: $crate::config::section::config_section!(@range $($min, $max)?),
                }, )*]
            }
        }
    };
}
pub(crate) use config_section;

/// Values accepted for a shared config field in `#[hermes_env(key = value)]`, so that
/// `system_prompt = "…"` fills an `Option<String>` and `toolsets = ["terminal"]` a list.
pub trait IntoConfigValue<T> {
    /// Converts to the field's type.
    fn into_config_value(self) -> T;
}

macro_rules! same_type_values {
    ($($t:ty),*) => {$(
        impl IntoConfigValue<$t> for $t { fn into_config_value(self) -> $t { self } }
        impl IntoConfigValue<Option<$t>> for $t { fn into_config_value(self) -> Option<$t> { Some(self) } }
    )*};
}
same_type_values!(i64, f64, bool, super::EvalHandling);

impl IntoConfigValue<String> for &str {
    fn into_config_value(self) -> String {
        self.to_owned()
    }
}

impl IntoConfigValue<Option<String>> for &str {
    fn into_config_value(self) -> Option<String> {
        Some(self.to_owned())
    }
}

impl<const N: usize> IntoConfigValue<Option<Vec<String>>> for [&str; N] {
    fn into_config_value(self) -> Option<Vec<String>> {
        Some(self.iter().map(|s| (*s).to_owned()).collect())
    }
}

/// Assigns an attribute value to a default config field (used by generated code).
pub fn set_default<T, V: IntoConfigValue<T>>(slot: &mut T, value: V) {
    *slot = value.into_config_value();
}
