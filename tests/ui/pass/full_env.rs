// A complete environment with `main = false`: the descriptor carries the name, the struct doc,
// every shared default set in the attribute and the own config fields; `from_config` builds it.

use std::path::PathBuf;
use std::sync::Arc;

use hermes_env::EvalHandling;
use hermes_runtime::config::ScalarKind;
use hermes_env::prelude::*;
use hermes_env::EnvDefinition;

#[derive(Clone, Serialize)]
pub struct Task {
    prompt: String,
}

/// Terminal tasks verified by reading a file.
///
/// Second paragraph.
#[hermes_env(
    name = "terminal-test",
    main = false,
    toolsets = ["terminal", "file"],
    disabled_toolsets = ["web"],
    group_size = 3,
    max_agent_turns = 10,
    system_prompt = "You are helpful.",
    agent_temperature = 0.7,
    use_wandb = false,
    tokenizer_name = "gpt2",
    eval_handling = EvalHandling::LimitTrain,
    max_reasoning_tokens = 4000,
    min_batch_allocation = 0.25,
    servers = [
        DefaultServer::openrouter("anthropic/claude-sonnet-4"),
        DefaultServer::openai("http://localhost:9001/v1", "local"),
    ],
)]
pub struct TerminalTest {
    /// Appended to prompts.
    #[config(default = "")]
    prompt_suffix: String,
    /// How many tasks.
    #[config(default = 3)]
    task_count: i64,
    #[config]
    verbose: bool,
    /// Optional label.
    #[config(default = Some("x".to_owned()))]
    label: Option<String>,
    /// Where to write.
    #[config(default = "out")]
    out_dir: PathBuf,
    /// Extra words.
    #[config(default = vec!["a".to_owned()])]
    words: Vec<String>,
    next: usize,
}

#[hermes_env::hooks]
impl TerminalTest {
    async fn get_next_item(&mut self) -> Option<Task> {
        self.next += 1;
        Some(Task {
            prompt: format!("task {}{}", self.next, self.prompt_suffix),
        })
    }

    fn format_prompt(&self, item: &Task) -> String {
        item.prompt.clone()
    }

    async fn compute_reward(
        &self,
        _item: &Task,
        _run: &AgentResult,
        _ctx: &ToolContext,
    ) -> Result<f64> {
        Ok(if self.verbose { 1.0 } else { 0.5 })
    }
}

fn is_environment<E: Environment>() {}

fn main() {
    is_environment::<TerminalTest>();

    let d = TerminalTest::descriptor();
    assert_eq!(d.name, "terminal-test");
    assert_eq!(
        d.servers,
        [
            DefaultServer::openrouter("anthropic/claude-sonnet-4"),
            DefaultServer::openai("http://localhost:9001/v1", "local"),
        ]
    );
    assert_eq!(
        d.about,
        "Terminal tasks verified by reading a file. Second paragraph."
    );
    let shared = &d.defaults;
    assert_eq!(
        shared.enabled_toolsets,
        Some(vec!["terminal".to_owned(), "file".to_owned()])
    );
    assert_eq!(shared.disabled_toolsets, Some(vec!["web".to_owned()]));
    assert_eq!(shared.group_size, 3);
    assert_eq!(shared.max_agent_turns, 10);
    assert_eq!(shared.system_prompt.as_deref(), Some("You are helpful."));
    assert_eq!(shared.agent_temperature, 0.7);
    assert!(!shared.use_wandb);
    assert_eq!(shared.tokenizer_name, "gpt2");
    assert_eq!(shared.eval_handling, EvalHandling::LimitTrain);
    assert_eq!(shared.max_reasoning_tokens, Some(4000));
    assert_eq!(shared.min_batch_allocation, Some(0.25));
    assert_eq!(
        shared.total_steps, 1000,
        "fields not set keep their code defaults"
    );

    let names: Vec<&str> = d.own_fields.iter().map(|f| f.name).collect();
    assert_eq!(
        names,
        [
            "prompt_suffix",
            "task_count",
            "verbose",
            "label",
            "out_dir",
            "words"
        ]
    );
    let helps: Vec<&str> = d.own_fields.iter().map(|f| f.help).collect();
    assert_eq!(
        helps,
        [
            "Appended to prompts.",
            "How many tasks.",
            "",
            "Optional label.",
            "Where to write.",
            "Extra words."
        ]
    );
    assert_eq!(d.own_fields[1].shape.kind, ScalarKind::Int);
    assert_eq!(d.own_fields[2].shape.kind, ScalarKind::Bool);
    assert!(d.own_fields[3].shape.nullable);
    assert_eq!(d.own_fields[5].shape.kind, ScalarKind::Json);
    assert_eq!(d.own_defaults["prompt_suffix"], "");
    assert_eq!(d.own_defaults["task_count"], 3);
    assert_eq!(d.own_defaults["verbose"], false);
    assert_eq!(d.own_defaults["label"], "x");
    assert_eq!(d.own_defaults["out_dir"], "out");

    let own = TerminalTestConfig {
        task_count: 5,
        verbose: true,
        ..Default::default()
    };
    let env = TerminalTest::from_config(Arc::new(d.defaults.clone()), own);
    assert_eq!((env.task_count, env.verbose, env.next), (5, true, 0));
    assert_eq!(env.label.as_deref(), Some("x"));
    assert_eq!(env.out_dir, PathBuf::from("out"));
    assert_eq!(env.words, ["a"]);
    assert_eq!(env.env_config().group_size, 3);
    assert_eq!(
        Environment::format_prompt(&env, &Task { prompt: "p".into() }),
        "p"
    );
}
