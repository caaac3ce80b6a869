"""Fixtures of the pact package's suite: real engines over UCX on loopback, in this process."""

import importlib.util
import os
import sys
import time

import pytest

os.environ.setdefault("UCX_NET_DEVICES", "lo")
os.environ.setdefault("PACT_NET_DEVICES", "lo")

# Not installed (pip install .) and not on PYTHONPATH: the package ci/build.sh built.
if importlib.util.find_spec("pact") is None:
    built = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "python")
    if os.path.isdir(os.path.join(built, "pact")):
        built = os.path.normpath(built)
        sys.path.insert(0, built)
        # The tests' own child processes (python -m pact.discovery, ...) import it too.
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (built, os.environ.get("PYTHONPATH")) if p)

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
