//! Code generation: the checked models become the struct, its config section and the trait
//! impls; rejected inputs become the item itself, the errors and stand-in impls.

use hermes_hooks::{HookSpec, HOOKS};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    parse_quote, Expr, ExprLit, Fields, Ident, Item, ItemStruct, Lit, ReturnType, Signature, Type,
};

use crate::model::{Env, Hooks, RejectedEnv, RejectedHooks};
use crate::validate;

/// `#[hermes_env(args)] item`.
pub fn hermes_env(args: TokenStream, input: TokenStream) -> TokenStream {
    match syn::parse2::<Item>(input.clone()) {
        Ok(item) => match validate::env(args, item) {
            Ok(env) => env_tokens(&env),
            Err(rejected) => env_fallback(&rejected),
        },
        Err(error) => unparsed(input, error),
    }
}

/// `#[hermes_env::hooks(args)] item`.
pub fn hooks(args: TokenStream, input: TokenStream) -> TokenStream {
    match syn::parse2::<Item>(input.clone()) {
        Ok(item) => match validate::hooks(args, item) {
            Ok(hooks) => hooks_tokens(&hooks),
            Err(rejected) => hooks_fallback(&rejected),
        },
        Err(error) => unparsed(input, error),
    }
}

/// An item syn cannot parse: passed through, with the parse error.
fn unparsed(input: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    quote! { #input #error }
}

/// Everything `#[hermes_env]` generates for a valid struct.
fn env_tokens(env: &Env) -> TokenStream {
    let ident = &env.item.ident;
    let config = format_ident!("{}Config", ident);
    let item = with_config_handle(&env.item);
    let section = config_section(env, &config);
    let definition = env_definition(env, &config);
    let main = env.main.then(|| {
        quote! {
            fn main() -> ::std::process::ExitCode {
                ::hermes_env::__private::main::<#ident>()
            }
        }
    });
    quote! {
        #item
        #section
        #definition
        impl #ident {
            /// The shared env config of this run (group size, turns, …).
            #[allow(dead_code)]
            pub fn env_config(&self) -> &::hermes_env::__private::HermesEnvConfig {
                &self.__hermes_env_config
            }
        }
        #main
    }
}

/// The struct with the hidden handle to the shared config added.
fn with_config_handle(item: &ItemStruct) -> ItemStruct {
    let mut item = item.clone();
    if let Fields::Named(named) = &mut item.fields {
        named.named.push(parse_quote! {
            #[doc(hidden)]
            __hermes_env_config: ::hermes_env::__private::Arc<::hermes_env::__private::HermesEnvConfig>
        });
    }
    item
}

/// `<Name>Config`: the `#[config]` fields as a config section, with their defaults.
fn config_section(env: &Env, config: &Ident) -> TokenStream {
    let vis = &env.item.vis;
    let doc = format!(
        " The `--env.*` config of [`{}`]: its `#[config]` fields.",
        env.item.ident
    );
    let fields: Vec<_> = env
        .fields
        .iter()
        .filter_map(|f| Some((f, f.config.as_ref()?)))
        .collect();
    let decls = fields.iter().map(|(field, config)| {
        let (ident, ty, docs) = (&field.ident, &field.ty, &config.docs);
        quote! { #(#docs)* pub #ident: #ty }
    });
    let defaults = fields.iter().map(|(field, config)| {
        let ident = &field.ident;
        let value = match &config.default {
            Some(Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            })) => {
                quote_spanned!(s.span()=> ::core::convert::Into::into(#s))
            }
            Some(expr) => quote!(#expr),
            None => quote_spanned!(field.ty.span()=> ::core::default::Default::default()),
        };
        quote! { #ident: #value }
    });
    let specs = fields.iter().map(|(field, config)| {
        let (name, ty, help) = (field.ident.unraw().to_string(), &field.ty, &config.help);
        let shape = quote_spanned!(ty.span()=> <#ty as ::hermes_env::__private::FlagType>::SHAPE);
        quote! { ::hermes_env::__private::FieldSpec { name: #name, shape: #shape, help: #help, range: ::core::option::Option::None } }
    });
    quote! {
        #[doc = #doc]
        #[derive(
            ::core::clone::Clone,
            ::core::fmt::Debug,
            ::hermes_env::__private::serde::Serialize,
            ::hermes_env::__private::serde::Deserialize,
        )]
        #[serde(crate = "::hermes_env::__private::serde", default)]
        #vis struct #config {
            #(#decls,)*
        }

        impl ::core::default::Default for #config {
            fn default() -> Self {
                Self { #(#defaults,)* }
            }
        }

        impl ::hermes_env::__private::ConfigSection for #config {
            fn fields() -> ::std::vec::Vec<::hermes_env::__private::FieldSpec> {
                ::std::vec::Vec::from([#(#specs),*])
            }
        }
    }
}

/// `impl EnvDefinition`: descriptor (name, doc, shared defaults) and construction.
fn env_definition(env: &Env, config: &Ident) -> TokenStream {
    let ident = &env.item.ident;
    let (name, about) = (&env.name, &env.about);
    let defaults = Ident::new("defaults", Span::mixed_site());
    let shared = Ident::new("shared", Span::mixed_site());
    let own = Ident::new("own", Span::mixed_site());
    let mutability = (!env.shared.is_empty()).then(|| quote!(mut));
    let sets = env.shared.iter().map(|set| {
        let (field, value) = (&set.field, &set.value);
        quote_spanned!(value.span()=> ::hermes_env::__private::set_default(&mut #defaults.#field, #value);)
    });
    let servers = (!env.servers.is_empty()).then(|| {
        // Each element is type-checked against `DefaultServer` at its own span.
        let each = &env.servers;
        quote!(.with_servers(::std::vec![#(#each),*]))
    });
    let own_pattern = if env.fields.iter().any(|f| f.config.is_some()) {
        quote!(#own)
    } else {
        quote!(_)
    };
    let inits = env.fields.iter().map(|field| {
        let ident = &field.ident;
        match field.config {
            Some(_) => quote! { #ident: #own.#ident },
            None => quote_spanned!(field.ty.span()=> #ident: ::core::default::Default::default()),
        }
    });
    quote! {
        impl ::hermes_env::EnvDefinition for #ident {
            type Config = #config;

            fn descriptor() -> ::hermes_env::__private::EnvDescriptor {
                let #mutability #defaults =
                    <::hermes_env::__private::HermesEnvConfig as ::core::default::Default>::default();
                #(#sets)*
                ::hermes_env::__private::EnvDescriptor::new::<#config>(#name, #about, #defaults)
                    #servers
            }

            fn from_config(
                #shared: ::hermes_env::__private::Arc<::hermes_env::__private::HermesEnvConfig>,
                #own_pattern: #config,
            ) -> Self {
                Self {
                    #(#inits,)*
                    __hermes_env_config: #shared,
                }
            }
        }
    }
}

/// The item and the errors, plus stand-ins for what the rest of the crate expects
/// (`EnvDefinition`, `env_config`, `main`) so that only the real errors are reported.
fn env_fallback(rejected: &RejectedEnv) -> TokenStream {
    let (item, errors) = (&rejected.item, rejected.errors.to_compile_error());
    let stand_ins = rejected.ident.as_ref().map(|ident| {
        let main = rejected.main.then(|| {
            quote! {
                fn main() -> ::std::process::ExitCode {
                    ::core::unreachable!()
                }
            }
        });
        quote! {
            impl ::hermes_env::EnvDefinition for #ident {
                type Config = ::hermes_env::__private::NoConfig;

                fn descriptor() -> ::hermes_env::__private::EnvDescriptor {
                    ::core::unreachable!()
                }

                fn from_config(
                    _: ::hermes_env::__private::Arc<::hermes_env::__private::HermesEnvConfig>,
                    _: Self::Config,
                ) -> Self {
                    ::core::unreachable!()
                }
            }

            impl #ident {
                #[allow(dead_code)]
                pub fn env_config(&self) -> &::hermes_env::__private::HermesEnvConfig {
                    ::core::unreachable!()
                }
            }

            #main
        }
    });
    quote! { #item #errors #stand_ins }
}

/// The impl block plus `impl Environment` delegating each hook to it.
fn hooks_tokens(hooks: &Hooks) -> TokenStream {
    let block = &hooks.item;
    let self_ty = &block.self_ty;
    let item_ty = &hooks.item_ty;
    let item_assoc = quote_spanned!(item_ty.span()=> type Item = #item_ty;);
    let methods = hooks
        .defined
        .iter()
        .map(|(hook, sig)| delegation(hook, self_ty, sig));
    quote! {
        #block

        impl ::hermes_env::Environment for #self_ty {
            #item_assoc
            #(#methods)*
        }
    }
}

/// A hook as `Environment` declares it.
struct TraitHook {
    /// `&self` or `&mut self`.
    receiver: TokenStream,
    /// The parameters after `self`: name and type.
    params: Vec<(&'static str, TokenStream)>,
    /// The return type (of an async hook: the future's output); `None` for `()`.
    output: Option<TokenStream>,
}

/// The declaration of `hook` in `Environment`, from the hook table's type texts.
fn trait_hook(hook: &HookSpec) -> TraitHook {
    let receiver = if hook.mut_self {
        quote!(&mut self)
    } else {
        quote!(&self)
    };
    TraitHook {
        receiver,
        params: hook
            .params
            .iter()
            .map(|&(name, ty)| (name, table_tokens(ty)))
            .collect(),
        output: hook.output.map(table_tokens),
    }
}

/// A type text of the hook table as tokens (all spanned at the call site, as `quote!` would).
fn table_tokens(text: &str) -> TokenStream {
    text.parse()
        .unwrap_or_else(|_| panic!("hook table type `{text}` is not valid Rust"))
}

/// The signature of `hook`'s trait method; `output_span` locates its return type.
fn trait_signature(hook: &HookSpec, output_span: Span) -> TokenStream {
    let TraitHook {
        receiver,
        params,
        output,
    } = trait_hook(hook);
    let name = Ident::new(hook.name, Span::call_site());
    let params = params.iter().map(|(name, ty)| {
        let name = Ident::new(name, Span::call_site());
        quote!(#name: #ty)
    });
    let output = match (hook.is_async, output) {
        (true, output) => {
            let output = output.unwrap_or_else(|| quote!(()));
            Some(quote_spanned! {output_span=>
                impl ::core::future::Future<Output = #output> + ::core::marker::Send
            })
        }
        (false, output) => output,
    };
    let arrow = output.as_ref().map(|_| quote!(->));
    quote! { fn #name(#receiver #(, #params)*) #arrow #output }
}

/// The trait method for `hook`, calling the inherent fn with signature `sig`. Type errors
/// point at the author's signature: the future's output at their return type, arguments at
/// their parameters, and a sync hook's signature (through a fn pointer) at their fn name.
fn delegation(hook: &HookSpec, self_ty: &Type, sig: &Signature) -> TokenStream {
    let ident = &sig.ident;
    let output_span = match &sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => ident.span(),
    };
    let signature = trait_signature(hook, output_span);
    let TraitHook { params, output, .. } = trait_hook(hook);
    let inherent = quote_spanned!(ident.span()=> <#self_ty>::#ident);
    let body = if hook.is_async {
        let args = params
            .iter()
            .zip(sig.inputs.iter().skip(1))
            .map(|((name, _), input)| Ident::new(name, input.span()));
        quote! { #inherent(self #(, #args)*) }
    } else {
        let receiver = if hook.mut_self {
            quote!(&mut Self)
        } else {
            quote!(&Self)
        };
        let (names, types): (Vec<_>, Vec<_>) = params
            .iter()
            .map(|(name, ty)| (Ident::new(name, Span::call_site()), ty))
            .unzip();
        let arrow = output.as_ref().map(|_| quote!(->));
        let hook_fn = Ident::new("hook", Span::mixed_site());
        quote! {
            let #hook_fn: fn(#receiver #(, #types)*) #arrow #output = #inherent;
            #hook_fn(self #(, #names)*)
        }
    };
    quote! { #signature { #body } }
}

/// The item and the errors, plus a stand-in `impl Environment` (required hooks only) so that
/// uses of the environment type report no follow-on errors.
fn hooks_fallback(rejected: &RejectedHooks) -> TokenStream {
    let (item, errors) = (&rejected.item, rejected.errors.to_compile_error());
    let stand_in = rejected.self_ty.as_ref().map(|self_ty| {
        let item_ty: Type = rejected.item_ty.clone().unwrap_or_else(|| parse_quote!(()));
        let required = HOOKS.iter().filter(|hook| hook.required).map(|hook| {
            let signature = trait_signature(hook, Span::call_site());
            let body = if hook.is_async {
                quote!(::core::future::pending())
            } else {
                quote!(::core::unreachable!())
            };
            quote! { #signature { #body } }
        });
        quote! {
            #[allow(unused_variables)]
            impl ::hermes_env::Environment for #self_ty {
                type Item = #item_ty;
                #(#required)*
            }
        }
    });
    quote! { #item #errors #stand_in }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_table_types_are_rust_types() {
        for hook in HOOKS {
            let types = hook.params.iter().map(|(_, ty)| ty).chain(&hook.output);
            for ty in types {
                assert!(syn::parse_str::<Type>(ty).is_ok(), "{}: `{ty}`", hook.name);
            }
        }
    }

    /// Expanded tokens as formatted Rust.
    fn pretty(tokens: TokenStream) -> String {
        prettyplease::unparse(&syn::parse2(tokens).expect("expansion parses as a file"))
    }

    #[test]
    fn env_expansion() {
        let args = quote! {
            name = "terminal-test", toolsets = ["terminal", "file"], max_agent_turns = 10,
            system_prompt = "You are helpful.", group_size = 3, main = false
        };
        let item = quote! {
            /// Terminal tasks verified by reading a file.
            pub struct TerminalTest {
                /// Appended to prompts.
                #[config(default = "")]
                prompt_suffix: String,
                /// How many tasks.
                ///
                /// At most a hundred.
                #[config(default = 3)]
                task_count: i64,
                #[config]
                verbose: bool,
                next: usize,
            }
        };
        insta::assert_snapshot!(pretty(hermes_env(args, item)));
    }

    #[test]
    fn env_expansion_with_defaults_only() {
        let item = quote! {
            struct HTTPProbe2Env {
                seen: Vec<String>,
            }
        };
        insta::assert_snapshot!(pretty(hermes_env(TokenStream::new(), item)));
    }

    #[test]
    fn hooks_expansion() {
        let item = quote! {
            impl TerminalTest {
                async fn setup(&mut self) -> Result<()> {
                    Ok(())
                }
                async fn get_next_item(&mut self) -> Option<Task> {
                    None
                }
                fn format_prompt(&self, item: &Task) -> String {
                    item.prompt.clone()
                }
                async fn compute_reward(&self, item: &Task, run: &AgentResult, ctx: &ToolContext) -> Result<f64> {
                    Ok(1.0)
                }
                fn evaluate(&self, samples: &[EvalSample<Task>], metrics: &mut Metrics) {}
            }
        };
        insta::assert_snapshot!(pretty(hooks(TokenStream::new(), item)));
    }

    #[test]
    fn rejected_env_keeps_the_struct_and_adds_stand_ins() {
        let args = quote!(group_sise = 3);
        let item = quote! {
            struct Broken {
                #[config(default = 1)]
                count: i64,
            }
        };
        insta::assert_snapshot!(pretty(hermes_env(args, item)));
    }

    #[test]
    fn rejected_hooks_keep_the_block_and_add_a_stand_in() {
        let item = quote! {
            impl Broken {
                async fn get_next_item(&mut self) -> Option<u32> {
                    None
                }
                fn format_prompt(&self, item: &u32) -> String {
                    item.to_string()
                }
            }
        };
        insta::assert_snapshot!(pretty(hooks(TokenStream::new(), item)));
    }
}
