"""Fixtures of the pact package's suite: real engines over UCX on loopback, in this process."""

import os
import time

import pytest

os.environ.setdefault("UCX_NET_DEVICES", "lo")
os.environ.setdefault("PACT_NET_DEVICES", "lo")

import pact  # noqa: E402  (after the environment it reads)


def warm(a, b, a_peer):
    """One transfer each way between engines a and b (a_peer: a's id of b). UCX 1.13 over tcp
    aborts a process whose endpoint to a peer is still wiring up when that peer goes away
    (wireup_ep.c:241, docs/python.md); tests that connect and close at once would hit it."""
    b_peer = b.wait_peer(a.name, timeout=10)
    for src, dst, peer in ((a, b, a_peer), (b, a, b_peer)):
        key = pact.Key(2**63, peer, dst.model_epoch)
        x = dst.expect(key, [dst.register(bytearray(1))])
        s = src.send(peer, key, [src.register(b"w")])
        deadline = time.monotonic() + 10
        while not (x.query().final and s.query().final) and time.monotonic() < deadline:
            a.progress(timeout=0.001)  # for engines without a progress thread
            b.progress(timeout=0.001)
        assert x.query().committed and s.query().committed
        assert x.release() and s.release()


@pytest.fixture
def pair():
    """(sender engine, receiver engine, the sender's peer id of the receiver)."""
    rx = pact.Engine(name="rx", listen="127.0.0.1", model_epoch=1)
    tx = pact.Engine(name="tx", listen="127.0.0.1", model_epoch=1)
    peer = tx.connect(rx.address, timeout=10)
    warm(tx, rx, peer)
    yield tx, rx, peer
    tx.close()
    rx.close()


def counters(engine):
    """What must come back to where it was after a failed call: nothing leaked."""
    s = engine.stats()
    return {k: s[k] for k in ("open_registrations", "open_transfers", "tracked_transfers")}
