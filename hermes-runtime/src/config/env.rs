//! `HermesEnvConfig`: every Atropos `BaseEnvConfig` and Hermes `HermesAgentEnvConfig` field,
//! with upstream defaults (`--env.<field>`, YAML `env:`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::flags::{FlagShape, FlagType, ScalarKind};
use super::mcp::McpServer;
use super::section::config_section;

/// What happens to training while an evaluation runs in `serve` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EvalHandling {
    /// Pause training rollouts during evaluation.
    #[serde(rename = "STOP_TRAIN")]
    StopTrain,
    /// Keep a fraction (`eval_limit_ratio`) of the training workers.
    #[serde(rename = "LIMIT_TRAIN")]
    LimitTrain,
    /// Train and evaluate at full speed.
    #[serde(rename = "NONE")]
    None,
}

impl FlagType for EvalHandling {
    const SHAPE: FlagShape = FlagShape {
        kind: ScalarKind::Choice(&["STOP_TRAIN", "LIMIT_TRAIN", "NONE"]),
        nullable: false,
    };
}

/// The largest group a run may ask for: a group's rollouts are held together until it is
/// scored, and GRPO groups are 8 to 256 rollouts.
pub const MAX_GROUP_SIZE: i64 = 4096;

/// The longest time limit a field may name, in seconds (about 31 years): limits become
/// `Duration`s, and a larger one is a typo, not a wish.
pub(crate) const SECONDS_MAX: f64 = 1e9;

config_section! {
    /// Environment config: Atropos base fields, Hermes agent fields and hermes-env additions.
    #[derive(Debug)]
    pub struct HermesEnvConfig {
        /// Rollouts per group (one group per item).
        #[range(1, MAX_GROUP_SIZE)]
        group_size: i64 = 4,
        /// Concurrent groups; -1 = max_num_workers_per_node × number of inference servers.
        #[range(-1, 1_000_000)]
        max_num_workers: i64 = -1,
        /// Concurrent rollouts during evaluation.
        #[range(1, 1_000_000)]
        max_eval_workers: i64 = 16,
        /// Workers per inference server when max_num_workers is -1.
        #[range(1, 1_000_000)]
        max_num_workers_per_node: i64 = 8,
        /// Run evaluation every N trainer steps in serve mode (0 or -1 disables).
        #[range(-1, 1_000_000_000)]
        steps_per_eval: i64 = 100,
        /// Maximum tokens per sequence; also the per-turn max_tokens of the agent.
        #[range(1, 100_000_000)]
        max_token_length: i64 = 2048,
        /// Training during evaluation: STOP_TRAIN, LIMIT_TRAIN or NONE.
        eval_handling: EvalHandling = EvalHandling::StopTrain,
        /// Fraction of workers kept under LIMIT_TRAIN.
        #[range(0, 1)]
        eval_limit_ratio: f64 = 0.5,
        /// Share of the inference fleet (registered weight).
        #[range(0, 1_000_000)]
        inference_weight: f64 = 1.0,
        /// Trainer batch size (overwritten from the trajectory API).
        #[range(-1, 100_000_000)]
        batch_size: i64 = -1,
        /// Queue cap in batches before the environment pauses.
        #[range(0, 1_000_000)]
        max_batches_offpolicy: i64 = 3,
        /// Tokenizer for Phase 2 and for re-tokenizing Phase 1 chats: a directory (tokenizer.json + tokenizer_config.json) or a hub id ORG/NAME[@revision] from the Hugging Face cache, downloaded when online.
        tokenizer_name: String = "NousResearch/DeepHermes-3-Llama-3-3B-Preview".into(),
        /// Mask (-100) assistant turns cut at max_tokens (finish_reason length) instead of training them exactly as generated (never with an end-of-turn token the model did not produce).
        mask_truncated_turns: bool = false,
        /// Named chat template of the tokenizer to render every chat with (e.g. tool_use), for tokenizers whose chat_template is a list; null = transformers' choice: tool_use when tools are offered and it exists, else default.
        chat_template_name: Option<String> = None,
        /// Log to Weights & Biases.
        use_wandb: bool = true,
        /// Trajectory API base URL.
        rollout_server_url: String = "http://localhost:8000".into(),
        /// serve: stop after this trainer step (-1 = from the API); process: number of groups.
        #[range(-1, 1_000_000_000_000i64)]
        total_steps: i64 = 1000,
        /// Registered name and wandb run-name stem (defaults to the environment's name).
        wandb_name: Option<String> = None,
        /// Groups kept for the wandb rollout table.
        #[range(0, 1_000_000)]
        num_rollouts_to_keep: i64 = 32,
        /// Rollouts per group shown in the wandb table (-1 = whole group).
        #[range(-1, MAX_GROUP_SIZE)]
        num_rollouts_per_group_for_logging: i64 = 1,
        /// Drop groups whose scores are all equal.
        ensure_scores_are_not_same: bool = true,
        /// Write every group to this JSONL file (an existing file gets a _N suffix).
        data_path_to_save_groups: Option<String> = None,
        /// Directory for evaluate_config.yaml, metrics.json and samples.jsonl.
        data_dir_to_save_evals: Option<String> = None,
        /// Groups sent before a step change triggers a wandb log.
        #[range(0, 1_000_000_000)]
        min_items_sent_before_logging: i64 = 2,
        /// Synthesise messages for groups that have none.
        include_messages: bool = false,
        /// Guaranteed share of each trainer batch (0..1).
        #[range(0, 1)]
        min_batch_allocation: Option<f64> = None,
        /// Seconds before a worker is cancelled and its item dropped (0 or -1 disables).
        #[range(-1, SECONDS_MAX)]
        worker_timeout: f64 = 600.0,
        /// Retries of a failed inference request after its first attempt (9 = 10 attempts in all), each on another server when one is up; a 4xx other than 408/429 is never retried. The default keeps every group of a run whose requests fail 40 % of the time (30 % 5xx, 10 % stalls) complete; see the guide's "Defaults that survive faults".
        #[range(0, 100)]
        llm_retries: i64 = 9,
        /// Backoff base in seconds: before retry n the wait is random in [0, min(cap, base × 2^(n−1))]; a server's Retry-After (429/503, up to 60 s) is waited out before it gets another request.
        #[range(0, 3600)]
        llm_retry_backoff: f64 = 1.0,
        /// Cap of the retry backoff in seconds.
        #[range(0, 3600)]
        llm_retry_backoff_cap: f64 = 10.0,
        /// Seconds a server marked down (after 3 consecutive connection errors, timeouts or 5xx) gets no requests while another is up, before one request probes it.
        #[range(0.001, 86_400)]
        llm_server_cooldown: f64 = 30.0,
        /// `serve` only: seconds without one successful LLM call, while calls keep failing on connection errors, timeouts or 5xx, before the run stops — it delivers or spools its finished groups, disconnects from the trajectory API and exits non-zero naming the cause — instead of failing item after item on a dead inference fleet (0: never).
        #[range(0, SECONDS_MAX)]
        inference_down_grace: f64 = 300.0,
        /// Ask reasoning models to think (sent as extra_body reasoning settings).
        thinking_mode: bool = false,
        /// Reasoning effort: none, minimal, low, medium, high or xhigh.
        reasoning_effort: Option<String> = None,
        /// Reasoning token budget (1024..32000).
        #[range(1024, 32_000)]
        max_reasoning_tokens: Option<i64> = None,
        /// Custom thinking prompt (accepted for compatibility; unused upstream too).
        custom_thinking_prompt: Option<String> = None,
        /// Toolsets offered to the model, e.g. ["terminal","file"]; ["all"] = every available tool; null (not set) = no tools (no `tools` or `tool_choice` in requests), as a single-turn environment wants.
        enabled_toolsets: Option<Vec<String>> = None,
        /// Toolsets removed after enabled_toolsets / distribution are resolved.
        disabled_toolsets: Option<Vec<String>> = None,
        /// Toolset distribution sampled once per group (wins over enabled_toolsets), e.g. development.
        distribution: Option<String> = None,
        /// Seed of the distribution sampler (null = random; set it for reproducible runs).
        #[range(i64::MIN, i64::MAX)]
        distribution_seed: Option<i64> = None,
        /// Web backend for web_search / web_extract: null (web tools hidden), auto (tavily if TAVILY_API_KEY is set, else searxng if SEARXNG_URL or web_base_url is, else hidden with a warning), tavily, searxng, or fake (canned results, for tests; --testing turns auto into fake).
        web_backend: Option<String> = None,
        /// With --testing: the scripted server returns tool calls as raw text in tool_call_parser's format.
        testing_raw_tool_calls: bool = false,
        /// Maximum LLM calls per rollout.
        #[range(1, 100_000)]
        max_agent_turns: i64 = 30,
        /// Single-turn groups (max_agent_turns 1, or no tools offered) ask for all group_size first answers in one request with n = group_size (split by --max_n_completions), as Atropos does; a server that refuses n (HTTP 400/422) or returns fewer choices gets one request per rollout for the rest of the run, said once. false: one request per rollout always.
        group_requests: bool = true,
        /// System prompt prepended to every rollout.
        system_prompt: Option<String> = None,
        /// Sampling temperature of every agent turn.
        #[range(0, 10)]
        agent_temperature: f64 = 1.0,
        /// Sandbox backend for tools and reward checks: local (a scratch directory per rollout), docker (a container per rollout) or ssh (a scratch directory per rollout on TERMINAL_SSH_HOST).
        terminal_backend: String = "local".into(),
        /// Default per-command timeout of the terminal tool, in seconds.
        #[range(1, SECONDS_MAX)]
        terminal_timeout: i64 = 120,
        /// Longest life of a docker sandbox in seconds, counted from when its rollout gets it: the daemon then stops and removes the container, even if this process was killed.
        #[range(1, SECONDS_MAX)]
        terminal_lifetime: i64 = 3600,
        /// Local backend: confine each sandbox where the kernel allows (Landlock: its commands read the system and their PATH, write only their own directory, signal nothing outside it; a cgroup kills its processes as one), said at start. false: the model's commands read and write whatever this user can.
        local_confinement: bool = true,
        /// Docker image of every sandbox (an environment's sandbox_spec hook may choose another per item).
        docker_image: String = "hermes-env/python:latest".into(),
        /// Docker daemon address (unix:///path, tcp://host:port, tcp://host:port?tls=DIR or ssh://[user@]host[?key=PATH]); null = DOCKER_HOST or the local socket.
        docker_host: Option<String> = None,
        /// Memory limit of each sandbox container in MiB (0 = unlimited).
        #[range(0, 1_048_576)]
        container_memory_mb: i64 = 4096,
        /// CPU limit of each sandbox container (0 = unlimited).
        #[range(0, 4096)]
        container_cpus: f64 = 1.0,
        /// Process limit of each sandbox container (0 = unlimited).
        #[range(0, 4_194_304)]
        container_pids_limit: i64 = 256,
        /// Network of sandbox containers: none (default), bridge, host or a network name.
        container_network: String = "none".into(),
        /// Bind mounts of sandbox containers, e.g. ["/data:/data:ro"].
        container_mounts: Option<Vec<String>> = None,
        /// tmpfs mounts of sandbox containers, as `path:options` (options may be omitted).
        container_tmpfs: Vec<String> = vec!["/tmp:rw,nosuid,size=512m".into()],
        /// Environment variables of sandbox commands (Docker containers and local commands), e.g. ["PYTHONHASHSEED=0"].
        container_env: Option<Vec<String>> = None,
        /// Working directory of sandbox commands (relative paths resolve against it).
        container_workdir: String = "/root".into(),
        /// User sandbox commands run as; null = the image's user.
        container_user: Option<String> = None,
        /// Capabilities kept in sandbox containers; all others are dropped.
        container_cap_add: Vec<String> = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"].map(String::from).to_vec(),
        /// Pre-started sandbox containers kept ready per image (0 = create on demand).
        #[range(0, 100_000)]
        sandbox_pool_size: i64 = 0,
        /// Sandbox container creations, status reads and removals in flight at once, per Docker host; more wait their turn (one INFO line when they wait long).
        #[range(1, 100_000)]
        sandbox_create_concurrency: i64 = 8,
        /// Exec creations and starts (a shell, a one-shot command, a helper) in flight at once, per Docker host; more wait, and a command's timeout starts once it is sent.
        #[range(1, 100_000)]
        sandbox_exec_concurrency: i64 = 32,
        /// Archive requests (file uploads, downloads, stats) in flight at once, per Docker host; more wait their turn.
        #[range(1, 100_000)]
        sandbox_archive_concurrency: i64 = 16,
        /// Daemon filesystem diffs (the tripwires' fallback where the container's storage cannot be read) in flight at once, per Docker host.
        #[range(1, 100_000)]
        sandbox_diff_concurrency: i64 = 4,
        /// Commands (tool calls, verifier commands, tripwire checks) running at once in the sandboxes of each Docker or ssh host, or of this machine with local sandboxes; more wait, and a command's timeout starts once it runs; one running past 5 s gives its place back (0 = 4 per CPU of the host).
        #[range(0, 100_000)]
        sandbox_command_concurrency: i64 = 0,
        /// Sandbox container creations started per second (0 = unlimited).
        #[range(0, 1_000_000)]
        sandbox_create_rate: f64 = 20.0,
        /// Seconds between reaper passes during a docker run (0 = only at its start and end); a pass removes containers of runs that are gone.
        #[range(0, SECONDS_MAX)]
        sandbox_reap_interval: f64 = 300.0,
        /// Dataset for environments that load one (hermes_env::data): a hub id ORG/NAME[@revision][:config], a local file or a directory.
        dataset_name: Option<String> = None,
        /// Dataset config (subset), as in load_dataset(name, config); unset takes the card's default config, or the only one.
        dataset_config: Option<String> = None,
        /// Dataset split, chosen by the hub's file names (test.jsonl, data/test-00000-of-00001.parquet, test/...).
        dataset_split: String = "train".into(),
        /// Dataset column holding the prompt, for environments that read it (Dataset::rename_column).
        prompt_field: String = "prompt".into(),
        /// Maximum concurrent tool executions.
        #[range(1, 1_000_000)]
        tool_pool_size: i64 = 128,
        /// Tool-call parser for raw model text: Phase 2 output, and Phase 1 replies whose content holds markup.
        tool_call_parser: String = "hermes".into(),
        /// serve: send Phase 1 placeholder tokens (not trainable) instead of refusing to start.
        allow_placeholder_tokens: bool = false,
        /// Extra keys merged into every chat-completion request body.
        extra_body: Option<Map<String, Value>> = None,
        /// Tool results longer than this are saved in the sandbox and previewed (characters).
        #[range(1, 1_000_000_000)]
        default_result_size_chars: i64 = 100_000,
        /// Aggregate tool-result characters per assistant turn; the largest results are saved beyond it.
        #[range(1, 10_000_000_000i64)]
        turn_budget_chars: i64 = 200_000,
        /// Preview size of saved tool results (characters).
        #[range(0, 1_000_000_000)]
        preview_size_chars: i64 = 1500,
        /// Per-tool result-size thresholds, e.g. {"terminal": 20000} (read_file is never saved).
        tool_result_overrides: Option<Map<String, Value>> = None,
        /// Limit on one rollout's agent time in seconds (0 or -1: none): its tool calls and turns, not the time spent waiting on inference (a slow server is not the model's doing; each inference call has its own --openai.timeout and fails as an `llm` failure). A rollout past it is stopped and scores 0 with outcome `timeout`.
        #[range(-1, SECONDS_MAX)]
        rollout_timeout: f64 = 0.0,
        /// Evaluate at most this many eval items (null = all).
        #[range(0, 1_000_000_000)]
        eval_size: Option<i64> = None,
        /// Re-runs of a rollout that failed for a reason not the model's (LLM, sandbox, verifier or tokenization failure) before its item is recorded in the failures file instead of being trained on.
        #[range(0, 100)]
        max_rollout_retries: i64 = 2,
        /// Reward of a tampered rollout (a tripwire fired before verification: a process outlived the agent phase, a protected file changed, a module was planted). It stays in its group and is trained on at this reward, never re-run (a re-run would hand a hacking policy a fresh roll). -1..1: a penalty below a plain failure at most -1, never more than a full reward.
        #[range(-1, 1)]
        tampered_reward: f64 = 0.0,
        /// Seconds in-flight rollouts get to finish after the first SIGINT/SIGTERM before they are cancelled (a second signal cancels at once).
        #[range(0, SECONDS_MAX)]
        shutdown_grace: f64 = 30.0,
        /// serve: directory where groups the trajectory API could not take at shutdown are spooled, and resent by the next start of the same env with the same models, tokenizer and trainer run; spools of another identity are moved to its stale/ sub-directory (null = ~/.local/state/hermes-env/outbox).
        outbox_spool_dir: Option<String> = None,
        /// serve: directory of the environment's checkpoints (its own state and its dataset positions), written as <dir>/env_checkpoints/<wandb_name or env name>/step-<N>.json every checkpoint_interval trainer steps and at exit; a restart resumes from the newest one (null = the trainer's checkpoint_dir from /register-env, as upstream).
        checkpoint_dir: Option<String> = None,
        /// serve: size limit of the spooled outbox in MiB; the oldest groups beyond it are dropped (counted as lost).
        #[range(0, 1_048_576)]
        outbox_spool_max_mb: i64 = 256,
        /// Sampling temperature of evaluation rollouts (null = agent_temperature, as upstream terminal-bench-2 evaluates).
        #[range(0, 10)]
        eval_temperature: Option<f64> = None,
        /// Endpoint of the web backend: required for searxng (e.g. http://localhost:8888), optional for tavily (a compatible proxy); null = SEARXNG_URL for searxng, the provider's public API otherwise.
        web_base_url: Option<String> = None,
        /// Docker daemons sandboxes are spread over, e.g. ["unix:///var/run/docker.sock", "tcp://10.0.0.2:2375", "tcp://10.0.0.3:2376?tls=/certs/b", "ssh://ci@builder-3"]; null = the one daemon of docker_host.
        docker_hosts: Option<Vec<String>> = None,
        /// Sandboxes alive at once on each Docker host, rollouts waiting for a place (with docker_hosts, 0 = the daemon's memory divided by container_memory_mb, at least its CPU count, no limit when container_memory_mb is 0; with one daemon, 0 = no limit).
        #[range(0, 1_000_000)]
        max_containers_per_host: i64 = 0,
        /// MCP servers whose tools are offered next to the built-in ones, e.g. [{"name": "files", "command": "python3", "args": ["server.py"], "env": ["PATH"]}, {"name": "search", "url": "http://127.0.0.1:8000/mcp", "headers_from_env": {"Authorization": "SEARCH_AUTH"}}]: tools `mcp__<name>__<tool>`, toolset `<name>`; a stdio child gets only the listed environment; a server failure fails the rollout (never a reward). Started once per run, stopped at its end.
        mcp_servers: Option<Vec<McpServer>> = None,
    }
}

impl HermesEnvConfig {
    /// Concurrent groups: `max_num_workers`, or per-node workers × servers when it is -1.
    pub fn effective_workers(&self, servers: usize) -> usize {
        if self.max_num_workers > 0 {
            self.max_num_workers as usize
        } else {
            (self.max_num_workers_per_node.max(1) as usize) * servers.max(1)
        }
    }

    /// The temperature evaluation rollouts sample at: `eval_temperature`, else `agent_temperature`.
    pub fn eval_temperature(&self) -> f64 {
        self.eval_temperature.unwrap_or(self.agent_temperature)
    }
}
