use hermes_env::prelude::*;

#[hermes_env]
pub struct MyEnv {
    iter: u64,
}

#[hermes_env::hooks]
impl MyEnv {
    async fn get_next_item(&mut self) -> Option<u32> {
        None
    }

    fn format_prompt(&self, item: &u32) -> String {
        item.to_string()
    }

    async fn compute_reward(&self, _item: &u32, _run: &AgentResult, _ctx: &ToolContext) -> Result<f64> {
        Ok(1.0)
    }

    // Upstream's `save_checkpoint(self, step, data)` takes the step; the hook does not.
    fn save_checkpoint(&self, step: i64, checkpoint: &mut Checkpoint) -> Result<()> {
        let _ = step;
        checkpoint.set("iter", &self.iter)
    }

    // Loading changes the environment: `&mut self`.
    fn load_checkpoint(&self, checkpoint: &Checkpoint) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }
}
