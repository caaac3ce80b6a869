"""perf/kv_py_calls.py runs and prints every call of a request, Python beside the C API.
Usage: kv_py_calls_test.py KV_PY_CALLS PACT_KV_C_BENCH (PYTHONPATH: the built package)."""
import os
import re
import subprocess
import sys

os.environ.setdefault("UCX_NET_DEVICES", "lo")
os.environ.setdefault("PACT_NET_DEVICES", "lo")

script, bench = sys.argv[1], sys.argv[2]
failures = []
for shape in (["--shape", "16K:1"], ["--shape", "4K:3"]):
    proc = subprocess.run([sys.executable, script, *shape, "--requests", "200", "--c-bench", bench],
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout
    if proc.returncode != 0:
        failures.append(f"{shape}: exit status {proc.returncode}: {proc.stderr[-400:]}")
        continue
    for call in ("key", "blocks"):  # Python only
        if not re.search(rf"^{call} +\d+\.\d\d +-$", out, re.M):
            failures.append(f"{shape}: no Python-only row '{call}' in:\n{out}")
    for call in ("expect", "send", "commit", "sender", "request"):  # both
        if not re.search(rf"^{call} +\d+\.\d\d +\d+\.\d\d$", out, re.M):
            failures.append(f"{shape}: no row '{call}' with Python and C figures in:\n{out}")
    if "# C API:" in out:
        failures.append(f"{shape}: the C bench did not run: {out}")
# A missing C bench is reported, not fatal: the Python figures still come.
proc = subprocess.run([sys.executable, script, "--requests", "100", "--c-bench", "/nonexistent/pact-kv-c-bench"],
                      capture_output=True, text=True, timeout=120)
if proc.returncode != 0 or "# C API: /nonexistent/pact-kv-c-bench is not built" not in proc.stdout:
    failures.append(f"missing C bench: exit {proc.returncode}, output:\n{proc.stdout}{proc.stderr[-400:]}")
for f in failures:
    print("FAIL:", f)
print("ok: kv_py_calls" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
