use hermes_env::prelude::*;

// `mcp_servers` takes an array of declarations; a lone one is refused at its span (a name in
// place of a declaration is a type error: mcp_servers_wrong_type).
#[hermes_env(mcp_servers = McpServer::stdio("files", "python3", ["server.py"]))]
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
