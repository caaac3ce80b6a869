#!/usr/bin/env python3
"""pact-perf mix --face nccl on loopback (no namespaces): every phase reports the streams it runs,
on the classes asked for, with the class profiles from PACT_TC_<n> (priority included); the table,
the JSON and the plot agree; both targets are judged; every byte is really checked (a byte flipped
at the sender fails the run naming the stream and the message) and a failed test() fails it too.
Bad arguments are refused with a message naming them. Times are reported, never asserted.

Usage: mix_nccl_test.py PACT_PERF"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from checks import fail, finish

perf = sys.argv[1]
env = dict(os.environ, UCX_NET_DEVICES="lo", PACT_NET_DEVICES="lo", UCX_TLS="tcp")
for k in list(env):
    if k.startswith("PACT_TC_") or k == "PACT_FAULT":
        env.pop(k)
# Small messages and short phases: this checks what is reported, not how fast.
SHORT = ["--face", "nccl", "--seconds", "0.4", "--bulk-bytes", "1M", "--bulk-window", "4",
         "--latency-bytes", "64K", "--timeout", "30"]
PROFILES = {"PACT_TC_1": "unordered,chunk=256K,priority=0", "PACT_TC_2": "priority=1"}


def run(args, extra_env=None, timeout=120):
    e = dict(env, **(extra_env or {}))
    p = subprocess.run([perf, "mix"] + args, env=e, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def table_rows(out):
    """{(phase, stream): [fields]} of the table lines."""
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 10 and f[0] in ("alone", "bulk", "mixed") and f[1] in ("latency", "bulk"):
            rows[(f[0], f[1])] = f
    return rows


with tempfile.TemporaryDirectory() as tmp:
    # Every phase, the JSON and the plot; the profiles as users set them.
    path, svg = os.path.join(tmp, "mix.json"), os.path.join(tmp, "mix.svg")
    rc, out = run(SHORT + ["--link-rate", "1gbit", "--json", path, "--plot", svg], PROFILES)
    if rc != 0 or not os.path.exists(path):
        fail("mix --face nccl exited %d" % rc, out)
    else:
        doc = json.load(open(path))
        rows = doc["results"]
        want = {("alone", "latency"), ("bulk", "bulk"), ("mixed", "latency"), ("mixed", "bulk")}
        got = [(r["phase"], r["stream"]) for r in rows]
        if set(got) != want or len(got) != len(want):
            fail("phases and streams %s, want %s" % (sorted(got), sorted(want)), out)
        table = table_rows(out)
        for r in rows:
            key = (r["phase"], r["stream"])
            want_class = 1 if r["stream"] == "bulk" else 2
            if r["class"] != want_class:
                fail("%s on class %s, want %s" % (key, r["class"], want_class))
            if not r["count"] > 0 or not r["goodput_gbit_s"] > 0 or not r["checked"] >= r["count"]:
                fail("%s: nothing measured or not every message checked: %s" % (key, r))
            if abs(r["goodput_gbit_s"] - 8 * r["goodput_gbps"]) > 1e-6 * max(1, r["goodput_gbit_s"]):
                fail("%s: Gbit/s and GB/s disagree: %s" % (key, r))
            if r["stream"] == "latency":
                if not 0 < r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"] <= r["max_ms"]:
                    fail("%s: percentiles out of order: %s" % (key, r))
            elif any(r[k] is not None for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")):
                fail("%s: the bulk stream has latency percentiles: %s" % (key, r))
            line = table.get(key)
            if (line is None or int(line[3]) != r["count"] or abs(float(line[4]) - r["goodput_gbit_s"]) > 0.0015
                    or (r["stream"] == "latency" and abs(float(line[8]) - r["p99_ms"]) > 0.0015)):
                fail("table and JSON differ for %s: %s" % (key, line), out)
        lat = {r["phase"]: r for r in rows if r["stream"] == "latency"}
        bulk = {r["phase"]: r for r in rows if r["stream"] == "bulk"}
        ratio = doc["ratios"].get("latency_p99_mixed_over_alone")
        if lat.keys() == {"alone", "mixed"} and (ratio is None or abs(ratio - lat["mixed"]["p99_ms"] / lat["alone"]["p99_ms"]) > 1e-9):
            fail("latency P99 mixed / alone is %s" % ratio, out)
        gp = doc["ratios"].get("bulk_goodput_over_link")
        if "bulk" in bulk and (gp is None or abs(gp - bulk["bulk"]["goodput_gbit_s"] / 1.0) > 1e-9):
            fail("bulk goodput / link rate is %s" % gp, out)
        for key, op, limit in (("latency_p99_mixed_over_alone", "<=", 1.5), ("bulk_goodput_over_link", ">=", 0.9)):
            t = doc["targets"].get(key, {})
            v = t.get("value")
            met = v is not None and (v <= limit if op == "<=" else v >= limit)
            if t.get("op") != op or t.get("limit") != limit or t.get("met") is not met:
                fail("target %s: %s" % (key, t), out)
            word = "met" if met else "MISSED"
            if not any(("target %s %.1f: %s" % (op, limit, word)) in l for l in out.splitlines()):
                fail("the target %s %s is not printed as %s" % (key, op, word), out)
        m = doc["meta"]
        if m["face"] != "nccl" or m["pass"] is not True or "every byte checked and right" not in out:
            fail("no pass verdict", out)
        if (m["bulk_profile_var"], m["bulk_profile"], m["latency_profile_var"], m["latency_profile"]) != \
                ("PACT_TC_1", PROFILES["PACT_TC_1"], "PACT_TC_2", PROFILES["PACT_TC_2"]):
            fail("the class profiles are not the environment's: %s" % m)
        # The plot: P50/P95/P99 bars of the latency stream in its two phases, the bulk goodput beside.
        if not os.path.exists(svg):
            fail("--plot wrote no SVG", out)
        else:
            root = ET.parse(svg).getroot()
            bars = [e for e in root.iter() if e.tag.endswith("rect") and e.get("class") == "bar"]
            notes = [e.text for e in root.iter() if e.tag.endswith("text") and e.get("class") == "note"]
            if len(bars) != 6 or sorted(notes) != sorted("%s %.3f" % (p, bulk[p]["goodput_gbit_s"]) for p in bulk):
                fail("plot: %d bars (want 6), notes %s" % (len(bars), notes))
        print("ok: mix --face nccl, 3 phases, 4 rows, profiles from PACT_TC_1/2; latency P99 mixed/alone "
              "%.2f, bulk %.2f Gbit/s on loopback" % (ratio, bulk["bulk"]["goodput_gbit_s"]))

    # One phase: only its rows; the ratios that need another phase say so.
    path = os.path.join(tmp, "mixed.json")
    rc, out = run(SHORT + ["--phases", "mixed", "--bulk-tc", "3", "--latency-tc", "4", "--json", path])
    if rc != 0:
        fail("--phases mixed exited %d" % rc, out)
    else:
        doc = json.load(open(path))
        got = sorted((r["phase"], r["stream"], r["class"]) for r in doc["results"])
        if got != [("mixed", "bulk", 3), ("mixed", "latency", 4)]:
            fail("--phases mixed --bulk-tc 3 --latency-tc 4: rows %s" % got, out)
        if doc["targets"]["latency_p99_mixed_over_alone"]["met"] is not None or "not measured" not in out:
            fail("a target without its phases was judged", out)
        print("ok: --phases mixed reports that phase only, on classes 3 and 4")

    # The byte check is real: a byte flipped at the sender, after its pattern, fails the run.
    for stream in ("bulk", "latency"):
        rc, out = run(SHORT + ["--inject-wrong-byte", stream])
        lines = [l for l in out.splitlines() if "verify: %s (class" % stream in l]
        if rc != 1 or not lines or "wrong bytes at offset" not in lines[0]:
            fail("a wrong byte in the %s stream was not caught (rc %d)" % (stream, rc), out)
        else:
            print("ok: " + lines[0].split("]: ", 1)[-1])
    # A request that fails in the plugin fails the run with the call that saw it.
    rc, out = run(SHORT, {"PACT_FAULT": "reject=0.2,seed=3"})
    lines = [l for l in out.splitlines() if "failed: ncclRemoteError" in l]
    if rc == 0 or not lines:
        fail("a refused piece (PACT_FAULT reject) did not fail the run (rc %d)" % rc, out)
    else:
        print("ok: " + lines[0].split("]: ", 1)[-1])

    # Bad arguments: refused, naming what was wrong.
    for args, words, want_rc in ((["--phases", "alone,isolated"], "'isolated'", 2),
                                 (["--kv-block", "8K"], "--kv-block applies to --face engine", 2),
                                 (["--bulk-bytes", "1001"], "'1001'", 2),
                                 (["--link-rate", "1G"], "'1G'", 2),
                                 (["--abi", "9"], "carries no traffic class", 1)):
        rc, out = run(["--face", "nccl", "--seconds", "0.2"] + args)
        if rc != want_rc or words not in out:
            fail("%s: rc %d, want %d and a message naming %s" % (args, rc, want_rc, words), out)
    rc, out = run(["--bulk-tc", "1", "--seconds", "0.2"])
    if rc != 2 or "--bulk-tc applies to --face nccl" not in out:
        fail("--bulk-tc under --face engine: rc %d" % rc, out)
    print("ok: bad arguments refused")

finish("pact-perf mix --face nccl")
