"""The Hermes `terminal-test` environment as the Python original ran it: an atroposlib 0.4.0
`BaseEnv` with the Hermes agent loop (`hermes_loop`), the terminal and file tools in a
per-rollout scratch directory (`hermes_tools`), the reward reading the file back with `cat`,
and Phase 1 tokens as Hermes made them (the transcript's text encoded, first token masked).
It is the peer `benches/vs_python.rs` measures hermes-env's `terminal_test` example against:

    python terminal_test_env.py process --env.total_steps 32 --env.group_size 8 \
        --env.tokenizer_name DIR --env.use_wandb false --env.data_path_to_save_groups out.jsonl \
        --openai.base_url URL --openai.model_name M --openai.server_type openai \
        --openai.health_check false --openai.api_key x
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig  # noqa: E402
from pydantic import Field  # noqa: E402

from hermes_loop import run_agent  # noqa: E402
from hermes_tools import TOOL_SCHEMAS, Scratch, terminal  # noqa: E402

SYSTEM_PROMPT = (
    "You are a helpful assistant with access to a terminal and file tools. "
    "Complete the user's request using the tools, then reply briefly. Be precise."
)

TRAIN_TASKS = [
    {
        "prompt": "Create a file at ~/greeting.txt containing exactly the text: Hello from Hermes Agent",
        "verify_path": "~/greeting.txt",
        "expected_content": "Hello from Hermes Agent",
    },
    {
        "prompt": "Create a file at ~/count.txt containing the numbers 1 to 5, one per line.",
        "verify_path": "~/count.txt",
        "expected_content": "1\n2\n3\n4\n5",
    },
    {
        "prompt": "Compute 123 + 456 and write only the result to ~/answer.txt",
        "verify_path": "~/answer.txt",
        "expected_content": "579",
    },
]

EVAL_TASK = {
    "prompt": "Compute 6 * 7 and write only the result to ~/result.txt",
    "verify_path": "~/result.txt",
    "expected_content": "42",
}


class TerminalTestConfig(BaseEnvConfig):
    max_agent_turns: int = Field(default=10, description="LLM calls per rollout at most")
    agent_temperature: float = Field(default=1.0, description="sampling temperature")
    terminal_timeout: int = Field(default=120, description="seconds per terminal command")
    partial_credit: float = Field(default=0.5, description="reward when the text is contained")


class TerminalTestEnv(BaseEnv):
    name = "terminal-test"
    env_config_cls = TerminalTestConfig

    @classmethod
    def config_init(cls):
        config = TerminalTestConfig(
            group_size=3,
            total_steps=3,
            steps_per_eval=3,
            max_token_length=16000,
            ensure_scores_are_not_same=False,
            use_wandb=False,
        )
        server = APIServerConfig(
            model_name="anthropic/claude-sonnet-4.5",
            base_url="https://openrouter.ai/api/v1",
            api_key=os.environ.get("OPENROUTER_API_KEY", ""),
            server_type="openai",
            health_check=False,
        )
        return config, [server]

    async def setup(self):
        self.next = 0

    async def get_next_item(self):
        task = TRAIN_TASKS[self.next % len(TRAIN_TASKS)]
        self.next += 1
        return task

    async def rollout(self, item, temperature, split):
        """One rollout in its own scratch directory: the agent loop, then the reward."""
        scratch = Scratch(self.config.terminal_timeout)
        try:
            messages = [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": item["prompt"]},
            ]
            result = await run_agent(
                self.server,
                messages,
                TOOL_SCHEMAS,
                scratch,
                max_turns=self.config.max_agent_turns,
                temperature=temperature,
                max_tokens=self.config.max_token_length,
                split=split,
            )
            if result.turns_used == 0 or all(m["role"] in ("system", "user") for m in messages):
                return result, 0.0
            return result, self.reward(item, scratch)
        finally:
            scratch.cleanup()

    def reward(self, item, scratch):
        out = terminal(scratch, {"command": f"cat {item['verify_path']}"})
        if out["exit_code"] != 0:
            return 0.0
        got = out["output"].strip()
        if got == item["expected_content"]:
            return 1.0
        return self.config.partial_credit if item["expected_content"] in got else 0.0

    async def collect_trajectory(self, item):
        result, score = await self.rollout(item, self.config.agent_temperature, "train")
        text = "\n".join(m["content"] for m in result.messages if m.get("content"))
        tokens = self.tokenizer.encode(text, add_special_tokens=True)
        return {
            "tokens": tokens,
            "masks": [-100] + tokens[1:],
            "scores": score,
            "messages": result.messages,
        }, []

    async def evaluate(self, *args, **kwargs):
        start = time.time()
        result, score = await self.rollout(EVAL_TASK, 0.0, "eval")
        await self.evaluate_log(
            metrics={"eval/accuracy": float(score >= 1.0)},
            start_time=start,
            end_time=time.time(),
            samples=[{"messages": result.messages, "score": score}],
        )


if __name__ == "__main__":
    TerminalTestEnv.cli()
