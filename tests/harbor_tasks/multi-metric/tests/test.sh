#!/bin/bash
# Several named metrics: `reward` (all checks), `correctness` and `docstring`.
python3 - <<'PY'
import json, importlib.util
m = {"correctness": 0.0, "docstring": 0.0}
try:
    spec = importlib.util.spec_from_file_location("fib", "/app/fib.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cases = [(0, 0), (1, 1), (10, 55), (20, 6765)]
    m["correctness"] = sum(mod.fib(n) == v for n, v in cases) / len(cases)
    m["docstring"] = 1.0 if (mod.fib.__doc__ or "").strip() else 0.0
except Exception as e:
    print("error:", e)
m["reward"] = 1.0 if m["correctness"] == 1.0 and m["docstring"] == 1.0 else 0.0
json.dump(m, open("/logs/verifier/reward.json", "w"))
PY
