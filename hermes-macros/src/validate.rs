//! Checks macro inputs and builds the models, reporting every problem at its own span.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::ext::IdentExt;
use syn::{
    Attribute, Expr, ExprLit, Field, Fields, GenericArgument, Ident, ImplItem, Item, ItemStruct,
    Lit, LitStr, Meta, PathArguments, ReturnType, Signature, Type,
};

use hermes_hooks::{HookSpec, HOOKS};

use crate::attr::{self, KeyValue};
use crate::errors::Errors;
use crate::model::{
    ConfigField, Env, EnvField, Hooks, RejectedEnv, RejectedHooks, SharedDefault, SHARED_FIELDS,
};
use crate::suggest::closest;

/// `#[hermes_env]` keys that are not shared fields.
const OWN_KEYS: [&str; 4] = ["name", "main", "toolsets", "servers"];

/// The hook whose `Option<T>` return type gives `type Item`.
const ITEM_HOOK: &str = "get_next_item";

/// What `#[hermes_env(…)]` sets.
struct Settings {
    /// `name = "…"`.
    name: Option<LitStr>,
    /// `main = …`; `None` if the value was invalid or the list did not parse.
    main: Option<bool>,
    /// Shared-field defaults.
    shared: Vec<SharedDefault>,
    /// `servers = [...]`: the default inference servers, one expression each.
    servers: Vec<Expr>,
}

/// Checks a `#[hermes_env(args)]` item.
pub fn env(args: TokenStream, item: Item) -> Result<Env, Box<RejectedEnv>> {
    let mut errors = Errors::default();
    let settings = settings(args, &mut errors);
    let main = settings.main.unwrap_or(false);
    let mut item = match item {
        Item::Struct(item) => item,
        Item::Enum(e) => {
            let (enum_token, ident) = (e.enum_token, &e.ident);
            errors.spanned(
                quote!(#enum_token #ident),
                "#[hermes_env] must be applied to a struct with named fields, not an enum",
            );
            let ident = e.generics.params.is_empty().then(|| e.ident.clone());
            return Err(Box::new(RejectedEnv {
                errors: errors.into_error(),
                item: Item::Enum(e),
                ident,
                main,
            }));
        }
        other => {
            errors.push(syn::Error::new(
                Span::call_site(),
                "#[hermes_env] must be applied to a struct with named fields",
            ));
            return Err(Box::new(RejectedEnv {
                errors: errors.into_error(),
                item: other,
                ident: None,
                main: false,
            }));
        }
    };
    let fields = fields(&mut item, &mut errors);
    let generic = !item.generics.params.is_empty() || item.generics.where_clause.is_some();
    if generic {
        errors.spanned(&item.generics, "#[hermes_env] structs cannot be generic");
    }
    if !errors.is_empty() {
        let ident = (!generic).then(|| item.ident.clone());
        return Err(Box::new(RejectedEnv {
            errors: errors.into_error(),
            item: Item::Struct(item),
            ident,
            main,
        }));
    }
    Ok(Env {
        name: settings
            .name
            .unwrap_or_else(|| LitStr::new(&kebab_case(&item.ident), item.ident.span())),
        about: attr::doc_line(&item.attrs),
        main,
        shared: settings.shared,
        servers: settings.servers,
        fields,
        item,
    })
}

/// Checks the `key = value` list of `#[hermes_env(…)]`.
fn settings(args: TokenStream, errors: &mut Errors) -> Settings {
    let mut settings = Settings {
        name: None,
        main: Some(true),
        shared: Vec::new(),
        servers: Vec::new(),
    };
    let Some(entries) = attr::key_values(args, errors) else {
        settings.main = None;
        return settings;
    };
    // (field set, key that set it), to catch `toolsets` and `enabled_toolsets` together too.
    let mut seen: Vec<(String, String)> = Vec::new();
    for KeyValue { key, value } in entries {
        let name = key.unraw().to_string();
        if !OWN_KEYS.contains(&name.as_str()) && !SHARED_FIELDS.contains(&name.as_str()) {
            errors.spanned(&key, unknown_key(&name));
            continue;
        }
        let target = if name == "toolsets" {
            "enabled_toolsets"
        } else {
            name.as_str()
        };
        if let Some((_, first)) = seen.iter().find(|(t, _)| t == target) {
            if *first == name {
                errors.spanned(&key, format_args!("duplicate key `{name}`"));
            } else {
                errors.spanned(
                    &key,
                    format_args!("duplicate key: `{name}` and `{first}` set the same field"),
                );
            }
            continue;
        }
        seen.push((target.to_owned(), name.clone()));
        match name.as_str() {
            "name" => match attr::str_lit(&value) {
                Some(lit) => settings.name = Some(lit.clone()),
                None => errors.spanned(
                    &value,
                    "`name` must be a string literal, e.g. `name = \"my-env\"`",
                ),
            },
            "servers" => match value {
                Expr::Array(array) if !array.elems.is_empty() => {
                    settings.servers = array.elems.into_iter().collect();
                }
                other => errors.spanned(
                    &other,
                    "`servers` must be a non-empty array of server defaults, e.g. \
                     `servers = [DefaultServer::openrouter(\"anthropic/claude-sonnet-4\")]`",
                ),
            },
            "main" => match &value {
                Expr::Lit(ExprLit {
                    lit: Lit::Bool(b), ..
                }) => settings.main = Some(b.value),
                _ => {
                    errors.spanned(&value, "`main` must be `true` or `false`");
                    settings.main = None;
                }
            },
            _ => {
                if name == "toolsets" && !is_str_array(&value) {
                    errors.spanned(
                        &value,
                        "`toolsets` must be an array of string literals, e.g. `toolsets = [\"terminal\", \"file\"]`",
                    );
                }
                if name == "mcp_servers" && !matches!(value, Expr::Array(_)) {
                    errors.spanned(
                        &value,
                        "`mcp_servers` must be an array of MCP server declarations, e.g. \
                         `mcp_servers = [McpServer::stdio(\"files\", \"python3\", [\"server.py\"])]`",
                    );
                }
                settings.shared.push(SharedDefault {
                    field: Ident::new(target, key.span()),
                    value,
                });
            }
        }
    }
    settings
}

/// The message for an unknown `#[hermes_env]` key.
fn unknown_key(name: &str) -> String {
    match closest(
        name,
        OWN_KEYS.into_iter().chain(SHARED_FIELDS.iter().copied()),
    ) {
        Some(near) => format!("unknown key `{name}`; did you mean `{near}`?"),
        None => format!(
            "unknown key `{name}`; expected `name`, `main`, `toolsets`, `servers` or a shared env field \
             (`group_size`, `max_agent_turns`, `system_prompt`, …)"
        ),
    }
}

/// Whether `expr` is `["…", …]`.
fn is_str_array(expr: &Expr) -> bool {
    matches!(expr, Expr::Array(array) if array.elems.iter().all(|e| attr::str_lit(e).is_some()))
}

/// Checks the struct's fields, removing their `#[config]` attributes.
fn fields(item: &mut ItemStruct, errors: &mut Errors) -> Vec<EnvField> {
    let configs: Vec<Vec<Attribute>> = item.fields.iter_mut().map(take_config_attrs).collect();
    let named = match &item.fields {
        Fields::Named(named) => named,
        Fields::Unnamed(unnamed) => {
            errors.spanned(
                unnamed,
                "#[hermes_env] needs a struct with named fields, not a tuple struct",
            );
            return Vec::new();
        }
        Fields::Unit => {
            errors.spanned(
                &item.ident,
                "#[hermes_env] needs a struct with named fields, not a unit struct",
            );
            return Vec::new();
        }
    };
    named
        .named
        .iter()
        .zip(configs)
        .filter_map(|(field, config_attrs)| {
            let ident = field.ident.clone()?;
            let config = (!config_attrs.is_empty())
                .then(|| config_field(field, &ident, &config_attrs, errors));
            Some(EnvField {
                ident,
                ty: field.ty.clone(),
                config,
            })
        })
        .collect()
}

/// Removes and returns the `#[config…]` attributes of a field.
fn take_config_attrs(field: &mut Field) -> Vec<Attribute> {
    let (config, others) = field
        .attrs
        .drain(..)
        .partition(|a| a.path().is_ident("config"));
    field.attrs = others;
    config
}

/// Checks a `#[config]` field: its attribute keys, its name and its type.
fn config_field(
    field: &Field,
    ident: &Ident,
    attrs: &[Attribute],
    errors: &mut Errors,
) -> ConfigField {
    let mut default: Option<Expr> = None;
    for attr in attrs {
        let entries = match &attr.meta {
            Meta::Path(_) => Vec::new(),
            Meta::List(list) => attr::key_values(list.tokens.clone(), errors).unwrap_or_default(),
            Meta::NameValue(_) => {
                errors.spanned(
                    attr,
                    "expected `#[config]` or `#[config(default = <value>)]`",
                );
                Vec::new()
            }
        };
        for KeyValue { key, value } in entries {
            if key != "default" {
                let name = key.unraw().to_string();
                let message = match closest(&name, ["default"]) {
                    Some(near) => {
                        format!("unknown key `{name}` in #[config]; did you mean `{near}`?")
                    }
                    None => format!(
                        "unknown key `{name}` in #[config]; the only key is `default = <value>`"
                    ),
                };
                errors.spanned(&key, message);
            } else if default.is_some() {
                errors.spanned(&key, "duplicate key `default`");
            } else {
                default = Some(value);
            }
        }
    }
    let name = ident.unraw().to_string();
    if SHARED_FIELDS.contains(&name.as_str()) {
        errors.spanned(
            ident,
            format_args!(
                "`{name}` is a shared field; set it in #[hermes_env({name} = ...)] instead"
            ),
        );
    }
    if !is_flag_type(&field.ty) {
        errors.spanned(
            &field.ty,
            format_args!(
                "field type `{}` cannot be a command-line flag; use bool, an integer, a float, String, \
                 PathBuf, Option<T>, Vec<T> or a map",
                attr::type_text(&field.ty)
            ),
        );
    }
    ConfigField {
        default,
        docs: attr::docs(&field.attrs),
        help: attr::doc_line(&field.attrs),
    }
}

/// Whether a type can be a flag, judged by the last segment of its path (the runtime's
/// `FlagType` impls).
fn is_flag_type(ty: &Type) -> bool {
    const SCALARS: &[&str] = &[
        "bool", "i8", "i16", "i32", "i64", "isize", "u8", "u16", "u32", "u64", "usize", "f32",
        "f64", "String", "PathBuf", "Value", "Map",
    ];
    match ty {
        Type::Group(group) => is_flag_type(&group.elem),
        Type::Paren(paren) => is_flag_type(&paren.elem),
        Type::Path(path) if path.qself.is_none() => {
            let Some(last) = path.path.segments.last() else {
                return false;
            };
            let name = last.ident.to_string();
            match name.as_str() {
                "Option" => single_type_arg(&last.arguments).is_some_and(is_flag_type),
                "Vec" | "HashMap" | "BTreeMap" => true,
                _ => SCALARS.contains(&name.as_str()),
            }
        }
        _ => false,
    }
}

/// `T` of `<T>`.
fn single_type_arg(arguments: &PathArguments) -> Option<&Type> {
    match arguments {
        PathArguments::AngleBracketed(args) if args.args.len() == 1 => match args.args.first() {
            Some(GenericArgument::Type(ty)) => Some(ty),
            _ => None,
        },
        _ => None,
    }
}

/// `TerminalTest` → `terminal-test`, `HTTPEnv` → `http-env`.
fn kebab_case(ident: &Ident) -> String {
    let chars: Vec<char> = ident.unraw().to_string().chars().collect();
    let mut out = String::with_capacity(chars.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' {
            out.push('-');
            continue;
        }
        if c.is_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if prev.is_lowercase() || prev.is_ascii_digit() || (prev.is_uppercase() && next_lower) {
                out.push('-');
            }
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// Checks a `#[hermes_env::hooks]` impl block.
pub fn hooks(args: TokenStream, item: Item) -> Result<Hooks, Box<RejectedHooks>> {
    let mut errors = Errors::default();
    if !args.is_empty() {
        errors.spanned(&args, "#[hermes_env::hooks] takes no arguments");
    }
    let block = match item {
        Item::Impl(block) => block,
        other => {
            errors.push(syn::Error::new(
                Span::call_site(),
                "#[hermes_env::hooks] must be applied to an `impl` block of the environment struct",
            ));
            return Err(Box::new(RejectedHooks {
                errors: errors.into_error(),
                item: other,
                self_ty: None,
                item_ty: None,
            }));
        }
    };
    let mut recoverable = true;
    if let Some((_, path, for_token)) = &block.trait_ {
        errors.spanned(
            quote!(#path #for_token),
            "#[hermes_env::hooks] goes on an inherent `impl Env { … }` block, not on a trait impl",
        );
        recoverable = false;
    }
    if !block.generics.params.is_empty() || block.generics.where_clause.is_some() {
        errors.spanned(
            &block.generics,
            "#[hermes_env::hooks] impl blocks cannot be generic",
        );
        recoverable = false;
    }

    let mut seen: Vec<&str> = Vec::new();
    let mut defined: Vec<(&'static HookSpec, Signature)> = Vec::new();
    let mut item_ty: Option<Type> = None;
    for impl_item in &block.items {
        let ImplItem::Fn(f) = impl_item else {
            errors.spanned(
                impl_item,
                "only hook fns belong in a #[hermes_env::hooks] block; move this item to a separate `impl` block",
            );
            continue;
        };
        let name = f.sig.ident.unraw().to_string();
        let Some(hook) = HookSpec::named(&name) else {
            errors.spanned(&f.sig.ident, unknown_hook(&name));
            continue;
        };
        if seen.contains(&hook.name) {
            errors.spanned(&f.sig.ident, format_args!("duplicate hook `{name}`"));
            continue;
        }
        seen.push(hook.name);
        match signature_problem(hook, &f.sig) {
            Some(problem) => errors.spanned(
                &f.sig,
                format_args!("hook `{name}` must be `{}` ({problem})", hook.signature()),
            ),
            None => {
                if hook.name == ITEM_HOOK {
                    item_ty = option_arg(&f.sig.output).cloned();
                }
                defined.push((hook, f.sig.clone()));
            }
        }
    }
    for spec in HOOKS
        .iter()
        .filter(|s| s.required && !seen.contains(&s.name))
    {
        errors.spanned(
            &block.self_ty,
            format_args!(
                "missing required hook `{}`: `{}`",
                spec.name,
                spec.signature()
            ),
        );
    }

    // A well-formed `get_next_item` always yields the item type, so no errors implies `Some`.
    match item_ty {
        Some(item_ty) if errors.is_empty() => Ok(Hooks {
            item: block,
            item_ty,
            defined,
        }),
        item_ty => {
            let self_ty = recoverable.then(|| (*block.self_ty).clone());
            Err(Box::new(RejectedHooks {
                errors: errors.into_error(),
                item: Item::Impl(block),
                self_ty,
                item_ty,
            }))
        }
    }
}

/// The message for a fn that is not a hook.
fn unknown_hook(name: &str) -> String {
    if let Some(near) = closest(name, HOOKS.iter().map(|s| s.name)) {
        return format!("unknown hook `{name}`; did you mean `{near}`?");
    }
    let names: Vec<String> = HOOKS.iter().map(|s| format!("`{}`", s.name)).collect();
    let (last, rest) = names
        .split_last()
        .map_or(("", &[][..]), |(l, r)| (l.as_str(), r));
    format!(
        "unknown hook `{name}`; the hooks are {} and {last} (helper fns belong in a separate `impl` block)",
        rest.join(", ")
    )
}

/// What is wrong with a hook's signature, if anything (the first problem found).
fn signature_problem(spec: &HookSpec, sig: &Signature) -> Option<String> {
    if spec.is_async != sig.asyncness.is_some() {
        return Some(
            if spec.is_async {
                "it is not `async`"
            } else {
                "it must not be `async`"
            }
            .to_owned(),
        );
    }
    if sig.unsafety.is_some() {
        return Some("it must not be `unsafe`".to_owned());
    }
    let expected = if spec.mut_self { "&mut self" } else { "&self" };
    let found = match sig.receiver() {
        None => return Some(format!("it must take `{expected}`")),
        Some(receiver) => match &*receiver.ty {
            Type::Reference(r) if r.mutability.is_some() => "&mut self",
            Type::Reference(_) => "&self",
            _ => "self",
        },
    };
    if found != expected {
        return Some(format!("it takes `{found}` instead of `{expected}`"));
    }
    let args = sig.inputs.len() - 1;
    if args != spec.params.len() {
        let plural = |n: usize| if n == 1 { "argument" } else { "arguments" };
        return Some(format!(
            "it has {args} {} after `self` instead of {}",
            plural(args),
            spec.params.len()
        ));
    }
    let returns = match &sig.output {
        ReturnType::Default => false,
        ReturnType::Type(_, ty) => !matches!(&**ty, Type::Tuple(t) if t.elems.is_empty()),
    };
    match (spec.output.is_some(), returns) {
        (true, false) => return Some("it has no return type".to_owned()),
        (false, true) => return Some("it must not return a value".to_owned()),
        _ => {}
    }
    if spec.name == ITEM_HOOK && option_arg(&sig.output).is_none() {
        return Some("its return type is not `Option<…>`".to_owned());
    }
    None
}

/// `T` of a `-> Option<T>` return type.
fn option_arg(output: &ReturnType) -> Option<&Type> {
    let ReturnType::Type(_, ty) = output else {
        return None;
    };
    match &**ty {
        Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last()?;
            if last.ident == "Option" {
                single_type_arg(&last.arguments)
            } else {
                None
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    /// The messages of every error `#[hermes_env(args)]` reports for `item`.
    fn env_errors(args: TokenStream, item: TokenStream) -> Vec<String> {
        match env(args, syn::parse2(item).unwrap()) {
            Ok(_) => Vec::new(),
            Err(rejected) => rejected.errors.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    /// The messages of every error `#[hermes_env::hooks]` reports for `item`.
    fn hook_errors(args: TokenStream, item: TokenStream) -> Vec<String> {
        match hooks(args, syn::parse2(item).unwrap()) {
            Ok(_) => Vec::new(),
            Err(rejected) => rejected.errors.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    /// A hooks block with the three required hooks plus `extra`.
    fn hooks_block(extra: TokenStream) -> TokenStream {
        quote! {
            impl Env {
                async fn get_next_item(&mut self) -> Option<u32> { None }
                fn format_prompt(&self, item: &u32) -> String { String::new() }
                async fn compute_reward(&self, item: &u32, run: &AgentResult, ctx: &ToolContext) -> Result<f64> {
                    Ok(0.0)
                }
                #extra
            }
        }
    }

    #[test]
    fn shared_fields_match_the_runtime() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../hermes-runtime/src/config/env.rs"
        );
        let source = std::fs::read_to_string(path).expect("the runtime's HermesEnvConfig source");
        let body = source
            .split("pub struct HermesEnvConfig {")
            .nth(1)
            .and_then(|rest| rest.split("\n    }").next())
            .expect("the HermesEnvConfig table");
        let fields: Vec<&str> = body
            .lines()
            .map(str::trim)
            .filter(|line| !line.starts_with("//") && line.contains(" = "))
            .filter_map(|line| line.split(':').next())
            .collect();
        assert_eq!(fields, SHARED_FIELDS);
    }

    #[test]
    fn kebab_case_names() {
        let cases = [
            ("TerminalTest", "terminal-test"),
            ("HTTPProbe2Env", "http-probe2-env"),
            ("Gsm8k", "gsm8k"),
        ];
        for (ident, want) in cases {
            assert_eq!(kebab_case(&Ident::new(ident, Span::call_site())), want);
        }
    }

    #[test]
    fn flag_types() {
        let ok: [Type; 7] = [
            parse_quote!(bool),
            parse_quote!(std::path::PathBuf),
            parse_quote!(Option<Option<u8>>),
            parse_quote!(Vec<MyThing>),
            parse_quote!(serde_json::Value),
            parse_quote!(Map<String, Value>),
            parse_quote!(HashMap<String, i64>),
        ];
        let bad: [Type; 5] = [
            parse_quote!(char),
            parse_quote!(Option<Task>),
            parse_quote!(&'static str),
            parse_quote!((u8, u8)),
            parse_quote!(u128),
        ];
        assert!(ok.iter().all(is_flag_type));
        assert!(!bad.iter().any(is_flag_type));
        assert_eq!(attr::type_text(&bad[2]), "&'static str");
        assert_eq!(
            attr::type_text(&parse_quote!(Vec<(u8, std::path::PathBuf)>)),
            "Vec<(u8, std::path::PathBuf)>"
        );
    }

    #[test]
    fn valid_env_builds_the_model() {
        let args = quote!(toolsets = ["terminal"], group_size = 3, main = false);
        let item = quote! {
            /// Does things.
            ///
            /// Well.
            struct MyEnv {
                /// Suffix.
                #[config(default = "")]
                suffix: String,
                count: usize,
            }
        };
        let Ok(env) = env(args, syn::parse2(item).unwrap()) else {
            panic!("rejected")
        };
        assert_eq!(env.name.value(), "my-env");
        assert_eq!(env.about, "Does things. Well.");
        assert!(!env.main);
        let shared: Vec<String> = env.shared.iter().map(|s| s.field.to_string()).collect();
        assert_eq!(shared, ["enabled_toolsets", "group_size"]);
        assert_eq!(env.fields.len(), 2);
        assert_eq!(
            env.fields[0].config.as_ref().map(|c| c.help.as_str()),
            Some("Suffix.")
        );
        assert!(env.fields[1].config.is_none());
        assert!(env
            .item
            .fields
            .iter()
            .all(|f| f.attrs.iter().all(|a| !a.path().is_ident("config"))));
    }

    #[test]
    fn env_errors_are_all_reported() {
        let args = quote! {
            nmae = "x", group_size = 3, group_size = 4, toolsets = ["a"], enabled_toolsets = ["b"],
            main = "no", name = env_name(), banana = 1, toolsets2 = 1
        };
        let item = quote! {
            struct MyEnv {
                #[config(defualt = 1)]
                a: i64,
                #[config(max = 1)]
                b: i64,
                #[config]
                c: Task,
                #[config]
                group_size: i64,
                #[config = 1]
                d: i64,
            }
        };
        assert_eq!(
            env_errors(args, item),
            [
                "unknown key `nmae`; did you mean `name`?",
                "duplicate key `group_size`",
                "duplicate key: `enabled_toolsets` and `toolsets` set the same field",
                "`main` must be `true` or `false`",
                "`name` must be a string literal, e.g. `name = \"my-env\"`",
                "unknown key `banana`; expected `name`, `main`, `toolsets`, `servers` or a shared env field (`group_size`, \
                 `max_agent_turns`, `system_prompt`, …)",
                "unknown key `toolsets2`; did you mean `toolsets`?",
                "unknown key `defualt` in #[config]; did you mean `default`?",
                "unknown key `max` in #[config]; the only key is `default = <value>`",
                "field type `Task` cannot be a command-line flag; use bool, an integer, a float, String, PathBuf, \
                 Option<T>, Vec<T> or a map",
                "`group_size` is a shared field; set it in #[hermes_env(group_size = ...)] instead",
                "expected `#[config]` or `#[config(default = <value>)]`",
            ]
        );
    }

    #[test]
    fn env_shape_errors() {
        let cases = [
            (
                quote!(
                    enum E {
                        A,
                    }
                ),
                "#[hermes_env] must be applied to a struct with named fields, not an enum",
            ),
            (
                quote!(
                    struct T(u8);
                ),
                "#[hermes_env] needs a struct with named fields, not a tuple struct",
            ),
            (
                quote!(
                    struct U;
                ),
                "#[hermes_env] needs a struct with named fields, not a unit struct",
            ),
            (
                quote!(
                    struct G<T> {
                        t: T,
                    }
                ),
                "#[hermes_env] structs cannot be generic",
            ),
            (
                quote!(
                    fn f() {}
                ),
                "#[hermes_env] must be applied to a struct with named fields",
            ),
            (
                quote!(
                    struct S {
                        a: u8,
                    }
                ),
                "",
            ),
        ];
        for (item, want) in cases {
            let want: Vec<&str> = [want].into_iter().filter(|w| !w.is_empty()).collect();
            assert_eq!(env_errors(TokenStream::new(), item), want);
        }
        assert_eq!(env_errors(quote!(toolsets = "terminal"), quote!(struct S {})), [
            "`toolsets` must be an array of string literals, e.g. `toolsets = [\"terminal\", \"file\"]`"
        ]);
        assert_eq!(env_errors(quote!(mcp_servers = McpServer::http("s", "http://x")), quote!(struct S {})), [
            "`mcp_servers` must be an array of MCP server declarations, e.g. `mcp_servers = [McpServer::stdio(\"files\", \"python3\", [\"server.py\"])]`"
        ]);
        assert!(env_errors(
            quote!(mcp_servers = [servers()]),
            quote!(
                struct S {}
            )
        )
        .is_empty());
        assert_eq!(
            env_errors(
                quote!(main),
                quote!(
                    struct S {}
                )
            ),
            ["expected `main = <value>`"]
        );
    }

    #[test]
    fn valid_hooks_build_the_model() {
        let item = hooks_block(quote!(
            fn eval_items(&self) -> Vec<u32> {
                Vec::new()
            }
        ));
        let Ok(hooks) = hooks(TokenStream::new(), syn::parse2(item).unwrap()) else {
            panic!("rejected")
        };
        let item_ty = &hooks.item_ty;
        assert_eq!(quote!(#item_ty).to_string(), "u32");
        let defined: Vec<&str> = hooks.defined.iter().map(|(h, _)| h.name).collect();
        assert_eq!(
            defined,
            [
                "get_next_item",
                "format_prompt",
                "compute_reward",
                "eval_items"
            ]
        );
    }

    #[test]
    fn hook_errors_are_all_reported() {
        let extra = quote! {
            fn setup(&mut self) -> Result<()> { Ok(()) }
            fn evalute(&self, samples: &[EvalSample<u32>], metrics: &mut Metrics) {}
            fn helper(&self) {}
            fn eval_items(&mut self) -> Vec<u32> { Vec::new() }
            fn wandb_log(&self, rollouts: &[ScoredRollout<u32>]) {}
            fn reference_solution(&self, item: &u32) {}
            fn evaluate(&self, samples: &[EvalSample<u32>], metrics: &mut Metrics) -> u32 { 0 }
            fn format_prompt(&self, item: &u32) -> String { String::new() }
            const X: u32 = 1;
        };
        assert_eq!(
            hook_errors(quote!(x), hooks_block(extra)),
            [
                "#[hermes_env::hooks] takes no arguments",
                "hook `setup` must be `async fn setup(&mut self) -> Result<()>` (it is not `async`)",
                "unknown hook `evalute`; did you mean `evaluate`?",
                "unknown hook `helper`; the hooks are `setup`, `get_next_item`, `format_prompt`, `compute_reward`, \
                 `eval_items`, `evaluate`, `wandb_log`, `reference_solution`, `sandbox_spec`, `register_tools`, \
                 `score_group`, `save_checkpoint`, `load_checkpoint` and `next_step` \
                 (helper fns belong in a separate `impl` block)",
                "hook `eval_items` must be `fn eval_items(&self) -> Vec<Item>` (it takes `&mut self` instead of \
                 `&self`)",
                "hook `wandb_log` must be `fn wandb_log(&self, rollouts: &[ScoredRollout<Item>], metrics: &mut \
                 Metrics)` (it has 1 argument after `self` instead of 2)",
                "hook `reference_solution` must be `fn reference_solution(&self, item: &Item) -> \
                 Option<ReferenceSolution>` (it has no return type)",
                "hook `evaluate` must be `fn evaluate(&self, samples: &[EvalSample<Item>], metrics: &mut Metrics)` \
                 (it must not return a value)",
                "duplicate hook `format_prompt`",
                "only hook fns belong in a #[hermes_env::hooks] block; move this item to a separate `impl` block",
            ]
        );
    }

    #[test]
    fn hook_block_errors() {
        let missing = quote! {
            impl Env {
                async fn get_next_item(&mut self) -> Vec<u32> { None }
                async fn format_prompt(&self, item: &u32) -> String { String::new() }
            }
        };
        assert_eq!(
            hook_errors(TokenStream::new(), missing),
            [
                "hook `get_next_item` must be `async fn get_next_item(&mut self) -> Option<Item>` (its return type \
                 is not `Option<…>`)",
                "hook `format_prompt` must be `fn format_prompt(&self, item: &Item) -> String` (it must not be \
                 `async`)",
                "missing required hook `compute_reward`: `async fn compute_reward(&self, item: &Item, run: \
                 &AgentResult, ctx: &ToolContext) -> Result<f64>`",
            ]
        );
        let generic_trait_impl = quote!(
            impl<T> Trait for Env<T> {}
        );
        let errors = hook_errors(TokenStream::new(), generic_trait_impl);
        assert_eq!(errors[..2], [
            "#[hermes_env::hooks] goes on an inherent `impl Env { … }` block, not on a trait impl",
            "#[hermes_env::hooks] impl blocks cannot be generic",
        ]);
        assert_eq!(
            hook_errors(
                TokenStream::new(),
                quote!(
                    struct S;
                )
            ),
            ["#[hermes_env::hooks] must be applied to an `impl` block of the environment struct"]
        );
    }
}
