// Type errors in config defaults and hook signatures point at the author's code: the default
// value, the sync hook's name (with both signatures in the note) and the async hook's return type.

use hermes_env::prelude::*;

#[hermes_env]
pub struct MyEnv {
    /// How many.
    #[config(default = 1.5)]
    count: i64,
}

#[hermes_env::hooks]
impl MyEnv {
    async fn get_next_item(&mut self) -> Option<u32> {
        None
    }

    fn format_prompt(&self, _item: &u32) -> &str {
        "prompt"
    }

    async fn compute_reward(
        &self,
        _item: &u32,
        _run: &AgentResult,
        _ctx: &ToolContext,
    ) -> Result<u32> {
        Ok(1)
    }
}
