//! Error collection: every problem in a macro input is reported at once, each at its own span.

use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

/// Accumulates the errors found in one macro input (as serde_derive's `Ctxt` does).
#[derive(Default)]
pub struct Errors {
    combined: Option<syn::Error>,
}

impl Errors {
    /// Records an error.
    pub fn push(&mut self, error: syn::Error) {
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    /// Records `message`, pointing at `tokens` (from their first to their last token).
    pub fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.combined.is_none()
    }

    /// All recorded errors combined (a generic one if, by mistake, none was recorded).
    pub fn into_error(self) -> syn::Error {
        self.combined
            .unwrap_or_else(|| syn::Error::new(Span::call_site(), "invalid macro input"))
    }
}
