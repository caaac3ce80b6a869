#!/usr/bin/env python3
"""pact-perf mix on loopback: every phase runs every stream it names, the table and the JSON agree,
the KV ratios are reported, and the byte check is real (corruption the class does not verify fails
the run; the same corruption under verify=crc32c with retries is repaired). Bad arguments are
refused with a message naming them. Times are reported, never asserted.

Usage: mix_test.py PACT_PERF"""
import json
import os
import subprocess
import sys
import tempfile

from checks import fail, finish

perf = sys.argv[1]
env = dict(os.environ, UCX_NET_DEVICES="lo", PACT_NET_DEVICES="lo")
for k in ("PACT_TC_KV", "PACT_TC_A2A", "PACT_TC_CKPT", "PACT_TC_DEFAULT", "PACT_FAULT"):
    env.pop(k, None)
SHORT = ["--seconds", "0.4", "--ckpt-bytes", "2M", "--kv-interval-us", "500"]


def run(args, extra_env=None, timeout=120):
    e = dict(env, **(extra_env or {}))
    p = subprocess.run([perf, "mix"] + args, env=e, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


with tempfile.TemporaryDirectory() as tmp:
    # Every phase, both ways of reporting.
    path = os.path.join(tmp, "mix.json")
    rc, out = run(SHORT + ["--json", path])
    if rc != 0:
        fail("mix exited %d" % rc, out)
    else:
        doc = json.load(open(path))
        rows = doc["results"]
        want = {("alone", "kv"), ("isolated", "kv"), ("isolated", "a2a"), ("isolated", "ckpt"),
                ("shared", "kv"), ("shared", "a2a"), ("shared", "ckpt")}
        got = {(r["phase"], r["stream"]) for r in rows}
        if got != want:
            fail("phases and streams %s, want %s" % (sorted(got), sorted(want)), out)
        for r in rows:
            want_class = "DEFAULT" if r["phase"] == "shared" else r["stream"].upper()
            if r["class"] != want_class:
                fail("%s %s on class %s, want %s" % (r["phase"], r["stream"], r["class"], want_class))
            if not r["count"] > 0 or not r["goodput_gbps"] > 0:
                fail("%s %s: nothing measured: %s" % (r["phase"], r["stream"], r))
            if not 0 < r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]:
                fail("%s %s: percentiles out of order: %s" % (r["phase"], r["stream"], r))
            # The table line says the same as the JSON row.
            line = [l.split() for l in out.splitlines()
                    if l.split()[:3] == [r["phase"], r["stream"], r["class"]]]
            if len(line) != 1 or int(line[0][3]) != r["count"] or abs(float(line[0][7]) - r["p99_ms"]) > 0.0015:
                fail("table and JSON differ for %s %s" % (r["phase"], r["stream"]), out)
        for k in ("kv_p99_isolated_over_alone", "kv_p99_shared_over_alone"):
            if not doc["ratios"].get(k, 0) > 0:
                fail("ratio %s missing" % k, out)
        if doc["meta"]["pass"] is not True or "every transfer committed" not in out:
            fail("no pass verdict", out)
        if doc["meta"]["PACT_TC_CKPT"] != "credits=32M":
            fail("the default CKPT profile was not applied: %s" % doc["meta"]["PACT_TC_CKPT"])
        print("ok: mix, 3 phases, 7 rows; kv P99 isolated/alone %.2f, shared/alone %.2f" %
              (doc["ratios"]["kv_p99_isolated_over_alone"], doc["ratios"]["kv_p99_shared_over_alone"]))

    # The user's profile wins over the bench's default.
    path = os.path.join(tmp, "user.json")
    rc, out = run(["--seconds", "0.3", "--phases", "isolated", "--ckpt-bytes", "1M", "--json", path],
                  {"PACT_TC_CKPT": "credits=8M"})
    if rc != 0 or json.load(open(path))["meta"]["PACT_TC_CKPT"] != "credits=8M":
        fail("PACT_TC_CKPT set by the user was not kept", out)
    else:
        print("ok: the user's PACT_TC_CKPT is kept")

    # Corrupted pieces on a class that does not verify: the commit hook's check catches them.
    rc, out = run(["--seconds", "0.4", "--phases", "alone"],
                  {"PACT_FAULT": "corrupt=0.03,seed=3", "PACT_TC_KV": "verify=none"})
    if rc != 1 or "wrong bytes" not in out:
        fail("corruption without verify was not caught (rc %d)" % rc, out)
    else:
        print("ok: corruption without verify fails the run: " +
              [l for l in out.splitlines() if "FAILED" in l][0].strip())
    # The same corruption where the class verifies and retries: repaired, nothing wrong.
    rc, out = run(["--seconds", "0.4", "--phases", "alone"],
                  {"PACT_FAULT": "corrupt=0.03,seed=3", "PACT_TC_KV": "verify=crc32c,retries=10"})
    if rc != 0:
        fail("verify=crc32c did not repair the corruption (rc %d)" % rc, out)
    else:
        print("ok: verify=crc32c,retries=10 repairs it")

    # Bad arguments: refused, naming what was wrong.
    for args, words in ((["--phases", "alone,bogus"], "'bogus'"), (["--kv-block", "7"], "'7'"),
                        (["--ckpt-bytes", "lots"], "'lots'")):
        rc, out = run(args)
        if rc != 2 or words not in out:
            fail("%s: rc %d, want 2 and a message naming %s" % (args, rc, words), out)
    print("ok: bad arguments refused")

finish("pact-perf mix")
