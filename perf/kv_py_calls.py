"""Where a KV request's time goes in the pact Python package, call by call, beside the C API.

Two engines in this process move one request at a time (SIZE x BLOCKS), as perf/kv_peers_bench.py's
pact workload does: Key, the blocks, expect, send, poll until the receiver's commit, the sender's
wait. Prints the median of each call over REQUESTS requests (after a warm-up), then runs
build/perf/pact-kv-c-bench on the same shape and prints its calls beside them: the Python
overhead per call. Usage (docs/performance.md, "Python over C"):

  UCX_TLS=tcp UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo PYTHONPATH=build/python \\
    .venv/bin/python perf/kv_py_calls.py [--size 16K] [--blocks 1] [--requests 15000] [--c-bench PATH]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import pact

C_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "perf", "pact-kv-c-bench")
CALLS = ("key", "blocks", "expect", "send", "commit", "sender")  # the C bench has the last four


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def python_calls(size, blocks, requests):
    rx = pact.Engine(name="calls-rx", listen="127.0.0.1", model_epoch=1)
    tx = pact.Engine(name="calls-tx", listen="127.0.0.1", model_epoch=1)
    peer = tx.connect(rx.address)
    dst, src = np.zeros(size * blocks, np.uint8), np.ones(size * blocks, np.uint8)
    md, ms = rx.register(dst), tx.register(src)
    times = {c: [] for c in CALLS}
    total = []
    warm = max(requests // 10, 100)
    for n in range(1, warm + requests + 1):
        t = [time.perf_counter_ns()]
        key = pact.Key(n, 0, 1)
        t.append(time.perf_counter_ns())
        into = [md.block(i * size, size) for i in range(blocks)]
        out = [ms.block(i * size, size) for i in range(blocks)]
        t.append(time.perf_counter_ns())
        x = rx.expect(key, into)
        t.append(time.perf_counter_ns())
        s = tx.send(peer, key, out)
        t.append(time.perf_counter_ns())
        committed = []
        while not committed:
            committed = rx.poll(timeout=60)
        t.append(time.perf_counter_ns())
        s.wait(timeout=60)
        t.append(time.perf_counter_ns())
        if not committed[0].committed:
            sys.exit(f"request {n}: {committed[0]}")
        x.release()
        s.release()
        if n > warm:
            for i, c in enumerate(CALLS):
                times[c].append((t[i + 1] - t[i]) / 1e3)
            total.append((t[-1] - t[0]) / 1e3)
    for m in (md, ms):
        m.close()
    tx.close()
    rx.close()
    return {c: statistics.median(v) for c, v in times.items()}, statistics.median(total)


def c_calls(bench, size, blocks, requests):
    if not os.path.exists(bench):
        return None, f"{bench} is not built"
    proc = subprocess.run([bench, f"{size}:{blocks}:{requests}:1"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"{bench}: exit status {proc.returncode}: {proc.stderr.strip()[-200:]}"
    result = json.loads(proc.stdout.splitlines()[0])["result"]
    return result, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=size_arg, default=16 << 10)
    ap.add_argument("--blocks", type=int, default=1)
    ap.add_argument("--requests", type=int, default=15000)
    ap.add_argument("--c-bench", default=C_BENCH, help="pact-kv-c-bench (default: build/perf's)")
    args = ap.parse_args()
    py, py_total = python_calls(args.size, args.blocks, args.requests)
    c, why = c_calls(args.c_bench, args.size, args.blocks, args.requests)
    print(f"# {args.size} B x {args.blocks} block(s), {args.requests} requests, P50 per call (us)")
    print(f"{'call':8s} {'Python':>8s} {'C':>8s}")
    for call in CALLS:
        cv = c["calls_p50_us"].get(call) if c else None
        print(f"{call:8s} {py[call]:8.2f} {cv:8.2f}" if cv is not None else f"{call:8s} {py[call]:8.2f} {'-':>8s}")
    print(f"{'request':8s} {py_total:8.2f} {c['p50_us']:8.2f}" if c else f"{'request':8s} {py_total:8.2f}")
    if why:
        print(f"# C API: {why}")


if __name__ == "__main__":
    main()
