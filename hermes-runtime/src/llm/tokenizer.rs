//! A Hugging Face tokenizer (`tokenizer.json`, through the `tokenizers` crate) with its chat
//! template (`chat_template.jinja` or `tokenizer_config.json`, rendered with minijinja the way
//! `transformers` renders it, see [`super::chat_template`]), from a local directory or a hub id
//! through the Hugging Face cache ([`crate::hub`]). [`ChatTokenizer::render`] and
//! [`ChatTokenizer::encode_rendered`] are the one path both Phase 1 trainer tokens and Phase 2
//! prompts go through.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use minijinja::value::Serde;
use minijinja::Environment;
use serde_json::{Map, Value};

use super::chat_template;
use super::pieces::PieceEncoder;
use super::template_choice::{templates_of, TemplateChoice};
use super::types::PerToolList;
use super::ToolSchema;

use crate::hub::{HubError, HubId, HubRepo, HubSettings, RepoKind};

/// The files a tokenizer is made of, as `hf download` arguments.
pub(crate) const TOKENIZER_FILES: [&str; 2] = ["tokenizer.json", "tokenizer_config.json"];

/// Why a tokenizer could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The tokenizer name is neither an existing path nor shaped like a hub id.
    #[error(
        "tokenizer '{0}' is neither a local path nor a hub id ORG/NAME[@revision]: pass a directory \
         holding tokenizer.json and tokenizer_config.json, or a Hugging Face Hub model id"
    )]
    NotFound(String),
    /// The hub id could not be resolved (not cached offline, download failed, …).
    #[error("tokenizer: {0}")]
    Hub(#[from] HubError),
    /// A file could not be read or parsed.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The tokenizer has no chat template.
    #[error("{0}: the tokenizer has no chat template (chat_template in tokenizer_config.json or chat_template.jinja)")]
    NoTemplate(PathBuf),
    /// Encoding or decoding failed.
    #[error("tokenizer: {0}")]
    Codec(String),
    /// The chat template failed to compile or render.
    #[error("chat template: {0}")]
    Template(String),
    /// A turn cut at `max_tokens` whose generated text the template does not render as it
    /// was generated (tool calls parsed from a cut text, a template that rewrites content):
    /// its tokens cannot be trained exactly as generated.
    #[error(
        "assistant message {0} was cut at max_tokens and the chat template does not render its \
         text as generated, so its trained tokens cannot be placed"
    )]
    CutTurn(usize),
}

/// A tokenizer plus its chat template.
pub struct ChatTokenizer {
    tokenizer: tokenizers::Tokenizer,
    templates: Environment<'static>,
    /// Which of `templates` renders a chat.
    choice: TemplateChoice,
    bos_token: Option<String>,
    eos_token: Option<String>,
    eos_id: Option<u32>,
    /// Every special token the config names (`bos_token`, `eos_token`, `unk_token`,
    /// `pad_token`, …), passed to the template as transformers does.
    special_tokens: Map<String, Value>,
    /// Extra template variables (`enable_thinking`, …), passed on every render.
    template_kwargs: Map<String, Value>,
    /// `special_tokens` and `template_kwargs` as one template value, made when they are set
    /// rather than for every render.
    globals: minijinja::Value,
    source: String,
    /// Encodes rendered chats piece by piece with a memo, where that cannot change a token.
    pieces: Option<PieceEncoder>,
    /// Shared tool lists as template values (their `tojson` text kept with them): every chat
    /// of a run offers the same list, so its schemas are converted and serialised once.
    tool_values: PerToolList<minijinja::Value>,
}

impl std::fmt::Debug for ChatTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTokenizer")
            .field("source", &self.source)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

/// The built-in byte-level tokenizer (one token per byte, ChatML specials) and its ChatML
/// template with Hermes tool calls; the files live in `llm/tiny_tokenizer/`.
const TINY_TOKENIZER: &str = include_str!("tiny_tokenizer/tokenizer.json");
const TINY_CONFIG: &str = include_str!("tiny_tokenizer/tokenizer_config.json");

fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

/// The special tokens transformers passes to every template (`special_tokens_map`).
const SPECIAL_TOKEN_KEYS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

impl ChatTokenizer {
    fn build(
        tokenizer: tokenizers::Tokenizer,
        config: &Value,
        (choice, templates): (TemplateChoice, Vec<(String, String)>),
        source: String,
    ) -> Result<Self, TokenizerError> {
        let templates = chat_template::environment_with(templates)
            .map_err(|e| TokenizerError::Template(format!("{e:#}")))?;
        let special_tokens = SPECIAL_TOKEN_KEYS
            .iter()
            .filter_map(|k| Some(((*k).to_owned(), Value::String(token_text(config.get(*k))?))))
            .collect();
        let eos_token = token_text(config.get("eos_token"));
        let eos_id = eos_token.as_deref().and_then(|t| tokenizer.token_to_id(t));
        let globals = globals(&special_tokens, &Map::new());
        Ok(ChatTokenizer {
            globals,
            pieces: PieceEncoder::new(&tokenizer),
            tool_values: PerToolList::new(),
            tokenizer,
            templates,
            choice,
            bos_token: token_text(config.get("bos_token")),
            eos_token,
            eos_id,
            special_tokens,
            template_kwargs: Map::new(),
            source,
        })
    }

    /// The built-in tiny tokenizer: one token per byte (ids 0–255) plus `<|im_start|>` (256),
    /// `<|im_end|>` (257, end of turn) and `<|endoftext|>` (258), with a ChatML template that
    /// renders Hermes `<tool_call>` markup. Used by `--testing true` and tests.
    pub fn builtin() -> Self {
        let tokenizer = tokenizers::Tokenizer::from_bytes(TINY_TOKENIZER.as_bytes())
            .expect("the built-in tokenizer.json is valid");
        let config: Value =
            serde_json::from_str(TINY_CONFIG).expect("the built-in tokenizer_config.json is valid");
        let templates = templates_of(config.get("chat_template")).expect("built-in template");
        Self::build(tokenizer, &config, templates, "builtin".into())
            .expect("the built-in chat template compiles")
    }

    /// The directory holding the built-in tokenizer's files, for `--env.tokenizer_name` in
    /// tests of this crate's source tree.
    pub fn builtin_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/llm/tiny_tokenizer")
    }

    /// Loads `tokenizer.json` and the chat template from a local directory (or from the
    /// directory of a given `tokenizer.json`).
    pub fn load(name: &str) -> Result<Self, TokenizerError> {
        let path = Path::new(name);
        if !path.exists() {
            return Err(TokenizerError::NotFound(name.to_owned()));
        }
        let (dir, file) = if path.is_dir() {
            (path.to_owned(), path.join("tokenizer.json"))
        } else {
            let dir = path.parent().unwrap_or(Path::new(".")).to_owned();
            (dir, path.to_owned())
        };
        let config = Some(dir.join("tokenizer_config.json")).filter(|p| p.is_file());
        let jinja = Some(dir.join("chat_template.jinja")).filter(|p| p.is_file());
        Self::from_files(
            &file,
            config.as_deref(),
            jinja.as_deref(),
            dir.display().to_string(),
        )
    }

    /// Resolves `name` the way `AutoTokenizer.from_pretrained` does: an existing local path,
    /// else a hub id `ORG/NAME[@revision]` looked up in the hub cache and downloaded into it
    /// when online (see [`crate::hub`]).
    pub async fn resolve(name: &str, hub: &HubSettings) -> Result<Self, TokenizerError> {
        if Path::new(name).exists() {
            return Self::load(name);
        }
        let id = HubId::parse(RepoKind::Model, name)
            .ok_or_else(|| TokenizerError::NotFound(name.to_owned()))?;
        Self::from_hub(HubRepo::new(id, hub.clone()).fetching(&TOKENIZER_FILES)).await
    }

    /// Loads `tokenizer.json`, `tokenizer_config.json` and (when the repository has one)
    /// `chat_template.jinja` of a hub repository.
    pub async fn from_hub(repo: HubRepo) -> Result<Self, TokenizerError> {
        let file = repo.file("tokenizer.json").await?;
        let config = match repo.file("tokenizer_config.json").await {
            Ok(path) => Some(path),
            Err(HubError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let jinja = match repo.file("chat_template.jinja").await {
            Ok(path) => Some(path),
            Err(HubError::NotFound { .. } | HubError::NotCached { .. }) => None,
            Err(e) if config.is_some() => {
                tracing::warn!("{e}; using the chat template of tokenizer_config.json");
                None
            }
            Err(e) => return Err(e.into()),
        };
        Self::from_files(
            &file,
            config.as_deref(),
            jinja.as_deref(),
            repo.id().to_string(),
        )
    }

    /// Builds the tokenizer from its files; `chat_template.jinja` wins over the config's
    /// `chat_template`, as in `transformers`.
    fn from_files(
        file: &Path,
        config_path: Option<&Path>,
        jinja: Option<&Path>,
        source: String,
    ) -> Result<Self, TokenizerError> {
        let tokenizer =
            tokenizers::Tokenizer::from_file(file).map_err(|e| TokenizerError::File {
                path: file.to_owned(),
                reason: e.to_string(),
            })?;
        let config: Value = match config_path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| TokenizerError::File {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?;
                serde_json::from_str(&text).map_err(|e| TokenizerError::File {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?
            }
            None => Value::Object(Default::default()),
        };
        let templates = match jinja {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| TokenizerError::File {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?;
                templates_of(Some(&Value::String(text))).expect("a string is one template")
            }
            None => templates_of(config.get("chat_template"))
                .ok_or_else(|| TokenizerError::NoTemplate(PathBuf::from(&source)))?,
        };
        Self::build(tokenizer, &config, templates, source)
    }

    /// Sets extra template variables (`chat_template_kwargs` such as `enable_thinking`) that
    /// every render passes, so prompts and trainer tokens see the same ones.
    pub fn with_template_kwargs(mut self, kwargs: Map<String, Value>) -> Self {
        self.template_kwargs = kwargs;
        self.globals = globals(&self.special_tokens, &self.template_kwargs);
        self
    }

    /// Renders every chat with the chat template named `name` (`--env.chat_template_name`) of
    /// a tokenizer that has named ones; an error naming those there are otherwise.
    pub fn with_template_name(mut self, name: &str) -> Result<Self, TokenizerError> {
        self.choice = self.choice.with_name(name, &self.source)?;
        Ok(self)
    }

    /// What decides the tokens this tokenizer produces, as a sha256 hex digest: the
    /// tokenizer itself (its `tokenizer.json` serialisation), every chat template, which one
    /// renders, the special tokens and the template variables. Spooled groups carry it so a
    /// later run with another tokenizer or template does not send them (`serve`'s spool).
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        let mut part = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        part(
            self.tokenizer
                .to_string(false)
                .unwrap_or_default()
                .as_bytes(),
        );
        let mut templates: Vec<(String, String)> = self
            .templates
            .templates()
            .map(|(name, t)| (name.to_owned(), t.source().to_owned()))
            .collect();
        templates.sort();
        for (name, source) in templates {
            part(name.as_bytes());
            part(source.as_bytes());
        }
        part(format!("{:?}", self.choice).as_bytes());
        part(
            Value::Object(self.special_tokens.clone())
                .to_string()
                .as_bytes(),
        );
        part(
            Value::Object(self.template_kwargs.clone())
                .to_string()
                .as_bytes(),
        );
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Token ids of a rendered chat: `add_special_tokens=False`, as transformers'
    /// `apply_chat_template(tokenize=True)` encodes (the template writes its own BOS).
    pub fn encode_rendered(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        match &self.pieces {
            Some(_) => Ok(self.encode_rendered_with_starts(text)?.0),
            None => self.encode(text, false),
        }
    }

    /// [`Self::encode_rendered`] plus the byte offset in `text` where each token starts.
    pub fn encode_rendered_with_starts(
        &self,
        text: &str,
    ) -> Result<(Vec<u32>, Vec<usize>), TokenizerError> {
        if let Some(pieces) = &self.pieces {
            return pieces
                .encode(&self.tokenizer, text)
                .map_err(|e| TokenizerError::Codec(e.to_string()));
        }
        let encoding = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| TokenizerError::Codec(e.to_string()))?;
        let starts = encoding.get_offsets().iter().map(|o| o.0).collect();
        Ok((encoding.get_ids().to_vec(), starts))
    }

    /// Where the tokenizer came from (a directory, a hub id or `builtin`), for messages.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Token ids of `text`; `add_special_tokens` applies the tokenizer's post-processor (BOS).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        self.tokenizer
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Codec(e.to_string()))
    }

    /// Text of `ids`.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        self.tokenizer
            .decode(ids, skip_special_tokens)
            .map_err(|e| TokenizerError::Codec(e.to_string()))
    }

    /// The end-of-turn token id (`eos_token` of the config), if known.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }

    /// The BOS token id, if the config names one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos_token
            .as_deref()
            .and_then(|t| self.tokenizer.token_to_id(t))
    }

    /// Renders `messages` (OpenAI-shaped JSON) with the chat template the way
    /// `apply_chat_template(messages, tools=tools, add_generation_prompt=…, **kwargs)` does
    /// behind vLLM: tool-call arguments decoded to objects, `tools` as
    /// `[{"type": "function", "function": {…}}]`, the special tokens and template kwargs set.
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let chat = Self::prepare_with(messages, tools.map(memoised_list));
        self.render_prefix(&chat, messages.len(), add_generation_prompt)
    }

    /// [`Self::render`] with a request's shared tool list (none when it is empty).
    pub fn render_chat(
        &self,
        messages: &[Value],
        tools: &Arc<[ToolSchema]>,
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let chat = self.prepare(messages, tools);
        self.render_prefix(&chat, messages.len(), add_generation_prompt)
    }

    /// `messages` and `tools` (none when the list is empty) converted once into the template's
    /// values ([`Self::render`]'s inputs), so a chat and its prefixes render without
    /// converting them again.
    pub fn prepare(&self, messages: &[Value], tools: &Arc<[ToolSchema]>) -> PreparedChat {
        let tools = (!tools.is_empty()).then(|| self.template_tools(tools));
        Self::prepare_with(messages, tools)
    }

    fn prepare_with(messages: &[Value], tools: Option<minijinja::Value>) -> PreparedChat {
        PreparedChat {
            messages: chat_template::template_messages(messages)
                .iter()
                .map(chat_template::template_value)
                .collect(),
            tools,
        }
    }

    /// A shared tool list as template values, made once per list: each tool and the list keep
    /// the text `tojson` made of them ([`chat_template::json_memo`]), so the schemas are
    /// serialised once per run rather than in every render.
    fn template_tools(&self, tools: &Arc<[ToolSchema]>) -> minijinja::Value {
        self.tool_values.get_or_make(tools, || memoised_list(tools))
    }

    /// [`Self::render`] of the first `n` messages of a prepared chat.
    pub fn render_prefix(
        &self,
        chat: &PreparedChat,
        n: usize,
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let (template, ctx) = self.prefix_context(chat, n, add_generation_prompt)?;
        template
            .render(ctx)
            .map_err(|e| TokenizerError::Template(format!("{e:#}")))
    }

    /// [`Self::render_prefix`] measured against `text` as the template writes it, without
    /// keeping the render: its length in bytes and whether `text` starts with it. The trained
    /// spans need only that of the prefixes of a chat, and a kept render cost a string grown
    /// piece by piece (reallocations and copies) for each of them.
    pub(crate) fn measure_prefix(
        &self,
        chat: &PreparedChat,
        n: usize,
        add_generation_prompt: bool,
        text: &str,
    ) -> Result<PrefixRender, TokenizerError> {
        let (template, ctx) = self.prefix_context(chat, n, add_generation_prompt)?;
        let mut measured = PrefixOf {
            text: text.as_bytes(),
            len: 0,
            is_prefix: true,
        };
        template
            .render_captured_to(ctx, &mut measured)
            .map_err(|e| TokenizerError::Template(format!("{e:#}")))?;
        Ok(PrefixRender {
            len: measured.len,
            is_prefix: measured.is_prefix,
        })
    }

    /// The chat template and its context for the first `n` messages of a prepared chat.
    fn prefix_context(
        &self,
        chat: &PreparedChat,
        n: usize,
        add_generation_prompt: bool,
    ) -> Result<(minijinja::Template<'_, '_>, minijinja::Value), TokenizerError> {
        // transformers passes `tools=None` when none are offered: only then is `default` chosen
        // over `tool_use`.
        let key = self.choice.key(chat.tools.is_some())?;
        let template = self
            .templates
            .get_template(key)
            .map_err(|e| TokenizerError::Template(e.to_string()))?;
        let n = n.min(chat.messages.len());
        let fixed = minijinja::context! {
            messages => minijinja::Value::from(chat.messages[..n].to_vec()),
            tools => chat.tools.clone(),
            add_generation_prompt => add_generation_prompt,
        };
        Ok((
            template,
            minijinja::context! { ..fixed, ..self.globals.clone() },
        ))
    }
}

/// What [`ChatTokenizer::measure_prefix`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrefixRender {
    /// The render's length in bytes.
    pub len: usize,
    /// Whether the measured text starts with the render.
    pub is_prefix: bool,
}

/// A render's sink that keeps nothing: it counts the bytes and compares them with `text`.
struct PrefixOf<'a> {
    text: &'a [u8],
    len: usize,
    is_prefix: bool,
}

impl std::io::Write for PrefixOf<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let end = self.len + buf.len();
        self.is_prefix = self.is_prefix && self.text.get(self.len..end) == Some(buf);
        self.len = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `items` as a template list that keeps, for itself and each item, the text `tojson` made of
/// it ([`chat_template::json_memo`]).
fn memoised_list<T: serde::Serialize>(items: &[T]) -> minijinja::Value {
    let each: Vec<minijinja::Value> = items
        .iter()
        .map(|t| chat_template::json_memo(minijinja::Value::from(Serde(t))))
        .collect();
    chat_template::json_memo(minijinja::Value::from(each))
}

/// The special tokens and template kwargs every render passes, as one template value.
fn globals(
    special_tokens: &Map<String, Value>,
    template_kwargs: &Map<String, Value>,
) -> minijinja::Value {
    let mut ctx = special_tokens.clone();
    for (k, v) in template_kwargs {
        ctx.insert(k.clone(), v.clone());
    }
    minijinja::Value::from(Serde(&ctx))
}

/// A chat in the chat template's values, made by [`ChatTokenizer::prepare`].
#[derive(Debug, Clone)]
pub struct PreparedChat {
    messages: Vec<minijinja::Value>,
    tools: Option<minijinja::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fingerprint_is_stable_and_changes_with_what_renders_the_tokens() {
        let a = ChatTokenizer::builtin().fingerprint();
        assert_eq!(a.len(), 64, "{a}");
        assert_eq!(
            a,
            ChatTokenizer::builtin().fingerprint(),
            "same files, same print"
        );
        let mut kwargs = Map::new();
        kwargs.insert("enable_thinking".into(), json!(false));
        let with_kwargs = ChatTokenizer::builtin()
            .with_template_kwargs(kwargs)
            .fingerprint();
        assert_ne!(a, with_kwargs, "template variables change the tokens");
    }

    #[test]
    fn builtin_is_one_token_per_byte_with_chatml_specials() {
        let t = ChatTokenizer::builtin();
        assert_eq!(t.encode("hi", true).unwrap(), vec![104, 105]);
        assert_eq!(
            t.encode("<|im_start|>é<|im_end|>", false).unwrap(),
            vec![256, 0xc3, 0xa9, 257]
        );
        assert_eq!(t.eos_id(), Some(257));
        assert_eq!(t.decode(&[104, 105, 257], false).unwrap(), "hi<|im_end|>");
        assert_eq!(t.decode(&[104, 105, 257], true).unwrap(), "hi");
    }

    #[test]
    fn builtin_template_renders_chatml_with_tools_and_tool_calls() {
        let t = ChatTokenizer::builtin();
        let messages = vec![
            json!({"role": "system", "content": "S"}),
            json!({"role": "user", "content": "U"}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "out"}),
        ];
        let text = t.render(&messages, None, true).unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n\
             <tool_call>{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}</tool_call><|im_end|>\n\
             <|im_start|>tool\nout<|im_end|>\n<|im_start|>assistant\n"
        );
        let tools = [json!({"type": "function", "function": {"name": "terminal"}})];
        let with_tools = t.render(&messages[1..2], Some(&tools), false).unwrap();
        assert!(with_tools.starts_with("<|im_start|>system\nYou may call functions."));
        assert!(
            with_tools.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"terminal\"}}\n</tools>"),
            "{with_tools}"
        );
        assert!(with_tools.ends_with("<|im_start|>user\nU<|im_end|>\n"));
    }

    /// The measured prefix is the kept render's length, and says whether the text starts with
    /// it: for the built-in (prefix-stable) template at every prefix and generation flag, and
    /// for a template that renders a prefix unlike the chat's start.
    #[test]
    fn a_measured_prefix_is_the_kept_render_compared_with_the_text() {
        let messages = vec![
            json!({"role": "system", "content": "S"}),
            json!({"role": "user", "content": "U"}),
            json!({"role": "assistant", "content": "A"}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "é"}),
            json!({"role": "assistant", "content": "B"}),
        ];
        let check = |t: &ChatTokenizer, tools: &Arc<[ToolSchema]>| -> Vec<bool> {
            let chat = t.prepare(&messages, tools);
            let full = t.render_prefix(&chat, messages.len(), false).unwrap();
            let mut found = Vec::new();
            for n in 1..=messages.len() {
                for generation in [false, true] {
                    let kept = t.render_prefix(&chat, n, generation).unwrap();
                    let measured = t.measure_prefix(&chat, n, generation, &full).unwrap();
                    assert_eq!(measured.len, kept.len(), "n {n}, generation {generation}");
                    assert_eq!(measured.is_prefix, full.starts_with(&kept));
                    found.push(measured.is_prefix);
                }
            }
            found
        };
        let tools: Arc<[ToolSchema]> = Vec::new().into();
        // Without a generation prompt every prefix is the chat's start; with one, where the
        // next message is the assistant's (after the user's and the tool's it is not, nor after
        // the last message).
        assert_eq!(
            check(&ChatTokenizer::builtin(), &tools),
            [true, false, true, true, true, false, true, true, true, false]
        );

        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            ChatTokenizer::builtin_dir().join("tokenizer.json"),
            dir.path().join("tokenizer.json"),
        )
        .unwrap();
        let unstable = "{{ messages | length }}{% for m in messages %}{{ m.content }}{% endfor %}";
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            json!({"eos_token": "<|im_end|>", "chat_template": unstable}).to_string(),
        )
        .unwrap();
        let t = ChatTokenizer::load(dir.path().to_str().unwrap()).unwrap();
        // Only the whole chat (with or without the generation prompt, which this template
        // ignores) renders what the whole chat starts with.
        let found = check(&t, &tools);
        assert_eq!(
            found,
            [false, false, false, false, false, false, false, false, true, true]
        );
    }

    #[test]
    fn load_reads_the_shipped_directory_and_rejects_missing_paths() {
        let t = ChatTokenizer::load(ChatTokenizer::builtin_dir().to_str().unwrap()).unwrap();
        assert_eq!(t.encode("a", false).unwrap(), vec![97]);
        assert!(matches!(
            ChatTokenizer::load("NousResearch/DeepHermes-3-Llama-3-3B-Preview"),
            Err(TokenizerError::NotFound(_))
        ));
    }
}
