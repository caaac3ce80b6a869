#!/usr/bin/env python3
"""Throughput over time around a rail failover, on the engine's face (docs/reliability.md).

    python3 perf/failover_timeline.py --netns-script ci/netns.sh --out DIR [--seconds 5]
        [--fault-at 1.5] [--repair-after 2] [--size 1M] [--window 8] [--bin-ms 50] [--tc SPEC]

Run by perf/failover-timeline.sh, which builds the two namespaces (two veth rails, each rate
limited) and holds the netns suite's lock. An engine in pactA (receiver, on pa0+pa1) and one in
pactB (sender, on pb0+pb1) stream KV transfers of --size, --window in flight, for --seconds; the
receiver checks every committed block and records when it committed. --fault-at seconds in, rail 1
is cut (`ci/netns.sh link 1 down`), and --repair-after seconds later brought back (0: never).
Writes DIR/failover-timeline.json (the commits, the bins and the figures) and
DIR/failover-timeline.svg (Gbit/s against time, the fault at 0), and prints the figures: the rate
before the fault (both rails, over its last second), after it (one rail, 400 to 1400 ms in), the
longest gap between commits, and the rate over the first 200 ms after the fault (the dip) and over
the next 200 ms (issue #31's target: back at the surviving rail's rate within 2x PACT_RAIL_TIMEOUT).

The roles (--role rx | tx) are this script run inside the namespaces by the orchestrator.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def size_arg(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def receiver(a) -> None:
    import numpy as np
    import pact
    e = pact.Engine(name="timeline-rx", listen="10.77.0.1")
    print(e.address, flush=True)
    mem = np.zeros(a.window * a.size, np.uint8)
    mr = e.register(mem)
    open_ = {}

    def expect(n: int) -> None:
        slot = (n - 1) % a.window
        open_[n] = e.expect(pact.Key(n, 0, 0), [mr.block(slot * a.size, a.size)], traffic_class="KV")

    for n in range(1, a.window + 1):
        expect(n)
    commits, bad, last, nxt = [], 0, time.monotonic(), 1
    # Until the sender stops: no commit for 3 s after the first one, or the time limit.
    limit = time.monotonic() + a.seconds + 30
    while time.monotonic() < limit and (not commits or time.monotonic() - last < 3):
        try:
            info = open_[nxt].wait(timeout=0.1)
        except pact.TimedOut:
            continue
        t = time.monotonic_ns()
        if not info.committed:
            sys.exit(f"transfer {nxt}: {info}")
        slot = (nxt - 1) % a.window
        bad += 0 if (mem[slot * a.size:(slot + 1) * a.size] == nxt % 251).all() else 1
        commits.append(t)
        last = time.monotonic()
        open_.pop(nxt).release()
        expect(nxt + a.window)
        nxt += 1
    for x in open_.values():
        x.release()
    json.dump({"commits_ns": commits, "bad": bad, "stats": e.stats()}, open(a.commits, "w"))
    mr.close()
    e.close()


def sender(a) -> None:
    import numpy as np
    import pact
    e = pact.Engine(name="timeline-tx")
    peer = e.connect(a.address)
    mem = np.zeros(a.window * a.size, np.uint8)
    mr = e.register(mem)
    sends = {}

    def send(n: int) -> None:
        slot = (n - 1) % a.window
        mem[slot * a.size:(slot + 1) * a.size] = n % 251
        sends[n] = e.send(peer, pact.Key(n, 0, 0), [mr.block(slot * a.size, a.size)], traffic_class="KV")

    for n in range(1, a.window + 1):
        send(n)
    stop, n = time.monotonic() + a.seconds, 1
    while sends:
        info = sends[n].wait(timeout=30)
        if not info.committed:
            sys.exit(f"send {n}: {info}")
        sends.pop(n).release()
        if time.monotonic() < stop:
            send(n + a.window)
        n += 1
    json.dump(e.stats(), open(a.commits, "w"))
    mr.close()
    e.close()


def figures(commits, size, fault_ns, repair_ns, bin_ms):
    """Bins of bin_ms (Gbit/s, time in ms from the fault) and the figures."""
    gbit = lambda n, ms: n * size * 8 / (ms * 1e6)
    rel = [(t - fault_ns) / 1e6 for t in commits]
    start, end = rel[0], rel[-1]
    bins = []
    b = start
    while b < end:
        n = sum(1 for r in rel if b <= r < b + bin_ms)
        bins.append((b + bin_ms / 2, gbit(n, bin_ms)))
        b += bin_ms
    after_end = (repair_ns - fault_ns) / 1e6 if repair_ns else end
    before = [r for r in rel if -1000 <= r < 0]
    after = [r for r in rel if 400 <= r < min(after_end, 1400)]
    one_rail = gbit(len(after), min(after_end, 1400) - 400) if after else 0.0
    rate = lambda a, b: gbit(sum(1 for r in rel if a <= r < b), b - a)
    gaps = [b2 - b1 for b1, b2 in zip(rel, rel[1:]) if b2 >= 0]
    return bins, {
        "gbit_before": round(gbit(len(before), 1000), 3),
        "gbit_one_rail": round(one_rail, 3),
        "longest_gap_ms": round(max(gaps), 1) if gaps else None,
        # The target: from 2x PACT_RAIL_TIMEOUT after the fault on, the surviving rail's rate.
        "gbit_0_200ms": round(rate(0, 200), 3),
        "gbit_200_400ms": round(rate(200, 400), 3),
    }


def orchestrate(a) -> None:
    sys.path.insert(0, HERE)
    import plot  # perf/plot.py: the SVG writer
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ, UCX_TLS="tcp", PACT_RAIL_TIMEOUT=a.rail_timeout, PACT_TC_KV=a.tc)
    env.pop("UCX_NET_DEVICES", None)  # each rail pins its own
    me = [sys.executable, os.path.abspath(__file__), "--size", str(a.size), "--window", str(a.window),
          "--seconds", str(a.seconds)]
    rx_out, tx_out = os.path.join(a.out, "rx.json"), os.path.join(a.out, "tx.json")
    rx = subprocess.Popen(["ip", "netns", "exec", "pactA"] + me + ["--role", "rx", "--commits", rx_out],
                          env=dict(env, PACT_NET_DEVICES="pa0,pa1"), stdout=subprocess.PIPE, text=True)
    address = rx.stdout.readline().strip()
    if not address:
        sys.exit("failover_timeline: the receiver printed no address")
    tx = subprocess.Popen(["ip", "netns", "exec", "pactB"] + me + ["--role", "tx", "--address", address,
                                                                   "--commits", tx_out],
                          env=dict(env, PACT_NET_DEVICES="pb0,pb1"))
    time.sleep(a.fault_at)  # the fault's place in the run (a schedule, not a synchronisation)
    fault_ns = time.monotonic_ns()
    subprocess.run([a.netns_script, "link", "1", "down"], check=True, capture_output=True)
    repair_ns = 0
    if a.repair_after > 0:
        time.sleep(a.repair_after)
        repair_ns = time.monotonic_ns()
        subprocess.run([a.netns_script, "link", "1", "up"], check=True, capture_output=True)
    if tx.wait(timeout=a.seconds + 60) != 0 or rx.wait(timeout=60) != 0:
        sys.exit("failover_timeline: a peer failed")
    got = json.load(open(rx_out))
    bins, fig = figures(got["commits_ns"], a.size, fault_ns, repair_ns, a.bin_ms)
    fig.update(transfers=len(got["commits_ns"]), bad=got["bad"], size=a.size, window=a.window,
               rail_timeout=a.rail_timeout, repair_at_ms=round((repair_ns - fault_ns) / 1e6, 1) if repair_ns else None,
               sender=json.load(open(tx_out)), receiver=got["stats"])
    json.dump({"tool": "failover-timeline", "figures": fig, "bins": bins, "commits_ns": got["commits_ns"],
               "fault_ns": fault_ns}, open(os.path.join(a.out, "failover-timeline.json"), "w"), indent=1)
    title = "engine KV %s, rail 1 cut at 0%s" % (plot.size_label(a.size),
                                                ", back at %d ms" % fig["repair_at_ms"] if repair_ns else "")
    svg = plot.render([("committed Gbit/s (%d ms bins)" % a.bin_ms, bins)], "gbit", title,
                      xlabel="ms from the fault", linear_x=True)
    open(os.path.join(a.out, "failover-timeline.svg"), "w").write(svg)
    print(json.dumps({k: v for k, v in fig.items() if k not in ("sender", "receiver")}))
    print("sender: rail_failovers %d, rail_recoveries %d, rail_resent_bytes %d" % (
        fig["sender"]["rail_failovers"], fig["sender"]["rail_recoveries"], fig["sender"]["rail_resent_bytes"]))
    if got["bad"]:
        sys.exit("failover_timeline: %d committed blocks differ" % got["bad"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=("rx", "tx"))
    p.add_argument("--address")
    p.add_argument("--commits")
    p.add_argument("--netns-script", default=os.path.join(HERE, "..", "ci", "netns.sh"))
    p.add_argument("--out", default="failover-timeline")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--fault-at", type=float, default=1.5)
    p.add_argument("--repair-after", type=float, default=2.0)
    p.add_argument("--size", type=size_arg, default=1 << 20)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--bin-ms", type=float, default=50.0)
    p.add_argument("--tc", default="unordered,lanes=2,chunk=256K")
    p.add_argument("--rail-timeout", default="100ms")
    a = p.parse_args()
    {"rx": receiver, "tx": sender}.get(a.role, orchestrate)(a)


if __name__ == "__main__":
    main()
