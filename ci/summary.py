#!/usr/bin/env python3
"""Prints 'N passed, N failed[, N skipped]' over meson test logs (JSON lines), one line per suite
run first, then the total. Missing logs count as one failure each."""
import json
import os
import sys

passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except OSError:
        print(f"{path}: missing")
        failed += 1
        continue
    p = sum(r["result"] in ("OK", "EXPECTEDFAIL") for r in rows)
    s = sum(r["result"] == "SKIP" for r in rows)
    x = len(rows) - p - s
    print(f"{path}: {p} ok, {x} failed, {s} skipped")
    passed, failed, skipped = passed + p, failed + x, skipped + s
# Checks run outside meson (the fuzz targets, the UCX 1.22 build) report through the environment.
extra_p = int(os.environ.get("EXTRA_PASSED", "0") or 0)
extra_f = int(os.environ.get("EXTRA_FAILED", "0") or 0)
extra_s = int(os.environ.get("EXTRA_SKIPPED", "0") or 0)
if extra_p or extra_f or extra_s:
    print(f"other checks: {extra_p} ok, {extra_f} failed, {extra_s} skipped")
passed, failed, skipped = passed + extra_p, failed + extra_f, skipped + extra_s
print(f"{passed} passed, {failed} failed, {skipped} skipped")
