"""The same KV workload through pact's Python package, Mooncake's transfer engine and NIXL,
interleaved in one run on loopback (docs/performance.md, "KV transfer beside Mooncake and NIXL").

    UCX_TLS=tcp UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo \\
      PYTHONPATH=build/python python perf/kv_peers_bench.py [--rounds 3] [--json FILE]

Each system gets its senders and a receiver in one process of its own (a process per system
and round, the order rotating; --here puts all in one process, where the others' polling
threads take the cores), over tcp: pact with UCX_TLS=tcp, Mooncake's "tcp" protocol with
P2PHANDSHAKE metadata, NIXL's UCX backend with UCX_TLS=tcp, DRAM. A request moves `blocks`
blocks of `size` bytes, scattered over every other page of a pool on each side (paged KV), one
request per sender at a time (--senders N: N senders to the one receiver, each into its share of
the receiver's pool, all at once; shapes that do not fit a share are left out). pact's time runs
to the receiver's commit (all bytes in, epoch current); Mooncake's to its synchronous batch
write's return (one thread per sender); NIXL's to DONE on the initiator. Goodput = bytes / wall
time; P50/P99 of the per-request times. Systems that fail to import are reported with the
reason; the medians of the rounds are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

SIZES = [16 << 10, 256 << 10, 2 << 20]
C_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "perf", "pact-kv-c-bench")
COUNTS = [1, 16, 256]
POOL = 1 << 30  # bytes per side: the pages a request's blocks are scattered over (every other one)


def plan(size, count, senders):
    """Per sender (source offsets in its own pool, destination offsets in its share of the
    receiver's pool): every other page, shuffled. None when the request does not fit."""
    region = POOL // senders
    pages = region // size // 2
    if count > pages:
        return None
    rng = np.random.default_rng(size * 1000 + count)
    return [([int(x) * 2 * size for x in rng.choice(pages, count, replace=False)],
             [i * region + int(x) * 2 * size for x in rng.choice(pages, count, replace=False)])
            for i in range(senders)]


def requests_for(size, count):
    total = size * count
    return max(5, min(200, (64 << 20) // total))


class Pact:
    name = "pact"

    def __init__(self, senders):
        import pact
        self.pact = pact
        self.rx = pact.Engine(name="bench-rx", listen="127.0.0.1", model_epoch=1)
        self.dst = np.zeros(POOL, np.uint8)
        self.md = self.rx.register(self.dst)
        self.tx, self.peers, self.srcs, self.ms = [], [], [], []
        for i in range(senders):
            tx = pact.Engine(name=f"bench-tx{i}", listen="127.0.0.1", model_epoch=1)
            self.tx.append(tx)
            self.peers.append(tx.connect(self.rx.address))
            self.srcs.append(np.ones(POOL // senders, np.uint8))
            self.ms.append(tx.register(self.srcs[-1]))
        self.n = 0

    def run(self, size, plans):
        t0 = time.perf_counter()
        xs, ss = {}, []
        for i, (so, do) in enumerate(plans):
            self.n += 1
            key = self.pact.Key(self.n, 0, 1)
            xs[self.rx.expect(key, [self.md.block(o, size) for o in do]).id] = None
            ss.append(self.tx[i].send(self.peers[i], key, [self.ms[i].block(o, size) for o in so]))
        out = []
        while len(out) < len(plans):  # the receiver's commits as they happen
            for info in self.rx.poll(timeout=60):
                out.append((info.committed, time.perf_counter() - t0))
        for s in ss:
            s.wait(timeout=60)
        return out

    def close(self):
        for tx in self.tx:
            tx.close()
        self.rx.close()


class Mooncake:
    name = "mooncake"

    def __init__(self, senders):
        from mooncake.engine import TransferEngine
        self.b = TransferEngine()
        self.a = [TransferEngine() for _ in range(senders)]
        for e in [self.b] + self.a:
            if e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
                raise RuntimeError("mooncake initialize failed")
        self.target = f"127.0.0.1:{self.b.get_rpc_port()}"
        self.dst = np.zeros(POOL, np.uint8)
        self.dp = self.dst.ctypes.data
        assert self.b.register_memory(self.dp, POOL) == 0
        self.srcs = [np.ones(POOL // senders, np.uint8) for _ in range(senders)]
        for a, src in zip(self.a, self.srcs):
            assert a.register_memory(src.ctypes.data, src.nbytes) == 0

    def run(self, size, plans):
        import threading
        out = [None] * len(plans)
        t0 = time.perf_counter()

        def one(i, so, do):
            sp = self.srcs[i].ctypes.data
            r = self.a[i].batch_transfer_sync_write(self.target, [sp + o for o in so],
                                                    [self.dp + o for o in do], [size] * len(so))
            out[i] = (r == 0, time.perf_counter() - t0)

        if len(plans) == 1:
            one(0, *plans[0])
            return out
        threads = [threading.Thread(target=one, args=(i, so, do)) for i, (so, do) in enumerate(plans)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def close(self):
        pass


class Nixl:
    name = "nixl"

    def __init__(self, senders):
        from nixl._api import nixl_agent, nixl_agent_config
        cfg = nixl_agent_config(backends=["UCX"])
        self.b = nixl_agent("bench-b", cfg)
        self.dst = np.zeros(POOL, np.uint8)
        self.dp = self.dst.ctypes.data
        self.b.register_memory([(self.dp, POOL, 0, "")], "DRAM")
        self.a, self.srcs = [], []
        for i in range(senders):
            a = nixl_agent(f"bench-a{i}", cfg)
            src = np.ones(POOL // senders, np.uint8)
            a.register_memory([(src.ctypes.data, src.nbytes, 0, "")], "DRAM")
            a.add_remote_agent(self.b.get_agent_metadata())
            self.a.append(a)
            self.srcs.append(src)

    def run(self, size, plans):
        t0 = time.perf_counter()
        handles = []
        for i, (so, do) in enumerate(plans):
            sp = self.srcs[i].ctypes.data
            local = self.a[i].get_xfer_descs([(sp + o, size, 0) for o in so], "DRAM")
            remote = self.b.get_xfer_descs([(self.dp + o, size, 0) for o in do], "DRAM")
            h = self.a[i].initialize_xfer("WRITE", local, remote, "bench-b", b"kv")
            self.a[i].transfer(h)
            handles.append(h)
        out = [None] * len(plans)
        while any(o is None for o in out):
            for i, h in enumerate(handles):
                if out[i] is None and (state := self.a[i].check_xfer_state(h)) in ("DONE", "ERR"):
                    out[i] = (state == "DONE", time.perf_counter() - t0)
        for a, h in zip(self.a, handles):
            a.release_xfer_handle(h)
        return out

    def close(self):
        pass


def measure(system, size, count, senders):
    plans = plan(size, count, senders)
    if plans is None:
        return None
    system.run(size, plans)  # warm-up
    times, failed, wall = [], 0, 0.0
    for _ in range(max(3, requests_for(size, count) // senders)):
        t = time.perf_counter()
        for ok, took in system.run(size, plans):
            failed += not ok
            times.append(took)
        wall += time.perf_counter() - t
    times.sort()
    return {"goodput_gbs": size * count * len(times) / wall / 1e9,
            "p50_us": times[len(times) // 2] * 1e6,
            "p99_us": times[min(len(times) - 1, int(len(times) * 0.99))] * 1e6,
            "requests": len(times), "failed": failed}


def parse_shapes(text):
    """'16K:1,256K:1' -> [(16384, 1), (262144, 1)]; None: every size x every count."""
    if not text:
        return [(size, count) for size in SIZES for count in COUNTS]
    units = {"K": 1 << 10, "M": 1 << 20}
    out = []
    for item in text.split(","):
        size, count = item.split(":")
        out.append((int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size), int(count)))
    return out


def run_c_bench(bench, plan):
    """pact-kv-c-bench over plan [(size, count, requests, seed)]: (its JSON rows, None) or
    ([], why it did not run)."""
    if not os.path.exists(bench):
        return [], f"{bench} is not built"
    proc = subprocess.run([bench] + [":".join(map(str, p)) for p in plan], capture_output=True, text=True)
    if proc.returncode != 0:
        return [], f"{bench}: exit status {proc.returncode}: {proc.stderr.strip()[-200:]}"
    return [json.loads(line) for line in proc.stdout.splitlines()], None


def run_here(names, rounds_n, senders, shapes):
    """{system: {(size, count): [per-round result]}} measured in this process; missing systems."""
    systems, missing = [], {}
    for cls in (c for c in (Pact, Mooncake, Nixl) if c.name in names):
        try:
            systems.append(cls(senders))
        except Exception as e:  # noqa: BLE001  (reported, the others still run)
            missing[cls.name] = f"{type(e).__name__}: {e}"
    rounds = {s.name: {} for s in systems}
    for r in range(rounds_n):
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        for size, count in shapes:
            for s in order:
                res = measure(s, size, count, senders)
                if res is not None:
                    rounds[s.name].setdefault((size, count), []).append(res)
    for s in systems:
        s.close()
    return rounds, missing


def run_isolated(names, rounds_n, senders, shapes, shapes_text):
    """Each (round, system) in a process of its own, the order rotating per round: the systems'
    background threads (Mooncake's and NIXL's poll) never share the 2 cores with another's."""
    import tempfile
    rounds, missing, crashed_at_exit = {}, {}, set()
    for r in range(rounds_n):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            if name == "pact-c" and senders > 1:
                missing[name] = "one sender only"
                continue
            if name == "pact-c":  # the C API alone: perf/kv_c_bench.cpp
                rows, why = run_c_bench(C_BENCH, [(size, count, requests_for(size, count), size * 1000 + count)
                                                  for size, count in shapes])
                if why:
                    missing[name] = why
                for row in rows:
                    rounds.setdefault(name, {}).setdefault((row["size"], row["blocks"]), []).append(row["result"])
                continue
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                proc = subprocess.run([sys.executable, __file__, "--here", "--systems", name,
                                       "--rounds", "1", "--senders", str(senders), "--raw", f.name]
                                      + (["--shapes", shapes_text] if shapes_text else []),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                try:
                    doc = json.load(open(f.name))
                except json.JSONDecodeError:  # it died before writing its results
                    missing[name] = f"exit status {proc.returncode}: " + (
                        proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no output")
                    continue
                if proc.returncode != 0:  # NIXL 1.5.1 segfaults at interpreter exit
                    crashed_at_exit.add(f"{name} (exit status {proc.returncode})")
            missing.update(doc["missing"])
            for row in doc["rows"]:
                rounds.setdefault(name, {}).setdefault((row["size"], row["blocks"]), []).append(row["result"])
    for c in sorted(crashed_at_exit):
        print(f"note: {c} crashed after writing its results")
    return rounds, missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--systems", default="pact,mooncake,nixl,pact-c",
                    help="comma-separated subset; pact-c: the same workload through the C API "
                         "(build/perf/pact-kv-c-bench), for the Python overhead")
    ap.add_argument("--here", action="store_true",
                    help="every system in this one process (their threads then compete)")
    ap.add_argument("--senders", type=int, default=1,
                    help="senders to the one receiver, each with a request in flight at once")
    ap.add_argument("--shapes", help="SIZE:BLOCKS,... (e.g. 16K:1,256K:1); default: every size "
                                     "x every block count")
    ap.add_argument("--raw", help=argparse.SUPPRESS)  # a child's per-round results
    args = ap.parse_args()
    names = args.systems.split(",")
    shapes = parse_shapes(args.shapes)
    if args.here:
        rounds, missing = run_here(names, args.rounds, args.senders, shapes)
    else:
        rounds, missing = run_isolated(names, args.rounds, args.senders, shapes, args.shapes)
    if args.raw:
        rows = [{"size": k[0], "blocks": k[1], "result": v[0]}
                for res in rounds.values() for k, v in res.items()]
        json.dump({"missing": missing, "rows": rows}, open(args.raw, "w"))
        return 0
    for name, why in missing.items():
        print(f"{name}: not run ({why})")
    names = [n for n in names if n in rounds]
    print(f"{'size':>6} {'blocks':>6} | " + " | ".join(f"{n:>24}" for n in names)
          + " | pact/best goodput, pact/best-P99, Python/C goodput")
    print(f"{'':>6} {'':>6} | " + " | ".join(f"{'GB/s   P50us   P99us':>24}" for _ in names))
    out = []
    for size, count in shapes:
        med = {}
        if any((size, count) not in rounds[n] for n in names):
            continue  # does not fit this many senders' shares of the pool
        for n in names:
            rs = rounds[n][(size, count)]
            med[n] = {k: statistics.median(x[k] for x in rs) for k in ("goodput_gbs", "p50_us", "p99_us")}
            med[n]["failed"] = sum(x["failed"] for x in rs)
        others = [n for n in med if n not in ("pact", "pact-c")]
        ratio = ""
        if "pact" in med and others:
            best_g = max(med[n]["goodput_gbs"] for n in others)
            best_p99 = min(med[n]["p99_us"] for n in others)
            ratio = f"{med['pact']['goodput_gbs'] / best_g:.2f}x, {med['pact']['p99_us'] / best_p99:.2f}x"
        if "pact" in med and "pact-c" in med:
            ratio += f", py/C {med['pact']['goodput_gbs'] / med['pact-c']['goodput_gbs']:.2f}x"
        cells = " | ".join(f"{m['goodput_gbs']:6.2f} {m['p50_us']:7.0f} {m['p99_us']:7.0f}"
                           + ("!" if m["failed"] else " ") for m in med.values())
        size_s = f"{size >> 10}K" if size < (1 << 20) else f"{size >> 20}M"
        print(f"{size_s:>6} {count:>6} | {cells} | {ratio}", flush=True)
        out.append({"size": size, "blocks": count, **med})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "missing": missing, "rows": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
