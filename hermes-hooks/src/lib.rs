//! The hooks of a hermes-env environment as data. The `#[hermes_env::hooks]` macro checks
//! hook fns against this table and emits the `Environment` impl from it; the runtime renders
//! it into the hooks reference and tests that its `Environment` trait declares the same hooks.
//! It is a crate of its own because a proc-macro crate cannot export data.
//!
//! Types are written as the macro emits them (paths through the `hermes_env` facade, the item
//! type as `Self::Item`); [`unqualified`] turns them into what authors write.

/// One hook of `Environment`.
#[derive(Debug)]
pub struct HookSpec {
    /// The fn name.
    pub name: &'static str,
    /// Whether every environment must define it (the others have defaults).
    pub required: bool,
    /// `async fn`: the trait method returns a `Send` future of [`HookSpec::output`].
    pub is_async: bool,
    /// `&mut self` rather than `&self`.
    pub mut_self: bool,
    /// The parameters after `self`: name and type.
    pub params: &'static [(&'static str, &'static str)],
    /// The return type (of an async hook, the future's output); `None` for `()`.
    pub output: Option<&'static str>,
    /// What the hook is for: the trait method's doc comment as one line.
    pub doc: &'static str,
}

/// The facade path of anyhow's `Result`, the return type of fallible hooks.
macro_rules! result {
    ($ok:literal) => {
        concat!("::hermes_env::__private::anyhow::Result<", $ok, ">")
    };
}

/// Every hook, in trait order.
pub static HOOKS: &[HookSpec] = &[
    HookSpec {
        name: "setup",
        required: false,
        is_async: true,
        mut_self: true,
        params: &[],
        output: Some(result!("()")),
        doc: "Loads data; runs once before any rollout.",
    },
    HookSpec {
        name: "get_next_item",
        required: true,
        is_async: true,
        mut_self: true,
        params: &[],
        output: Some("::core::option::Option<Self::Item>"),
        doc: "The next training item; `None` ends a `process` run.",
    },
    HookSpec {
        name: "format_prompt",
        required: true,
        is_async: false,
        mut_self: false,
        params: &[("item", "&Self::Item")],
        output: Some("::std::string::String"),
        doc: "The user message for an item.",
    },
    HookSpec {
        name: "compute_reward",
        required: true,
        is_async: true,
        mut_self: false,
        params: &[
            ("item", "&Self::Item"),
            ("run", "&::hermes_env::AgentResult"),
            ("ctx", "&::hermes_env::ToolContext"),
        ],
        output: Some(result!("f64")),
        doc: "Scores a finished rollout, with tools running in that rollout's own sandbox.",
    },
    HookSpec {
        name: "eval_items",
        required: false,
        is_async: false,
        mut_self: false,
        params: &[],
        output: Some("::std::vec::Vec<Self::Item>"),
        doc: "Items for `evaluate` (and periodic evaluation in `serve`).",
    },
    HookSpec {
        name: "evaluate",
        required: false,
        is_async: false,
        mut_self: false,
        params: &[
            ("samples", "&[::hermes_env::EvalSample<Self::Item>]"),
            ("metrics", "&mut ::hermes_env::Metrics"),
        ],
        output: None,
        doc: "Adds metrics computed from evaluation samples; `eval/mean_reward` is always \
              present.",
    },
    HookSpec {
        name: "wandb_log",
        required: false,
        is_async: false,
        mut_self: false,
        params: &[
            ("rollouts", "&[::hermes_env::ScoredRollout<Self::Item>]"),
            ("metrics", "&mut ::hermes_env::Metrics"),
        ],
        output: None,
        doc: "Adds metrics computed from the rollouts scored since the last log; the base \
              metrics (`train/mean_reward`, tool errors, …) are always merged.",
    },
    HookSpec {
        name: "reference_solution",
        required: false,
        is_async: false,
        mut_self: false,
        params: &[("item", "&Self::Item")],
        output: Some("::core::option::Option<::hermes_env::ReferenceSolution>"),
        doc: "What a correct agent would do for `item`; `--testing true` plays it back, so runs \
              on a machine without a model show real rewards.",
    },
    HookSpec {
        name: "sandbox_spec",
        required: false,
        is_async: false,
        mut_self: false,
        params: &[("item", "&Self::Item")],
        output: Some("::hermes_env::SandboxSpec"),
        doc: "The sandbox an item's rollouts run in (for example its own Docker image, as \
              terminal-bench tasks have); the default uses the run's configuration.",
    },
    HookSpec {
        name: "register_tools",
        required: false,
        is_async: false,
        mut_self: false,
        params: &[("registry", "&mut ::hermes_env::tools::ToolRegistry")],
        output: None,
        doc: "Adds the environment's own tools (e.g. `hermes_env::tools::typed_tool`) and toolsets to the \
              built-ins before `enabled_toolsets` / `distribution` are resolved; runs after \
              `setup`.",
    },
    HookSpec {
        name: "score_group",
        required: false,
        is_async: false,
        mut_self: false,
        params: &[
            ("item", "&Self::Item"),
            ("group", "&mut ::hermes_env::ScoredGroup"),
        ],
        output: None,
        doc: "Sees a finished group (every rollout's reward, trainable tokens, finish reasons \
              and transcript) before it is written or sent, and may reshape rewards, drop \
              rollouts or skip the whole group (Atropos's group-level `score`).",
    },
    HookSpec {
        name: "save_checkpoint",
        required: false,
        is_async: false,
        mut_self: false,
        params: &[("checkpoint", "&mut ::hermes_env::Checkpoint")],
        output: Some(result!("()")),
        doc: "Adds the environment's own state to a `serve` checkpoint (saved every \
              `checkpoint_interval` trainer steps and at exit); positions of `data::Cursor`s \
              made in `setup` are saved without it.",
    },
    HookSpec {
        name: "load_checkpoint",
        required: false,
        is_async: false,
        mut_self: true,
        params: &[("checkpoint", "&::hermes_env::Checkpoint")],
        output: Some(result!("()")),
        doc: "Takes back the state `save_checkpoint` saved, when a restarted `serve` resumes \
              from a checkpoint (after `setup`); an error stops the run and leaves the file as \
              it is.",
    },
    HookSpec {
        name: "next_step",
        required: false,
        is_async: true,
        mut_self: false,
        params: &[
            ("item", "&Self::Item"),
            ("run", "&::hermes_env::AgentResult"),
            ("ctx", "&::hermes_env::ToolContext"),
        ],
        output: Some(result!("::core::option::Option<::std::string::String>")),
        doc: "Called each time the agent ends, after the tripwires passed and its processes \
              were stopped: the next instruction continues the same conversation in the same \
              sandbox (a multi-step task), `None` goes on to `compute_reward`; an error is a \
              verifier failure.",
    },
];

impl HookSpec {
    /// The hook called `name`, if any.
    pub fn named(name: &str) -> Option<&'static HookSpec> {
        HOOKS.iter().find(|spec| spec.name == name)
    }

    /// The signature as an author writes it, e.g.
    /// `fn format_prompt(&self, item: &Item) -> String`.
    pub fn signature(&self) -> String {
        let asyncness = if self.is_async { "async " } else { "" };
        let receiver = if self.mut_self { "&mut self" } else { "&self" };
        let params: String = self
            .params
            .iter()
            .map(|(name, ty)| format!(", {name}: {}", unqualified(ty)))
            .collect();
        let output = self
            .output
            .map(|ty| format!(" -> {}", unqualified(ty)))
            .unwrap_or_default();
        format!("{asyncness}fn {}({receiver}{params}){output}", self.name)
    }
}

/// `text` with every path shortened to its last segment: `&::hermes_env::AgentResult` →
/// `&AgentResult`, `Option<Self::Item>` → `Option<Item>`.
pub fn unqualified(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("::") {
        out.push_str(&rest[..at]);
        let segment = out
            .trim_end_matches(|c: char| c.is_alphanumeric() || c == '_')
            .len();
        out.truncate(segment);
        rest = &rest[at + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for spec in HOOKS {
            assert!(std::ptr::eq(HookSpec::named(spec.name).unwrap(), spec));
        }
        assert!(HookSpec::named("helper").is_none());
    }

    #[test]
    fn signatures_read_as_authors_write_them() {
        let signature = |name| HookSpec::named(name).unwrap().signature();
        assert_eq!(
            signature("compute_reward"),
            "async fn compute_reward(&self, item: &Item, run: &AgentResult, ctx: &ToolContext) \
             -> Result<f64>"
        );
        assert_eq!(
            signature("evaluate"),
            "fn evaluate(&self, samples: &[EvalSample<Item>], metrics: &mut Metrics)"
        );
        assert_eq!(
            signature("setup"),
            "async fn setup(&mut self) -> Result<()>"
        );
    }

    #[test]
    fn unqualified_keeps_the_last_segment() {
        assert_eq!(unqualified("crate::tools::ToolRegistry"), "ToolRegistry");
        assert_eq!(
            unqualified("impl Future<Output = anyhow::Result<()>> + Send"),
            "impl Future<Output = Result<()>> + Send"
        );
        assert_eq!(unqualified("&mut ::hermes_env::Metrics"), "&mut Metrics");
    }
}
