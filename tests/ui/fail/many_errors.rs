// Every problem is reported in one compile, each at its own span.

use hermes_env::prelude::*;

#[hermes_env(nmae = "x", main = "no", toolsets = ["terminal"], toolsets = ["file"])]
pub struct MyEnv {
    #[config(default = 1, max = 9)]
    count: i64,
    #[config]
    pair: (u32, u32),
    #[config]
    max_agent_turns: i64,
}

#[hermes_env::hooks]
impl MyEnv {
    fn get_next_item(&mut self) -> Option<u32> {
        None
    }

    fn format_prompt(&mut self, item: &u32) -> String {
        item.to_string()
    }

    fn helper(&self) {}
}

fn main() {}
