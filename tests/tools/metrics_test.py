#!/usr/bin/env python3
"""PACT_METRICS_PORT and PACT_METRICS_FILE on a real process (pact-perf soak: two engines and the
plugin): the endpoint's text passes a strict reader of Prometheus' format and its counters move
between scrapes; a real Prometheus (Debian's package; skipped with the reason where it is not
installed) scrapes it and answers a query for pact's counters; the file is rewritten while the
process runs and stays whole; a port in use is a warning and the job goes on; a malformed value
is refused naming the variable. Every wait is bounded.

The plugin's counters follow a known host's calls (plugin_probe, snapshots by
pact_plugin_metrics_write).

Usage: metrics_test.py PACT_PERF PACT_INFO PLUGIN_PROBE PLUGIN"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from checks import fail, finish, skip

perf, info, probe, plugin = sys.argv[1:5]
env = dict(os.environ, UCX_NET_DEVICES="lo", PACT_NET_DEVICES="lo")
for k in list(env):
    if k.startswith("PACT_METRICS") or k == "PACT_FAULT":
        env.pop(k)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE = re.compile(r"(%s)(\{[a-zA-Z_][a-zA-Z0-9_]*=%s(?:,[a-zA-Z_][a-zA-Z0-9_]*=%s)*\})? (-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)$"
                    % (NAME, LABEL_VALUE, LABEL_VALUE))
HELP = re.compile(r"# HELP (%s) (?:[^\\\n]|\\\\|\\n)*$" % NAME)
TYPE = re.compile(r"# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % NAME)


def parse_strict(text):
    """{series: value}; raises ValueError naming the first line that breaks the format."""
    if text and not text.endswith("\n"):
        raise ValueError("no newline at the end")
    out, helped, typed, closed, current = {}, set(), {}, set(), None
    for n, line in enumerate(text.splitlines(), 1):
        m = HELP.match(line) or TYPE.match(line) or SAMPLE.match(line)
        if not m:
            raise ValueError("line %d is not HELP, TYPE or a sample: %r" % (n, line))
        fam = m.group(1)
        if m.re is HELP:
            if fam in helped:
                raise ValueError("line %d: a second HELP for %s" % (n, fam))
            helped.add(fam)
        elif m.re is TYPE:
            if fam in typed:
                raise ValueError("line %d: a second TYPE for %s" % (n, fam))
            typed[fam] = m.group(2)
            if (m.group(2) == "counter") != fam.endswith("_total"):
                raise ValueError("line %d: %s: counters, and only they, end in _total" % (n, fam))
        else:
            if fam not in typed:
                raise ValueError("line %d: a sample of %s before its TYPE" % (n, fam))
            key = fam + (m.group(2) or "")
            if key in out:
                raise ValueError("line %d: series %s twice" % (n, key))
            out[key] = float(m.group(3))
        if fam != current:
            if fam in closed:
                raise ValueError("line %d: family %s is split" % (n, fam))
            if current:
                closed.add(current)
            current = fam
    return out


def get(url, timeout=2):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def wait_for(what, fn, seconds):
    end = time.monotonic() + seconds
    last = None
    while time.monotonic() < end:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.1)
    fail("%s: not within %d s (%s)" % (what, seconds, last))
    return None


def engine_committed(samples):
    return {k: v for k, v in samples.items() if k.startswith("pact_engine_committed_total{")}


with tempfile.TemporaryDirectory() as tmp:
    port = free_port()
    mfile = os.path.join(tmp, "pact.prom")
    soak = subprocess.Popen([perf, "soak", "--seconds", "12", "--interval", "2"],
                            env=dict(env, PACT_METRICS_PORT=str(port), PACT_METRICS_FILE=mfile,
                                     PACT_METRICS_INTERVAL="200ms"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    prom = None
    try:
        url = "http://127.0.0.1:%d/metrics" % port
        # The engines (libpact.so) and the plugin's comms (libnccl-net-pact.so, dlopened): two copies
        # of pact in one process, one registry and one endpoint (telemetry/shared.h).
        def engines_and_comms(s):
            comms = [k for k in s if k.startswith("pact_comm_messages_total{")]
            return s if len(engine_committed(s)) == 2 and len(comms) == 2 else None
        first = wait_for("the endpoint answering with both engines' counters and the plugin's comms",
                         lambda: engines_and_comms(parse_strict(get(url)[2])), 20)
        if first:
            status, ctype, _ = get(url)
            if status != 200 or not ctype.startswith("text/plain; version=0.0.4"):
                fail("GET /metrics: %s %s" % (status, ctype))
            labels = sorted(engine_committed(first))
            if labels != ['pact_engine_committed_total{engine="soak-rx"}', 'pact_engine_committed_total{engine="soak-tx"}']:
                fail("engine series %s" % labels)
            copies = sorted(re.search(r'copy="([^"]*)"', k).group(1) for k in first
                            if k.startswith("pact_process_sessions{"))
            if copies != ["libnccl-net-pact.so", "libpact.so.0"]:
                fail("the process sets of the two copies of pact: %s" % copies)
            else:
                print("ok: one endpoint serves both copies of pact: " + ", ".join(copies))
            for fam in ("pact_engine_bytes_sent_total", "pact_engine_open_registrations", "pact_device_comms",
                        "pact_netdev_rx_bytes_total"):
                if not any(k.startswith(fam + "{") for k in first):
                    fail("no %s in the exposition" % fam)
            lo = 'pact_netdev_tx_bytes_total{device="lo"}'
            if lo in first and not wait_for("the lo interface's tx_bytes moving between scrapes",
                                            lambda: parse_strict(get(url)[2]).get(lo, 0) > first[lo], 10):
                pass
            elif lo not in first:
                fail("no %s beside pact's counters" % lo)
            moved = wait_for("pact_engine_committed_total moving between scrapes",
                             lambda: sum(engine_committed(parse_strict(get(url)[2])).values()) > sum(engine_committed(first).values()), 10)
            if moved:
                print("ok: GET /metrics parses strictly; %d series; the committed counters move" % len(first))
            # pact-info --metrics reads the same endpoint as a table.
            p = subprocess.run([info, "--metrics", "http://127.0.0.1:%d" % port], env=env,
                               capture_output=True, text=True, timeout=30)
            if p.returncode != 0 or '\nengine{engine="soak-rx"}\n' not in p.stdout or not re.search(r"\n  committed_total +[0-9]+", p.stdout):
                fail("pact-info --metrics URL: rc %d" % p.returncode, p.stdout + p.stderr)
            else:
                print("ok: pact-info --metrics URL: " + p.stdout.splitlines()[0])
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/nothing" % port, timeout=2)
                fail("GET /nothing did not answer 404")
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    fail("GET /nothing: %d, want 404" % e.code)

        # The file, rewritten every 200 ms while the process runs: whole each time.
        seen = set()
        def file_changes():
            text = open(mfile).read()
            parse_strict(text)
            seen.add(text)
            return len(seen) >= 3
        if wait_for("PACT_METRICS_FILE rewritten (3 distinct whole versions)", file_changes, 10):
            print("ok: PACT_METRICS_FILE rewritten while running, every version parses")

        # A real Prometheus scraping the endpoint.
        exe = shutil.which("prometheus")
        if exe is None:
            skip("real Prometheus scrape: no prometheus on PATH (ci/setup.sh installs Debian's)")
        elif first:
            web = free_port()
            cfg = os.path.join(tmp, "prometheus.yml")
            with open(cfg, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                        "  - job_name: pact\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % port)
            prom = subprocess.Popen([exe, "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
                                     "--web.listen-address=127.0.0.1:%d" % web],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            api = "http://127.0.0.1:%d/api/v1/query?query=" % web

            def query(q):
                d = json.loads(get(api + urllib.request.quote(q))[2])
                return d["data"]["result"] if d.get("status") == "success" else []
            up = wait_for("Prometheus scraping the endpoint (up == 1)",
                          lambda: any(r["value"][1] == "1" for r in query('up{job="pact"}')), 30)
            res = up and wait_for("Prometheus answering pact_engine_committed_total for both engines",
                                  lambda: (lambda r: r if len(r) == 2 and all(float(x["value"][1]) > 0 for x in r) else None)(
                                      query("pact_engine_committed_total")), 15)
            if res:
                print("ok: a real Prometheus scraped it: " + ", ".join(
                    "%s=%s" % (r["metric"]["engine"], r["value"][1]) for r in res))
            # The labels aggregate as a user would: one sum per peer host of the plugin's comms.
            by_peer = wait_for("Prometheus answering sum by (peer, direction) (pact_comm_messages_total)",
                               lambda: query("sum by (peer, direction) (pact_comm_messages_total)") or None, 15)
            if by_peer and sorted(r["metric"].get("peer") for r in by_peer) != ["127.0.0.1", "127.0.0.1"]:
                fail("sum by (peer, direction): %s" % by_peer)
            elif by_peer:
                print("ok: sum by (peer, direction) of the comms' messages: " + ", ".join(
                    "%s %s=%s" % (r["metric"]["peer"], r["metric"]["direction"], r["value"][1]) for r in by_peer))
    finally:
        if prom:
            prom.send_signal(signal.SIGTERM)
            try:
                prom.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prom.kill()
        try:
            out, _ = soak.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            soak.kill()
            out, _ = soak.communicate()
    if soak.returncode != 0 or "PASS" not in out:
        fail("soak with metrics on exited %s" % soak.returncode, out)
    if "cannot listen" in out:
        fail("a second exporter in the process: the copies of pact did not share one", out)
    try:
        parse_strict(open(mfile).read())
        print("ok: the file is whole after the process left")
    except (OSError, ValueError) as e:
        fail("the file after exit: %s" % e)

    p = subprocess.run([info, "--metrics", mfile], env=env, capture_output=True, text=True, timeout=30)
    if p.returncode != 0 or not p.stdout.startswith("metrics from " + mfile):
        fail("pact-info --metrics FILE: rc %d" % p.returncode, p.stdout + p.stderr)
    for source, words in (("http://127.0.0.1:%d" % free_port(), "cannot connect"), (os.path.join(tmp, "none"), "cannot read"),
                          ("http://nocolon", "give http://HOST:PORT")):
        p = subprocess.run([info, "--metrics", source], env=env, capture_output=True, text=True, timeout=30)
        if p.returncode != 2 or words not in p.stderr:
            fail("pact-info --metrics %s: rc %d, want 2 and '%s'" % (source, p.returncode, words), p.stdout + p.stderr)
    print("ok: pact-info --metrics reads the file; a dead endpoint or a missing file is an error naming it")

    # A port in use: a warning naming it; the job goes on.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    busy = s.getsockname()[1]
    p = subprocess.run([perf, "soak", "--seconds", "1", "--interval", "1"], env=dict(env, PACT_METRICS_PORT=str(busy)),
                       capture_output=True, text=True, timeout=60)
    s.close()
    if p.returncode != 0 or "127.0.0.1:%d: cannot listen there" % busy not in p.stdout + p.stderr:
        fail("a port in use: rc %d, want 0 and a warning naming it" % p.returncode, p.stdout + p.stderr)
    else:
        print("ok: a port in use is a warning; the soak passed")

    # Malformed values are refused naming the variable.
    for var, value in (("PACT_METRICS_PORT", "abc"), ("PACT_METRICS_PORT", "10.0.0.1:99999"),
                       ("PACT_METRICS_INTERVAL", "soon")):
        p = subprocess.run([info], env=dict(env, **{var: value}), capture_output=True, text=True, timeout=30)
        if p.returncode != 2 or var not in p.stdout + p.stderr:
            fail("%s=%s: rc %d, want 2 and a message naming it" % (var, value, p.returncode), p.stdout + p.stderr)
    print("ok: malformed values refused")

# The plugin's device, process and comm counters move with what a host does (plugin_probe: one
# loopback pair, 3 registrations, one message, then the send comm closed), read in snapshots it
# asks for with pact_plugin_metrics_write: 2 requests taken while the message's send and receive
# are posted, none once they ended; with both comms open, 2 comms, 3 registrations, an
# endpoint, a session and 2 channels, one message, one piece and its 4096 bytes on each comm and
# in the class DEFAULT each way; after the send comm's close, 1 comm, 1 registration, fewer
# endpoints, and the send comm's counters still in its series (a counter never goes down). With
# PACT_METRICS_PER_COMM each comm has its series (comm="ID"), and the closed one's are comm="closed".
with tempfile.TemporaryDirectory() as tmp:
    snap = os.path.join(tmp, "snap")
    p = subprocess.run([probe, plugin], env=dict(env, UCX_TLS="tcp", PROBE_METRICS_WRITE=snap),
                       capture_output=True, text=True, timeout=120)
    try:
        posted, opened, closed = (parse_strict(open(snap + s).read()) for s in (".posted", ".open", ".closed"))
    except OSError as e:
        opened = closed = None
        fail("plugin_probe's snapshots: %s (exit %d)" % (e, p.returncode), p.stdout + p.stderr)
    if opened is not None:
        def one(d, family):
            v = [x for k, x in d.items() if k.startswith(family + "{")]
            return v[0] if len(v) == 1 else None
        def every(d, family):
            return sorted(x for k, x in d.items() if k.startswith(family + "{"))
        errors = []
        want_open = {"pact_device_comms": 2, "pact_device_registrations": 3, "pact_process_channels": 2}
        errors += ["%s = %s with both comms open, want %s" % (f, one(opened, f), v) for f, v in want_open.items() if one(opened, f) != v]
        if not (one(opened, "pact_device_endpoints") or 0) >= 1: errors.append("no endpoint while the comms are open")
        if one(posted, "pact_device_requests") != 2 or one(opened, "pact_device_requests") != 0:
            errors.append("pact_device_requests %s with the send and receive posted, %s after both ended; want 2, 0" % (
                one(posted, "pact_device_requests"), one(opened, "pact_device_requests")))
        if not (one(opened, "pact_process_sessions") or 0) >= 1: errors.append("no session while the comms are open")
        for fam in ("pact_comm_messages_total", "pact_comm_pieces_total"):
            if every(opened, fam) != [1, 1]: errors.append("%s %s, want 1 on each comm" % (fam, every(opened, fam)))
        if every(opened, "pact_comm_bytes_total") != [4096, 4096]:
            errors.append("pact_comm_bytes_total %s, want the message's 4096 on each comm" % every(opened, "pact_comm_bytes_total"))
        for fam, want in (("pact_class_messages_sent_total", 1), ("pact_class_messages_received_total", 1),
                          ("pact_class_bytes_sent_total", 4096), ("pact_class_bytes_received_total", 4096)):
            if every(opened, fam) != [want]: errors.append("%s %s, want [%d] (class DEFAULT)" % (fam, every(opened, fam), want))
        if one(closed, "pact_device_comms") != 1 or one(closed, "pact_device_registrations") != 1:
            errors.append("after closeSend: comms %s, registrations %s, want 1 and 1" % (
                one(closed, "pact_device_comms"), one(closed, "pact_device_registrations")))
        if not (one(closed, "pact_device_endpoints") or 0) < one(opened, "pact_device_endpoints"):
            errors.append("the send comm's endpoint did not go (endpoints %s -> %s)" % (
                one(opened, "pact_device_endpoints"), one(closed, "pact_device_endpoints")))
        sent = 'pact_comm_messages_total{direction="send",device="lo",class="DEFAULT",peer="127.0.0.1"}'
        if closed.get(sent) != 1 or len(every(closed, "pact_comm_messages_total")) != 2:
            errors.append("after closeSend: %s = %s in %s, want the closed comm's 1 kept" % (
                sent, closed.get(sent), every(closed, "pact_comm_messages_total")))
        if errors:
            fail("counters of a known host: " + "; ".join(errors), p.stdout + p.stderr)
        else:
            print("ok: pact_plugin_metrics_write snapshots: device, process and comm counters follow the host's "
                  "comms, registrations and message", flush=True)
        if any(k.startswith("pact_lane_") for k in opened):
            fail("lane series for an ordered (one-lane) send comm")
    # An unordered class with two lanes: the send comm's share per lane, adding up to its pieces
    # and bytes (one 4 KiB piece).
    p = subprocess.run([probe, plugin], env=dict(env, UCX_TLS="tcp", PROBE_METRICS_WRITE=snap + ".lanes",
                                                 PACT_TC_DEFAULT="unordered,lanes=2,chunk=4K"),
                       capture_output=True, text=True, timeout=120)
    try:
        lanes = parse_strict(open(snap + ".lanes.open").read())
        pieces = {re.search(r'lane="(\d+)",rail="lo"', k).group(1): v for k, v in lanes.items() if k.startswith("pact_lane_pieces_total{")}
        nbytes = {re.search(r'lane="(\d+)",rail="lo"', k).group(1): v for k, v in lanes.items() if k.startswith("pact_lane_bytes_total{")}
        if sorted(pieces) != ["0", "1"] or sum(pieces.values()) != 1 or sum(nbytes.values()) != 4096:
            fail("two lanes: pieces %s, bytes %s (want lanes 0 and 1, one 4096-byte piece in all)" % (pieces, nbytes),
                 p.stdout + p.stderr)
        else:
            print("ok: an unordered two-lane send comm's share per lane: pieces %s, bytes %s" % (pieces, nbytes), flush=True)
    except OSError as e:
        fail("the two-lane snapshot: %s" % e, p.stdout + p.stderr)
    # Per comm, when asked: the open comms by id, the closed one's counters under comm="closed".
    p = subprocess.run([probe, plugin], env=dict(env, UCX_TLS="tcp", PROBE_METRICS_WRITE=snap + ".per",
                                                 PACT_METRICS_PER_COMM="1"),
                       capture_output=True, text=True, timeout=120)
    try:
        per_open, per_closed = (parse_strict(open(snap + ".per" + s).read()) for s in (".open", ".closed"))
        ids = sorted(re.search(r'comm="([^"]*)"', k).group(1) for k in per_open if k.startswith("pact_comm_messages_total{"))
        after = {re.search(r'direction="(\w+)".*comm="([^"]*)"', k).groups(): v for k, v in per_closed.items()
                 if k.startswith("pact_comm_messages_total{")}
        if len(ids) != 2 or not all(i.isdigit() for i in ids) or len(set(ids)) != 2:
            fail("PACT_METRICS_PER_COMM=1: comm ids %s with both comms open, want two numbers" % ids, p.stdout + p.stderr)
        elif after.get(("send", "closed")) != 1 or sum(1 for (d, c) in after if d == "recv" and c.isdigit()) != 1:
            fail("PACT_METRICS_PER_COMM=1 after closeSend: %s, want the send comm's 1 under comm=\"closed\" and the receive comm by id" % after,
                 p.stdout + p.stderr)
        else:
            print("ok: PACT_METRICS_PER_COMM=1: comms %s by id; after closeSend %s" % (ids, after), flush=True)
    except OSError as e:
        fail("the per-comm snapshot: %s" % e, p.stdout + p.stderr)
    p = subprocess.run([probe, plugin], env=dict(env, UCX_TLS="tcp", PROBE_METRICS_WRITE="/nonexistent-dir/m"),
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 0 or "pact_plugin_metrics_write" not in p.stdout + p.stderr:
        fail("pact_plugin_metrics_write into a missing directory did not fail", p.stdout + p.stderr)

finish("metrics")
