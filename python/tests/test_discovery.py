"""Discovery by name: the embedded store and a real etcd, leases, the watch, bad stores."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import pact
from pact import discovery
from conftest import counters, warm

KEY = pact.Key(1, 1, 1)
TTL = 1.0  # short leases: expiry within TTL is what the tests assert


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def embedded():
    with discovery.MetaServer() as server:
        yield discovery.HttpStore(server.url)


@pytest.fixture
def etcd(tmp_path):
    binary = shutil.which("etcd")
    if binary is None:
        pytest.skip("etcd is not installed (Debian package etcd-server; ci/setup.sh installs it)")
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    proc = subprocess.Popen(
        [binary, "--data-dir", str(tmp_path / "etcd"), "--name", "pact-test",
         "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"pact-test=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:  # until etcd answers its health check (bounded)
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if b"true" in r.read():
                    break
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "etcd did not start"
        time.sleep(0.05)
    yield discovery.EtcdStore(url), proc
    proc.kill()
    proc.wait(timeout=10)


def engines(*names):
    return [pact.Engine(name=n, listen="127.0.0.1", model_epoch=1) for n in names]


def expire_within(store, key, bound):
    """Seconds until key disappears from store; fails past bound."""
    start = time.monotonic()
    while store.get(key) is not None:
        assert time.monotonic() - start < bound, f"{key} still in the store after {bound} s"
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.parametrize("backend", ["embedded", "etcd"])
def test_connect_by_name_and_transfer(backend, request):
    store = request.getfixturevalue(backend)
    store = store[0] if isinstance(store, tuple) else store
    a, b = engines("prefill-a", "decode-b")
    try:
        with discovery.Directory(a, store, ttl=TTL) as da, discovery.Directory(b, store, ttl=TTL) as db:
            peer = da.connect("decode-b", timeout=10)
            assert da.connect("decode-b") == peer  # known: the same connection
            assert db.lookup("prefill-a")["address"] == a.address
            warm(a, b, peer)
            dst = bytearray(1024)
            x = b.expect(KEY, [b.register(dst)])
            a.send(peer, KEY, [a.register(b"n" * 1024)])
            assert x.wait(10).committed and dst == b"n" * 1024
            with pytest.raises(pact.NotFound, match="no engine named 'nobody'"):
                da.connect("nobody", timeout=0.2)
        # Closing the directory removes the entry at once.
        assert store.get("/pact/engines/prefill-a") is None
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("backend", ["embedded", "etcd"])
def test_a_dead_engines_entry_expires_within_its_lease(backend, request):
    store = request.getfixturevalue(backend)
    store = store[0] if isinstance(store, tuple) else store
    store.put("/pact/engines/ghost", b"{}", TTL)  # nobody keeps it alive
    # etcd raises a lease to its minimum TTL (1.5 election timeouts: 1.5 s by default) and checks
    # leases about every 500 ms; the embedded store expires a key at its ttl.
    lease = max(TTL, 1.5) if backend == "etcd" else TTL
    took = expire_within(store, "/pact/engines/ghost", lease + 1.0)
    assert took >= TTL * 0.5


def test_a_peer_restarted_on_a_new_epoch_is_dropped_and_its_transfers_fail(embedded):
    a, b = engines("svc-a", "svc-b")
    try:
        with discovery.Directory(a, embedded, ttl=TTL, watch_interval=0.1) as da, \
                discovery.Directory(b, embedded, ttl=TTL, watch_interval=0.1) as db:
            peer = da.connect("svc-b")
            warm(a, b, peer)
            s = a.send(peer, KEY, [a.register(b"e" * 64)])  # b expects nothing: stays open
            db.set_epoch(2)  # b "restarted" on epoch 2 and published it
            # The engine tells its peers of the epoch itself; the watch drops the connection.
            assert isinstance(s.wait(timeout=10).error, (pact.EpochMismatch, pact.PeerStale))
            deadline = time.monotonic() + TTL + 2
            while not da.disconnects:
                assert time.monotonic() < deadline, "the watch did not drop the restarted peer"
                time.sleep(0.02)
            assert "epoch 2" in da.disconnects[0][1]
            with pytest.raises(pact.PeerLost, match="restarted"):
                a.send(peer, KEY._replace(transfer_id=2), [a.register(b"x")])
            peer2 = da.connect("svc-b")  # the new incarnation
            assert peer2 != peer
    finally:
        a.close()
        b.close()


CHILD = """
import sys, pact
from pact import discovery
e = pact.Engine(name="hung", listen="127.0.0.1", model_epoch=1)
d = discovery.Directory(e, discovery.HttpStore(sys.argv[1]), ttl=float(sys.argv[2]))
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_hung_peer_loses_its_lease_and_is_dropped(embedded):
    """SIGSTOP: the process and its sockets stay, its keepalive stops; the watch drops it."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, embedded.url, str(TTL)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ))
    (a,) = engines("watcher")
    try:
        assert child.stdout.readline().strip() == "ready"
        with discovery.Directory(a, embedded, ttl=TTL, watch_interval=0.1) as da:
            peer = da.connect("hung")
            s = a.send(peer, KEY, [a.register(b"h" * 64)])
            child.send_signal(signal.SIGSTOP)
            start = time.monotonic()
            info = s.wait(timeout=20)
            took = time.monotonic() - start
            assert isinstance(info.error, pact.PeerStale), info
            assert "expired" in da.disconnects[0][1]
            assert took < TTL + 1.0, f"dropped after {took:.2f} s, lease {TTL} s"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        a.close()


def test_unreachable_and_dead_stores_name_the_store(etcd):
    (a,) = engines("lonely")
    before = counters(a)
    try:
        with pytest.raises(discovery.StoreError, match="127.0.0.1:1 unreachable"):
            discovery.Directory(a, discovery.HttpStore("http://127.0.0.1:1", timeout=1))
        with pytest.raises(discovery.StoreError, match="unreachable"):
            discovery.Directory(a, discovery.EtcdStore("http://127.0.0.1:1", timeout=1))
        store, proc = etcd
        d = discovery.Directory(a, store, ttl=TTL, watch_interval=0.1)
        proc.kill()
        proc.wait(timeout=10)
        with pytest.raises(discovery.StoreError, match=store.url.split("//")[1]):
            d.lookup("anyone")
        d.close()  # stops its threads; the failed delete is recorded, not raised
        assert any("unreachable" in e for e in d.errors)
        assert isinstance(discovery.StoreError("x"), pact.MetadataError)
        assert counters(a) == before  # nothing left behind by the failed cases
    finally:
        a.close()


def test_store_urls():
    assert isinstance(discovery.open_store("etcd://127.0.0.1:2379"), discovery.EtcdStore)
    assert isinstance(discovery.open_store("http://127.0.0.1:7070"), discovery.HttpStore)
    with pytest.raises(pact.MetadataError, match="expected etcd://"):
        discovery.open_store("redis://x")
    with pytest.raises(pact.MetadataError, match="must be > 0"):
        discovery.Directory(None, None, ttl=0)


def test_malformed_entries_in_the_store_are_refused(embedded):
    (a,) = engines("reader")
    try:
        embedded.put("/pact/engines/broken", b"not json", 0)
        before = counters(a)
        d = discovery.Directory(a, embedded, ttl=TTL)
        with pytest.raises(pact.MetadataError, match="not a pact metadata blob"):
            d.connect("broken", timeout=1)
        with pytest.raises(pact.NotFound, match="no engine named 'nobody'"):
            d.connect("nobody", timeout=0.1)
        d.close()
        assert counters(a) == before
    finally:
        a.close()


def test_pact_meta_serves_the_embedded_store():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pact.discovery", "--port", str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == f"pact-meta: serving http://127.0.0.1:{port}"
        store = discovery.open_store(f"http://127.0.0.1:{port}")
        store.put("k", b"v", 0)
        assert store.get("k")[0] == b"v"
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
