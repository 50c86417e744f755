"""The Hermes agent loop (hermes-semantics §6.2) for the Python peer: chat completions with
`tools=`, tool calls run sequentially in a shared thread pool (as upstream ran its sync tools),
and the same finish rules as hermes-env's loop."""

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from hermes_tools import dispatch

logger = logging.getLogger(__name__)

# Upstream's shared tool-execution pool (`tool_pool_size`).
TOOL_POOL = ThreadPoolExecutor(max_workers=128)


@dataclass
class AgentResult:
    messages: list
    turns_used: int = 0
    finished_naturally: bool = False
    reasoning_per_turn: list = field(default_factory=list)
    tool_errors: list = field(default_factory=list)


def _reasoning(msg):
    for key in ("reasoning_content", "reasoning"):
        value = getattr(msg, key, None)
        if value:
            return value
    return None


async def _run_tool(call, valid_names, scratch):
    """The result string of one tool call, and the error to record (or None)."""
    name = call.function.name
    if name not in valid_names:
        error = f"Unknown tool '{name}'"
        return json.dumps({"error": f"{error}. Available tools: {sorted(valid_names)}"}), error
    try:
        args = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError as e:
        error = f"Invalid JSON: {e}"
        return (
            json.dumps({"error": f"Invalid JSON in tool arguments: {e}. Please retry with valid JSON."}),
            error,
        )
    try:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(TOOL_POOL, dispatch, name, args, scratch), None
    except Exception as e:  # a tool failure is the model's to see, as upstream
        error = f"Tool execution failed: {type(e).__name__}: {e}"
        return json.dumps({"error": error}), error


async def run_agent(server, messages, tools, scratch, max_turns, temperature, max_tokens, split):
    """Runs up to `max_turns` LLM calls on `messages` (extended in place)."""
    valid_names = {t["function"]["name"] for t in tools}
    result = AgentResult(messages=messages)
    for turn in range(max_turns):
        result.turns_used = turn + 1
        try:
            response = await server.chat_completion(
                messages=messages,
                n=1,
                temperature=temperature,
                max_tokens=max_tokens,
                tools=tools,
                split=split,
            )
        except Exception as e:
            logger.error("LLM call failed on turn %d: %s", turn + 1, e)
            return result
        if response is None or not response.choices:
            return result
        msg = response.choices[0].message
        result.reasoning_per_turn.append(_reasoning(msg))
        if not msg.tool_calls:
            messages.append({"role": "assistant", "content": msg.content or ""})
            result.finished_naturally = True
            return result
        messages.append(
            {
                "role": "assistant",
                "content": msg.content or "",
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in msg.tool_calls
                ],
            }
        )
        for call in msg.tool_calls:
            content, error = await _run_tool(call, valid_names, scratch)
            if error is not None:
                result.tool_errors.append(
                    {"turn": turn + 1, "tool": call.function.name, "error": error}
                )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return result
