#!/usr/bin/env python3
"""Prints 'N passed, N failed[, N skipped]' over meson test logs (JSON lines), one line per suite
run first, then the total. Missing logs count as one failure each."""
import json
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
print(f"{passed} passed, {failed} failed, {skipped} skipped")
