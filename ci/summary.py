#!/usr/bin/env python3
"""Prints 'N passed, N failed[, N skipped]' over meson test logs (JSON lines) and pytest JUnit
reports (*.xml: the cases of the Python suite, which meson runs as one test), one line per file
first, then the total. Missing logs count as one failure each."""
import json
import os
import sys
import xml.etree.ElementTree as ET


def junit(path):
    """(ok, failed, skipped) cases of a pytest --junitxml report."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = sum(int(s.get("tests", 0)) for s in suites)
    bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skip = sum(int(s.get("skipped", 0)) for s in suites)
    return total - bad - skip, bad, skip


passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        if path.endswith(".xml"):
            p, x, s = junit(path)
        else:
            with open(path) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            p = sum(r["result"] in ("OK", "EXPECTEDFAIL") for r in rows)
            s = sum(r["result"] == "SKIP" for r in rows)
            x = len(rows) - p - s
    except (OSError, ET.ParseError):
        print(f"{path}: missing")
        failed += 1
        continue
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
