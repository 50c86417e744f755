// Without `main = false` the attribute generates `fn main() -> ExitCode`. The environment sits
// in a module so that the generated `main` can be checked without running the CLI (a run
// without a subcommand exits with a usage error).

mod env {
    use hermes_env::prelude::*;

    /// Minimal environment.
    #[hermes_env]
    pub struct MinimalEnv {
        next: u32,
    }

    #[hermes_env::hooks]
    impl MinimalEnv {
        async fn get_next_item(&mut self) -> Option<u32> {
            self.next += 1;
            Some(self.next)
        }

        fn format_prompt(&self, item: &u32) -> String {
            item.to_string()
        }

        async fn compute_reward(
            &self,
            _item: &u32,
            _run: &AgentResult,
            _ctx: &ToolContext,
        ) -> Result<f64> {
            Ok(1.0)
        }
    }

    /// The generated entry point.
    pub const GENERATED_MAIN: fn() -> std::process::ExitCode = main;
}

fn main() {
    let _ = env::GENERATED_MAIN;
    let d = <env::MinimalEnv as hermes_env::EnvDefinition>::descriptor();
    assert_eq!(
        d.name, "minimal-env",
        "the default name is the struct name in kebab-case"
    );
    assert!(d.own_fields.is_empty());
}
