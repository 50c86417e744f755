//! The checked models the expanders work from, and the shared-field table `#[hermes_env]` is
//! checked against (the hook table is `hermes_hooks::HOOKS`).

use hermes_hooks::HookSpec;
use syn::{Attribute, Expr, Ident, Item, ItemImpl, ItemStruct, LitStr, Signature, Type};

/// The shared env fields (`HermesEnvConfig`) settable as `#[hermes_env(field = value)]`.
pub const SHARED_FIELDS: &[&str] = &[
    "group_size",
    "max_num_workers",
    "max_eval_workers",
    "max_num_workers_per_node",
    "steps_per_eval",
    "max_token_length",
    "eval_handling",
    "eval_limit_ratio",
    "inference_weight",
    "batch_size",
    "max_batches_offpolicy",
    "tokenizer_name",
    "mask_truncated_turns",
    "chat_template_name",
    "use_wandb",
    "rollout_server_url",
    "total_steps",
    "wandb_name",
    "num_rollouts_to_keep",
    "num_rollouts_per_group_for_logging",
    "ensure_scores_are_not_same",
    "data_path_to_save_groups",
    "data_dir_to_save_evals",
    "min_items_sent_before_logging",
    "include_messages",
    "min_batch_allocation",
    "worker_timeout",
    "llm_retries",
    "llm_retry_backoff",
    "llm_retry_backoff_cap",
    "llm_server_cooldown",
    "inference_down_grace",
    "thinking_mode",
    "reasoning_effort",
    "max_reasoning_tokens",
    "custom_thinking_prompt",
    "enabled_toolsets",
    "disabled_toolsets",
    "distribution",
    "distribution_seed",
    "web_backend",
    "testing_raw_tool_calls",
    "max_agent_turns",
    "group_requests",
    "system_prompt",
    "agent_temperature",
    "terminal_backend",
    "terminal_timeout",
    "terminal_lifetime",
    "local_confinement",
    "docker_image",
    "docker_host",
    "container_memory_mb",
    "container_cpus",
    "container_pids_limit",
    "container_network",
    "container_mounts",
    "container_tmpfs",
    "container_env",
    "container_workdir",
    "container_user",
    "container_cap_add",
    "sandbox_pool_size",
    "sandbox_create_concurrency",
    "sandbox_exec_concurrency",
    "sandbox_archive_concurrency",
    "sandbox_diff_concurrency",
    "sandbox_command_concurrency",
    "sandbox_create_rate",
    "sandbox_reap_interval",
    "dataset_name",
    "dataset_config",
    "dataset_split",
    "prompt_field",
    "tool_pool_size",
    "tool_call_parser",
    "allow_placeholder_tokens",
    "extra_body",
    "default_result_size_chars",
    "turn_budget_chars",
    "preview_size_chars",
    "tool_result_overrides",
    "rollout_timeout",
    "eval_size",
    "max_rollout_retries",
    "tampered_reward",
    "shutdown_grace",
    "outbox_spool_dir",
    "checkpoint_dir",
    "outbox_spool_max_mb",
    "eval_temperature",
    "web_base_url",
    "docker_hosts",
    "max_containers_per_host",
    "mcp_servers",
];

/// A checked `#[hermes_env]` struct.
pub struct Env {
    /// The struct as written, `#[config]` attributes removed.
    pub item: ItemStruct,
    /// The environment's name.
    pub name: LitStr,
    /// The struct's doc comment, one line.
    pub about: String,
    /// Whether to generate `fn main`.
    pub main: bool,
    /// Shared-field defaults from the attribute, in order.
    pub shared: Vec<SharedDefault>,
    /// Default inference servers from `servers = [...]`, in order (empty = none declared).
    pub servers: Vec<Expr>,
    /// The struct's fields, in order.
    pub fields: Vec<EnvField>,
}

/// `field = value` for a shared env field.
pub struct SharedDefault {
    /// The `HermesEnvConfig` field, spanned at the attribute key.
    pub field: Ident,
    /// The value.
    pub value: Expr,
}

/// One field of the struct.
pub struct EnvField {
    /// The field's name.
    pub ident: Ident,
    /// The field's type.
    pub ty: Type,
    /// `Some` for a `#[config]` field, `None` for a plain state field.
    pub config: Option<ConfigField>,
}

/// What `#[config]` declares about a field.
pub struct ConfigField {
    /// `default = …`, if given.
    pub default: Option<Expr>,
    /// The field's doc attributes, copied to the config struct.
    pub docs: Vec<Attribute>,
    /// The doc comment as one line of `--help` text.
    pub help: String,
}

/// A `#[hermes_env]` input with errors, and what error recovery can still emit.
pub struct RejectedEnv {
    /// All errors.
    pub errors: syn::Error,
    /// The item, `#[config]` attributes removed.
    pub item: Item,
    /// The type's name, if it can carry stand-in impls (a non-generic struct or enum).
    pub ident: Option<Ident>,
    /// Whether `fn main` would have been generated.
    pub main: bool,
}

/// A checked `#[hermes_env::hooks]` block.
pub struct Hooks {
    /// The impl block, unchanged.
    pub item: ItemImpl,
    /// `type Item`, from `get_next_item`'s `Option<T>`.
    pub item_ty: Type,
    /// The hooks defined, with their signatures (for spans).
    pub defined: Vec<(&'static HookSpec, Signature)>,
}

/// A `#[hermes_env::hooks]` input with errors, and what error recovery can still emit.
pub struct RejectedHooks {
    /// All errors.
    pub errors: syn::Error,
    /// The item, unchanged.
    pub item: Item,
    /// The environment type, if it can carry a stand-in `Environment` impl.
    pub self_ty: Option<Type>,
    /// `type Item`, if `get_next_item` was well-formed.
    pub item_ty: Option<Type>,
}
