"""Calls into code under test without importing it.

Written next to hidden tests by hermes-env's `ToolContext::write_call_harness`. A test does

    from hermes_call import load
    solution = load("solution")          # solution.py beside this file
    assert solution.fizzbuzz(3) == ["1", "2", "Fizz"]

and every call runs in a child interpreter of its own: this process (the test runner) never
imports the module, so the module cannot patch the runner, its reports or the comparison. Values
cross as JSON, so what comes back is plain data (lists, dicts, strings, numbers, booleans, None),
never an object that claims equality with anything. When this process runs as root the child
runs as `nobody` on a private copy of the module: it can neither signal the runner nor write its
files. As another user (the local backend) the child shares the runner's user, which this
harness cannot prevent.

An exception in the code under test is raised here as `CallError` (its type name in `.kind`);
a call that runs past its timeout raises `CallTimeout`. Both fail the test that made the call.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

__all__ = ["load", "CallError", "CallTimeout"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_NOBODY = 65534

_CHILD = r"""
import json, os, sys
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
request = json.loads(sys.stdin.read())
sys.path.insert(0, request["dir"])
try:
    module = __import__(request["module"])
    value = getattr(module, request["function"])(*request["args"], **request["kwargs"])
    text = json.dumps({"value": value})
except BaseException as e:
    text = json.dumps({"error": type(e).__name__, "message": str(e)[:2000]})
out.write("\n" + text + "\n")
out.flush()
os._exit(0)
"""


class CallError(Exception):
    """The code under test raised (or returned something that is not JSON)."""

    def __init__(self, kind, message):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


class CallTimeout(Exception):
    """The call did not return within its timeout."""


class _Module:
    def __init__(self, name, directory, timeout):
        self._name = name
        self._dir = directory
        self._timeout = timeout

    def __getattr__(self, function):
        if function.startswith("__"):
            raise AttributeError(function)

        def call(*args, **kwargs):
            return _call(self._name, self._dir, self._timeout, function, args, kwargs)

        call.__name__ = function
        return call


def load(name, timeout=10.0):
    """The module `name` (`name.py` beside this file), callable function by function."""
    source = os.path.join(_HERE, name + ".py")
    if not os.path.isfile(source):
        raise FileNotFoundError(f"{source} is missing")
    if os.geteuid() != 0:
        return _Module(name, _HERE, timeout)
    # A private, world-readable copy for the child, who runs as nobody.
    directory = tempfile.mkdtemp(prefix="hermes-call-")
    os.chmod(directory, 0o755)
    shutil.copyfile(source, os.path.join(directory, name + ".py"))
    os.chmod(os.path.join(directory, name + ".py"), 0o644)
    return _Module(name, directory, timeout)


def _call(name, directory, timeout, function, args, kwargs):
    request = json.dumps(
        {"module": name, "dir": directory, "function": function, "args": list(args), "kwargs": kwargs}
    )
    drop = {}
    if os.geteuid() == 0:
        drop = {"user": _NOBODY, "group": _NOBODY, "extra_groups": []}
    child = subprocess.Popen(
        [sys.executable, "-I", "-c", _CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=directory,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": directory, "LANG": "C.UTF-8"},
        start_new_session=True,
        text=True,
        **drop,
    )
    try:
        out, _ = child.communicate(request, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(child)
        raise CallTimeout(f"{name}.{function} did not return within {timeout} s") from None
    finally:
        _kill(child)
    lines = [line for line in out.splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise CallError("NoResult", f"{name}.{function} ended without a result") from None
    if not isinstance(result, dict):
        raise CallError("NoResult", f"{name}.{function} ended without a result")
    if "error" in result:
        raise CallError(str(result.get("error")), str(result.get("message", "")))
    if "value" not in result:
        raise CallError("NoResult", f"{name}.{function} ended without a result")
    return result["value"]


def _kill(child):
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()
