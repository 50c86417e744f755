"""A minimal echo environment on openenv-core's own server (`create_app` under uvicorn), the
Python side of `cargo bench --bench openenv`. Same messages as the Rust side: a `call_tool`
step of `echo` returns its message; a `submit` step with the answer "done" ends the episode at
reward 1.0. reset and step are `async` overrides, so openenv-core runs them on its event loop
rather than in the session's thread: the fastest path it offers.

Usage: python echo_env.py PORT MAX_SESSIONS
"""

import sys
from typing import Any, Dict, Optional

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class EchoAction(Action):
    type: str = "call_tool"
    tool_name: Optional[str] = None
    arguments: Dict[str, Any] = {}
    answer: Optional[str] = None


class EchoObservation(Observation):
    tool_name: Optional[str] = None
    result: Any = None
    error: Optional[Dict[str, Any]] = None


class EchoEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State(episode_id=None, step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._state = State(episode_id=episode_id, step_count=0)
        return EchoObservation(
            result={
                "messages": [{"role": "user", "content": "Echo a few messages, then answer `done`."}],
                "tools": [{"name": "echo"}, {"name": "submit"}],
            }
        )

    async def reset_async(self, seed=None, episode_id=None, **kwargs):
        return self.reset(seed=seed, episode_id=episode_id, **kwargs)

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        if action.type == "submit":
            reward = 1.0 if action.answer == "done" else 0.0
            return EchoObservation(result=action.answer, done=True, reward=reward)
        if action.tool_name != "echo":
            return EchoObservation(
                tool_name=action.tool_name,
                error={"error_type": "tool_not_found", "message": "unknown tool"},
            )
        return EchoObservation(tool_name="echo", result=str(action.arguments.get("message", "")))

    async def step_async(self, action, timeout_s=None, **kwargs):
        return self.step(action, timeout_s=timeout_s, **kwargs)

    @property
    def state(self):
        return self._state


if __name__ == "__main__":
    port, max_sessions = int(sys.argv[1]), int(sys.argv[2])
    app = create_app(EchoEnv, EchoAction, EchoObservation, max_concurrent_envs=max_sessions)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", backlog=8192)
