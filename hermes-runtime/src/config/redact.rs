//! One secret redactor for everything hermes-env saves or shows (evaluate_config.yaml, the
//! W&B run config, tool calls in W&B transcripts, logged configs) and one scrubber of known
//! secret values for text sinks (JSONL, HTML, samples, W&B tables).
//!
//! By name: a value is secret when its key ends in `key`, `token`, `secret`, `password`,
//! `passwd` or `credential(s)` (case and `_`/`-`/`.` ignored: `api_key`, `HF_TOKEN`,
//! `AWS_SECRET_ACCESS_KEY`, `apiKey`), contains `secret` or `password`, or is
//! `authorization` / `cookie`. By shape: credentials in URLs (`scheme://user:pass@host` keeps
//! only `scheme://<redacted>@host`), `Bearer …` tokens, `NAME=value` strings whose name is
//! secret, and every value of `container_env`. By value: the run's own secrets
//! (`remember_secret`, filled at start from the process environment and the server api
//! keys) are replaced wherever they appear verbatim (`scrub`).

use std::borrow::Cow;
use std::sync::RwLock;

use serde_json::Value;

/// What a redacted value becomes.
pub(crate) const REDACTED: &str = "<redacted>";

/// Known secret values shorter than this are not scrubbed from text (too likely to be
/// ordinary words or numbers).
const MIN_SCRUBBED_LEN: usize = 8;

/// Config keys whose list entries are `KEY=VALUE` strings with every value redacted.
const ENV_LIST_KEYS: &[&str] = &["container_env"];

/// True for key names that hold secrets (see the module docs).
pub(crate) fn is_secret_name(key: &str) -> bool {
    let k: String = key
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    const SUFFIXES: &[&str] = &[
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "credential",
        "credentials",
    ];
    SUFFIXES.iter().any(|s| k.ends_with(s))
        || k.contains("secret")
        || k.contains("password")
        || k == "authorization"
        || k == "cookie"
}

/// Redacts a JSON value in place: values of secret keys (when set), `container_env`
/// values, and secrets inside strings ([`redact_text`]).
pub(crate) fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if is_secret_name(k) {
                    if !(v.is_null() || v.as_str() == Some("")) {
                        *v = Value::String(REDACTED.into());
                    }
                } else if ENV_LIST_KEYS.contains(&k.as_str()) {
                    redact_env_list(v);
                } else {
                    redact(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::String(s) => {
            if let Cow::Owned(clean) = redact_text(s) {
                *s = clean;
            }
        }
        _ => {}
    }
}

/// `["A=1", "B=2"]` → `["A=<redacted>", "B=<redacted>"]`.
fn redact_env_list(v: &mut Value) {
    if let Value::Array(items) = v {
        for item in items {
            if let Value::String(s) = item {
                let name = s.split_once('=').map_or(s.as_str(), |(k, _)| k);
                *s = format!("{name}={REDACTED}");
            }
        }
    } else {
        redact(v);
    }
}

/// Secrets inside free text: URL userinfo, `Bearer` tokens, `NAME=value` with a secret
/// name, and the known secret values (`scrub`).
pub(crate) fn redact_text(text: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(text);
    if out.contains("://") {
        out = Cow::Owned(redact_url_userinfo(&out));
    }
    if out.contains("Bearer ") || out.contains("bearer ") {
        out = Cow::Owned(redact_bearer(&out));
    }
    if out.contains('=') {
        out = Cow::Owned(redact_assignments(&out));
    }
    match scrub(&out) {
        Cow::Owned(s) => Cow::Owned(s),
        Cow::Borrowed(_) => out,
    }
}

/// `scheme://user:pass@host/…` → `scheme://<redacted>@host/…`.
fn redact_url_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace() || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) if at > 0 => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `Bearer abc.def` → `Bearer <redacted>`.
fn redact_bearer(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let hit = ["Bearer ", "bearer "]
            .iter()
            .filter_map(|p| rest.find(p).map(|i| (i, p.len())))
            .min();
        let Some((i, len)) = hit else { break };
        out.push_str(&rest[..i + len]);
        let tail = &rest[i + len..];
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        if end > 0 {
            out.push_str(REDACTED);
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `… OPENAI_API_KEY=sk-1 …` → `… OPENAI_API_KEY=<redacted> …` (names as in
/// [`is_secret_name`]; the value runs to the next whitespace, quote or NUL).
fn redact_assignments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let before = &rest[..eq];
        let name_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &before[name_start..];
        out.push_str(&rest[..=eq]);
        let tail = &rest[eq + 1..];
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == '\0')
            .unwrap_or(tail.len());
        if !name.is_empty() && end > 0 && is_secret_name(name) && &tail[..end] != REDACTED {
            out.push_str(REDACTED);
            rest = &tail[end..];
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// The run's own secret values, scrubbed from text sinks.
static KNOWN: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Adds a secret value (an api key, a token) to the values `scrub` removes; values
/// shorter than 8 characters are ignored.
pub(crate) fn remember_secret(value: &str) {
    if value.len() < MIN_SCRUBBED_LEN || value == REDACTED {
        return;
    }
    let mut known = KNOWN.write().unwrap_or_else(|e| e.into_inner());
    if !known.iter().any(|k| k == value) {
        known.push(value.to_owned());
        // Longest first, so a secret containing another is replaced whole.
        known.sort_by_key(|k| std::cmp::Reverse(k.len()));
    }
}

/// Remembers the values of every secret-named variable of this process's environment
/// (`OPENAI_API_KEY`, `WANDB_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `HF_TOKEN`, …).
pub(crate) fn remember_environment_secrets() {
    for (k, v) in std::env::vars_os() {
        if is_secret_name(&k.to_string_lossy()) {
            remember_secret(&v.to_string_lossy());
        }
    }
}

/// `text` with every known secret value replaced by `<redacted>`.
pub(crate) fn scrub(text: &str) -> Cow<'_, str> {
    let known = KNOWN.read().unwrap_or_else(|e| e.into_inner());
    if !known.iter().any(|k| text.contains(k.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_owned();
    for k in known.iter() {
        if out.contains(k.as_str()) {
            out = out.replace(k.as_str(), REDACTED);
        }
    }
    Cow::Owned(out)
}

/// The full env config of a run with secret-looking values redacted, for a W&B run's config.
pub(crate) fn redacted_env_map(
    cfg: &super::ResolvedConfig,
) -> serde_json::Map<String, serde_json::Value> {
    let mut config = serde_json::Value::Object(cfg.env_map.clone());
    redact(&mut config);
    match config {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_names() {
        for k in [
            "api_key",
            "OPENAI_API_KEY",
            "hf_token",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "client_secret",
            "SECRET_THING",
            "password",
            "db_passwd",
            "Authorization",
            "apiKey",
            "accessToken",
            "credentials",
        ] {
            assert!(is_secret_name(k), "{k}");
        }
        for k in [
            "max_token_length",
            "tokenizer_name",
            "max_reasoning_tokens",
            "allow_placeholder_tokens",
            "model_name",
            "base_url",
            "keywords",
        ] {
            assert!(!is_secret_name(k), "{k}");
        }
    }

    #[test]
    fn configs_lose_keys_env_values_and_url_credentials() {
        let mut v = json!({
            "openai": [{"api_key": "sk-123", "model_name": "m",
                        "base_url": "https://user:pw@host:8/v1"}, {"api_key": ""}, {"api_key": null}],
            "env": {"max_token_length": 5, "tokenizer_name": "t", "hf_token": "hf_x",
                    "container_env": ["PYTHONHASHSEED=0", "DB=postgres://a:b@db/x"],
                    "extra_body": {"headers": {"Authorization": "Bearer abc"}, "temperature_key": 1},
                    "system_prompt": "use GITHUB_TOKEN=ghp_123 and Bearer xyz.abc"},
        });
        redact(&mut v);
        assert_eq!(v["openai"][0]["api_key"], REDACTED);
        assert_eq!(v["openai"][1]["api_key"], "");
        assert_eq!(v["openai"][2]["api_key"], Value::Null);
        assert_eq!(v["openai"][0]["base_url"], "https://<redacted>@host:8/v1");
        assert_eq!(v["env"]["tokenizer_name"], "t");
        assert_eq!(v["env"]["max_token_length"], 5);
        assert_eq!(v["env"]["hf_token"], REDACTED);
        assert_eq!(
            v["env"]["container_env"],
            json!(["PYTHONHASHSEED=<redacted>", "DB=<redacted>"])
        );
        assert_eq!(v["env"]["extra_body"]["headers"]["Authorization"], REDACTED);
        assert_eq!(v["env"]["extra_body"]["temperature_key"], REDACTED);
        assert_eq!(
            v["env"]["system_prompt"],
            "use GITHUB_TOKEN=<redacted> and Bearer <redacted>"
        );
    }

    #[test]
    fn plain_urls_and_assignments_are_kept() {
        let text = "see http://localhost:8000/v1?a=b and x=1, MODE=fast";
        assert_eq!(redact_text(text), text);
    }

    #[test]
    fn known_values_are_scrubbed_anywhere() {
        remember_secret("short");
        remember_secret("sk-known-secret-value-1234");
        let text = "env: XYZ=sk-known-secret-value-1234\0short";
        assert_eq!(scrub(text), "env: XYZ=<redacted>\0short");
    }
}
