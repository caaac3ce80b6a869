"""Where a KV request's time goes in the pact Python package, call by call, beside the C API.

Two engines in this process move one request at a time (SIZE x BLOCKS), as perf/kv_peers_bench.py's
pact workload does: Key, the blocks, expect, send, poll until the receiver's commit, the sender's
wait. Prints the median of each call over REQUESTS requests (after a warm-up), then runs
build/perf/pact-kv-c-bench on the same shape and prints its calls beside them: the Python
overhead per call. Usage (docs/performance.md, "Python over C"):

  UCX_TLS=tcp UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo PYTHONPATH=build/python \\
    .venv/bin/python perf/kv_py_calls.py [--shape 16K:1] [--requests 15000] [--c-bench PATH]
"""
import argparse
import statistics
import sys
import time

import numpy as np

import pact
from kv_peers_bench import C_BENCH, parse_shapes, run_c_bench  # perf/, beside this script

CALLS = ("key", "blocks", "expect", "send", "commit", "sender")  # the C bench has the last four


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="16K:1", help="SIZE:BLOCKS of a request")
    ap.add_argument("--requests", type=int, default=15000)
    ap.add_argument("--c-bench", default=C_BENCH, help="pact-kv-c-bench (default: build/perf's)")
    args = ap.parse_args()
    [(size, blocks)] = parse_shapes(args.shape)
    py, py_total = python_calls(size, blocks, args.requests)
    rows, why = run_c_bench(args.c_bench, [(size, blocks, args.requests, 1)])
    c = rows[0]["result"] if rows else None
    print(f"# {size} B x {blocks} block(s), {args.requests} requests, P50 per call (us)")
    print(f"{'call':8s} {'Python':>8s} {'C':>8s}")
    for call in CALLS:
        cv = c["calls_p50_us"].get(call) if c else None
        print(f"{call:8s} {py[call]:8.2f} {cv:8.2f}" if cv is not None else f"{call:8s} {py[call]:8.2f} {'-':>8s}")
    print(f"{'request':8s} {py_total:8.2f} {c['p50_us']:8.2f}" if c else f"{'request':8s} {py_total:8.2f}")
    if why:
        print(f"# C API: {why}")


if __name__ == "__main__":
    main()
