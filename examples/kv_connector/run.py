"""Prefill and decode processes exchanging paged KV blocks through PactKVConnector.

    python examples/kv_connector/run.py            (PYTHONPATH=build/python in the tree)

This process plays vLLM's scheduler and router: it serves the embedded metadata store, starts a
prefill worker and a decode worker (each a process with its own engine, found by name), hands
them requests and checks what comes back. The scenarios, in order:

1. normal:   16 requests of 4 blocks x 4 layers, loaded byte-exact;
2. errors:   a request the prefill never sends: its blocks come back as load errors when the
             deadline passes, and its data is never reported loaded;
3. restart:  the decode worker is killed with loads pending and restarted on epoch 2 under the
             same name; the prefill's sends to the old one fail, are retried to the new one and
             load byte-exact;
4. lease:    the decode worker hangs (SIGSTOP) with sends pending; its lease expires and the
             prefill's sends fail with PACT_ERR_PEER_STALE within the lease.

Exit status 0 when every check held; one line per scenario.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import queue
import signal
import sys
import time

import numpy as np

LAYERS, BLOCKS, BLOCK = 4, 64, 16 << 10
TTL = 1.0


def pattern(request: int, layer: int, position: int) -> np.ndarray:
    """What block `position` of a request's layer holds, so the decode side can check it."""
    return np.full(BLOCK, (request * 31 + layer * 7 + position) % 251, dtype=np.uint8)


def worker(role: str, name: str, store: str, epoch: int, deadline: float, commands, results):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from connector import PactKVConnector

    kv = {f"layer.{i}": np.zeros((BLOCKS, BLOCK), dtype=np.uint8) for i in range(LAYERS)}
    conn = PactKVConnector(name, role, store, model_epoch=epoch, ttl=TTL, deadline=deadline)
    conn.register_kv_caches(kv)
    results.send(("ready", name, epoch))
    blocks: dict[int, list[int]] = {}
    while True:
        try:
            cmd = commands.get(timeout=0.005)
        except queue.Empty:
            cmd = None
        if cmd is not None:
            if cmd[0] == "stop":
                break
            try:
                if cmd[0] == "save":
                    _, req, ids, remote = cmd
                    for layer, cache in enumerate(kv.values()):
                        for pos, b in enumerate(ids):
                            cache[b] = pattern(req, layer, pos)
                    conn.save_kv(req, ids, remote)
                elif cmd[0] == "load":
                    _, req, ids = cmd
                    blocks[req] = ids
                    conn.start_load_kv(req, ids)
            except Exception as e:  # noqa: BLE001  (reported to the driver)
                results.send(("error", cmd[1], f"{type(e).__name__}: {e}"))
        sent, loaded = conn.get_finished()
        for req in sent:
            results.send(("sent", req, conn.failed_sends.pop(req, None)))
        errors = conn.get_block_ids_with_load_errors()
        for req in loaded:
            ids = blocks.pop(req)
            if set(ids) & errors:
                results.send(("load_error", req, sorted(set(ids) & errors)))
                continue
            exact = all(np.array_equal(cache[b], pattern(req, layer, pos))
                        for layer, cache in enumerate(kv.values()) for pos, b in enumerate(ids))
            results.send(("loaded", req, exact))
    conn.shutdown()


class Cluster:
    """The workers, each with its own command queue and result pipe (a worker killed while it
    writes must not wedge a queue the others share)."""

    def __init__(self, store_url: str):
        self.ctx = mp.get_context("spawn")
        self.store = store_url
        self.procs: dict[str, tuple] = {}
        self.pipes: list = []

    def start(self, role, name, epoch=1, deadline=30.0):
        q = self.ctx.Queue()
        reader, writer = self.ctx.Pipe(duplex=False)
        p = self.ctx.Process(target=worker, args=(role, name, self.store, epoch, deadline, q,
                                                  writer), daemon=True)
        p.start()
        writer.close()
        self.procs[name] = (p, q)
        self.pipes.append(reader)
        self.expect({("ready", name)}, timeout=60)

    def send(self, name, *cmd):
        self.procs[name][1].put(cmd)

    def expect(self, wanted: set, timeout: float) -> dict:
        """Results until every (kind, request) in wanted arrived; {(kind, request): detail}."""
        got, deadline = {}, time.monotonic() + timeout
        while not wanted <= got.keys():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {sorted(wanted - got.keys())}")
            ready = mp.connection.wait(self.pipes, timeout=left)
            for r in ready:
                try:
                    kind, req, detail = r.recv()
                except EOFError:  # that worker is gone
                    self.pipes.remove(r)
                    continue
                self._take(got, kind, req, detail)
        return got

    @staticmethod
    def _take(got, kind, req, detail):
        if kind == "error":
            raise AssertionError(f"worker error on request {req}: {detail}")
        got[(kind, req)] = detail

    def stop(self):
        for p, q in self.procs.values():
            if p.is_alive():
                q.put(("stop",))
                p.join(timeout=10)
            if p.is_alive():
                p.kill()


def blocks_for(req):
    return [(req * 4 + i) % BLOCKS for i in range(4)]


def run() -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from pact import discovery

    failures = 0

    def report(scenario, ok, detail):
        nonlocal failures
        failures += not ok
        print(f"{scenario:8} {'ok' if ok else 'FAILED'}: {detail}", flush=True)

    with discovery.MetaServer() as server:
        c = Cluster(server.url)
        try:
            c.start("consumer", "decode", epoch=1, deadline=3.0)
            c.start("producer", "prefill")
            # 1. normal
            reqs = range(16)
            for r in reqs:
                c.send("decode", "load", r, blocks_for(r))
                c.send("prefill", "save", r, blocks_for(r), "decode")
            got = c.expect({("loaded", r) for r in reqs} | {("sent", r) for r in reqs}, 60)
            exact = sum(got[("loaded", r)] is True for r in reqs)
            clean = sum(got[("sent", r)] is None for r in reqs)
            report("normal", exact == 16 and clean == 16,
                   f"{exact}/16 requests loaded byte-exact, {clean}/16 sends clean")
            # 2. a request nobody sends: its blocks are load errors, never loaded
            c.send("decode", "load", 100, blocks_for(100))
            got = c.expect({("load_error", 100)}, 30)
            report("errors", got[("load_error", 100)] == sorted(blocks_for(100)),
                   f"request 100 unsent: blocks {got[('load_error', 100)]} reported as load errors")
            # 3. restart: the prefill's sends wait for the decode, which dies; the failed sends
            #    are retried (by the "scheduler") to a new decode on epoch 2 under the same name
            restart = range(200, 204)
            for r in restart:
                c.send("prefill", "save", r, blocks_for(r), "decode")
            old = c.procs["decode"][0]
            old.kill()
            old.join(timeout=10)
            got = c.expect({("sent", r) for r in restart}, 60)
            failed = [r for r in restart if got[("sent", r)]]
            why = got[("sent", restart[0])] or "none"
            c.start("consumer", "decode", epoch=2, deadline=30.0)
            for r in restart:
                c.send("decode", "load", r, blocks_for(r))
                c.send("prefill", "save", r, blocks_for(r), "decode")
            got = c.expect({("loaded", r) for r in restart} | {("sent", r) for r in restart}, 60)
            exact = sum(got[("loaded", r)] is True for r in restart)
            report("restart", len(failed) == 4 and exact == 4,
                   f"decode killed with {len(failed)}/4 sends to it pending (failed: {why[:90]}); "
                   f"restarted on epoch 2, "
                   f"{exact}/4 requests loaded byte-exact from the new incarnation")
            # 4. lease: the decode hangs with the prefill's sends waiting for it
            for r in range(300, 304):
                c.send("prefill", "save", r, blocks_for(r), "decode")
            hung = c.procs["decode"][0]
            start = time.monotonic()
            os.kill(hung.pid, signal.SIGSTOP)
            got = c.expect({("sent", r) for r in range(300, 304)}, 30)
            took = time.monotonic() - start
            stale = sum("PACT_ERR_PEER_STALE" in (got[("sent", r)] or "") for r in range(300, 304))
            report("lease", stale == 4 and took < TTL + 2,
                   f"decode hung: {stale}/4 sends failed PACT_ERR_PEER_STALE after {took:.2f} s "
                   f"(lease {TTL} s)")
            os.kill(hung.pid, signal.SIGKILL)
        finally:
            c.stop()
    print(f"{'all checks held' if failures == 0 else f'{failures} scenario(s) failed'}")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(run())
