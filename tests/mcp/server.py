"""A FastMCP server (PyPI `mcp`) for tests/mcp_tools.rs: stdio by default, Streamable HTTP
with `--http PORT`."""

import hashlib
import json
import os
import sys

from mcp.server.fastmcp import Context, FastMCP

port = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "--http" else 8000
mcp = FastMCP("kv", host="127.0.0.1", port=port, log_level="WARNING")


@mcp.tool()
def lookup(key: str) -> str:
    """The code stored under `key`."""
    return "code-" + hashlib.sha256(key.encode()).hexdigest()[:8]


@mcp.tool()
def refuse(reason: str) -> str:
    """Always fails with `reason` (an isError result)."""
    raise ValueError(reason)


@mcp.tool()
def env_report() -> str:
    """This process's environment and pid, as JSON."""
    return json.dumps({"env": dict(os.environ), "pid": os.getpid()})


@mcp.tool()
def header(name: str, ctx: Context) -> str:
    """The value of request header `name` (HTTP only)."""
    request = ctx.request_context.request
    return request.headers.get(name, "<absent>") if request is not None else "<stdio>"


@mcp.tool()
def crash() -> str:
    """Exits the server at once, as a crash would."""
    os._exit(3)


if __name__ == "__main__":
    mcp.run(transport="streamable-http" if sys.argv[1:2] == ["--http"] else "stdio")
