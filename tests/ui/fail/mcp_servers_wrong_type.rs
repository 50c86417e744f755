use hermes_env::prelude::*;

#[hermes_env(mcp_servers = ["files"])]
pub struct MyEnv {}

#[hermes_env::hooks]
impl MyEnv {
    async fn get_next_item(&mut self) -> Option<u32> {
        None
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
