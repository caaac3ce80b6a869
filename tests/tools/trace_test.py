#!/usr/bin/env python3
"""PACT_TRACE_FILE on known runs of pact-perf mix (KV alone): the file is Trace Event JSON; every
committed transfer of the receiver is one async track whose phases come in the state machine's
order, each starting where the one before ended, so they add up to the transfer's time; the ids
in the args are the run's (KV's stream in the request id, the engines' names, the roles). With 16
requests open against a credit budget of one, "waiting for credit" is the longest phase; with 4
open and room for 16 it is not. An abort is an instant event naming why; an unwritable path is a warning, not a failure.

Usage: trace_test.py PACT_PERF"""
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

from checks import fail, finish

perf = sys.argv[1]
env = dict(os.environ, UCX_NET_DEVICES="lo", PACT_NET_DEVICES="lo")
for k in ("PACT_TC_KV", "PACT_FAULT", "PACT_TRACE_FILE", "PACT_TRACE_EVENTS"):
    env.pop(k, None)
RECEIVER_ORDER = ["waiting for credit", "advertised, waiting for the sender", "posted", "on the wire",
                  "landed to verified", "verified to committed", "committed, held"]


def mix(path, profile, extra_env=None, seconds="0.5", window="4"):
    p = subprocess.run([perf, "mix", "--seconds", seconds, "--phases", "alone", "--kv-interval-us", "0",
                        "--kv-window", window, "--kv-profile", profile],
                       env=dict(env, PACT_TRACE_FILE=path, **(extra_env or {})),
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def tracks(path):
    """{async id: [events]} of the b/e/n events, and the metadata events."""
    doc = json.load(open(path))
    by, meta = collections.defaultdict(list), []
    for e in doc["traceEvents"]:
        (meta if e["ph"] == "M" else by[e["id"]]).append(e)
    return by, meta


def receiver_phases(by):
    """For each receiver track: [(phase, begin, end)], checked to be well formed."""
    out = []
    for tid, evs in by.items():
        spans, opened = [], None
        for e in evs:
            if e["ph"] == "b":
                if opened is not None:
                    raise ValueError("track %s: %s begins inside %s" % (tid, e["name"], opened["name"]))
                opened = e
            elif e["ph"] == "e":
                if opened is None or opened["name"] != e["name"]:
                    raise ValueError("track %s: %s ends without its begin" % (tid, e["name"]))
                spans.append((e["name"], opened["ts"], e["ts"], opened["args"]))
                opened = None
        if spans and spans[0][3]["role"] == "receiver":
            out.append(spans)
    return out


with tempfile.TemporaryDirectory() as tmp:
    medians = {}
    # The stall: 16 requests open against a budget of one (UCX 1.22 finishes a request so fast
    # that 4 open hardly wait). The control: 4 open with room for 16.
    for profile, window in (("credits=512K", "16"), ("credits=8M", "4")):
        path = os.path.join(tmp, "trace-%s.json" % profile.replace("=", ""))
        rc, out = mix(path, profile, window=window)
        if rc != 0:
            fail("mix with %s exited %d" % (profile, rc), out)
            continue
        by, meta = tracks(path)
        names = {m["args"]["name"] for m in meta if m["name"] == "thread_name"}
        if names != {"engine mix-rx", "engine mix-tx"}:
            fail("tracks named %s, want the two engines" % sorted(names))
        count = int([l.split() for l in out.splitlines() if l.startswith("alone ")][0][3])
        try:
            rx = receiver_phases(by)
        except ValueError as e:
            fail("%s: %s" % (profile, e))
            continue
        committed = [t for t in rx if t[-1][0] == "committed, held"]
        if len(committed) < count:
            fail("%s: %d committed receiver tracks, the run reported %d" % (profile, len(committed), count))
        durations = collections.defaultdict(list)
        for t in committed:
            phases = [s[0] for s in t]
            if phases != RECEIVER_ORDER:
                fail("%s: phases %s, want %s" % (profile, phases, RECEIVER_ORDER))
                break
            if any(abs(t[i][2] - t[i + 1][1]) > 1e-3 for i in range(len(t) - 1)):
                fail("%s: a phase does not start where the one before ended: %s" % (profile, t))
                break
            total = t[-1][2] - t[0][1]
            if abs(sum(s[2] - s[1] for s in t) - total) > 1e-2:
                fail("%s: phases do not add up to the transfer's time" % profile)
                break
            a = t[0][3]
            if a["request_id"] >> 56 != 1 or a["engine"] != "mix-rx" or a["model_epoch"] != 0:
                fail("%s: args %s are not a KV request of mix-rx" % (profile, a))
                break
            for name, b, e, _ in t:
                durations[name].append(e - b)
        medians[profile] = {n: statistics.median(v) for n, v in durations.items() if n != "committed, held"}
        longest = max(medians[profile], key=medians[profile].get)
        print("ok: %s: %d committed transfers, phases in order and adding up; longest median phase: %s (%.0f us)" %
              (profile, len(committed), longest, medians[profile][longest]), flush=True)
    if "credits=512K" in medians and max(medians["credits=512K"], key=medians["credits=512K"].get) != "waiting for credit":
        fail("a credit budget of one request: the longest phase is not waiting for credit: %s" % medians["credits=512K"])
    if "credits=8M" in medians and max(medians["credits=8M"], key=medians["credits=8M"].get) == "waiting for credit":
        fail("room for 16 requests: waiting for credit is still the longest phase: %s" % medians["credits=8M"])

    # An abort: corrupted pieces under verify, no retries. The run fails; the trace says why.
    path = os.path.join(tmp, "abort.json")
    rc, out = mix(path, "credits=8M,verify=crc32c,retries=0", {"PACT_FAULT": "corrupt=0.05,seed=5"}, "0.4")
    if rc != 1:
        fail("corruption with retries=0: mix exited %d, want 1" % rc, out)
    else:
        by, _ = tracks(path)
        aborts = [e for evs in by.values() for e in evs if e["ph"] == "n"]
        if not aborts or not all(e["name"].startswith("abort: ") for e in aborts):
            fail("no abort instant event naming why: %s" % aborts[:3])
        else:
            print("ok: %d aborts in the trace, e.g. '%s'" % (len(aborts), aborts[0]["name"]))

    # An unwritable path: a warning naming it; the run itself passes.
    rc, out = mix("/nonexistent-dir/trace.json", "credits=8M", seconds="0.2")
    if rc != 0 or "PACT_TRACE_FILE=/nonexistent-dir/trace.json" not in out:
        fail("an unwritable PACT_TRACE_FILE: rc %d, want 0 and a warning naming it" % rc, out)
    else:
        print("ok: an unwritable PACT_TRACE_FILE is a warning")

finish("trace")
