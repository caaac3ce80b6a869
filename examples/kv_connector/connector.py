"""A KV connector on pact, shaped like the worker side of a vLLM v1 KV connector (the method names
and roles of ../shared/reference/kv-ecosystem.md; no vLLM code, vLLM need not be installed).

A producer (prefill) saves a request's KV blocks to a consumer (decode) found by name; the
consumer loads them into its own blocks. One pact transfer per (request, layer): the consumer's
expect names its destination blocks, the producer's send its source blocks in the same order.
A layer counts as loaded only when pact committed it (every byte in, the consumer's epoch
current); a request is finished when every layer is final, and the blocks of layers that failed
are reported by get_block_ids_with_load_errors, never as loaded.
"""

from __future__ import annotations

import numpy as np

import pact
from pact import discovery


class PactKVConnector:
    def __init__(self, name: str, role: str, store_url: str, *, model_epoch: int = 1,
                 ttl: float = 2.0, deadline: float = 30.0):
        if role not in ("producer", "consumer"):
            raise ValueError(f"role {role!r}: expected 'producer' or 'consumer'")
        self.role, self.deadline = role, deadline
        self.engine = pact.Engine(name=name, listen="127.0.0.1", model_epoch=model_epoch)
        self.directory = discovery.Directory(self.engine, discovery.open_store(store_url),
                                             ttl=ttl, watch_interval=ttl / 4)
        self.layers: list[tuple[str, pact.Memory, int]] = []  # name, memory, bytes per block
        self._open: dict[int, dict[int, pact.Transfer]] = {}  # request -> layer -> transfer
        self._blocks: dict[int, list[int]] = {}               # request -> its local block ids
        self._failed: dict[int, dict[int, int]] = {}          # request -> layer -> status
        self._load_errors: set[int] = set()
        self.failed_sends: dict[int, str] = {}                # request -> why (to retry)

    # ---- both sides ----------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict[str, np.ndarray]) -> None:
        """Registers each layer's cache, an array of [num_blocks, ...] (one block per row)."""
        for layer, cache in kv_caches.items():
            self.layers.append((layer, self.engine.register(cache), cache[0].nbytes))

    def get_handshake_metadata(self) -> bytes:
        return self.engine.export_metadata()

    def _blocks_of(self, block_ids: list[int]):
        return [[mem.block(b * size, size) for b in block_ids] for _, mem, size in self.layers]

    def get_finished(self) -> tuple[set[int], set[int]]:
        """(finished sending, finished receiving) request ids since the last call; a request is
        finished when every layer's transfer is final, whatever the outcome."""
        for info in self.engine.poll(timeout=0):
            layers = self._open.get(info.key.request_id)
            if layers is None or layers.get(info.key.transfer_id) is None:
                continue
            if not info.committed:
                self._failed.setdefault(info.key.request_id, {})[info.key.transfer_id] = info.result
            layers[info.key.transfer_id] = None  # final
        done_send, done_recv = set(), set()
        for req, layers in list(self._open.items()):
            if any(x is not None for x in layers.values()):
                continue
            del self._open[req]
            failed = self._failed.pop(req, {})
            if self.role == "consumer":
                if failed:
                    self._load_errors.update(self._blocks[req])
                done_recv.add(req)
            else:
                if failed:
                    self.failed_sends[req] = ", ".join(
                        f"layer {layer}: {pact.status_string(st)}" for layer, st in sorted(failed.items()))
                done_send.add(req)
            self._blocks.pop(req, None)
        return done_send, done_recv

    def shutdown(self) -> None:
        self.directory.close()
        self.engine.close()

    # ---- consumer (decode) ---------------------------------------------------------------

    def start_load_kv(self, request_id: int, block_ids: list[int]) -> None:
        """Expects the request's KV into block_ids, one transfer per layer."""
        epoch = self.engine.model_epoch
        items = [(pact.Key(request_id, i, epoch), blocks)
                 for i, blocks in enumerate(self._blocks_of(block_ids))]
        xs = self.engine.expect_batch(items, deadline=self.deadline)
        self._open[request_id] = {i: x for i, x in enumerate(xs)}
        self._blocks[request_id] = list(block_ids)

    def get_block_ids_with_load_errors(self) -> set[int]:
        out, self._load_errors = self._load_errors, set()
        return out

    def handle_preemptions(self, request_ids) -> None:
        """Preempted requests: their transfers never commit (the C-evaluated policy refuses
        them) and are released."""
        for req in request_ids:
            self.engine.refuse(req)
            layers = self._open.get(req) or {}
            for i, x in layers.items():
                if x is not None:
                    x.release()
                    layers[i] = None
                    self._failed.setdefault(req, {})[i] = -18  # PACT_ERR_CANCELED

    # ---- producer (prefill) --------------------------------------------------------------

    def save_kv(self, request_id: int, block_ids: list[int], remote: str) -> None:
        """Sends the request's blocks to the consumer called remote, at its current epoch. A send
        that cannot start (the consumer is gone) finishes at once as failed (failed_sends)."""
        xs = []
        for attempt in (1, 2):
            try:
                peer = self.directory.connect(remote, timeout=self.deadline)
                epoch = self.directory.connected(remote)["model_epoch"]  # as connect checked it
                items = [(peer, pact.Key(request_id, i, epoch), blocks)
                         for i, blocks in enumerate(self._blocks_of(block_ids))]
                xs = self.engine.send_batch(items, deadline=self.deadline)
                break
            except pact.PeerLost as e:  # a connection lost meanwhile: look the name up anew
                self.directory.forget(remote, "the connection was lost")
                if attempt == 2:
                    self.failed_sends[request_id] = str(e)
            except (pact.Refused, pact.NotFound) as e:  # gone, nobody there, entry expired
                self.failed_sends[request_id] = str(e)
                break
        self._open[request_id] = {i: x for i, x in enumerate(xs)}
        self._blocks[request_id] = list(block_ids)

    def request_finished(self, request_id: int) -> bool:
        """True while the request's blocks are still being sent (freed asynchronously)."""
        return request_id in self._open
