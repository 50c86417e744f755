// Every optional hook; calls through `Environment` reach the inherent hooks (a call resolving
// to the trait method itself would recurse forever).

use std::sync::Arc;

use hermes_env::prelude::*;
use hermes_env::{EnvDefinition, GroupRollout, ReferenceTurn, RewardOutcome};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Item {
    n: u32,
}

/// Uses every hook.
#[hermes_env(main = false)]
pub struct AllHooks {
    items: Vec<Item>,
}

#[hermes_env::hooks]
impl AllHooks {
    async fn setup(&mut self) -> Result<()> {
        self.items = vec![Item { n: 1 }, Item { n: 2 }];
        Ok(())
    }

    async fn get_next_item(&mut self) -> Option<Item> {
        self.items.pop()
    }

    fn format_prompt(&self, item: &Item) -> String {
        format!("item {}", item.n)
    }

    async fn compute_reward(
        &self,
        item: &Item,
        _run: &AgentResult,
        _ctx: &ToolContext,
    ) -> Result<f64> {
        Ok(f64::from(item.n))
    }

    fn eval_items(&self) -> Vec<Item> {
        vec![Item { n: 7 }]
    }

    fn evaluate(&self, samples: &[EvalSample<Item>], metrics: &mut Metrics) {
        metrics.insert("eval/samples".into(), samples.len() as f64);
    }

    fn wandb_log(&self, rollouts: &[ScoredRollout<Item>], metrics: &mut Metrics) {
        metrics.insert("train/rollouts".into(), rollouts.len() as f64);
    }

    fn reference_solution(&self, item: &Item) -> Option<ReferenceSolution> {
        Some(ReferenceSolution::new().answer(item.n.to_string()))
    }

    fn sandbox_spec(&self, item: &Item) -> SandboxSpec {
        SandboxSpec::image(format!("image-{}", item.n))
    }

    fn score_group(&self, item: &Item, group: &mut ScoredGroup) {
        if item.n == 0 {
            group.skip("no answer");
        }
        for r in &mut group.rollouts {
            r.reward += f64::from(item.n);
        }
    }

    fn save_checkpoint(&self, checkpoint: &mut Checkpoint) -> Result<()> {
        checkpoint.set("left", &self.items.len())
    }

    fn load_checkpoint(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        let left: usize = checkpoint.get("left")?;
        self.items.truncate(left);
        Ok(())
    }
}

fn main() {
    let mut env = AllHooks::from_config(Arc::new(Default::default()), Default::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(Environment::setup(&mut env)).unwrap();
    assert_eq!(
        runtime.block_on(Environment::get_next_item(&mut env)),
        Some(Item { n: 2 })
    );
    assert_eq!(Environment::format_prompt(&env, &Item { n: 3 }), "item 3");
    assert_eq!(Environment::eval_items(&env), [Item { n: 7 }]);

    let mut metrics = Metrics::new();
    Environment::evaluate(&env, &[], &mut metrics);
    Environment::wandb_log(&env, &[], &mut metrics);
    assert_eq!(metrics["eval/samples"], 0.0);
    assert_eq!(metrics["train/rollouts"], 0.0);

    let solution = Environment::reference_solution(&env, &Item { n: 4 }).unwrap();
    assert_eq!(solution.turns, [ReferenceTurn::Answer("4".into())]);
    assert_eq!(
        Environment::sandbox_spec(&env, &Item { n: 5 })
            .image
            .as_deref(),
        Some("image-5")
    );

    let rollout = GroupRollout::new(1.0, 3, AgentResult::default(), RewardOutcome::Scored);
    let mut group = ScoredGroup::new(vec![rollout]);
    Environment::score_group(&env, &Item { n: 2 }, &mut group);
    assert_eq!(group.rewards(), [3.0]);
    Environment::score_group(&env, &Item { n: 0 }, &mut group);
    assert_eq!(group.skipped(), Some("no answer"));

    let mut checkpoint = Checkpoint::default();
    Environment::save_checkpoint(&env, &mut checkpoint).unwrap();
    assert_eq!(checkpoint.get::<usize>("left").unwrap(), 1);
    env.items = vec![Item { n: 8 }, Item { n: 9 }];
    Environment::load_checkpoint(&mut env, &checkpoint).unwrap();
    assert_eq!(env.items, [Item { n: 8 }]);
    let e = Environment::load_checkpoint(&mut env, &Checkpoint::default()).unwrap_err();
    assert_eq!(e.to_string(), "the checkpoint has no value 'left'");
}
