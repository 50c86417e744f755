//! Attribute syntax: `key = value` lists and doc comments.

use proc_macro2::TokenStream;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, ExprLit, Ident, Lit, Meta, Token};

use crate::errors::Errors;

/// One `key = value` of an attribute.
pub struct KeyValue {
    /// The key.
    pub key: Ident,
    /// The value.
    pub value: Expr,
}

/// Parses `key = value, …`. Entries of another form are reported and skipped; `None` means the
/// list itself did not parse.
pub fn key_values(tokens: TokenStream, errors: &mut Errors) -> Option<Vec<KeyValue>> {
    match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(tokens) {
        Ok(metas) => Some(
            metas
                .into_iter()
                .filter_map(|meta| key_value(meta, errors))
                .collect(),
        ),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

/// The `key = value` of one entry, or an error.
fn key_value(meta: Meta, errors: &mut Errors) -> Option<KeyValue> {
    match meta {
        Meta::NameValue(nv) => match nv.path.get_ident() {
            Some(key) => Some(KeyValue {
                key: key.clone(),
                value: nv.value,
            }),
            None => {
                errors.spanned(&nv.path, "expected a key, not a path");
                None
            }
        },
        Meta::Path(path) => {
            errors.spanned(
                &path,
                format_args!("expected `{} = <value>`", path_text(&path)),
            );
            None
        }
        Meta::List(list) => {
            errors.spanned(
                &list,
                format_args!("expected `{} = <value>`", path_text(&list.path)),
            );
            None
        }
    }
}

/// A path as written, without spaces.
fn path_text(path: &syn::Path) -> String {
    quote::quote!(#path).to_string().replace(' ', "")
}

/// The string literal `expr` is, if it is one.
pub fn str_lit(expr: &Expr) -> Option<&syn::LitStr> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s),
        _ => None,
    }
}

/// The `#[doc]` attributes among `attrs`.
pub fn docs(attrs: &[Attribute]) -> Vec<Attribute> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .cloned()
        .collect()
}

/// The doc comment as one line: its lines trimmed, blank ones dropped, joined with spaces.
pub fn doc_line(attrs: &[Attribute]) -> String {
    let lines = attrs.iter().filter_map(|attr| match &attr.meta {
        Meta::NameValue(nv) if nv.path.is_ident("doc") => str_lit(&nv.value).map(|s| s.value()),
        _ => None,
    });
    let lines: Vec<String> = lines
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    lines.join(" ")
}

/// A type as written, without the spaces token printing adds (`Vec<(u8, u8)>`).
pub fn type_text(ty: &syn::Type) -> String {
    let text = quote::quote!(#ty).to_string();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        let prev = out.chars().last();
        let drop = c == ' '
            && (matches!(next, Some('<' | '>' | ',' | ':' | ')' | ']'))
                || matches!(prev, Some('<' | '(' | '[' | '&' | ':')));
        if !drop {
            out.push(c);
        }
    }
    out
}
