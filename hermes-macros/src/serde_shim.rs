//! `Serialize` / `Deserialize` derives for the prelude that work in a crate without its own
//! `serde` dependency. serde_derive's expansion names the `serde` crate from the caller's
//! dependencies unless the item says `#[serde(crate = "…")]`, and a derive cannot add that
//! attribute to the item it sees. So these derives copy the item into a private shim that
//! derives serde's own traits with serde's `remote` attribute (serde's code, serde's
//! attributes, pointed at hermes-env's copy of serde) and implement the trait on the item by
//! delegating to it.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{parse_quote, Attribute, Data, DeriveInput, Fields, GenericParam};

/// Which of serde's two traits is derived.
#[derive(Clone, Copy)]
pub enum Trait {
    Serialize,
    Deserialize,
}

/// The expansion of `#[derive(Serialize)]` or `#[derive(Deserialize)]` on `input`.
pub fn derive(input: TokenStream, which: Trait) -> TokenStream {
    let item: DeriveInput = match syn::parse2(input) {
        Ok(item) => item,
        Err(e) => return e.to_compile_error(),
    };
    if let Data::Union(u) = &item.data {
        return syn::Error::new(u.union_token.span, "serde cannot derive for unions")
            .to_compile_error();
    }
    let serde = quote!(::hermes_env::__private::serde);
    let shim = shim(&item, which);
    let shim_ident = &shim.ident;
    let ident = &item.ident;
    let delegation = match which {
        Trait::Serialize => {
            let mut generics = item.generics.clone();
            for param in generics.type_params_mut() {
                param.bounds.push(parse_quote!(#serde::Serialize));
            }
            let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
            let (_, shim_generics, _) = item.generics.split_for_impl();
            let shim_path = quote!(#shim_ident #shim_generics);
            quote! {
                #[automatically_derived]
                impl #impl_generics #serde::Serialize for #ident #ty_generics #where_clause {
                    fn serialize<__S: #serde::Serializer>(
                        &self,
                        serializer: __S,
                    ) -> ::core::result::Result<__S::Ok, __S::Error> {
                        <#shim_path>::serialize(self, serializer)
                    }
                }
            }
        }
        Trait::Deserialize => {
            let mut generics = item.generics.clone();
            for param in generics.type_params_mut() {
                param.bounds.push(parse_quote!(#serde::Deserialize<'de>));
            }
            let (_, ty_generics, where_clause) = generics.split_for_impl();
            // Borrowed fields need `'de` to outlive the item's lifetimes, as serde's own
            // impl requires.
            let lifetimes: Vec<syn::Lifetime> = item
                .generics
                .lifetimes()
                .map(|l| l.lifetime.clone())
                .collect();
            let mut with_de = generics.clone();
            let de: syn::LifetimeParam = if lifetimes.is_empty() {
                parse_quote!('de)
            } else {
                parse_quote!('de: #(#lifetimes)+*)
            };
            with_de.params.insert(0, GenericParam::Lifetime(de));
            let (impl_generics, _, _) = with_de.split_for_impl();
            let (_, shim_generics, _) = item.generics.split_for_impl();
            let shim_path = quote!(#shim_ident #shim_generics);
            quote! {
                #[automatically_derived]
                impl #impl_generics #serde::Deserialize<'de> for #ident #ty_generics #where_clause {
                    fn deserialize<__D: #serde::Deserializer<'de>>(
                        deserializer: __D,
                    ) -> ::core::result::Result<Self, __D::Error> {
                        <#shim_path>::deserialize(deserializer)
                    }
                }
            }
        }
    };
    let derive = match which {
        Trait::Serialize => quote!(#serde::Serialize),
        Trait::Deserialize => quote!(#serde::Deserialize),
    };
    let default = default_bridge(&item, &shim);
    quote! {
        #[doc(hidden)]
        const _: () = {
            #[derive(#derive)]
            #[allow(dead_code, non_camel_case_types, clippy::all)]
            #shim
            #default
            #delegation
        };
    }
}

/// A container-level `#[serde(default)]` makes serde start from the shim's `Default`: the
/// shim's default is the item's, field by field.
fn default_bridge(item: &DeriveInput, shim: &DeriveInput) -> TokenStream {
    let Data::Struct(data) = &item.data else {
        return TokenStream::new();
    };
    let container_default = item.attrs.iter().any(|attr| {
        let mut found = false;
        if attr.path().is_ident("serde") {
            let _ = attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("default") && meta.input.is_empty() {
                    found = true;
                } else if meta.input.peek(syn::Token![=]) {
                    let _: syn::Expr = meta.value()?.parse()?;
                } else if meta.input.peek(syn::token::Paren) {
                    let _content;
                    syn::parenthesized!(_content in meta.input);
                    let _: TokenStream = _content.parse()?;
                }
                Ok(())
            });
        }
        found
    });
    if !container_default {
        return TokenStream::new();
    }
    let ident = &item.ident;
    let shim_ident = &shim.ident;
    let (impl_generics, ty_generics, where_clause) = item.generics.split_for_impl();
    let mut where_clause = where_clause.cloned().unwrap_or_else(|| parse_quote!(where));
    where_clause
        .predicates
        .push(parse_quote!(#ident #ty_generics: ::core::default::Default));
    let body = match &data.fields {
        Fields::Named(named) => {
            let names = named.named.iter().map(|f| &f.ident);
            quote!(#shim_ident { #(#names: __d.#names),* })
        }
        Fields::Unnamed(unnamed) => {
            let indices = (0..unnamed.unnamed.len()).map(syn::Index::from);
            quote!(#shim_ident ( #(__d.#indices),* ))
        }
        Fields::Unit => quote!(#shim_ident),
    };
    quote! {
        impl #impl_generics ::core::default::Default for #shim_ident #ty_generics #where_clause {
            fn default() -> Self {
                let __d = <#ident #ty_generics as ::core::default::Default>::default();
                #body
            }
        }
    }
}

/// The item renamed, keeping only serde's and doc attributes (other derives' helper
/// attributes would be unknown here), with `crate` and `remote` pointing back at the item.
fn shim(item: &DeriveInput, which: Trait) -> DeriveInput {
    let mut shim = item.clone();
    let suffix = match which {
        Trait::Serialize => "Serialize",
        Trait::Deserialize => "Deserialize",
    };
    shim.ident = format_ident!("__Hermes{}{}", suffix, item.ident);
    // serde applies the shim's own generics to the remote path.
    let remote = item.ident.to_string();
    shim.attrs.retain(keep);
    shim.attrs.push(parse_quote!(
        #[serde(crate = "::hermes_env::__private::serde", remote = #remote)]
    ));
    // The where clause and bounds stay as written; lifetimes and consts stay too.
    for param in shim.generics.params.iter_mut() {
        if let GenericParam::Type(t) = param {
            t.attrs.retain(keep);
        }
    }
    match &mut shim.data {
        Data::Struct(s) => strip_fields(&mut s.fields),
        Data::Enum(e) => {
            for variant in e.variants.iter_mut() {
                variant.attrs.retain(keep);
                strip_fields(&mut variant.fields);
            }
        }
        Data::Union(_) => {}
    }
    shim
}

fn strip_fields(fields: &mut Fields) {
    for field in fields.iter_mut() {
        field.attrs.retain(keep);
    }
}

fn keep(attr: &Attribute) -> bool {
    attr.path().is_ident("serde") || attr.path().is_ident("doc")
}
