"""Hermes-style model-facing tools for the Python peer: `terminal` (one `bash -c` child per
command, as the Hermes local backend ran them), `read_file` and `write_file`, all confined to
one rollout's scratch directory (also its `$HOME`). Results are the JSON strings the model
sees, with the Hermes result keys."""

import json
import os
import shutil
import subprocess
import tempfile

# Output over this many characters keeps its first 40 % and last 60 % (Hermes terminal tool).
MAX_OUTPUT_CHARS = 50_000

TOOL_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a shell command in the task's sandbox and return its output "
            "(stdout and stderr merged) and exit code.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command to run with bash."},
                    "timeout": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Seconds before the command is killed.",
                    },
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file with line numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 1, "default": 1},
                    "limit": {"type": "integer", "default": 500, "maximum": 2000},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Create or replace a file with the given content.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
]


class Scratch:
    """One rollout's sandbox: a fresh directory that is also `$HOME` and the working directory."""

    def __init__(self, terminal_timeout):
        self.root = tempfile.mkdtemp(prefix="hermes-peer-")
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "HOME": self.root,
        }
        self.terminal_timeout = terminal_timeout

    def path(self, p):
        """A tool's path argument resolved like the shell would (`~` is the scratch home)."""
        p = p.replace("~", self.root, 1) if p.startswith("~") else p
        return p if os.path.isabs(p) else os.path.join(self.root, p)

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)


def truncate(output):
    """The Hermes head/tail cut: first 40 %, a marker, last 60 %."""
    total = len(output)
    if total <= MAX_OUTPUT_CHARS:
        return output
    head, tail = MAX_OUTPUT_CHARS * 2 // 5, MAX_OUTPUT_CHARS * 3 // 5
    omitted = total - head - tail
    return (
        output[:head]
        + f"\n\n... [OUTPUT TRUNCATED - {omitted} chars omitted out of {total} total] ...\n\n"
        + output[-tail:]
    )


def terminal(scratch, args):
    timeout = int(args.get("timeout") or scratch.terminal_timeout)
    try:
        done = subprocess.run(
            ["bash", "-c", args["command"]],
            cwd=scratch.root,
            env=scratch.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
        output, code = done.stdout.decode("utf-8", "replace"), done.returncode
    except subprocess.TimeoutExpired as e:
        partial = (e.output or b"").decode("utf-8", "replace")
        output, code = partial + f"\n[Command timed out after {timeout}s]", 124
    return {"output": truncate(output.strip()), "exit_code": code, "error": None}


def read_file(scratch, args):
    path = scratch.path(args["path"])
    offset, limit = max(int(args.get("offset", 1)), 1), min(int(args.get("limit", 500)), 2000)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        return {"error": f"File not found: {args['path']} ({e.strerror})"}
    shown = lines[offset - 1 : offset - 1 + limit]
    result = {
        "content": "\n".join(f"{offset + i:>6}|{line}" for i, line in enumerate(shown)),
        "total_lines": len(lines),
        "file_size": os.path.getsize(path),
    }
    if offset - 1 + limit < len(lines):
        result["truncated"] = True
        result["hint"] = (
            f"Use offset={offset + limit} to continue reading "
            f"(showing {offset}-{offset + limit - 1} of {len(lines)} lines)"
        )
    return result


def write_file(scratch, args):
    path = scratch.path(args["path"])
    parent = os.path.dirname(path)
    created = not os.path.isdir(parent)
    os.makedirs(parent, exist_ok=True)
    data = args["content"].encode("utf-8")
    with open(path, "wb") as f:
        f.write(data)
    return {"bytes_written": len(data), "dirs_created": created}


HANDLERS = {"terminal": terminal, "read_file": read_file, "write_file": write_file}


def dispatch(name, args, scratch):
    """Runs tool `name` (a key of HANDLERS); the result as the JSON string the model sees."""
    return json.dumps(HANDLERS[name](scratch, args), ensure_ascii=False)
