#!/usr/bin/env python3
"""PACT_TRACE_FILE on known runs of pact-perf mix (KV alone): the file is Trace Event JSON; every
committed transfer of the receiver is one async track whose phases come in the state machine's
order, each starting where the one before ended, so they add up to the transfer's time; the ids
in the args are the run's (KV's stream in the request id, the engines' names, the roles). With 16
requests of 2 MiB open against a credit budget of one, "waiting for credit" is the longest phase;
with 4 open and room for 16 it is not. An abort is an instant event naming why; an unwritable path is a warning, not a failure.

The plugin's requests: pact-perf p2p's processes each write their own file (%p), with isend and
irecv spans on their lanes' tracks (two lanes for an unordered class); plugin_probe writes the
timeline on demand (pact_plugin_trace_write) and at exit.

Usage: trace_test.py PACT_PERF PLUGIN_PROBE PLUGIN"""
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

from checks import fail, finish

perf, probe, plugin = sys.argv[1:4]
env = dict(os.environ, UCX_NET_DEVICES="lo", PACT_NET_DEVICES="lo")
for k in ("PACT_TC_KV", "PACT_FAULT", "PACT_TRACE_FILE", "PACT_TRACE_EVENTS"):
    env.pop(k, None)
RECEIVER_ORDER = ["waiting for credit", "advertised, waiting for the sender", "posted", "on the wire",
                  "landed to verified", "verified to committed", "committed, held"]


def mix(path, profile, extra_env=None, seconds="0.5", window="4", block="64K"):
    p = subprocess.run([perf, "mix", "--seconds", seconds, "--phases", "alone", "--kv-interval-us", "0",
                        "--kv-window", window, "--kv-block", block, "--kv-profile", profile],
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
    # The stall: 16 requests of 2 MiB open against a budget of one. The control: 4 open with
    # room for 16. With 512 KiB requests the engine finished each so fast that the bench's own
    # loop (one request retired at a time) set the pace and the requests hardly queued for credit
    # in some runs (2 of 7, on both UCX builds); at 2 MiB the transfers are the bottleneck.
    for profile, window in (("credits=2M", "16"), ("credits=32M", "4")):
        path = os.path.join(tmp, "trace-%s.json" % profile.replace("=", ""))
        rc, out = mix(path, profile, window=window, block="256K")
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
    if "credits=2M" in medians and max(medians["credits=2M"], key=medians["credits=2M"].get) != "waiting for credit":
        fail("a credit budget of one request: the longest phase is not waiting for credit: %s" % medians["credits=2M"])
    if "credits=32M" in medians and max(medians["credits=32M"], key=medians["credits=32M"].get) == "waiting for credit":
        fail("room for 16 requests: waiting for credit is still the longest phase: %s" % medians["credits=32M"])

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

    # The plugin's requests (plugin/nccl/timeline.h): pact-perf p2p's two processes write a file
    # each (%p), the receiver's irecv spans and the sender's isend spans, well formed, on the
    # track of their lane, with the message's bytes.
    def plugin_spans(path):
        by, meta = tracks(path)
        lanes = {m["tid"]: m["args"]["name"] for m in meta if m["name"] == "thread_name"}
        spans = []
        for evs in by.values():
            b = [e for e in evs if e["ph"] == "b"]
            e = [x for x in evs if x["ph"] == "e"]
            if len(b) != 1 or len(e) != 1 or e[0]["ts"] < b[0]["ts"] or b[0]["cat"] != "plugin":
                raise ValueError("a request track is not one begin and one later end: %s" % evs)
            spans.append((b[0]["name"], lanes.get(b[0]["tid"], "?"), b[0]["args"], int(b[0]["id"], 16) & ((1 << 40) - 1)))
        return spans

    sizes = {65536, 1048576}

    def lanes_of(spans):
        """{request serial: (its 'lanes' arg, the lane tracks its spans are on)}."""
        out = {}
        for _, lane, a, serial in spans:
            out.setdefault(serial, (a["lanes"], set()))[1].add(lane)
        return out

    for tc, want_lanes in (("", {"plugin lane 0"}), ("unordered,lanes=2,chunk=256K", {"plugin lane 0", "plugin lane 1"})):
        pattern = os.path.join(tmp, "p2p-%s-%%p.json" % ("two" if tc else "one"))
        extra = {"PACT_TRACE_FILE": pattern, "UCX_TLS": "tcp"}
        if tc:
            extra["PACT_TC_DEFAULT"] = tc
        p = subprocess.run([perf, "p2p", "--no-lat", "--min-size", "64K", "--max-size", "1M", "--factor", "16"],
                           env=dict(env, **extra), capture_output=True, text=True, timeout=120)
        files = sorted(f for f in os.listdir(tmp) if f.startswith("p2p-%s-" % ("two" if tc else "one")))
        if p.returncode != 0 or len(files) != 2:
            fail("p2p with PACT_TRACE_FILE=%s: exit %d, files %s (want one per process)" % (pattern, p.returncode, files),
                 p.stdout + p.stderr)
            continue
        try:
            per = {f: plugin_spans(os.path.join(tmp, f)) for f in files}
        except ValueError as e:
            fail("p2p %s: %s" % (tc or "ordered", e))
            continue
        kinds = sorted({n for s in per.values() for n, _, _, _ in s})
        both = all(len({n for n, _, _, _ in s}) >= 1 for s in per.values())
        sends = [s for v in per.values() for s in v if s[0] == "isend" and s[2]["bytes"] in sizes]
        recvs = [s for v in per.values() for s in v if s[0] == "irecv" and s[2]["bytes"] in sizes]
        tracks_seen = {lane for n, lane, a, _ in sends}
        if kinds != ["irecv", "isend"] or not both or len(sends) < 20 or len(recvs) < 20:
            fail("p2p %s: span kinds %s, %d isend and %d irecv of the measured sizes" % (tc or "ordered", kinds, len(sends), len(recvs)))
        elif not want_lanes <= tracks_seen:
            fail("p2p %s: the sender's spans are on %s, want %s" % (tc or "ordered", sorted(tracks_seen), sorted(want_lanes)))
        elif any(len(tracks) != n for n, tracks in lanes_of(sends).values()):
            fail("p2p %s: a request's spans are on a number of lane tracks other than its 'lanes'" % (tc or "ordered"))
        elif tc and not all(a["pieces"] == 4 for _, _, a, _ in sends if a["bytes"] == 1048576):
            fail("p2p %s: a 1 MiB send not in four 256 KiB pieces" % tc)
        elif any(a["result"] != 0 or a["pieces"] < 1 or not a["peer"] for _, _, a, _ in sends + recvs):
            fail("p2p %s: a span with a failed result, no piece or no peer" % (tc or "ordered"))
        else:
            print("ok: p2p %s: %d isend and %d irecv spans in two files (one per process), on %s" %
                  (tc or "ordered", len(sends), len(recvs), ", ".join(sorted(tracks_seen))), flush=True)

    # On demand and at exit: the probe writes the timeline while its comms are open, then exits
    # with one open: both files hold the message's isend and irecv; without PACT_TRACE_FILE the
    # call fails.
    now_path, exit_path = os.path.join(tmp, "now.json"), os.path.join(tmp, "exit.json")
    p = subprocess.run([probe, plugin], env=dict(env, UCX_TLS="tcp", PACT_TRACE_FILE=exit_path, PROBE_TRACE_WRITE=now_path),
                       capture_output=True, text=True, timeout=120)
    got = {}
    for name, path in (("on demand", now_path), ("at exit", exit_path)):
        try:
            got[name] = sorted((n, a["bytes"]) for n, _, a, _ in plugin_spans(path))
        except (OSError, ValueError) as e:
            got[name] = str(e)
    want = [("irecv", 4096), ("isend", 4096)]
    if p.returncode != 0 or "pact_plugin_trace_write: 0" not in p.stdout or got != {"on demand": want, "at exit": want}:
        fail("pact_plugin_trace_write and the write at exit: exit %d, %s" % (p.returncode, got), p.stdout + p.stderr)
    else:
        print("ok: the timeline written on demand (comms open) and at exit, each with the message's isend and irecv", flush=True)
    p = subprocess.run([probe, plugin], env=dict(env, UCX_TLS="tcp", PROBE_TRACE_WRITE=now_path + ".off"),
                       capture_output=True, text=True, timeout=120)
    if "pact_plugin_trace_write: -1" not in p.stdout or "PACT_TRACE_FILE is not set" not in p.stdout + p.stderr:
        fail("pact_plugin_trace_write without PACT_TRACE_FILE did not fail naming it", p.stdout + p.stderr)

finish("trace")
